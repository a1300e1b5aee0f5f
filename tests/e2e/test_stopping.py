"""Stopping is clean: Ctrl-C, SIGTERM or SIGHUP on `interpret` or `bench` stops what it started,
within seconds, and writes what was interpreted so far, marked partial. (`up --watch`: in
tests/integration/test_supervision.py.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest

from tests.conftest import ROOT, VOXWEFT, corpus_clips, write_session

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def actor_pids(marker: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any(marker in c for c in (p.info["cmdline"] or []))
            and ("actors" in (p.info["cmdline"] or []) or
                 any("supervisord" in c for c in (p.info["cmdline"] or [])))]


@pytest.mark.parametrize(("command", "signum"), [("interpret", signal.SIGTERM),
                                                  ("interpret", signal.SIGHUP),
                                                  ("interpret", signal.SIGINT),
                                                  ("bench", signal.SIGTERM),
                                                  ("bench", signal.SIGINT)])
def test_signal_stops_and_keeps_partial_outputs(tmp_path, command, signum):
    out = tmp_path / "out"
    if command == "interpret":
        session = tmp_path / "talk.wav"
        write_session(session, corpus_clips() * 2, pause_s=1.5)
        args = ["interpret", "--input", str(session), "--out", str(out)]
    else:
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        for clip in corpus_clips():
            shutil.copy(clip, corpus)
            shutil.copy(clip.with_suffix(".txt"), corpus)
        args = ["bench", "--corpus", str(corpus), "--out", str(out), "--pause-s", "1.5",
                "--bus-seconds", "0"]
    run_root = tmp_path / "runs"
    run_root.mkdir()
    proc = subprocess.Popen([*VOXWEFT, *args], cwd=ROOT,
                            env={**os.environ, "TMPDIR": str(run_root)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)   # its own process group, as in a shell
    try:
        deadline = time.monotonic() + 240
        for line in proc.stdout:   # the first translation: the pipeline is working
            if "] pt:" in line or time.monotonic() > deadline:
                break
        assert actor_pids(str(run_root)), "no actor found running"
        # Ctrl-C in a terminal: SIGINT to the whole foreground process group
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        t0 = time.monotonic()
        proc.wait(30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    assert proc.returncode == 128 + signum, stderr
    assert took < 15, f"took {took:.1f} s to stop"
    assert f"stopped by {signal.Signals(signum).name}" in stderr and "partial outputs" in stderr
    time.sleep(1)
    assert actor_pids(str(run_root)) == [], "processes left behind"
    rows = [json.loads(x) for x in (out / "transcript.jsonl").read_text().splitlines()]
    assert 1 <= len(rows) < 10
    latency = json.loads((out / "latency.json").read_text())
    assert latency["partial"] is True and "SIG" in latency["stopped"]
    assert (out / "output.wav").exists() and (out / "logs" / "asr.log").exists()
