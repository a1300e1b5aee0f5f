"""simulated: a voice that takes the time a Mac's VoxCPM2 would take, to measure pacing here.

No Mac is at hand where the project is built, so the pacing of VoxCPM2 on MLX (each piece
made whole before it plays: a prefill P with the reference voice, then r seconds per second
of audio, jitter while Whisper shares the GPU, a one-time cost on the first call) is proven
on Linux first: this engine plans its pieces as VoxCPM2 on MLX does (`growing_chunks` with a
`Pace` learnt from every piece it makes), speaks each with a real voice of this machine
(espeak-ng), and takes as long over it as the profile says, so the real tts actor and
player meet the timeline a Mac would give them. `deploy/mac-simulated.toml` runs it:
`voxweft bench --topology deploy/mac-simulated.toml` reports the holes heard inside
utterances ("underruns inside an utterance") and the first audio. What the profile says is
an assumption until `voxweft doctor --measure` on a Mac gives its pieces (docs/mac.md).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from voxweft.actors.engines.tts import Pace, Reference, Spoken, TtsEngine, growing_chunks
from voxweft.actors.engines.tts.espeak import EspeakEngine


class SimulatedVoice(TtsEngine):
    """espeak-ng's audio, each piece taking what the profile says a Mac's VoxCPM2 takes."""

    name: ClassVar[str] = "simulated"
    MEMORY_MB = 100

    class Settings(TtsEngine.Settings):
        """The profile: what a piece costs, how late some come, the first call's cost."""

        prefill_s: float = Field(0.6, ge=0.0, le=5.0)      # per piece, with a reference voice
        rate: float = Field(0.45, ge=0.0, le=5.0)          # s to make a second of audio
        late_share: float = Field(0.3, ge=0.0, le=1.0)     # pieces made while asr decodes
        late_s: float = Field(0.3, ge=0.0, le=5.0)         # ... each this much later, at most
        first_call_s: float = Field(1.0, ge=0.0, le=30.0)  # voice encoding, compile, kernels
        seed: int = 0
        # VoxCPM2's plan (engines.tts.voxcpm2): first piece, growth, longest piece
        first_chunk_chars: int = Field(24, ge=4, le=400)
        chunk_growth: float = Field(2.0, ge=1.0, le=8.0)
        max_clause_chars: int = Field(200, ge=20, le=1000)

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.voice = EspeakEngine(threads=self.settings.threads)
        self.sample_rate = self.voice.sample_rate
        self.pace = Pace()   # learnt from every piece made, as VoxCPM2's is
        self.first_call = True
        self.random = random.Random(self.settings.seed)

    def languages(self) -> frozenset[str]:
        """Those espeak-ng speaks here."""
        return self.voice.languages()

    def load(self) -> None:
        """espeak-ng found, every voice probed."""
        self.voice.load()

    def plan(self, text: str, eager: bool = True, speed: float = 1.0) -> list[str]:
        """VoxCPM2 on MLX's plan: paced by what its pieces cost here, played at `speed`."""
        s = self.settings
        return growing_chunks(text, s.first_chunk_chars, s.chunk_growth, s.max_clause_chars,
                              eager, pace=self.pace, speed=speed)

    def cost_s(self, speech_s: float) -> float:
        """What making a piece of `speech_s` seconds takes in the profile (drawn)."""
        s = self.settings
        cost = s.prefill_s + s.rate * speech_s
        if self.random.random() < s.late_share:
            cost += self.random.uniform(0.0, s.late_s)
        if self.first_call:
            cost, self.first_call = cost + s.first_call_s, False
        return cost

    def speak(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
              voice: Reference | None = None) -> Iterator[Spoken]:
        """Each piece whole, once its time is up (see the module)."""
        for n, piece in enumerate(self.plan(text, eager, speed)):
            started = time.monotonic()
            audio = np.concatenate([np.zeros(0, np.float32),
                                    *self.voice.synthesize(piece, lang, speed)])
            speech = len(audio) / self.sample_rate
            # VoxCPM2 makes the speech at its own rate, then stretches it (`speed`): it pays
            # for the speech before the stretch
            time.sleep(max(0.0, self.cost_s(speech * speed) - (time.monotonic() - started)))
            if speed == 1.0:   # as VoxCPM2 learns: what this piece cost
                self.pace.took(time.monotonic() - started, speech, len(piece))
            if audio.size:
                yield Spoken(n, audio)
