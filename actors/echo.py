"""Full duplex: the microphone without the loudspeaker, so the speaker is heard while it plays.

Both ends of the echo path. The player's side (`Reference`): what the player writes to its
device becomes one continuous 16 kHz stream, each sample at its position in the device's
output (silence the device played included), published in pieces ahead of being heard
(`Played`: the position of its first sample and the wall time it is heard, from the device's
fitted DAC times, actors.sampleclock). Capture's side (`EchoPath`): the reference is kept by
position; each microphone sample takes the reference sample at a fixed distance from it,
found once from the two streams' wall times (both fitted lines, on one host one clock) and
changed only when the two drift more than `REALIGN_MS` apart, when the echo itself
slipped a few samples against the filter's prediction of it (`SlipWatch`), or, where the
filter has not learnt the room, when the echo is found by its sound out of the filter's
reach (`find_echo`: a player's stamps can put the reference after its echo). A linear canceller
(actors.engines.echo) needs exactly that: the reference a whole number of samples from the
echo, the same number from one frame to the next. (Cut by each frame's and each piece's own
wall time instead, the reference jittered by a sample or two against the echo, and live the
canceller removed 2-6 dB instead of 30: docs/echo.md.) The reference is taken `LEAD_MS`
early, so an echo slightly ahead of what the stamps say is still after its reference; the
canceller learns the rest, the room's delay and reverberation.

Until the canceller has learnt the room (`converged`), what the microphone hears while the
loudspeaker plays is held back, not passed on; once it has, the filter goes over what it held
again, now that it knows the room, and passes that on, late once (the speaker's words of
those seconds kept: silenced as the gate does, they were lost). Held too long, or the
loudspeaker stopped before the filter learnt the room, what was held goes on silenced.
It also says how it goes (`state()`, in capture's heartbeat, `voxweft status` and `watch`):
the echo's delay (the peak of the learnt echo path), how much quieter the microphone got
while the loudspeaker played, and whether that is enough to call it converged.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable

import numpy as np
import soxr

from voxweft.actors.engines.echo import BLOCK, EchoCanceller
from voxweft.actors.sampleclock import SampleClock
from voxweft.protocol.messages import BUS_RATE, Played

log = logging.getLogger("voxweft.capture")

#: The reference is taken this early: an echo up to this much before its stamp is still
#: cancelled (the filter learns the delay, this included: `delay_ms` takes it off again).
LEAD_MS = 40
#: Reference kept by capture: what the player writes ahead of playing it (its jitter buffer,
#: up to tens of seconds when tts runs ahead) and what the filter still looks back on.
KEEP_S = 60.0
#: The microphone and the reference drifted this far apart (their fitted clocks): the distance
#: between them is taken again (the canceller then relearns the delay). Less, the canceller
#: follows by itself (the echo stays inside its filter, LEAD_MS after the reference); more
#: often, each realignment costs seconds of relearning (2 ms, 310 times in a live run).
REALIGN_MS = 10.0
#: Frames whose stamps decide whether the two drifted apart (their median): 1 s of 20 ms.
DRIFT_FRAMES = 50
#: Once converged the stamps realign only when their median jumps this far in a second (a
#: device reopened) ...
JUMP_MS = 30.0
#: ... and the echo's own drift does, once it nears an end of the filter, by this much
#: from where it was learnt (EchoPath._realign); inside, the filter follows it by itself.
FOLLOW_MS = 30.0
#: After following the echo, its learnt delay is looked at again this many frames later (the
#: filter has relearnt it where it now is): 5 s.
FOLLOW_AFTER_FRAMES = 250
#: The player's output silent this long between two writes: its reference stream starts
#: again (rather than resampling the silence).
RESTART_S = 2.0
#: A reference block this loud (RMS) is the loudspeaker playing: -60 dBFS.
PLAYING_RMS = 1e-3
#: How quickly the removed level follows (per block while playing: ~2 s of playing).
SMOOTH = 0.005
#: Removed this much (dB) over WINDOW_BLOCKS of playing: converged, for good (the filter
#: then follows a changing room by itself). Double talk lowers the figure (the speaker is
#: not removed), so a window where the speaker pauses is what first shows it. Until then
#: what the microphone hears while the loudspeaker plays is held (measured: speex reaches
#: it after 5-10 s of playing; docs/echo.md).
CONVERGED_DB = 15.0
WINDOW_BLOCKS = 50   # 0.5 s
#: ... or after this much playing, whatever was measured: a speaker who never pauses while the
#: loudspeaker plays (continuous speech) gives no window of single talk, and would stay
#: held for good. Live (the null sink, three readers talking on; when what was not learnt
#: was silenced, not held): silenced for 8 s, the speaker's words heard 44 %; for 2 s, 74 %;
#: never, 80 % (headphones: 95 %), and in none of the three was the loudspeaker interpreted
#: (speex removed 22-28 dB once it played alone).
CONVERGED_PLAYING_MS = 2000
#: Held at most this long while the filter learns (then what was held goes on silenced):
#: the time to converge plus the pauses of a loudspeaker that plays in short bursts.
HOLD_MAX_MS = 3000
#: Times the filter goes over what it held before that goes on: it learns from the same
#: seconds again (offline, 2 s of a loudspeaker in an 80 ms, RT60 0.4 s room: what was held
#: lost 4.3 dB of echo after one pass, 8.2 after two, 13.0 after four, 14.6 after eight;
#: the two seconds after it 7.4, 9.9, 11.1, 11.4).
AGAIN_PASSES = 4
#: Once converged, the first time the loudspeaker and its echo have stopped after a stretch
#: it played alone (the start sound, usually), the filter goes over the last REHEARSE_S
#: again REHEARSE_PASSES times, and goes on from there: it learns the room further from
#: single talk before the speaker talks over the loudspeaker, where speex learns slowly.
#: Replayed on live runs' recordings (a 1 s start sound, the echo as loud as the first
#: reader): the first translation's echo lost 21 dB against 13 without (7 without this nor
#: the passes over what was held), 16 against 14 on another run; on a run whose echo path
#: drifted 2 samples in 20 s, no gain. Only over single talk (the microphone lost
#: REHEARSE_DB while it played in that stretch; the speaker as loud as the echo leaves ~3):
#: passes over double talk (2 s, four times, every 2 s) took 3 dB off what was removed.
#: CPU: 0.15 s, once.
REHEARSE_S = 3.0
REHEARSE_PASSES = 12
REHEARSE_DB = 10.0
#: The echo path slips: a device's stream drops or repeats a few samples, and the echo comes
#: that much earlier or later than the filter learnt it (live, the room's relay slipped 2-6
#: samples in some runs; the stamps cannot see it, and speex took ~8 s of double talk to
#: learn the room again: a reader's words lost). Once converged, the filter's prediction of
#: the echo (what it took away) is set against the microphone at lags of up to SLIP_MAX
#: samples (30 ms, by FFT: a move the stamps show is JUMP_MS's; live, the relay's moved
#: 1-28 samples, 9 ms once) over the last SLIP_BLOCKS, every SLIP_EVERY blocks, where the
#: loudspeaker played in at least half of them; a lag that fits SLIP_DB better than none,
#: and fits (their correlation, both as first differences: the high band a slip costs most)
#: at least SLIP_RHO, moves the reference by that lag: the learnt filter is right again at once.
#: Replayed through this path, three live runs with slips in them (the raw recordings): the
#: speaker over what is left of the echo, in the clip a slip fell in, +2.8 to +6.8 dB (1 s
#: looked at every 0.25 s: +1.9 to +3.2; every 0.05 s: no better than 0.1 s); in three runs
#: without a slip, none found. docs/echo.md.
SLIP_MAX = BUS_RATE * 30 // 1000
SLIP_BLOCKS = 50
SLIP_EVERY = 10
SLIP_DB = 3.0
SLIP_RHO = 0.5
SLIP_AGREE = 2
#: ... or fits at least SLIP_CLEAR_RHO and SLIP_CLEAR_DB better than none, found once more
#: in a row (three looks): the speaker talking over the loudspeaker lowers every fit
#: (replayed, a +4 slip under double talk at an echo 10 dB under the speaker: 0.36-0.52 at
#: +4, 0.02-0.07 at 0), and a poor prediction fits a wrong lag that well for two looks
#: (replayed, a run without a slip: -3 at 0.53 and 0.43, 0 at 0.08 and 0.12).
SLIP_CLEAR_RHO = 0.3
SLIP_CLEAR_DB = 10.0
#: ... and only after a look found the prediction in place: lag 0 fitting at least this well
#: (at an echo 10 dB under the speaker, 0.25-0.5 when in place: the speaker is in the mic),
#: or after the filter went over single talk again (the rehearsal: it fits there by then).
#: The looks agree when their lags are at most one sample apart (a slip of 3.5 samples is
#: found at 3 and 4 in turn); the reference moves by the last.
SLIP_FITTED = 0.2


#: Where the filter has not learnt the room (a start sound not learnt, or the loudspeaker
#: played CONVERGED_PLAYING_MS without a window losing CONVERGED_DB), the echo is looked
#: for in what was held, by the reference's and the microphone's cross-spectrum whitened
#: (GCC-PHAT) over FIND_MAX_MS either way: a peak FIND_CLEAR times any other (beyond
#: FIND_GUARD_MS) where the filter cannot reach it (the echo before its reference, or past
#: half the filter) moves the reference so that it comes LEAD_MS after it, and from then on
#: the sound, not the stamps, says where it is (only their jumps move it). Live, the player's
#: device ran dry four times while the actors loaded their models: its stamps then put the
#: reference after the echo, no sweep was learnt, and after CONVERGED_PLAYING_MS capture
#: called it converged with 0.1 dB removed: three lines of the loudspeaker interpreted after
#: the speaker stopped (tests/unit/test_echo.py: stamps 200-400 ms late).
FIND_MAX_MS = 1000
FIND_CLEAR = 2.0
FIND_GUARD_MS = 2.0

#: The player's start sound (`StartSound`): a rising sweep, 100 Hz to 7.5 kHz on a log scale
#: (as much energy in each octave as the voice's bands have: pink, every band of the filter
#: taught at once), this long, faded in and out, at the active level of a voice. Offline
#: (an 80 ms + 100 ms relay, RT60 0.4 s room, speex 512 ms): the canceller converged on it
#: after 1.0 s of playing, and the first translation, over the speaker, was cancelled from its
#: first block (nothing held or silenced then); 0.6 s of noise was too short, and a two-tone
#: chime fooled the convergence check (a tone is learnt at once, the voice's other bands
#: not: WER 11.4 % against 4.4 % at an echo as loud as the speaker). docs/echo.md.
SWEEP_S = 1.0
SWEEP_HZ = (100.0, 7500.0)
SWEEP_RMS = 0.05
SWEEP_FADE_S = 0.03
#: ... played once capture has cancelled (heard us) this long: both devices' fitted clocks
#: have seconds of stamps by then. Played at once, the two clocks had a few stamps each, the
#: distance between reference and microphone taken from them was off by more than LEAD_MS
#: (realigned twice in the sweep's second in one live run) and in two runs of three the
#: filter had not learnt the room by the sweep's end (what was held went on silenced).
SWEEP_AFTER_S = 2.0
#: At most this many sweeps per capture: the second if the first did not teach it the room.
SWEEPS = 2


def sweep(rate: int) -> np.ndarray:
    """The start sound at `rate`: SWEEP_S of a log sweep over SWEEP_HZ, SWEEP_RMS."""
    n = int(SWEEP_S * rate)
    t = np.arange(n) / rate
    f0, f1 = SWEEP_HZ
    k = math.log(f1 / f0)
    pcm = np.sin(2 * np.pi * f0 * SWEEP_S / k * (np.exp(t / SWEEP_S * k) - 1))
    fade = int(SWEEP_FADE_S * rate)
    pcm[:fade] *= np.linspace(0.0, 1.0, fade)
    pcm[n - fade:] *= np.linspace(1.0, 0.0, fade)
    return (pcm * SWEEP_RMS / np.sqrt(np.mean(pcm ** 2))).astype(np.float32)


class StartSound:
    """When the player plays `sweep`: the canceller learns the room before anyone talks.

    Without it the canceller learns from the first translation, which plays over the speaker:
    double talk, from which a filter learns little (live, the first translation was shorter
    than the 2 s the filter needs, and what the microphone heard over it, 1.0 s of the
    speaker, was silenced in every run). Due when capture's heartbeat says it cancels, hears
    the player (a reference published before capture's subscription is live is lost, ZeroMQ's
    slow joiner: live, the sweep then went on uncancelled, or silenced) and has not converged,
    the loudspeaker has played nothing but our sweeps, and the player has nothing to play (a
    translation playing teaches it as well): SWEEP_AFTER_S after capture was first heard, and
    once more as long after a sweep the canceller did not learn from, per capture (its epoch:
    a restarted capture has a fresh canceller).
    """

    def __init__(self) -> None:
        self.played: dict[int, int] = {}     # capture epoch -> sweeps played for it
        self.since: dict[int, float] = {}    # capture epoch -> monotonic s of its last news

    def due(self, echo: dict[str, float], capture_epoch: int, idle: bool,
            now: float | None = None) -> bool:
        """Whether to play it now: `echo` is capture's state (Status.echo)."""
        now = time.monotonic() if now is None else now
        done = self.played.get(capture_epoch, 0)
        if not echo.get("reference") or echo.get("converged") or done >= SWEEPS or \
                echo.get("playing_s", 0.0) > done * SWEEP_S + 0.5:   # a translation played
            return False
        since = self.since.setdefault(capture_epoch, now)
        if not idle or now - since < SWEEP_AFTER_S:
            return False
        self.played[capture_epoch] = done + 1
        self.since[capture_epoch] = now + SWEEP_S
        return True


