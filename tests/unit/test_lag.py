"""Bounded lag: the policy's steps, the tts actor taking them, and the outputs marking a skip."""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest

from tests.unit.helpers import run_actor
from voxweft.actors import lag
from voxweft.actors.tts import TtsActor
from voxweft.deploy.topology import TopologyError, load, parse
from voxweft.protocol.messages import PlaybackEvent, SpeechChunk, Transcript, Translation
from voxweft.tools.interpret import NOT_SPOKEN, Collector


def _decide(since_end_s, queued_s=0.0, max_lag_s=6.0, backlog=False):
    return lag.decide(since_end_s=since_end_s, queued_s=queued_s, first_chunk_s=0.5,
                      max_lag_s=max_lag_s, speed_for_queue=1.0 if queued_s < 1 else 1.2,
                      max_speed=1.3, has_backlog_engine=backlog)


def test_steps_follow_the_projected_lag():
    # lag = since the speech ended + max(queued at the player, first chunk 0.5 s)
    d = _decide(1.0)
    assert d.lag_s == 1.5 and d.steps() == [] and d.speed == 1.0
    d = _decide(1.0, queued_s=0.8)          # a little speech queued: no catch-up yet
    assert d.lag_s == 1.8 and d.speed == 1.0 and d.steps() == []
    d = _decide(1.0, queued_s=1.5)          # speech queued: catch-up speed, long chunks
    assert d.lag_s == 2.5 and d.speed == 1.2 and d.steps() == ["speedup", "long_chunks"]
    d = _decide(2.6)                         # past half the bound (3.1 > 3): full speed
    assert d.speed == 1.3 and d.steps() == ["speedup"]
    d = _decide(1.0, queued_s=2.5)           # past half, speech queued: long chunks too
    assert d.lag_s == 3.5 and d.steps() == ["speedup", "long_chunks"]
    d = _decide(4.2, backlog=True)           # past three quarters (4.7 > 4.5): faster engine
    assert d.backlog_engine and d.steps() == ["speedup", "backlog_engine"]
    d = _decide(4.2)                         # ... when there is one
    assert not d.backlog_engine
    d = _decide(3.0, queued_s=3.5)           # would start 6.5 s late: not spoken
    assert d.skip and "6.5 s behind" in d.skip and d.steps() == ["skip"]


def test_no_bound_keeps_every_utterance():
    d = _decide(100.0, queued_s=30.0, max_lag_s=0)
    assert d.steps() == ["speedup"] and d.speed == 1.2


def _topology(max_lag_s=6.0, **tts):
    raw = copy.deepcopy(load(None).raw)
    raw["pipeline"]["max_lag_s"] = max_lag_s
    raw["actors"]["tts"].update(engine="espeak", settings={}, **tts)   # fast, same actor code
    return parse(raw)


def _say(utt, text, ended_s_ago):
    end = time.time_ns() - int(ended_s_ago * 1e9)
    return Translation(utt=utt, src_lang="en", tgt_lang="pt", source_text="-", text=text,
                       trace=(("speech_end", end, 1.0),))


def _last(out, utt):
    return next(m for m in out if isinstance(m, SpeechChunk) and m.utt == utt and m.last)


def test_tts_skips_what_would_be_heard_too_late_and_says_why():
    topo = _topology()
    actor = TtsActor(topo, topo.actors["tts"])
    out = run_actor(actor, [_say("late", "Nunca foi superado.", 9.0),
                            _say("fresh", "Nunca foi superado.", 0.3)], src="mt")
    late, fresh = _last(out, "late"), _last(out, "fresh")
    assert late.index == 0 and "behind the speaker" in late.skipped   # no audio, marked
    assert fresh.index > 0 and not fresh.skipped
    assert actor.counters["lag_skip"] == 1
    # the first chunk's time now comes from what speaking took, not from the warm-up
    assert list(actor.first_chunks) == [actor.first_chunk_s()] and actor.first_chunk_s() > 0
    actor.warmup()   # measures the voice's cost on this machine
    # (espeak-ng's CPU can round to 0: os.times counts 10 ms ticks; wall time cannot)
    assert actor.budget["rtf"] > 0 and actor.budget["first_s"] > 0 and actor.budget["cpu"] >= 0
    assert actor.budget["cores"] >= 1


def test_file_interpretation_speaks_everything():
    topo = _topology(max_lag_s=0)
    actor = TtsActor(topo, topo.actors["tts"])
    out = run_actor(actor, [_say("late", "Nunca foi superado.", 60.0)], src="mt")
    assert _last(out, "late").index > 0 and not actor.counters["lag_skip"]


def test_backlog_engine_speaks_what_is_late():
    topo = _topology(max_lag_s=10.0, backlog_engine="espeak",
                     backlog_settings={"rate_wpm": 300})
    actor = TtsActor(topo, topo.actors["tts"])
    out = run_actor(actor, [_say("late", "Nunca foi superado.", 8.0)], src="mt")
    assert _last(out, "late").index > 0 and actor.counters["lag_backlog_engine"] == 1


