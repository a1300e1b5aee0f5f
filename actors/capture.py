"""capture: a microphone or an audio file, published as 20 ms frames of 16 kHz mono float32."""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import queue
import time
from collections.abc import Iterator

import numpy as np
import soxr

from voxweft.actors.devices import (
    DeviceStream,
    Recovery,
    open_device,
    open_sounddevice,
    reopen,
    resolve_device,
)
from voxweft.actors.runtime import Actor, StartupError
from voxweft.actors.settings.actors import ACTOR_NAMES
from voxweft.protocol.messages import BUS_RATE, AudioFrame, EndOfStream, Message, Status

READ_BLOCK_S = 0.5   # file read granularity: bounded memory for a 30-minute recording

log = logging.getLogger("voxweft.capture")


class FrameAssembler:
    """Mixes down, resamples (libsoxr, HQ) and cuts audio into fixed frames."""

    def __init__(self, in_rate: int, frame_samples: int) -> None:
        self.resampler = (soxr.ResampleStream(in_rate, BUS_RATE, 1, dtype="float32")
                          if in_rate != BUS_RATE else None)
        self.frame_samples = frame_samples
        self.pending = np.zeros(0, np.float32)

    def push(self, block: np.ndarray, last: bool = False) -> list[np.ndarray]:
        """Add a block (frames x channels, any rate); return the whole frames now ready."""
        mono = block.mean(axis=1, dtype=np.float32) if block.ndim == 2 else block
        mono = np.ascontiguousarray(mono, dtype=np.float32)
        if self.resampler is not None:
            mono = self.resampler.resample_chunk(mono, last=last)
        self.pending = np.concatenate([self.pending, mono])
        n = len(self.pending) // self.frame_samples
        frames = [self.pending[i * self.frame_samples:(i + 1) * self.frame_samples].copy()
                  for i in range(n)]
        self.pending = self.pending[n * self.frame_samples:]
        if last and len(self.pending):
            frames.append(self.pending.copy())   # the tail: a short last frame, nothing lost
            self.pending = np.zeros(0, np.float32)
        return frames


class FileSource:
    """Reads any format soundfile reads, block by block."""

    def __init__(self, path: str, frame_samples: int) -> None:
        import soundfile as sf

        try:
            self.file = sf.SoundFile(path)
        except (sf.LibsndfileError, RuntimeError, OSError) as exc:
            raise StartupError(f"cannot read audio file {path!r}: {exc}; give a WAV, FLAC, "
                               "OGG or MP3 file") from None
        self.frame_samples = frame_samples
        self.assembler = FrameAssembler(self.file.samplerate, frame_samples)
        self.block = max(1, int(self.file.samplerate * READ_BLOCK_S))
        self.ended = False
        st = os.stat(path)
        # Names the recording across restarts of this actor (same file, same content).
        self.stream = "file:" + hashlib.sha1(
            f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]

    def seek(self, media_s: float) -> int:
        """Go to `media_s` (16 kHz timeline); return the pipeline sample it starts at."""
        rate = self.file.samplerate
        frame = min(self.file.frames, max(0, round(media_s * rate)))
        self.file.seek(frame)
        self.assembler = FrameAssembler(rate, self.frame_samples)
        self.ended = False
        return round(frame * BUS_RATE / rate)

    def describe(self) -> str:
        """One line about the input format."""
        return (f"{self.file.name}: {self.file.samplerate} Hz, {self.file.channels} ch, "
                f"{self.file.frames / self.file.samplerate:.1f} s")

    def read(self) -> list[np.ndarray]:
        """The next frames; sets `ended` after the last one."""
        if self.ended:
            return []
        block = self.file.read(self.block, dtype="float32", always_2d=True)
        last = len(block) < self.block
        frames = self.assembler.push(block, last=last)
        if last:
            self.ended = True
        return frames

    def close(self) -> None:
        """Close the file."""
        self.file.close()


