"""webrtc: WebRTC's audio processing module (AEC3, with its suppressor), from `livekit`.

Measured beside speex on the same sessions (docs/echo.md): it removes more echo when the
speaker is silent, and damages the speaker who talks over the loudspeaker. Kept to measure
and for rooms where nobody talks over the translation.
"""

from __future__ import annotations

import numpy as np

from voxweft.actors.engines.echo import BLOCK, EchoCanceller
from voxweft.actors.settings.base import StartupError
from voxweft.protocol.messages import BUS_RATE


class WebrtcCanceller(EchoCanceller):
    """AEC3 with a high-pass filter; the delay is its own estimate (we give it 0)."""

    name = "webrtc"

    def load(self) -> None:
        """Make the audio processing module."""
        try:
            from livekit import rtc
        except ImportError as exc:
            raise StartupError(f"echo engine webrtc: livekit is not installed ({exc}); "
                               "pip install livekit, or use echo_engine = \"speex\"") from None
        self.rtc = rtc
        self.apm = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)

    def block(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """One 10 ms block: the reference first, then the microphone, modified in place."""
        far = self.rtc.AudioFrame(bytearray(ref.tobytes()), BUS_RATE, 1, BLOCK)
        self.apm.process_reverse_stream(far)
        near = self.rtc.AudioFrame(bytearray(mic.tobytes()), BUS_RATE, 1, BLOCK)
        self.apm.set_stream_delay_ms(0)   # the reference is aligned already (actors.echo)
        self.apm.process_stream(near)
        return np.frombuffer(bytes(near._data), np.int16)
