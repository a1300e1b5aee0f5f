"""tts killed (-9) in the middle of an utterance: the player has its first piece, tts dies
making the rest. The new tts speaks only what the player lacks (it hears where the player
is), the player goes on from there, and every utterance is in output.wav once, whole: its
words written once each, in order (its journal), and output.wav, transcribed, says the
translations (docs/guarantees.md, issue 37)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.whole import (
    actor_pid,
    build_recording,
    check_whole,
    running_topology,
    start_interpret,
)
from voxweft.protocol import bus as wire
from voxweft.protocol.client import BusClient
from voxweft.protocol.messages import SpeechChunk, Translation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
#: Kills at most: each on the first piece of an utterance with more pieces to make.
KILLS = 3


def test_a_tts_killed_mid_utterance_goes_on_where_the_player_is(tmp_path):
    placed = build_recording(tmp_path / "talk.wav", utterances=10, seed=11, pause_s=(3.0, 5.0))
    proc, out, run_root = start_interpret(tmp_path)
    client = None
    kills: list[str] = []
    try:
        topology = running_topology(proc, run_root)
        client = BusClient([topology.pub_connect(a) for a in ("mt", "tts")],
                           [wire.topic(Translation, "mt"), wire.topic(SpeechChunk, "tts")])
        words: dict[str, int] = {}
        last_kill = 0.0
        while proc.poll() is None:
            for msg in client.messages(0.1):
                if isinstance(msg, Translation) and msg.final:
                    words[msg.utt] = len(msg.text.split())
                elif isinstance(msg, SpeechChunk) and not msg.last and msg.index == 0 and \
                        msg.piece_end and msg.word + msg.words < words.get(msg.utt, 0) and \
                        len(kills) < KILLS and time.monotonic() - last_kill > 15:
                    pid = actor_pid(run_root, "tts")   # tts is making the rest now
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                        last_kill = time.monotonic()
                        kills.append(f"{msg.utt} after words 0-{msg.word + msg.words} of "
                                     f"{words[msg.utt]}")
                        print("tts-kill:", kills[-1], flush=True)
        stdout, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if client is not None:
            client.close()
    assert proc.returncode == 0, stdout[-3000:]
    assert kills, "no utterance had a second piece to kill tts before"
    check_whole(out, placed)
    logs = out / "logs"
    resumed = (logs / "tts.log").read_text().count("going on from there")
    switched = (logs / "player.log").read_text().count("going on from word")
    print(f"tts-kill: {len(kills)} kill(s); the new tts went on where the player was "
          f"{resumed} time(s); the player switched synthesis {switched} time(s)")
    # At least one kill caught tts making an utterance the player had begun (a kill may
    # land after tts sent the rest, or before the player took the first piece).
    assert resumed >= 1 and switched >= 1, (kills, resumed, switched)
