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


def test_subtitles_srt_and_vtt(tmp_path):
    from tools.subtitles import cues, write_subtitles

    utts = [{"text": "Nunca foi superado.", "media_start_s": 1.25, "media_end_s": 2.5},
            {"text": "", "media_start_s": 3.0, "media_end_s": 3.2},
            {"text": "Produziram os livros de blocos, que foram os antecessores imediatos do "
                     "verdadeiro livro impresso, em Portugal e no Brasil.",
             "media_start_s": 4.0, "media_end_s": 10.0}]
    out = cues(utts)
    assert out[0] == (1.25, 2.5, "Nunca foi superado.")
    assert len(out) == 3   # the empty one is skipped, the long one needs two cues
    assert out[1][0] == 4.0 and abs(out[2][1] - 10.0) < 1e-9 and out[1][1] == out[2][0]
    assert all(len(line) <= 42 for _, _, text in out for line in text.split("\n"))
    srt, vtt = write_subtitles(tmp_path, "pt", utts)
    assert srt.name == "subtitles.pt.srt" and vtt.name == "subtitles.pt.vtt"
    assert "00:00:01,250 --> 00:00:02,500\nNunca foi superado." in srt.read_text()
    assert vtt.read_text().startswith("WEBVTT") and "00:00:01.250 --> 00:00:02.500" in \
        vtt.read_text()
