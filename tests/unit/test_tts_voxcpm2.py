"""The voxcpm2 engine on a tiny random-weight VoxCPM2, both backends; the speaker's voice.

Real loading and generation code (`voxcpm` and `mlx-audio`), weights built here: what is
checked is what a real model relies on (streaming, the voice in use, the bounds, the knobs).
"""

from __future__ import annotations

import copy
import importlib.util
import wave

import numpy as np
import pytest

from tests.unit.helpers import run_actor
from tests.unit.test_pace import holes
from tests.unit.tiny_voxcpm2 import build_tiny_voxcpm2
from voxweft.actors import engines
from voxweft.actors.engines.tts import Pace, Reference
from voxweft.actors.engines.tts.stretch import time_stretch
from voxweft.actors.settings.base import StartupError
from voxweft.actors.tts import TtsActor
from voxweft.actors.voice import VoiceMemory, voiced
from voxweft.deploy.topology import load, parse
from voxweft.protocol.messages import BUS_RATE, SpeechChunk, Translation, Voice

BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(
    importlib.util.find_spec(p) is None, reason=f"{p} is not installed (tools/install.sh)"))
    for b, p in (("torch", "voxcpm"), ("mlx", "mlx_audio"))]
TEXT = "Olá, tudo bem com você?"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_voxcpm2(tmp_path_factory.mktemp("voxcpm2") / "tiny")


@pytest.fixture(scope="module")
def runaway(tmp_path_factory):
    return build_tiny_voxcpm2(tmp_path_factory.mktemp("voxcpm2") / "runaway", runaway=True)


