"""Voice activity detection and utterance segmentation for a 16 kHz mono float32 stream.

Two layers, both pure logic (no sockets, no threads):

* :class:`SileroVad` runs the Silero VAD v6 ONNX model that ships inside faster-whisper, in
  streaming form: it yields one speech probability per complete 512-sample window and carries
  the LSTM state and the 64-sample context across calls, so feeding audio in arbitrary pieces
  gives exactly the probabilities faster-whisper's offline ``SileroVADModel`` computes.
* :class:`UtteranceSegmenter` turns those probabilities into utterances: a hysteresis state
  machine with onset pre-roll, hangover, post-roll, a minimum speech duration and a forced
  split at ``max_segment_s``.

All positions are absolute sample indices at 16 kHz counted from the start of the stream
(media time = sample / 16000).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime

from voxweft.actors.settings.actors import SegmenterConfig
from voxweft.protocol.messages import BUS_RATE

WINDOW_SAMPLES = 512
"""Samples per VAD window (32 ms); Silero v6 at 16 kHz is trained on exactly this size."""

CONTEXT_SAMPLES = 64
"""Tail of the previous window prepended to each window, as faster-whisper does."""

SPLIT_LOOKBACK_S = 3.0
"""How far back (seconds, capped at half of ``max_segment_s``) a forced split looks for a pause."""

_STATE_SHAPE = (1, 1, 128)
# Bounds the ONNX input tensor when one push carries a lot of audio; the LSTM state is carried
# between chunks, so chunking does not change the result.
_MAX_WINDOWS_PER_RUN = 4096


def _as_mono_float32(samples: np.ndarray, *, strict: bool) -> np.ndarray:
    """Validate a mono block; ``strict`` refuses anything but float32 instead of converting."""
    array = np.asarray(samples)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D mono array, got shape {array.shape}")
    if array.dtype != np.float32:
        if strict:
            # A silent conversion would break the bit-identical pcm guarantee, and int16 input
            # would be misread as huge floats; make the caller decide.
            raise TypeError(f"expected float32 samples, got {array.dtype}")
        array = array.astype(np.float32)
    return array


class SileroVad:
    """Streaming Silero VAD v6 (the ONNX model bundled with faster-whisper), 16 kHz only.

    Each model input row is 576 samples: the last 64 samples of the previous window (zeros
    before the first window) followed by 512 new samples; the ``h``/``c`` LSTM state is carried
    from one window to the next. That is exactly what faster-whisper's ``SileroVADModel`` does
    over a whole file, so the streaming probabilities equal the offline ones.
    """

    def __init__(self, threads: int = 1, model_path: str | Path | None = None) -> None:
        """Load the model on the CPU with ``threads`` intra- and inter-op threads.

        ``model_path`` overrides the model bundled with faster-whisper (nothing is downloaded).
        """
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
        options.log_severity_level = 3  # errors only; ORT warnings are noise for a 2 MB model
        if model_path is None:
            model = resources.files("faster_whisper") / "assets" / "silero_vad_v6.onnx"
            model_bytes = model.read_bytes()  # works even if the package is zipped
        else:
            model_bytes = Path(model_path).read_bytes()
        # The model is tiny and runs one window at a time: the CPU provider beats any GPU
        # round trip, and pinning it keeps an onnxruntime-gpu install from grabbing a device.
        self._session = onnxruntime.InferenceSession(
            model_bytes, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.reset()

    def reset(self) -> None:
        """Forget the stream: zero LSTM state and context, drop buffered samples."""
        self._h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    @property
    def pending_samples(self) -> int:
        """Samples received but not yet scored (always fewer than one window)."""
        return len(self._pending)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Score the audio and return one speech probability per newly completed window.

        ``samples`` is 16 kHz mono of any length (float32 preferred; other dtypes are
        converted). Samples that do not complete a window are kept for the next call, so the
        k-th probability ever returned (since :meth:`reset`) always covers stream samples
        ``[512 * k, 512 * (k + 1))``.
        """
        samples = _as_mono_float32(samples, strict=False)
        if len(self._pending):
            samples = np.concatenate([self._pending, samples])
        n_windows = len(samples) // WINDOW_SAMPLES
        consumed = n_windows * WINDOW_SAMPLES
        self._pending = samples[consumed:].copy()
        if n_windows == 0:
            return np.zeros(0, dtype=np.float32)

        windows = samples[:consumed].reshape(n_windows, WINDOW_SAMPLES)
        batch = np.empty((n_windows, CONTEXT_SAMPLES + WINDOW_SAMPLES), dtype=np.float32)
        batch[0, :CONTEXT_SAMPLES] = self._context
        batch[1:, :CONTEXT_SAMPLES] = windows[:-1, -CONTEXT_SAMPLES:]
        batch[:, CONTEXT_SAMPLES:] = windows
        self._context = windows[-1, -CONTEXT_SAMPLES:].copy()

        # The v6 graph treats the batch axis as time for its LSTM (h/c are [1, 1, 128]), so a
        # multi-window run is the same computation as one run per window, only cheaper.
        probs = []
        for first in range(0, n_windows, _MAX_WINDOWS_PER_RUN):
            out, self._h, self._c = self._session.run(
                None,
                {"input": batch[first : first + _MAX_WINDOWS_PER_RUN], "h": self._h, "c": self._c},
            )
            probs.append(np.asarray(out, dtype=np.float32).reshape(-1))
        return np.concatenate(probs)


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


class VadModel(Protocol):
    """What the segmenter needs from a VAD; :class:`SileroVad` is the production one."""

    def reset(self) -> None:
        """Forget all state: the next sample starts a new stream."""

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Speech probabilities of every complete window in the buffered stream."""




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


Event = (SpeechStarted | UtterancePaused | UtteranceGrowing | UtteranceEnded | SpeechDiscarded
         | SpeechRejected)

#: Grown utterances sent after one pause at most (asr's check needs one or two).
RECHECKS = 2


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


class UtteranceSegmenter:
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
    start (its events come late by that much).

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
        events: list[Event] = [UtteranceEnded(self._emit(end, speech_end, forced=False))]
        self._continuation = True   # the same speech going on: no pre-roll, no minimum
        self._paused_at = None
        self._start = self._speech_start = end
        recent = [(start, prob) for start, prob in self._recent if start >= end]
        self._recent.clear()
        self._recent.extend(recent)
        events.append(SpeechStarted(self._next_index, end))
        return events

    # -- state machine -------------------------------------------------------------------

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
                if held.quiet_before >= self._hangover and not self._in_speech and \
                        gate.quiet_room and \
                        window_start - held.end < self._hangover and \
                        held.end - held.start <= gate.soft_onset_ms * BUS_RATE // 1000:
                    self._soft_onset = held.start   # their own soft first word
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
            for start, p in held.windows:
                self._step(start, p, events)
            return None
        return prob

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
        events.append(UtteranceEnded(self._emit(cut, cut, forced=True)))
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

    def _utterance(self, end: int, speech_end: int, forced: bool) -> Utterance:
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
        )

    def _emit(self, end: int, speech_end: int, forced: bool) -> Utterance:
        utterance = self._utterance(end, speech_end, forced)
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
