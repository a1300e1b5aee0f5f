"""tools/install.sh on macOS: the platform checks that run before anything is installed.

mlx==0.32.4 and torch==2.13.0 have macOS 14+ arm64 wheels only, so the script refuses, with
one line on stderr, an Intel Mac, a shell under Rosetta and macOS 13 or older, before brew.

The script runs with fake `uname`, `sw_vers`, `sysctl`, `brew`, `apt-get`, `sudo` and
`python3*` first on PATH: the fakes that would install record their call into a file and fail,
so nothing here can touch the real system, and the accepted case stops at the preflight
(VOXWEFT_INSTALL_PREFLIGHT_ONLY=1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "install.sh"
BASH = shutil.which("bash") or "/bin/bash"

# Fakes that must never run when the script refuses (or stops at the preflight).
_INSTALLERS = ("brew", "apt-get", "sudo", "python3", "python3.11", "pip", "pip3")


def _write(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)


def _run(tmp_path: Path, *, system: str = "Darwin", arch: str = "arm64",
         translated: str | None = "0", version: str | None = "14.5",
         preflight_only: bool = False,
         free_kb: int | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run tools/install.sh on a faked machine; (the result, the file installers log into)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    _write(bin_dir / "uname",
           f'case "$1" in -s) echo {system} ;; -m) echo {arch} ;; *) echo {system} ;; esac\n')
    # translated None: the key does not exist (sysctl fails), as on older Intel macOS.
    _write(bin_dir / "sysctl",
           'if [ "$1" = -n ] && [ "$2" = sysctl.proc_translated ]; then\n'
           + (f"  echo {translated}\n" if translated is not None else "  exit 1\n")
           + "fi\nexit 1\n")
    _write(bin_dir / "sw_vers",
           f"echo '{version}'\n" if version is not None else "exit 1\n")
    if free_kb is not None:   # a disk this full (df -Pk's second line, 4th field)
        _write(bin_dir / "df", "echo 'Filesystem 1024-blocks Used Available Capacity "
               f"Mounted'\necho '/dev/x 100000000 99000000 {free_kb} 99% /'\n")
    for name in _INSTALLERS:
        _write(bin_dir / name, f'echo "{name} $*" >> "{calls}"\nexit 1\n')
    env = {k: v for k, v in os.environ.items()
           if k not in ("VOXWEFT_INSTALL_PREFLIGHT_ONLY", "PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHON"] = str(bin_dir / "python3.11")   # never the real interpreter
    if preflight_only:
        env["VOXWEFT_INSTALL_PREFLIGHT_ONLY"] = "1"
    result = subprocess.run([BASH, str(SCRIPT), "--no-demo"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=30, check=False)
    return result, calls


def _assert_refused(result: subprocess.CompletedProcess[str], calls: Path) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert not calls.exists(), f"installed something: {calls.read_text()}"
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("install: ")
    return lines[0]


@pytest.mark.parametrize("translated", ["0", None])
def test_intel_mac_refused(tmp_path, translated):
    # Not under VOXWEFT_INSTALL_PREFLIGHT_ONLY: the real install path must stop before brew.
    line = _assert_refused(*_run(tmp_path, arch="x86_64", translated=translated))
    assert "Apple Silicon" in line and "M1" in line
    assert "Rosetta" not in line


def test_rosetta_shell_refused(tmp_path):
    line = _assert_refused(*_run(tmp_path, arch="x86_64", translated="1"))
    assert "Rosetta" in line
    assert "arch -arm64" in line


def test_arch_checked_before_version(tmp_path):
    line = _assert_refused(*_run(tmp_path, arch="x86_64", translated="1", version="13.6"))
    assert "Rosetta" in line


@pytest.mark.parametrize("version", ["13.6", "13.6.1", "12.7.4"])
def test_old_macos_refused(tmp_path, version):
    line = _assert_refused(*_run(tmp_path, version=version))
    assert line.startswith(f"install: macOS {version}: ")
    assert "macOS 14 (Sonoma)" in line
    assert "Software Update" in line


@pytest.mark.parametrize("version", ["", "unknown", None])
def test_unreadable_macos_version_refused(tmp_path, version):
    line = _assert_refused(*_run(tmp_path, version=version))
    assert "macOS 14" in line


@pytest.mark.parametrize("version", ["14.5", "15.1", "14", "26.0"])
def test_supported_mac_passes_preflight(tmp_path, version):
    result, calls = _run(tmp_path, version=version, preflight_only=True)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stderr == ""
    assert "preflight passed" in result.stdout
    assert not calls.exists(), f"installed something: {calls.read_text()}"


def test_supported_mac_goes_on_to_brew_without_preflight_only(tmp_path):
    # The fake brew fails, so the script stops right there: proves the checks let it through.
    result, calls = _run(tmp_path, version="14.5")
    assert result.returncode != 0
    assert calls.read_text().splitlines() == ["brew install python@3.11 portaudio espeak-ng "
                                              "libsndfile speexdsp"]


def test_linux_preflight_only_installs_nothing(tmp_path):
    result, calls = _run(tmp_path, system="Linux", arch="x86_64", version=None,
                         preflight_only=True)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert not calls.exists(), f"installed something: {calls.read_text()}"


def test_darwin_brew_line_has_no_apertium():
    lines = [line.strip() for line in SCRIPT.read_text(encoding="utf-8").splitlines()]
    brew = [line for line in lines if line.startswith("brew install")]
    assert len(brew) == 1, brew
    packages = brew[0].split()[2:]
    assert "apertium" not in " ".join(packages)
    for needed in ("espeak-ng", "portaudio", "libsndfile", "python@3.11"):
        assert needed in packages


@pytest.mark.parametrize("system", ["Darwin", "Linux"])
def test_a_disk_without_room_for_the_virtualenv_is_refused_before_anything(tmp_path, system):
    """Issue 38: not 2 GB into pip's downloads, but before brew or apt, in one line."""
    line = _assert_refused(*_run(tmp_path, system=system, free_kb=200 * 1024))
    assert "200 MB free" in line and "GB there (the virtualenv)" in line
    (tmp_path / "roomy").mkdir()
    ok, calls = _run(tmp_path / "roomy", system=system, free_kb=50 * 1024 * 1024,
                     preflight_only=True)
    assert ok.returncode == 0 and not calls.exists(), (ok.stdout, ok.stderr)


