"""Hostile peer: while a file is interpreted, garbage goes to every socket the pipeline binds
(10^5 frames: random, truncated, oversized, wrong socket types, plain TCP). No actor
crashes, the file comes out whole, and the actors' counters show the garbage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, VOXWEFT
from tests.e2e.whole import ACTORS, actor_pid, build_recording, check_whole
from voxweft.deploy.supervisor import BusWatcher
from voxweft.deploy.topology import load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_garbage_on_every_bound_socket_crashes_nothing_loses_nothing(tmp_path):
    placed = build_recording(tmp_path / "talk.wav", utterances=10, seed=3, pause_s=(2.0, 5.0))
    out = tmp_path / "out"
    run_root = tmp_path / "runs"
    run_root.mkdir()
    proc = subprocess.Popen([*VOXWEFT, "interpret", "--input", str(tmp_path / "talk.wav"),
                             "--out", str(out)], cwd=ROOT, text=True,
                            env={**os.environ, "TMPDIR": str(run_root)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    attacker, watcher = None, None
    try:
        deadline = time.monotonic() + 240
        while not all(actor_pid(run_root, a) for a in ACTORS):
            assert proc.poll() is None and time.monotonic() < deadline, "pipeline never ran"
            time.sleep(0.5)
        pids = {a: actor_pid(run_root, a) for a in ACTORS}
        topology = load(next(run_root.glob("*/topology.toml")))
        endpoints = [topology.pub_connect(a) for a in ACTORS] + [
            topology.push_connect(), topology.events_connect("_interpret")]
        watcher = BusWatcher(topology)
        attacker = subprocess.Popen([sys.executable, "-m", "tests.hostile", "--frames",
                                     "100000", *endpoints], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE)
        while proc.poll() is None:
            watcher.poll(0.5)
            if time.monotonic() > deadline + 600:
                break
        stdout, _ = proc.communicate(timeout=60)
        sent = json.loads(attacker.communicate(timeout=300)[0].strip().splitlines()[-1])
    finally:
        for p in (proc, attacker):
            if p and p.poll() is None:
                p.kill()
        if watcher:
            watcher.close()
    print(stdout[-2000:])
    assert proc.returncode == 0, stdout[-3000:]
    check_whole(out, placed)
    for actor, pid in pids.items():   # nobody crashed: one start in each log, the same pid
        log = (out / "logs" / f"{actor}.log").read_text()
        assert log.count(f"{actor}: starting (pid") == 1, f"{actor} restarted:\n{log[-2000:]}"
        assert f"starting (pid {pid}," in log
    counters = {a: watcher.latest[a].counters for a in ACTORS}
    totals = {k: sum(c.get(k, 0) for c in counters.values())
              for k in ("peers_accepted", "peers_refused", "peers_gone")}
    print(f"hostile: sent {sent}; actors counted {totals}")
    for actor, c in counters.items():
        print(f"hostile: {actor}: " + ", ".join(f"{k} {c.get(k, 0)}" for k in totals))
    assert sent["frames"] >= 100_000
    assert totals["peers_refused"] > 0 and totals["peers_gone"] > 0
    assert all(counters[a].get("peers_accepted", 0) > 0 for a in ACTORS)
