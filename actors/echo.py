"""Full duplex: the microphone without the loudspeaker, so the speaker is heard while it plays.

The player publishes what it plays (`Played`: 16 kHz mono, the wall time its first sample is
heard, from PortAudio's DAC time) ahead of playing it; capture stamps each microphone frame
with the wall time of its first sample (PortAudio's ADC time). On one host both read one
clock, so the reference for a frame is what was heard at the frame's time: `EchoPath` keeps
the recent reference, cuts out the piece for each frame and gives both to an echo canceller
(actors.engines.echo). What the canceller cannot know, the room's delay and reverberation,
it learns; the reference is taken `LEAD_MS` early so that an echo a little earlier than the
stamps say (device latencies misreported by a few ms) is still ahead of its reference.

Until the canceller has learnt the room (`converged`), what the microphone hears while the
loudspeaker plays is silenced, as the gate does; from then on the speaker is heard over it.
It also says how it goes (`state()`, in capture's heartbeat, `voxweft status` and `watch`):
the echo's delay (the peak of the learnt echo path), how much quieter the microphone got
while the loudspeaker played, and whether that is enough to call it converged.
"""

from __future__ import annotations

import collections

import numpy as np

from voxweft.actors.engines.echo import BLOCK, EchoCanceller
from voxweft.protocol.messages import BUS_RATE

#: The reference is taken this early: an echo up to this much before its stamp is still
#: cancelled (the filter learns the delay, this included: `delay_ms` takes it off again).
LEAD_MS = 40
#: Reference kept: the filter's length and the lead, with room for a late frame.
KEEP_S = 3.0
#: Reference pieces kept at most (a player writes a piece per chunk: a few per second, and
#: up to tens of seconds ahead of playing it).
MAX_PIECES = 2000
#: A reference block this loud (RMS) is the loudspeaker playing: -60 dBFS.
PLAYING_RMS = 1e-3
#: How quickly the removed level follows (per block while playing: ~2 s of playing).
SMOOTH = 0.005
#: Removed this much (dB) over WINDOW_BLOCKS of playing: converged, for good (the filter
#: then follows a changing room by itself). Double talk lowers the figure (the speaker is
#: not removed), so a window where the speaker pauses is what first shows it. Until then the
#: microphone is silenced while the loudspeaker plays, as the gate does (measured: speex
#: reaches it after 5-10 s of playing; docs/echo.md).
CONVERGED_DB = 15.0
WINDOW_BLOCKS = 50   # 0.5 s
#: ... or after this much playing, whatever was measured: a speaker who never pauses while the
#: loudspeaker plays (continuous speech) gives no window of single talk, and would stay
#: silenced for good. Speex's 512 ms filter has removed 9-15 dB of a room's echo by then on
#: single talk (docs/echo.md), and goes on converging under double talk.
CONVERGED_PLAYING_MS = 8000


def describe(state: dict[str, float]) -> str:
    """Capture's echo state (Status.echo) in words, for `status`, `watch` and the captions."""
    if not state:
        return ""
    if not state.get("converged"):
        return (f"echo: learning the room ({state.get('playing_s', 0):.0f} s of the loudspeaker "
                "heard; the microphone is silenced while it plays until then)")
    delay = f", delay {state['delay_ms']:.0f} ms" if "delay_ms" in state else ""
    return (f"echo: cancelled (converged{delay}, the microphone "
            f"{state.get('removed_db', 0):.0f} dB quieter while the loudspeaker plays)")


