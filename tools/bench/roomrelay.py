"""The room of the live echo bench: the speaker talks, and what the loudspeaker plays comes back.

Run as its own process (`python -m voxweft.tools.bench.roomrelay RESPONSE.npy [SPEECH.wav]`)
with PULSE_SOURCE naming the loudspeaker's monitor and PULSE_SINK the microphone's sink: one
duplex PortAudio stream takes each block the loudspeaker played, convolves it with the room's
impulse response (overlap-add, by FFT) and plays it into the microphone's sink over the room's
noise floor. One stream, so as many samples go out as come in, on the sound server's clock:
the echo's delay does not move. (Two `pacat` processes with a thread between them drifted:
the delay the canceller found grew from 141 to 196 ms in one run, to 289 ms beside a CPU hog,
each late block adding to it for good; a room's echo path does not move.)

The speaker talks in the same stream: on SIGUSR1 the relay mixes SPEECH (16 kHz mono) into
what it plays, from its next block on, and says "spoke" on standard error when it is all out.
(A room is one sound; a second client on the same sink was one more stream whose start
the sound server mixes in, and the echo's delay moved by samples in some runs then, as it
still did, less often, after this change: `docs/echo.md`.) It runs until its standard
input closes or it is terminated; it says on standard error how many blocks came late
(PortAudio's under- and overflows).
"""

from __future__ import annotations

import signal
import sys
import threading

import numpy as np

from voxweft.protocol.messages import BUS_RATE
from voxweft.tools.bench import soundserver

#: Blocks of 20 ms at the bus rate.
BLOCK = BUS_RATE // 50
#: SCHED_FIFO priority of the relay (PulseAudio's own real-time threads run at 5).
RT_PRIORITY = 10
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


def realtime() -> None:
    """Run ahead of the pipeline's actors where the system allows it (SCHED_FIFO).

    A room does not wait for the CPU: starved beside the six actors on 2 cores, the relay
    came late (PortAudio's under- and overflows) and the echo came 9-146 ms later from then
    on in some runs, a move no room makes (docs/echo.md). Without the right (not root, no
    RLIMIT_RTPRIO) it says so and runs as it is.
    """
    why = soundserver.realtime(0, RT_PRIORITY)
    if why:
        print(f"relay: not real-time ({why}): a busy machine may move the echo",
              file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """Relay until stdin closes or SIGTERM."""
    import sounddevice as sd

    room = Convolver(np.load(argv[1]))
    speech = np.zeros(0)
    if len(argv) > 2:
        import soundfile

        speech, rate = soundfile.read(argv[2], dtype="float64")
        if rate != BUS_RATE or speech.ndim != 1:
            print(f"relay: {argv[2]} is not {BUS_RATE} Hz mono", file=sys.stderr, flush=True)
            return 2
    rng = np.random.default_rng(11)
    level = 10 ** (NOISE_DBFS / 20)
    late = [0]
    talk = threading.Event()
    spoken = [0]   # samples of the speech played so far

    def relay(indata, outdata, frames, _time, status) -> None:
        if status:
            late[0] += 1
        for i in range(0, frames, BLOCK):
            x = indata[i:i + BLOCK, 0].astype(np.float64)
            out = room(x) + rng.standard_normal(len(x)) * level
            if talk.is_set() and spoken[0] < len(speech):
                said = speech[spoken[0]:spoken[0] + len(x)]
                out[:len(said)] += said
                spoken[0] += len(said)
                if spoken[0] >= len(speech):
                    print("spoke", file=sys.stderr, flush=True)
            outdata[i:i + len(x), 0] = out

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGUSR1, lambda *_: talk.set())
    realtime()   # before the stream: its callback thread inherits the policy
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    with sd.Stream(samplerate=BUS_RATE, blocksize=BLOCK, channels=1, dtype="float32",
                   device=("pulse", "pulse"), latency=(0.02, 0.06), callback=relay):
        print("relaying", file=sys.stderr, flush=True)
        done.wait()
    print(f"relay: {late[0]} block(s) late", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
