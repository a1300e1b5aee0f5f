"""The suite's safety net: a supervisord a test left running is found and stopped, with what
it runs; one outside the tests' run directories (a user's own) is never touched."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.conftest import _tests_supervisords, run_roots, stop_supervisords


def _supervisord(folder) -> subprocess.Popen:
    """A real supervisord in `folder`, running one program (a sleeper), in the foreground."""
    conf = folder / "supervisord.conf"
    conf.write_text(f"""[supervisord]
nodaemon=true
logfile={folder}/supervisord.log
pidfile={folder}/supervisord.pid
[unix_http_server]
file={folder}/supervisor.sock
[program:sleeper]
command={sys.executable} -c "import time; time.sleep(600)"
startsecs=0
""")
    return subprocess.Popen([sys.executable, "-m", "supervisor.supervisord", "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _sleeper(sup: subprocess.Popen) -> psutil.Process:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = psutil.Process(sup.pid).children()
        if children:
            return children[0]
        time.sleep(0.1)
    raise AssertionError("supervisord never started its program")


def test_a_supervisord_left_in_a_tests_run_directory_is_stopped_with_its_programs(
        short_tmp, tmp_path_factory):
    outside = Path(tempfile.mkdtemp(prefix="vwuser-"))   # a user's own run, as it were
    ours = _supervisord(short_tmp)
    theirs = _supervisord(outside)
    try:
        ours_child, theirs_child = _sleeper(ours), _sleeper(theirs)
        found = _tests_supervisords(run_roots(tmp_path_factory))
        assert ours.pid in found and theirs.pid not in found
        stop_supervisords(found)
        assert ours.wait(30) is not None and not ours_child.is_running()
        assert theirs.poll() is None and theirs_child.is_running()   # never touched
    finally:
        for proc in (ours, theirs):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
        shutil.rmtree(outside, ignore_errors=True)
