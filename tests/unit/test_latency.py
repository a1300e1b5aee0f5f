"""Latency arithmetic on hand-computed traces."""

from voxweft.tools.latency import STAGES, percentile, summarize, utterance_latency

S = 1_000_000_000


def _trace(pairs):
    return tuple((e, int(10 * S + t * S), None) for e, t in pairs)


def test_utterance_latency_from_a_full_trace():
    trace = _trace([
        ("speech_end", 0.0), ("segment", 0.3),
        ("asr.ready", 0.2), ("asr.recv", 0.31), ("asr.start", 0.31), ("asr.end", 1.11),
        ("mt.ready", 1.0), ("mt.recv", 1.112), ("mt.start", 1.112), ("mt.end", 1.132),
        # TTS was still speaking the previous utterance until 1.5: 0.368 s queued, 1 ms hop
        ("tts.ready", 1.5), ("tts.recv", 1.501), ("tts.start", 1.501), ("tts.first", 1.9),
        ("play.ready", 1.0), ("play.recv", 1.905), ("play.start", 1.95)])
    lat = utterance_latency(trace)
    assert lat["speech_end_to_first_audio_s"] == 1.95
    assert lat["segment_to_first_audio_s"] == 1.65
    assert lat["stages_s"] == {
        "endpointing": 0.3, "hop_segmenter_asr": 0.01, "asr_queue": 0.0, "asr": 0.8,
        "hop_asr_mt": 0.002, "mt_queue": 0.0, "mt": 0.02,
        "hop_mt_tts": 0.001, "tts_queue": 0.368, "tts_first_chunk": 0.399,
        "hop_tts_player": 0.005, "player_wait": 0.045}
    assert abs(sum(lat["stages_s"].values()) - 1.95) < 1e-6
    assert list(lat["stages_s"]) == list(STAGES)


def test_a_trace_without_ready_events_counts_the_wait_as_transit():
    trace = _trace([("speech_end", 0.0), ("segment", 0.3), ("asr.recv", 0.5),
                    ("asr.start", 0.5), ("asr.end", 1.0)])
    stages = utterance_latency(trace)["stages_s"]
    assert stages["hop_segmenter_asr"] == 0.2 and stages["asr_queue"] == 0.0
    assert stages["asr"] == 0.5 and stages["mt"] is None


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
    from voxweft.tools.subtitles import cues, write_subtitles

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
