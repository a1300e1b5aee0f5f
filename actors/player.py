"""player: speech chunks in, sound out (a device or a WAV file), utterances in order."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import soxr

from actors.runtime import Actor, StartupError
from protocol.messages import Message, PlaybackEvent, SpeechChunk, now_ns, traced


class WavSink:
    """Writes what a loudspeaker would play, on a virtual clock that runs in real time.

    Silence fills the time between utterances, so the file is aligned with the session.
    """

    def __init__(self, path: str, rate: int) -> None:
        import soundfile as sf

        try:
            self.file = sf.SoundFile(path, "w", samplerate=rate, channels=1, subtype="PCM_16")
        except (sf.LibsndfileError, OSError) as exc:
            raise StartupError(f"cannot write {path!r}: {exc}") from None
        self.rate = rate
        self.first_ns: int | None = None
        self.written = 0          # samples in the file

    def write(self, pcm: np.ndarray) -> int:
        """Queue audio; return the wall time (ns) at which it starts to be heard."""
        now = now_ns()
        if self.first_ns is None:
            self.first_ns = now
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


class DeviceSink:
    """A PortAudio output stream fed from a bounded buffer by its callback."""

    def __init__(self, device: str, counters) -> None:
        from actors.devices import open_sounddevice, resolve_device

        sd = open_sounddevice("player")
        index, info = resolve_device(sd, device, "output")
        self.rate = int(info["default_samplerate"])
        self.buffer: collections.deque[np.ndarray] = collections.deque()
        self.queued = 0               # samples waiting in the buffer
        self.guard = threading.Lock()  # buffer shared with the audio callback; never a model
        self.counters = counters

        def callback(outdata, frames, time_info, status) -> None:
            out = outdata[:, 0]
            filled = 0
            with self.guard:
                while filled < frames and self.buffer:
                    head = self.buffer[0]
                    take = min(len(head), frames - filled)
                    out[filled:filled + take] = head[:take]
                    filled += take
                    if take == len(head):
                        self.buffer.popleft()
                    else:
                        self.buffer[0] = head[take:]
                self.queued -= filled
            out[filled:] = 0.0
            if outdata.shape[1] > 1:
                outdata[:, 1:] = outdata[:, :1]
            if status:
                counters["xruns"] += 1

        self.stream = sd.OutputStream(device=index, samplerate=self.rate,
                                      channels=min(2, int(info["max_output_channels"])),
                                      dtype="float32", callback=callback)
        self.stream.start()

    def write(self, pcm: np.ndarray) -> int:
        """Queue audio; return the wall time (ns) at which it starts to be heard."""
        with self.guard:
            start_ns = now_ns() + int(self.queued * 1e9 / self.rate)
            self.buffer.append(pcm.astype(np.float32))
            self.queued += len(pcm)
        return start_ns

    def busy_until_ns(self) -> int:
        """Wall time at which the buffer will have drained."""
        return now_ns() + int(self.queued * 1e9 / self.rate)

    def close(self) -> None:
        """Stop the stream."""
        self.stream.stop()
        self.stream.close()


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


class PlayerActor(Actor):
    """Plays utterances in arrival order; a missing chunk never stalls playback."""

    name = "player"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.sink = None
        self.queue: collections.OrderedDict[str, Utterance] = collections.OrderedDict()
        # Events wait until the audio they describe is really heard: (due wall ns, event).
        self.pending: list[tuple[int, PlaybackEvent]] = []
        self.done: collections.deque[str] = collections.deque(maxlen=1000)

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """TTS's speech chunks."""
        return [("tts", b"speech.")]

    def engine_name(self) -> str:
        """The sink kind."""
        return self.config.sink

    def load(self) -> None:
        """Open the device or the file."""
        if self.config.sink == "wav":
            self.sink = WavSink(self.config.path, self.config.sample_rate)
        else:
            self.sink = DeviceSink(self.config.device, self.counters)

    def handle(self, msg: Message) -> Iterator[Message]:
        """Buffer a chunk under its utterance."""
        if not isinstance(msg, SpeechChunk):
            return iter(())
        if msg.utt in self.done:
            self.counters["late_chunks"] += 1   # its utterance already gave up waiting
            return iter(())
        u = self.queue.setdefault(msg.utt, Utterance(msg.utt))
        u.chunks[msg.index] = msg
        u.last_arrival = time.monotonic()
        if msg.last:
            u.last_index = msg.index
        if not u.trace:
            u.trace = traced(msg.trace, "play.recv", self.recv_ns)
        return iter(())

    def tick(self) -> Iterator[Message]:
        """Feed the sink, head utterance first; publish started/finished events."""
        self._advance()
        now = now_ns()
        while self.pending and self.pending[0][0] <= now:
            yield self.pending.pop(0)[1]

    def _advance(self) -> None:
        while self.queue:
            u = next(iter(self.queue.values()))
            self._feed(u)
            gap_s = time.monotonic() - u.last_arrival
            if u.last_index is not None and u.next_index > u.last_index:
                self._finish(u)
            elif gap_s * 1000 > self.config.gap_timeout_ms:
                if u.last_index is not None and u.next_index < u.last_index:
                    # A chunk in the middle is missing: skip it and play what follows.
                    self.counters["missing_chunks"] += 1
                    u.next_index += 1
                    u.complete = False
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

    def _feed(self, u: Utterance) -> None:
        while u.next_index in u.chunks:
            chunk = u.chunks.pop(u.next_index)
            u.next_index += 1
            if len(chunk.pcm) == 0:
                continue
            pcm = chunk.pcm.astype(np.float32)
            pcm = pcm.mean(axis=1) if pcm.ndim == 2 else pcm
            if chunk.sample_rate != self.sink.rate:
                pcm = soxr.resample(pcm, chunk.sample_rate, self.sink.rate)
            start_ns = self.sink.write(pcm)
            u.played_s += len(pcm) / self.sink.rate
            if u.started_ns is None:
                u.started_ns = start_ns
                u.trace = traced(u.trace, "play.start", start_ns)
                self._schedule(start_ns, PlaybackEvent(utt=u.utt, event="started",
                                                       trace=u.trace))

    def _finish(self, u: Utterance) -> None:
        del self.queue[u.utt]
        self.done.append(u.utt)
        if u.started_ns is None:
            after = max([now_ns()] + [due for due, _ in self.pending])   # keep event order
            self._schedule(after, PlaybackEvent(utt=u.utt, event="skipped",
                                                complete=u.complete,
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
