"""Failure classification: which load failures are restarted, and how a down actor is told."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from voxweft.actors.runtime import EXIT_CONFIG, StartupError, permanent
from voxweft.deploy.events import Board, Owner, describe, supervision
from voxweft.deploy.supervisor import Supervisor, down_for_good, render
from voxweft.deploy.topology import load
from voxweft.protocol.messages import Supervision


@pytest.mark.parametrize("exc", [StartupError("no model"), ValueError("bad key"),
                                 KeyError("lang"), ModuleNotFoundError("ctranslate2"),
                                 FileNotFoundError("model.bin"), PermissionError("out.wav")])
def test_permanent_load_failures_are_not_restarted(exc):
    assert permanent(exc)


@pytest.mark.parametrize("exc", [MemoryError(), OSError("device busy"), RuntimeError("onnx"),
                                 TimeoutError(), ConnectionResetError()])
def test_transient_load_failures_are_retried(exc):
    assert not permanent(exc)


@pytest.mark.parametrize(("state", "status", "gone"), [
    ("FATAL", 0, True), ("EXITED", EXIT_CONFIG, True), ("EXITED", 0, True),
    ("EXITED", -1, False), ("EXITED", 75, False), ("BACKOFF", 0, False),
    ("RUNNING", 0, False), ("STARTING", 0, False)])
def test_down_for_good(state, status, gone):
    assert down_for_good(state, status) is gone


def _msg(state, since, status=0, expected=True, reason=""):
    return Supervision(src="supervisor.m2", actor="tts", host="m2", state=state,
                       exit_status=status, expected=expected, reason=reason, since_ns=since)


def test_board_says_down_and_back_once_each():
    board = Board()
    assert board.update(_msg("RUNNING", 1)) == ""          # first word: nothing changed
    crash = board.update(_msg("EXITED", 2, -1, expected=False))
    assert crash == "tts on m2 crashed (killed by a signal); supervisord restarts it"
    assert board.update(_msg("EXITED", 2, -1, expected=False)) == ""   # said again: silent
    assert board.update(_msg("STARTING", 3)) == ""
    assert board.update(_msg("RUNNING", 4)) == "tts on m2 is running again"
    line = board.update(_msg("EXITED", 5, EXIT_CONFIG, reason="tts: cannot start: no voice"))
    assert "not restarted" in line and line.endswith("tts: cannot start: no voice")
    assert down_for_good(board.latest["tts"].state, board.latest["tts"].exit_status)


def test_describe_backoff_and_fatal():
    assert "retries" in describe(_msg("BACKOFF", 1, reason="x"))
    assert "gave up" in describe(_msg("FATAL", 1, reason="tts: cannot start: out of memory"))


def test_supervision_reason_is_the_error_since_the_last_start(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "tts.log").write_text(
        "2026-12-01 10:00:00,000 INFO tts: starting (pid 1, 2 thread(s), nice 0)\n"
        "2026-12-01 10:00:01,000 ERROR tts: cannot start: old failure\n"
        "2026-12-01 10:00:05,000 INFO tts: starting (pid 2, 2 thread(s), nice 0)\n"
        "2026-12-01 10:00:06,000 INFO tts: ready (engine kokoro) after 1.0 s\n")
    sup = Supervisor(tmp_path)
    info = {"name": "tts", "statename": "STARTING", "exitstatus": 0}
    # a crash (kill -9) logs nothing: the old error must not be blamed
    msg = supervision(sup, info, "m2", state="EXITED", expected=False)
    assert msg.reason == "" and msg.state == "EXITED" and not msg.expected
    # by the time the listener asks, supervisord has started it again and forgotten the
    # status; its log has it
    (tmp_path / "supervisord.log").write_text(
        "2026-12-01 10:00:04,000 WARN exited: tts (exit status 75; not expected)\n"
        "2026-12-01 10:00:05,000 WARN exited: tts (terminated by SIGKILL; not expected)\n")
    assert supervision(sup, info, "m2", state="EXITED", expected=False).exit_status == -1
    assert "killed by a signal" in describe(supervision(sup, info, "m2", "EXITED", False))
    with open(tmp_path / "logs" / "tts.log", "a") as f:
        f.write("2026-12-01 10:00:07,000 ERROR tts: cannot start: MemoryError: (transient; "
                "failed 4 times, exiting for supervisord to restart it)\n")
    msg = supervision(sup, {**info, "statename": "EXITED", "exitstatus": 75}, "m2")
    assert msg.exit_status == 75 and not msg.expected
    assert msg.reason.startswith("tts: cannot start: MemoryError")


def test_render_runs_the_event_listener(tmp_path):
    text = render(load(None), "local", tmp_path)
    assert "[eventlistener:events]" in text and "events=PROCESS_STATE" in text
    assert "-m voxweft.deploy.events" in text and "--host local" in text


def test_the_owner_is_not_taken_for_gone_when_the_wall_clock_steps(monkeypatch):
    # A clock step (a laptop waking, NTP, a VM resumed) moved psutil's start time of the live
    # `interpret` by seconds, and its run was shut down under it (issue 48): the owner is
    # known by the kernel's boot-relative start, which no step moves.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        owner = Owner(child.pid)
        assert not owner.gone()
        real = psutil.Process.create_time
        monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + 7.0)
        monkeypatch.setattr(psutil, "boot_time", lambda: 7.0)
        assert not owner.gone(), "a clock step ended a live run"
        child.kill()
        deadline = time.monotonic() + 5
        while not owner.gone() and time.monotonic() < deadline:   # a zombie is gone
            time.sleep(0.05)
        assert owner.gone()
        child.wait()
        assert owner.gone()   # and so is a pid that is free
    finally:
        child.kill()
        child.wait()


def test_the_watchdog_holds_when_the_events_port_is_taken(tmp_path):
    # Its port taken, the listener used to exit before watching the owner: the run went on,
    # and a killed `interpret` then left everything running (issue 48). Now it says so and
    # still shuts the run down when the owner is gone.
    import socket
    import wave

    from tests.conftest import local_topology

    with wave.open(str(tmp_path / "in.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 1600)
    path = local_topology(tmp_path, tmp_path / "in.wav", tmp_path / "out.wav")
    port = int(load(path).events_bind("_interpret").rsplit(":", 1)[1])
    taken = socket.socket()
    taken.bind(("127.0.0.1", port))
    taken.listen()
    owner = subprocess.Popen(["sleep", "60"])
    log = tmp_path / "events.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "voxweft.deploy.events", "--topology",
                                 str(path), "--host", "_interpret", "--owner", str(owner.pid)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout.readline() == b"READY\n"   # it answers supervisord
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 20
        while "is gone: stopping" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
        taken.close()
        if owner.poll() is None:
            owner.kill()
    said = log.read_text()
    assert "cannot bind" in said and "the run is still watched" in said, said
    assert "is gone: stopping the actors and supervisord" in said, said
