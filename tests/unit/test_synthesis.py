"""A speech chunk belongs to one synthesis of its utterance (issue 37, item 1).

A restarted tts synthesises an utterance again, perhaps cut into other pieces, so its chunk i
is not the old one's: spliced by index, old chunks 0..k and new k+1.. could repeat or lose a
clause while the player said `complete`. Each chunk now says the words it speaks; the player
goes on where the old synthesis stopped, tells a restarted tts where that is, and calls an
utterance complete only when the words it wrote are the translation's, each once, in order.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import soundfile as sf

from tests.unit.helpers import run_actor
from tests.unit.test_actors import player
from voxweft.actors.custody import Seen
from voxweft.actors.tts import TtsActor
from voxweft.deploy.topology import load, parse
from voxweft.protocol.messages import PlaybackEvent, SpeechChunk, Status, Translation

RATE = 24000
PIECE_S = 0.1


def piece(utt: str, index: int, word: int, words: int, epoch: int, *, part: int = 0,
          piece_end: bool = True) -> SpeechChunk:
    """A chunk of synthesis `epoch` speaking words word..word+words (its level marks them)."""
    pcm = np.full(int(RATE * PIECE_S), 0.01 * (1 + word), np.float32)
    return SpeechChunk(utt=utt, index=index, sample_rate=RATE, pcm=pcm, word=word, words=words,
                       part=part, piece_end=piece_end, epoch=epoch,
                       trace=(("speech_end", 1, 0.0),))


def last(utt: str, index: int, of: int, epoch: int) -> SpeechChunk:
    return SpeechChunk(utt=utt, index=index, last=True, sample_rate=RATE,
                       pcm=np.zeros(0, np.float32), word=of, epoch=epoch)


def ready(epoch: int) -> Status:
    return Status(state="ready", src="tts", epoch=epoch)


def written(tmp_path) -> tuple[dict, list[float]]:
    """The journal line of the one utterance, and the level of each piece written."""
    (entry,) = [json.loads(x) for x in (tmp_path / "out.wav.journal").read_text().splitlines()
                if '"utt"' in x]
    audio, _ = sf.read(tmp_path / "out.wav", dtype="float32")
    n = int(RATE * PIECE_S)
    levels = [round(float(np.median(audio[i:i + n])), 2) for i in range(0, len(audio), n)]
    return entry, [x for x in levels if x > 0.005]


def play_old_then(tmp_path, new: list[SpeechChunk], old: list[SpeechChunk] | None = None):
    """Words 0-6 of 12 from synthesis 1 (two pieces), then tts restarts: synthesis 2."""
    p = player(tmp_path, gap_ms=300)
    old = old or [piece("a", 0, 0, 3, 1), piece("a", 1, 3, 3, 1)]
    out = run_actor(p, [ready(1), *old], src="tts", ticks=5, tick_sleep_s=0.01)
    said = p.progress()
    out += run_actor(p, [ready(2), *new], src="tts", ticks=30, tick_sleep_s=0.02, loaded=True)
    p.close()
    (done,) = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    entry, levels = written(tmp_path)
    assert entry["complete"] == done.complete
    return p, said, entry, levels


def test_a_restarted_tts_goes_on_from_the_word_the_player_has(tmp_path):
    # The player says it has words 0-6 whole; the new tts speaks 6-12 only.
    p, said, entry, levels = play_old_then(tmp_path, [
        piece("a", 0, 6, 3, 2), piece("a", 1, 9, 3, 2), last("a", 2, 12, 2)])
    assert said == {"a": 6}
    assert entry["complete"] and entry["words"] == [[0, 3], [3, 6], [6, 9], [9, 12]]
    assert levels == [0.01, 0.04, 0.07, 0.1]   # each piece once, in order
    assert p.counters["synthesis_switched"] == 1


def test_a_new_synthesis_cut_at_the_same_words_follows_on_exactly(tmp_path):
    # A tts that did not hear where the player is speaks it all again, cut the same way:
    # what the player has is dropped, the rest follows on.
    p, _, entry, levels = play_old_then(tmp_path, [
        piece("a", i, 3 * i, 3, 2) for i in range(4)] + [last("a", 4, 12, 2)])
    assert entry["complete"] and entry["words"] == [[0, 3], [3, 6], [6, 9], [9, 12]]
    assert levels == [0.01, 0.04, 0.07, 0.1] and p.counters["words_had"] == 2


def test_a_new_synthesis_cut_otherwise_is_never_spliced_into_a_whole_utterance(tmp_path):
    # Cut at 0-4, 4-8, 8-12: spliced by index (before), old 0-3, 3-6 and new 8-12 were
    # written and words 6-8 lost with `complete: true`. Now the piece holding word 6 is
    # taken (words 4-6 are heard twice, nothing is lost), and the utterance is not whole.
    p, _, entry, levels = play_old_then(tmp_path, [
        piece("a", 0, 0, 4, 2), piece("a", 1, 4, 4, 2), piece("a", 2, 8, 4, 2),
        last("a", 3, 12, 2)])
    assert entry["words"] == [[0, 3], [3, 6], [4, 8], [8, 12]]
    assert not entry["complete"] and p.counters["not_whole"] == 1
    assert levels == [0.01, 0.04, 0.05, 0.09]


def test_a_chunk_of_an_older_synthesis_is_dropped(tmp_path):
    p, _, entry, levels = play_old_then(tmp_path, [
        piece("a", 0, 6, 3, 2), piece("a", 2, 6, 3, 1), piece("a", 1, 9, 3, 2),
        last("a", 2, 12, 2)])
    assert entry["complete"] and levels == [0.01, 0.04, 0.07, 0.1]
    assert p.counters["old_synthesis"] == 1


def test_a_piece_cut_off_partway_is_not_whole(tmp_path):
    # An engine that streams within a piece (VoxCPM2): the first part of words 0-6 was
    # written when tts died; the new synthesis starts that piece again.
    old = [piece("a", 0, 0, 6, 1, piece_end=False)]
    p, said, entry, levels = play_old_then(tmp_path, [
        piece("a", 0, 0, 6, 2), piece("a", 1, 6, 6, 2), last("a", 2, 12, 2)], old=old)
    assert said == {} and entry["words"] == [[0, 6], [0, 6], [6, 12]]
    assert not entry["complete"] and levels == [0.01, 0.01, 0.07]


def test_a_chunk_sent_again_by_a_new_tts_is_not_taken_for_the_old_ones():
    seen = Seen()
    first = piece("a", 3, 0, 3, 1)
    seen.add(first)
    assert first in seen and piece("a", 3, 9, 3, 1) in seen   # the same sender, again
    assert piece("a", 3, 0, 3, 2) not in seen                  # a new synthesis's chunk 3


def _tts() -> TtsActor:
    raw = copy.deepcopy(load(None).raw)
    raw["actors"]["tts"].update(engine="espeak", settings={})
    topo = parse(raw)
    return TtsActor(topo, topo.actors["tts"])


def test_tts_says_the_words_of_each_chunk_and_goes_on_where_the_player_is():
    text = "Nunca foi superado, disse ele, e foi para casa depois."
    words = text.split()
    actor = _tts()
    say = Translation(utt="a", src_lang="en", tgt_lang="pt", source_text="-", text=text)
    whole = [m for m in run_actor(actor, [say], src="mt") if isinstance(m, SpeechChunk)]
    spans = [(c.word, c.word + c.words) for c in whole if not c.last]
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert spans[-1][1] == len(words) == whole[-1].word and len(spans) >= 2
    # What it made, counted (the budget's GPU line is checked against it, issue 38).
    assert actor.counters["pieces"] == len(spans) and actor.counters["syntheses"] == 1
    made = sum(len(c.pcm) for c in whole) / whole[0].sample_rate
    assert actor.counters["made_ms"] == round(made * 1000)
    assert 0 < actor.counters["engine_ms"] == round(actor.engine_s * 1000)

    # A restarted tts that hears the player has the first piece speaks only the rest.
    actor = _tts()
    run_actor(actor, [Status(state="ready", src="player", progress={"b": spans[0][1]})],
              src="player")
    rest = [m for m in run_actor(actor, [Translation(
        utt="b", src_lang="en", tgt_lang="pt", source_text="-", text=text)], src="mt",
        loaded=True) if isinstance(m, SpeechChunk)]
    assert [(c.word, c.word + c.words) for c in rest if not c.last] == spans[1:]
    assert rest[-1].last and rest[-1].word == len(words) and actor.counters["resumed"] == 1
    assert actor.progress() == {}   # what it heard is its own: its heartbeat still builds
    assert sum(len(c.pcm) for c in rest) < sum(len(c.pcm) for c in whole)


def test_a_tts_just_started_waits_for_the_players_heartbeat_before_it_speaks(monkeypatch):
    """mt sends what it holds the moment a restarted tts is ready, before the player's next
    heartbeat: tts holds it until the player says what it has (at most PLAYER_WAIT_S), so it
    goes on from there (in CI, without this, 3 restarts of 3 spoke utterances whole again)."""
    from voxweft.actors import tts as tts_module

    monkeypatch.setattr(tts_module, "PLAYER_WAIT_S", 0.5)
    text = "Nunca foi superado, disse ele, e foi para casa depois."
    actor = _tts()
    run_actor(actor, [], src="mt")   # loaded
    actor.warmup()
    say = Translation(utt="a", src_lang="en", tgt_lang="pt", source_text="-", text=text)
    assert run_actor(actor, [say], src="mt", loaded=True) == []   # held
    assert actor.counters["waited_for_player"] == 1
    out = run_actor(actor, [Status(state="ready", src="player", progress={"a": 3})],
                    src="player", loaded=True, ticks=2)
    chunks = [m for m in out if isinstance(m, SpeechChunk)]
    assert chunks and chunks[0].word == 3 and chunks[-1].last   # from the player's word
    # Nobody heard from the player: after PLAYER_WAIT_S it speaks all the same.
    actor = _tts()
    run_actor(actor, [], src="mt")
    actor.warmup()
    assert run_actor(actor, [say], src="mt", loaded=True) == []
    out = run_actor(actor, [], src="mt", loaded=True, ticks=8, tick_sleep_s=0.1)
    assert [m for m in out if isinstance(m, SpeechChunk)][0].word == 0


def test_a_stale_word_of_the_player_is_not_gone_on_from(monkeypatch):
    """The player said it has 3 words of `a`, then went quiet (killed; a restarted player
    drops a half-written utterance, so it has none of them). tts does not go on from word 3
    on that old heartbeat: it waits for a fresh one (the new player's: nothing of `a`) and
    speaks `a` whole. In test_kills_close it had gone on from a heartbeat 1.8 s old, and
    output.wav got words 2-4 of 4. With no fresh heartbeat at all it speaks it whole too."""
    import time

    from voxweft.actors import tts as tts_module

    monkeypatch.setattr(tts_module, "PROGRESS_FRESH_S", 0.2)
    monkeypatch.setattr(tts_module, "PLAYER_WAIT_S", 0.5)
    text = "Nunca foi superado, disse ele, e foi para casa depois."
    say = Translation(utt="a", src_lang="en", tgt_lang="pt", source_text="-", text=text)
    for fresh in ({}, None):
        actor = _tts()
        run_actor(actor, [], src="mt")
        actor.warmup()
        run_actor(actor, [Status(state="ready", src="player", progress={"a": 3})],
                  src="player", loaded=True)
        time.sleep(0.3)   # the player's word on `a` is now stale
        assert run_actor(actor, [say], src="mt", loaded=True) == []   # held
        assert actor.counters["waited_for_fresh_progress"] == 1
        if fresh is not None:   # a restarted player's heartbeat: nothing of `a`
            out = run_actor(actor, [Status(state="ready", src="player", progress=fresh)],
                            src="player", loaded=True, ticks=2)
        else:                   # nobody: after PLAYER_WAIT_S it speaks all the same
            out = run_actor(actor, [], src="mt", loaded=True, ticks=8, tick_sleep_s=0.1)
        chunks = [m for m in out if isinstance(m, SpeechChunk)]
        assert chunks and chunks[0].word == 0 and chunks[-1].last, fresh
        assert actor.counters["resumed"] == 0


def test_what_was_held_for_the_player_is_spoken_before_what_comes_after():
    """The player plays utterances in the order their chunks come. A final that arrives
    after the player's heartbeat but before tick() released what was held (a draft being
    made ahead in between, seconds on one slow core) once overtook them: in CI the journal
    had utterance 5 before 1."""
    text = "Nunca foi superado, disse ele."
    actor = _tts()
    run_actor(actor, [], src="mt")
    actor.warmup()
    held = [Translation(utt=u, src_lang="en", tgt_lang="pt", source_text="-", text=text)
            for u in ("a", "b")]
    assert run_actor(actor, held, src="mt", loaded=True) == []
    list(actor.handle(Status(state="ready", src="player")))   # heard; no tick yet
    late = Translation(utt="c", src_lang="en", tgt_lang="pt", source_text="-", text=text)
    order = [m.utt for m in actor.handle(late) if isinstance(m, SpeechChunk) and m.last]
    assert order == ["a", "b", "c"] and not actor.waiting


def test_chunks_that_do_not_say_their_words_are_never_taken_for_words_had(tmp_path):
    """A tts that says no words (word = words = 0, an older peer): a new synthesis is played
    from its start, never dropped as words the player has."""
    p = player(tmp_path, gap_ms=300)
    old = SpeechChunk(utt="a", index=0, sample_rate=RATE, epoch=1,
                      pcm=np.full(int(RATE * PIECE_S), 0.05, np.float32))
    run_actor(p, [ready(1), old], src="tts", ticks=3, tick_sleep_s=0.01)
    assert p.progress() == {}
    new = [SpeechChunk(utt="a", index=i, sample_rate=RATE, epoch=2,
                       pcm=np.full(int(RATE * PIECE_S), 0.05, np.float32)) for i in range(2)]
    out = run_actor(p, [ready(2), *new, SpeechChunk(utt="a", index=2, last=True, epoch=2,
                                                    sample_rate=RATE,
                                                    pcm=np.zeros(0, np.float32))],
                    src="tts", ticks=20, tick_sleep_s=0.02, loaded=True)
    p.close()
    (done,) = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert done.duration_s >= 3 * PIECE_S - 0.01 and p.counters["words_had"] == 0


def test_a_synthesis_dropped_early_is_counted_and_its_engine_generator_closed():
    """A draft dropped (the speaker went on) closes what tts counts; the engine's own
    generator must close with it (VoxCPM2's MLX generation ends in its `finally`)."""
    from voxweft.actors.engines.tts import Spoken

    actor = _tts()
    closed = []

    def speak():
        try:
            yield Spoken(0, np.zeros(2400, np.float32))
            yield Spoken(1, np.zeros(2400, np.float32))
        finally:
            closed.append(True)

    made = actor._counted(speak(), 24000)
    next(made)
    made.close()
    assert closed == [True]
    assert (actor.counters["syntheses"], actor.counters["pieces"],
            actor.counters["made_ms"]) == (1, 1, 100)
