"""The CT2 -> MLX Whisper converter on a tiny random Whisper (CTranslate2's converter as input).

A random HF WhisperForConditionalGeneration (d_model 64, 2+2 layers, the real 51865-token
vocabulary and 1500 encoder positions) is converted offline by ctranslate2's
TransformersConverter (float32, int8 and float16), then to MLX; the MLX model must compute
what the torch model computes. The same folder drives the mlx-whisper engine's real code path.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from voxweft.actors.engines.asr.whisper_convert import (
    ConversionError,
    convert,
    mlx_layout,
    read_model_bin,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

pytestmark = pytest.mark.timeout(300)

N_MELS, FRAMES = 80, 3000   # 30 s of 10 ms log-mel frames


def _packaged_tokenizer() -> bytes:
    try:
        from voxweft.actors.engines.asr.faster_whisper import packaged_whisper_base
    except ImportError:
        from voxweft.actors.asr import packaged_whisper_base
    return packaged_whisper_base()["tokenizer.json"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """{"hf": the torch model, "ct2-<quantization>": CTranslate2 folders, "root": tmp}."""
    from transformers import (
        PreTrainedTokenizerFast,
        WhisperConfig,
        WhisperForConditionalGeneration,
    )

    root = tmp_path_factory.mktemp("tiny-whisper")
    hf_dir = root / "hf"
    hf_dir.mkdir()
    (hf_dir / "tokenizer.json").write_bytes(_packaged_tokenizer())
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(hf_dir / "tokenizer.json"))
    config = WhisperConfig(
        vocab_size=51865, num_mel_bins=N_MELS, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
        decoder_ffn_dim=256, max_source_positions=1500, max_target_positions=448)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():   # biases start at 0 and norms at 1: make every weight distinct
        for name, param in model.named_parameters():
            if name != "model.encoder.embed_positions.weight":   # Whisper's sinusoids stay
                param.add_(torch.randn_like(param) * 0.02)
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    found = {"hf": model, "root": root}
    for quantization in ("float32", "int8", "float16"):
        out = root / f"ct2-{quantization}"
        ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(
            str(out), quantization=quantization, force=True)
        found[f"ct2-{quantization}"] = out
    return found


@pytest.fixture(scope="module")
def features() -> np.ndarray:
    """Random log-mel features, torch's layout (batch, mels, frames)."""
    return np.random.default_rng(0).standard_normal((1, N_MELS, FRAMES)).astype(np.float32)


TOKENS = np.array([[50258, 50259, 50359, 50363, 400, 1000, 7]])   # sot en transcribe notimestamps


@pytest.fixture(scope="module")
def reference(tiny, features) -> tuple[np.ndarray, np.ndarray]:
    """The torch model's encoder output and logits for `features` and TOKENS."""
    with torch.no_grad():
        feats = torch.from_numpy(features)
        encoded = tiny["hf"].model.encoder(feats).last_hidden_state.numpy()
        logits = tiny["hf"](input_features=feats,
                            decoder_input_ids=torch.from_numpy(TOKENS)).logits.numpy()
    return encoded, logits


def _mlx_outputs(folder: Path, features: np.ndarray, dtype: str = "float32"):
    mx = pytest.importorskip("mlx.core")
    from mlx_whisper.load_models import load_model

    model = load_model(str(folder), dtype=getattr(mx, dtype))
    mel = mx.array(features.transpose(0, 2, 1)).astype(getattr(mx, dtype))   # MLX: (B, T, mels)
    encoded = model.encoder(mel)
    logits = model(mel, mx.array(TOKENS))
    return model, np.array(encoded.astype(mx.float32)), np.array(logits.astype(mx.float32))


def test_model_bin_is_read_as_ctranslate2_wrote_it(tiny):
    model = read_model_bin((tiny["ct2-float32"] / "model.bin").read_bytes())
    assert (model.spec, model.binary_version) == ("WhisperSpec", 6)
    # The output projection is stored once, as an alias of the token embedding.
    assert model.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    hf = tiny["hf"].model
    np.testing.assert_array_equal(model.raw("encoder/conv1/weight"),
                                  hf.encoder.conv1.weight.detach().numpy())
    fused = model.raw("encoder/layer_0/self_attention/linear_0/bias")
    attn = hf.encoder.layers[0].self_attn
    np.testing.assert_array_equal(fused[:64], attn.q_proj.bias.detach().numpy())
    assert not fused[64:128].any()   # Whisper's key has no bias: CTranslate2 stores zeros
    np.testing.assert_array_equal(fused[128:], attn.v_proj.bias.detach().numpy())
    assert model.scalar("decoder/num_heads") == 4


