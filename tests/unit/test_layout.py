"""The repository stands alone, in layers: what a clone alone must satisfy."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "actors", "deploy", "tools")


def _tracked(*suffixes: str) -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith(suffixes) and (ROOT / n).is_file()]


def test_no_file_names_a_path_outside_the_repository():
    outside = re.compile(r"\.\./shared|/work/shared|/work/main|\bshared/corpus")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _tracked(".py", ".sh", ".toml", ".md", ".txt",
                                                             ".js", ".html", ".cfg", "run")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if outside.search(line) and p.name != "test_layout.py"]
    assert found == []


def test_code_imports_the_installed_names_only():
    # `import tools` would load the folder a second time under another name (two copies of
    # every class) and clash with other installed packages: always `voxweft.<package>`.
    bare = re.compile(rf"^\s*(from|import)\s+({'|'.join(PACKAGES)})(\.|\s|$)", re.M)
    found = [str(p.relative_to(ROOT)) for p in _tracked(".py") if bare.search(p.read_text())]
    assert found == []


def test_the_corpus_the_tests_and_the_bench_use_is_in_the_repository():
    from voxweft.tools.bench import DEFAULT_CORPUS

    assert DEFAULT_CORPUS.is_relative_to(ROOT)
    clips = sorted(DEFAULT_CORPUS.glob("*.wav"))
    assert len(clips) == 5 and all(c.with_suffix(".txt").is_file() for c in clips)


def test_the_import_contract_holds_and_catches_an_upward_arrow(tmp_path):
    ok = subprocess.run(["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True,
                        text=True, env=_venv_env())
    assert ok.returncode == 0, ok.stdout[-2000:]
    # The same contract on a copy where the wire imports a command must fail.
    copy = tmp_path / "copy"
    copy.mkdir()
    for package in PACKAGES:
        subprocess.run(["cp", "-r", str(ROOT / package), str(copy)], check=True)
    (copy / "protocol" / "upward.py").write_text("import voxweft.tools.cli\n")
    mapping = ",".join(f"voxweft.{p}={copy / p}" for p in PACKAGES)
    broken = subprocess.run(["python", "-c", SHIM, mapping, str(ROOT / "pyproject.toml")],
                            cwd=copy, capture_output=True, text=True, env=_venv_env())
    assert broken.returncode != 0, broken.stdout[-2000:] + broken.stderr[-2000:]
    assert "voxweft.protocol.upward -> voxweft.tools.cli" in broken.stdout


def _venv_env() -> dict:
    import os
    import sys

    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


# Run lint-imports with the voxweft.* names mapped onto the copy's folders.
SHIM = r"""
import importlib.abc, importlib.util, sys
from pathlib import Path
mapping = dict(item.split("=") for item in sys.argv[1].split(","))

class Copy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        for package, folder in mapping.items():
            if name == package or name.startswith(package + "."):
                rest = name[len(package):].lstrip(".").split(".") if name != package else []
                base = Path(folder).joinpath(*rest)
                if base.is_dir():
                    return importlib.util.spec_from_file_location(
                        name, base / "__init__.py", submodule_search_locations=[str(base)])
                return importlib.util.spec_from_file_location(name, str(base) + ".py")
        return None

sys.meta_path.insert(0, Copy())
from importlinter.cli import lint_imports_command
sys.argv = ["lint-imports", "--no-cache", sys.argv[2]]
lint_imports_command()
"""
