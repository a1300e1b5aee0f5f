"""The segmenter's output: its events, the utterances they carry, and the samples it cuts.

:class:`actors.segmenting.UtteranceSegmenter` reports speech started (:class:`SpeechStarted`),
an open utterance's draft at a pause (:class:`UtterancePaused`) or as it grows
(:class:`UtteranceGrowing`), an utterance closed (:class:`UtteranceEnded`, with its
:class:`Utterance`), speech too short to keep (:class:`SpeechDiscarded`) and speech that was
not the speaker's (:class:`SpeechRejected`). :class:`_SampleBuffer` holds the samples of the
stream an utterance may still take its audio from. Data only: no sockets, no threads.

All positions are absolute sample indices at 16 kHz counted from the start of the stream
(media time = sample / 16000).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voxweft.protocol.messages import BUS_RATE


@dataclass(frozen=True, eq=False)  # eq=False: comparing ndarray fields has no single truth value
class Utterance:
    """One closed stretch of speech, with its audio."""

    index: int  # 0,1,2... per segmenter instance
    start_sample: int  # absolute sample index (16 kHz) in the stream of the first sample in pcm
    end_sample: int  # exclusive
    speech_start_sample: int  # onset detected (without pre-roll)
    speech_end_sample: int  # last speech window end (without post-roll); the cut if forced
    pcm: np.ndarray  # float32 copy of stream[start_sample:end_sample], bit-identical, read-only
    forced: bool  # True when cut by max_segment_s
    #: The same speech goes on in the next utterance, from this one's last sample (a cut at
    #: agreed words, a forced split inside speech): more of its sentence is coming.
    goes_on: bool = False

    @property
    def duration_s(self) -> float:
        """Length of ``pcm`` in seconds."""
        return (self.end_sample - self.start_sample) / BUS_RATE


@dataclass(frozen=True)
class SpeechStarted:
    """Onset of utterance ``index`` at ``sample`` (a speech window start, without pre-roll)."""

    index: int
    sample: int


@dataclass(frozen=True)
class UtteranceEnded:
    """Utterance closed (hangover elapsed, forced split, or flush)."""

    utterance: Utterance


@dataclass(frozen=True)
class UtterancePaused:
    """A pause of ``speculate_ms`` began in the open utterance: its draft, as it would close.

    ``utterance`` is what ``UtteranceEnded`` will carry if no speech comes before the
    hangover ends (same index, start and speech end; the same samples once the pause is at
    least ``post_roll_ms`` long, else less of the trailing silence).
    """

    utterance: Utterance


@dataclass(frozen=True)
class UtteranceGrowing:
    """The open utterance so far, while speech goes on (asr decides where to ``cut`` it).

    Sent when speech went on for ``recheck_ms`` after a draft at a pause (at most
    ``RECHECKS`` times per pause), so that asr can check, with more audio, the words up to
    that pause; and every ``agree_every_ms`` of the open utterance, so that asr can commit
    the words two successive drafts agree on (LocalAgreement).
    """

    utterance: Utterance


@dataclass(frozen=True)
class SpeechDiscarded:
    """The speech announced by ``SpeechStarted(index)`` was too short and is dropped."""

    index: int


@dataclass(frozen=True)
class SpeechRejected:
    """Speech in ``[start, end)`` that the gate said was not the speaker's (not interpreted).

    ``below_db``: how far under the speaker's level it was at its loudest.
    """

    start: int
    end: int
    below_db: float


Event = (SpeechStarted | UtterancePaused | UtteranceGrowing | UtteranceEnded | SpeechDiscarded
         | SpeechRejected)


class _SampleBuffer:
    """Contiguous float32 samples ``[start, end)`` of the stream, growable, trimmed at the front.

    Appending 20 ms frames to an open 15 s utterance must not copy the whole utterance each
    time, so storage grows by doubling and trimming only moves a head offset; data is
    compacted to the front when the tail runs out of room.
    """

    def __init__(self, capacity: int) -> None:
        self._data = np.empty(max(capacity, 1), dtype=np.float32)
        self._head = 0  # offset in _data of sample `start`
        self._len = 0
        self.start = 0

    @property
    def end(self) -> int:
        return self.start + self._len

    def __len__(self) -> int:
        return self._len

    def append(self, samples: np.ndarray) -> None:
        n = len(samples)
        if self._head + self._len + n > len(self._data):
            needed = self._len + n
            if needed <= len(self._data):
                self._data[: self._len] = self._data[self._head : self._head + self._len]
            else:
                grown = np.empty(max(2 * len(self._data), needed), dtype=np.float32)
                grown[: self._len] = self._data[self._head : self._head + self._len]
                self._data = grown
            self._head = 0
        self._data[self._head + self._len : self._head + self._len + n] = samples
        self._len += n

    def copy(self, begin: int, end: int) -> np.ndarray:
        """Copy of absolute range ``[begin, end)``, which must be held."""
        assert self.start <= begin <= end <= self.end, (begin, end, self.start, self.end)
        offset = self._head + begin - self.start
        return self._data[offset : offset + end - begin].copy()

    def drop_before(self, sample: int) -> None:
        """Forget everything before absolute index ``sample`` (no-op if already gone)."""
        cut = min(max(sample, self.start), self.end) - self.start
        self._head += cut
        self._len -= cut
        self.start += cut

