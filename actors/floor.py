"""The floor: whose is the speech the speaker gate held back (the segmenter's part of the gate).

:class:`Gate` is what the segmenter asks of a speaker gate (:class:`actors.gate.LevelGate`).
:class:`Floor`, a mixin of :class:`actors.segmenting.UtteranceSegmenter`, puts each VAD
window through the gate before the segmenter's state machine sees it: speech the gate does
not pass is silence to the state machine and is held back (:class:`_Held`), audio and all,
until what comes next decides whose it is: the holder heard again (it was under them:
rejected, or their own soft first word), nobody taking the floor back (it took the
floor: segmented from its first window), or quiet after a short word right after the holder
(their soft last word: segmented, the level still theirs). The rules are in
``UtteranceSegmenter``'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voxweft.actors.utterance import Event, SpeechRejected, _SampleBuffer
from voxweft.actors.vad import WINDOW_SAMPLES
from voxweft.protocol.messages import BUS_RATE


class Gate(Protocol):
    """What the segmenter asks of a speaker gate; :class:`actors.gate.LevelGate` is the one."""

    def reset_stream(self) -> None:
        """A new stream begins (what the gate knows of the speaker stays)."""

    def hear(self, window: np.ndarray, holding: bool = False) -> float:
        """Take the next window's samples (`holding`: inside the holder's utterance)."""

    @property
    def below_speaker_db(self) -> float:
        """How far the last window is under the speaker's level."""

    def passes(self, holding: bool = False) -> bool:
        """The last window may be the speaker's (`holding`: while they speak on)."""

    def learn(self) -> None:
        """The last window was the speaker's speech."""

    @property
    def quiet_room(self) -> bool:
        """Nobody is heard under the holder's words (a soft start is theirs)."""

    window_db: float      # the last window's own level (dBFS)

    def adopt(self, levels: list[float]) -> None:
        """A quieter voice took the floor: these levels of its speech are the speaker's."""

    floor_free_ms: int    # nobody spoke this long before and after held-back speech: theirs
    floor_take_ms: int    # held-back speech this long without the holder takes the floor
    soft_onset_ms: int    # a held-back stretch this short before the holder's speech is theirs
    onset_windows: int    # the level still holds the pause this many windows into speech


@dataclass
class _Held:
    """Speech the gate held back: whose it is is decided by what comes next (the floor)."""

    start: int                 # first held-back speech window
    end: int                   # end of the last one
    below_db: float            # how far under the speaker's level, at its loudest
    quiet_before: int          # samples without speech heard just before it
    windows: list[tuple[int, float]]   # every window since `start`: (start, VAD prob)
    speech: list[tuple[int, float, float]]   # each held-back speech window: (end, the gate's
    #                                          level, the window's own level), in dB


