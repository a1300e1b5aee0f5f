"""Tests for actors.vad and actors.segmenting with the real Silero v6 model on real speech
(LJ Speech clips).

Streams are built from 16 kHz resampled clips separated by digital silence and fed in 320-sample
(20 ms) frames, as the audio capture actor does. A scripted VAD stands in for the model only
where a test needs probabilities the model will not reliably produce (e.g. no pause at all).
"""

from __future__ import annotations

import itertools
import math
from importlib import resources

import numpy as np
import pytest
import soundfile
import soxr
from faster_whisper.vad import SileroVADModel

from tests.conftest import CORPUS
from voxweft.actors.segmenting import RECHECKS, SPLIT_LOOKBACK_S, UtteranceSegmenter
from voxweft.actors.settings.actors import SegmenterConfig
from voxweft.actors.utterance import (
    SpeechDiscarded,
    SpeechStarted,
    Utterance,
    UtteranceEnded,
    UtteranceGrowing,
    UtterancePaused,
)
from voxweft.actors.vad import WINDOW_SAMPLES, SileroVad
from voxweft.protocol.messages import BUS_RATE

FRAME = 320  # 20 ms at 16 kHz
CLIPS = ["LJ001-0002", "LJ001-0004", "LJ001-0006", "LJ001-0008", "LJ001-0013"]



# -- helpers ---------------------------------------------------------------------------------


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * BUS_RATE), dtype=np.float32)


def loud_range(clip: np.ndarray) -> tuple[int, int]:
    """First and last sample at >= 10 % of the clip's peak: where audible speech is."""
    loud = np.flatnonzero(np.abs(clip) >= 0.1 * np.abs(clip).max())
    return int(loud[0]), int(loud[-1])


def trimmed(clip: np.ndarray) -> np.ndarray:
    """The clip cut to its loud range, so inserted pauses are the only pauses around it."""
    first, last = loud_range(clip)
    return clip[first : last + 1]


def build(*parts: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Concatenate parts; also return each part's start offset in the stream."""
    offsets = np.cumsum([0] + [len(p) for p in parts[:-1]]).tolist()
    return np.concatenate(parts).astype(np.float32), offsets


def feed(segmenter: UtteranceSegmenter, stream: np.ndarray, frame: int = FRAME) -> list:
    """Push the stream in fixed frames, then flush; return all events in order."""
    events = []
    for start in range(0, len(stream), frame):
        events += segmenter.push(stream[start : start + frame])
    return events + segmenter.flush()


def utterances(events: list) -> list[Utterance]:
    return [e.utterance for e in events if isinstance(e, UtteranceEnded)]


def assert_events_paired(events: list) -> None:
    """Every SpeechStarted(i) is closed by exactly one UtteranceEnded(i) or SpeechDiscarded(i).

    Drafts (UtterancePaused) come only while utterance i is open, and carry index i.
    """
    open_index = None
    for event in events:
        if isinstance(event, SpeechStarted):
            assert open_index is None, events
            open_index = event.index
        elif isinstance(event, UtterancePaused | UtteranceGrowing):
            assert open_index is not None and event.utterance.index == open_index, events
        else:
            index = event.index if isinstance(event, SpeechDiscarded) else event.utterance.index
            assert index == open_index, events
            open_index = None
    assert open_index is None, events


def assert_pcm_exact(utterance: Utterance, stream: np.ndarray) -> None:
    """pcm is a bit-identical float32 copy of its stream range."""
    expected = stream[utterance.start_sample : utterance.end_sample]
    assert utterance.pcm.dtype == np.float32
    assert utterance.pcm.tobytes() == expected.tobytes()
    assert utterance.start_sample <= utterance.speech_start_sample
    assert utterance.speech_start_sample < utterance.speech_end_sample <= utterance.end_sample


class ScriptedVad:
    """Stand-in VAD returning a scripted probability per 512-sample window."""

    def __init__(self, prob_of_window) -> None:
        self._prob_of_window = prob_of_window
        self.reset()

    def reset(self) -> None:
        self._received = 0
        self._windows = 0

    def process(self, samples: np.ndarray) -> np.ndarray:
        self._received += len(samples)
        complete = self._received // WINDOW_SAMPLES
        probs = [self._prob_of_window(k) for k in range(self._windows, complete)]
        self._windows = complete
        return np.asarray(probs, dtype=np.float32)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clips() -> dict[str, np.ndarray]:
    out = {}
    for name in CLIPS:
        audio, rate = soundfile.read(CORPUS / f"{name}.wav", dtype="float32")
        out[name] = soxr.resample(audio, rate, BUS_RATE).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    # Shared: every UtteranceSegmenter resets it, and tests run sequentially.
    return SileroVad(threads=1)


@pytest.fixture(scope="module")
def two_clip_stream(clips) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """[1 s silence, clip A, 1 s silence, clip B, 1 s silence] and each clip's loud range."""
    a, b = clips["LJ001-0004"], clips["LJ001-0013"]
    stream, offsets = build(silence(1), a, silence(1), b, silence(1))
    ranges = []
    for clip, offset in ((a, offsets[1]), (b, offsets[3])):
        first, last = loud_range(clip)
        ranges.append((offset + first, offset + last))
    return stream, ranges


# -- SileroVad -------------------------------------------------------------------------------


def test_streaming_probabilities_equal_faster_whisper_batch(vad, two_clip_stream):
    stream, _ = two_clip_stream
    usable = len(stream) // WINDOW_SAMPLES * WINDOW_SAMPLES
    model_path = resources.files("faster_whisper") / "assets" / "silero_vad_v6.onnx"
    # SileroVADModel zeroes the last 64 samples of its (caller's!) input before scoring, so
    # hand it a copy and leave its last window out of the comparison.
    batch = SileroVADModel(str(model_path))(stream[:usable].copy()).reshape(-1)

    vad.reset()
    streamed = np.concatenate([vad.process(stream[i : i + FRAME]) for i in range(0, usable, FRAME)])

    assert streamed.dtype == np.float32
    assert len(streamed) == usable // WINDOW_SAMPLES
    assert vad.pending_samples == 0
    np.testing.assert_allclose(streamed[:-1], batch[:-1], rtol=0, atol=1e-5)
    assert (streamed >= 0.5).sum() > 100  # the comparison covers real speech, not just silence


def test_streaming_is_independent_of_chunking_and_reset_restarts(vad, two_clip_stream):
    stream, _ = two_clip_stream
    vad.reset()
    whole = vad.process(stream)
    assert vad.pending_samples == len(stream) % WINDOW_SAMPLES

    vad.reset()
    rng = np.random.default_rng(1)
    pieces, pos = [], 0
    while pos < len(stream):
        size = int(rng.integers(1, 2000))
        pieces.append(vad.process(stream[pos : pos + size]))
        pos += size
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=0, atol=1e-6)


