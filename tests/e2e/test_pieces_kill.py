"""A sentence interpreted in pieces survives a kill between its pieces: mt killed just after it
said a piece the speech goes on from (a word held back for the next piece), then asr killed
between two pieces. Every utterance comes out once, in order, whole, and every translation
is the one an mt that was never killed makes of the same transcripts: no held word lost or
said twice (actors.phrases, restarts)."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.e2e.whole import (
    actor_pid,
    build_recording,
    heard_whole,
    played_whole,
    running_topology,
    spoken_as_translated,
    start_interpret,
)
from tests.unit.helpers import run_actor
from voxweft.deploy.topology import load
from voxweft.protocol import bus as wire
from voxweft.protocol.client import BusClient
from voxweft.protocol.messages import Status, Transcript, Translation, is_draft

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


#: mt's log line for a final translation: "mt: UTT 'source' -> 'said'"
_SAID = re.compile(r"INFO mt: (\S+) ('.*'|\".*\") -> ('.*'|\".*\")$")


def _said(log: Path) -> dict[str, tuple[str, str]]:
    """utt -> (source, said) of each final translation in mt's log, the first one of each.

    The log, not translation.jsonl: the first translation of each piece (one sent again by a
    restarted mt may differ; interpret keeps the last).
    """
    said: dict[str, tuple[str, str]] = {}
    for line in log.read_text().splitlines():
        m = _SAID.search(line)
        if m:
            said.setdefault(m[1], (ast.literal_eval(m[2]), ast.literal_eval(m[3])))
    return said


def _steady(rows: list[dict], said: dict[str, tuple[str, str]]) -> list[str]:
    """What an mt that is never killed says for the source texts mt had, in order.

    (A restarted asr may transcribe a piece again; mt takes the first it got.)
    """
    from voxweft.actors.mt import MtActor

    topo = load(None)
    actor = MtActor(topo, topo.actors["mt"])
    actor.load()
    msgs = [Transcript(utt=t["utt"], src_lang=t["lang"], text=said[t["utt"]][0],
                       media_start_s=t["media_start_s"], media_end_s=t["media_end_s"],
                       goes_on=t["goes_on"]) for t in rows]
    return [m.text for m in run_actor(actor, msgs, src="asr", loaded=True)]


def test_a_kill_between_the_pieces_of_a_sentence_loses_no_held_word(tmp_path):
    placed = build_recording(tmp_path / "talk.wav", utterances=20, seed=5, pause_s=(0.3, 0.8))
    proc, out, run_root = start_interpret(tmp_path)
    client = None
    kills: list[str] = []
    replayed = 0
    try:
        topology = running_topology(proc, run_root)
        client = BusClient([topology.pub_connect(a) for a in ("asr", "mt")],
                           wire.watched("interpret"))
        going_on: set[str] = set()    # pieces the speech goes on from, as asr sent them
        plan = ["mt", "asr"]
        while proc.poll() is None:
            for msg in client.messages(0.2):
                if isinstance(msg, Status) and msg.src == "mt":
                    replayed = max(replayed, msg.counters.get("contexts_replayed", 0))
                if is_draft(msg) or not plan:
                    continue
                if isinstance(msg, Transcript) and msg.goes_on:
                    # asr: killed once it has sent a piece the next one goes on from
                    hit = plan[0] == "asr"
                    if msg.context:
                        going_on.add(msg.utt)
                elif isinstance(msg, Translation) and msg.utt in going_on:
                    # mt: once it has said a piece that goes on from another and is gone on
                    # from (sent again to the new mt, it has only asr's context to go by)
                    hit = plan[0] == "mt"
                else:
                    continue
                pid = actor_pid(run_root, plan[0]) if hit else None
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    kills.append(f"{plan.pop(0)} after {msg.utt}")
                    print("pieces-kill:", kills[-1], flush=True)
        stdout, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if client:
            client.close()
    assert proc.returncode == 0, stdout[-3000:]
    assert len(kills) == 2, f"the speech went on from too few pieces to kill between: {kills}"

    rows = heard_whole(out, placed)
    played_whole(out, [r["utt"] for r in rows])
    spoken_as_translated(out)   # output.wav says each translation on its own span (issue 48)
    said = _said(out / "logs" / "mt.log")
    # interpret's record has every piece, the restarted mt's first ones too (it hears every
    # actor from its first message: deploy.session)
    translated = [json.loads(x)["utt"] for x in
                  (out / "translation.jsonl").read_text().splitlines()]
    assert translated == [r["utt"] for r in rows]
    assert sum(r["goes_on"] for r in rows) >= 3
    assert [said[r["utt"]][1] for r in rows] == _steady(rows, said)
    # The restarted mt knew what its first piece went on from asr's context alone.
    print(f"pieces-kill: {len(rows)} pieces, {sum(r['goes_on'] for r in rows)} went "
          f"on; the restarted mt translated {replayed} context(s) again")
    assert replayed >= 1
