"""segmenter: voice activity (Silero VAD) turns the frame stream into utterances."""

from __future__ import annotations

import collections
from collections.abc import Iterator

import numpy as np

from voxweft.actors.gate import LevelGate
from voxweft.actors.runtime import Actor
from voxweft.actors.segmenting import UtteranceSegmenter
from voxweft.actors.utterance import (
    SpeechDiscarded,
    SpeechRejected,
    SpeechStarted,
    UtteranceEnded,
    UtteranceGrowing,
    UtterancePaused,
)
from voxweft.actors.vad import SileroVad
from voxweft.protocol.messages import (
    BUS_RATE,
    AudioFrame,
    Cut,
    EndOfStream,
    Message,
    PlaybackEvent,
    Segment,
    Status,
    VadEvent,
    Voice,
    now_ns,
    trace_ns,
    utt_id,
)

STUCK_PLAYBACK_NS = 120 * 10**9   # a "started" with no "finished" (player died) stops gating


class SegmenterActor(Actor):
    """AudioFrames in; VadEvents and Voices out on PUB, Segments on PUSH to the ASR workers."""

    name = "segmenter"
    downstream = "asr"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.vad_config = config.vad_config()
        self.vad: SileroVad | None = None
        # The speaker, not the room: one gate for the process, so the speaker's level carries
        # from stream to stream (the same microphone, the same person).
        self.gate = (LevelGate(config.speaker_gate_db, hold_db=config.speaker_hold_db,
                               floor_free_ms=config.floor_free_ms,
                               floor_take_ms=config.floor_take_ms)
                     if config.speaker_gate_db else None)
        self.segmenter: UtteranceSegmenter | None = None
        self.next_sample = 0
        self.utterances = 0      # committed utterances in this process
        self.feeder = 0          # epoch of the capture process whose frames we take
        self.ids: dict[int, str] = {}   # segmenter index -> utterance id (never reused)
        self.next_id = 0
        # The echo gate only where an echo path exists: a microphone that can hear a speaker.
        self.echo_gate = topology.echo_handling == "gate"
        # Echo gate: utterance -> [wall ns its audio started to be heard, ns it ended or None].
        self.playback: dict[str, list] = {}
        self.player_epoch: int | None = None
        # (first sample, capture wall ns) of recent frames, to map sample -> wall time.
        self.frame_times: collections.deque[tuple[int, int]] = collections.deque(maxlen=4000)

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """Capture's frames, end of stream and heartbeat; the player's playback events.

        The heartbeat proves our subscription is live (the file source waits for it); the
        playback events drive the echo gate.
        """
        subs = [("capture", AudioFrame), ("capture", EndOfStream), ("capture", Status)]
        if self.config.commit_prefixes and (self.vad_config.speculate_ms or
                                            self.vad_config.agree_every_ms):
            subs.append(("asr", Cut))
        if self.echo_gate:
            subs.append(("player", PlaybackEvent))
        return subs

    def engine_name(self) -> str:
        """The VAD in use."""
        return "silero-v6"

    def load(self) -> None:
        """Build the ONNX VAD once."""
        self.vad = SileroVad(threads=self.config.threads)
        self._reset()

    def warmup(self) -> None:
        """Run the VAD on silence once, then start from a clean state."""
        self.segmenter.push(np.zeros(BUS_RATE // 2, np.float32))
        self._reset()

    def _reset(self, stream: str = "", sample: int = 0) -> None:
        """A fresh VAD for `stream` from absolute `sample` on."""
        self.vad.reset()
        self.segmenter = UtteranceSegmenter(self.vad_config, self.vad, self.gate)
        self.segmenter.start_at(sample)
        self.stream, self.next_sample = stream, sample
        self.media_ms = sample * 1000 // BUS_RATE
        self.frame_times.clear()
        self.ids.clear()

    def _wall_ns(self, sample: int) -> int:
        """Wall time a sample was captured.

        Its frame's time plus the offset in the frame, never later than the next frame's
        capture (in --fast mode frames come faster than real time).
        """
        later = now_ns()
        for first, wall in reversed(self.frame_times):
            if first <= sample:
                return min(wall + int((sample - first) * 1e9 / BUS_RATE), later)
            later = wall
        return self.frame_times[0][1] if self.frame_times else now_ns()

    def _utt_id(self, index: int, close: bool = False) -> str:
        # Ids are unique per segmenter process: the VAD reuses an index after a discard and
        # restarts at 0 after a flush, so they are allocated here, in commit order.
        if index not in self.ids:
            self.ids[index] = utt_id(self.epoch, self.next_id)
            self.next_id += 1
        return self.ids.pop(index) if close else self.ids[index]

    def _on_playback(self, msg: PlaybackEvent) -> None:
        if msg.epoch != self.player_epoch:   # the player restarted: its old events are void
            self.playback.clear()
            self.player_epoch = msg.epoch
        if msg.event == "started":
            self.playback[msg.utt] = [trace_ns(msg.trace, "play.start") or msg.sent_ns, None]
        elif msg.utt in self.playback:
            self.playback[msg.utt][1] = trace_ns(msg.trace, "play.end") or msg.sent_ns
        # Forget intervals the audio stream has left behind (by capture time, not by this
        # process's clock: the segmenter may lag behind capture).
        now = self.frame_times[-1][1] if self.frame_times else now_ns()
        tail = self.config.echo_tail_ms * 10**6
        for utt, (start, end) in list(self.playback.items()):
            if (end is not None and end + tail < now - 10**9) or \
                    (end is None and now - start > STUCK_PLAYBACK_NS):
                del self.playback[utt]

    def _echo(self, capture_ns: int) -> bool:
        """True when the microphone may be hearing our own loudspeaker at `capture_ns`."""
        tail = self.config.echo_tail_ms * 10**6
        return any(start <= capture_ns and (end is None or capture_ns < end + tail)
                   for start, end in self.playback.values())

    def _on_cut(self, msg: Cut) -> Iterator[Message]:
        """The open utterance's words are agreed (by asr) up to an earlier pause: commit them."""
        index = next((i for i, utt in self.ids.items() if utt == msg.utt), None)
        events = [] if index is None or msg.stream != self.stream else self.segmenter.cut(
            round(msg.media_end_s * BUS_RATE), round(msg.speech_end_s * BUS_RATE))
        if not events:
            self.counters["cuts_late"] += 1   # it has ended (or been cut) meanwhile
            return
        self.counters["cuts"] += 1
        self.log.info("segmenter: %s committed up to the pause at %.2f s (%r); the rest goes "
                      "on", msg.utt, msg.media_end_s, msg.text)
        yield from self._events(events)

    def handle(self, msg: Message) -> Iterator[Message]:
        """Feed frames to the VAD; turn its events into messages."""
        if isinstance(msg, PlaybackEvent):
            if self.echo_gate:
                self._on_playback(msg)
            return
        if isinstance(msg, Cut):
            yield from self._on_cut(msg)
            return
        if isinstance(msg, (AudioFrame, EndOfStream)) and msg.for_epoch not in (0, self.epoch):
            self.counters["frames_for_predecessor"] += 1   # the source rewinds for us
            return
        if isinstance(msg, EndOfStream):
            yield from self._events(self.segmenter.flush())
            # Keep the stream and position: a capture restarted now resumes at the end.
            self._reset(self.stream, self.next_sample)
            yield EndOfStream(media_s=msg.media_s, utterances=self.utterances,
                              stream=self.stream)
            self.log.info("segmenter: end of stream, %d utterance(s)", self.utterances)
            return
        if not isinstance(msg, AudioFrame):
            return
        first = round(msg.media_s * BUS_RATE)
        if msg.stream != self.stream:
            if self.stream:
                self.log.info("segmenter: a new audio stream; closing the open utterance")
                yield from self._events(self.segmenter.flush())
            # A stream may start anywhere: a file resumed after a restart of this actor
            # starts where the last utterance handed to asr ended.
            self._reset(msg.stream, first)
        elif first < self.next_sample and msg.epoch == self.feeder:
            # The same source went back: it sends again what a crash may have lost. The
            # open utterance comes again with it.
            self.log.info("segmenter: source rewound from %.2f to %.2f s",
                          self.next_sample / BUS_RATE, first / BUS_RATE)
            self.counters["rewinds"] += 1
            self._reset(msg.stream, first)
        self.feeder = msg.epoch
        pcm = msg.pcm
        if msg.sample_rate != BUS_RATE or pcm.ndim != 1:
            self.counters["bad_format"] += 1
            self.log.warning("segmenter: dropped a frame of %d Hz x %d ch; capture must send "
                             "16 kHz mono", msg.sample_rate, 1 if pcm.ndim == 1 else pcm.shape[1])
            return
        if pcm.dtype != np.float32:
            pcm = pcm.astype(np.float32) / 32768.0
        if first < self.next_sample:
            # A restarted capture resumes from our last heartbeat: skip what we have.
            pcm = pcm[self.next_sample - first:]
            self.counters["overlap_samples"] += min(len(msg.pcm), self.next_sample - first)
            if not len(pcm):
                return
            first = self.next_sample
        if self.playback and self._echo(msg.capture_ns):
            # The VAD hears silence instead: an utterance open when playback began closes
            # after the hangover with what was said before; the echo never opens one.
            self.counters["echo_gated_frames"] += 1
            pcm = np.zeros_like(pcm)
        if first > self.next_sample:
            # Frames were lost upstream: keep media time true by filling with silence.
            missing = first - self.next_sample
            self.counters["filled_samples"] += missing
            yield from self._events(self.segmenter.push(np.zeros(missing, np.float32)))
            self.next_sample = first
        self.frame_times.append((self.next_sample, msg.capture_ns))
        self.next_sample += len(pcm)
        self.media_ms = self.next_sample * 1000 // BUS_RATE
        yield from self._events(self.segmenter.push(pcm))

    def _events(self, events) -> Iterator[Message]:
        for event in events:
            if isinstance(event, SpeechStarted):
                yield VadEvent(utt=self._utt_id(event.index), event="start",
                               media_s=event.sample / BUS_RATE, wall_ns=self._wall_ns(event.sample))
            elif isinstance(event, SpeechDiscarded):
                yield VadEvent(utt=self._utt_id(event.index, close=True), event="discard",
                               wall_ns=now_ns())
            elif isinstance(event, SpeechRejected):
                seconds = (event.end - event.start) / BUS_RATE
                self.counters["rejected"] += 1
                self.counters["rejected_ms"] += round(seconds * 1000)
                reason = f"not the speaker: {event.below_db:.0f} dB under their level"
                self.log.info("segmenter: %.1f s of speech at %.2f s ignored (%s)", seconds,
                              event.start / BUS_RATE, reason)
                yield VadEvent(event="rejected", media_s=event.start / BUS_RATE,
                               end_s=event.end / BUS_RATE, wall_ns=self._wall_ns(event.end),
                               reason=reason)
            elif isinstance(event, UtterancePaused):
                self.counters["drafts"] += 1
                utt = self._utt_id(event.utterance.index)
                yield self._segment(event.utterance, utt, final=False)
                yield self._voice(event.utterance, utt)   # a draft may be spoken in it
            elif isinstance(event, UtteranceGrowing):
                self.counters["drafts_growing"] += 1
                yield self._segment(event.utterance, self._utt_id(event.utterance.index),
                                    final=False, growing=True)
            elif isinstance(event, UtteranceEnded):
                u = event.utterance
                utt = self._utt_id(u.index, close=True)
                self.utterances += 1
                yield VadEvent(utt=utt, event="end", media_s=u.speech_end_sample / BUS_RATE,
                               wall_ns=self._wall_ns(u.speech_end_sample))
                yield self._segment(u, utt, final=True)
                yield self._voice(u, utt)

    def _voice(self, u, utt: str) -> Voice:
        """Utterance `u`'s speech alone (no pre-roll, no hangover), for the speaker's voice.

        Only a subscriber gets it (see Voice).
        """
        return Voice(utt=utt, stream=self.stream, sample_rate=BUS_RATE,
                     pcm=u.pcm[u.speech_start_sample - u.start_sample:
                               u.speech_end_sample - u.start_sample])

    def _segment(self, u, utt: str, final: bool, growing: bool = False) -> Segment:
        """Utterance `u` for asr: committed (`final`), or a draft (at a pause, or grown)."""
        trace = (
            ("capture", self._wall_ns(u.start_sample), u.start_sample / BUS_RATE),
            ("speech_start", self._wall_ns(u.speech_start_sample),
             u.speech_start_sample / BUS_RATE),
            ("speech_end", self._wall_ns(u.speech_end_sample), u.speech_end_sample / BUS_RATE),
            ("segment", now_ns(), u.end_sample / BUS_RATE),
        )
        return Segment(utt=utt, stream=self.stream, src_lang=self.config.src_lang,
                       sample_rate=BUS_RATE, pcm=u.pcm,
                       media_start_s=u.start_sample / BUS_RATE, media_end_s=u.end_sample / BUS_RATE,
                       forced=u.forced, goes_on=u.goes_on, final=final, growing=growing,
                       trace=trace)