def test_topology_checks_the_bound_and_the_backlog_engine():
    with pytest.raises(TopologyError, match="max_lag_s"):
        _topology(max_lag_s=1.0)
    with pytest.raises(TopologyError, match="backlog_engine = 'nope'"):
        _topology(backlog_engine="nope")
    with pytest.raises(TopologyError, match="backlog_settings"):
        _topology(backlog_engine="espeak", backlog_settings={"rate_wpm": 5})
    assert load(None).max_lag_s == 8.0


def test_player_says_why_an_utterance_was_not_spoken(tmp_path):
    from tests.unit.test_actors import player

    p = player(tmp_path)
    last = SpeechChunk(utt="u", index=0, last=True, sample_rate=24000,
                       pcm=np.zeros(0, np.float32), skipped="9.5 s behind the speaker")
    out = run_actor(p, [last], src="tts", ticks=2)
    p.close()
    ev = [m for m in out if isinstance(m, PlaybackEvent)]
    assert [(e.event, e.reason) for e in ev] == [("skipped", "9.5 s behind the speaker")]


def test_outputs_keep_what_was_not_spoken_marked(tmp_path):
    c = Collector()
    for utt, start in (("a", 0.0), ("b", 3.0)):
        c.add(Transcript(utt=utt, src_lang="en", text=f"text {utt}", media_start_s=start,
                         media_end_s=start + 2))
        c.add(Translation(utt=utt, src_lang="en", tgt_lang="pt", text=f"texto {utt}",
                          media_start_s=start, media_end_s=start + 2))
    c.add(PlaybackEvent(utt="a", event="started"))
    c.add(PlaybackEvent(utt="a", event="finished"))
    c.add(PlaybackEvent(utt="b", event="skipped", reason="7.0 s behind the speaker"))
    c.write(tmp_path, False, "en", "pt")
    rows = [json.loads(line) for line in (tmp_path / "translation.jsonl").read_text()
            .splitlines()]
    assert [(r["text"], r["spoken"], r["not_spoken"]) for r in rows] == [
        ("texto a", True, ""), ("texto b", False, "7.0 s behind the speaker")]
    srt = (tmp_path / "subtitles.pt.srt").read_text(encoding="utf-8")
    assert "texto a" in srt and f"{NOT_SPOKEN}texto b" in srt
    assert "texto" not in (tmp_path / "subtitles.en.srt").read_text(encoding="utf-8")


def test_timeline_knows_what_the_player_still_has_to_play():
    s = 1_000_000_000
    t = lag.Timeline(jitter_s=0.1)
    t.sent("a", 2.0, 100 * s)                     # idle player: jitter, then 2 s
    assert t.queued_s(100 * s) == pytest.approx(2.1)
    t.sent("a", 1.0, int(100.5 * s))              # queued behind the first chunk
    assert t.queued_s(101 * s) == pytest.approx(2.1)
    t.sent("b", 1.0, int(103.5 * s))              # the player ran dry at 103.1 s
    assert t.queued_s(int(103.5 * s)) == pytest.approx(1.1)
    ev = dict(epoch=7, sent_ns=int(103.6 * s))
    t.heard(PlaybackEvent(utt="a", event="finished",
                          trace=(("play.end", int(103.1 * s), None),), **ev), int(103.6 * s))
    assert t.queued_s(int(103.5 * s)) == pytest.approx(1.1)   # not the last one sent
    t.heard(PlaybackEvent(utt="b", event="finished",
                          trace=(("play.end", int(104.2 * s), None),), **ev), 105 * s)
    assert t.queued_s(104 * s) == pytest.approx(0.2)          # it ended earlier than modelled
    t.sent("c", 5.0, 105 * s)
    t.heard(PlaybackEvent(utt="c", event="started", epoch=8), 106 * s)   # player restarted
    assert t.queued_s(106 * s) == 0.0


def test_long_chunks_only_when_made_before_the_queued_speech_ends():
    topo = _topology()
    actor = TtsActor(topo, topo.actors["tts"])
    text = "Produziram os livros de blocos, que foram os antecessores imediatos do livro."
    assert not actor._long_chunk_fits(text, 30.0)      # nothing measured yet: not risked
    out = run_actor(actor, [_say("a", text, 0.2)], src="mt")
    assert _last(out, "a").index > 0 and actor.s_per_char > 0
    actor.s_per_char = 0.05                             # 1.5 s for the 30-char first clause
    first = actor.engine.plan(text, eager=False)[0]
    assert actor._long_chunk_fits(text, 2.0 * 0.05 * len(first))
    assert not actor._long_chunk_fits(text, 1.1 * 0.05 * len(first))
