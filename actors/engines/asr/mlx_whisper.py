"""mlx-whisper: Whisper on MLX (Apple GPU through Metal; elsewhere MLX's CPU backend).

Models: "base" and "tiny.en" are the Whisper models shipped in pip packages for faster-whisper
(CTranslate2), converted once into the MLX layout by ``whisper_convert`` (beside this file)
and kept in ``$VOXWEFT_MODELS/mlx-whisper-<model>-<dtype>[-q<bits>]`` (default
``~/.cache/voxweft/models``); a catalogue name (``voxweft models``: e.g.
``mlx-whisper-large-v3-turbo``, installed by ``voxweft models fetch``); or a folder in the MLX
layout (``config.json`` + ``weights.safetensors``), as ``voxweft models convert-whisper``
writes it.

Decoding is greedy (mlx_whisper has no beam search), without timestamps. As in the
faster-whisper engine, an utterance is encoded in a window of `window_s` multiples with 1 s
of margin instead of Whisper's 30 s: MLX's encoder refuses any input but 30 s (it checks the
shape against its 1500 sinusoidal positions), so the positions are cut to the window for the
call. Whisper in a window barely longer than the speech repeats itself ("A. A. A.", measured
on LJ clips in 2-3 s windows): `cut_restart` keeps one copy, and a text still degenerate, or
that starts over and goes on (`starts_over`), is decoded again with the full window; with
the default 5 s steps neither fired on our corpus.

On Linux MLX runs on the CPU. Measured on 2 cores, the 5 LJ clips (2-6 s), same words as
faster-whisper on all 5: float32 1.5 s per utterance with OpenBLAS preloaded (LD_PRELOAD),
~9 s with MLX's own reference BLAS; float16 and 4-bit ~10 s (no BLAS); faster-whisper int8
0.2 s. There this engine is for parity checks, and float32 with OpenBLAS is its only usable
setting (`dtype` "auto" picks float32; the preload must come from the process's environment).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import sys
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from voxweft.actors.engines import importing, mlx, models
from voxweft.actors.engines.asr import NoSpeechRule, WhisperEngine, log, without_restart
from voxweft.actors.engines.resources import weights_mb
from voxweft.actors.settings.base import StartupError
from voxweft.protocol.messages import BUS_RATE

#: Packaged models converted on first load, by the name a topology gives them.
PACKAGED_MODELS = ("base", "tiny.en")
#: Whisper's language codes in token order (mlx_whisper.tokenizer.LANGUAGES, which takes
#: seconds to import); a model with N languages knows the first N.
WHISPER_LANGUAGES = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
    "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
    "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
    "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
    "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
    "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
)


def packaged_source(model: str):
    """What the converter takes for a packaged Whisper: base (file bytes) or tiny.en (folder)."""
    from voxweft.actors.engines.asr.faster_whisper import (
        packaged_whisper_base,
        packaged_whisper_tiny_en,
    )

    return packaged_whisper_base() if model == "base" else packaged_whisper_tiny_en()


def _is_mlx_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (
        (folder / "weights.safetensors").is_file() or (folder / "weights.npz").is_file())


def _language_count(n_vocab: int) -> int:
    """How many languages a Whisper vocabulary has (0: English only), as mlx_whisper counts."""
    return n_vocab - 51765 - 1 if n_vocab >= 51865 else 0


def _set_openblas_threads(threads: int) -> str:
    """Tell an OpenBLAS already in the process (LD_PRELOAD) how many threads to use.

    MLX's CPU backend does its float32 matmuls in whatever BLAS provides `cblas_sgemm`; an
    OpenBLAS preloaded reads OPENBLAS_NUM_THREADS only when the process starts, so the
    setting is applied through its API. Returns the library's path, or "" when none is loaded.
    """
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:    # not Linux
        return ""
    paths = {line.split()[-1] for line in maps.splitlines() if "libopenblas" in line}
    for path in sorted(paths):
        try:
            ctypes.CDLL(path).openblas_set_num_threads(int(threads))
        except (OSError, AttributeError):
            continue
        return path
    return ""


class MlxWhisperEngine(WhisperEngine):
    """Whisper with mlx-whisper. `model`: "base", "tiny.en" (packaged) or an MLX folder.

    `dtype` "auto" is float16 on Metal and float32 on the CPU (MLX's CPU float16 and
    quantized matmuls do not use BLAS and are several times slower); `bits` 4 or 8 quantizes
    a packaged model when it is converted (group size 64, as mlx-examples does).
    """

    name = "mlx-whisper"

    class Settings(NoSpeechRule):
        """Which Whisper and how it is computed (and the no-speech rule)."""

        model: str = "base"
        dtype: Literal["auto", "float16", "float32"] = "auto"
        bits: Literal[0, 4, 8] = 0        # quantize the packaged model (0: as converted)
        threads: int = Field(2, ge=1, le=64)   # BLAS threads (CPU); the actor's budget
        window_s: Literal[5, 10, 15, 30] = 5   # 30 = Whisper's native window
        cache_limit_mb: int = Field(256, ge=0, le=65536)   # MLX's freed buffers kept for reuse

        @field_validator("model")
        @classmethod
        def _model(cls, model: str) -> str:
            if model in PACKAGED_MODELS or _is_mlx_folder(Path(model)) or \
                    models.find(model) is not None:   # a catalogue model, fetched or not
                return model
            if (Path(model) / "model.bin").is_file():
                raise ValueError(f"model = {model!r} is a CTranslate2 folder; convert it with "
                                 f"`voxweft models convert-whisper {model} OUT_DIR`")
            raise ValueError(f"model = {model!r} is none of: {', '.join(PACKAGED_MODELS)}, "
                             "a catalogue name (`voxweft models`), nor an MLX Whisper folder "
                             "(config.json + weights.safetensors)")

    @classmethod
    def process_env(cls) -> dict[str, str]:
        """Environment the actor process must start with: OpenBLAS preloaded on Linux.

        MLX's CPU build links a reference BLAS (float32 matmul ~3 GFLOP/s here); the system
        OpenBLAS, preloaded, gives 22-27 and makes ASR ~5x faster (9.0 -> 1.5 s per LJ
        utterance). A preload must be there when the process starts, hence here.
        """
        if sys.platform != "linux":
            return {}
        library = ctypes.util.find_library("openblas")
        return {"LD_PRELOAD": library} if library else {}

    def __init__(self, **settings) -> None:
        self.settings = self.Settings.check(settings)
        if self.settings.bits and self.settings.model not in PACKAGED_MODELS:
            raise ValueError(f"bits = {self.settings.bits} applies to the packaged models "
                             f"({', '.join(PACKAGED_MODELS)}) only; a folder keeps its own")
        self.model = None
        self.path: Path | None = None       # the MLX folder loaded
        self.dtype = ""                     # float16 | float32, chosen at load
        self.blas = ""                      # the OpenBLAS library in use, if any
        self._positions = None              # the encoder's sinusoids for 30 s
        self.fallbacks = 0    # short-window decodes redone with the full window
        self.no_speech = 0    # short-window decodes dropped by the no-speech rule
        self._languages = self._model_languages()

    def _model_languages(self) -> frozenset[str]:
        model = str(self.settings.model)
        n_vocab = {"base": 51865, "tiny.en": 51864}.get(model)
        folder = models.resolve(model)
        if n_vocab is None and folder is not None and not (folder / "config.json").is_file():
            # a catalogue model not fetched yet: its name says whether it is English-only
            return frozenset({"en"}) if model.endswith(".en") else frozenset(WHISPER_LANGUAGES)
        if n_vocab is None:
            try:
                n_vocab = int(json.loads((folder / "config.json").read_text())["n_vocab"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"model = {model!r}: config.json has no n_vocab ({exc})") \
                    from None
        count = _language_count(n_vocab)
        return frozenset(WHISPER_LANGUAGES[:count]) if count else frozenset({"en"})

    def languages(self) -> frozenset[str]:
        """Whisper's languages (the model's vocabulary says how many), or {"en"} for ".en"."""
        return self._languages

    def _folder(self, dtype: str) -> Path:
        """The MLX folder to load; a packaged model is converted on its first use."""
        model = self.settings.model
        if model not in PACKAGED_MODELS:
            folder = models.resolve(model)
            if not _is_mlx_folder(folder):
                raise StartupError(models.not_fetched(folder))
            return folder
        bits = int(self.settings.bits)
        folder = models.models_root() / \
            f"mlx-whisper-{model}-{dtype}{f'-q{bits}' if bits else ''}"
        if not _is_mlx_folder(folder):
            from voxweft.actors.engines.asr.whisper_convert import convert

            source = packaged_source(model)
            log.info("asr: converting the packaged Whisper %s to MLX %s%s in %s", model, dtype,
                     f" {bits}-bit" if bits else "", folder)
            convert(source, folder, dtype=dtype, bits=bits or None)
        return folder

    def load(self) -> None:
        """Load (converting first if needed) the model once; set the CPU threads."""
        with importing("asr", "mlx-whisper"):
            import mlx.core as mx
            from mlx_whisper.load_models import load_model

        mlx.limit_cache(self.settings.cache_limit_mb)
        dtype = self.settings.dtype
        if dtype == "auto":
            dtype = "float16" if mx.metal.is_available() else "float32"
        self.path = self._folder(dtype)
        self.model = load_model(str(self.path), dtype=getattr(mx, dtype))
        weights_dtype = self.model.encoder.conv1.weight.dtype
        if weights_dtype != getattr(mx, dtype):   # a folder stored in another precision
            self.model.set_dtype(getattr(mx, dtype))
            mx.eval(self.model.parameters())
        self.dtype = dtype
        self._positions = self.model.encoder._positional_embedding
        if not mx.metal.is_available():
            self.blas = _set_openblas_threads(int(self.settings.threads))
            # Measured on 2 cores (5 LJ clips, s per utterance): float32 1.5 with OpenBLAS,
            # ~8 without; float16 ~10; 4-bit ~8-11 (float32 scales), ~260 (float16 scales).
            if dtype != "float32" or self.settings.bits:
                log.warning("asr: mlx on the CPU computes %s%s without BLAS, 5-100x slower "
                            "than float32 with OpenBLAS", dtype,
                            f" {self.settings.bits}-bit" if self.settings.bits else "")
            elif not self.blas:
                log.warning("asr: mlx uses its reference BLAS (slow float32 matmuls); preload "
                            "OpenBLAS (LD_PRELOAD=libopenblas.so.0) for ~5x faster ASR")

    def memory_mb(self) -> int:
        """MLX and the actor (~350 MB), the weights, and the cache of freed buffers."""
        return 350 + weights_mb(models.weights_bytes(str(self.settings.model)), 300) + \
            int(self.settings.cache_limit_mb)

    def on_gpu(self) -> bool:
        """Whether it computes on the GPU (Metal): its budget is then GPU time."""
        return mlx.on_metal()

    def transcribe(self, pcm: np.ndarray, lang: str, prefix: str = "") -> str:
        """Greedy decoding of one utterance (16 kHz mono float32), no timestamps."""
        text = self._short_window(pcm, lang, prefix)
        if text is not None:
            return text
        duration_s = len(pcm) / BUS_RATE
        if duration_s <= self.FULL_WINDOW_S - 1:
            return without_restart(prefix, self._window_text(pcm, lang, self.FULL_WINDOW_S,
                                                             duration_s, prefix))
        return self._transcribe_long(pcm, lang)   # asr gives a prefix with less speech

    def _window_text(self, pcm: np.ndarray, lang: str, window_s: int,
                     duration_s: float, prefix: str = "") -> str:
        """Text of `pcm` after `prefix`, encoded in a window of `window_s` seconds (<= 30)."""
        import mlx.core as mx
        from mlx_whisper.audio import log_mel_spectrogram
        from mlx_whisper.decoding import DecodingOptions, decode

        samples = window_s * BUS_RATE
        # Pad the audio, not the features: Whisper's silence is the log-mel of zeros.
        mel = log_mel_spectrogram(pcm[:samples], n_mels=self.model.dims.n_mels,
                                  padding=max(0, samples - len(pcm)) + 160)
        frames = window_s * 100   # 10 ms hop
        mel = mel[:frames].astype(getattr(mx, self.dtype))
        options = DecodingOptions(
            language=lang, without_timestamps=True,
            fp16=self.dtype == "float16", prompt=self.prompt or None,
            prefix=prefix.strip() or None,   # said first; the text is what follows it
            # Nobody says more than ~12 tokens a second: a looping decode stops early.
            sample_len=min(self.model.dims.n_text_ctx // 2, 10 + int(12 * duration_s)))
        encoder = self.model.encoder
        encoder._positional_embedding = self._positions[:frames // 2]   # 2 frames per position
        try:
            result = decode(self.model, mel, options)
        finally:
            encoder._positional_embedding = self._positions
        if self.settings.said_nothing(result.no_speech_prob, result.avg_logprob):
            self.no_speech += 1
            return ""
        return result.text.strip()

    def _transcribe_long(self, pcm: np.ndarray, lang: str) -> str:
        """An utterance longer than one window: mlx_whisper's own 30 s windowing."""
        rule = self.settings
        result = self._mlx_transcribe(
            pcm, lang, without_timestamps=True, initial_prompt=self.prompt or None,
            no_speech_threshold=(rule.no_speech_threshold if rule.no_speech_threshold < 1.0
                                 else None), logprob_threshold=rule.logprob_threshold)
        return str(result["text"]).strip()

    def word_times(self, pcm: np.ndarray, lang: str) -> list[tuple[str, float, float]]:
        """(word, start s, end s) of each word in `pcm`.

        Whisper's cross-attention alignment (the alignment heads the converter carried over
        from CTranslate2) over its full window: for measurements such as the bench's
        per-word lag, not on the live path.
        """
        result = self._mlx_transcribe(pcm, lang, word_timestamps=True)
        return [(w["word"].strip(), round(float(w["start"]), 3), round(float(w["end"]), 3))
                for s in result["segments"] for w in s.get("words", ())]

    def _mlx_transcribe(self, pcm: np.ndarray, lang: str, **options) -> dict:
        """mlx_whisper.transcribe on our model (greedy with its temperature fallback)."""
        from mlx_whisper.transcribe import ModelHolder, transcribe

        # transcribe() takes a path and caches one model by it: give it ours, loaded once.
        ModelHolder.model, ModelHolder.model_path = self.model, str(self.path)
        return transcribe(
            pcm, path_or_hf_repo=str(self.path), language=lang, fp16=self.dtype == "float16",
            condition_on_previous_text=False, verbose=None, **options)
