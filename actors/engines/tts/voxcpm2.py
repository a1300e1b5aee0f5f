"""voxcpm2: VoxCPM2 (48 kHz, 30 languages), in the speaker's own voice, streamed.

Two backends run the same weights' architecture:

- ``torch``: the `voxcpm` package (CUDA, Apple's MPS or the CPU). Streams: the model makes
  one latent patch (160 ms at 48 kHz with the real weights) per step and its causal VAE
  decodes each as it comes, so the first audio leaves after the first patches.
- ``mlx``: `mlx-audio`'s port (Apple Silicon; 4-bit weights). Its 0.6.2 `generate` returns
  a piece's audio whole at its end, so the first audio waits for the whole first piece:
  the text is cut into a short first piece (its first clause, or a few words:
  `first_chunk_chars`), then pieces that grow (`chunk_growth`, up to `max_clause_chars`),
  each made before the one before has played (`Pace`, measured). The reference voice is
  VAE-encoded once (per `Reference.key`: once per utterance at most) and handed to every
  piece; MLX's cache of freed buffers is bounded (`cache_limit_mb`); `compile` mx.compiles
  the DiT estimator, whose shapes are fixed (not the LMs, whose KV length grows).

The voice (`voice` setting): ``speaker`` takes the speaker's own recent speech (the tts
actor hands a `Reference`, see actors.voice); ``file:PATH`` a fixed recording (16 kHz or
any rate a WAV has; `voice_text` its words, for the prompt mode); ``default`` the model's
own voice. VoxCPM2 takes a voice two ways (`voice_mode`): ``reference`` (timbre only: the
audio sits in a separate slot of the input; V2 only) and ``prompt`` (audio + its exact
words, which the model continues: it keeps the prompt's language and manner, so an English
prompt can pull a Portuguese translation towards English). See README, "The speaker's voice".

What the system we model learned (shared LESSONS.md) is enforced here: the model is built
once, in load(), on the actor's thread; `temperature` scales the diffusion's initial noise
(far from 1.0 generation never stops) and is refused outside 0.7-1.3; every generation is
bounded by its text's length; torch uses the actor's thread budget.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import math
import os
import platform
import sys
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from voxweft.actors.engines import importing, mlx, models
from voxweft.actors.engines.resources import weights_mb
from voxweft.actors.engines.tts import (
    Pace,
    Reference,
    Spoken,
    Timed,
    TtsEngine,
    growing_chunks,
    log,
    split_clauses,
)
from voxweft.actors.engines.tts.stretch import time_stretch
from voxweft.actors.settings.base import StartupError

#: Languages of the model card (ISO 639-1).
LANGUAGES = frozenset(
    "ar da de el en es fi fr he hi id it ja km ko lo ms my nl no pl pt ru sv sw th tl tr vi zh"
    .split())
#: Catalogue names of the real weights, by backend (`voxweft models`).
DEFAULT_MODEL = {"torch": "voxcpm2", "mlx": "voxcpm2-mlx-4bit"}
FADE_S = 0.005            # fade at each clause's ends: chunks join without a click


def _mlx_here() -> bool:
    """Apple Silicon with mlx-audio installed: where the mlx backend is the one to use."""
    return (sys.platform == "darwin" and platform.machine() == "arm64"
            and importlib.util.find_spec("mlx_audio") is not None)


def voxcpm2_model_class() -> type:
    """`voxcpm`'s VoxCPM2Model, imported without the package's own `__init__`s.

    voxcpm 2.0.3's package (and its `model` package) import its V1 model, which imports
    torchaudio; VoxCPM2 never uses it (it reads audio with librosa). PyPI's torchaudio for
    Linux is a CUDA build whose native library does not load beside the CPU torch, so the
    project does not install it: the two packages are entered as plain namespaces and the
    V2 module is imported alone. ImportError when voxcpm is not installed.
    """
    if "voxcpm.model.voxcpm2" in sys.modules:
        return sys.modules["voxcpm.model.voxcpm2"].VoxCPM2Model
    spec = importlib.util.find_spec("voxcpm")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'voxcpm'")
    root = list(spec.submodule_search_locations)
    for name, where in (("voxcpm", root), ("voxcpm.model", [os.path.join(p, "model")
                                                            for p in root])):
        if name not in sys.modules:   # a package with a spec (find_spec works on it)
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = where
            sys.modules[name] = importlib.util.module_from_spec(spec)
    return importlib.import_module("voxcpm.model.voxcpm2").VoxCPM2Model


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A WAV file as float32 mono and its rate; ValueError naming what is wrong."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
            raw = w.readframes(w.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise ValueError(f"cannot read {path} as a WAV file ({exc})") from None
    if width != 2:
        raise ValueError(f"{path}: {8 * width}-bit WAV; give 16-bit PCM")
    pcm = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    return pcm.reshape(-1, channels).mean(axis=1), rate


class VoxCpm2Engine(TtsEngine):
    """VoxCPM2 through torch (`voxcpm`) or MLX (`mlx-audio`); see the module docstring."""

    name: ClassVar[str] = "voxcpm2"
    STRETCHES: ClassVar[bool] = True   # no rate knob: made at 1.0, then time-stretched

    class Settings(TtsEngine.Settings):
        """Backend, weights, voice and the generation's knobs (defaults: the model card's)."""

        backend: Literal["auto", "torch", "mlx"] = "auto"   # auto: mlx on Apple Silicon
        model: str = ""            # a folder or a catalogue name; "" = the backend's default
        device: Literal["auto", "cpu", "mps", "cuda"] = "auto"   # torch only
        voice: str = "speaker"     # speaker | default | file:PATH (a WAV)
        voice_text: str = ""       # the words of a file voice (for voice_mode = "prompt")
        voice_mode: Literal["reference", "prompt"] = "reference"
        reference_min_s: float = Field(3.0, ge=0.5, le=10.0)   # speaker: less, default voice
        reference_max_s: float = Field(10.0, ge=1.0, le=30.0)
        inference_timesteps: int = Field(10, ge=1, le=100)
        cfg_value: float = Field(2.0, ge=1.0, le=10.0)
        temperature: float = 1.0
        warmup_patches: int = Field(0, ge=0, le=8)             # mlx only; measured: keep 0
        # mlx only: the first piece (at most this long, at least two words; it ends sooner at
        # a clause mark), then pieces up to `chunk_growth` times longer, to `max_clause_chars`
        first_chunk_chars: int = Field(24, ge=1, le=500)
        chunk_growth: float = Field(2.0, ge=1.0, le=4.0)
        max_clause_chars: int = Field(200, ge=20, le=500)
        cache_limit_mb: int = Field(512, ge=0, le=65536)      # mlx only: freed buffers kept
        compile: bool = True       # mlx only: mx.compile the DiT estimator (fixed shapes)
        #: A clause's audio is bounded: at most this many seconds per character, plus 1 s.
        max_s_per_char: float = Field(0.25, ge=0.05, le=2.0)
        seed: int | None = Field(None, ge=0)   # the same seed, text and voice: the same audio

        @field_validator("temperature")
        @classmethod
        def _temperature(cls, value: float) -> float:
            if not 0.7 <= value <= 1.3:
                raise ValueError(
                    f"temperature = {value!r} is refused: in VoxCPM2 it scales the diffusion's "
                    "initial noise (it is not a sampling temperature), and far from 1.0 "
                    "generation does not stop (at 0.01 it ran to its cap, 80 % silence); keep "
                    "1.0 (0.7 to 1.3 allowed)")
            return value

        @field_validator("voice")
        @classmethod
        def _voice(cls, value: str) -> str:
            if value in ("speaker", "default"):
                return value
            if not value.startswith("file:"):
                raise ValueError(f"voice = {value!r} must be \"speaker\", \"default\" or "
                                 "\"file:PATH\" (a WAV of 3-10 s of speech)")
            path = Path(value[5:]).expanduser()
            if not path.is_file():
                raise ValueError(f"voice = {value!r}: no such file")
            return value

        @model_validator(mode="after")
        def _consistent(self):
            if self.reference_min_s > self.reference_max_s:
                raise ValueError(f"reference_min_s = {self.reference_min_s} must not exceed "
                                 f"reference_max_s = {self.reference_max_s}")
            if self.voice_mode == "prompt" and self.voice.startswith("file:") \
                    and not self.voice_text:
                raise ValueError("voice_mode = \"prompt\" with a file voice needs voice_text: "
                                 "the exact words spoken in the file")
            if self.model and models.resolve(self.model) is None:
                raise ValueError(f"model = {self.model!r} must be a VoxCPM2 folder or a "
                                 "catalogue name (`voxweft models`)")
            return self

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        s = self.settings
        self.backend = s.backend if s.backend != "auto" else ("mlx" if _mlx_here() else "torch")
        self.folder = models.resolve(s.model or DEFAULT_MODEL[self.backend])
        self.sample_rate = 48000          # V2; load() reads the model's own
        self.model = None
        self.patch_s = 0.16               # seconds of audio per generated patch (load())
        self._features: dict[tuple[str, str], Any] = {}   # (key, mode) -> encoded voice
        self.encoded = 0                  # voices VAE-encoded so far (once per reference)
        self._file_voice: Reference | None = None
        # mlx makes each piece whole before it plays: what that costs here, learnt from
        # every piece made (the actor's warm-up first), sizes the pieces (`plan`).
        self.pace = Pace()
        self.compiled = False             # mlx: the DiT estimator is mx.compiled (load())

    def languages(self) -> frozenset[str]:
        """The model card's 30 languages."""
        return LANGUAGES

    def wants_voice(self) -> bool:
        """Whether it speaks in the speaker's voice (`voice = "speaker"`)."""
        return self.settings.voice == "speaker"

    def plan(self, text: str, eager: bool = True, speed: float = 1.0) -> list[str]:
        """mlx: a short first piece, then growing ones; torch (it streams patches): clauses.

        On mlx each piece is made before the one before has played (`pace`, measured), at
        `speed` (catching up, each piece is stretched shorter once made).
        """
        s = self.settings
        if self.backend == "torch":
            return split_clauses(text, s.max_clause_chars)
        return growing_chunks(text, s.first_chunk_chars, s.chunk_growth, s.max_clause_chars,
                              eager, pace=self.pace, speed=speed)

    def memory_mb(self) -> int:
        """Resident memory once loaded, in MB.

        mlx: the runtime, tokenizer and actor (~600 MB), the weights as stored (4-bit: 2.3 GB),
        ~400 MB of KV cache and activations, and the cache of freed buffers. torch: the
        weights are bfloat16 files (5 GB), but voxcpm computes in float32 on MPS and the CPU
        (its weights twice their file size, ~10 GB, and more while loading), bfloat16 on CUDA.
        """
        size = weights_mb(models.weights_bytes(
            self.settings.model or DEFAULT_MODEL[self.backend]), 5000)
        if self.backend == "mlx":
            return 600 + size + 400 + int(self.settings.cache_limit_mb)
        return 800 + size * (1 if self.settings.device == "cuda" else 2)

    def on_gpu(self) -> bool:
        """Whether it computes on a GPU (Metal, MPS or CUDA): its budget is GPU time."""
        if self.backend == "mlx":
            return mlx.on_metal()
        device = getattr(self.model, "device", "cpu") if self.model is not None else \
            self.settings.device
        return str(device).split(":")[0] in ("mps", "cuda")

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        """Build the model once, on this thread, within the actor's thread budget."""
        if self.folder is None or not self.folder.is_dir():
            raise StartupError(models.not_fetched(self.folder) if self.folder is not None
                               else f"no VoxCPM2 model for backend {self.backend}")
        if not (self.folder / "config.json").is_file():
            raise StartupError(f"{self.folder} has no config.json: not a VoxCPM2 model folder")
        if self.backend == "torch" and _mlx_folder(self.folder):
            raise StartupError(
                f"{self.folder} is an MLX model folder (no audiovae.pth beside its weights, "
                "which voxcpm loads), and backend is torch: set backend = \"mlx\" (Apple "
                "Silicon) or fetch the torch weights (`voxweft models fetch voxcpm2`)")
        if self.backend == "mlx" and not _vae_in_weights(self.folder):
            raise StartupError(
                f"{self.folder} keeps its audio VAE only in audiovae.pth (a torch model "
                "folder: voxcpm reads it there, mlx-audio reads the weights alone), and "
                "backend is mlx: set backend = \"torch\" or fetch the MLX weights "
                "(`voxweft models fetch voxcpm2-mlx-4bit`)")
        if self.backend == "torch":
            self._load_torch()
        else:
            self._load_mlx()
        # both backends: the VAE encodes at its sample_rate and the model speaks at its own
        vae = self.model.audio_vae
        self.sample_rate = int(self.model.sample_rate)
        self.patch_s = self.model.patch_size * vae.chunk_size / vae.sample_rate
        voice = self.settings.voice
        if voice.startswith("file:"):
            pcm, rate = read_wav(Path(voice[5:]).expanduser())
            self._file_voice = Reference(key=voice, pcm=pcm, sample_rate=rate, text=(
                self.settings.voice_text if self.settings.voice_mode == "prompt" else ""))
        log.info("voxcpm2: %s backend, %s, %d Hz, %.0f ms per patch", self.backend,
                 self.folder, self.sample_rate, self.patch_s * 1000)

    def _load_torch(self) -> None:
        threads = self.settings.threads
        with importing("tts", "voxcpm2", backend=0):   # torch
            import torch
            torch.set_num_threads(threads)   # oversubscribed: ~100x slower on 2 cores
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError:
                pass                          # already set in this process
            VoxCPM2Model = voxcpm2_model_class()   # noqa: N806 (a class)
        module = sys.modules[VoxCPM2Model.__module__]
        module.tqdm = functools.partial(module.tqdm, disable=True)   # a bar per generation
        device = None if self.settings.device == "auto" else self.settings.device
        self.model = VoxCPM2Model.from_local(str(self.folder), optimize=False, device=device)
        self._torch = torch
        if self.settings.temperature != 1.0:
            decoder = self.model.feat_decoder
            decoder.forward = functools.partial(type(decoder).forward, decoder,
                                                temperature=self.settings.temperature)

    def _load_mlx(self) -> None:
        with importing("tts", "voxcpm2", backend=1):   # mlx
            import mlx.core as mx
            from mlx_audio.tts.utils import load
        mlx.limit_cache(self.settings.cache_limit_mb)
        self.model = load(self.folder)   # a Path: never the hub
        self._mx = mx
        # mlx-audio encodes the voice it is given at every call; give it ours, encoded once
        encode_wav = self.model._encode_wav
        self.model._encode_wav = lambda audio, *a, **k: (
            audio.feat if isinstance(audio, _Encoded) else encode_wav(audio, *a, **k))
        if self.settings.compile:
            # The DiT estimator only: its shapes never change (most of a step's time, called
            # inference_timesteps times per patch). mlx-audio's compile_model() compiles the
            # LMs' attention too, whose KV cache grows by a patch at a time: mx.compile traces
            # again at every new length (36 traces per patch) and keeps every trace.
            decoder = self.model.feat_decoder
            decoder.estimator = mx.compile(decoder.estimator)
            self.compiled = True
        if self.settings.temperature != 1.0:
            self.model.feat_decoder.sample = functools.partial(
                self.model.feat_decoder.sample, temperature=self.settings.temperature)

    # ------------------------------------------------------------------ voices

    def voice_for(self, voice: Reference | None) -> Reference | None:
        """The voice to speak in: the speaker's, the file's, or None (the model's own)."""
        if self.settings.voice == "speaker":
            return voice
        return self._file_voice

    def _at(self, ref: Reference, rate: int) -> np.ndarray:
        if ref.sample_rate == rate:
            return np.asarray(ref.pcm, np.float32)
        import soxr
        return soxr.resample(np.asarray(ref.pcm, np.float32), ref.sample_rate, rate)

    def _features_of(self, ref: Reference, encode) -> Any:
        """`ref`'s VAE features, encoded by `encode(audio at the encoder's rate, mode)` once.

        Kept by (key, mode), one voice at a time (the newest): every piece of an utterance,
        and every utterance until the speaker's voice is heard anew, reuses them.
        """
        mode = "prompt" if ref.text else "reference"
        key = (ref.key, mode)
        if key not in self._features:
            model = self.model
            patch = model.patch_size * model.audio_vae.chunk_size
            audio = self._at(ref, model.audio_vae.sample_rate)
            pad = -len(audio) % patch
            # reference: padded at the end; prompt: at the start (it is continued)
            audio = np.pad(audio, (0, pad) if mode == "reference" else (pad, 0))
            self._features.clear()
            self._features[key] = encode(audio, mode)
            self.encoded += 1
        return self._features[(ref.key, mode)]

    def _torch_cache(self, ref: Reference | None) -> dict | None:
        """The torch model's prompt cache for `ref`: a reference, or a prompt with its words."""
        if ref is None:
            return None
        torch, model = self._torch, self.model
        vae = model.audio_vae

        def encode(audio: np.ndarray, mode: str) -> dict:
            with torch.inference_mode():
                feat = vae.encode(torch.from_numpy(audio)[None].to(model.device),
                                  vae.sample_rate).cpu()
            feat = feat.view(vae.latent_dim, -1, model.patch_size).permute(1, 2, 0)
            if mode == "reference":
                return {"ref_audio_feat": feat, "mode": "reference"}
            return {"prompt_text": _joined(ref.text), "audio_feat": feat,
                    "mode": "continuation"}

        return self._features_of(ref, encode)

    def _mlx_voice(self, ref: Reference | None) -> dict[str, Any]:
        """mlx-audio `generate` arguments for `ref`, its features encoded once (`_Encoded`)."""
        if ref is None:
            return {}
        mx, model = self._mx, self.model

        def encode(audio: np.ndarray, _mode: str) -> _Encoded:
            vae = model.audio_vae
            feat = vae.encode(mx.array(audio)[None, None, :], vae.sample_rate).squeeze(0)
            count = feat.shape[0] // model.patch_size
            feat = feat[:count * model.patch_size].reshape(count, model.patch_size, -1)
            mx.eval(feat)
            return _Encoded(feat)

        feat = self._features_of(ref, encode)
        if ref.text:   # a prompt: its words are continued
            return {"prompt_audio": feat, "prompt_text": _joined(ref.text)}
        return {"ref_audio": feat}

    # ------------------------------------------------------------------ speaking

    def max_patches(self, clause: str) -> int:
        """The bound on one clause's generation: a runaway ends (LESSONS: temperature)."""
        return max(4, math.ceil((len(clause) * self.settings.max_s_per_char + 1.0)
                                / self.patch_s))

    def speak(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
              voice: Reference | None = None) -> Iterator[Spoken]:
        """Stream each clause (torch: patch by patch; mlx: whole), faded at its ends.

        ``voice`` (with `voice = "speaker"`): a reference, or a prompt when it has its words
        (the tts actor gives one per `voice_mode`).

        Catching up (`speed` > 1): VoxCPM2 has no rate knob, so each clause is made whole,
        then time-stretched (Rubber Band); it waits at the player anyway when catching up.
        """
        self._ready(lang, self.model)
        ref = self.voice_for(voice)
        if self.settings.seed is not None:
            self._seed(self.settings.seed)
        for n, clause in enumerate(self.plan(text, eager, speed)):
            made = Timed(self._torch_clause(clause, ref) if self.backend == "torch"
                          else self._mlx_clause(clause, ref))
            chunks: Iterator[np.ndarray] = made
            if speed != 1.0:
                whole = np.concatenate(list(chunks) or [np.zeros(0, np.float32)])
                chunks = iter([time_stretch(whole, self.sample_rate, speed)])
            speech = 0.0
            for pcm, ends in _faded(chunks, int(FADE_S * self.sample_rate)):
                speech += len(pcm) / self.sample_rate
                yield Spoken(n, pcm, ends)
            if speed == 1.0:   # what this piece cost: the next plans are sized by it
                self.pace.took(made.spent_s, speech, len(clause))
                log.info("voxcpm2: piece %d (%d chars) made in %.2f s, %.2f s of speech; "
                         "pace now P %.2f s, r %.2f, %.3f s per char", n, len(clause),
                         made.spent_s, speech, self.pace.prefill_s, self.pace.rate,
                         self.pace.s_per_char)

    def _check_lang(self, lang: str) -> None:
        if lang not in LANGUAGES:
            raise ValueError(f"voxcpm2 does not speak {lang!r}")

    def _seed(self, seed: int) -> None:
        if self.backend == "torch":
            self._torch.manual_seed(seed)
        else:
            self._mx.random.seed(seed)

    def _torch_clause(self, clause: str, ref: Reference | None) -> Iterator[np.ndarray]:
        s = self.settings
        gen = self.model.generate_with_prompt_cache_streaming(
            target_text=clause, prompt_cache=self._torch_cache(ref), min_len=2,
            max_len=self.max_patches(clause), inference_timesteps=s.inference_timesteps,
            cfg_value=s.cfg_value, retry_badcase=False)
        try:
            for wav, _tokens, _feats in gen:
                yield wav.squeeze(0).float().numpy()
        finally:
            gen.close()

    def _mlx_clause(self, clause: str, ref: Reference | None) -> Iterator[np.ndarray]:
        s = self.settings
        gen = self.model.generate(clause, max_tokens=self.max_patches(clause),
                                  inference_timesteps=s.inference_timesteps,
                                  cfg_value=s.cfg_value, warmup_patches=s.warmup_patches,
                                  **self._mlx_voice(ref))
        try:
            for result in gen:
                yield mlx.float32(result.audio)   # bfloat16 weights give bfloat16 audio
        finally:
            gen.close()