# -- UtteranceSegmenter ----------------------------------------------------------------------


def test_two_clips_give_two_utterances_with_exact_pcm(vad, two_clip_stream):
    stream, loud_ranges = two_clip_stream
    config = SegmenterConfig()
    events = feed(UtteranceSegmenter(config, vad), stream)
    assert_events_paired(events)
    found = utterances(events)

    assert [u.index for u in found] == [0, 1]
    pre_roll = config.pre_roll_ms * BUS_RATE // 1000
    for utterance, (first_loud, last_loud) in zip(found, loud_ranges, strict=True):
        assert not utterance.forced and not utterance.goes_on
        assert utterance.start_sample < first_loud and utterance.end_sample > last_loud
        assert_pcm_exact(utterance, stream)
        # Pre-roll present: onset minus the full pre-roll, and those first samples are the
        # captured ones (silence here, then the start of the clip).
        assert utterance.start_sample == utterance.speech_start_sample - pre_roll
        np.testing.assert_array_equal(
            utterance.pcm[:pre_roll], stream[utterance.start_sample :][:pre_roll]
        )
        assert utterance.pcm.flags.writeable is False
    assert found[0].end_sample <= found[1].start_sample


@pytest.mark.parametrize("frame", [3, 7, 512, 4999, None])
def test_frame_size_does_not_change_utterances(vad, two_clip_stream, frame):
    stream, _ = two_clip_stream
    reference = utterances(feed(UtteranceSegmenter(SegmenterConfig(), vad), stream))
    frame = frame or len(stream)  # None: the whole stream in one push
    got = utterances(feed(UtteranceSegmenter(SegmenterConfig(), vad), stream, frame))
    assert [(u.start_sample, u.end_sample, u.speech_start_sample) for u in got] == [
        (u.start_sample, u.end_sample, u.speech_start_sample) for u in reference
    ]
    for utterance in got:
        assert_pcm_exact(utterance, stream)


def test_silence_and_low_noise_produce_no_events(vad):
    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 0.001, 5 * BUS_RATE).astype(np.float32)  # ~0.001 rms
    stream, _ = build(silence(5), noise)
    segmenter = UtteranceSegmenter(SegmenterConfig(), vad)
    assert feed(segmenter, stream) == []