def test_int8_weights_are_divided_by_their_row_scale(tiny):
    """CTranslate2 stores round(w * 127 / max|row|): dequantized, within half a step of w."""
    _dims, weights = mlx_layout(read_model_bin((tiny["ct2-int8"] / "model.bin").read_bytes()))
    hf = tiny["hf"].model
    pairs = [("encoder.blocks.1.mlp1.weight", hf.encoder.layers[1].fc1.weight),
             ("decoder.blocks.0.cross_attn.value.weight",
              hf.decoder.layers[0].encoder_attn.v_proj.weight),
             ("decoder.token_embedding.weight", hf.decoder.embed_tokens.weight),
             ("encoder.conv2.weight", hf.encoder.conv2.weight.permute(0, 2, 1))]
    for name, expected in pairs:
        expected = expected.detach().numpy()
        step = np.abs(expected.reshape(len(expected), -1)).max(axis=1) / 127
        error = np.abs(weights[name] - expected).reshape(len(expected), -1).max(axis=1)
        assert (error <= step / 2 + 1e-6).all(), name


def test_every_mlx_parameter_is_filled_and_no_other(tiny):
    pytest.importorskip("mlx.core")
    from mlx.utils import tree_flatten
    from mlx_whisper.whisper import ModelDimensions, Whisper

    ct2 = read_model_bin((tiny["ct2-int8"] / "model.bin").read_bytes())
    config = json.loads((tiny["ct2-int8"] / "config.json").read_text())
    dims, weights = mlx_layout(ct2, config["alignment_heads"])
    assert dims == {"n_mels": 80, "n_audio_ctx": 1500, "n_audio_state": 64, "n_audio_head": 4,
                    "n_audio_layer": 2, "n_vocab": 51865, "n_text_ctx": 448,
                    "n_text_state": 64, "n_text_head": 4, "n_text_layer": 2}
    expected = {name: value.shape for name, value in
                tree_flatten(Whisper(ModelDimensions(**dims)).parameters())}
    expected.pop("alignment_heads")   # its shape depends on the heads chosen
    assert {k: v.shape for k, v in weights.items() if k != "alignment_heads"} == expected
    assert weights["alignment_heads"].tolist() == [list(h) for h in config["alignment_heads"]]


@pytest.mark.parametrize("quantization", ["float32", "float16", "int8"])
def test_mlx_model_computes_what_torch_computes(tiny, features, reference, quantization,
                                                 tmp_path):
    folder = convert(tiny[f"ct2-{quantization}"], tmp_path / "mlx", dtype="float32")
    assert json.loads((folder / "config.json").read_text())["model_type"] == "whisper"
    _model, encoded, logits = _mlx_outputs(folder, features)
    ref_encoded, ref_logits = reference
    # Measured, outputs up to 3.2 (encoder) and 1.0 (logits): float32 1.8e-4 and 6.6e-7
    # (the encoder's sinusoids are recomputed in float32); float16 storage 1.2e-3 and 6.1e-4,
    # int8 6.1e-3 and 1.3e-2 (the rounding of the weights).
    encoder_tol, logits_tol = {"float32": (5e-4, 1e-5), "float16": (5e-3, 5e-3),
                               "int8": (2e-2, 5e-2)}[quantization]
    assert np.abs(encoded - ref_encoded).max() < encoder_tol
    assert np.abs(logits - ref_logits).max() < logits_tol


def test_float16_output_and_files_as_bytes(tiny, features, reference, tmp_path):
    files = {name: (tiny["ct2-float16"] / name).read_bytes()
             for name in ("model.bin", "config.json")}
    folder = convert(files, tmp_path / "mlx16", dtype="float16")
    _model, encoded, _logits = _mlx_outputs(folder, features, "float16")
    ref_encoded, _ = reference
    assert np.abs(encoded - ref_encoded).max() < 2e-2   # measured 3.5e-3
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "weights.safetensors"]


def test_4_bit_model_loads_quantized(tiny, features, reference, tmp_path):
    nn = pytest.importorskip("mlx.nn")
    folder = convert(tiny["ct2-float32"], tmp_path / "q4", dtype="float32", bits=4)
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 4}
    model, encoded, logits = _mlx_outputs(folder, features)
    assert isinstance(model.encoder.blocks[0].mlp1, nn.QuantizedLinear)
    assert isinstance(model.decoder.token_embedding, nn.QuantizedEmbedding)
    ref_encoded, ref_logits = reference
    # 4 bits per weight: close, not equal (measured: 3.5e-2 on the encoder, 0.13 on logits)
    assert np.abs(encoded - ref_encoded).max() < 0.2
    assert np.corrcoef(logits.ravel(), ref_logits.ravel())[0, 1] > 0.95


def _header(spec: str = "WhisperSpec", version: int = 6) -> bytes:
    name = spec.encode() + b"\0"
    return struct.pack("<I", version) + struct.pack("<H", len(name)) + name + \
        struct.pack("<II", 3, 0)