class SampleClock:
    """Wall time of a stream's samples, smoothed: a line fitted to its frames' stamps.

    One frame's stamp (PortAudio's ADC time of its block) is off by a few ms, and the
    device's clock drifts against the wall clock (170 ppm seen on PulseAudio's null sink): a
    reference cut by each frame's own stamp jitters against the echo, and a linear canceller
    then removes 2 dB instead of 30. Samples are counted instead, and mapped to wall time by
    the least-squares line through the last `WINDOW` stamps (refitted every `REFIT` frames).
    """

    WINDOW, REFIT = 1500, 50   # frames: 30 s and 1 s of 20 ms frames

    def __init__(self) -> None:
        self.points: collections.deque[tuple[int, int]] = collections.deque(maxlen=self.WINDOW)
        self.samples = 0
        self.fit: tuple[float, float] | None = None   # ns at sample 0 (relative), ns/sample
        self.since_fit = 0
        self.origin = 0

    def push(self, n: int, stamp_ns: int) -> int:
        """A frame of `n` samples stamped `stamp_ns`: the smoothed wall time of its first."""
        if not self.points:
            self.origin = stamp_ns
        elif abs(stamp_ns - self.at(self.samples)) > 200 * 10**6:   # a gap: start again
            self.points.clear()
            self.origin, self.fit = stamp_ns, None
        self.points.append((self.samples, stamp_ns - self.origin))
        self.since_fit += 1
        if self.fit is None or self.since_fit >= self.REFIT:
            x = np.array([p[0] for p in self.points], np.float64)
            y = np.array([p[1] for p in self.points], np.float64)
            if len(x) >= 10 and np.ptp(x) > 0:
                slope, intercept = np.polyfit(x, y, 1)
                self.fit = (float(intercept), float(slope))
            else:
                self.fit = (float(np.mean(y - x * 1e9 / BUS_RATE)), 1e9 / BUS_RATE)
            self.since_fit = 0
        first = self.at(self.samples)
        self.samples += n
        return first

    def at(self, sample: int) -> int:
        """Wall time (ns) of `sample`."""
        if self.fit is None:
            return self.origin + sample * 10**9 // BUS_RATE
        return self.origin + int(self.fit[0] + self.fit[1] * sample)