def _mlx_folder(folder: Path) -> bool:
    """Whether `folder` holds VoxCPM2 as mlx-audio converts it, not as voxcpm loads it.

    mlx-audio's conversion keeps the VAE inside its weights (quantized or not); openbmb's
    folder for voxcpm has it beside them (audiovae.pth).
    """
    return not any((folder / f"audiovae.{ext}").is_file() for ext in ("pth", "safetensors"))


def _vae_in_weights(folder: Path) -> bool:
    """Whether `folder`'s safetensors hold the audio VAE (`audio_vae.*`): mlx-audio reads it there.

    openbmb's torch folder has it in audiovae.pth only. Only the files' headers are read.
    """
    from safetensors import safe_open

    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="numpy") as weights:
            if any(key.startswith("audio_vae.") for key in weights.keys()):
                return True
    return False


class _Encoded:
    """A voice's VAE features, encoded once, passed through mlx-audio's `generate`."""

    def __init__(self, feat: Any) -> None:
        self.feat = feat


def _joined(prompt_text: str) -> str:
    """A prompt's words, to which both backends append the text with no space between."""
    return prompt_text if not prompt_text or prompt_text[-1].isspace() else prompt_text + " "


def _faded(chunks: Iterator[np.ndarray], fade: int) -> Iterator[tuple[np.ndarray, bool]]:
    """The chunks of one clause, its first faded in and its last faded out (and marked).

    One chunk is held back so the last is known when it goes out; the decoder's chunks are
    continuous, so only a clause's two ends can click against a neighbour.
    """
    held: np.ndarray | None = None
    first = True
    for chunk in chunks:
        chunk = np.asarray(chunk, np.float32).reshape(-1)
        if not len(chunk):
            continue
        if held is not None:
            yield held, False
        if first:
            chunk = chunk.copy()
            n = min(fade, len(chunk))
            chunk[:n] *= np.linspace(0.0, 1.0, n, dtype=np.float32)
            first = False
        held = chunk
    if held is not None:
        held = held.copy()
        n = min(fade, len(held))
        held[len(held) - n:] *= np.linspace(1.0, 0.0, n, dtype=np.float32)
        yield held, True
