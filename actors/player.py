"""player: speech chunks in, sound out (a device or a WAV file), utterances in order."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr

from voxweft.actors import engines
from voxweft.actors.custody import OUTBOX_UTTERANCES, Finished
from voxweft.actors.runtime import Actor, StartupError
from voxweft.protocol.messages import (
    Done,
    Message,
    PlaybackEvent,
    SpeechChunk,
    Status,
    now_ns,
    traced,
)

#: tts is taken for down when its heartbeat (2 Hz) has not been heard for this long.
TTS_SILENT_S = 1.5
#: A tts model call this long is stuck, not slow: the gap timeout applies again.
TTS_STUCK_S = 30.0
#: The stages that hold an utterance until our Done (actors.custody). A Done is published
#: once: a holder whose subscription to us is not live then (we or it just restarted, its
#: link to us broke and libzmq is still reconnecting), or that took the utterance again after
#: it, would hold the utterance for ever. So each holder's heartbeat lists what it holds
#: (`Status.holding`) and we answer with the Done of any we have finished.
HOLDERS = ("segmenter", "asr", "mt", "tts")
#: The same question is answered at most this often (a holder in a long model call reads
#: our answer only when the call ends; its heartbeat asks meanwhile).
ANSWER_EVERY_S = 2.0
#: A holder's list counts while its heartbeat is this recent (a dead holder sends nothing).
HOLDER_SILENT_S = 3.0
#: Why an utterance was not spoken when tts said nothing of it: the player gave up on it.
NO_AUDIO = "no audio came in time: the player moved on"
#: Bounded memory: utterances queued at most (each holder keeps at most OUTBOX_UTTERANCES)
#: and chunks per utterance (tts splits at clauses: a 15 s segment makes a few dozen).
QUEUE_UTTERANCES = 2 * OUTBOX_UTTERANCES
UTTERANCE_CHUNKS = 4096


class WavSink:
    """Writes what a loudspeaker would play, on a virtual clock that runs in real time.

    Silence fills the time between utterances, so the file is aligned with the session.

    A journal beside it (`PATH.journal`: the session, then one JSON line per utterance
    written whole) lets a player restarted in the same session go on with the same file: it
    keeps the audio up to the end of the last whole utterance, drops a half-written one (it
    comes again from tts) and knows which utterances are done. `session` names the session
    (a journal of another one is ignored and replaced).
    """

    def __init__(self, path: str, rate: int, session: str = "") -> None:
        import soundfile as sf

        self.rate = rate
        self.first_ns: int | None = None
        self.written = 0          # samples in the file
        self.journal = Path(path + ".journal") if session else None
        self.session = session
        self.done: list[str] = []   # utterances written whole, from the journal
        keep = self._resume(path) if self._same_session() else None
        if self.journal is not None and keep is None:
            self.journal.write_text(json.dumps({"session": session}) + "\n")
        try:
            self.file = sf.SoundFile(path, "w", samplerate=rate, channels=1, subtype="PCM_16")
        except (sf.LibsndfileError, OSError) as exc:
            raise StartupError(f"cannot write {path!r}: {exc}") from None
        if keep is not None:
            self.file.write(keep)
            self.written = len(keep)

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
            audio, _rate = sf.read(path, dtype="float32", frames=end)
        except (sf.LibsndfileError, RuntimeError, OSError):
            audio = np.zeros(0, np.float32)
        return np.concatenate([audio, np.zeros(max(0, end - len(audio)), np.float32)])

    def _log(self, entry: dict) -> None:
        if self.journal is not None:
            with open(self.journal, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def finished(self, utt: str, complete: bool = True) -> None:
        """`utt` is in the file (`complete`: whole; else what came of it before we gave up)."""
        self._log({"utt": utt, "end": self.written, "complete": complete})

    def idle(self) -> bool:
        """A file never runs dry: it needs no jitter buffer."""
        return False

    def write(self, pcm: np.ndarray, *, cut: bool = False, end: bool = False) -> int:
        """Queue audio; return the wall time (ns) at which it starts to be heard.

        `cut` and `end` (see DeviceSink.write) change nothing in a file.
        """
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


class DeviceSink:
    """A PortAudio output stream fed from a buffer by its callback, with true play times.

    * Times: every callback anchors "the first sample of this block is heard at wall time
      T" from its time info (`outputBufferDacTime - currentTime`, or the stream's reported
      latency when the host API gives none). A sample's position in the output stream
      (audio and silence alike, `out_pos`) then gives the wall time it is heard, so
      `write()` returns when its first sample will really be heard and `busy_until_ns()`
      when the last queued one will.
    * No clicks: a continuous stream of chunks is played untouched. Only where the audio
      would jump, it is faded over 5 ms: out, when the buffer is about to run dry (an
      underrun or the end of speech) or before a cut (`cut=True`: the new audio does not
      continue the old); in, for the first audio after such a point.
    * Underruns: running dry inside audio not marked `end` counts `underruns`.
    * Loss: if the stream stops by itself (device unplugged, sound server gone), `lost`
      says why; `reopen()` tries again with a fresh PortAudio device list.
    """

    def __init__(self, device: str, counters) -> None:
        from voxweft.actors.devices import open_sounddevice

        self.sd = open_sounddevice("player")
        self.spec = device
        self.counters = counters
        self.buffer: collections.deque[list] = collections.deque()   # [pcm, end] items
        self.queued = 0               # samples waiting in the buffer
        self.out_pos = 0              # samples the callback has output, audio and silence
        self.anchor: tuple[int, int] | None = None   # (out_pos of a block, wall ns heard)
        self.tail_faded = True        # what is queued ends faded out (or nothing plays)
        self.playing = False          # the last block ended inside audio
        self.last_end = True          # the last audio consumed was the end of an utterance
        self.lost = ""                # why the stream stopped by itself; "" while it runs
        self.closing = False
        self.guard = threading.Lock()  # buffer shared with the audio callback; never a model
        self._open()

    def _open(self) -> None:
        from voxweft.actors.devices import open_device, resolve_device

        index, info = resolve_device(self.sd, self.spec, "output")
        self.name = info["name"]
        self.rate = int(info["default_samplerate"])
        self.fade = np.linspace(0.0, 1.0, max(2, int(self.rate * FADE_S)), dtype=np.float32)
        channels = max(1, min(2, int(info["max_output_channels"])))
        self.stream = open_device(self.sd, "player", self.name, lambda: self.sd.OutputStream(
            device=index, samplerate=self.rate, channels=channels, dtype="float32",
            callback=self._callback, finished_callback=self._finished))
        self.latency_s = float(self.stream.latency)
        self.anchor = None
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
            self.anchor = (self.out_pos, wall + int(delay_s * 1e9))
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

    def _finished(self) -> None:
        # PortAudio ends a callback stream by itself only when the device failed.
        if not self.closing:
            self.lost = "the audio stream stopped (device unplugged or sound server gone)"

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
    def _heard_ns(self, pos: int) -> int:
        if self.anchor is None:   # no callback yet: it will come within one latency
            return now_ns() + int(self.latency_s * 1e9) + \
                int((pos - self.out_pos) * 1e9 / self.rate)
        anchor_pos, anchor_ns = self.anchor
        return anchor_ns + int((pos - anchor_pos) * 1e9 / self.rate)

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
            start_pos = self.out_pos + self.queued
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
        from voxweft.actors.settings.base import StartupError

        with self.guard:
            self.buffer.clear()
            self.queued = 0
            self.tail_faded, self.playing, self.last_end = True, False, True
        self._close_stream()
        try:
            self.sd._terminate()
            self.sd._initialize()
            self._open()
        except (StartupError, self.sd.PortAudioError) as exc:
            self.lost = str(exc)
            return False
        return True

    def _close_stream(self) -> None:
        self.closing = True
        try:
            self.stream.stop()
            self.stream.close()
        except self.sd.PortAudioError:
            pass   # a lost device cannot be stopped cleanly; the handle is freed anyway
        finally:
            self.closing = False

    def finished(self, utt: str, complete: bool = True) -> None:
        """A loudspeaker keeps no journal: a restarted player starts with an empty buffer."""

    def close(self) -> None:
        """Stop the stream."""
        self._close_stream()


@dataclass
class Utterance:
    """Playback state of one utterance."""

    utt: str
    chunks: dict[int, SpeechChunk] = field(default_factory=dict)
    next_index: int = 0
    last_index: int | None = None
    last_arrival: float = 0.0
    started_ns: int | None = None
    played_s: float = 0.0
    trace: tuple = ()
    complete: bool = True
    resampler: object = None      # soxr stream at the chunks' rate: no edge at chunk joins
    resampler_rate: int = 0
    hold_since: float | None = None   # monotonic time the jitter buffer started holding
    skipped: str = ""             # why tts did not speak it (its last chunk says)


class PlayerActor(Actor):
    """Plays utterances in arrival order; a missing chunk never stalls playback."""

    name = "player"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.sink = None
        self.queue: collections.OrderedDict[str, Utterance] = collections.OrderedDict()
        # Events wait until the audio they describe is really heard: (due wall ns, event).
        self.pending: list[tuple[int, PlaybackEvent]] = []
        self.done = Finished(limit=1000)   # utterances written whole or skipped
        self.cut_next = False        # the next audio written does not continue the last
        self.device_lost_at: float | None = None
        self.last_retry = 0.0
        self.acks: list[Done] = []   # utterances written whole or skipped, to announce
        self.tts: tuple[int, str, float] | None = None   # (epoch, state, monotonic heard)
        self.tts_back = 0.0          # monotonic time tts (re)started working for us
        self.answered: dict[str, float] = {}   # utterance -> when we last said its Done again
        # holder -> (monotonic heard, what its last heartbeat says it holds)
        self.holding: dict[str, tuple[float, set[str]]] = {}
        self.asked_again = 0.0       # when we last asked tts for what it holds (a file)

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """TTS's speech chunks; the heartbeats of tts and of the other holders.

        A chunk is not late while tts restarts; a holder asks about what it holds (see
        `_answer`).
        """
        return [("tts", SpeechChunk)] + [(a, Status) for a in HOLDERS
                                         if a != "tts" and a in self.topology.actors]

    def _answer(self, msg: Status) -> list[Done]:
        """The Done again of each utterance holder `msg.src` asks about that we finished."""
        if msg.src not in HOLDERS:
            return []
        now = time.monotonic()
        self.holding[msg.src] = (now, set(msg.holding))
        again = [utt for utt in msg.holding if utt in self.done
                 and now - self.answered.get(utt, -ANSWER_EVERY_S) >= ANSWER_EVERY_S]
        for utt in again:
            self.answered[utt] = now
        if len(self.answered) > 256:   # bounded: what was answered a while ago is forgotten
            self.answered = {u: t for u, t in self.answered.items()
                             if now - t < ANSWER_EVERY_S}
        self.counters["done_again"] += len(again)
        return [Done(utt=utt) for utt in again]

    def _coming_again(self, u: Utterance) -> bool:
        """Reading a file: whether a holder will send what `u` lacks again (so wait for it).

        A holder lists `u`: tts is making it, or sends it again once back; or mt, asr or the
        segmenter does, once tts is. When tts holds `u`, is working and makes nothing, what
        `u` lacks was lost on the way: ask tts to send again what it holds.
        """
        if self.config.sink != "wav":
            return False   # a loudspeaker does not wait: what is late is not heard in time
        now = time.monotonic()
        held = {src for src, (heard, utts) in self.holding.items()
                if u.utt in utts and now - heard < HOLDER_SILENT_S}
        if "tts" in held and now - self.asked_again > self.config.gap_timeout_ms / 1000:
            self.asked_again = now
            self.counters["asked_again"] += 1
            self.again.add("tts")
        return bool(held)

    def _session(self) -> str:
        """The session: the frozen topology file `up` and `interpret` write for each run."""
        source = Path(self.topology.source)
        if not source.is_file():
            return ""
        return f"{source.resolve()}|{source.stat().st_mtime_ns}"

    def held(self) -> int:
        """Utterances queued or not yet heard (the heartbeat's `outstanding`)."""
        return len(self.queue) + len(self.pending)

    def _tts_working(self) -> bool:
        if self.tts is None:
            return False
        _epoch, state, heard, _busy = self.tts
        return state in ("ready", "degraded") and time.monotonic() - heard < TTS_SILENT_S

    def _tts_making(self) -> bool:
        """Whether tts is alive and in a model call: making what the head utterance lacks.

        tts speaks one translation after another, so while the head utterance lacks its
        last chunk, what tts is making is that utterance's next chunk (on a busy machine a
        long chunk took longer than gap_timeout_ms after the audio before it had drained:
        the player cut 12 of 60 utterances short, each one heard only in part).
        """
        return self._tts_working() and 0.0 < self.tts[3] < TTS_STUCK_S

    def duplicate(self, msg: Message) -> Iterator[Message]:
        """A chunk sent again: if its utterance is done, say so again (tts missed it)."""
        if isinstance(msg, SpeechChunk) and msg.utt in self.done:
            yield Done(utt=msg.utt)

    def engine_name(self) -> str:
        """The sink kind."""
        return self.config.sink

    def _voice_rate(self) -> int:
        """The tts engine's sample rate (constructing it loads nothing); 24 kHz if unknown.

        Unknown also when tts runs on another host: its engine's packages need not be
        installed here (set the player's `sample_rate` to keep a 48 kHz voice at 48 kHz).
        """
        tts = self.topology.actors["tts"]
        if tts.host != self.config.host:
            return 24000
        try:
            return int(engines.build("tts", tts.engine, tts.engine_settings()).sample_rate)
        except (KeyError, ValueError, TypeError, AttributeError, ImportError):
            return 24000

    def load(self) -> None:
        """Open the device or the file."""
        if self.config.sink == "wav":
            self.sink = WavSink(self.config.path, self.config.sample_rate or self._voice_rate(),
                                self._session())
            for utt in self.sink.done:
                self.done.add(utt)
            if self.sink.done:
                self.log.info("player: restarted; %s holds %d utterance(s) whole, %.1f s",
                              self.config.path, len(self.sink.done),
                              self.sink.written / self.sink.rate)
        else:
            self.sink = DeviceSink(self.config.device, self.counters)
            self.log.info("player: %s", self.sink.describe())

    def handle(self, msg: Message) -> Iterator[Message]:
        """Buffer a chunk under its utterance."""
        if isinstance(msg, Status):
            if msg.src == "tts":
                working_before = self._tts_working()
                self.tts = (msg.epoch, msg.state, time.monotonic(), msg.busy_s)
                if self._tts_working() and not working_before:
                    self.tts_back = time.monotonic()
            return iter(self._answer(msg))
        if not isinstance(msg, SpeechChunk):
            return iter(())
        if msg.utt in self.done:
            self.counters["late_chunks"] += 1   # its utterance is done already
            return iter((Done(utt=msg.utt),))
        if msg.utt not in self.queue and len(self.queue) >= QUEUE_UTTERANCES or \
                not 0 <= msg.index < UTTERANCE_CHUNKS:
            # More than any pipeline sends (its holders keep at most OUTBOX_UTTERANCES, tts
            # splits at clauses): a peer gone wrong. Dropped, counted, said once a while.
            self.counters["refused_chunks"] += 1
            if self.counters["refused_chunks"] in (1, 10, 100, 1000):
                self.log.warning("player: refused chunk %d of %s (%d utterances queued): "
                                 "more than a pipeline sends", msg.index, msg.utt,
                                 len(self.queue))
            return iter(())
        u = self.queue.setdefault(msg.utt, Utterance(msg.utt))
        u.chunks[msg.index] = msg
        u.last_arrival = time.monotonic()
        if msg.last:
            u.last_index = msg.index
            u.skipped = msg.skipped
        if not u.trace:
            u.trace = self.arrived(msg.trace, "play")
        return iter(())

    def health(self) -> str:
        """Degraded while the output device is lost."""
        lost = getattr(self.sink, "lost", "")
        return f"output device {self.config.device or 'default'!r} lost: {lost}" if lost else ""

    def tick(self) -> Iterator[Message]:
        """Feed the sink, head utterance first; publish started/finished events."""
        if getattr(self.sink, "lost", ""):
            self._recover()
        self._advance()
        yield from self.acks
        self.acks.clear()
        now = now_ns()
        while self.pending and self.pending[0][0] <= now:
            yield self.pending.pop(0)[1]

    def _recover(self) -> None:
        # Keep running rather than exit: the rest of the pipeline is fine, and a headset
        # that comes back should just work again. Exiting would not help: supervisord
        # would restart us, load() would fail with the device still missing, exit 78, and
        # nobody would restart the player when the device returns.
        now = time.monotonic()
        if self.device_lost_at is None:
            self.device_lost_at = now
            self.counters["device_lost"] += 1
            self.log.error("player: output device %r lost (%s); dropping audio and retrying "
                           "every %.1f s; run `voxweft devices` to list devices",
                           self.config.device or "default", self.sink.lost,
                           self.config.device_retry_ms / 1000)
        if now - self.last_retry < self.config.device_retry_ms / 1000:
            return
        self.last_retry = now
        if self.sink.reopen():
            self.log.info("player: output device back after %.1f s: %s",
                          now - self.device_lost_at, self.sink.describe())
            self.device_lost_at = None
            self.cut_next = True

    def _advance(self) -> None:
        while self.queue:
            u = next(iter(self.queue.values()))
            self._feed(u)
            if self.sink.busy_until_ns() > now_ns() or not self._tts_working() \
                    or self._tts_making():
                # Audio is still playing: the next chunk is not late until it has drained
                # (a long clause can take Kokoro longer than gap_timeout_ms to make), nor
                # while tts is making it. Nor while tts is down or loading: it sends the
                # utterance again when back.
                u.last_arrival = max(u.last_arrival, time.monotonic())
            u.last_arrival = max(u.last_arrival, self.tts_back)
            gap_s = time.monotonic() - u.last_arrival
            if u.last_index is not None and u.next_index > u.last_index:
                self._finish(u)
            elif gap_s * 1000 > self.config.gap_timeout_ms and not self._coming_again(u):
                self._feed(u, force=True)   # what the jitter buffer holds plays now
                if u.last_index is not None and u.next_index < u.last_index:
                    # A chunk in the middle is missing: skip it and play what follows.
                    self.counters["missing_chunks"] += 1
                    u.next_index += 1
                    u.complete = False
                    self.cut_next = True
                    continue
                self.counters["incomplete_utterances"] += 1
                u.complete = False
                self.log.warning("player: %s: no chunk for %.1f s; moving on", u.utt, gap_s)
                self._finish(u)
            else:
                return

    def _schedule(self, due_ns: int, event: PlaybackEvent) -> None:
        self.pending.append((due_ns, event))
        self.pending.sort(key=lambda item: item[0])   # stable: same time keeps send order

    def _holding(self, u: Utterance) -> bool:
        """Jitter buffer: True while the chunks from silence on should wait.

        From silence (an utterance's start, or after an underrun) audio waits until
        `jitter_ms` of it is here, the utterance is complete, or `jitter_ms` has passed.
        """
        jitter_s = self.config.jitter_ms / 1000
        if not jitter_s or not self.sink.idle():
            u.hold_since = None
            return False   # audio still queued ahead: appending keeps playback continuous
        held_s, i = 0.0, u.next_index
        while i in u.chunks:
            held_s += len(u.chunks[i].pcm) / u.chunks[i].sample_rate
            i += 1
        complete = u.last_index is not None and i > u.last_index
        if held_s >= jitter_s or complete:
            u.hold_since = None
            return False
        now = time.monotonic()
        if u.hold_since is None:
            u.hold_since = now
        if held_s and now - u.hold_since >= jitter_s:
            u.hold_since = None
            return False   # never wait longer than the buffer itself would have lasted
        return True

    def _resample(self, u: Utterance, chunk: SpeechChunk) -> np.ndarray:
        pcm = chunk.pcm.astype(np.float32)
        pcm = pcm.mean(axis=1) if pcm.ndim == 2 else pcm
        if chunk.sample_rate == self.sink.rate and u.resampler is None:
            return pcm
        if u.resampler is None or u.resampler_rate != chunk.sample_rate:
            tail = self._flush(u)
            # One stream per utterance: chunks resampled one by one would each get filter
            # edges (an audible tick at every join) and rounding drift in their lengths.
            u.resampler = soxr.ResampleStream(chunk.sample_rate, self.sink.rate, 1,
                                              dtype="float32")
            u.resampler_rate = chunk.sample_rate
            return np.concatenate([tail, u.resampler.resample_chunk(pcm)])
        return u.resampler.resample_chunk(pcm)

    def _flush(self, u: Utterance) -> np.ndarray:
        """What the utterance's resampler still holds (its filter delay)."""
        if u.resampler is None:
            return np.zeros(0, np.float32)
        tail = u.resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        u.resampler = None
        return tail

    def _write(self, u: Utterance, pcm: np.ndarray, end: bool = False) -> None:
        if getattr(self.sink, "lost", ""):
            u.complete = False   # the device is gone: this audio is not heard
        if not len(pcm) and not end:
            return
        start_ns = self.sink.write(pcm, cut=self.cut_next and len(pcm) > 0, end=end)
        if len(pcm):
            self.cut_next = False
            u.played_s += len(pcm) / self.sink.rate
            if u.started_ns is None:
                u.started_ns = start_ns
                u.trace = traced(u.trace, "play.start", start_ns)
                self._schedule(start_ns, PlaybackEvent(utt=u.utt, event="started",
                                                       trace=u.trace))

    def _feed(self, u: Utterance, force: bool = False) -> None:
        if not force and self._holding(u):
            return
        while u.next_index in u.chunks:
            chunk = u.chunks.pop(u.next_index)
            u.next_index += 1
            if len(chunk.pcm) == 0 and not (chunk.last and u.resampler is not None):
                continue
            pcm = self._resample(u, chunk)
            if chunk.last:
                pcm = np.concatenate([pcm, self._flush(u)])
            self._write(u, pcm, end=chunk.last)

    def _finish(self, u: Utterance) -> None:
        del self.queue[u.utt]
        self.done.add(u.utt)
        self._write(u, self._flush(u), end=True)   # the last chunk never came
        self.sink.finished(u.utt, u.complete)
        # Upstream stages may forget it now: it is in the sink, whole or as whole as it gets.
        self.acks.append(Done(utt=u.utt, complete=u.complete))
        if not u.complete:
            self.cut_next = True   # what follows does not continue this audio
        if u.started_ns is None:
            after = max([now_ns()] + [due for due, _ in self.pending])   # keep event order
            self._schedule(after, PlaybackEvent(utt=u.utt, event="skipped",
                                                complete=u.complete,
                                                reason=u.skipped or ("" if u.complete else
                                                                     NO_AUDIO),
                                                trace=traced(u.trace, "play.end")))
            return
        end_ns = self.sink.busy_until_ns()
        event = PlaybackEvent(utt=u.utt, event="finished", duration_s=round(u.played_s, 3),
                              complete=u.complete, trace=traced(u.trace, "play.end", end_ns))
        self._schedule(end_ns, event)

    def tick_interval_s(self) -> float:
        """Audio is fed at 20 ms granularity."""
        return 0.02

    def close(self) -> None:
        """Flush the file or stop the device."""
        if self.sink is not None:
            self.sink.close()