class EchoPath:
    """The player's recent output on the microphone's timeline, and the canceller fed with it."""

    def __init__(self, engine: EchoCanceller, counters) -> None:
        self.engine = engine
        self.counters = counters
        self.pieces: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self.heard_until_ns = 0      # the end of the latest reference piece
        self.mic_energy = 0.0        # smoothed while playing: the microphone's ...
        self.out_energy = 0.0        # ... and what is left of it after cancelling
        self.pending = np.zeros(0, np.float32)   # microphone samples short of a block
        self.pending_ns = 0
        self.cancelled_until_ns = 0   # the reference taken so far reaches this wall time
        self.playing_until_ns = 0     # the end of the last block the loudspeaker played
        self.tail_ns = engine.filter_ms * 10**6   # an echo lasts this long after it plays
        self.converged = False
        self.clock = SampleClock()
        self.window = [0.0, 0.0, 0]   # microphone and output energy over playing blocks

    # -- the reference ----------------------------------------------------------------------
    def played(self, heard_ns: int, pcm: np.ndarray) -> None:
        """The player will be heard playing `pcm` (BUS_RATE) from wall time `heard_ns`."""
        if not len(pcm):
            return
        if heard_ns < self.cancelled_until_ns:   # came after its microphone frames: not used
            late = min(self.cancelled_until_ns - heard_ns, len(pcm) * 10**9 // BUS_RATE)
            self.counters["echo_late_ms"] += late // 10**6
        self.pieces.append((heard_ns, np.asarray(pcm, np.float32)))
        self.heard_until_ns = max(self.heard_until_ns,
                                  heard_ns + len(pcm) * 10**9 // BUS_RATE)
        while len(self.pieces) > MAX_PIECES:   # bounded, whatever the peer sends
            self.pieces.popleft()
            self.counters["echo_pieces_dropped"] += 1

    @staticmethod
    def _end(piece: tuple[int, np.ndarray]) -> int:
        return piece[0] + len(piece[1]) * 10**9 // BUS_RATE

    def reference(self, start_ns: int, n: int) -> np.ndarray:
        """What the loudspeaker plays over `n` samples from `start_ns` (zeros where nothing)."""
        out = np.zeros(n, np.float32)
        end_ns = start_ns + n * 10**9 // BUS_RATE
        for heard_ns, pcm in self.pieces:
            if heard_ns >= end_ns or self._end((heard_ns, pcm)) <= start_ns:
                continue
            offset = round((heard_ns - start_ns) * BUS_RATE / 1e9)   # piece start in `out`
            a, b = max(0, offset), min(n, offset + len(pcm))
            if b > a:
                out[a:b] = pcm[a - offset:b - offset]
        # Drop what no later frame can want (frames come in order).
        while self.pieces and self._end(self.pieces[0]) < start_ns - int(KEEP_S * 1e9):
            self.pieces.popleft()
        return out

    # -- the microphone ---------------------------------------------------------------------
    def cancel(self, pcm: np.ndarray, first_ns: int) -> np.ndarray:
        """`pcm` (a microphone frame, BUS_RATE, first sample at `first_ns`) without the echo.

        Frames of whole blocks go straight through; a frame that is not (another frame_ms)
        keeps its remainder for the next, so the output is as long as the input, late by at
        most one block.
        """
        first_ns = self.clock.push(len(pcm), first_ns)
        if not len(self.pending):
            self.pending_ns = first_ns
        mic = np.concatenate([self.pending, np.asarray(pcm, np.float32)])
        whole = len(mic) - len(mic) % BLOCK
        lead = LEAD_MS * 10**6
        ref = self.reference(self.pending_ns + lead, whole)
        self.cancelled_until_ns = self.pending_ns + lead + whole * 10**9 // BUS_RATE
        out = self.engine.process(mic[:whole], ref) if whole else np.zeros(0, np.float32)
        out = self._account(self.pending_ns, ref, mic[:whole], out)
        self.pending = mic[whole:]
        self.pending_ns += whole * 10**9 // BUS_RATE
        if len(out) < len(pcm):   # the first frames of an odd frame size: keep the length
            out = np.concatenate([np.zeros(len(pcm) - len(out), np.float32), out])
        return out[len(out) - len(pcm):]

    def _account(self, start_ns: int, ref: np.ndarray, mic: np.ndarray,
                 out: np.ndarray) -> np.ndarray:
        """Measure each block; until converged, silence what may still hold the echo."""
        for i in range(0, len(ref) - BLOCK + 1, BLOCK):
            block_ns = start_ns + i * 10**9 // BUS_RATE
            if np.sqrt(np.mean(ref[i:i + BLOCK] ** 2)) >= PLAYING_RMS:
                self.playing_until_ns = block_ns + BLOCK * 10**9 // BUS_RATE
                self.counters["echo_playing_ms"] += BLOCK * 1000 // BUS_RATE
                m = float(np.mean(mic[i:i + BLOCK] ** 2))
                o = float(np.mean(out[i:i + BLOCK] ** 2))
                if not self.mic_energy:
                    self.mic_energy, self.out_energy = m, o
                self.mic_energy += SMOOTH * (m - self.mic_energy)
                self.out_energy += SMOOTH * (o - self.out_energy)
                self._converging(m, o)
            if not self.converged and block_ns < self.playing_until_ns + self.tail_ns:
                # Not learnt yet: what the microphone hears while the loudspeaker plays may
                # be the loudspeaker, so it is silence, as with echo_mode "gate".
                out[i:i + BLOCK] = 0.0
                self.counters["echo_gated_ms"] += BLOCK * 1000 // BUS_RATE
        return out

    def _converging(self, mic_energy: float, out_energy: float) -> None:
        """Latch `converged` once a window of playing has lost CONVERGED_DB (or time is up)."""
        if self.converged:
            return
        if self.counters["echo_playing_ms"] >= CONVERGED_PLAYING_MS:
            self.converged = True
            self.counters["echo_converged_after_ms"] = self.counters["echo_playing_ms"]
            return
        self.window[0] += mic_energy
        self.window[1] += out_energy
        self.window[2] += 1
        if self.window[2] < WINDOW_BLOCKS:
            return
        mic, out, _ = self.window
        self.window = [0.0, 0.0, 0]
        if 10 * np.log10(max(mic, 1e-20) / max(out, 1e-20)) >= CONVERGED_DB:
            self.converged = True
            self.counters["echo_converged_after_ms"] = self.counters["echo_playing_ms"]

    # -- what it says -----------------------------------------------------------------------
    def removed_db(self) -> float:
        """How much quieter the microphone got while the loudspeaker played (dB)."""
        if not self.mic_energy:
            return 0.0
        return 10 * float(np.log10(max(self.mic_energy, 1e-20) / max(self.out_energy, 1e-20)))

    def delay_ms(self) -> float | None:
        """The echo's delay after the reference's stamps: the learnt echo path's peak."""
        taps = self.engine.impulse_response()
        if taps is None or not len(taps) or not np.any(taps):
            return None
        return float(np.argmax(np.abs(taps))) * 1000 / BUS_RATE - LEAD_MS

    def state(self) -> dict[str, float]:
        """For the heartbeat: converged (1/0), delay_ms, removed_db, playing_s."""
        removed = self.removed_db()
        state = {"converged": float(self.converged), "removed_db": round(removed, 1),
                 "playing_s": round(self.counters["echo_playing_ms"] / 1000, 1)}
        delay = self.delay_ms() if self.mic_energy else None
        if delay is not None:
            state["delay_ms"] = round(delay, 1)
        return state
