"""speex: the Speex DSP library's echo canceller (MDF: an adaptive linear filter), via ctypes.

Linear only: it subtracts the echo it predicts from what the loudspeaker played and leaves
the rest of the microphone as it was, so a speaker talking over the loudspeaker is heard as
clearly as without it (WebRTC's AEC3 adds a suppressor that damaged exactly that speech:
docs/echo.md). libspeexdsp comes from the system (Debian's libspeexdsp1, Homebrew's
speexdsp), opened with ctypes: four C functions, nothing to compile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from pathlib import Path

import numpy as np

from voxweft.actors.engines.echo import BLOCK, EchoCanceller
from voxweft.actors.settings.base import StartupError
from voxweft.protocol.messages import BUS_RATE

SET_SAMPLING_RATE = 24           # speex_echo.h: SPEEX_ECHO_SET_SAMPLING_RATE
GET_IMPULSE_RESPONSE_SIZE = 27   # SPEEX_ECHO_GET_IMPULSE_RESPONSE_SIZE
GET_IMPULSE_RESPONSE = 29        # SPEEX_ECHO_GET_IMPULSE_RESPONSE
#: Where Homebrew puts libraries, which ctypes.util does not search on macOS.
BREW_LIBS = ("/opt/homebrew/lib", "/usr/local/lib")
INSTALL = ("install libspeexdsp: apt-get install libspeexdsp1 (Debian/Ubuntu), "
           "brew install speexdsp (macOS); or set echo_mode = \"gate\"")


def open_library() -> ctypes.CDLL:
    """libspeexdsp, with the signatures we call; StartupError saying how to install it."""
    found = ctypes.util.find_library("speexdsp")
    candidates = [found] if found else ["libspeexdsp.so.1"]   # ldconfig may be off PATH
    if sys.platform == "darwin":
        candidates += [str(Path(d) / "libspeexdsp.dylib") for d in BREW_LIBS]
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError:
            continue
    else:
        raise StartupError(f"echo engine speex: libspeexdsp not found; {INSTALL}")
    lib.speex_echo_state_init.restype = ctypes.c_void_p
    lib.speex_echo_state_init.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.speex_echo_state_destroy.argtypes = [ctypes.c_void_p]
    lib.speex_echo_cancellation.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 3
    lib.speex_echo_ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return lib


class SpeexCanceller(EchoCanceller):
    """Speex's MDF echo canceller: a filter `filter_ms` long (delay and reverberation)."""

    name = "speex"
    linear = True

    def load(self) -> None:
        """Open libspeexdsp and make the filter."""
        self.lib = open_library()
        taps = BUS_RATE * self.filter_ms // 1000
        self.state = self.lib.speex_echo_state_init(BLOCK, taps)
        rate = ctypes.c_int(BUS_RATE)
        self.lib.speex_echo_ctl(self.state, SET_SAMPLING_RATE, ctypes.byref(rate))
        self.out = np.zeros(BLOCK, np.int16)

    def block(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """One block through the filter."""
        mic, ref = np.ascontiguousarray(mic), np.ascontiguousarray(ref)
        self.lib.speex_echo_cancellation(self.state, mic.ctypes.data, ref.ctypes.data,
                                         self.out.ctypes.data)
        return self.out.copy()

    def impulse_response(self) -> np.ndarray:
        """The filter's taps: its peak is the echo's delay."""
        size = ctypes.c_int(0)
        self.lib.speex_echo_ctl(self.state, GET_IMPULSE_RESPONSE_SIZE, ctypes.byref(size))
        taps = (ctypes.c_int32 * size.value)()
        self.lib.speex_echo_ctl(self.state, GET_IMPULSE_RESPONSE, taps)
        return np.frombuffer(taps, np.int32).astype(np.float32)

    def __del__(self) -> None:
        state = getattr(self, "state", None)
        if state:
            self.lib.speex_echo_state_destroy(state)
            self.state = None
