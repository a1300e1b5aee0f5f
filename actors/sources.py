"""Capture's sources: an audio file or a microphone, cut into 20 ms frames of 16 kHz mono.

Both give `read()` (frames ready now) and `describe()`; the microphone stamps each frame with
its wall time (`read_timed`) and is reopened, after its device is lost, by the capture actor
(actors.devices). The actor (actors.capture) paces them and publishes what they read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import time

import numpy as np
import soxr

from voxweft.actors.devices import DeviceStream, open_device, open_sounddevice, resolve_device
from voxweft.actors.sampleclock import SampleClock
from voxweft.actors.settings.base import StartupError
from voxweft.protocol.messages import BUS_RATE

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
    block's duration. Samples are counted and placed on the wall clock by the line fitted to
    those stamps (actors.sampleclock): one block's stamp jitters by up to 6 ms and the
    device's clock drifts, and the echo canceller needs each frame within a millisecond.
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
        # milliseconds, and the blocks' stamps are one per frame.
        self.block = max(1, round(self.rate * frame_samples / BUS_RATE))
        blocks = max(1, round(queue_ms * self.rate / 1000 / self.block))
        self.queue: queue.Queue[tuple[int, int, np.ndarray]] = queue.Queue(maxsize=blocks)
        self.counters = counters
        self.ended = False
        self.in_samples = 0        # device-rate samples handed to the assembler
        self.out_samples = 0       # 16 kHz samples returned as frames
        self.clock = SampleClock(self.rate)   # in_samples position -> wall ns (30 s of blocks)
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
            self.clock.stamp(self.in_samples, first_ns)
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
            # The frame's first sample, in device samples, on the stamps' line; soxr's
            # stream output is aligned with its input (its delay is compensated).
            first_ns = self.clock.at(self.out_samples * self.rate / BUS_RATE)
            out.append((pcm, time.time_ns() if first_ns is None else first_ns))
            self.out_samples += len(pcm)
        return out

    def close(self) -> None:
        """Stop the stream."""
        self._close_stream()