def describe(state: dict[str, float]) -> str:
    """Capture's echo state (Status.echo) in words, for `status`, `watch` and the captions."""
    if not state:
        return ""
    if not state.get("converged"):
        return (f"echo: learning the room ({state.get('playing_s', 0):.0f} s of the loudspeaker "
                "heard; until then what the microphone hears while it plays is held back)")
    delay = f", delay {state['delay_ms']:.0f} ms" if "delay_ms" in state else ""
    return (f"echo: cancelled (converged{delay}, the microphone "
            f"{state.get('removed_db', 0):.0f} dB quieter while the loudspeaker plays)")


def _learnt(mic: np.ndarray, ref: np.ndarray, out: np.ndarray) -> bool:
    """Whether some WINDOW_BLOCKS of playing blocks lost CONVERGED_DB from `mic` to `out`."""
    playing = [i for i in range(0, len(ref) - BLOCK + 1, BLOCK)
               if np.sqrt(np.mean(ref[i:i + BLOCK] ** 2)) >= PLAYING_RMS]
    if len(playing) < WINDOW_BLOCKS:
        return False
    m = np.array([np.sum(mic[i:i + BLOCK] ** 2) for i in playing], np.float64)
    o = np.array([np.sum(out[i:i + BLOCK] ** 2) for i in playing], np.float64)
    # every window of WINDOW_BLOCKS playing blocks in a row (a pause of the speaker's
    # anywhere in it, not only where a fixed window would fall)
    m = np.convolve(m, np.ones(WINDOW_BLOCKS), "valid")
    o = np.convolve(o, np.ones(WINDOW_BLOCKS), "valid")
    return bool(np.any(10 * np.log10(np.maximum(m, 1e-20) / np.maximum(o, 1e-20))
                       >= CONVERGED_DB))


