"""The suite itself, stopped by SIGTERM (`timeout`, a CI runner): the running test's fixtures
are torn down, so what it started does not outlive it (a test's `up` had held the default
ports for the next run)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.conftest import ROOT

TEST = '''
import pathlib, time, pytest

@pytest.fixture
def started():
    yield
    pathlib.Path(__file__).with_name("torn-down").write_text("yes")

def test_long(started):
    pathlib.Path(__file__).with_name("running").write_text("yes")
    time.sleep(60)
'''


def test_sigterm_to_the_suite_tears_the_running_test_down(tmp_path):
    (tmp_path / "test_long.py").write_text(TEST)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "tests.conftest", "--rootdir", str(tmp_path),
                             str(tmp_path / "test_long.py")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "running").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "torn-down").exists(), out
    assert proc.returncode != 0 and "SIGTERM" in out, out