class MicrophoneSource(DeviceStream):
    """A PortAudio input stream at the device's own rate and channels, as 16 kHz mono frames.

    The audio callback never blocks: it copies the block into a bounded queue and, when the
    queue is full (the actor fell behind by more than `queue_ms`), drops the block and
    counts it (`overflow`, `overflow_ms`). A dropped block becomes silence of the same
    length when the queue drains again, so media time keeps matching wall time.

    Each frame's `capture_ns` is the wall time of its first sample. It is taken from the
    callback's time info (`inputBufferAdcTime`: when the block's first sample reached the
    converter, on the stream clock, shifted to the wall clock by `currentTime`), and only
    when the host API gives no usable time info, from the callback's arrival time minus the
    block's duration. Later samples are placed by counting samples from that anchor.
    """

    def __init__(self, device: str, frame_samples: int, counters,
                 queue_ms: int = 2000) -> None:
        self.sd = sd = open_sounddevice("capture")
        index, info = resolve_device(sd, device, "input")
        self.rate = int(info["default_samplerate"])
        self.channels = max(1, min(2, int(info["max_input_channels"])))
        self.name = info["name"]
        self.assembler = FrameAssembler(self.rate, frame_samples)
        # Fixed blocks of one pipeline frame's duration: the queue bound is then exact in
        # milliseconds, and a block's time anchors at most one frame.
        self.block = max(1, round(self.rate * frame_samples / BUS_RATE))
        blocks = max(1, round(queue_ms * self.rate / 1000 / self.block))
        self.queue: queue.Queue[tuple[int, int, np.ndarray]] = queue.Queue(maxsize=blocks)
        self.counters = counters
        self.ended = False
        self.in_samples = 0        # device-rate samples handed to the assembler
        self.out_samples = 0       # 16 kHz samples returned as frames
        self.anchor: tuple[int, int] | None = None   # (in_samples position, wall ns)
        self.dropped = 0           # samples dropped since the last queued block (callback)
        self.overflows_seen = 0
        self.time_source = ""      # "adc" or "arrival": which estimate capture_ns uses
        self.lost = ""             # why the stream stopped by itself; "" while it runs

        def callback(indata, frames, time_info, status) -> None:
            # Audio thread: no lock, no logging, no allocation beyond one copy.
            wall = time.time_ns()
            adc, current = time_info.inputBufferAdcTime, time_info.currentTime
            lag_s = current - adc
            if adc > 0 and current > 0 and 0.0 <= lag_s < 1.0:
                first_ns, source = wall - int(lag_s * 1e9), "adc"
            else:
                first_ns, source = wall - int(frames * 1e9 / self.rate), "arrival"
            try:
                self.queue.put_nowait((first_ns, self.dropped, indata.copy()))
                self.dropped = 0
                self.time_source = source
            except queue.Full:
                self.dropped += frames
                counters["overflow"] += 1
                counters["overflow_ms"] += frames * 1000 // self.rate
                counters["dropped_ms"] += frames * 1000 // self.rate
            if status:
                counters["xruns"] += 1

        self.closing = False
        self.stream = open_device(sd, "capture", self.name, lambda: sd.InputStream(
            device=index, samplerate=self.rate, channels=self.channels, dtype="float32",
            callback=callback, blocksize=self.block, finished_callback=self._finished))
        self.stream.start()

    def describe(self) -> str:
        """One line about the device."""
        return (f"microphone {self.name!r}: {self.rate} Hz, {self.channels} ch, "
                f"input latency {self.stream.latency * 1000:.0f} ms")

    def read(self) -> list[np.ndarray]:
        """Whatever the callback delivered since the last call, as pipeline frames."""
        return [pcm for pcm, _ns in self.read_timed()]

    def read_timed(self) -> list[tuple[np.ndarray, int]]:
        """Frames with the wall time (ns) of each frame's first sample."""
        frames: list[tuple[np.ndarray, int]] = []
        while True:
            try:
                first_ns, dropped, block = self.queue.get_nowait()
            except queue.Empty:
                break
            if dropped:   # keep the timeline: what was lost is as long as it was
                frames += self._push(np.zeros((dropped, block.shape[1]), np.float32))
            self.anchor = (self.in_samples, first_ns)
            frames += self._push(block)
        if self.counters["overflow"] != self.overflows_seen:
            self.overflows_seen = self.counters["overflow"]
            log.warning("capture: fell behind the microphone; %d block(s) (%d ms) dropped "
                        "so far", self.overflows_seen, self.counters["overflow_ms"])
        return frames

    def _push(self, block: np.ndarray) -> list[tuple[np.ndarray, int]]:
        self.in_samples += len(block)
        out = []
        for pcm in self.assembler.push(block):
            # The frame's first sample, in device samples, measured from the anchor block;
            # soxr's stream output is aligned with its input (its delay is compensated).
            position = self.out_samples * self.rate / BUS_RATE
            anchor_pos, anchor_ns = self.anchor or (0, time.time_ns())
            out.append((pcm, anchor_ns + int((position - anchor_pos) * 1e9 / self.rate)))
            self.out_samples += len(pcm)
        return out

    def close(self) -> None:
        """Stop the stream."""
        self._close_stream()


