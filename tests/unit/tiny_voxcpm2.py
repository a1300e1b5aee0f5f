"""A tiny random-weight VoxCPM2 model, built offline, that both VoxCPM2 backends load and run.

`build_tiny_voxcpm2(out)` writes a folder (3.4 MB, 0.5 s once torch, transformers and voxcpm
are imported, which takes 2.5-4 s on 2 busy cores) that drives the real loading and
generation code of

- PyTorch `voxcpm` 2.0.3: `VoxCPM2Model.from_local(path, optimize=False, device="cpu")`;
- MLX `mlx-audio` 0.6.2: `mlx_audio.tts.utils.load(path)` (picks `mlx_audio.tts.models.voxcpm2`
  from config.json: `model_type`, else `architecture`, through its MODEL_REMAPPING).

`build_tiny_voxcpm2_mlx_4bit(src, out)` quantizes that folder with mlx-audio's own converter
(`python -m mlx_audio.convert ... -q --q-bits 4 --q-group-size 64 --model-domain tts`, 0.8 s,
1.3 MB).

Folder
    config.json             the real VoxCPM2 layout with tiny sizes, `"architecture": "voxcpm2"`
    tokenizer.json          BPE built with `tokenizers` (472 pieces, see below)
    tokenizer_config.json   `tokenizer_class: LlamaTokenizerFast` (AutoTokenizer needs it)
    model.safetensors       the full `VoxCPM2Model` state dict, `audio_vae.*` included (torch
                            names: weight_norm `weight_g`/`weight_v`); mlx-audio reads it alone
    audiovae.pth            the VAE state dict again: voxcpm insists on audiovae.safetensors or
                            audiovae.pth and merges it over model.safetensors' `audio_vae.*`

Sizes
    MiniCPM4 LM: hidden 64, ffn 128, 2 heads (1 KV head, head dim 32), 1 layer, vocab 472,
    muP as the real one (scale_emb 12, dim_model_base 256, scale_depth 1.4), LongRoPE with
    factors 1.0, max_position_embeddings = original = max_length = 4096.
    Residual LM 1 layer; local encoder and DiT: hidden 64, ffn 128, 2 heads, 1 layer;
    FSQ latent 64; patch_size 4; feat_dim = VAE latent 64.
    Audio VAE V2 with the REAL rates: encoder_rates [2, 5, 8, 8] (640 samples at 16 kHz per
    latent frame), decoder_rates [8, 6, 5, 2, 2, 2] (1920 samples at 48 kHz), so one patch =
    4 frames = 160 ms = 7680 output samples, 6.25 patches per second of audio (same as the
    real model); tiny widths: encoder_dim 8, decoder_dim 64 (the smallest for 6 halvings).
    Every Linear input is 64 or 128 wide, so 4-bit group-64 quantization covers them: 47
    quantized modules (all Linears, the token embedding and the VAE's first sample-rate
    scale/bias embeddings; the VAE convs stay float). mlx_audio.convert only quantizes
    modules whose input width is a multiple of 64, whatever --q-group-size says.

Behaviour
    Stop head: stop_proj has weights ~0 and bias 4, stop_head rows of opposite sign, so the
    same class wins whatever the hidden state (also after 4-bit quantization). Default: class
    1 (stop) always, so generation ends as soon as the loops allow it: torch breaks at step
    `i > min_len` and mlx at `i - warmup_patches > min_tokens`, i.e. min_len + 2 patches (4
    with the default min_len 2: 30720 samples, 0.64 s), whatever the text. `runaway=True`:
    class 0 always, so torch stops at `min(max_len, int(6 * len(tokens(text)) + 10))`
    patches (the retry_badcase_ratio_threshold bound; "The cat sat on the mat." is 19 tokens:
    124 patches, ~3 s here) and mlx at `max_tokens` (no text-length bound there; default 2000).
    The VAE's last conv is re-aimed so random latents decode to zero-mean audio, std ~0.24,
    peak ~0.5 (raw random weights gave a DC offset of -0.33 with a 0.08 spread).
    Tokenizer: ids 0-2 <unk> <s> </s>; 3 "▁" and the printable ASCII characters; 98-100 "á à
    â"; 101-104 <|audio_start|> <|audio_end|> <|ref_audio_start|> <|ref_audio_end|> (VoxCPM2
    hard-codes these ids); then the other Portuguese and Latin-1 letters and punctuation, the
    256 byte-fallback pieces <0x00>..<0xFF> (any text, CJK and emoji included, tokenizes
    without <unk>) and 12 merges. Llama style: Metaspace "▁" prepended, byte fallback, no
    normalizer (transformers 5 rebuilds LlamaTokenizerFast from vocab + merges with exactly
    that pipeline, so what tokenizer.json says beyond them is not what runs).

Pitfalls met
    - `import voxcpm` imports torchaudio (V1 model, denoiser) though VoxCPM2 never calls it;
      torchaudio is absent here (a CUDA build fails to load on CPU). The engine's
      `voxcpm2_model_class()` imports the V2 module without the package `__init__`s.
    - An `audiovae.safetensors` beside model.safetensors breaks mlx-audio: its loader loads
      every *.safetensors in the folder, so the VAE's raw keys arrive as unknown parameters
      ("Received 312 parameters not in model"), and `mlx_audio.convert` copies *.safetensors
      too. audiovae.pth is invisible to both.
    - mlx-audio's VAE sanitize picks conv layouts by shape: a torch (out, in, k) weight whose
      in == k passes as MLX (out, k, in) and is silently left untransposed. encoder_dim 4 hit
      it (the stride-2 conv has kernel 4 and 4 inputs; decoded fine, encoded garbage): keep
      every conv's input width different from its kernel (2 * stride, 7, 3, 1).
    - mlx-audio 0.6.2's VAE encoder ignores output_padding on odd strides (stride 5 pads 6
      samples instead of 5), so reference-audio latents differ slightly between backends (here
      by ~0.01); decoding matches torch to 1e-6, but mlx returns 8 more samples at the end
      (n_patches * 7680 + 8).
    - voxcpm's pydantic config rejects `"kv_channels": null`: leave the key out. mlx-audio's
      dataclass configs reject unknown keys (cfm_config takes only sigma_min, solver,
      t_scheduler, inference_cfg_rate), voxcpm ignores extra keys.
    - Noise: voxcpm prints "Running on device", "Loading ..." to stderr, torch warns that
      `torch.nn.utils.weight_norm` is deprecated (each VAE construction), `_inference` wraps its
      loop in tqdm (TQDM_DISABLE=1 works only if set before tqdm is first imported; otherwise
      patch `voxcpm.model.voxcpm2.tqdm`), `VoxCPM.generate_streaming` warns unless
      `retry_badcase=False`. The converted 4-bit config carries `model_type: voxcpm2`, so
      AutoTokenizer logs "You are using a model of type `voxcpm2`..." (harmless).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

from voxweft.actors.engines.tts.voxcpm2 import voxcpm2_model_class

HIDDEN = 64          # LM, residual LM, local encoder and DiT width (a multiple of 64: quantizable)
FFN = 128
HEADS, KV_HEADS = 2, 1
PATCH = 4            # latent frames per patch, as in the real model
LATENT = 64          # VAE latent dim = feat_dim (real value)
ENCODER_RATES = [2, 5, 8, 8]        # real: 640 samples at 16 kHz per latent frame
DECODER_RATES = [8, 6, 5, 2, 2, 2]  # real: 1920 samples at 48 kHz per latent frame
MAX_LENGTH = 4096    # static KV cache length (torch) and RoPE table size
IN_RATE, OUT_RATE = 16000, 48000
SAMPLES_PER_PATCH = PATCH * 1920     # 7680 samples at 48 kHz = 160 ms

SPECIALS = ["<unk>", "<s>", "</s>"]
AUDIO_MARKERS = ["<|audio_start|>", "<|audio_end|>", "<|ref_audio_start|>", "<|ref_audio_end|>"]
MARKER_ID = 101      # VoxCPM2 hard-codes 101..104 as audio start/end, ref audio start/end
PT_LETTERS = "áàâãéêíóôõúüçÁÀÂÃÉÊÍÓÔÕÚÜÇ"
MERGES = [("▁", "a"), ("▁", "o"), ("▁", "d"), ("▁d", "e"), ("▁", "t"), ("h", "e"),
          ("▁t", "he"), ("e", "s"), ("q", "u"), ("ã", "o"), ("e", "r"), ("o", "s")]
DTYPES = ("float32", "bfloat16", "float16")


def _vocab() -> dict[str, int]:
    chars = ["▁"] + [chr(c) for c in range(0x21, 0x7F)]              # 95 pieces: ids 3..97
    extra = list(PT_LETTERS) + [chr(c) for c in range(0xA1, 0x100)
                                if chr(c) not in PT_LETTERS and c != 0xAD]
    extra += list("–—‘’“”…€")
    pieces = SPECIALS + chars
    while len(pieces) < MARKER_ID:
        pieces.append(extra.pop(0))
    pieces += AUDIO_MARKERS + extra
    pieces += [f"<0x{b:02X}>" for b in range(256)]                   # byte fallback: no <unk>
    pieces += ["".join(m) for m in MERGES]
    return {p: i for i, p in enumerate(pieces)}


def _write_tokenizer(out: Path) -> int:
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    vocab = _vocab()
    tok = Tokenizer(BPE(vocab=vocab, merges=MERGES, unk_token="<unk>", fuse_unk=True,
                        byte_fallback=True))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                 split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(content=" ", left=1)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIALS + AUDIO_MARKERS])
    tok.save(str(out / "tokenizer.json"))
    added = {str(vocab[t]): {"content": t, "lstrip": False, "rstrip": False, "normalized": False,
                             "single_word": False, "special": True}
             for t in SPECIALS + AUDIO_MARKERS}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": None, "add_bos_token": True, "add_eos_token": False,
        "legacy": False, "add_prefix_space": True, "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_LENGTH, "added_tokens_decoder": added,
    }, indent=2), encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=2),
        encoding="utf-8")
    return len(vocab)


def tiny_config(vocab_size: int, dtype: str = "float32") -> dict:
    """The config.json of the tiny model: the real VoxCPM2 layout with tiny sizes."""
    factors = [1.0] * (HIDDEN // HEADS // 2)
    lm = {
        "bos_token_id": 1, "eos_token_id": 2, "hidden_size": HIDDEN, "intermediate_size": FFN,
        "max_position_embeddings": MAX_LENGTH, "num_attention_heads": HEADS,
        "num_hidden_layers": 1, "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "vocab_size": vocab_size, "use_mup": True, "scale_emb": 12,
        "dim_model_base": 256, "scale_depth": 1.4,
        "rope_scaling": {"type": "longrope", "long_factor": factors, "short_factor": factors,
                         "original_max_position_embeddings": MAX_LENGTH},
    }
    # kv_channels stays out: voxcpm's pydantic config rejects an explicit null
    block = {"hidden_dim": HIDDEN, "ffn_dim": FFN, "num_heads": HEADS, "num_layers": 1}
    return {
        "architecture": "voxcpm2",
        "lm_config": lm,
        "patch_size": PATCH,
        "feat_dim": LATENT,
        "residual_lm_num_layers": 1,
        "residual_lm_no_rope": False,
        "scalar_quantization_latent_dim": HIDDEN,
        "scalar_quantization_scale": 9,
        "encoder_config": dict(block),
        "dit_config": {**block, "dit_mean_mode": False,
                       "cfm_config": {"sigma_min": 1e-6, "solver": "euler",
                                      "t_scheduler": "log-norm", "inference_cfg_rate": 2.0}},
        "audio_vae_config": {
            # encoder_dim 8, not 4: see "Pitfalls met" (conv input width == kernel size)
            "encoder_dim": 8, "encoder_rates": ENCODER_RATES, "latent_dim": LATENT,
            "decoder_dim": 64, "decoder_rates": DECODER_RATES, "depthwise": True,
            "sample_rate": IN_RATE, "out_sample_rate": OUT_RATE, "use_noise_block": False,
            "sr_bin_boundaries": [20000, 30000, 40000], "cond_type": "scale_bias",
            "cond_dim": 128, "cond_out_layer": False,
        },
        "max_length": MAX_LENGTH,
        "device": "cpu",
        "dtype": dtype,
    }


def _calibrate_vae_output(vae, gen, target_std: float = 0.25) -> None:
    """Re-aim the VAE's last conv so random latents decode to zero-mean audio of ~target_std.

    With random weights the snake activations (x + sin^2 x) pile up a DC offset: the raw
    output sits near -0.33 with a 0.08 spread. Scaling the last conv's weight norm (g) and
    setting its bias centres the signal before the tanh.
    """
    import torch

    conv_out = vae.decoder.model[-2]          # [..., Snake1d, WNCausalConv1d, Tanh]
    captured = {}
    hook = conv_out.register_forward_hook(lambda _m, _i, y: captured.setdefault("y", y))
    try:
        vae.decode(torch.randn((1, vae.latent_dim, 32), generator=gen))
    finally:
        hook.remove()
    raw = captured["y"] - conv_out.bias.view(1, -1, 1)
    scale = target_std / float(raw.std())
    conv_out.weight_g.mul_(scale)
    conv_out.bias.copy_(-raw.mean(dim=(0, 2)) * scale)


def build_tiny_voxcpm2(out: Path, *, seed: int = 0, runaway: bool = False,
                       dtype: str = "float32") -> Path:
    """Write the tiny VoxCPM2 folder under `out`; return it.

    `seed` fixes every weight (same seed, byte-identical files). `runaway=True` makes the stop
    head never stop. `dtype` is the config's runtime dtype and the stored dtype of all but the
    VAE weights (voxcpm keeps the VAE in float32).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaTokenizerFast

    voxcpm2_model_class()   # the engine's import: voxcpm without torchaudio
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEV2

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = _write_tokenizer(out)
    config = tiny_config(vocab_size, dtype)
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    torch.manual_seed(seed)
    cfg = VoxCPMConfig.model_validate(config)
    # quiet: voxcpm prints the device to stderr, torch warns that weight_norm is deprecated
    with contextlib.redirect_stderr(io.StringIO()), _no_warnings():
        tokenizer = LlamaTokenizerFast.from_pretrained(str(out))
        model = VoxCPM2Model(cfg, tokenizer, AudioVAEV2(cfg.audio_vae_config), device="cpu")
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        # silu(stop_proj(h)) ~ silu(4) > 0 in every unit whatever h; stop_head rows of opposite
        # sign make one class win by ~180 logits. The rows are not constant, so every 4-bit
        # quantization group keeps a range.
        model.stop_proj.weight.normal_(0.0, 0.01, generator=gen)
        model.stop_proj.bias.fill_(4.0)
        sign = -1.0 if runaway else 1.0
        w = 0.5 + 0.05 * torch.rand((2, HIDDEN), generator=gen)
        model.stop_head.weight.copy_(torch.stack([-sign * w[0], sign * w[1]]))
        _calibrate_vae_output(model.audio_vae, gen)
    lm_dtype = getattr(torch, dtype)
    state = {}
    for key, value in model.state_dict().items():
        value = value.detach().contiguous()
        if value.is_floating_point() and not key.startswith("audio_vae."):
            value = value.to(lm_dtype)
        state[key] = value
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "model.safetensors").chmod(0o644)    # safetensors writes 0600
    vae = {k[len("audio_vae."):]: v for k, v in state.items() if k.startswith("audio_vae.")}
    torch.save(vae, out / "audiovae.pth")
    return out


@contextlib.contextmanager
def _no_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def build_tiny_voxcpm2_mlx_4bit(src: Path, out: Path) -> Path:
    """Quantize the folder `src` to 4 bits (affine, group 64) with mlx-audio's converter.

    Runs `python -m mlx_audio.convert` in a subprocess (~1 s). `--model-domain tts` skips its
    domain guess, which matches model names against the folder's whole path first. The result
    holds config.json (with `quantization` and `quantization_config`: group_size 64, bits 4,
    mode affine, plus `model_type: voxcpm2`), model.safetensors (MLX names, weight norm fused,
    VAE included), model.safetensors.index.json and the tokenizer files; no audiovae.pth.
    """
    out = Path(out)
    cmd = [sys.executable, "-m", "mlx_audio.convert", "--hf-path", str(src),
           "--mlx-path", str(out), "-q", "--q-bits", "4", "--q-group-size", "64",
           "--model-domain", "tts"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"mlx_audio.convert failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return out