def _speech(seed: int, seconds: float = 5.0) -> np.ndarray:
    """A voice-like signal: a few harmonics, amplitude-modulated like syllables."""
    t = np.arange(int(seconds * BUS_RATE)) / BUS_RATE
    f0 = 110 + 40 * seed
    tone = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    return (0.2 * tone * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def _ref(seed: int) -> Reference:
    return Reference(key=f"r{seed}", pcm=_speech(seed), sample_rate=BUS_RATE)


def _engine(model, backend, **settings):
    e = engines.build("tts", "voxcpm2", {"backend": backend, "model": str(model),
                                         "inference_timesteps": 2, "seed": 3, **settings})
    e.load()
    return e


def _audio(engine, text=TEXT, **kw) -> np.ndarray:
    return np.concatenate(list(engine.synthesize(text, "pt", **kw)))


# --------------------------------------------------------------------------- settings

@pytest.mark.parametrize("value", [0.01, 0.5, 1.5, 3.0])
def test_a_temperature_far_from_one_is_refused_with_its_meaning(value):
    with pytest.raises(ValueError) as info:
        engines.build("tts", "voxcpm2", {"temperature": value})
    text = str(info.value)
    assert f"temperature = {value}" in text and "initial noise" in text and "keep 1.0" in text


@pytest.mark.parametrize("settings,words", [
    ({"voice": "someone"}, "must be \"speaker\""),
    ({"voice": "file:/no/such.wav"}, "no such file"),
    ({"model": "/no/such/folder"}, "must be a VoxCPM2 folder"),
    ({"reference_min_s": 8.0, "reference_max_s": 5.0}, "must not exceed"),
    ({"inference_timesteps": 0}, "inference_timesteps = 0"),
    ({"cfg_value": 0.5}, "cfg_value = 0.5"),
    ({"warmup": 2}, "warmup"),
])
def test_bad_settings_name_the_key(settings, words):
    with pytest.raises(ValueError, match=words):
        engines.build("tts", "voxcpm2", settings)


def test_prompt_mode_with_a_file_needs_its_words(tmp_path):
    path = tmp_path / "me.wav"
    _write_wav(path, _speech(0))
    with pytest.raises(ValueError, match="needs voice_text"):
        engines.build("tts", "voxcpm2", {"voice": f"file:{path}", "voice_mode": "prompt"})
    e = engines.build("tts", "voxcpm2", {"voice": f"file:{path}", "voice_mode": "prompt",
                                         "voice_text": "the words"})
    assert not e.wants_voice()
    assert engines.build("tts", "voxcpm2", {}).wants_voice()   # "speaker" is the default


def test_the_real_weights_are_catalogue_entries_until_fetched(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXWEFT_MODELS", str(tmp_path))
    for backend, name in (("torch", "voxcpm2"), ("mlx", "voxcpm2-mlx-4bit")):
        e = engines.build("tts", "voxcpm2", {"backend": backend})
        assert e.folder == tmp_path / name
        with pytest.raises(Exception, match=f"voxweft models fetch {name}"):
            e.load()


def _write_wav(path, pcm, rate=BUS_RATE):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())


# --------------------------------------------------------------------------- both backends

@pytest.mark.parametrize("backend", BACKENDS)
def test_48k_audio_in_the_given_voice(tiny, backend):
    e = _engine(tiny, backend)
    assert e.sample_rate == 48000
    a = _audio(e, voice=_ref(0))
    assert a.dtype == np.float32 and len(a) > 0.1 * 48000 and np.abs(a).max() > 0.01
    assert np.array_equal(a, _audio(e, voice=_ref(0)))     # same voice and seed: same audio
    b = _audio(e, voice=_ref(1))                            # another voice: other audio
    assert len(a) != len(b) or not np.allclose(a, b, atol=1e-4)
    c = _audio(e, voice=None)                               # the model's own voice
    assert len(a) != len(c) or not np.allclose(a, c, atol=1e-4)
    # each clause starts and ends at zero: clauses join without a click
    assert abs(a[0]) < 1e-6 and abs(a[-1]) < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_voice_with_its_words_is_a_prompt_not_a_reference(tiny, backend):
    e = _engine(tiny, backend)
    ref = _ref(0)
    prompt = Reference(key="p", pcm=ref.pcm, sample_rate=BUS_RATE, text="Good morning to you all.")
    a, b = _audio(e, voice=ref), _audio(e, voice=prompt)
    assert len(a) != len(b) or not np.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_voice_is_used_and_the_speaker_voice_ignored(tiny, tmp_path, backend):
    paths = [tmp_path / f"v{i}.wav" for i in (0, 1)]
    for i, path in enumerate(paths):
        _write_wav(path, _speech(i))
    a, b = (_audio(_engine(tiny, backend, voice=f"file:{p}"), voice=_ref(2)) for p in paths)
    assert len(a) != len(b) or not np.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_runaway_generation_ends_at_its_texts_bound(runaway, backend):
    e = _engine(runaway, backend, max_s_per_char=0.1)
    short, long = "Sim, claro.", "Sim, claro, e depois voltamos todos juntos para casa."
    for text in (short, long):
        pieces = e.plan(text)        # each piece is bounded by its own length (the plan is
        samples = len(_audio(e, text))   # made before: on mlx each piece made sizes the next)
        bound = sum(e.max_patches(p) for p in pieces) * e.patch_s * e.sample_rate
        assert 0.9 * bound <= samples <= bound + 16 * len(pieces), (text, samples, bound)
    assert e.max_patches(long) > 2 * e.max_patches(short)


@pytest.mark.parametrize("backend", BACKENDS)
def test_temperature_reaches_the_diffusion(tiny, backend):
    a = _audio(_engine(tiny, backend), voice=_ref(0))
    b = _audio(_engine(tiny, backend, temperature=1.3), voice=_ref(0))
    assert len(a) != len(b) or not np.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_catching_up_stretches_each_clause_at_the_same_pitch(tiny, backend):
    e = _engine(tiny, backend)
    normal = _audio(e, voice=_ref(0))
    fast = list(e.synthesize(TEXT, "pt", speed=1.3, voice=_ref(0)))
    assert len(fast) == len(e.plan(TEXT))               # one chunk per clause when stretched
    ratio = len(normal) / sum(len(c) for c in fast)
    assert 1.2 < ratio < 1.4, ratio


def test_torch_streams_the_first_chunk_before_the_last_is_made(runaway):
    e = _engine(runaway, "torch")
    decoder = e.model.feat_decoder
    made = []
    forward = decoder.forward
    decoder.forward = lambda *a, **k: (made.append(1), forward(*a, **k))[1]
    text = "Sim, claro."
    chunks = e.synthesize(text, "pt", voice=_ref(0))
    first = next(chunks)
    at_first = len(made)
    rest = list(chunks)
    assert len(first) == round(e.patch_s * e.sample_rate) == 7680      # 160 ms at 48 kHz
    assert at_first <= 2 < len(made) == e.max_patches(text)
    assert len(rest) == len(made) - 1


def test_an_mlx_model_folder_is_refused_by_the_torch_backend_in_one_line(tiny, tmp_path):
    """Issue 38: the wrong backend for the folder fails at load with what to do, not with a
    loader's traceback deep in voxcpm."""
    if importlib.util.find_spec("mlx_audio") is None:
        pytest.skip("mlx_audio is not installed (it makes the MLX folder)")
    from tests.unit.tiny_voxcpm2 import build_tiny_voxcpm2_mlx_4bit

    q = build_tiny_voxcpm2_mlx_4bit(tiny, tmp_path / "q4")
    e = engines.build("tts", "voxcpm2", {"backend": "torch", "model": str(q)})
    with pytest.raises(StartupError) as info:
        e.load()
    line = str(info.value)
    assert "\n" not in line and "is an MLX model folder" in line
    assert 'backend = "mlx"' in line and "voxweft models fetch voxcpm2" in line


def test_the_4bit_mlx_conversion_speaks(tiny, tmp_path):
    if importlib.util.find_spec("mlx_audio") is None:
        pytest.skip("mlx_audio is not installed")
    from tests.unit.tiny_voxcpm2 import build_tiny_voxcpm2_mlx_4bit
    q = build_tiny_voxcpm2_mlx_4bit(tiny, tmp_path / "q4")
    a = _audio(_engine(q, "mlx"), voice=_ref(0))
    assert len(a) > 0.1 * 48000 and np.isfinite(a).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_voice_is_encoded_once_and_reused_by_every_piece(tiny, backend):
    e = _engine(tiny, backend)
    vae = e.model.audio_vae
    calls = []
    encode = vae.encode
    vae.encode = lambda *a, **k: (calls.append(1), encode(*a, **k))[1]
    text = "Olá, tudo bem? Eu vim aqui hoje, com os meus amigos, para falar de música."
    assert len(e.plan(text)) >= 3
    # On mlx the pieces are sized by the pace measured so far, and the first call measures
    # more: the same pace for both calls, so the same pieces (else the audio differs where
    # the plan does, on a machine whose speed moves the plan; CI on 32171e0).
    pace = copy.deepcopy(e.pace)
    first = _audio(e, text, voice=_ref(0))
    assert len(calls) == 1 and e.encoded == 1        # one encoding for all the pieces
    e.pace = copy.deepcopy(pace)
    assert np.array_equal(first, _audio(e, text, voice=_ref(0)))   # reused: same voice
    assert len(calls) == 1
    _audio(e, text, voice=_ref(1))                   # the next utterance's voice: once more
    assert len(calls) == 2
    prompt = Reference(key="r1", pcm=_ref(1).pcm, sample_rate=BUS_RATE, text="Bom dia.")
    _audio(e, text, voice=prompt)                    # the same audio as a prompt: its own
    assert len(calls) == 3


@pytest.mark.skipif(importlib.util.find_spec("mlx_audio") is None, reason="no mlx_audio")
def test_mlx_first_audio_leaves_after_a_short_first_piece(runaway):
    e = _engine(runaway, "mlx", max_s_per_char=0.05)
    text = ("Hoje de manhã eu fui ao mercado da cidade comprar frutas e legumes frescos "
            "para a semana inteira, e depois voltei para casa com a minha irmã mais nova.")
    e.pace = Pace(prefill_s=0.1, rate=0.3)   # a fast machine: pieces grow quickly
    pieces = e.plan(text)
    assert pieces[0] == "Hoje de manhã"    # a few words, not ending on "eu" or "ao"
    assert len(pieces) >= 3 and len(pieces[1]) > len(pieces[0])     # then longer pieces
    # A slower one: each piece made while the one before plays (a later first audio).
    fast, e.pace = e.pace, Pace(prefill_s=0.3, rate=0.6)
    slow = e.plan(text)
    assert " ".join(slow) == text and len(slow[0]) >= len(pieces[0])
    assert holes(slow, 0.3, 0.6, e.pace.s_per_char) == [], slow
    e.pace = fast
    assert " ".join(pieces) == text
    assert e.plan(text, eager=False)[0] != pieces[0]     # not eager: long pieces at once
    asked = []
    generate = e.model.generate
    e.model.generate = lambda piece, **k: (asked.append(piece), generate(piece, **k))[1]
    chunks = e.synthesize(text, "pt", voice=_ref(0))
    first = next(chunks)
    assert asked == [pieces[0]]       # the first audio left when only the first piece was made
    assert len(first) <= (e.max_patches(pieces[0]) * e.patch_s + 0.01) * e.sample_rate
    list(chunks)
    assert asked == pieces
    # Each piece made taught the pace what making costs here (not the time between pieces).
    assert len(e.pace.pieces) == len(pieces) and all(w > 0 for w, _, _ in e.pace.pieces)


@pytest.mark.skipif(importlib.util.find_spec("mlx_audio") is None, reason="no mlx_audio")
def test_mlx_bfloat16_audio_comes_out_float32(tiny):
    import mlx.core as mx

    e = _engine(tiny, "mlx")
    e.model.audio_vae.set_dtype(mx.bfloat16)    # as a model stored in bfloat16 decodes
    out = list(e.synthesize(TEXT, "pt", voice=_ref(0)))
    assert out and all(c.dtype == np.float32 and np.isfinite(c).all() for c in out)
    assert max(np.abs(c).max() for c in out) > 0.01


@pytest.mark.skipif(importlib.util.find_spec("mlx_audio") is None, reason="no mlx_audio")
def test_mlx_cache_is_bounded_and_compiling_keeps_the_voice(tiny):
    import mlx.core as mx

    plain = _engine(tiny, "mlx", compile=False, cache_limit_mb=64)
    assert mx.set_cache_limit(0) == 64 << 20
    compiled = _engine(tiny, "mlx")
    assert mx.set_cache_limit(0) == 512 << 20          # the default bound
    assert compiled.compiled and not plain.compiled
    # The DiT estimator only (fixed shapes); the LMs' layers, whose KV cache grows, are not
    # (compiled, they are traced again at every new length and every trace is kept).
    same = type(plain.model.feat_decoder.estimator)
    assert type(compiled.model.feat_decoder.estimator) is not same   # mx.compile's wrapper
    for mine, theirs in zip(compiled.model.base_lm.layers, plain.model.base_lm.layers,
                            strict=True):
        assert type(mine.self_attn) is type(theirs.self_attn)
        assert type(mine.mlp) is type(theirs.mlp)
    a, b = _audio(plain, voice=_ref(0)), _audio(compiled, voice=_ref(0))
    assert len(a) == len(b) and np.allclose(a, b, atol=2e-3)


def test_a_prompts_words_and_the_text_are_two_words_apart():
    from voxweft.actors.engines.tts.voxcpm2 import _joined

    assert _joined("Good morning there.") + "Olá" == "Good morning there. Olá"
    assert _joined("ends in a space ") == "ends in a space "
    assert _joined("") == ""


# --------------------------------------------------------------------------- the voice memory

def test_voiced_drops_pauses_and_the_echo_gates_zeros():
    speech = _speech(0, 2.0)
    pcm = np.concatenate([speech, np.zeros(BUS_RATE, np.float32),            # gated: zeros
                          1e-4 * np.ones(BUS_RATE // 2, np.float32), speech])  # room noise
    kept = voiced(pcm)
    assert abs(len(kept) - 2 * len(speech)) <= 2 * 320
    dip = 2e-3 * np.ones(BUS_RATE // 10, np.float32)   # 100 ms quiet between syllables: kept
    assert len(voiced(np.concatenate([speech, dip, speech]))) == 2 * len(speech) + len(dip)
    gated = np.zeros(BUS_RATE // 10, np.float32)      # 100 ms the echo gate took: never kept
    assert len(voiced(np.concatenate([speech, gated, speech]))) == 2 * len(speech)


def test_the_memory_is_bounded_and_a_reference_ends_at_its_utterance():
    memory = VoiceMemory(min_s=3.0, max_s=10.0, keep=4)
    memory.add("u0", _speech(0, 2.0), BUS_RATE)
    assert memory.reference("u0") is None                  # 2 s: too little yet
    memory.add("u1", _speech(1, 2.0), BUS_RATE)
    ref = memory.reference("u1")
    assert ref.key == "u0+u1" and abs(ref.duration_s - 4.0) < 0.05
    for i in range(2, 8):
        memory.add(f"u{i}", _speech(i % 3, 4.0), BUS_RATE)
    assert list(memory.utterances) == ["u4", "u5", "u6", "u7"] and memory.held_s == 16.0
    ref = memory.reference("u5")                            # not the later u6, u7
    assert ref.key == "u4+u5" and abs(ref.duration_s - 8.0) < 0.05
    ref = memory.reference("u7")                            # at most 10 s, newest first
    assert ref.key == "u5+u6+u7" and abs(ref.duration_s - 10.0) < 0.02
    assert memory.reference("unknown").key.endswith("u7")   # a draft's: the latest
    with pytest.raises(ValueError, match="16000 Hz mono"):
        memory.add("x", _speech(0), 48000)


def test_a_draft_voice_is_replaced_by_the_whole_utterance_and_keeps_its_words():
    memory = VoiceMemory(min_s=1.0, max_s=10.0)
    memory.add("u0", _speech(0, 1.5), BUS_RATE)
    memory.words("u0", "hello there")
    memory.add("u0", _speech(0, 3.0), BUS_RATE)
    assert abs(memory.reference("u0").duration_s - 3.0) < 0.05
    prompt = memory.prompt("u0")
    assert prompt.text == "hello there" and prompt.key == "u0:prompt"


# --------------------------------------------------------------------------- the tts actor

@pytest.mark.parametrize("backend", BACKENDS)
def test_tts_speaks_a_translation_in_the_voice_the_segmenter_heard(tiny, backend):
    raw = copy.deepcopy(load(None).raw)
    raw["actors"]["tts"].update(engine="voxcpm2", settings={
        "backend": backend, "model": str(tiny), "inference_timesteps": 2, "seed": 3})
    topo = parse(raw)
    actor = TtsActor(topo, topo.actors["tts"])
    assert ("segmenter", Voice) in actor.subscriptions()
    say = Translation(utt="u1", src_lang="en", tgt_lang="pt", source_text="-", text=TEXT)
    run_actor(actor, [Voice(utt="u1", pcm=_speech(0), sample_rate=BUS_RATE)], src="segmenter")
    out = run_actor(actor, [say], src="mt", loaded=True)
    audio = np.concatenate([m.pcm for m in out if isinstance(m, SpeechChunk)])
    assert actor.counters["voice_speaker"] == 1
    heard = actor.voices.reference("u1")
    assert heard.key == "u1" and heard.duration_s > 3.0
    assert np.array_equal(audio, _audio(actor.engine, voice=heard))

    raw["actors"]["tts"]["settings"]["voice"] = "default"
    topo = parse(raw)
    assert ("segmenter", Voice) not in TtsActor(topo, topo.actors["tts"]).subscriptions()


def test_time_stretch_keeps_the_pitch():
    t = np.arange(48000) / 48000
    tone = np.sin(2 * np.pi * 220 * t).astype(np.float32)
    fast = time_stretch(tone, 48000, 1.25)
    assert abs(len(fast) - 48000 / 1.25) < 0.02 * 48000
    spectrum = np.abs(np.fft.rfft(fast[4000:-4000] * np.hanning(len(fast) - 8000)))
    peak = np.argmax(spectrum) * 48000 / (len(fast) - 8000)
    assert abs(peak - 220) < 5, peak
    assert time_stretch(tone, 48000, 1.0) is not None
    with pytest.raises(ValueError, match="outside"):
        time_stretch(tone, 48000, 3.0)


def test_only_a_tts_that_speaks_in_the_speakers_voice_hears_the_speaker(tiny):
    from voxweft.actors import actor_class

    raw = copy.deepcopy(load(None).raw)
    for engine, settings, wants in (("kokoro", {}, False),
                                    ("voxcpm2", {"model": str(tiny)}, True)):
        raw["actors"]["tts"].update(engine=engine, settings=settings)
        topo = parse(raw)
        hears = {name for name in ("segmenter", "asr", "mt", "tts", "player")
                 if any(kind is Voice for _, kind in
                        actor_class(name)(topo, topo.actors[name]).subscriptions())}
        assert hears == ({"tts"} if wants else set()), engine


def test_the_v2_import_leaves_voxcpm_findable():
    # The engine enters voxcpm without its __init__ (torchaudio): the package must still have
    # a spec, or importlib.util.find_spec("voxcpm") raises in that process (seen in CI).
    if importlib.util.find_spec("voxcpm") is None:
        pytest.skip("voxcpm is not installed")
    from voxweft.actors.engines.tts.voxcpm2 import voxcpm2_model_class

    assert voxcpm2_model_class().__name__ == "VoxCPM2Model"
    assert importlib.util.find_spec("voxcpm") is not None
    assert engines.installed(["voxcpm"], [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_budget_is_measured_with_a_speaker_reference_as_it_will_run(tiny, backend):
    """Speaking in the speaker's voice, VoxCPM2 prefills the reference with every piece (~4x
    the prefill without): warm-up and `doctor --measure` time it with one (issue 38)."""
    from voxweft.actors import budget
    from voxweft.actors.engines.tts import warmup_voice

    e = _engine(tiny, backend)   # voice = "speaker" by default
    voice = warmup_voice(e)
    assert voice is not None and 3.0 <= voice.duration_s <= 10.0
    measured = budget.warm_tts(e, "pt", voice)
    assert e.encoded == 1 and measured["rtf"] > 0   # the reference was used, encoded once
    assert measured["stretches"] == 1.0   # it speaks faster only by stretching: no credit
    # what each piece costs, as its pace learnt it: the GPU line adds a prefill for each
    # translation made apart (budget.stage_need)
    assert measured["prefill_s"] == round(e.pace.prefill_s, 3) and measured["gen_rate"] > 0
    assert warmup_voice(_engine(tiny, backend, voice="default")) is None


def test_a_torch_model_folder_is_refused_by_the_mlx_backend_in_one_line(tiny, tmp_path):
    """Issue 38: openbmb's torch folder keeps the VAE in audiovae.pth only, which mlx-audio
    never reads; the mlx backend says so at load. The tiny folder (the VAE in its weights
    too, as mlx-audio's conversions have it) still loads (the tests above)."""
    if importlib.util.find_spec("mlx_audio") is None:
        pytest.skip("mlx_audio is not installed")
    import shutil

    from safetensors.torch import load_file, save_file

    torch_folder = tmp_path / "openbmb-like"
    shutil.copytree(tiny, torch_folder)
    weights = load_file(str(tiny / "model.safetensors"))
    assert any(k.startswith("audio_vae.") for k in weights)
    save_file({k: v for k, v in weights.items() if not k.startswith("audio_vae.")},
              str(torch_folder / "model.safetensors"))
    e = engines.build("tts", "voxcpm2", {"backend": "mlx", "model": str(torch_folder)})
    with pytest.raises(StartupError) as info:
        e.load()
    line = str(info.value)
    assert "\n" not in line and "only in audiovae.pth" in line
    assert 'backend = "torch"' in line and "voxweft models fetch voxcpm2-mlx-4bit" in line
    torch_engine = engines.build("tts", "voxcpm2", {"backend": "torch",
                                                    "model": str(torch_folder)})
    torch_engine.load()   # voxcpm takes the VAE from audiovae.pth: the folder is fine for it