class CaptureActor(Actor):
    """Publishes captured audio as AudioFrames; a file source waits for the pipeline."""

    name = "capture"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.frame_samples = BUS_RATE * config.frame_ms // 1000
        self.source = None
        self.statuses: dict[str, Status] = {}
        self.started_at: float | None = None
        self.sent = 0                # frames sent
        self.sent_samples = 0
        self.wait_since = time.monotonic()
        self.eos_sent = False
        self.ready_frames: collections.deque[np.ndarray] = collections.deque()   # read, unsent
        self.recovery = Recovery("capture", "input", "retrying", self.counters, self.log)
        self.feeding = 0        # file: the segmenter epoch we send to (AudioFrame.for_epoch)
        self.taken_ms = 0       # file: furthest end of speech asr has taken (rewind point)
        self.stalled_since: float | None = None   # file: waiting for the pipeline (credit)
        self.dropping_since: float | None = None  # microphone: dropping, the segmenter behind
        self.fed_from_ms = 0    # file: where we started feeding the segmenter we hear now

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """Whose heartbeats to hear.

        A file source: every actor's, to start when all are ready. A microphone: the
        segmenter's, to know when it falls behind.
        """
        if self.config.source != "file":
            return [("segmenter", Status)]
        return [(a, Status) for a in ACTOR_NAMES if a != self.name]

    def engine_name(self) -> str:
        """The source kind."""
        return self.config.source

    def load(self) -> None:
        """Open the file or the microphone."""
        if self.config.source == "file":
            self.source = FileSource(self.config.path, self.frame_samples)
            self.stream = self.source.stream
        else:
            self.source = MicrophoneSource(self.config.device, self.frame_samples,
                                           self.counters, queue_ms=self.config.queue_ms)
            self.started_at = time.monotonic()
            self.stream = f"mic:{self.epoch:x}"   # live: every start is a new stream
        self.log.info("capture: %s", self.source.describe())

    def _recover_microphone(self) -> None:
        """The microphone is lost: open it again once it is back (actors.devices)."""
        self.recovery.step(self.config.device, self.source.lost, self.config.device_retry_ms,
                           self._reopen_microphone)

    def _reopen_microphone(self) -> str:
        """A new source on the device: a line about it, or "" while it is still missing."""
        self.source.close()
        opened: list[MicrophoneSource] = []
        why = reopen(self.source.sd, lambda: opened.append(MicrophoneSource(
            self.config.device, self.frame_samples, self.counters,
            queue_ms=self.config.queue_ms)))
        if why:
            self.source.lost = why
            return ""
        self.source = opened[0]
        return self.source.describe()

    def health(self) -> str:
        """Degraded while the microphone is lost."""
        lost = getattr(self.source, "lost", "")
        return f"input device {self.config.device or 'default'!r} lost: {lost}" if lost else ""

    def handle(self, msg: Message) -> Iterator[Message]:
        """Remember the peers' status (the file source's start condition)."""
        if isinstance(msg, Status):
            self.statuses[msg.src] = msg
            if msg.src == "asr" and msg.stream == self.stream:
                self.taken_ms = max(self.taken_ms, msg.media_ms)
        return iter(())

    def _pipeline_ready(self) -> bool:
        others = [a for a in ACTOR_NAMES if a != self.name]
        ready = all(self.statuses.get(a) is not None and
                    self.statuses[a].state in ("ready", "degraded") for a in others)
        # The segmenter has heard us: its subscription is live, no frame will be lost to
        # ZeroMQ's slow-joiner window.
        seg = self.statuses.get("segmenter")
        return ready and seg is not None and seg.peers.get(self.name) == self.epoch

    def tick(self) -> Iterator[Message]:
        """Publish the frames that are due."""
        if self.source is None:
            return
        if self.started_at is None:
            waited = time.monotonic() - self.wait_since
            if not self._pipeline_ready() and waited < self.config.wait_ready_s:
                return
            if waited >= self.config.wait_ready_s:
                self.log.warning("capture: pipeline not ready after %.0f s; starting anyway",
                                 waited)
            self.started_at = time.monotonic()
            self.start_ns = time.time_ns()
            if self.config.source == "file":
                self._feed(self._resume_s())
        if self.config.source == "microphone":
            behind = self._behind_s() > self.config.max_ahead_s
            for pcm, first_ns in self.source.read_timed():
                if behind:
                    self._drop(pcm)
                else:
                    yield from self._frames([pcm], first_ns)
            if not behind and self.dropping_since is not None:
                self.log.warning("capture: the segmenter caught up; %.1f s of live audio "
                                 "dropped (%d ms in all)", time.monotonic() -
                                 self.dropping_since, self.counters["dropped_ms"])
                self.dropping_since = None
            if self.source.lost:
                self._recover_microphone()
            return
        yield from self._file_frames()

    # -- microphone: the one place live audio is dropped ----------------------------------
    def _behind_s(self) -> float:
        """How far the segmenter is behind what we sent (by its heartbeat)."""
        seg = self.statuses.get("segmenter")
        if seg is None or seg.stream != self.stream:
            return 0.0
        return self.sent_samples / BUS_RATE - seg.media_ms / 1000

    def _drop(self, pcm: np.ndarray) -> None:
        """Drop a live frame, counted, rather than let a socket queue overflow.

        Media time goes on (the segmenter fills the gap with silence), so what comes after
        keeps its true time. Seen in the heartbeat (dropped_ms, behind_ms), `voxweft status`,
        `watch` and the bench report.
        """
        ms = len(pcm) * 1000 // BUS_RATE
        self.counters["behind_ms"] += ms
        self.counters["dropped_ms"] += ms
        self.sent_samples += len(pcm)
        if self.dropping_since is None:
            self.dropping_since = time.monotonic()
            self.log.warning("capture: the segmenter is %.0f s behind the microphone; "
                             "dropping live audio until it catches up", self._behind_s())

    # -- file: flow control and recovery --------------------------------------------------
    def _resume_s(self) -> float:
        """Where to (re)start the file: what the pipeline already holds is not sent again.

        A restarted capture goes on where the segmenter is; for a restarted segmenter,
        from the end of the last speech asr took (what the old segmenter held is lost).
        """
        seg = self.statuses.get("segmenter")
        if seg is not None and seg.stream == self.stream and seg.media_ms:
            return seg.media_ms / 1000
        return self.taken_ms / 1000

    def _feed(self, media_s: float) -> None:
        """Send from `media_s` on to the segmenter we hear now."""
        seg = self.statuses.get("segmenter")
        self.feeding = seg.epoch if seg is not None else 0
        self.ready_frames.clear()
        self.sent_samples = self.source.seek(media_s)
        self.fed_from_ms = self.sent_samples * 1000 // BUS_RATE
        self.eos_sent = False
        # Real-time pacing goes on from here: the file is "spoken" from this point now.
        self.started_at = time.monotonic() - self.sent_samples / BUS_RATE / self._speed()
        self.start_ns = time.time_ns() - self.sent_samples * 10**9 // BUS_RATE
        if self.sent_samples:
            self.log.info("capture: sending %s from %.2f s to segmenter epoch %d",
                          self.stream, self.sent_samples / BUS_RATE, self.feeding)

    def _speed(self) -> float:
        return self.config.fast_speed if self.config.fast else 1.0

    def _credit(self) -> bool:
        """True while the pipeline can take more of the file (flow control).

        The segmenter's heartbeat says how far it has read and how many utterances are in
        flight; we stay at most `max_ahead_s` ahead of it and stop reading while
        `max_outstanding` utterances are not yet done. A file is never dropped in a
        socket queue, and --fast goes as fast as the slowest actor and no faster.
        """
        seg = self.statuses.get("segmenter")
        if seg is None:
            return self.feeding == 0   # started without the pipeline: nothing to follow
        if seg.epoch != self.feeding:
            if seg.state in ("ready", "degraded") and seg.peers.get(self.name) == self.epoch:
                self.log.info("capture: segmenter restarted; rewinding")
                self.counters["rewinds"] += 1
                self._feed(self._resume_s())
            return False
        # Until the segmenter has a frame of ours, it stands where we started feeding it
        # (after a rewind to minute 5 it is not 5 minutes behind).
        consumed_ms = seg.media_ms if seg.stream == self.stream else self.fed_from_ms
        ahead_s = (self.sent_samples / BUS_RATE) - consumed_ms / 1000
        return ahead_s < self.config.max_ahead_s and \
            seg.outstanding < self.config.max_outstanding

    def _file_frames(self) -> Iterator[Message]:
        credit = self._credit()   # after a segmenter restart, this rewinds (eos_sent too)
        if self.eos_sent:
            return
        now = time.monotonic()
        if not credit:
            if self.stalled_since is None:
                self.stalled_since = now
            return
        if self.stalled_since is not None:
            # Pacing resumes where it stopped: the pipeline's pace, not the clock's.
            stalled = now - self.stalled_since
            self.started_at += stalled
            self.start_ns += int(stalled * 1e9)
            self.counters["stalled_ms"] += int(stalled * 1000)
            self.stalled_since = None
        due_s = (now - self.started_at) * self._speed()
        budget = 200   # frames per tick: keeps heartbeats and inputs flowing in fast mode
        while budget > 0:
            if not self.ready_frames:
                self.ready_frames.extend(self.source.read())
                if not self.ready_frames:
                    break
            # A frame goes out once its last sample is due, as from a real microphone.
            if (self.sent_samples + len(self.ready_frames[0])) / BUS_RATE > due_s:
                break
            budget -= 1
            yield from self._frames([self.ready_frames.popleft()], None)
        if self.source.ended and not self.ready_frames:
            self.eos_sent = True
            yield EndOfStream(media_s=self.sent_samples / BUS_RATE, stream=self.stream,
                              for_epoch=self.feeding)
            self.log.info("capture: end of file after %.2f s of audio",
                          self.sent_samples / BUS_RATE)

    def _frames(self, frames: list[np.ndarray], mic_ns: int | None) -> Iterator[AudioFrame]:
        for pcm in frames:
            media_s = self.sent_samples / BUS_RATE
            if mic_ns is not None:
                capture_ns = mic_ns
            elif self.config.fast:
                capture_ns = time.time_ns()
            else:
                # Real-time pacing: the sample was "spoken" at its scheduled time.
                capture_ns = self.start_ns + int(media_s * 1e9)
            self.sent += 1
            self.sent_samples += len(pcm)
            yield AudioFrame(sample_rate=BUS_RATE, pcm=pcm, media_s=media_s,
                             capture_ns=capture_ns, stream=self.stream, for_epoch=self.feeding)

    def tick_interval_s(self) -> float:
        """Wake at the next frame boundary."""
        if self.started_at is None or self.config.source == "microphone":
            return 0.01 if self.started_at is not None else 0.05
        return 0.005 if self.config.fast else self.config.frame_ms / 2000

    def close(self) -> None:
        """Stop the microphone or close the file."""
        if self.source is not None:
            self.source.close()
