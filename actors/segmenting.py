"""Utterance segmentation of a 16 kHz mono float32 stream: VAD probabilities to utterances.

:class:`UtteranceSegmenter` turns the probabilities of a VAD (:mod:`actors.vad`) into
utterances (the events of :mod:`actors.utterance`): a hysteresis state machine with onset
pre-roll, hangover, post-roll, a minimum speech duration and a forced split at
``max_segment_s``; with a speaker gate, the floor (:class:`actors.floor.Floor`, which it
inherits) judges each window first. Pure logic (no sockets, no threads).

All positions are absolute sample indices at 16 kHz counted from the start of the stream
(media time = sample / 16000).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from voxweft.actors.floor import Floor, Gate, _Held
from voxweft.actors.settings.actors import SegmenterConfig
from voxweft.actors.utterance import (
    Event,
    SpeechDiscarded,
    SpeechStarted,
    Utterance,
    UtteranceEnded,
    UtteranceGrowing,
    UtterancePaused,
    _SampleBuffer,
)
from voxweft.actors.vad import WINDOW_SAMPLES, SileroVad, VadModel, _as_mono_float32
from voxweft.protocol.messages import BUS_RATE

SPLIT_LOOKBACK_S = 3.0
"""How far back (seconds, capped at half of ``max_segment_s``) a forced split looks for a pause."""

#: Grown utterances sent after one pause at most (asr's check needs one or two).
RECHECKS = 2


class UtteranceSegmenter(Floor):
    """Hysteresis state machine that turns a 16 kHz mono float32 stream into utterances.

    Idle, a window with probability ``>= threshold`` starts an utterance (``SpeechStarted``).
    In speech, the first window ``< neg_threshold`` starts a silence run that only a window
    ``>= threshold`` ends; windows in between keep whatever state they are in. A silence run
    of ``hangover_ms`` closes the utterance with ``post_roll_ms`` after the last speech window
    and ``pre_roll_ms`` before the onset (never reaching back into the previous utterance).
    Speech shorter than ``min_speech_ms`` is reported as ``SpeechDiscarded`` instead. When a
    silence run reaches ``speculate_ms`` (and the speech is long enough to keep), the
    utterance as it would close is reported once per run (``UtterancePaused``): a draft.

    No utterance is longer than ``max_segment_s``: when the next window would exceed it, the
    utterance is cut at the lowest-probability window below ``threshold`` in the last
    ``SPLIT_LOOKBACK_S`` seconds (at the window's centre), or at the current window boundary
    if there is none. The rest continues at once as the next utterance, starting at exactly the
    cut sample, so forced pieces tile the stream without losing or repeating a sample. If the
    limit hits during a silence run, the utterance is simply closed there (``forced=True``).

    Every ``SpeechStarted(i)`` is followed by exactly one ``UtteranceEnded`` with index ``i``
    or one ``SpeechDiscarded(i)``. A discarded candidate does not consume an index, so
    utterance indices run 0, 1, 2... without gaps.

    With a ``gate`` (the speaker, not the room: :mod:`actors.gate`), a window the gate does
    not pass is silence whatever the VAD says: it opens nothing, and it starts (or goes on
    with) a silence run in speech. In an open utterance the gate holds (passes quieter
    speech) until the hangover closes it. Speech the gate does not pass is held back, audio
    and all, until the floor decides whose it is: the holder (the voice whose level the gate
    keeps) heard again means it was under them, and it is reported (``SpeechRejected``, at
    least ``min_speech_ms`` of it), unless it was a short soft start after a pause running
    into their speech, which opens their utterance; the gate's ``floor_take_ms`` of held-back
    speech, or held-back speech with ``floor_free_ms`` without speech before and after it (a
    question from the floor; not a voice that went on as the holder stopped), took
    the floor: the gate adopts its level and it is segmented as if it had passed from the
    start (its events come late by that much). In a quiet room a short word right after the
    holder's speech, then quiet, is their soft last word: segmented the same way, and the
    level stays theirs (``Floor._soft_end``).

    Memory: only the pre-roll ring (idle) or the open utterance, plus less than one VAD window
    and the frame being pushed, is held.
    """

    def __init__(self, config: SegmenterConfig, vad: VadModel | SileroVad,
                 gate: Gate | None = None) -> None:
        """Validate ``config``; ``vad`` is reset and owned for the stream from here on."""
        self.config = config
        self._vad = vad
        self._gate = gate
        ms = BUS_RATE // 1000
        self._threshold = config.threshold
        self._neg_threshold = config.neg_threshold
        self._min_speech = config.min_speech_ms * ms
        self._hangover = config.hangover_ms * ms
        self._speculate = config.speculate_ms * ms
        self._recheck = config.recheck_ms * ms
        self._agree = config.agree_every_ms * ms
        self._pre_roll = config.pre_roll_ms * ms
        self._post_roll = config.post_roll_ms * ms
        self._max_segment = int(config.max_segment_s * BUS_RATE)
        lookback = min(SPLIT_LOOKBACK_S, config.max_segment_s / 2)
        self._lookback_windows = max(1, int(lookback * BUS_RATE) // WINDOW_SAMPLES)
        self._next_index = 0
        self._reset_stream()

    def _reset_stream(self) -> None:
        self._vad.reset()
        if self._gate is not None:
            self._gate.reset_stream()
        self._held: _Held | None = None   # speech the gate held back, whose is undecided
        self._soft_onset: int | None = None   # the next opening starts here (a soft start)
        self._voice_end: int | None = None  # end of the last speech window heard, any voice
        self._onset: int | None = None   # the last speech start after a pause
        self._stream_start = 0
        self._buffer = _SampleBuffer(self._pre_roll + 2 * WINDOW_SAMPLES)
        self._scored_end = 0  # end of the last window the VAD has scored
        self._floor = 0  # end of the last emitted utterance: pre-roll never reaches before it
        self._in_speech = False
        self._start = 0  # open utterance: first sample of pcm
        self._speech_start = 0  # open utterance: onset (or cut, for a continuation)
        self._speech_end = 0  # open utterance: end of the last speech window
        self._silence_since: int | None = None  # start of the current silence run, if any
        self._drafted = False  # the current silence run has had its UtterancePaused
        self._paused_at: int | None = None  # end of the open utterance's last draft, if any
        self._rechecks = 0  # UtteranceGrowing sent since that draft
        self._grown_at = 0  # end of the open utterance's last UtteranceGrowing (or its start)
        self._continuation = False  # open utterance is the rest of a forced split
        # (window start, prob) of the open utterance's recent windows, for forced splits
        self._recent: deque[tuple[int, float]] = deque(maxlen=self._lookback_windows)

    def start_at(self, sample: int) -> None:
        """Begin the stream at absolute ``sample`` rather than 0 (a resumed recording)."""
        assert not len(self._buffer) and not self._in_speech, "start_at() on a fresh stream only"
        self._buffer.start = self._scored_end = self._floor = self._stream_start = sample

    @property
    def retained_samples(self) -> int:
        """Samples currently held (pre-roll ring or open utterance, plus unscored tail)."""
        return len(self._buffer)

    def push(self, frame: np.ndarray) -> list[Event]:
        """Feed the next samples (float32 mono 16 kHz, any length); return events they cause."""
        frame = _as_mono_float32(frame, strict=True)
        self._buffer.append(frame)
        events: list[Event] = []
        for prob in self._vad.process(frame):
            window_start = self._scored_end
            self._scored_end += WINDOW_SAMPLES
            self._on_window(window_start, float(prob), events)
        self._trim()
        return events

    def flush(self) -> list[Event]:
        """End the stream: close an open utterance (if long enough) and reset.

        Samples after the last scored window are treated as post-roll. The next :meth:`push`
        starts a new stream at sample 0; utterance indices keep counting.
        """
        events: list[Event] = []
        if self._held is not None:   # the stream ended before the floor was decided
            self._reject(self._held, events)
        if self._in_speech:
            end = min(self._speech_end + self._post_roll, self._buffer.end)
            self._close(end, forced=False, events=events)
        self._reset_stream()
        return events

    def cut(self, end: int, speech_end: int) -> list[Event]:
        """Close the open utterance at ``end``, an earlier pause, and go on with the rest.

        ``end`` and ``speech_end`` are those of a draft of the open utterance
        (``UtterancePaused``) after which the speaker went on: the utterance closes with the
        very samples of that draft, and the rest continues at once as the next utterance
        from ``end``, as after a forced split (pieces tile the stream). Nothing happens
        (``[]``) when no utterance is open, ``end`` is not inside it, or no speech came after
        ``speech_end`` (the hangover will close it anyway).
        """
        if not self._in_speech or not self._start < speech_end <= end < self._speech_end:
            return []
        events: list[Event] = [UtteranceEnded(self._emit(end, speech_end, forced=False,
                                                         goes_on=True))]
        self._continuation = True   # the same speech going on: no pre-roll, no minimum
        self._paused_at = None
        self._start = self._speech_start = end
        recent = [(start, prob) for start, prob in self._recent if start >= end]
        self._recent.clear()
        self._recent.extend(recent)
        events.append(SpeechStarted(self._next_index, end))
        return events

    # -- state machine -------------------------------------------------------------------

    def _on_window(self, window_start: int, prob: float, events: list[Event]) -> None:
        if self._gate is not None:
            prob = self._judge(window_start, window_start + WINDOW_SAMPLES, prob, events)
            if prob is None:
                return
        self._step(window_start, prob, events)

    def _step(self, window_start: int, prob: float, events: list[Event]) -> None:
        """The state machine, one window on."""
        window_end = window_start + WINDOW_SAMPLES
        if not self._in_speech:
            if prob >= self._threshold:
                self._open(window_start, window_end, events)
            return

        self._recent.append((window_start, prob))
        if self._silence_since is None:
            if prob < self._neg_threshold:
                self._silence_since = window_start
                self._drafted = False
            else:
                self._speech_end = window_end
        elif prob >= self._threshold:
            self._silence_since = None
            self._speech_end = window_end

        silence = window_end - self._silence_since if self._silence_since is not None else -1
        if silence >= self._hangover:
            # Hangover >= post-roll (validated), so the post-roll audio is already buffered.
            self._close(self._speech_end + self._post_roll, forced=False, events=events)
        elif window_end + WINDOW_SAMPLES - self._start > self._max_segment:
            self._force_split(window_end, events)
        elif self._speculate and silence >= self._speculate and not self._drafted:
            self._drafted = True
            if not self._too_short():
                end = min(self._speech_end + self._post_roll, window_end)
                events.append(UtterancePaused(self._utterance(end, self._speech_end, False)))
                self._paused_at, self._rechecks = end, 0
        elif self._recheck and self._paused_at is not None and silence < 0 and \
                self._rechecks < RECHECKS and \
                window_end - self._paused_at >= self._recheck * (self._rechecks + 1):
            self._rechecks += 1
            self._grown_at = window_end
            events.append(UtteranceGrowing(self._utterance(window_end, window_end, False)))
        elif self._agree and silence < 0 and not self._too_short() and \
                window_end - max(self._grown_at, self._start) >= self._agree:
            self._grown_at = window_end
            events.append(UtteranceGrowing(self._utterance(window_end, window_end, False)))

    def _open(self, window_start: int, window_end: int, events: list[Event]) -> None:
        if self._soft_onset is not None:
            window_start, self._soft_onset = min(window_start, self._soft_onset), None
        self._in_speech = True
        self._paused_at = None
        self._continuation = False
        self._speech_start = window_start
        self._speech_end = window_end
        self._silence_since = None
        self._start = max(
            window_start - self._pre_roll,
            self._floor,
            self._buffer.start,
            # A long pre-roll must still leave room for the next window under max_segment_s.
            window_end + WINDOW_SAMPLES - self._max_segment,
        )
        self._recent.clear()
        events.append(SpeechStarted(self._next_index, window_start))

    def _close(self, end: int, *, forced: bool, events: list[Event]) -> None:
        """Emit the open utterance as ``[start, end)`` (or discard it) and go idle."""
        self._in_speech = False
        end = min(end, self._start + self._max_segment)
        if self._too_short():
            events.append(SpeechDiscarded(self._next_index))
            return
        events.append(UtteranceEnded(self._emit(end, min(self._speech_end, end), forced)))

    def _too_short(self) -> bool:
        """The open utterance would be discarded as noise if it closed now."""
        return self._speech_end - self._speech_start < self._min_speech and not self._continuation

    def _force_split(self, scored_end: int, events: list[Event]) -> None:
        if self._silence_since is not None:
            # Already pausing: the pause is the best cut there is, so end here and let the next
            # onset start a fresh utterance with its own pre-roll. The post-roll may not all be
            # scored yet; stop at what is, so the next onset never starts inside this one.
            end = min(self._speech_end + self._post_roll, scored_end)
            self._close(end, forced=True, events=events)
            return
        quiet = [(prob, start) for start, prob in self._recent if prob < self._threshold]
        if quiet:
            # Lowest probability wins; on a tie the later window, to keep the piece long.
            _, window_start = min(quiet, key=lambda item: (item[0], -item[1]))
            cut = window_start + WINDOW_SAMPLES // 2
        else:
            cut = scored_end
        events.append(UtteranceEnded(self._emit(cut, cut, forced=True, goes_on=True)))
        # The rest is the same speech continuing: no pre-roll, no minimum length.
        self._in_speech = True
        self._continuation = True
        self._paused_at = None
        self._start = cut
        self._speech_start = cut
        self._speech_end = scored_end
        recent = [(start, prob) for start, prob in self._recent if start >= cut]
        self._recent.clear()
        self._recent.extend(recent)
        events.append(SpeechStarted(self._next_index, cut))

    def _utterance(self, end: int, speech_end: int, forced: bool,
                   goes_on: bool = False) -> Utterance:
        """The open utterance as ``[start, end)``, without closing it."""
        pcm = self._buffer.copy(self._start, end)
        # Read-only: one Utterance is typically shared by several consumers (ASR, recorder).
        pcm.flags.writeable = False
        return Utterance(
            index=self._next_index,
            start_sample=self._start,
            end_sample=end,
            speech_start_sample=self._speech_start,
            speech_end_sample=speech_end,
            pcm=pcm,
            forced=forced,
            goes_on=goes_on,
        )

    def _emit(self, end: int, speech_end: int, forced: bool,
              goes_on: bool = False) -> Utterance:
        utterance = self._utterance(end, speech_end, forced, goes_on)
        self._next_index += 1
        self._floor = end
        return utterance

    def _trim(self) -> None:
        """Drop samples no future utterance can include."""
        if self._in_speech:
            self._buffer.drop_before(self._start)
        else:
            # The next onset is a window starting at _scored_end or later, or held-back speech.
            keep = self._scored_end if self._held is None else self._held.start
            self._buffer.drop_before(max(keep - self._pre_roll, self._floor))
