"""The tap sees every PUB message; a recording replays into a live actor."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.conftest import ROOT, VOXWEFT
from tests.integration.conftest import FakeUpstream, start_actor
from voxweft.deploy.topology import load
from voxweft.protocol.messages import Status, Transcript, Translation

pytestmark = pytest.mark.timeout(300)


def test_tap_records_and_replay_drives_a_live_actor(topology_path, short_tmp):
    topology = load(topology_path)
    mt = start_actor(topology_path, "mt")
    bus = FakeUpstream(topology, "asr", "mt")
    # On a busy machine loading takes a while: the tap's 12 s start once mt is ready.
    assert bus.receive(Status, 120, lambda s: s.state == "ready"), "mt never ready"
    record = short_tmp / "bus.vwrec"
    tap = subprocess.Popen([*VOXWEFT, "tap", "--topology", str(topology_path), "--json",
                            "--record", str(record), "--duration", "12"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # and what we send goes out once the tap listens (it starts slowly on a busy machine)
        assert "listening on" in tap.stderr.readline()
        time.sleep(1.0)   # its subscriptions reach the publishers
        deadline = time.monotonic() + 10
        got = None
        while time.monotonic() < deadline and got is None:
            bus.send(Transcript(utt="t1", src_lang="en", text="The book is on the table."))
            got = bus.receive(Translation, 1.0)
        assert got is not None
        out, err = tap.communicate(timeout=30)
        rows = [json.loads(line) for line in out.splitlines()]
        topics = {r["topic"] for r in rows}
        assert {"transcript.asr", "translation.mt", "status.mt"} <= topics, topics
        tr = next(r for r in rows if r["topic"] == "translation.mt")
        assert tr["utt"] == "t1" and "livro" in tr["text"].lower()
        assert all(r["seq"] >= 1 and "src" in r for r in rows)
        assert record.stat().st_size > 0
    finally:
        bus.close()   # frees asr's endpoint for the replay

    listener = FakeUpstream(topology, "segmenter", "mt")   # any free upstream; we only listen
    try:
        time.sleep(0.5)
        replay = subprocess.run([*VOXWEFT, "replay", str(record), "--topology",
                                 str(topology_path), "--topic", "transcript", "--fast"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert replay.returncode == 0, replay.stderr
        assert "from asr" in replay.stderr
        again = listener.receive(Translation, 10, lambda m: m.utt.startswith("t1~r"))
        assert again is not None and "livro" in again.text.lower()
    finally:
        listener.close()
        mt.terminate()
        mt.wait(10)


def test_watch_prints_source_and_translation_and_keeps_a_rolling_file(topology_path, short_tmp):
    import io
    import threading

    from voxweft.tools.watch import watch

    topology = load(topology_path)
    mt = start_actor(topology_path, "mt")
    bus = FakeUpstream(topology, "asr", "mt")
    assert bus.receive(Status, 120, lambda s: s.state == "ready"), "mt never ready"
    rolling = short_tmp / "live.jsonl"

    class Screen(io.StringIO):
        """The console; notes how many lines the rolling file had as each line was shown
        (a reader who saw a translation on screen finds it in the file: CI read it empty)."""

        def __init__(self) -> None:
            super().__init__()
            self.filed: list[int] = []

        def write(self, text: str) -> int:
            if "| " in text:
                self.filed.append(len(rolling.read_text().splitlines())
                                  if rolling.exists() else 0)
            return super().write(text)

    screen = Screen()
    viewer = threading.Thread(target=watch, args=(topology, rolling, 30.0, screen))
    viewer.start()

    def shown() -> bool:
        return any(line.startswith("Good morning.") and "| Bom dia" in line
                   for line in screen.getvalue().splitlines())

    try:
        # A new utterance each second until watch shows one: on a busy machine its
        # subscription may join after the first translation went by (a slow joiner).
        got, n = None, 0
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not shown():
            n += 1
            bus.send(Transcript(utt=f"w{n}", src_lang="en", text="Good morning."))
            got = bus.receive(Translation, 1.0) or got
        assert got is not None, "mt translated nothing"
        assert shown(), screen.getvalue()
        assert screen.filed and all(n >= i + 1 for i, n in enumerate(screen.filed)), \
            screen.filed
        rows = [json.loads(line) for line in rolling.read_text().splitlines()]
        assert rows and rows[0]["source_text"] == "Good morning." and rows[0]["tgt_lang"] == "pt"
    finally:
        viewer.join(35)
        bus.close()
        mt.terminate()
        mt.wait(10)
