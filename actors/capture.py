"""capture: a microphone or an audio file, published as 20 ms frames of 16 kHz mono float32."""

from __future__ import annotations

import collections
import queue
import time
from collections.abc import Iterator

import numpy as np
import soxr

from actors.config import ACTOR_NAMES
from actors.runtime import Actor, StartupError
from protocol.messages import AudioFrame, EndOfStream, Message, Status

PIPELINE_RATE = 16000
READ_BLOCK_S = 0.5   # file read granularity: bounded memory for a 30-minute recording


class FrameAssembler:
    """Mixes down, resamples (libsoxr, HQ) and cuts audio into fixed frames."""

    def __init__(self, in_rate: int, frame_samples: int) -> None:
        self.resampler = (soxr.ResampleStream(in_rate, PIPELINE_RATE, 1, dtype="float32")
                          if in_rate != PIPELINE_RATE else None)
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
        self.assembler = FrameAssembler(self.file.samplerate, frame_samples)
        self.block = max(1, int(self.file.samplerate * READ_BLOCK_S))
        self.ended = False

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
            self.file.close()
        return frames


class MicrophoneSource:
    """A PortAudio input stream; the callback only copies into a bounded queue."""

    def __init__(self, device: str, frame_samples: int, counters) -> None:
        from actors.devices import open_sounddevice, resolve_device

        sd = open_sounddevice("capture")
        index, info = resolve_device(sd, device, "input")
        self.rate = int(info["default_samplerate"])
        self.channels = min(2, int(info["max_input_channels"]))
        self.assembler = FrameAssembler(self.rate, frame_samples)
        self.queue: queue.Queue[tuple[int, np.ndarray]] = queue.Queue(maxsize=500)
        self.counters = counters
        self.ended = False

        def callback(indata, frames, time_info, status) -> None:
            # Never block the audio thread: a full queue drops and counts.
            try:
                self.queue.put_nowait((time.time_ns(), indata.copy()))
            except queue.Full:
                counters["overflow"] += 1
            if status:
                counters["xruns"] += 1

        self.stream = sd.InputStream(device=index, samplerate=self.rate, channels=self.channels,
                                     dtype="float32", callback=callback, blocksize=0)
        self.name = info["name"]
        self.stream.start()

    def describe(self) -> str:
        """One line about the device."""
        return f"microphone {self.name!r}: {self.rate} Hz, {self.channels} ch"

    def read(self) -> list[np.ndarray]:
        """Whatever the callback delivered since the last call, as pipeline frames."""
        frames = []
        while True:
            try:
                _t, block = self.queue.get_nowait()
            except queue.Empty:
                return frames
            frames.extend(self.assembler.push(block))

    def close(self) -> None:
        """Stop the stream."""
        self.stream.stop()
        self.stream.close()


class CaptureActor(Actor):
    """Publishes captured audio as AudioFrames; a file source waits for the pipeline."""

    name = "capture"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.frame_samples = PIPELINE_RATE * config.frame_ms // 1000
        self.source = None
        self.statuses: dict[str, Status] = {}
        self.started_at: float | None = None
        self.sent = 0                # frames sent
        self.sent_samples = 0
        self.wait_since = time.monotonic()
        self.eos_sent = False
        self.ready_frames: collections.deque[np.ndarray] = collections.deque()   # read, unsent

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """A file source listens to every actor's status to start when all are ready."""
        if self.config.source != "file":
            return []
        return [(a, b"status.") for a in ACTOR_NAMES if a != self.name]

    def engine_name(self) -> str:
        """The source kind."""
        return self.config.source

    def load(self) -> None:
        """Open the file or the microphone."""
        if self.config.source == "file":
            self.source = FileSource(self.config.path, self.frame_samples)
        else:
            self.source = MicrophoneSource(self.config.device, self.frame_samples,
                                           self.counters)
            self.started_at = time.monotonic()
        self.log.info("capture: %s", self.source.describe())

    def handle(self, msg: Message) -> Iterator[Message]:
        """Remember the peers' status (the file source's start condition)."""
        if isinstance(msg, Status):
            self.statuses[msg.src] = msg
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
        if self.source is None or self.eos_sent:
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
        if self.config.source == "microphone":
            yield from self._frames(self.source.read(), time.time_ns())
            return
        speed = self.config.fast_speed if self.config.fast else 1.0
        due_s = (time.monotonic() - self.started_at) * speed
        budget = 200   # frames per tick: keeps heartbeats and inputs flowing in fast mode
        while budget > 0:
            if not self.ready_frames:
                self.ready_frames.extend(self.source.read())
                if not self.ready_frames:
                    break
            # A frame goes out once its last sample is due, as from a real microphone.
            if (self.sent_samples + len(self.ready_frames[0])) / PIPELINE_RATE > due_s:
                break
            budget -= 1
            yield from self._frames([self.ready_frames.popleft()], None)
        if self.source.ended and not self.ready_frames:
            self.eos_sent = True
            yield EndOfStream(media_s=self.sent_samples / PIPELINE_RATE)
            self.log.info("capture: end of file after %.2f s of audio",
                          self.sent_samples / PIPELINE_RATE)

    def _frames(self, frames: list[np.ndarray], mic_ns: int | None) -> Iterator[AudioFrame]:
        for pcm in frames:
            media_s = self.sent_samples / PIPELINE_RATE
            if mic_ns is not None:
                capture_ns = mic_ns
            elif self.config.fast:
                capture_ns = time.time_ns()
            else:
                # Real-time pacing: the sample was "spoken" at its scheduled time.
                capture_ns = self.start_ns + int(media_s * 1e9)
            self.sent += 1
            self.sent_samples += len(pcm)
            yield AudioFrame(sample_rate=PIPELINE_RATE, pcm=pcm, media_s=media_s,
                             capture_ns=capture_ns)

    def tick_interval_s(self) -> float:
        """Wake at the next frame boundary."""
        if self.started_at is None or self.config.source == "microphone":
            return 0.01 if self.started_at is not None else 0.05
        return 0.005 if self.config.fast else self.config.frame_ms / 2000

    def close(self) -> None:
        """Stop the microphone."""
        if isinstance(self.source, MicrophoneSource):
            self.source.close()
