"""capture: a microphone or an audio file, published as 20 ms frames of 16 kHz mono float32."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator

import numpy as np

from voxweft.actors.devices import Recovery, reopen
from voxweft.actors.echo import EchoPath
from voxweft.actors.engines.echo import canceller
from voxweft.actors.runtime import Actor
from voxweft.actors.settings.actors import ACTOR_NAMES
from voxweft.actors.sources import FileSource, MicrophoneSource
from voxweft.protocol.messages import (
    BUS_RATE,
    AudioFrame,
    EndOfStream,
    Message,
    Played,
    Status,
)

log = logging.getLogger("voxweft.capture")
#: A microphone that sends exact zeros this long hears nothing: no input is that quiet (an
#: idle or muted analog input still has noise). On macOS it is a missing microphone
#: permission (voxweft started over SSH, or from an app not allowed): nothing else says so.
DIGITAL_SILENCE_S = 3.0
DIGITAL_SILENCE = ("the microphone sends only exact zeros (digital silence): on macOS allow "
                   "the microphone for the app that started voxweft (System Settings > Privacy "
                   "& Security > Microphone; over SSH there is none: start `voxweft up` in a "
                   "Terminal of the logged-in user); elsewhere check the input is not muted "
                   "(docs/mac.md)")


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
        self.zeros_s = 0.0      # microphone: seconds of exact zeros in a row
        self.silent = False     # ... for DIGITAL_SILENCE_S at least: it hears nothing
        # microphone + echo_mode "cancel": the player's output taken out (actors.echo)
        self.echo: EchoPath | None = None
        self.cancels = config.source == "microphone" and topology.echo_handling == "cancel"

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """Whose heartbeats to hear.

        A file source: every actor's, to start when all are ready. A microphone: the
        segmenter's, to know when it falls behind, and when capture cancels its echo what the
        player plays and its heartbeat (on the same socket: once one is heard, the player's
        reference reaches us: `echo_state`'s "reference", actors.echo.StartSound).
        """
        if self.config.source != "file":
            return [("segmenter", Status)] + ([("player", Played), ("player", Status)]
                                              if self.cancels else [])
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
            if self.cancels:
                engine = canceller(self.config.echo_engine, self.config.echo_filter_ms)
                engine.load()
                self.echo = EchoPath(engine, self.counters)
                self.log.info("capture: cancelling the loudspeaker's echo (%s, %d ms filter)",
                              engine.name, self.config.echo_filter_ms)
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
        """Degraded while the microphone is lost, or sends digital silence."""
        lost = getattr(self.source, "lost", "")
        if lost:
            return f"input device {self.config.device or 'default'!r} lost: {lost}"
        return DIGITAL_SILENCE if self.silent else ""

    def _listen(self, pcm: np.ndarray) -> None:
        """Notice a microphone that sends exact zeros (say so once), and its sound again."""
        if not pcm.size:
            return
        if np.any(pcm):
            if self.silent:
                self.log.warning("capture: the microphone sends sound again")
            self.zeros_s, self.silent = 0.0, False
            return
        self.zeros_s += pcm.size / BUS_RATE
        if self.zeros_s >= DIGITAL_SILENCE_S and not self.silent:
            self.silent = True
            self.counters["digital_silence"] += 1
            self.log.error("capture: %s", DIGITAL_SILENCE)

    def echo_state(self) -> dict[str, float]:
        """How cancelling goes (actors.echo), while capture cancels."""
        if self.echo is None:
            return {}
        return {**self.echo.state(), "reference": float("player" in self.statuses)}

    def handle(self, msg: Message) -> Iterator[Message]:
        """Remember the peers' status (the file source's start condition); take the reference."""
        if isinstance(msg, Played):
            if self.echo is not None:
                self.echo.played(msg.pos, msg.pcm, (msg.at_pos, msg.at_ns), player=msg.epoch)
            return iter(())
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
                self._listen(pcm)
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
            if mic_ns is not None and self.echo is not None:
                # Without the loudspeaker: what the canceller lets go on (held while it
                # learns the room, then late, in frames of this size, each at its own time).
                out, out_ns = self.echo.cancel(pcm, mic_ns)
                step = max(len(pcm), 1)
                for k in range(0, len(out), step):
                    yield self._frame(out[k:k + step], out_ns + k * 10**9 // BUS_RATE)
            elif mic_ns is not None:
                yield self._frame(pcm, mic_ns)
            elif self.config.fast:
                yield self._frame(pcm, time.time_ns())
            else:
                # Real-time pacing: the sample was "spoken" at its scheduled time.
                yield self._frame(pcm, self.start_ns + self.sent_samples * 10**9 // BUS_RATE)

    def _frame(self, pcm: np.ndarray, capture_ns: int) -> AudioFrame:
        """The next frame of the stream, its first sample captured at `capture_ns`."""
        media_s = self.sent_samples / BUS_RATE
        self.sent += 1
        self.sent_samples += len(pcm)
        return AudioFrame(sample_rate=BUS_RATE, pcm=pcm, media_s=media_s,
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
