"""Hostile peer: while a file is interpreted, garbage goes to every socket the pipeline binds
(10^5 frames: random, truncated, oversized, wrong socket types, plain TCP). No actor
crashes, the file comes out whole, and the actors' counters show the garbage."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.e2e.whole import ACTORS, actor_pid, build_recording, check_whole, start_interpret
from voxweft.deploy.supervisor import BusWatcher
from voxweft.deploy.topology import load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_garbage_on_every_bound_socket_crashes_nothing_loses_nothing(tmp_path):
    placed = build_recording(tmp_path / "talk.wav", utterances=10, seed=3, pause_s=(2.0, 5.0))
    proc, out, run_root = start_interpret(tmp_path)
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
        # What the pipeline's own peers made, once every model is loaded: the file is read
        # from then on, so the attack overlaps the speech (started during a slow load, the
        # whole attack was over before the first word on a 2-core machine).
        while set(watcher.latest) != set(ACTORS) or \
                any(s.state != "ready" for s in watcher.latest.values()):
            assert proc.poll() is None and time.monotonic() < deadline, "pipeline never ready"
            watcher.poll(0.5)
        before = {a: dict(watcher.latest[a].counters) for a in ACTORS}
        attack = [time.time_ns(), 0]
        attacker = subprocess.Popen([sys.executable, "-m", "tests.hostile", "--frames",
                                     "100000", *endpoints], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE)
        while proc.poll() is None:
            watcher.poll(0.5)
            if not attack[1] and attacker.poll() is not None:
                attack[1] = time.time_ns()
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
    # Each actor's own sockets saw the attack: per actor, beyond what its peers made before.
    kinds = ("peers_accepted", "peers_refused", "peers_gone")
    grew = {a: {k: watcher.latest[a].counters.get(k, 0) - before[a].get(k, 0) for k in kinds}
            for a in ACTORS}
    print(f"hostile: sent {sent}")
    for actor, c in grew.items():
        print(f"hostile: {actor}: " + ", ".join(f"{k} +{v}" for k, v in c.items()))
    rounds = sent["connections"] // (6 * len(endpoints))
    assert rounds >= 1
    for actor, c in grew.items():
        # per round, each endpoint had 6 connections, 2 of a type it refuses
        assert c["peers_accepted"] >= rounds and c["peers_refused"] >= 1 \
            and c["peers_gone"] >= rounds, (actor, c, rounds)
    # The attack overlapped the speech: utterances were interpreted while it went on.
    ends = [r["speech_end_ns"] for r in json.loads((out / "latency.json").read_text())
            ["utterances"] if r.get("speech_end_ns")]
    during = [e for e in ends if attack[0] <= e <= (attack[1] or time.time_ns())]
    assert len(during) >= 2, (attack, ends)
