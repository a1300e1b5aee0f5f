"""The voice speeds up when its speech queues at the player, and slows down again."""

from __future__ import annotations

import copy
import time

from tests.unit.helpers import run_actor
from voxweft.actors.settings.actors import TtsConfig
from voxweft.actors.tts import TtsActor
from voxweft.deploy.topology import load, parse
from voxweft.protocol.messages import PlaybackEvent, SpeechChunk, Translation


def test_speed_ramps_between_the_two_backlogs():
    cfg = TtsConfig(engine="espeak", port=27605, catchup_after_s=0.5, catchup_full_s=3.0,
                    catchup_max_speed=1.3)
    assert cfg.speed(0.0) == 1.0 and cfg.speed(0.5) == 1.0
    assert cfg.speed(1.75) == 1.15
    assert cfg.speed(3.0) == 1.3 and cfg.speed(60.0) == 1.3


def _say(utt: str, text: str) -> Translation:
    return Translation(utt=utt, src_lang="en", tgt_lang="pt", source_text="-", text=text)


def _speed(outputs, utt: str) -> float:
    return next(m.speed for m in outputs if isinstance(m, SpeechChunk) and m.utt == utt)


def test_tts_catches_up_with_the_player():
    raw = copy.deepcopy(load(None).raw)
    raw["actors"]["tts"].update(engine="espeak", settings={})   # fast, same actor code
    topo = parse(raw)
    actor = TtsActor(topo, topo.actors["tts"])
    long = "Produziram os livros de blocos, que foram os antecessores imediatos do livro."
    out = run_actor(actor, [_say("a", long)], src="mt")
    assert _speed(out, "a") == 1.0
    queued = actor.backlog_s(time.time_ns())
    assert queued > 3.0   # nothing played yet: all of "a" is queued
    # "b" arrives while all of "a" still waits to be played: full speed.
    # Its pauses are cut to 0.15 s too (one chunk; espeak-ng pauses 0.18 s after "." at 1.4x).
    out = run_actor(actor, [_say("b", "Sim. Não. Talvez amanhã.")], src="mt",
                    loaded=True)
    assert _speed(out, "b") == 1.4 and actor.counters["lag_speedup"] == 1
    assert actor.counters["pauses_cut_ms"] > 0
    # The player reports both played: no backlog, normal speed again.
    now = time.time_ns()
    events = [PlaybackEvent(utt=u, event=e, trace=((f"play.{e[:5]}", now, None),), epoch=7)
              for u in ("a", "b") for e in ("started", "finished")]
    run_actor(actor, events, src="player", loaded=True)
    assert actor.backlog_s(time.time_ns()) == 0.0
    out = run_actor(actor, [_say("c", "Sim.")], src="mt", loaded=True)
    assert _speed(out, "c") == 1.0


def _draft(utt: str, text: str) -> Translation:
    return Translation(utt=utt, src_lang="en", tgt_lang="pt", source_text="-", text=text,
                       final=False)


def test_tts_makes_a_draft_first_chunk_ahead_and_sends_it_only_for_the_same_text():
    raw = copy.deepcopy(load(None).raw)
    raw["actors"]["tts"].update(engine="espeak", settings={})
    topo = parse(raw)
    actor = TtsActor(topo, topo.actors["tts"])
    text = "Nunca foi superado, disse ele."

    def played(utt):   # the player says it has played `utt`: nothing queued
        run_actor(actor, [PlaybackEvent(utt=utt, event=e, epoch=7, trace=(
            (f"play.{e[:5]}", time.time_ns(), None),)) for e in ("started", "finished")],
            src="player", loaded=True)

    reference = run_actor(actor, [_say("ref", text)], src="mt")
    ref_chunks = [m.pcm for m in reference if isinstance(m, SpeechChunk) and not m.last]
    played("ref")

    # A draft is never spoken: nothing goes out, the first chunk is kept.
    assert run_actor(actor, [_draft("a", text)], src="mt", loaded=True) == []
    assert actor.counters["drafts"] == 1 and len(actor.drafts) == 1
    out = run_actor(actor, [_say("a", text)], src="mt", loaded=True)
    chunks = [m for m in out if isinstance(m, SpeechChunk)]
    assert chunks[-1].last and [c.index for c in chunks] == list(range(len(chunks)))
    assert [c.pcm.tobytes() for c in chunks[:-1]] == [c.tobytes() for c in ref_chunks]
    assert actor.counters["drafts_used"] == 1 and len(actor.drafts) == 0
    played("a")

    # The speaker went on: the final text differs, the draft is dropped, the final spoken.
    run_actor(actor, [_draft("b", "Nunca")], src="mt", loaded=True)
    out = run_actor(actor, [_say("b", text)], src="mt", loaded=True)
    assert [c.pcm.tobytes() for c in out if isinstance(c, SpeechChunk) and not c.last] == \
        [c.tobytes() for c in ref_chunks]
    assert actor.counters["drafts_wasted"] == 1

    # With more speech queued at the player than a first chunk takes, no draft is made.
    run_actor(actor, [_draft("c", text)], src="mt", loaded=True)
    assert actor.counters["drafts_not_needed"] == 1 and len(actor.drafts) == 0


def test_an_engine_that_fails_partway_still_closes_its_utterance(tmp_path):
    """tts always ends an utterance it started, saying why; the player then finishes it as
    cut short (reading a file it had waited for the end for ever)."""
    from tests.unit.test_actors import player

    raw = copy.deepcopy(load(None).raw)
    raw["actors"]["tts"].update(engine="espeak", settings={})
    topo = parse(raw)
    actor = TtsActor(topo, topo.actors["tts"])
    run_actor(actor, [_say("warm", "Sim.")], src="mt")
    real = actor.engine.speak

    def fails_after_one(*args, **kwargs):
        chunks = real(*args, **kwargs)
        yield next(iter(chunks))
        raise RuntimeError("the model ran out of memory")

    actor.engine.speak = fails_after_one
    text = "Nunca foi superado, disse ele, e foi para casa."
    out = [m for m in run_actor(actor, [_say("a", text)], src="mt", loaded=True)
           if isinstance(m, SpeechChunk)]
    assert [(c.index, c.last) for c in out] == [(0, False), (1, True)]
    assert "tts engine failed after 1 chunk(s): RuntimeError: the model ran out" in \
        out[-1].skipped and actor.counters["engine_failed"] == 1

    def fails_at_once(*args, **kwargs):
        raise RuntimeError("no voice")

    actor.engine.speak = fails_at_once
    (last,) = run_actor(actor, [_say("b", text)], src="mt", loaded=True)
    assert last.last and last.index == 0 and "failed after 0 chunk(s)" in last.skipped
    p = player(tmp_path)
    events = [m for m in run_actor(p, out + [last], src="tts", ticks=250, tick_sleep_s=0.02)
              if isinstance(m, PlaybackEvent)]
    p.close()
    assert [(e.utt, e.event, e.complete) for e in events if e.event != "started"] == \
        [("a", "finished", False), ("b", "skipped", True)]
    assert "ran out of memory" in events[1].reason
