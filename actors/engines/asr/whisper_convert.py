"""Whisper converted for CTranslate2 -> the MLX Whisper layout that mlx_whisper loads.

The input is a CTranslate2 Whisper folder (model.bin, config.json, ...) or the same files
as bytes in a dict (the packaged Whisper base is joined in memory). The output folder holds
what ``mlx_whisper.load_models.load_model`` reads: ``config.json`` (Whisper's
ModelDimensions, plus ``quantization`` for a quantized model) and ``weights.safetensors``
with the parameter names of ``mlx_whisper.whisper.Whisper``.

model.bin, as ``ctranslate2/specs/model_spec.py`` (``ModelSpec._serialize``) writes it and
``src/models/model.cc`` reads it, little endian: uint32 binary version, string spec name,
uint32 spec revision, uint32 variable count; per variable: string name, uint8 rank, uint32
dims[rank], uint8 dtype (``include/ctranslate2/types.h``: float32, int8, int16, int32,
float16, bfloat16), uint32 byte count, the raw bytes; then uint32 alias count and per alias
two strings (alias, target). A string is a uint16 length counting a final NUL, then the
bytes and the NUL. Quantized weights (int8 per output row, int16 per tensor) have a
``<name>_scale`` beside them with ``quantized = round(float * scale)``.

Mapping (``ctranslate2/converters/transformers.py``, WhisperLoader and BartLoader):

=========================================================  =================================
CTranslate2                                                MLX Whisper
=========================================================  =================================
encoder/conv{1,2}/weight (out, in, kernel)                 encoder.conv{1,2}.weight
                                                           (out, kernel, in)
encoder/position_encodings/encodings (sinusoids)           dropped: MLX computes them
{enc,dec}oder/layer_N/self_attention/linear_0 (q|k|v)      blocks.N.attn.{query,key,value}
{enc,dec}oder/layer_N/self_attention/linear_1              blocks.N.attn.out
{enc,dec}oder/layer_N/self_attention/layer_norm            blocks.N.attn_ln
decoder/layer_N/attention/linear_0 (q)                     blocks.N.cross_attn.query
decoder/layer_N/attention/linear_1 (k|v)                   blocks.N.cross_attn.{key,value}
decoder/layer_N/attention/linear_2                         blocks.N.cross_attn.out
decoder/layer_N/attention/layer_norm                       blocks.N.cross_attn_ln
{enc,dec}oder/layer_N/ffn/linear_{0,1}, layer_norm         blocks.N.mlp1, mlp2, mlp_ln
encoder/layer_norm, decoder/layer_norm                     encoder.ln_post, decoder.ln
decoder/embeddings/weight                                  decoder.token_embedding.weight
decoder/position_encodings/encodings (learned)             decoder.positional_embedding
decoder/projection/weight (an alias of the embeddings)     none: MLX ties it to the embedding
=========================================================  =================================

Layer norms are gamma/beta in CTranslate2, weight/bias in MLX. Whisper's key projections
have no bias; CTranslate2 stores zeros in their slice of the fused bias, which are dropped
(and checked to be zeros).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: CTranslate2's DataType enum, in order (include/ctranslate2/types.h).
CT2_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
DTYPES = ("float16", "float32")
BITS = (4, 8)
GROUP_SIZE = 64   # as mlx-examples' whisper/convert.py quantizes
#: Encoder positions further than this from Whisper's sinusoids are not Whisper's (the MLX
#: model computes the sinusoids and cannot take others); float16 storage is ~5e-4 off.
SINUSOID_TOLERANCE = 2e-3


class ConversionError(ValueError):
    """The input is not a CTranslate2 Whisper model this converter understands."""


@dataclass
class Ct2Model:
    """The variables of a CTranslate2 model.bin, as stored (possibly quantized)."""

    spec: str
    revision: int
    binary_version: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        """Whether `name` is a variable or an alias of one."""
        return self.aliases.get(name, name) in self.variables

    def raw(self, name: str) -> np.ndarray:
        """The stored array of `name` (an alias resolved)."""
        try:
            return self.variables[self.aliases.get(name, name)]
        except KeyError:
            raise ConversionError(f"model.bin has no variable {name!r}") from None

    def scalar(self, name: str) -> int:
        """An integer scalar such as encoder/num_heads."""
        return int(self.raw(name).reshape(()))

    def float32(self, name: str) -> np.ndarray:
        """`name` as float32, dequantized when stored with a `_scale` (value / scale)."""
        value = self.raw(name)
        scale_name = self.aliases.get(name, name) + "_scale"
        if scale_name not in self.variables:
            if value.dtype.kind != "f":
                raise ConversionError(f"{name} is {value.dtype} without a scale")
            return value.astype(np.float32)
        scale = self.variables[scale_name].astype(np.float32)
        if scale.ndim == 0:   # int16: one scale for the tensor
            return value.astype(np.float32) / scale
        # int8: one scale per output row; a conv weight is scaled as (out, in * kernel)
        rows = value.reshape(value.shape[0], -1).astype(np.float32) / scale[:, None]
        return rows.reshape(value.shape)


def read_model_bin(data: bytes | bytearray | memoryview) -> Ct2Model:
    """Parse a CTranslate2 model.bin (binary versions 4 to 6) without copying the weights."""
    buf = memoryview(data)
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        if pos + size > len(buf):
            raise ConversionError("model.bin is truncated")
        values = struct.unpack_from("<" + fmt, buf, pos)
        pos += size
        return values

    def string() -> str:
        nonlocal pos
        (length,) = take("H")
        text = bytes(buf[pos:pos + length - 1]).decode("utf-8")
        pos += length
        return text

    (version,) = take("I")
    if not 4 <= version <= 6:
        raise ConversionError(f"model.bin binary version {version} is not supported (4-6); "
                              "reconvert the model with a current ctranslate2")
    spec = string()
    (revision,) = take("I")
    (count,) = take("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = string()
        (rank,) = take("B")
        shape = take("I" * rank)
        dtype_id, nbytes = take("BI")
        if dtype_id >= len(CT2_DTYPES):
            raise ConversionError(f"{name}: unknown CTranslate2 dtype code {dtype_id}")
        dtype = CT2_DTYPES[dtype_id]
        if pos + nbytes > len(buf):
            raise ConversionError("model.bin is truncated")
        raw = buf[pos:pos + nbytes]
        pos += nbytes
        if dtype == "bfloat16":   # numpy has none: the high half of a float32
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, np.dtype(dtype).newbyteorder("<"))
        if array.size != int(np.prod(shape, dtype=np.int64)):
            raise ConversionError(f"{name}: {nbytes} bytes do not hold {dtype} {shape}")
        variables[name] = array.reshape(shape)
    (n_aliases,) = take("I")
    aliases = {}
    for _ in range(n_aliases):
        alias = string()
        aliases[alias] = string()
    return Ct2Model(spec, revision, version, variables, aliases)


def _layer_count(model: Ct2Model, stack: str) -> int:
    pattern = re.compile(rf"{stack}/layer_(\d+)/")
    found = {int(m.group(1)) for name in model.variables if (m := pattern.match(name))}
    if found != set(range(len(found))):
        raise ConversionError(f"{stack} layers are not numbered 0..N-1: {sorted(found)}")
    return len(found)


def _sinusoids(length: int, channels: int) -> np.ndarray:
    """Whisper's encoder positions (mlx_whisper.whisper.sinusoids), float64."""
    increment = np.log(10000) / (channels // 2 - 1)
    inv_timescales = np.exp(-increment * np.arange(channels // 2))
    scaled = np.arange(length)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


def mlx_layout(model: Ct2Model, alignment_heads: list | None = None
               ) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """(ModelDimensions, float32 weights named as mlx_whisper's Whisper) of a CT2 Whisper.

    `alignment_heads`: the (layer, head) pairs from CTranslate2's config.json; they become
    the model's ``alignment_heads`` (word timestamps), else MLX's default is kept.
    """
    if model.spec != "WhisperSpec":
        raise ConversionError(f"model.bin holds a {model.spec or 'unnamed'} model, "
                              "not WhisperSpec")
    used: set[str] = set()
    weights: dict[str, np.ndarray] = {}

    def get(name: str) -> np.ndarray:
        used.update({name, model.aliases.get(name, name),
                     model.aliases.get(name, name) + "_scale"})
        return model.float32(name)

    def linear(src: str, dst: str) -> None:
        weights[f"{dst}.weight"] = get(f"{src}/weight")
        if model.has(f"{src}/bias"):
            weights[f"{dst}.bias"] = get(f"{src}/bias")

    def layer_norm(src: str, dst: str) -> None:
        weights[f"{dst}.weight"] = get(f"{src}/gamma")
        weights[f"{dst}.bias"] = get(f"{src}/beta")

    def fused(src: str, dsts: list[str]) -> None:
        """Split a fused projection; a key's bias slice must be zeros (Whisper has none)."""
        weight, bias = get(f"{src}/weight"), get(f"{src}/bias")
        for dst, w, b in zip(dsts, np.split(weight, len(dsts)), np.split(bias, len(dsts)),
                             strict=True):
            weights[f"{dst}.weight"] = w
            if dst.endswith(".key"):
                if np.any(b != 0):
                    raise ConversionError(f"{src}: the key projection has a bias; "
                                          "MLX Whisper's key has none")
            else:
                weights[f"{dst}.bias"] = b

    def block(src: str, dst: str, cross: bool) -> None:
        fused(f"{src}/self_attention/linear_0", [f"{dst}.attn.{p}" for p in
                                                 ("query", "key", "value")])
        linear(f"{src}/self_attention/linear_1", f"{dst}.attn.out")
        layer_norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
        if cross:
            linear(f"{src}/attention/linear_0", f"{dst}.cross_attn.query")
            fused(f"{src}/attention/linear_1", [f"{dst}.cross_attn.key",
                                                f"{dst}.cross_attn.value"])
            linear(f"{src}/attention/linear_2", f"{dst}.cross_attn.out")
            layer_norm(f"{src}/attention/layer_norm", f"{dst}.cross_attn_ln")
        linear(f"{src}/ffn/linear_0", f"{dst}.mlp1")
        linear(f"{src}/ffn/linear_1", f"{dst}.mlp2")
        layer_norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")

    n_audio_layer = _layer_count(model, "encoder")
    n_text_layer = _layer_count(model, "decoder")
    for conv in ("conv1", "conv2"):
        weights[f"encoder.{conv}.weight"] = get(f"encoder/{conv}/weight").transpose(0, 2, 1)
        weights[f"encoder.{conv}.bias"] = get(f"encoder/{conv}/bias")
    for i in range(n_audio_layer):
        block(f"encoder/layer_{i}", f"encoder.blocks.{i}", cross=False)
    layer_norm("encoder/layer_norm", "encoder.ln_post")
    positions = get("encoder/position_encodings/encodings")
    off = float(np.max(np.abs(positions - _sinusoids(*positions.shape))))
    if off > SINUSOID_TOLERANCE:
        raise ConversionError(f"encoder positions differ from Whisper's sinusoids by {off:.3g}"
                              "; MLX Whisper cannot load learned encoder positions")

    weights["decoder.token_embedding.weight"] = embedding = get("decoder/embeddings/weight")
    weights["decoder.positional_embedding"] = get("decoder/position_encodings/encodings")
    for i in range(n_text_layer):
        block(f"decoder/layer_{i}", f"decoder.blocks.{i}", cross=True)
    layer_norm("decoder/layer_norm", "decoder.ln")
    if model.has("decoder/projection/weight") and \
            not np.array_equal(get("decoder/projection/weight"), embedding):
        raise ConversionError("the output projection is not the token embedding; "
                              "MLX Whisper ties the two")
    if model.has("decoder/projection/bias") and np.any(get("decoder/projection/bias") != 0):
        raise ConversionError("the output projection has a bias; MLX Whisper has none")

    # Everything with weights must have been placed (scalars are flags and head counts).
    left = [n for n, v in model.variables.items() if v.ndim > 0 and n not in used]
    if left:
        raise ConversionError(f"model.bin variables with no MLX place: {', '.join(left)}")

    conv1 = weights["encoder.conv1.weight"]
    dims = {
        "n_mels": int(conv1.shape[2]),
        "n_audio_ctx": int(positions.shape[0]),
        "n_audio_state": int(conv1.shape[0]),
        "n_audio_head": model.scalar("encoder/num_heads"),
        "n_audio_layer": n_audio_layer,
        "n_vocab": int(embedding.shape[0]),
        "n_text_ctx": int(weights["decoder.positional_embedding"].shape[0]),
        "n_text_state": int(embedding.shape[1]),
        "n_text_head": model.scalar("decoder/num_heads"),
        "n_text_layer": n_text_layer,
    }
    if alignment_heads:
        heads = np.asarray(alignment_heads, dtype=np.int64).reshape(-1, 2)
        if heads.min() < 0 or heads[:, 0].max() >= n_text_layer or \
                heads[:, 1].max() >= dims["n_text_head"]:
            raise ConversionError(f"alignment_heads {alignment_heads} do not fit "
                                  f"{n_text_layer} layers of {dims['n_text_head']} heads")
        weights["alignment_heads"] = heads
    return dims, weights


def _quantized(dims: dict[str, int], weights: dict[str, np.ndarray], dtype: str,
               bits: int) -> dict[str, np.ndarray]:
    """Weights of the model after mlx.nn.quantize (every Linear and Embedding), as numpy."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_whisper.whisper import ModelDimensions, Whisper

    mx_dtype = getattr(mx, dtype)
    model = Whisper(ModelDimensions(**dims), mx_dtype)
    model.update(tree_unflatten([(k, mx.array(v)) for k, v in weights.items()]))
    nn.quantize(model, group_size=GROUP_SIZE, bits=bits)
    out = {}
    for name, value in tree_flatten(model.parameters()):
        mx.eval(value)
        out[name] = np.array(value)
    return out


def _source_files(source: str | os.PathLike | Mapping[str, bytes]) -> tuple[bytes, dict]:
    """(model.bin bytes, parsed config.json or {}) from a folder or a dict of file bytes."""
    if isinstance(source, Mapping):
        data = source.get("model.bin")
        config = source.get("config.json")
    else:
        folder = Path(source)
        if not (folder / "model.bin").is_file():
            raise ConversionError(f"{folder} has no model.bin: not a CTranslate2 model folder")
        data = (folder / "model.bin").read_bytes()
        config = (folder / "config.json").read_bytes() if (folder / "config.json").is_file() \
            else None
    if data is None:
        raise ConversionError("the files given have no model.bin")
    return data, json.loads(config) if config else {}


def convert(source: str | os.PathLike | Mapping[str, bytes], out_dir: str | os.PathLike,
            dtype: str = "float16", bits: int | None = None) -> Path:
    """Write the MLX Whisper layout of a CTranslate2 Whisper model into `out_dir`.

    `source`: a CTranslate2 Whisper folder, or its files as {name: bytes} (such as
    ``packaged_whisper_base()``). `dtype`: "float16" or "float32", the storage type of the
    weights (and of the quantization scales). `bits`: None, or 4 or 8 to quantize every
    linear layer and the token embedding with ``mlx.nn.quantize`` (group size 64; needs mlx).
    The weights are written first and config.json last, each by an atomic rename, so a
    folder with a config.json is complete. Returns `out_dir`.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype = {dtype!r} is not one of: {', '.join(DTYPES)}")
    if bits is not None and bits not in BITS:
        raise ValueError(f"bits = {bits!r} is not one of: None, {', '.join(map(str, BITS))}")
    from safetensors.numpy import save_file

    data, ct2_config = _source_files(source)
    dims, weights = mlx_layout(read_model_bin(data), ct2_config.get("alignment_heads"))
    del data
    weights = {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in weights.items()}
    config: dict = {**dims, "model_type": "whisper"}
    if bits is not None:
        weights = _quantized(dims, weights, dtype, bits)
        config["quantization"] = {"group_size": GROUP_SIZE, "bits": bits}

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".weights-{os.getpid()}.safetensors"
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(tmp),
              metadata={"format": "mlx"})
    os.replace(tmp, out / "weights.safetensors")
    tmp = out / f".config-{os.getpid()}.json"
    tmp.write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
    os.replace(tmp, out / "config.json")
    return out
