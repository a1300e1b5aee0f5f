"""An actor whose supervisord is killed stops by itself (actors.runtime.watch_parent).

Real processes: a parent (standing in for supervisord) starts a child that runs the watch as
an actor does (SIGTERM blocked, taken by sigwait), then the parent is killed with SIGKILL,
which leaves it no chance to stop its children. The control child, without the watch, is
still running afterwards: what every actor did before (issue 48).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

CHILD = textwrap.dedent("""
    import signal, sys, threading
    from voxweft.actors.runtime import watch_parent
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    if sys.argv[1] == "watch":
        threading.Thread(target=watch_parent, args=(threading.Event(), "child", 0.05),
                         daemon=True).start()
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM})
    open(sys.argv[2], "w").write("stopped")
""")

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
    print(child.pid, flush=True)
    time.sleep(120)
""")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _orphan(mode: str, flag) -> tuple[int, float]:
    """Start parent and child, SIGKILL the parent; the child's pid and the kill's time."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, mode, str(flag)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pid = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "ready"
    finally:
        parent.kill()
        parent.wait(5)
        parent.stdout.close()
    return pid, time.monotonic()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["watch", "control"])
def test_a_child_whose_parent_is_killed_stops_by_itself(tmp_path, mode):
    flag = tmp_path / "stopped"
    pid, killed = _orphan(mode, flag)
    try:
        while _running(pid) and time.monotonic() - killed < 5:
            time.sleep(0.05)
        if mode == "watch":
            assert not _running(pid), "the orphan went on running"
            assert flag.read_text() == "stopped"   # by its own SIGTERM, the graceful path
        else:   # without the watch an orphan runs on: the test above can fail
            assert _running(pid) and not flag.exists()
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