def _python_run(tmp_path: Path, python_arch: str, venv_arch: str | None,
                system: str = "Darwin") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """install.sh, copied beside a fake `.venv` (`venv_arch`; None: none), on a machine whose
    brew and apt succeed and whose Python runs as `python_arch` ("" for one that fails).

    The fake Pythons answer the version and architecture questions and write every other
    call (a venv made, pip) to the log and fail.
    """
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "tools" / "install.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"

    def python(path: Path, arch: str) -> None:
        answer = (f'  *platform.machine*) echo {arch}; exit 0 ;;\n' if arch else
                  '  *platform.machine*) exit 1 ;;\n')
        _write(path, 'case "$*" in\n' + answer
               + '  *version_info*) exit 0 ;;\n'
               f'esac\necho "{path.name} $*" >> "{calls}"\nexit 1\n')

    _write(bin_dir / "uname",
           f'case "$1" in -s) echo {system} ;; -m) echo arm64 ;; *) echo {system} ;; esac\n')
    _write(bin_dir / "sysctl", "echo 0\n")
    _write(bin_dir / "sw_vers", "echo 14.5\n")
    for name in ("brew", "apt-get", "sudo"):   # the system packages: installed (logged)
        _write(bin_dir / name, f'echo "{name} $*" >> "{calls}"\n')
    python(bin_dir / "python3.11", python_arch)
    if venv_arch is not None:
        (repo / ".venv" / "bin").mkdir(parents=True)
        python(repo / ".venv" / "bin" / "python", venv_arch)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VOXWEFT_INSTALL_PREFLIGHT_ONLY", "PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHON"] = str(bin_dir / "python3.11")
    result = subprocess.run([BASH, str(repo / "tools" / "install.sh"), "--no-demo"], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=30,
                            check=False)
    return result, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("arch", ["x86_64", ""])
def test_an_intel_or_broken_python_on_a_mac_is_refused_before_the_venv(tmp_path, arch):
    """Issue 38: the Python that will run voxweft, not the shell, must be arm64."""
    result, calls = _python_run(tmp_path, arch, None)
    assert result.returncode == 1
    line, = result.stderr.splitlines()
    assert line.startswith("install: ") and "not arm64" in line and "/opt/homebrew" in line
    assert (f"runs as {arch}," if arch else "does not start") in line
    assert not [c for c in calls if "venv" in c or "pip" in c], calls


@pytest.mark.parametrize("system", ["Darwin", "Linux"])
def test_a_venv_made_by_a_python_of_another_architecture_is_refused(tmp_path, system):
    want = "arm64" if system == "Darwin" else "x86_64"
    other = "x86_64" if system == "Darwin" else "aarch64"
    result, calls = _python_run(tmp_path, want, other, system)
    assert result.returncode == 1
    line, = result.stderr.splitlines()
    assert f"existing .venv's Python runs as {other}" in line and "rm -rf .venv" in line
    assert not [c for c in calls if "pip" in c], calls
    (tmp_path / "same").mkdir()   # the same architecture: the install goes on to pip
    result, calls = _python_run(tmp_path / "same", want, want, system)
    assert any(c.startswith("python -m pip install") for c in calls), (calls, result.stderr)
