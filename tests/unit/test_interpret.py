"""What `voxweft interpret` gathers from the bus and says at the end (tools.interpret)."""

from __future__ import annotations

import json
from pathlib import Path

from voxweft.protocol.messages import PlaybackEvent, Transcript, Translation, VadEvent
from voxweft.tools.interpret import Collector, summary_line

S = 10**9
WHY = "not the speaker: 12 dB under their level"


def _utterance(c: Collector, utt: str, start: float, end: float, spoken: bool) -> None:
    """An utterance with speech from `start` to `end` (media s), its translation's fate."""
    trace = (("speech_start", 1 * S, start), ("speech_end", 2 * S, end),
             ("segment", 3 * S, end + 0.3), ("play.start", 5 * S, None))
    c.add(VadEvent(utt=utt, event="end", media_s=end))
    c.add(Transcript(utt=utt, text="words said", media_start_s=start - 0.2,
                     media_end_s=end + 0.3, trace=trace))
    c.add(Translation(utt=utt, text="palavras", media_start_s=start - 0.2,
                      media_end_s=end + 0.3, trace=trace))
    if spoken:
        c.add(PlaybackEvent(utt=utt, event="started", trace=trace))
        c.add(PlaybackEvent(utt=utt, event="finished", complete=True, trace=trace))
    else:
        c.add(PlaybackEvent(utt=utt, event="skipped", reason="9.0 s behind the speaker",
                            trace=trace))


def test_the_last_line_says_how_much_of_the_speech_heard_was_spoken_and_what_was_ignored(
        tmp_path: Path):
    c = Collector()
    _utterance(c, "u1", 1.0, 5.0, spoken=True)       # 4 s spoken
    _utterance(c, "u2", 7.0, 9.0, spoken=False)      # 2 s too late
    rejected = VadEvent(event="rejected", media_s=10.0, end_s=14.0, reason=WHY, seq=3)
    c.add(rejected)
    c.add(VadEvent(event="rejected", media_s=10.0, end_s=14.0, reason=WHY, seq=9, epoch=2))
    report = c.write(tmp_path, False, "en", "pt")
    line = summary_line(c, report, tmp_path)
    # heard: 4 + 2 + 4 (ignored, once though said twice) = 10 s; spoken 4 s
    assert "2 utterance(s) (1 not spoken: too late); spoken 40 % of the speech heard " \
           "(4.0 s ignored: not the speaker);" in line, line
    rows = [json.loads(x) for x in (tmp_path / "ignored.jsonl").read_text().splitlines()]
    assert rows == [{"media_start_s": 10.0, "media_end_s": 14.0, "length_s": 4.0,
                     "reason": WHY}]


def test_nothing_ignored_and_nothing_interpreted_are_said_so(tmp_path: Path):
    c = Collector()
    _utterance(c, "u1", 1.0, 5.0, spoken=True)
    line = summary_line(c, c.write(tmp_path, True, "en", "pt"), tmp_path)
    assert "spoken 100 % of the speech heard (nothing ignored);" in line, line
    assert (tmp_path / "ignored.jsonl").read_text() == ""
    only_a_talker = Collector()
    only_a_talker.add(VadEvent(event="rejected", media_s=1.0, end_s=2.5, reason=WHY))
    line = summary_line(only_a_talker, only_a_talker.write(tmp_path, True, "en", "pt"),
                        tmp_path)
    assert line.startswith("voxweft: no speech interpreted (1.5 s ignored: not the speaker)")
    empty = Collector()
    assert "no speech found in the input" in summary_line(
        empty, empty.write(tmp_path, True, "en", "pt"), tmp_path)


def test_every_output_tells_what_the_file_holds(tmp_path: Path):
    """The player's events can be missed (it was killed between writing an utterance and
    saying so, or interpret's subscription was reconnecting): output.wav's journal says what
    the file holds, and translation.jsonl, latency.json and the share follow it."""
    from voxweft.actors.sinks import WavSink

    c = Collector()
    _utterance(c, "u1", 1.0, 5.0, spoken=True)
    _utterance(c, "u2", 7.0, 9.0, spoken=True)
    del c.started["u2"], c.ended["u2"]     # the player's events for u2 never reached us
    _utterance(c, "u3", 10.0, 12.0, spoken=True)   # said finished whole, but in the file:
    sink = WavSink(str(tmp_path / "output.wav"), session="s")
    for utt, complete, played in (("u1", True, 4.0), ("u2", True, 2.0), ("u3", False, 0.5)):
        sink.finished(utt, complete, played)
    report = c.write(tmp_path, False, "en", "pt")
    rows = {r["utt"]: r for r in map(json.loads, (tmp_path / "translation.jsonl")
                                     .read_text().splitlines())}
    assert [(rows[u]["spoken"], rows[u]["complete"]) for u in ("u1", "u2", "u3")] == \
        [(True, True), (True, True), (True, False)]
    assert [r["played"] for r in report["utterances"]] == [True, True, True]
    # heard 4 + 2 + 2 s; spoken whole: u1 and u2
    assert "spoken 75 % of the speech heard" in summary_line(c, report, tmp_path)


def test_text_from_the_bus_reaches_the_terminal_as_text_not_as_commands(capsys):
    # Anybody on the bus can send a transcript: an escape sequence in it must not clear,
    # retitle or move the terminal of the person running `interpret` (issue 48).
    c = Collector()
    c.add(Transcript(src="asr", utt="u.1\x1b[2J", text="hi\x1b]0;owned\x07", final=True))
    c.add(Translation(src="mt", utt="u.1", text="olá\r\x1b[Aup", final=True))
    c.add(PlaybackEvent(src="player", utt="u.2", event="skipped", reason="late\x1bc"))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "hi\\x1b]0;owned\\x07" in out and "olá\\r\\x1b[Aup" in out and "late\\x1bc" in out
