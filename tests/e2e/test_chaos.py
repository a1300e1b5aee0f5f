"""Chaos: every actor is killed (-9) twice while a 5-minute recording is interpreted, part of
the time with both cores busy, each kill at a bad moment (while the victim holds work).
Every utterance comes out exactly once, in order, whole.

The kills are spread over the recording: each 0.6-1 times the time left before its last
KILLS_DONE_S seconds over the kills left (15-33 s apart here), so the run never waits after the
last kill for minutes of speech no kill touches (it did: a 10-minute recording, kills 20-40 s
apart, done at ~400 s)."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import time

import pytest
import soundfile as sf

from tests.conftest import ROOT, VOXWEFT
from tests.e2e.whole import ACTORS, actor_pid, build_recording, check_whole, hog
from voxweft.deploy.supervisor import BusWatcher
from voxweft.deploy.topology import load
from voxweft.tools.bench import sentences

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
#: How long a kill waits for its victim to hold work before it kills it anyway.
WORST_WAIT_S = 15.0
#: The last kill comes this long before the recording's end, at the latest (on schedule):
#: the last victim's recovery and the utterances after it are still checked.
KILLS_DONE_S = 45.0


def next_kill_in(left_s: float, kills_left: int, rng: random.Random) -> float:
    """Seconds to the next kill: the kills left spread over the `left_s` seconds left."""
    return max(5.0, rng.uniform(0.6, 1.0) * left_s / kills_left)


def test_every_actor_killed_twice_nothing_lost_nothing_twice(tmp_path):
    # 5.3 minutes, 36 utterances
    placed = build_recording(tmp_path / "talk.wav", utterances=36, seed=7, pause_s=(4.0, 7.0))
    length_s = sf.info(str(tmp_path / "talk.wav")).duration
    out = tmp_path / "out"
    run_root = tmp_path / "runs"   # interpret's supervisord directory goes here (TMPDIR)
    run_root.mkdir()
    env = {**os.environ, "TMPDIR": str(run_root)}
    proc = subprocess.Popen([*VOXWEFT, "interpret", "--input", str(tmp_path / "talk.wav"),
                             "--out", str(out)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rng = random.Random(11)
    victims = list(ACTORS) * 2
    rng.shuffle(victims)
    kills: list[tuple[float, str, bool]] = []   # (when, victim, it held work)
    hogs: list[subprocess.Popen] = []
    t0 = watcher = None
    try:
        while proc.poll() is None and victims:
            if t0 is None:   # wait until the whole pipeline runs
                if all(actor_pid(run_root, a) for a in ACTORS):
                    # the recording starts once the models are loaded: later than this
                    t0 = time.monotonic()
                    kills_by = t0 + length_s - KILLS_DONE_S
                    next_kill = t0 + next_kill_in(kills_by - t0, len(victims) + 1, rng)
                    watcher = BusWatcher(load(next(run_root.glob("*/topology.toml"))))
                time.sleep(0.5)
                continue
            watcher.poll(0.2)
            if not hogs and time.monotonic() - t0 > 120:
                hogs = hog(150)   # both cores busy for 2.5 minutes of the run
            if time.monotonic() < next_kill:
                continue
            # The worst moment: while the victim holds work (utterances it has not seen
            # done, or a model call under way), waited for up to WORST_WAIT_S.
            victim = victims[-1]
            said = watcher.latest.get(victim)
            busy = victim == "capture" or bool(said and said.state != "loading" and
                                               (said.outstanding or said.busy_s))
            if not busy and time.monotonic() < next_kill + WORST_WAIT_S:
                continue
            pid = actor_pid(run_root, victim)
            if not pid:
                continue   # between two processes: supervisord is starting it again
            os.kill(pid, signal.SIGKILL)
            victims.pop()
            kills.append((time.time(), victim, busy))
            print(f"chaos: kill -9 {victim} (pid {pid}, holding work: {busy}) at "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
            watcher.latest.pop(victim, None)   # what the dead process said is gone with it
            if victims:
                now = time.monotonic()
                next_kill = now + next_kill_in(kills_by - now, len(victims), rng)
        stdout, _ = proc.communicate(timeout=1200)
    finally:
        for h in hogs:
            h.kill()
        if proc.poll() is None:
            proc.kill()
        if watcher:
            watcher.close()
    print(stdout[-3000:])
    assert proc.returncode == 0, stdout[-3000:]
    assert not victims and len(kills) == 2 * len(ACTORS), \
        f"the run ended before every actor was killed twice: {kills}"
    holding = [victim for _, victim, busy in kills if busy]
    assert len(holding) >= len(kills) - 2, f"too few kills landed while holding work: {kills}"

    try:
        transcripts = check_whole(out, placed)
    except AssertionError as exc:   # CI shows the message, not the captured output
        raise AssertionError(f"{exc}\nkills (wall time, victim, holding work): {kills}\n"
                             f"interpret said: {stdout[-1500:]}") from None

    # what each kill cost: end of speech -> first audio of the next utterance, vs the median
    rows = json.loads((out / "latency.json").read_text())["utterances"]
    lat = {r["utt"]: r.get("speech_end_to_first_audio_s") for r in rows}
    median = statistics.median(v for v in lat.values() if v is not None)
    print(f"chaos: {len(transcripts)} utterances, {len(kills)} kills, latency p50 "
          f"{median:.2f} s")
    wall = {r["utt"]: r.get("speech_end_ns") for r in rows}
    # The kills that came while a sentence committed in pieces was in flight: after its first
    # piece's speech ended, before its last piece was heard.
    groups = sentences.group((t["utt"], t["media_start_s"], t["media_end_s"], t["text"], "-")
                             for t in transcripts)
    spans = [(wall[g[0]] / 1e9, (wall[g[-1]] / 1e9 + lat[g[-1]])) for g in groups
             if len(g) > 1 and wall.get(g[0]) and wall.get(g[-1]) and lat.get(g[-1])]
    amid = [victim for when, victim, _ in kills if any(a <= when <= b for a, b in spans)]
    print(f"chaos: {sum(len(g) > 1 for g in groups)} sentences in pieces; kills while one was "
          f"in flight: {len(amid)} ({', '.join(amid)})")
    for when, victim, _ in kills:
        after = [u for u, ns in wall.items() if ns and ns / 1e9 >= when - 2]
        nxt = min(after, key=lambda u: wall[u]) if after else None
        cost = (lat[nxt] - median) if nxt and lat.get(nxt) is not None else None
        print(f"chaos: kill {victim}: next utterance {nxt} latency "
              f"{lat.get(nxt)} s ({'+' if cost and cost > 0 else ''}"
              f"{cost if cost is None else round(cost, 2)} s vs p50)")