def find_echo(mic: np.ndarray, ref: np.ndarray) -> int | None:
    """How many samples the echo of `ref` comes after it in `mic`, where that is clear.

    GCC-PHAT over FIND_MAX_MS either way; None unless the peak is FIND_CLEAR times any
    other lag beyond FIND_GUARD_MS of it.
    """
    reach = min(BUS_RATE * FIND_MAX_MS // 1000, len(mic) // 2)
    guard = int(BUS_RATE * FIND_GUARD_MS // 1000)
    if reach <= 2 * guard or not np.any(ref) or not np.any(mic):
        return None
    size = 1 << int(np.ceil(np.log2(len(mic) + len(ref))))
    cross = np.fft.rfft(mic, size) * np.conj(np.fft.rfft(ref, size))
    r = np.fft.irfft(cross / (np.abs(cross) + 1e-12), size)
    lags = np.abs(np.concatenate([r[-reach:], r[:reach + 1]]))   # index i: lag i - reach
    best = int(np.argmax(lags))
    rest = np.concatenate([lags[:max(0, best - guard)], lags[best + guard + 1:]])
    if not len(rest) or lags[best] < FIND_CLEAR * float(np.max(rest)):
        return None
    return best - reach


class Reference:
    """The player's side: what it writes to its device, as one continuous 16 kHz stream.

    `wrote(pos, pcm)` is called for each write at device position `pos` (samples of the
    output stream, silence included); it returns the `Played` pieces to publish. Silence
    between two writes is fed as zeros, so the 16 kHz positions stay those of the device's
    samples; after `RESTART_S` of silence the resampler starts again at a position where
    both rates meet on a whole sample (no fractional shift against the old stream).
    """

    def __init__(self, rate: int, now: Callable[[], tuple[int, int]]) -> None:
        self.rate = rate
        self.now = now                # the device's position now, and the wall ns it is heard
        self.step = rate // math.gcd(rate, BUS_RATE)   # device samples on a whole 16 kHz one
        self.resampler: soxr.ResampleStream | None = None
        self.fed = 0                  # device position the resampler has reached
        self.out = 0                  # 16 kHz position of its next output sample

    def wrote(self, pos: int, pcm: np.ndarray) -> list[Played]:
        """The device plays `pcm` from its position `pos`: the reference pieces to publish."""
        pieces = []
        if self.resampler is None or pos < self.fed or pos - self.fed > RESTART_S * self.rate:
            if self.resampler is not None:   # the old stream's last samples
                pieces += self._piece(self.resampler.resample_chunk(
                    np.zeros(0, np.float32), last=True))
            start = pos - pos % self.step
            self.resampler = soxr.ResampleStream(self.rate, BUS_RATE, 1, dtype="float32")
            self.fed, self.out = start, start * BUS_RATE // self.rate
        audio = np.asarray(pcm, np.float32)
        if pos > self.fed:   # the silence the device played in between
            audio = np.concatenate([np.zeros(pos - self.fed, np.float32), audio])
        self.fed = pos + len(pcm)
        return pieces + self._piece(self.resampler.resample_chunk(audio))

    def _piece(self, out: np.ndarray) -> list[Played]:
        if not len(out):
            return []
        device_pos, device_ns = self.now()
        at_pos = device_pos * BUS_RATE // self.rate   # the 16 kHz sample at or before it
        at_ns = device_ns - round((device_pos - at_pos * self.rate / BUS_RATE) * 1e9 / self.rate)
        piece = Played(pos=self.out, at_pos=at_pos, at_ns=at_ns, pcm=np.asarray(out, np.float32))
        self.out += len(out)
        return [piece]


class EchoPath:
    """Capture's side: the player's reference by position, and the canceller fed with it."""

    def __init__(self, engine: EchoCanceller, counters) -> None:
        self.engine = engine
        self.counters = counters
        self.ring = np.zeros(int(KEEP_S * BUS_RATE), np.float32)   # reference, by position
        self.ref_end: int | None = None   # the position after the newest reference sample
        self.player = None            # which player's positions (its epoch)
        self.line = SampleClock(BUS_RATE, window=500, refit=10)   # position -> wall ns heard
        self.distance: int | None = None   # reference position of microphone sample 0
        # the last second's frames: how far the stamps put the reference from `distance`
        self.off: collections.deque[float] = collections.deque(maxlen=DRIFT_FRAMES)
        self.checked = 0              # frames aligned
        self.last_drift: float | None = None   # converged: the stamps' median a second ago
        self.learnt_delay: float | None = None   # converged: the echo's delay as first learnt
        self.follow_from = 0          # frames aligned before the echo's delay is looked at
        self.mic_pos = 0              # microphone samples fed to the canceller
        self.taken_until: int | None = None   # reference positions taken so far
        self.mic_energy = 0.0        # smoothed while playing: the microphone's ...
        self.out_energy = 0.0        # ... and what is left of it after cancelling
        self.pending = np.zeros(0, np.float32)   # microphone samples short of a block
        self.pending_ns = 0
        self.playing_until_ns = 0     # the end of the last block the loudspeaker played
        self.tail_ns = engine.filter_ms * 10**6   # an echo lasts this long after it plays
        self.converged = False
        self.window = [0.0, 0.0, 0]   # microphone and output energy over playing blocks
        # Held while the filter learns: per block the microphone, its reference, what the
        # learning filter made of it, and whether the loudspeaker may be in it; `before`:
        # the blocks just before the first held one (their history primes a second pass).
        self.held: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool]] = []
        self.held_ns = 0
        filter_blocks = -(-engine.filter_ms // (1000 * BLOCK // BUS_RATE))
        self.before: collections.deque[tuple[np.ndarray, np.ndarray]] = collections.deque(
            maxlen=filter_blocks)
        self.slips = SlipWatch(filter_blocks) if engine.linear else None
        # What went on last (mic, ref, out per block), for the rehearsal once converged.
        self.recent: collections.deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = \
            collections.deque(maxlen=int(REHEARSE_S * BUS_RATE) // BLOCK)
        self.rehearsed = False
        self.tried = 0   # the loudspeaker's stop (playing_until_ns) last rehearsed after
        self.found_by = 0   # samples the reference moved from the stamps' place to find it
        self.learning_from_ms = 0   # playing (echo_playing_ms) since the echo was last found
        self.found_in_hold = False   # what is held now was aligned before it was found

    # -- the reference ----------------------------------------------------------------------
    def played(self, pos: int, pcm: np.ndarray, clock: tuple[int, int],
               player: object = None) -> None:
        """The loudspeaker plays `pcm` (BUS_RATE) from reference position `pos`.

        `clock`: (a position, the wall ns it is heard), the player's latest. `player` names
        whose positions they are: a new one (a restarted player counts from 0 again) starts
        them again.
        """
        if player != self.player:
            self.player, self.ref_end, self.distance = player, None, None
            self.taken_until = None
            self.found_by = 0
            self.line.reset()
        self.line.stamp(*clock)
        pcm = np.asarray(pcm, np.float32)[-len(self.ring):]
        end = pos + len(pcm)
        if self.taken_until is not None and pos < self.taken_until:   # after its frames
            late = int(np.count_nonzero(pcm[:self.taken_until - pos]))   # silence is never late
            self.counters["echo_late_ms"] += late * 1000 // BUS_RATE
        if self.ref_end is None or end - self.ref_end >= len(self.ring):
            self.ring[:] = 0.0
        elif pos > self.ref_end:   # silence between: zeros
            self._put(self.ref_end, np.zeros(pos - self.ref_end, np.float32))
        self._put(pos, pcm)
        self.ref_end = end if self.ref_end is None else max(self.ref_end, end)

    def _put(self, pos: int, pcm: np.ndarray) -> None:
        self.ring[np.arange(pos, pos + len(pcm)) % len(self.ring)] = pcm

    def reference(self, start: int, n: int) -> np.ndarray:
        """Reference positions [start, start + n) (zeros where there is none)."""
        out = np.zeros(n, np.float32)
        if self.ref_end is None:
            return out
        lo, hi = max(start, self.ref_end - len(self.ring)), min(start + n, self.ref_end)
        if hi > lo:
            out[lo - start:hi - start] = self.ring[np.arange(lo, hi) % len(self.ring)]
        return out

    def _aligned(self, first_ns: int, n: int) -> np.ndarray:
        """The reference for the next `n` microphone samples, the first heard at `first_ns`."""
        ref = np.zeros(n, np.float32)
        if self.ref_end is not None:
            want = self.line.sample_at(first_ns + LEAD_MS * 10**6) - self.mic_pos
            if self.distance is None:
                self.distance = round(want)
            # What the stamps say over the last second, by its median: one stamp jitters by
            # ms; a jump (a device reopened) or a drift that lasts moves the median.
            self.off.append(want - self.distance)
            self.checked += 1
            # once converged the stamps are looked at once a second (`_realign`)
            settled = self.converged or self.anchored
            if len(self.off) == self.off.maxlen and \
                    (not settled or not self.checked % DRIFT_FRAMES):
                self._realign(float(np.median(self.off)))
            start = self.mic_pos + self.distance
            ref = self.reference(start, n)
            self.taken_until = max(self.taken_until or start, start + n)
        self.mic_pos += n
        return ref

    def _realign(self, drift: float) -> None:
        """Move the reference when the stamps (until converged) or the echo itself says so.

        Until converged, the stamps' drift of over REALIGN_MS. Once converged, the stamps
        only for a jump (their median moved JUMP_MS in a second: a device reopened); a slow
        drift of theirs is not the sound's. Live (null sinks, one sound server's clock) the
        stamps drifted 10 ms in 20-30 s while the echo stayed where the filter had learnt it
        (its peak 174 -> 184 ms after such a realignment, none without), and each realignment
        made the filter learn the room again under double talk: a reader's words lost (WER
        81 % on one clip). The echo's own drift moves the peak of the learnt echo path; the
        filter follows it by itself, until it nears the filter's start (less than LEAD_MS / 2
        ahead: the echo may come before its reference) or the filter's second half (the
        room's tail cut): then, moved more than FOLLOW_MS from where it was learnt, the
        reference follows it back there (the filter learns it once more).
        """
        if not self.converged and not self.anchored:
            if abs(drift) > REALIGN_MS * BUS_RATE / 1000:
                self._move(drift, "the loudspeaker's reference and the microphone drifted "
                                  f"{drift * 1000 / BUS_RATE:.1f} ms apart")
            return
        last, self.last_drift = self.last_drift, drift
        if last is not None and abs(drift - last) > JUMP_MS * BUS_RATE / 1000:
            jump = (drift - last) * 1000 / BUS_RATE
            self._move(drift - last if self.anchored else drift,
                       f"the loudspeaker's reference jumped {jump:.1f} ms")
            return
        if not self.converged:
            return
        delay = self.delay_ms()
        if delay is None or self.checked < self.follow_from:
            return
        if self.learnt_delay is None:
            self.learnt_delay = delay
        moved = delay - self.learnt_delay
        peak = delay + LEAD_MS + self.found_by * 1000 / BUS_RATE   # where in the filter
        inside = LEAD_MS / 2 <= peak <= self.engine.filter_ms / 2
        if not inside and abs(moved) > FOLLOW_MS:
            self._move(-moved * BUS_RATE / 1000, f"the echo moved {moved:.1f} ms")
            self.counters["echo_followed"] += 1
            self.follow_from = self.checked + FOLLOW_AFTER_FRAMES

    @property
    def anchored(self) -> bool:
        """The echo was found by its sound: from then on the stamps move it only by jumps."""
        return self.found_by != 0

    def _find(self) -> bool:
        """Whether the echo was found where the filter cannot reach it, in what was held.

        If so the reference moves to put it LEAD_MS after it (once per hold: what is held
        was aligned the old way).
        """
        if self.found_in_hold or not self.held:
            return False
        lag = find_echo(np.concatenate([m for m, _r, _o, _e in self.held]),
                        np.concatenate([r for _m, r, _o, _e in self.held]))
        if lag is None:
            return False
        lag_ms = lag * 1000 / BUS_RATE
        if LEAD_MS / 2 <= lag_ms <= self.engine.filter_ms / 2:
            return False
        by = round(LEAD_MS * BUS_RATE / 1000 - lag)
        self._move(by, f"the echo came {lag_ms:.0f} ms after its reference, out of the "
                       "filter's reach")
        self.found_by += by
        self.found_in_hold = True
        self.learning_from_ms = self.counters["echo_playing_ms"]
        self.counters["echo_found"] += 1
        return True

    def _move(self, by: float, why: str) -> None:
        log.info("capture: %s: realigned (the echo canceller relearns the delay)", why)
        self.distance += round(by)
        self.recent.clear()   # its blocks were aligned the old way
        self.off.clear()
        self.last_drift = None
        self.counters["echo_realigned"] += 1

    def _slipped(self, lag: int) -> None:
        """The echo comes `lag` samples later than the filter learnt it: the reference follows."""
        if lag:
            log.info("capture: the echo path slipped %+d sample(s): the reference follows", lag)
            self.distance -= lag
            self.recent.clear()
            self.counters["echo_slipped"] += 1

    # -- the microphone ---------------------------------------------------------------------
    def cancel(self, pcm: np.ndarray, first_ns: int) -> tuple[np.ndarray, int]:
        """`pcm` (a microphone frame, BUS_RATE, first sample at `first_ns`) without the echo.

        Returns what can go on now and the wall ns of its first sample: `pcm` itself, cancelled,
        for frames of whole blocks (a frame that is not keeps its remainder for the next);
        nothing while the filter learns the room with the loudspeaker playing, and all it
        held, cancelled again, once it has. Every sample goes on once, in order.
        """
        if not len(self.pending):
            self.pending_ns = first_ns
        mic = np.concatenate([self.pending, np.asarray(pcm, np.float32)])
        whole = len(mic) - len(mic) % BLOCK
        ref = self._aligned(self.pending_ns, whole)
        out = self.engine.process(mic[:whole], ref) if whole else np.zeros(0, np.float32)
        out, out_ns = self._account(self.pending_ns, ref, mic[:whole], out)
        self.pending = mic[whole:]
        self.pending_ns += whole * 10**9 // BUS_RATE
        return out, out_ns

    def _account(self, start_ns: int, ref: np.ndarray, mic: np.ndarray,
                 out: np.ndarray) -> tuple[np.ndarray, int]:
        """Measure each block; until converged, hold what may still hold the echo."""
        ready: list[np.ndarray] = []
        ready_ns = None
        for i in range(0, len(ref) - BLOCK + 1, BLOCK):
            block_ns = start_ns + i * 10**9 // BUS_RATE
            learning = not self.converged
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
            block = slice(i, i + BLOCK)
            echo = learning and block_ns < self.playing_until_ns + self.tail_ns
            if echo or self.held:
                # Not learnt yet: what the microphone hears while the loudspeaker plays may
                # be the loudspeaker. Held, and everything after it, until it is learnt.
                if not self.held:
                    self.held_ns = block_ns
                self.held.append((mic[block], ref[block], out[block], echo))
            else:
                self.before.append((mic[block], ref[block]))
                self.recent.append((mic[block], ref[block], out[block]))
                ready.append(out[block])
                ready_ns = block_ns if ready_ns is None else ready_ns
                if self.converged and self.slips is not None:
                    self._slipped(self.slips.add(mic[block], mic[block] - out[block],
                                                 block_ns < self.playing_until_ns))
        if self.held:
            late_ms = len(self.held) * 1000 * BLOCK // BUS_RATE
            if self.converged:
                ready.append(self._again())
            elif not self.held[-1][3] or late_ms >= HOLD_MAX_MS:
                ready.append(self._settled())
            if not self.held:
                ready_ns = self.held_ns if ready_ns is None else ready_ns
                self.counters["echo_held_max_ms"] = max(self.counters["echo_held_max_ms"],
                                                        late_ms)
        if self.converged and not self.rehearsed and not self.held and len(ref) and \
                self.tried != self.playing_until_ns and \
                block_ns >= self.playing_until_ns + self.tail_ns:
            self.tried = self.playing_until_ns   # once per stop of the loudspeaker
            self._rehearse()
        out = np.concatenate(ready) if ready else np.zeros(0, np.float32)
        return out, start_ns if ready_ns is None else ready_ns

    def _rehearse(self) -> None:
        """The filter goes over the last REHEARSE_S again (single talk only), ending where it is.

        Tried each time the loudspeaker and its echo have stopped, until it has been done once.
        """
        playing = [(m, o) for m, r, o in self.recent
                   if np.sqrt(np.mean(r ** 2)) >= PLAYING_RMS]
        if not playing:
            return
        lost = 10 * math.log10(max(sum(float(np.dot(m, m)) for m, _o in playing), 1e-12)
                               / max(sum(float(np.dot(o, o)) for _m, o in playing), 1e-12))
        if lost < REHEARSE_DB:   # the speaker talked over it: not this stretch
            return
        mic = np.concatenate([m for m, _r, _o in self.recent])
        ref = np.concatenate([r for _m, r, _o in self.recent])
        for _ in range(REHEARSE_PASSES):
            self.engine.process(mic, ref)
        self.rehearsed = True
        if self.slips is not None:   # it fits in place now: a slip before the next look shows
            self.slips.fitted = True
        self.counters["echo_rehearsed_ms"] += len(mic) * 1000 // BUS_RATE
        self.recent.clear()

    def _again(self) -> np.ndarray:
        """What was held, through the filter again now that it has learnt the room."""
        return self._released(self._passes()[2])

    def _passes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The filter goes over what was held AGAIN_PASSES times: (mic, ref, last output).

        The blocks before the held ones go through first (their output dropped): the filter
        then looks back on what really came before. The filter ends where it was, after the
        newest block, so what comes next follows on.
        """
        mic = np.concatenate([m for m, _r, _o, _e in self.held])
        ref = np.concatenate([r for _m, r, _o, _e in self.held])
        for _ in range(AGAIN_PASSES):
            if self.before:
                self.engine.process(np.concatenate([m for m, _r in self.before]),
                                    np.concatenate([r for _m, r in self.before]))
            out = self.engine.process(mic, ref)
        return mic, ref, out

    def _released(self, out: np.ndarray) -> np.ndarray:
        """`out`, what was held gone over again, goes on; the hold is over."""
        self.counters["echo_again_ms"] += len(out) * 1000 // BUS_RATE
        self._drop_held(out)
        return out

    def _settled(self) -> np.ndarray:
        """The loudspeaker stopped (or played on too long) before the filter learnt the room.

        The filter goes over what it held again: it learns from the same seconds once more
        (a first translation shorter than CONVERGED_PLAYING_MS is the usual case: live, its
        1.0 s was silenced in every run, the speaker's words with it). If a window of that
        playing then lost CONVERGED_DB, the criterion `converged` has everywhere, the filter
        has learnt the room and what was held goes on cancelled; else silenced, as before.
        """
        mic, ref, out = self._passes()
        if _learnt(mic, ref, out):
            self._latch()
            return self._released(out)
        self._find()
        return self._silenced()

    def _silenced(self) -> np.ndarray:
        """What was held, when the filter did not learn the room in time.

        What the loudspeaker may be in is silence, as with echo_mode "gate".
        """
        out = []
        for _m, _r, made, echo in self.held:
            out.append(np.zeros_like(made) if echo else made)
            if echo:
                self.counters["echo_gated_ms"] += BLOCK * 1000 // BUS_RATE
        self._drop_held()
        return np.concatenate(out)

    def _drop_held(self, out: np.ndarray | None = None) -> None:
        """The hold is over; `out`: what the held blocks became (default: as first made)."""
        self.before.extend((m, r) for m, r, _o, _e in self.held)
        made = [o for _m, _r, o, _e in self.held] if out is None else \
            np.split(out, len(self.held))
        self.recent.extend((m, r, o) for (m, r, _o, _e), o in zip(self.held, made, strict=True))
        self.held = []
        self.found_in_hold = False

    def _converging(self, mic_energy: float, out_energy: float) -> None:
        """Latch `converged` once a window of playing has lost CONVERGED_DB (or time is up)."""
        if self.converged:
            return
        if self.counters["echo_playing_ms"] - self.learning_from_ms >= CONVERGED_PLAYING_MS:
            if not self._find():   # found elsewhere: it learns there first
                self._latch()
            return
        self.window[0] += mic_energy
        self.window[1] += out_energy
        self.window[2] += 1
        if self.window[2] < WINDOW_BLOCKS:
            return
        mic, out, _ = self.window
        self.window = [0.0, 0.0, 0]
        if 10 * np.log10(max(mic, 1e-20) / max(out, 1e-20)) >= CONVERGED_DB:
            self._latch()

    def _latch(self) -> None:
        """Converged, for good: said with how long the loudspeaker had played."""
        self.converged = True
        self.counters["echo_converged_after_ms"] = self.counters["echo_playing_ms"]

    # -- what it says -----------------------------------------------------------------------
    def removed_db(self) -> float:
        """How much quieter the microphone got while the loudspeaker played (dB)."""
        if not self.mic_energy:
            return 0.0
        return 10 * float(np.log10(max(self.mic_energy, 1e-20) / max(self.out_energy, 1e-20)))

    def delay_ms(self) -> float | None:
        """The echo's delay after the reference's stamps: the learnt echo path's peak.

        (Where the echo was found by its sound, after where the stamps put the reference.)
        """
        taps = self.engine.impulse_response()
        if taps is None or not len(taps) or not np.any(taps):
            return None
        return (float(np.argmax(np.abs(taps))) - self.found_by) * 1000 / BUS_RATE - LEAD_MS

    def state(self) -> dict[str, float]:
        """For the heartbeat: converged (1/0), delay_ms, removed_db, playing_s."""
        removed = self.removed_db()
        state = {"converged": float(self.converged), "removed_db": round(removed, 1),
                 "playing_s": round(self.counters["echo_playing_ms"] / 1000, 1)}
        delay = self.delay_ms() if self.mic_energy else None
        if delay is not None:
            state["delay_ms"] = round(delay, 1)
        return state


class SlipWatch:
    """Whether the echo path slipped (by up to SLIP_MAX samples).

    The lag at which the filter's prediction of the echo fits the microphone best, over the
    last SLIP_BLOCKS blocks. A slip is a lag other than 0 found SLIP_AGREE times in a row,
    after the prediction fitted at 0 (SLIP_FITTED: a filter still learning fits nowhere well,
    and its best lag wanders). After the reference has moved, the filter's history holds the
    old alignment for `settle` blocks (its length): looked at then, its prediction was half of
    each, and a live run moved the reference to and fro by 4 samples every half second.
    """

    def __init__(self, settle: int) -> None:
        self.blocks: collections.deque[tuple[np.ndarray, np.ndarray, bool]] = \
            collections.deque(maxlen=SLIP_BLOCKS)
        self.settle = settle
        self.added = 0
        self.fitted = False   # the last look found the prediction in place
        self.found: list[tuple[int, bool]] = []   # the looks since, in a row: lag, strict

    def add(self, mic: np.ndarray, predicted: np.ndarray, playing: bool) -> int:
        """One block: the microphone, the echo the filter predicted in it, whether it played.

        Returns the lag (samples, the echo later than predicted) when it slipped, else 0.
        """
        self.added += 1
        if self.added <= 0:   # settling after a move
            return 0
        self.blocks.append((mic, predicted, playing))
        if len(self.blocks) < SLIP_BLOCKS or self.added % SLIP_EVERY or \
                sum(p for _m, _e, p in self.blocks) < SLIP_BLOCKS // 2:
            return 0
        lag, fit, at_zero = self._lag()
        if lag == 0:
            self.fitted, self.found = fit >= SLIP_FITTED, []
            return 0
        better = fit ** 2 / at_zero ** 2 if at_zero > 0 else math.inf
        strict = fit >= SLIP_RHO and better >= 10 ** (SLIP_DB / 10)
        if not self.fitted or not strict and (  # not clearly elsewhere (half of it slipped,
                fit < SLIP_CLEAR_RHO or better < 10 ** (SLIP_CLEAR_DB / 10)):   # the speaker)
            self.found = []
            return 0
        if self.found and abs(self.found[-1][0] - lag) > 1:
            self.found = []
        self.found.append((lag, strict))
        if len(self.found) < SLIP_AGREE + (not all(s for _lag, s in self.found)):
            return 0
        self.blocks.clear()
        self.added = -self.settle   # the filter's history fills with the new alignment first
        self.fitted, self.found = False, []
        return lag

    def _lag(self) -> tuple[int, float, float]:
        """The lag that fits best; how well it fits and how well lag 0 does (correlations)."""
        m = np.diff(np.concatenate([b[0] for b in self.blocks]).astype(np.float64))
        e = np.diff(np.concatenate([b[1] for b in self.blocks]).astype(np.float64))
        core = m[SLIP_MAX:len(m) - SLIP_MAX]
        # dot(core, the prediction `lag` later) for every lag at once, by FFT: at k = MAX - lag
        size = 1 << int(np.ceil(np.log2(len(e) + len(core))))
        dots = np.fft.irfft(np.fft.rfft(e, size) * np.conj(np.fft.rfft(core, size)),
                            size)[:2 * SLIP_MAX + 1]
        power = np.concatenate([[0.0], np.cumsum(e * e)])
        energy = (power[len(core):len(core) + 2 * SLIP_MAX + 1] - power[:2 * SLIP_MAX + 1]) \
            * float(np.dot(core, core))
        rho = np.divide(dots, np.sqrt(energy), out=np.zeros_like(dots),
                        where=energy > 0)[::-1]   # index i: lag i - SLIP_MAX
        best = int(np.argmax(rho))
        return best - SLIP_MAX, float(rho[best]), float(rho[SLIP_MAX])