def test_idle_memory_stays_at_pre_roll(vad):
    config = SegmenterConfig()
    segmenter = UtteranceSegmenter(config, vad)
    rng = np.random.default_rng(3)
    bound = config.pre_roll_ms * BUS_RATE // 1000 + WINDOW_SAMPLES + FRAME
    for _ in range(30 * BUS_RATE // FRAME):  # 30 s of quiet noise
        assert segmenter.push(rng.normal(0.0, 0.001, FRAME).astype(np.float32)) == []
        assert segmenter.retained_samples <= bound


def test_click_and_noise_bursts_are_dropped(vad):
    rng = np.random.default_rng(2)
    burst = rng.normal(0.0, 0.3, BUS_RATE // 10).astype(np.float32)  # 100 ms, loud
    click = np.zeros(BUS_RATE // 10, dtype=np.float32)
    click[:80], click[80:160] = 0.9, -0.9
    stream, _ = build(silence(1), burst, silence(1), click, silence(1))
    events = feed(UtteranceSegmenter(SegmenterConfig(), vad), stream)
    assert_events_paired(events)
    assert utterances(events) == []


def test_short_speech_burst_is_announced_then_discarded(vad, clips):
    # 100 ms of real speech: enough for Silero to cross the threshold, shorter than
    # min_speech_ms, so a listener that saw SpeechStarted must be told it is gone.
    snippet = clips["LJ001-0004"][int(0.3 * BUS_RATE) : int(0.4 * BUS_RATE)]
    stream, _ = build(silence(1), snippet, silence(1), clips["LJ001-0013"], silence(1))
    events = feed(UtteranceSegmenter(SegmenterConfig(), vad), stream)
    assert_events_paired(events)
    assert events[:2] == [SpeechStarted(0, events[0].sample), SpeechDiscarded(0)]
    # The index is not consumed: the real utterance that follows is still number 0.
    assert [u.index for u in utterances(events)] == [0]


@pytest.mark.parametrize(("pause_ms", "expected"), [(100, 1), (600, 2)])
def test_pause_splits_only_when_longer_than_hangover(vad, clips, pause_ms, expected):
    config = SegmenterConfig(hangover_ms=300)
    a, b = trimmed(clips["LJ001-0008"]), trimmed(clips["LJ001-0013"])
    stream, _ = build(silence(1), a, silence(pause_ms / 1000), b, silence(1))
    events = feed(UtteranceSegmenter(config, vad), stream)
    assert_events_paired(events)
    found = utterances(events)
    assert len(found) == expected
    for utterance in found:
        assert_pcm_exact(utterance, stream)
        assert not utterance.forced


def test_max_segment_splits_at_low_probability_points_without_losing_samples(vad, clips):
    config = SegmenterConfig(max_segment_s=4.0, hangover_ms=1000)  # long hangover: no natural cut
    speech = np.concatenate([trimmed(clips[name]) for name in CLIPS])
    stream, _ = build(silence(1), speech, silence(1))
    max_samples = int(config.max_segment_s * BUS_RATE)

    segmenter = UtteranceSegmenter(config, vad)
    events, peak_retained = [], 0
    for start in range(0, len(stream), FRAME):
        events += segmenter.push(stream[start : start + FRAME])
        peak_retained = max(peak_retained, segmenter.retained_samples)
    events += segmenter.flush()
    assert_events_paired(events)
    pieces = utterances(events)

    assert len(pieces) >= math.ceil(len(speech) / max_samples)
    assert all(p.forced for p in pieces[:-1]) and not pieces[-1].forced
    # Each forced piece says the speech goes on from its end (mt holds words for it).
    assert all(p.goes_on for p in pieces[:-1]) and not pieces[-1].goes_on
    assert [p.index for p in pieces] == list(range(len(pieces)))
    for piece in pieces:
        assert len(piece.pcm) == piece.end_sample - piece.start_sample <= max_samples
        assert_pcm_exact(piece, stream)
    # Forced pieces tile the stream: nothing lost or duplicated at a cut, and the pieces
    # together are exactly the stream range they cover.
    for before, after in itertools.pairwise(pieces):
        assert after.start_sample == before.end_sample == after.speech_start_sample
    joined = np.concatenate([p.pcm for p in pieces])
    assert joined.tobytes() == stream[pieces[0].start_sample : pieces[-1].end_sample].tobytes()
    assert peak_retained <= max_samples + WINDOW_SAMPLES + FRAME

    # Each cut is at the lowest-probability window (< threshold) of the lookback span before
    # the split decision, at its centre, or at the decision point when no such window exists.
    vad.reset()
    probs = vad.process(stream)
    lookback = int(min(SPLIT_LOOKBACK_S, config.max_segment_s / 2) * BUS_RATE)
    lookback_windows = lookback // WINDOW_SAMPLES
    at_pause = 0
    for piece in pieces[:-1]:
        # The split is decided at the first window end after which one more window would
        # exceed max_segment_s.
        decision = piece.start_sample + max_samples - WINDOW_SAMPLES + 1
        decision = -(-decision // WINDOW_SAMPLES) * WINDOW_SAMPLES
        first = max(decision // WINDOW_SAMPLES - lookback_windows, -(-piece.start_sample // 512))
        span = probs[first : decision // WINDOW_SAMPLES]
        quiet = np.flatnonzero(span < config.threshold)
        if len(quiet):
            lowest = quiet[span[quiet] == span[quiet].min()][-1] + first
            assert piece.end_sample == lowest * WINDOW_SAMPLES + WINDOW_SAMPLES // 2
            at_pause += 1
        else:
            assert piece.end_sample == decision
    assert at_pause >= 1  # real read speech has pauses to cut at


def test_max_segment_hard_cut_without_any_pause():
    # Probability 0.9 everywhere after 1 s: no window qualifies as a cut point.
    vad = ScriptedVad(lambda k: 0.9 if k * WINDOW_SAMPLES >= BUS_RATE else 0.0)
    config = SegmenterConfig(max_segment_s=2.0, pre_roll_ms=0)
    max_samples = int(config.max_segment_s * BUS_RATE)
    stream = np.random.default_rng(4).normal(0, 0.1, 9 * BUS_RATE).astype(np.float32)
    events = feed(UtteranceSegmenter(config, vad), stream)
    assert_events_paired(events)
    pieces = utterances(events)
    assert len(pieces) == 5
    assert all(p.forced for p in pieces[:-1]) and not pieces[-1].forced
    for before, after in itertools.pairwise(pieces):
        assert after.start_sample == before.end_sample
    for piece in pieces[:-1]:
        assert piece.end_sample % WINDOW_SAMPLES == 0
        assert max_samples - WINDOW_SAMPLES < len(piece.pcm) <= max_samples
    assert pieces[-1].end_sample == len(stream)  # flush: the speech runs to the end
    for piece in pieces:
        assert_pcm_exact(piece, stream)


def test_pre_roll_never_pushes_a_piece_past_max_segment():
    vad = ScriptedVad(lambda k: 0.9 if k * WINDOW_SAMPLES >= 3 * BUS_RATE else 0.0)
    config = SegmenterConfig(max_segment_s=1.0, pre_roll_ms=2000)
    stream = np.random.default_rng(5).normal(0, 0.1, 6 * BUS_RATE).astype(np.float32)
    pieces = utterances(feed(UtteranceSegmenter(config, vad), stream))
    assert len(pieces) >= 3
    for piece in pieces:
        assert len(piece.pcm) <= BUS_RATE
        assert_pcm_exact(piece, stream)


def test_flush_closes_open_utterance(vad, clips):
    clip = trimmed(clips["LJ001-0006"])
    stream, offsets = build(silence(1), clip)
    segmenter = UtteranceSegmenter(SegmenterConfig(), vad)
    events = []
    for start in range(0, len(stream), FRAME):
        events += segmenter.push(stream[start : start + FRAME])
    # Still talking at the end of the stream (drafts at pauses inside the clip, and grown).
    assert [type(e) for e in events
            if not isinstance(e, UtterancePaused | UtteranceGrowing)] == [SpeechStarted]

    closing = segmenter.flush()
    assert [type(e) for e in closing] == [UtteranceEnded]
    utterance = closing[0].utterance
    assert utterance.index == events[0].index == 0 and not utterance.forced
    assert utterance.start_sample < offsets[1]
    assert utterance.end_sample == len(stream)
    assert_pcm_exact(utterance, stream)

    # The segmenter is reusable: a new stream starts at sample 0, indices keep counting.
    assert segmenter.flush() == []
    again = utterances(feed(segmenter, stream))
    assert [(u.index, u.start_sample) for u in again] == [(1, utterance.start_sample)]


def test_flush_discards_too_short_open_speech():
    vad = ScriptedVad(lambda k: 0.9 if k >= 10 else 0.0)
    segmenter = UtteranceSegmenter(SegmenterConfig(min_speech_ms=250), vad)
    events = segmenter.push(np.zeros(12 * WINDOW_SAMPLES, dtype=np.float32))
    assert events == [SpeechStarted(0, 10 * WINDOW_SAMPLES)]
    assert segmenter.flush() == [SpeechDiscarded(0)]


def test_push_rejects_non_float32_and_multichannel(vad):
    segmenter = UtteranceSegmenter(SegmenterConfig(), vad)
    with pytest.raises(TypeError, match="float32"):
        segmenter.push(np.zeros(FRAME, dtype=np.int16))
    with pytest.raises(ValueError, match="1-D"):
        segmenter.push(np.zeros((FRAME, 2), dtype=np.float32))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold", 0.0),
        ("threshold", 1.0),
        ("neg_threshold", 0.0),
        ("neg_threshold", 0.6),  # above threshold
        ("min_speech_ms", -1),
        ("hangover_ms", 20_000),
        ("pre_roll_ms", -10),
        ("post_roll_ms", 400),  # longer than hangover_ms
        ("speculate_ms", 300),  # not before the hangover ends
        ("max_segment_s", 0.5),
        ("max_segment_s", float("nan")),
        ("threshold", True),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field} = "):
        SegmenterConfig.check({field: value})


def drafts(events: list) -> list[Utterance]:
    return [e.utterance for e in events if isinstance(e, UtterancePaused)]


def test_a_pause_sends_a_draft_the_same_as_the_utterance_it_closes(vad, two_clip_stream):
    stream, _ = two_clip_stream
    events = feed(UtteranceSegmenter(SegmenterConfig(speculate_ms=100), vad), stream)
    assert_events_paired(events)
    found, ahead = utterances(events), drafts(events)
    assert len(found) == 2 and len(ahead) >= 2
    for utterance in found:
        # The last draft of each utterance, sent before it closed: the very same samples
        # (speculate_ms >= post_roll_ms), so asr may keep its transcript.
        draft = [d for d in ahead if d.index == utterance.index][-1]
        assert events.index(next(e for e in events if isinstance(e, UtterancePaused)
                                 and e.utterance is draft)) < events.index(
            next(e for e in events if isinstance(e, UtteranceEnded) and e.utterance is utterance))
        assert (draft.start_sample, draft.end_sample, draft.speech_end_sample) == (
            utterance.start_sample, utterance.end_sample, utterance.speech_end_sample)
        assert draft.pcm.tobytes() == utterance.pcm.tobytes()
    assert drafts(feed(UtteranceSegmenter(SegmenterConfig(speculate_ms=0), vad), stream)) == []


def test_a_draft_at_a_short_pause_is_not_the_utterance_when_speech_goes_on(vad, clips):
    a, b = trimmed(clips["LJ001-0008"]), trimmed(clips["LJ001-0013"])
    stream, (_, _, _, b_start, _) = build(silence(1), a, silence(0.2), b, silence(1))
    config = SegmenterConfig(hangover_ms=300, speculate_ms=64, post_roll_ms=64)
    events = feed(UtteranceSegmenter(config, vad), stream)
    assert_events_paired(events)
    [utterance] = utterances(events)
    early = [d for d in drafts(events) if d.end_sample <= b_start]
    assert early, "the 200 ms pause between the clips sends a draft"
    # The draft of the pause ends before the speech that followed it: the final utterance
    # has a later speech end, so nothing made from the draft can be taken for it.
    assert all(d.speech_end_sample < utterance.speech_end_sample for d in early)
    assert all(d.pcm.tobytes() == stream[d.start_sample:d.end_sample].tobytes() for d in early)


def test_cut_commits_the_utterance_up_to_an_earlier_pause_and_goes_on(vad, clips):
    a, b = trimmed(clips["LJ001-0008"]), trimmed(clips["LJ001-0013"])
    stream, _ = build(silence(1), a, silence(0.2), b, silence(1))
    config = SegmenterConfig(hangover_ms=300, speculate_ms=100)
    whole = utterances(feed(UtteranceSegmenter(config, vad), stream))
    assert len(whole) == 1   # the 200 ms pause does not end it

    segmenter = UtteranceSegmenter(config, vad)
    events, pause, done = [], None, False
    for start in range(0, len(stream), FRAME):
        new = segmenter.push(stream[start:start + FRAME])
        events += new
        pause = pause or next((e.utterance for e in new if isinstance(e, UtterancePaused)), None)
        if pause is not None and not done and start >= pause.end_sample + BUS_RATE // 2:
            done = True   # half a second of speech later
            # A cut outside the open utterance, or before speech went on, does nothing.
            assert segmenter.cut(pause.start_sample - 1, pause.speech_end_sample) == []
            events += segmenter.cut(pause.end_sample, pause.speech_end_sample)
    events += segmenter.flush()
    assert_events_paired(events)
    first, rest = utterances(events)
    # The committed part is the draft's very samples; the rest starts where it ends.
    assert (first.start_sample, first.end_sample, first.speech_end_sample) == (
        pause.start_sample, pause.end_sample, pause.speech_end_sample)
    assert first.pcm.tobytes() == pause.pcm.tobytes() and not first.forced
    assert first.goes_on and not rest.goes_on   # the rest follows; nothing after it
    assert rest.start_sample == first.end_sample and rest.end_sample == whole[0].end_sample
    assert_pcm_exact(rest, stream)
    assert rest.index == first.index + 1


def test_speech_going_on_after_a_pause_sends_the_grown_utterance(vad, clips):
    a, b = trimmed(clips["LJ001-0004"]), trimmed(clips["LJ001-0006"])
    stream, (_, _, _, b_start, _) = build(silence(1), a, silence(0.2), b, silence(1))
    config = SegmenterConfig(hangover_ms=300, speculate_ms=100, recheck_ms=1000)
    events = feed(UtteranceSegmenter(config, vad), stream)
    assert_events_paired(events)
    grown = [e.utterance for e in events if isinstance(e, UtteranceGrowing)]
    pause = next(d for d in drafts(events) if d.end_sample <= b_start)
    after = [g for g in grown if g.end_sample > pause.end_sample]
    assert after, "b goes on for seconds after the pause before it"
    # Each is the utterance so far, from its start, ending in speech; at most two per pause,
    # the first recheck_ms after the pause.
    for g in grown:
        assert g.start_sample == pause.start_sample and g.speech_end_sample == g.end_sample
        assert g.pcm.tobytes() == stream[g.start_sample:g.end_sample].tobytes()
    first = min(after, key=lambda g: g.end_sample)
    assert first.end_sample - pause.end_sample >= BUS_RATE
    since_pause = 0
    for event in events:
        if isinstance(event, UtterancePaused | UtteranceEnded):
            since_pause = 0
        elif isinstance(event, UtteranceGrowing):
            since_pause += 1
            assert since_pause <= RECHECKS
    none = SegmenterConfig(hangover_ms=300, speculate_ms=100, recheck_ms=0)
    assert not [e for e in feed(UtteranceSegmenter(none, vad), stream)
                if isinstance(e, UtteranceGrowing)]


def test_default_config_is_valid():
    assert SegmenterConfig.check({}) == SegmenterConfig()


def test_speech_going_on_sends_the_open_utterance_every_agree_every_ms(vad, clips):
    a, b = trimmed(clips["LJ001-0004"]), trimmed(clips["LJ001-0006"])
    stream, _ = build(silence(1), a, silence(1), b, silence(1))
    config = SegmenterConfig(hangover_ms=300, speculate_ms=100, recheck_ms=0,
                             agree_every_ms=800)
    events = feed(UtteranceSegmenter(config, vad), stream)
    assert_events_paired(events)
    found = utterances(events)
    assert len(found) == 2
    for u in found:
        grown = [e.utterance for e in events if isinstance(e, UtteranceGrowing)
                 and e.utterance.index == u.index]
        # Each is the utterance so far, from its start, ending in speech, inside it...
        assert grown and all(g.start_sample == u.start_sample < g.end_sample < u.end_sample
                             and g.speech_end_sample == g.end_sample for g in grown)
        assert all(g.pcm.tobytes() == stream[g.start_sample:g.end_sample].tobytes()
                   for g in grown)
        # ... every 800 ms of it (a pause in between does not send one: speech must go on).
        ends = [u.start_sample] + [g.end_sample for g in grown]
        assert all(b - a >= 0.8 * BUS_RATE for a, b in itertools.pairwise(ends))
        assert len(grown) >= (u.speech_end_sample - u.start_sample) / BUS_RATE / 0.8 - 2
    off = SegmenterConfig(hangover_ms=300, speculate_ms=100, recheck_ms=0)
    assert not [e for e in feed(UtteranceSegmenter(off, vad), stream)
                if isinstance(e, UtteranceGrowing)]
