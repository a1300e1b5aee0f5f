"""espeak: the espeak-ng program (formant synthesis, 22.05 kHz): robotic, near-instant."""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator

from voxweft.actors.engines.tts import (
    Reference,
    Spoken,
    TtsEngine,
    espeak_path,
    run_espeak,
    trim,
)


class EspeakEngine(TtsEngine):
    """Formant synthesis with the Debian ``espeak-ng`` program, one subprocess per clause."""

    name: ClassVar[str] = "espeak"
    MEMORY_MB = 100   # the actor; espeak-ng runs as a short-lived child
    DEFAULT_VOICES: ClassVar[dict[str, str]] = {
        "en": "en-us", "pt": "pt-br", "es": "es", "fr": "fr", "de": "de", "it": "it",
    }

    class Settings(TtsEngine.Settings):
        """Speaking rate and the espeak-ng voice of each language (threads: one per call)."""

        rate_wpm: int = Field(175, ge=80, le=450)
        voices: dict[str, str] = Field(default_factory=lambda: dict(EspeakEngine.DEFAULT_VOICES))

        @field_validator("voices")
        @classmethod
        def _voices(cls, voices: dict[str, str]) -> dict[str, str]:
            if not voices or not all(v.strip() for v in voices.values()):
                raise ValueError(
                    "voices must be a non-empty mapping of language code -> espeak-ng voice "
                    f"name (e.g. {EspeakEngine.DEFAULT_VOICES}), got {voices!r}")
            return voices

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.rate_wpm = self.settings.rate_wpm
        self.voices = dict(self.settings.voices)
        # espeak-ng voices all render at 22.05 kHz (mbrola ones are resampled in synthesize).
        self.sample_rate = 22050
        self._exe: str | None = None

    def languages(self) -> frozenset[str]:
        """The languages of the voice map."""
        return frozenset(self.voices)

    def load(self) -> None:
        """Find espeak-ng and check that every configured voice speaks."""
        self._exe = espeak_path()
        # Probe every configured voice once: a bad voice name fails here, not mid-conversation.
        for lang in sorted(self.voices):
            if next(self.synthesize("ok", lang), None) is None:
                raise RuntimeError(f"espeak-ng voice {self.voices[lang]!r} produced no audio")

    def speak(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
              voice: Reference | None = None) -> Iterator[Spoken]:
        """One 22.05 kHz clip per clause (see TtsEngine.speak)."""
        self._ready(lang, self._exe)
        return self._clauses(text, lang, speed)

    def _clauses(self, text: str, lang: str, speed: float = 1.0) -> Iterator[Spoken]:
        args = [self._exe, "-v", self.voices[lang], "-s", str(round(self.rate_wpm * speed)),
                "--stdout"]
        for n, clause in enumerate(self.plan(text)):
            audio = self._decode(run_espeak(args, clause))
            audio = trim(audio, self.sample_rate)
            if audio.size:
                yield Spoken(n, audio)

    def _decode(self, wav_bytes: bytes) -> np.ndarray:
        """WAV on stdout (16-bit mono; header sizes are left at 'unknown') -> float32."""
        with wave.open(io.BytesIO(wav_bytes)) as w:
            rate, width = w.getframerate(), w.getsampwidth()
            pcm = w.readframes(w.getnframes())
        if width != 2:
            raise RuntimeError(f"espeak-ng produced {8 * width}-bit audio; expected 16-bit")
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        if rate != self.sample_rate:
            import soxr  # only mbrola voices get here

            audio = soxr.resample(audio, rate, self.sample_rate).astype(np.float32)
        return np.clip(audio, -1.0, 1.0)


# --- Kokoro -------------------------------------------------------------------------------------

# espeak-ng voice used to phonemize each language for Kokoro.