class Floor:
    """The segmenter's judging of each window against the gate, and of held-back speech.

    A mixin: :class:`actors.segmenting.UtteranceSegmenter` holds the state below (set in its
    ``_reset_stream``) and provides ``_step``, its state machine, which this feeds with the
    held-back windows when they take the floor.
    """

    # The segmenter's settings (samples) and stream state that the floor reads and writes.
    _gate: Gate | None
    _threshold: float
    _neg_threshold: float
    _hangover: int
    _min_speech: int
    _buffer: _SampleBuffer
    _stream_start: int
    _in_speech: bool
    _start: int
    _held: _Held | None
    _soft_onset: int | None
    _voice_end: int | None
    _onset: int | None

    _step: Callable[[int, float, list[Event]], None]   # the segmenter's state machine

    def _judge(self, window_start: int, window_end: int, prob: float,
               events: list[Event]) -> float | None:
        """The window's speech probability once the gate has heard it (0: held back).

        None: the window was segmented already (held-back speech took the floor with it).
        """
        gate = self._gate
        speech = prob >= self._threshold
        quiet = window_start - (self._stream_start if self._voice_end is None
                                else self._voice_end)
        level = gate.hear(self._buffer.copy(window_start, window_end), self._in_speech)
        # The window's own level: a voice as loud as the holder's, whatever the envelope says
        # (it still holds the pause or the quieter voice before: the holder coming back).
        own = gate.window_db
        loud = gate.speaker_db is not None and own >= gate.speaker_db - gate.below_db
        # As far over the holder as a talker is under them: someone else, not the holder back.
        louder = gate.speaker_db is not None and own >= gate.speaker_db + gate.below_db
        held = self._held
        if speech:
            if quiet >= self._hangover:
                self._onset = window_start
            self._voice_end = window_end
        if held is not None:
            held.windows.append((window_start, prob))
        # In an open utterance (speech, or a pause shorter than the hangover) the speaker's
        # quieter words pass: a clause resumed softly after a comma stays in its utterance.
        if prob >= self._neg_threshold and not gate.passes(self._in_speech):
            if speech:
                if held is None:
                    self._held = _Held(window_start, window_end, gate.below_speaker_db,
                                       quiet, [(window_start, prob)],
                                       [(window_end, level, own)])
                else:
                    held.end = window_end
                    held.below_db = min(held.below_db, gate.below_speaker_db)
                    held.speech.append((window_end, level, own))
            prob = 0.0
        elif speech:
            gate.learn()
            if held is not None:   # the holder is heard again: the held speech was under them
                self._held = None
                self._unhold_holder(held, window_start)
                if not self._in_speech and gate.quiet_room and \
                        window_start - held.end < self._hangover and \
                        held.end - held.start <= gate.soft_onset_ms * BUS_RATE // 1000:
                    self._soft_onset = held.start   # their own soft first word
                elif louder and not self._in_speech and \
                        self._soft_end(held, window_start, quiet_after=False):
                    # The holder's soft last word, and a louder voice straight after it (a
                    # new speaker without a pause): both are segmented, from the word on.
                    self._segment(held, events)
                    return None
                elif not self._in_speech or held.start < self._start:
                    self._reject(held, events)      # (inside their open utterance: kept)
        held = self._held
        # Not on the holder's first windows back (their envelope is low for a few windows).
        settled = not loud and (self._onset is None or
                                window_start - self._onset >= gate.onset_windows * WINDOW_SAMPLES)
        free = gate.floor_free_ms * BUS_RATE // 1000
        if held is not None and settled and not self._in_speech and (
                len(held.speech) * WINDOW_SAMPLES >= gate.floor_take_ms * BUS_RATE // 1000 or
                # the floor was free when it began, and is again after it: it was theirs
                held.quiet_before >= free and window_end - held.end >= free and
                len(held.speech) * WINDOW_SAMPLES >= self._min_speech):
            # Nobody took it back: the held-back voice has the floor, from its first window.
            self._held = None
            gate.adopt([level for _, level, _ in held.speech])
            self._segment(held, events)
            return None
        if held is not None and settled and not self._in_speech and \
                self._soft_end(held, window_end):
            # The holder's own soft last word: segmented, and the level stays the holder's.
            self._held = None
            self._segment(held, events)
            return None
        return prob

    def _segment(self, held: _Held, events: list[Event]) -> None:
        """Held-back speech is someone's after all: its windows go through the state machine."""
        for start, prob in held.windows:
            self._step(start, prob, events)

    def _soft_end(self, held: _Held, now: int, quiet_after: bool = True) -> bool:
        """Held-back speech that is the holder's soft last word, by its timing in a quiet room.

        A word at most ``soft_onset_ms`` long, begun within ``soft_onset_ms`` of the holder's
        last speech, then ``soft_onset_ms`` of quiet (or, `quiet_after` False, a voice louder
        than the holder at once): the mirror of a soft first word. A voice under the holder's
        words makes the room loud (``quiet_room``), and one between their sentences either
        goes on longer or has the holder back before the quiet is out.
        """
        gate, soft = self._gate, self._gate.soft_onset_ms * BUS_RATE // 1000
        return (gate.quiet_room and held.quiet_before <= soft and
                self._min_speech <= held.end - held.start <= soft and
                (not quiet_after or now - held.end >= soft))

    def _unhold_holder(self, held: _Held, now: int) -> None:
        """The holder is back at `now`: their first windows, held for a low envelope, are theirs.

        Those are the last held windows (within the gate's ``onset_windows``) after a gap, or
        from the first of them as loud as the holder on its own.
        """
        limit = self._gate.speaker_db - self._gate.below_db
        recent = now - self._gate.onset_windows * WINDOW_SAMPLES
        speech = held.speech
        run = len(speech) - 1   # the last run of held windows without a gap
        while run > 0 and speech[run][0] - speech[run - 1][0] == WINDOW_SAMPLES:
            run -= 1
        if run > 0 and speech[run][0] - WINDOW_SAMPLES >= recent:
            del speech[run:]    # they started again just now, after a gap: the holder
        loud = [i for i, (end, _, own) in enumerate(speech) if end > recent and own >= limit]
        if loud and loud[0] > 0:
            del speech[loud[0]:]   # from their first loud window on (a consonant may dip)
        held.end = speech[-1][0]

    def _reject(self, held: _Held, events: list[Event]) -> None:
        """Report held-back speech as not the speaker's (when long enough to be speech)."""
        if held.end - held.start >= self._min_speech:
            events.append(SpeechRejected(held.start, held.end, round(held.below_db, 1)))