def test_bad_inputs_are_refused_with_a_reason(tiny, tmp_path):
    with pytest.raises(ConversionError, match="binary version 2"):
        read_model_bin(_header(version=2))
    with pytest.raises(ConversionError, match="truncated"):
        read_model_bin(_header()[:-2])
    with pytest.raises(ConversionError, match="not WhisperSpec"):
        mlx_layout(read_model_bin(_header("TransformerSpec") + struct.pack("<I", 0)))
    with pytest.raises(ConversionError, match="no model.bin"):
        convert(tmp_path, tmp_path / "out")
    with pytest.raises(ValueError, match="dtype = 'int8' is not one of: float16, float32"):
        convert(tiny["ct2-float32"], tmp_path / "out", dtype="int8")
    with pytest.raises(ValueError, match="bits = 3"):
        convert(tiny["ct2-float32"], tmp_path / "out", bits=3)


# --- the engine on the tiny model -----------------------------------------------------------

def test_engine_decodes_a_short_window_and_restores_the_encoder(tiny, tmp_path):
    pytest.importorskip("mlx.core")
    from voxweft.actors.engines.asr.mlx_whisper import MlxWhisperEngine

    folder = convert(tiny["ct2-float32"], tmp_path / "mlx", dtype="float32")
    engine = MlxWhisperEngine(model=str(folder), window_s=5, threads=1)
    assert "pt" in engine.languages() and len(engine.languages()) == 99
    engine.load()
    assert engine.dtype == "float32"   # auto on a CPU
    noise = np.random.default_rng(1).standard_normal(2 * 16000).astype(np.float32) * 0.1
    assert isinstance(engine.transcribe(noise, "en"), str)   # a 5 s window...
    assert engine.model.encoder._positional_embedding.shape == (1500, 64)   # ...then 30 s again


def test_engine_hands_a_long_utterance_to_mlx_whisper_with_the_same_model(tiny, tmp_path):
    pytest.importorskip("mlx.core")
    from mlx_whisper.transcribe import ModelHolder
    from safetensors.numpy import load_file, save_file

    from voxweft.actors.engines.asr.mlx_whisper import MlxWhisperEngine

    folder = convert(tiny["ct2-float32"], tmp_path / "mlx", dtype="float32")
    # A random decoder never ends (224 tokens and 5 temperature fallbacks per window, 40 s):
    # make every position output `big`, the embedding of no-speech (so each window counts as
    # silence) and, nearly, of end-of-text (so a decode stops after one token).
    weights = load_file(folder / "weights.safetensors")
    eot, no_speech = 50257, 50362
    big = np.random.default_rng(2).standard_normal(64).astype(np.float32) * 10
    weights["decoder.token_embedding.weight"][no_speech] = big
    weights["decoder.token_embedding.weight"][eot] = big * 0.9
    weights["decoder.ln.weight"][:] = 0
    weights["decoder.ln.bias"][:] = big
    save_file(weights, folder / "weights.safetensors")
    engine = MlxWhisperEngine(model=str(folder), window_s=30, threads=1)
    engine.load()
    speech = np.random.default_rng(3).standard_normal(31 * 16000).astype(np.float32) * 0.1
    assert engine.transcribe(speech, "en") == ""   # 2 windows of mlx_whisper.transcribe
    assert ModelHolder.model is engine.model   # not loaded a second time


def test_engine_settings_are_checked(tiny, tmp_path):
    from voxweft.actors.engines.asr.mlx_whisper import MlxWhisperEngine

    with pytest.raises(ValueError, match="model = 'nowhere' is none of: base, tiny.en"):
        MlxWhisperEngine(model="nowhere")
    with pytest.raises(ValueError, match="CTranslate2 folder; convert it"):
        MlxWhisperEngine(model=str(tiny["ct2-float32"]))
    with pytest.raises(ValueError, match="dtype = 'int8' is not one of: auto, float16, float32"):
        MlxWhisperEngine(dtype="int8")
    with pytest.raises(ValueError, match="unknown key 'beam_size'"):
        MlxWhisperEngine(beam_size=5)   # mlx_whisper decodes greedily only
    folder = convert(tiny["ct2-float32"], tmp_path / "mlx", dtype="float32")
    with pytest.raises(ValueError, match="bits = 4 applies to the packaged models"):
        MlxWhisperEngine(model=str(folder), bits=4)
    assert MlxWhisperEngine(model="tiny.en").languages() == frozenset({"en"})


def test_whisper_language_codes_are_mlx_whispers():
    pytest.importorskip("mlx.core")
    from mlx_whisper.tokenizer import LANGUAGES

    from voxweft.actors.engines.asr.mlx_whisper import WHISPER_LANGUAGES

    assert WHISPER_LANGUAGES == tuple(LANGUAGES)
