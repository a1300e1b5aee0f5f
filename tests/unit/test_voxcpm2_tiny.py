"""The tiny random VoxCPM2 (tests/unit/tiny_voxcpm2.py) through both real backends.

PyTorch `voxcpm` and MLX `mlx-audio` load the same folder and generate 48 kHz audio; the
mlx-audio 4-bit conversion loads and generates; a stop head that never stops is cut at the
requested number of patches. Skipped only where a backend is not installed: an installed but
broken one fails.
"""

from __future__ import annotations

import importlib.util
import json
import time

import numpy as np
import pytest

from tests.unit.tiny_voxcpm2 import (
    AUDIO_MARKERS,
    MARKER_ID,
    OUT_RATE,
    SAMPLES_PER_PATCH,
    build_tiny_voxcpm2,
    build_tiny_voxcpm2_mlx_4bit,
)
from voxweft.actors.engines.tts.voxcpm2 import voxcpm2_model_class


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(n) is not None for n in names)


HAS_TORCH = _installed("torch", "transformers", "voxcpm")
HAS_MLX = _installed("mlx", "mlx_audio", "transformers")
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="voxcpm (PyTorch backend) not installed")
needs_mlx = pytest.mark.skipif(not HAS_MLX, reason="mlx-audio (MLX backend) not installed")
needs_builder = pytest.mark.skipif(not HAS_TORCH, reason="the builder needs torch and voxcpm")

pytestmark = [
    pytest.mark.timeout(120),
    # third-party noise: voxcpm's VAE uses torch.nn.utils.weight_norm and torch.jit.script,
    # librosa pulls audioread's deprecated stdlib modules
    pytest.mark.filterwarnings("ignore:.*weight_norm.* is deprecated:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*torch.jit.script.* is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:'(aifc|audioop|sunau)' is deprecated:DeprecationWarning"),
]

