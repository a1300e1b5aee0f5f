"""Latency arithmetic on hand-computed traces."""

from tools.latency import STAGES, percentile, summarize, utterance_latency

S = 1_000_000_000


def test_utterance_latency_from_a_full_trace():
    events = ["speech_end", "segment", "asr.recv", "asr.start", "asr.end", "mt.recv", "mt.start",
              "mt.end", "tts.recv", "tts.start", "tts.first", "play.recv", "play.start"]
    times = [0.0, 0.3, 0.31, 0.31, 1.11, 1.112, 1.112, 1.132, 1.14, 1.14, 1.54, 1.545, 1.55]
    trace = tuple((e, int(10 * S + t * S), None) for e, t in zip(events, times, strict=True))
    lat = utterance_latency(trace)
    assert lat["speech_end_to_first_audio_s"] == 1.55
    assert lat["segment_to_first_audio_s"] == 1.25
    assert lat["stages_s"]["asr"] == 0.8
    assert lat["stages_s"]["endpointing"] == 0.3
    assert lat["stages_s"]["tts_first_chunk"] == 0.4
    assert abs(sum(lat["stages_s"].values()) - 1.55) < 1e-6
    assert len(lat["stages_s"]) == len(STAGES)


def test_missing_events_give_none():
    lat = utterance_latency((("speech_end", 0, 0.0),))
    assert lat["speech_end_to_first_audio_s"] is None
    assert lat["stages_s"]["asr"] is None


def test_percentiles():
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5], 95) == 4.8
    assert summarize([1.0, None, 3.0]) == {"n": 2, "p50": 2.0, "p95": 2.9, "max": 3.0}
