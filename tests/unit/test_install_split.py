"""Issue 38 item 7: tools/install.sh installs what running needs; tools/test.sh, once, what
the tests need (and says so).

Both scripts run against fakes first on PATH (`apt-get`, `sudo`, `id`, `uname`) and a fake
`.venv/bin/python`, `ruff` and `lint-imports` in a copy of the repository's tools: every
call is written to a file, nothing touches the real system.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"
#: Only the tests use these: a user's install must not put them on the system.
TEST_ONLY = ("pulseaudio", "pulseaudio-utils", "libasound2-plugins", "iproute2", "faketime",
             "chromium", "chromium-driver")


def _write(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)


def _apt_packages(script: str) -> set[str]:
    """Every word of the script's `apt-get install` command lines (continuations joined)."""
    text = script.replace("\\\n", " ")
    words: set[str] = set()
    for line in text.splitlines():
        if "apt-get install" in line:
            words |= set(line.split("apt-get install", 1)[1].split())
    return words


def test_install_sh_installs_nothing_only_the_tests_need():
    script = (ROOT / "tools" / "install.sh").read_text(encoding="utf-8")
    packages = _apt_packages(script)
    assert {"espeak-ng", "libportaudio2", "libsndfile1", "python3-venv"} <= packages
    assert not packages & set(TEST_ONLY), packages & set(TEST_ONLY)
    extras = re.findall(r'pip install [^\n]*-e "\.\[([a-z,]+)\]"', script)
    assert extras and all("test" not in e.split(",") for e in extras), extras


@pytest.fixture
def repo(tmp_path):
    """A copy of tools/test.sh and pyproject.toml with fakes for everything it calls."""
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "test.sh", tmp_path / "tools" / "test.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    calls = tmp_path / "calls.log"
    for name in ("python", "ruff", "lint-imports"):
        _write(tmp_path / ".venv" / "bin" / name, f'echo "{name} $*" >> "{calls}"\n')
    bin_dir = tmp_path / "bin"
    for name in ("apt-get", "sudo"):
        _write(bin_dir / name, f'echo "{name} $*" >> "{calls}"\n'
               + ('exec "$@"\n' if name == "sudo" else ""))
    _write(bin_dir / "uname", 'echo Linux\n')
    return tmp_path


def _test_sh(repo: Path, uid: int = 0) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    _write(repo / "bin" / "id", f"echo {uid}\n")
    calls = repo / "calls.log"
    calls.unlink(missing_ok=True)
    env = dict(os.environ, PATH=f"{repo / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([BASH, str(repo / "tools" / "test.sh"), "-m", "not slow"], env=env,
                            capture_output=True, text=True, timeout=30, check=False)
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_the_test_command_installs_what_the_tests_need_once_and_says_so(repo):
    result, calls = _test_sh(repo)
    assert result.returncode == 0, result.stderr
    assert "test: installing what the tests need (once" in result.stdout
    installs = [c for c in calls if c.startswith("apt-get install")]
    assert len(installs) == 1 and set(TEST_ONLY) <= set(installs[0].split())
    assert 'python -m pip install -q --no-warn-conflicts -e .[test]' in calls
    assert calls[-1] == "python -m pytest -m not slow"   # then the tests, as they were asked
    assert "ruff check actors protocol deploy tools tests" in calls

    again, calls = _test_sh(repo)   # installed: nothing again, nothing said
    assert again.returncode == 0 and "installing" not in again.stdout
    assert not [c for c in calls if "install" in c], calls
    assert calls[-1] == "python -m pytest -m not slow"

    pyproject = repo / "pyproject.toml"   # the test extra may have changed: install again
    pyproject.write_text(pyproject.read_text() + "\n# changed\n")
    third, calls = _test_sh(repo)
    assert "installing what the tests need" in third.stdout
    assert 'python -m pip install -q --no-warn-conflicts -e .[test]' in calls


def test_not_root_the_system_packages_go_through_sudo(repo):
    result, calls = _test_sh(repo, uid=1000)
    assert result.returncode == 0, result.stderr
    assert any(c.startswith("sudo apt-get install") for c in calls), calls


def test_without_a_venv_it_says_to_install_first(repo):
    shutil.rmtree(repo / ".venv")
    result, calls = _test_sh(repo)
    assert result.returncode == 1 and calls == []
    assert result.stderr.strip() == "test: no .venv here: run tools/install.sh first"