TEXT = "O gato está no jardim hoje."      # 6 words, accents included
STEPS = 2                                  # inference_timesteps: the CFM solver's steps
BUILD_S: list[float] = []


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread (oversubscribed threads are ~100x slower on 2 cores), then restore."""
    if not HAS_TORCH:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not HAS_TORCH:
        pytest.skip("the builder needs torch and voxcpm")
    out = tmp_path_factory.mktemp("voxcpm2") / "tiny"
    start = time.perf_counter()
    build_tiny_voxcpm2(out)
    BUILD_S.append(time.perf_counter() - start)
    return out


@pytest.fixture(scope="module")
def runaway(tmp_path_factory):
    if not HAS_TORCH:
        pytest.skip("the builder needs torch and voxcpm")
    return build_tiny_voxcpm2(tmp_path_factory.mktemp("voxcpm2") / "runaway", runaway=True)


@pytest.fixture
def vm(monkeypatch):
    """voxcpm.model.voxcpm2 with its per-patch tqdm bar turned off."""
    voxcpm2_model_class()
    import voxcpm.model.voxcpm2 as module

    monkeypatch.setattr(module, "tqdm", lambda it, *a, **k: it)
    return module


def _torch_model(vm, path):
    return vm.VoxCPM2Model.from_local(str(path), optimize=False, device="cpu")


# -- the folder ------------------------------------------------------------------------------

@needs_builder
def test_folder_is_small_and_complete(tiny):
    names = {p.name for p in tiny.iterdir()}
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors",
            "audiovae.pth"} <= names
    assert "audiovae.safetensors" not in names        # mlx-audio would load it as stray keys
    config = json.loads((tiny / "config.json").read_text())
    assert config["architecture"] == "voxcpm2"
    vae = config["audio_vae_config"]
    assert (vae["sample_rate"], vae["out_sample_rate"]) == (16000, 48000)
    assert sum(p.stat().st_size for p in tiny.iterdir()) < 5_000_000
    assert BUILD_S[0] < 30        # ~1.5 s alone; generous for a loaded 2-core machine


@needs_builder
def test_same_seed_same_weights(tiny, tmp_path):
    again = build_tiny_voxcpm2(tmp_path / "again")
    other = build_tiny_voxcpm2(tmp_path / "other", seed=1)
    weights = (tiny / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == weights
    assert (other / "model.safetensors").read_bytes() != weights


@needs_builder
def test_tokenizer_covers_latin_text(tiny):
    from transformers import AutoTokenizer, LlamaTokenizerFast

    text = "Ação, coração; pão! Où est l'hôtel? ¿Qué tal, niño? Straße 42 — “ok” 東京 🙂"
    llama = LlamaTokenizerFast.from_pretrained(str(tiny))
    auto = AutoTokenizer.from_pretrained(str(tiny))
    ids = llama.convert_tokens_to_ids(llama.tokenize(text))
    assert ids == auto.convert_tokens_to_ids(auto.tokenize(text))
    assert llama.unk_token_id not in ids
    assert llama.decode(ids) == text
    assert llama.convert_ids_to_tokens(list(range(MARKER_ID, MARKER_ID + 4))) == AUDIO_MARKERS
    assert not set(range(MARKER_ID, MARKER_ID + 4)) & set(ids)
    assert len(llama) >= 110


# -- PyTorch backend -------------------------------------------------------------------------

@needs_torch
def test_torch_streams_48k_chunks_and_stops(tiny, vm):
    model = _torch_model(vm, tiny)
    assert model.sample_rate == OUT_RATE and model._encode_sample_rate == 16000
    chunks = list(model.generate_streaming(TEXT, inference_timesteps=STEPS))
    assert len(chunks) == 4                   # min_len 2 + 2: the stop head always says stop
    for chunk in chunks:
        assert chunk.dtype == vm.torch.float32
        assert tuple(chunk.shape) == (1, SAMPLES_PER_PATCH)
    audio = np.concatenate([c.numpy()[0] for c in chunks])
    assert np.isfinite(audio).all()
    assert 0.05 < audio.std() and np.abs(audio).max() < 1.0
    assert abs(audio.mean()) < 0.1

    longer = list(model.generate_streaming(TEXT, min_len=6, inference_timesteps=STEPS))
    assert len(longer) == 8


@needs_torch
def test_torch_runaway_is_cut_at_max_len(runaway, vm):
    model = _torch_model(vm, runaway)
    gen = model._generate_with_prompt_cache(TEXT, None, max_len=5, inference_timesteps=STEPS,
                                            streaming=True)
    assert sum(1 for _ in gen) == 5
    # without a max_len below it, the text-length bound applies: 6 patches per token + 10
    short = "Oi."
    bound = int(len(model.text_tokenizer(short)) * 6.0 + 10)
    gen = model._generate_with_prompt_cache(short, None, max_len=1000,
                                            inference_timesteps=STEPS, streaming=True)
    assert sum(1 for _ in gen) == bound


# -- MLX backend -----------------------------------------------------------------------------

def _mlx_generate(model, **kwargs) -> np.ndarray:
    results = list(model.generate(TEXT, inference_timesteps=STEPS, **kwargs))
    assert len(results) == 1                  # mlx-audio 0.6.2: one final result for VoxCPM2
    assert results[0].sample_rate == OUT_RATE
    audio = np.asarray(results[0].audio, dtype=np.float32)
    assert np.isfinite(audio).all() and 0.05 < audio.std() and np.abs(audio).max() < 1.0
    return audio


@needs_mlx
@needs_torch
def test_mlx_loads_the_same_folder(tiny):
    from mlx_audio.tts.models.voxcpm2 import Model
    from mlx_audio.tts.utils import load

    model = load(str(tiny))
    assert isinstance(model, Model) and model.sample_rate == OUT_RATE
    ref = (0.2 * np.sin(2 * np.pi * 220 * np.arange(24000) / 48000)).astype(np.float32)
    for kwargs in ({}, {"ref_audio": ref}):
        audio = _mlx_generate(model, **kwargs)
        assert len(audio) == 4 * SAMPLES_PER_PATCH + 8    # mlx's VAE leaves 8 extra samples


@needs_mlx
@needs_torch
def test_mlx_computes_what_torch_computes(tiny, vm):
    import mlx.core as mx
    import torch
    from mlx_audio.tts.utils import load

    tm, mm = _torch_model(vm, tiny), load(str(tiny))
    rng = np.random.default_rng(0)
    z = rng.standard_normal((1, 64, 8)).astype(np.float32)          # 8 latent frames
    with torch.no_grad():
        expect = tm.audio_vae.decode(torch.from_numpy(z)).numpy().ravel()
    got = np.asarray(mm.audio_vae.decode(mx.array(z.transpose(0, 2, 1)))).ravel()
    np.testing.assert_allclose(got[:len(expect)], expect, atol=1e-4)
    x = rng.standard_normal((1, 7, 64)).astype(np.float32)
    with torch.no_grad():
        expect = tm.base_lm(torch.from_numpy(x), is_causal=True)[0].numpy()
    np.testing.assert_allclose(np.asarray(mm.base_lm(mx.array(x))[0]), expect, atol=1e-4)


@needs_mlx
@needs_torch
def test_mlx_runaway_is_cut_at_max_tokens(runaway):
    from mlx_audio.tts.utils import load

    audio = _mlx_generate(load(str(runaway)), max_tokens=6)
    assert len(audio) == 6 * SAMPLES_PER_PATCH + 8


@needs_mlx
@needs_torch
def test_mlx_4bit_conversion_loads_and_generates(tiny, tmp_path):
    import mlx.nn as nn
    from mlx_audio.tts.utils import load

    q4 = build_tiny_voxcpm2_mlx_4bit(tiny, tmp_path / "q4")
    config = json.loads((q4 / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    assert (q4 / "model.safetensors").stat().st_size < (tiny / "model.safetensors").stat().st_size
    model = load(str(q4))
    quantized = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    assert len(quantized) > 30
    assert len(_mlx_generate(model)) == 4 * SAMPLES_PER_PATCH + 8
