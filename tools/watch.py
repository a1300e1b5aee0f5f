"""`voxweft watch`: the live console view and a rolling transcript file.

One line per utterance, source and translation side by side, read from the bus (subscribe
only, like the tap), and a line whenever an actor goes down or comes back, with why.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from voxweft.actors.echo import describe as echo_words
from voxweft.deploy.events import Board
from voxweft.deploy.topology import Topology
from voxweft.protocol import bus as wire
from voxweft.protocol.client import BusClient
from voxweft.protocol.messages import PlaybackEvent, Status, Supervision, Transcript, Translation
from voxweft.tools.terminal import printable


def side_by_side(source: str, target: str, width: int) -> str:
    """One console line: source | translation, each cut to half the terminal."""
    half = max(20, (width - 3) // 2)

    def fit(text: str) -> str:
        return text if len(text) <= half else text[:half - 1] + "…"

    return f"{fit(source):<{half}} | {fit(target)}"


def watch(topology: Topology, transcript_path: Path, duration_s: float | None = None,
          out=sys.stdout, curve=None) -> int:
    """Print each utterance as it is translated; append it to `transcript_path` (JSONL)."""
    bus = BusClient([topology.pub_connect(a) for a in ("asr", "mt")],
                    [wire.topic(Transcript), wire.topic(Translation)], curve)
    # Live audio dropped at capture (the pipeline fell behind), from its heartbeat.
    bus.listen([topology.pub_connect("capture")], [wire.topic(Status, "capture")])
    dropped_ms = None
    echo_said = ""   # capture's echo state as last printed (said when it changes)
    # Translations not spoken because the listener was too far behind (actors.lag).
    bus.listen([topology.pub_connect("player")], [wire.topic(PlaybackEvent)])
    said: dict[str, str] = {}
    # Which actor is down and why, from every host's supervisord (deploy.events).
    bus.listen([topology.events_connect(h) for h in topology.hosts_in_use()],
               wire.watched("watch", wire.EVENTS))
    board = Board()
    sources: dict[str, Transcript] = {}
    width = shutil.get_terminal_size((120, 20)).columns
    transcript_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"voxweft watch: rolling transcript in {transcript_path}", file=sys.stderr)
    try:
        with open(transcript_path, "a", encoding="utf-8") as rolling:
            for msg in bus.messages(duration_s or None):
                if isinstance(msg, Status):
                    now = msg.counters.get("dropped_ms", 0)
                    if dropped_ms is not None and now > dropped_ms:
                        print(f"voxweft: capture dropped {(now - dropped_ms) / 1000:.1f} s of "
                              f"live audio: the pipeline fell behind ({now / 1000:.1f} s in "
                              "all)", file=out, flush=True)
                    dropped_ms = now
                    line = echo_words(msg.echo)
                    converged = "cancelled" in line
                    if line and converged != ("cancelled" in echo_said):
                        print(f"voxweft: {line}", file=out, flush=True)
                        echo_said = line
                elif isinstance(msg, Supervision):
                    line = board.update(msg)
                    if line:
                        print(f"voxweft: {line}", file=out, flush=True)
                elif isinstance(msg, Transcript) and msg.final:
                    sources[msg.utt] = msg
                elif isinstance(msg, PlaybackEvent):
                    if msg.event == "skipped" and msg.reason:
                        print(printable(f"voxweft: not spoken ({msg.reason}): "
                                        f"{said.get(msg.utt, msg.utt)}"), file=out, flush=True)
                    said.pop(msg.utt, None)
                elif isinstance(msg, Translation) and msg.final:
                    sources.pop(msg.utt, None)
                    said[msg.utt] = msg.text
                    while len(said) > 256:   # a player that is down says nothing
                        said.pop(next(iter(said)))
                    # The file first: a reader who saw the line on screen finds it there.
                    rolling.write(json.dumps({
                        "utt": msg.utt, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "src_lang": msg.src_lang, "source_text": msg.source_text,
                        "tgt_lang": msg.tgt_lang, "text": msg.text,
                        "media_start_s": round(msg.media_start_s, 3),
                        "media_end_s": round(msg.media_end_s, 3)}, ensure_ascii=False) + "\n")
                    rolling.flush()
                    print(side_by_side(printable(msg.source_text), printable(msg.text), width),
                          file=out, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        bus.close()
    return 0
