"""The room of the live echo bench: what the loudspeaker plays comes back into the microphone.

Run as its own process (`python -m voxweft.tools.bench.roomrelay RESPONSE.npy`) with
PULSE_SOURCE naming the loudspeaker's monitor and PULSE_SINK the microphone's sink: one
duplex PortAudio stream takes each block the loudspeaker played, convolves it with the room's
impulse response (overlap-add, by FFT) and plays it into the microphone's sink over the room's
noise floor. One stream, so as many samples go out as come in, on the sound server's clock:
the echo's delay does not move. (Two `pacat` processes with a thread between them drifted:
the delay the canceller found grew from 141 to 196 ms in one run, to 289 ms beside a CPU hog,
each late block adding to it for good; a room's echo path does not move.) It runs until its
standard input closes or it is terminated; it says on standard error how many blocks came
late (PortAudio's under- and overflows).
"""

from __future__ import annotations

import signal
import sys
import threading

import numpy as np

from voxweft.protocol.messages import BUS_RATE

#: Blocks of 20 ms at the bus rate.
BLOCK = BUS_RATE // 50
#: The room's own noise (dBFS): a microphone never hears digital silence.
NOISE_DBFS = -65.0


class Convolver:
    """A signal through an impulse response, BLOCK samples at a time (overlap-add, by FFT)."""

    def __init__(self, response: np.ndarray) -> None:
        h = np.asarray(response, np.float64)
        self.size = 1 << int(np.ceil(np.log2(BLOCK + len(h))))
        self.spectrum = np.fft.rfft(h, self.size)
        self.acc = np.zeros(self.size)

    def __call__(self, block: np.ndarray) -> np.ndarray:
        """The next len(block) (at most BLOCK) samples of the output."""
        n = len(block)
        self.acc += np.fft.irfft(np.fft.rfft(block, self.size) * self.spectrum, self.size)
        out = self.acc[:n].copy()
        self.acc[:-n] = self.acc[n:]
        self.acc[-n:] = 0.0
        return out


def main(argv: list[str]) -> int:
    """Relay until stdin closes or SIGTERM."""
    import sounddevice as sd

    room = Convolver(np.load(argv[1]))
    rng = np.random.default_rng(11)
    level = 10 ** (NOISE_DBFS / 20)
    late = [0]

    def relay(indata, outdata, frames, _time, status) -> None:
        if status:
            late[0] += 1
        for i in range(0, frames, BLOCK):
            x = indata[i:i + BLOCK, 0].astype(np.float64)
            outdata[i:i + len(x), 0] = room(x) + rng.standard_normal(len(x)) * level

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    with sd.Stream(samplerate=BUS_RATE, blocksize=BLOCK, channels=1, dtype="float32",
                   device=("pulse", "pulse"), latency=(0.02, 0.06), callback=relay):
        print("relaying", file=sys.stderr, flush=True)
        done.wait()
    print(f"relay: {late[0]} block(s) late", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
