"""The player's sinks: where its audio goes, a PortAudio device or a WAV file.

Both take float32 mono audio at their `rate` and say when it is heard: `write()` returns
the wall time its first sample is heard, `busy_until_ns()` when the last one queued is.
Which utterance plays when is the player's job (actors.player), not theirs.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import numpy as np

from voxweft.actors.devices import (
    DeviceStream,
    open_device,
    open_sounddevice,
    reopen,
    resolve_device,
)
from voxweft.actors.sampleclock import SampleClock
from voxweft.actors.settings.base import StartupError
from voxweft.protocol.messages import now_ns

#: A WAV file's rate until its first audio says otherwise (the rate of most tts voices).
DEFAULT_RATE = 24000


class WavSink:
    """Writes what a loudspeaker would play, on a virtual clock that runs in real time.

    Silence fills the time between utterances, so the file is aligned with the session.

    A journal beside it (`PATH.journal`: the session, then one JSON line per utterance
    written whole) lets a player restarted in the same session go on with the same file: it
    keeps the audio up to the end of the last whole utterance, drops a half-written one (it
    comes again from tts) and knows which utterances are done. `session` names the session
    (a journal of another one is ignored and replaced).

    The file's rate is `rate` when given; else the rate of the first audio written (see
    `take_rate`), so the player needs nobody's settings to know it: every chunk says its
    own. Until then the file is open at DEFAULT_RATE, so that a path it cannot write fails
    at start and a session with no speech still leaves a valid, empty WAV. A restarted
    player goes on at the rate of the file it goes on with.
    """

    def __init__(self, path: str, rate: int = 0, session: str = "") -> None:
        self.path = path
        self.rate = rate or DEFAULT_RATE
        self.fixed = bool(rate)   # the rate is settled: given, taken, or the resumed file's
        self.first_ns: int | None = None
        self.written = 0          # samples in the file
        self.journal = Path(path + ".journal") if session else None
        self.session = session
        self.done: list[str] = []   # utterances written whole, from the journal
        keep = self._resume(path) if self._same_session() else None
        self.resumed = keep is not None   # a player restarted in this session goes on
        if self.journal is not None and keep is None:
            self.journal.write_text(json.dumps({"session": session}) + "\n")
        self._create()
        if keep is not None:
            self.file.write(keep)
            self.written = len(keep)

    def _create(self) -> None:
        import soundfile as sf

        try:
            self.file = sf.SoundFile(self.path, "w", samplerate=self.rate, channels=1,
                                     subtype="PCM_16")
        except (sf.LibsndfileError, OSError) as exc:
            raise StartupError(f"cannot write {self.path!r}: {exc}") from None

    def take_rate(self, rate: int) -> None:
        """The rate of the audio about to be written: the first one settles the file's.

        While the file is empty it is made again at that rate. (Silence written for skipped
        utterances before any audio keeps DEFAULT_RATE.) Audio at any other rate is
        resampled to the file's by the caller.
        """
        if self.fixed:
            return
        self.fixed = True
        if rate != self.rate and self.written == 0:
            self.file.close()
            self.rate = rate
            self._create()

    def _same_session(self) -> bool:
        if self.journal is None or not self.journal.exists():
            return False
        try:
            first = json.loads(self.journal.read_text().splitlines()[0])
        except (ValueError, IndexError, OSError):
            return False
        return isinstance(first, dict) and first.get("session") == self.session

    def _resume(self, path: str) -> np.ndarray:
        import soundfile as sf

        end = 0
        for line in self.journal.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue   # a line cut short by the crash
            if "first_ns" in entry:
                self.first_ns = int(entry["first_ns"])
            elif "utt" in entry:
                self.done.append(str(entry["utt"]))
                end = int(entry["end"])
        try:   # libsndfile reads a WAV whose writer was killed (header not yet updated)
            audio, rate = sf.read(path, dtype="float32", frames=end)
            if end and not self.fixed:   # it holds audio: go on at its rate
                self.rate, self.fixed = rate, True
        except (sf.LibsndfileError, RuntimeError, OSError):
            audio = np.zeros(0, np.float32)
        return np.concatenate([audio, np.zeros(max(0, end - len(audio)), np.float32)])

    def _log(self, entry: dict) -> None:
        if self.journal is not None:
            with open(self.journal, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def finished(self, utt: str, complete: bool = True, played_s: float = 0.0,
                 spans: list | None = None, of: int | None = None) -> None:
        """`utt` is in the file: its journal line.

        `complete`: whole; else what came of it before we gave up. `played_s`: seconds of its
        speech written, 0 when it was skipped. `spans`: the words of its translation written,
        in order ([start, end) of `of` words), when its chunks said them.
        """
        entry = {"utt": utt, "end": self.written, "complete": complete,
                 "played_s": round(played_s, 3)}
        if spans:
            entry.update(words=spans, of=of)
        self._log(entry)

    def idle(self) -> bool:
        """A file never runs dry: it needs no jitter buffer."""
        return False

    def write(self, pcm: np.ndarray, *, cut: bool = False, end: bool = False) -> int:
        """Queue audio; return the wall time (ns) at which it starts to be heard.

        `cut` and `end` (see DeviceSink.write) change nothing in a file.
        """
        self.fixed = self.fixed or len(pcm) > 0
        now = now_ns()
        if self.first_ns is None:
            self.first_ns = now
            self._log({"first_ns": now})
        end_ns = self.first_ns + int(self.written * 1e9 / self.rate)
        if now > end_ns:   # the "device" went idle: the gap is silence
            gap = int((now - end_ns) * self.rate / 1e9)
            self.file.write(np.zeros(gap, np.float32))
            self.written += gap
        start_ns = self.first_ns + int(self.written * 1e9 / self.rate)
        self.file.write(pcm)
        self.written += len(pcm)
        return start_ns

    def busy_until_ns(self) -> int:
        """Wall time at which everything written so far has been heard."""
        return (self.first_ns or now_ns()) + int(self.written * 1e9 / self.rate)

    def close(self) -> None:
        """Finish the WAV header."""
        self.file.close()


FADE_S = 0.005   # fade length where audio would jump: 5 ms is inaudible, a jump is a click


class DeviceSink(DeviceStream):
    """A PortAudio output stream fed from a buffer by its callback, with true play times.

    * Times: every callback stamps "the first sample of this block is heard at wall time
      T" from its time info (`outputBufferDacTime - currentTime`, or the stream's reported
      latency when the host API gives none). A sample's position in the output stream
      (audio and silence alike, `out_pos`) then gives the wall time it is heard, by the line
      fitted to those stamps (actors.sampleclock: one stamp jitters by ms, the device's clock
      drifts), so `write()` returns when its first sample will really be heard and
      `busy_until_ns()` when the last queued one will.
    * No clicks: a continuous stream of chunks is played untouched. Only where the audio
      would jump, it is faded over 5 ms: out, when the buffer is about to run dry (an
      underrun or the end of speech) or before a cut (`cut=True`: the new audio does not
      continue the old); in, for the first audio after such a point.
    * Underruns: running dry inside audio not marked `end` counts `underruns`.
    * Loss: if the stream stops by itself (device unplugged, sound server gone), `lost`
      says why; `reopen()` tries again with a fresh PortAudio device list.
    """

    resumed = False   # a loudspeaker goes on from nothing (see WavSink)

    def __init__(self, device: str, counters, latency_s: float = 0.0) -> None:
        self.sd = open_sounddevice("player")
        self.ask_latency_s = latency_s   # the buffer asked for (0: PortAudio's default)
        self.spec = device
        self.counters = counters
        self.buffer: collections.deque[list] = collections.deque()   # [pcm, end] items
        self.queued = 0               # samples waiting in the buffer
        self.out_pos = 0              # samples the callback has output, audio and silence
        self.clock = SampleClock(DEFAULT_RATE)   # out_pos -> wall ns heard (set by _open)
        self.last_pos = 0             # out_pos of the first sample of the last write
        self.tail_faded = True        # what is queued ends faded out (or nothing plays)
        self.playing = False          # the last block ended inside audio
        self.last_end = True          # the last audio consumed was the end of an utterance
        self.lost = ""                # why the stream stopped by itself; "" while it runs
        self.closing = False
        self.guard = threading.Lock()  # buffer shared with the audio callback; never a model
        self._open()

    def _open(self) -> None:
        index, info = resolve_device(self.sd, self.spec, "output")
        self.name = info["name"]
        self.rate = int(info["default_samplerate"])
        self.fade = np.linspace(0.0, 1.0, max(2, int(self.rate * FADE_S)), dtype=np.float32)
        channels = max(1, min(2, int(info["max_output_channels"])))
        self.stream = open_device(self.sd, "player", self.name, lambda: self.sd.OutputStream(
            device=index, samplerate=self.rate, channels=channels, dtype="float32",
            callback=self._callback, finished_callback=self._finished,
            latency=self.ask_latency_s or None))
        self.latency_s = float(self.stream.latency)
        # ~15 s of callbacks of 10 ms: the line follows the device's drift within a minute.
        self.clock = SampleClock(self.rate, window=1500, refit=25)
        self.lost = ""
        self.stream.start()

    def describe(self) -> str:
        """One line about the device."""
        return (f"output {self.name!r}: {self.rate} Hz, latency {self.latency_s * 1000:.0f} ms")

    # -- audio thread ---------------------------------------------------------------------
    def _callback(self, outdata, frames, time_info, status) -> None:
        wall = time.time_ns()
        dac, current = time_info.outputBufferDacTime, time_info.currentTime
        delay_s = dac - current if dac > 0 and current > 0 and 0 <= dac - current < 2 \
            else self.latency_s
        out = outdata[:, 0]
        filled = 0
        with self.guard:
            self.clock.stamp(self.out_pos, wall + int(delay_s * 1e9))
            if self.queued and self.queued < frames + len(self.fade) and not self.tail_faded:
                self._fade_tail()   # about to run dry: never stop on a non-zero sample
            while filled < frames and self.buffer:
                item = self.buffer[0]
                head = item[0]
                take = min(len(head), frames - filled)
                out[filled:filled + take] = head[:take]
                filled += take
                if take == len(head):
                    self.buffer.popleft()
                    self.last_end = item[1]
                else:
                    item[0] = head[take:]
            self.queued -= filled
            self.out_pos += frames
            if filled < frames and (filled or self.playing) and not self.last_end:
                self.counters["underruns"] += 1
            self.playing = filled == frames and filled > 0
        out[filled:] = 0.0
        if outdata.shape[1] > 1:
            outdata[:, 1:] = outdata[:, :1]
        if status:
            self.counters["xruns"] += 1

    def _fade_tail(self) -> None:
        """Fade out the last queued samples in place (guard held)."""
        n = min(len(self.fade), self.queued)
        ramp = self.fade[::-1][len(self.fade) - n:]   # ends at 0
        for item in reversed(self.buffer):
            if n == 0:
                break
            head = item[0]
            take = min(n, len(head))
            head[len(head) - take:] *= ramp[n - take:n]
            n -= take
        self.tail_faded = True

    # -- actor thread ---------------------------------------------------------------------
    def _heard_ns(self, pos: float) -> int:
        heard = self.clock.at(pos)
        if heard is None:   # no callback yet: it will come within one latency
            return now_ns() + int(self.latency_s * 1e9) + \
                int((pos - self.out_pos) * 1e9 / self.rate)
        return heard

    def now(self) -> tuple[int, int]:
        """Where the output is: the position of the next block, and when it is heard (ns)."""
        with self.guard:
            return self.out_pos, self._heard_ns(self.out_pos)

    def idle(self) -> bool:
        """Nothing is queued: new audio would start from silence."""
        return self.queued == 0

    def write(self, pcm: np.ndarray, *, cut: bool = False, end: bool = False) -> int:
        """Queue audio; return the wall time (ns) at which its first sample is heard.

        `cut`: this audio does not continue what was queued before (a chunk was skipped or
        the previous utterance was cut short). `end`: it ends an utterance, so running dry
        after it is no underrun.
        """
        pcm = np.array(pcm, dtype=np.float32)   # our own copy: fades modify it in place
        with self.guard:
            if self.lost:   # dropped: late speech is worse than none; reopen() may follow
                self.counters["dropped_ms"] += len(pcm) * 1000 // self.rate
                return now_ns()
            if cut and self.queued and not self.tail_faded:
                self._fade_tail()
            if len(pcm) and (self.tail_faded or cut):
                n = min(len(pcm), len(self.fade))
                pcm[:n] *= self.fade[:n]
                self.tail_faded = False
            start_pos = self.last_pos = self.out_pos + self.queued
            if len(pcm):
                self.buffer.append([pcm, end])
                self.queued += len(pcm)
            elif end and self.buffer:
                self.buffer[-1][1] = True
            return self._heard_ns(start_pos)

    def busy_until_ns(self) -> int:
        """Wall time at which the last queued sample will have been heard."""
        with self.guard:
            return max(now_ns(), self._heard_ns(self.out_pos + self.queued))

    def reopen(self) -> bool:
        """After a loss, open the same device again; False while it is still missing.

        PortAudio lists devices only when it initializes, so it is re-initialized first.
        """
        with self.guard:
            self.buffer.clear()
            self.queued = 0
            self.tail_faded, self.playing, self.last_end = True, False, True
        self._close_stream()
        why = reopen(self.sd, self._open)
        if why:
            self.lost = why
        return not why

    def take_rate(self, rate: int) -> None:
        """A device plays at its own rate: audio at any other is resampled to it."""

    def finished(self, utt: str, complete: bool = True, played_s: float = 0.0,
                 spans: list | None = None, of: int | None = None) -> None:
        """A loudspeaker keeps no journal: a restarted player starts with an empty buffer."""

    def close(self) -> None:
        """Stop the stream."""
        self._close_stream()
