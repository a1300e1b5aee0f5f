"""Echo cancellers: the microphone with the loudspeaker's sound taken out.

One engine per file beside this one, behind `EchoCanceller`; `CANCELLERS` names them. The
capture actor owns one (its model) when the topology cancels echo (`Topology.echo_handling`);
actors.echo aligns the player's output with the microphone and feeds it here. The bench
(`voxweft bench --echo`) measures every engine on the same sessions (docs/echo.md).
"""

from __future__ import annotations

import abc
import importlib
from typing import ClassVar

import numpy as np

from voxweft.protocol.messages import BUS_RATE

#: Engines by name: module:class. "speex" is the default (docs/echo.md says why).
CANCELLERS = {"speex": "voxweft.actors.engines.echo.speex:SpeexCanceller",
              "webrtc": "voxweft.actors.engines.echo.webrtc:WebrtcCanceller"}
#: Every engine works on blocks of this many samples (10 ms at the bus rate: WebRTC's frame).
BLOCK = BUS_RATE // 100


class EchoCanceller(abc.ABC):
    """Takes the loudspeaker out of 16 kHz mono microphone audio, block by block."""

    name: ClassVar[str] = ""
    #: Its output is the microphone less a filtered reference (nothing suppressed): what it
    #: took away is its prediction of the echo (EchoPath's SlipWatch looks at that).
    linear: ClassVar[bool] = False

    def __init__(self, filter_ms: int = 512) -> None:
        self.filter_ms = filter_ms

    @abc.abstractmethod
    def load(self) -> None:
        """Build the canceller (its library is opened here, never in __init__)."""

    @abc.abstractmethod
    def block(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """One BLOCK of int16 microphone audio without the echo of `ref` (int16, BLOCK)."""

    def impulse_response(self) -> np.ndarray | None:
        """The echo path the canceller has learnt (samples at BUS_RATE), if it says."""
        return None

    def process(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """Float32 microphone audio (a whole number of BLOCKs) with `ref`'s echo removed."""
        out = np.empty(len(mic), np.float32)
        m16, r16 = to_int16(mic), to_int16(ref)
        for i in range(0, len(mic) - BLOCK + 1, BLOCK):
            out[i:i + BLOCK] = self.block(m16[i:i + BLOCK], r16[i:i + BLOCK]) / 32768.0
        return out


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1] as int16 (both libraries work on 16-bit samples)."""
    return (np.clip(pcm, -1.0, 32767 / 32768) * 32768).astype(np.int16)


def canceller(name: str, filter_ms: int = 512) -> EchoCanceller:
    """Construct (never load) engine `name`; KeyError naming the choices."""
    if name not in CANCELLERS:
        raise KeyError(f"echo engine {name!r} is not one of: {', '.join(CANCELLERS)}")
    module, cls = CANCELLERS[name].split(":")
    return getattr(importlib.import_module(module), cls)(filter_ms=filter_ms)
