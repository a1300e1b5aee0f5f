"""tools/bench/report*.py: Markdown, plots and comparison of bench reports."""

import copy
import json

import pytest

from voxweft.tools.bench import report as br
from voxweft.tools.bench.reportcompare import REGRESSION, compare, translation_chrf
from voxweft.tools.bench.reportformat import fmt
from voxweft.tools.bench.reportplots import plot_soak, plot_timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STAGES = ["endpointing", "hop_segmenter_asr", "asr_queue", "asr", "hop_asr_mt", "mt",
          "hop_mt_tts", "tts_first_chunk", "hop_tts_player", "player_wait"]


def _s(p50, p95=None, mx=None, n=3):
    return {"n": n, "p50": p50, "p95": p95 if p95 is not None else p50 * 1.5,
            "max": mx if mx is not None else p50 * 2}


def _bus(p50, p99):
    return {"sent": 1000, "received": 1000, "lost": 0, "p50_ms": p50, "p99_ms": p99,
            "max_ms": p99 * 2, "mean_ms": p50, "rate_per_s": 50.0, "payload_bytes": 1024}


def sample_report():
    stage_times = [0.25, 0.002, 0.0, 0.31, 0.001, 0.12, 0.002, 0.18, 0.003, 0.0]
    utterances = []
    for i in range(3):
        stages = {name: round(t * (1 + 0.2 * i), 4)
                  for name, t in zip(STAGES, stage_times, strict=True)}
        if i == 2:
            stages["asr_queue"] = None          # a missing trace point
        utterances.append({
            "utt": f"u{i}", "file": f"clip{i}.wav", "media_start_s": 3.0 * i,
            "media_end_s": 3.0 * i + 2.5, "text": "hello world", "translation": "olá mundo",
            "back_text": "hello world", "played": True,
            "speech_end_to_first_audio_s": round(sum(v or 0 for v in stages.values()), 4),
            "segment_to_first_audio_s": 0.63, "stages_s": stages, "floor_s": 0.55,
            "floor_stages_s": {"asr": 0.3, "mt": 0.1, "tts_first_chunk": 0.15},
            "wall_s": 3.0 * i + 2.5})
    t = [60.0 * k for k in range(31)]
    return {
        "schema": "voxweft-bench/2", "created": "2025-01-02T03:04:05Z",
        "command": "voxweft bench --corpus samples --soak 30",
        "host": {"platform": "Linux-6.1", "machine": "x86_64", "cpus": 16, "python": "3.12.3",
                 "cpu_model": "Intel(R) Xeon(R) Gold 6338", "vnni": True,
                 "load_1min_start": 0.42, "load_1min_end": 2.07,
                 "others_busy_cores_start": 0.05, "others_busy_cores_end": 1.02},
        "config": {"topology": "local", "corpus": "samples", "files": 3, "src_lang": "en",
                   "tgt_lang": "pt", "fast": False, "pause_s": 1.0, "soak_minutes": 30,
                   "engines": {"asr": "faster-whisper base", "mt": "ctranslate2 nllb",
                               "tts": "piper"}},
        "spoken": {"share": 0.9734, "basis": "reference words", "words_spoken": 1180,
                   "words": 1212, "speech_share": 0.9521, "heard_s": 390.2, "spoken_s": 371.5,
                   "ignored_s": 4.2, "ignored": 2, "utterances_spoken": 63,
                   "utterances_not_spoken": 2, "utterances": 65,
                   "fillers_removed": 12, "pauses_cut_s": 8.44, "lag_speedup": 40,
                   "lag_long_chunks": 12, "lag_skip": 2, "tts_cpu_per_source_s": 1.053,
                   "tts_budget_cpu_per_source_s": 1.092},
        "utterances": utterances,
        "ignored": [{"file": "lj2", "start_s": 3.1, "session_s": 12.62, "length_s": 1.4,
                     "reason": "not the speaker: 12 dB under their level"},
                    {"file": None, "start_s": None, "session_s": 30.0, "length_s": 2.8,
                     "reason": "not the speaker: 9 dB under their level"}],
        "latency": {"speech_end_to_first_audio_s": _s(0.873), "segment_to_first_audio_s": _s(0.63),
                    "stages_s": {name: _s(max(t, 0.001))
                                 for name, t in zip(STAGES, stage_times, strict=True)}},
        "longform": {"start_offset_s": 3.412, "end_offset_s": 1.205, "laal_ca_s": 2.318,
                     "atd_ca_s": 2.914, "start_offset_nca_s": 2.5, "end_offset_nca_s": 0.617,
                     "laal_s": 1.474, "atd_s": 1.806, "source_duration_s": 8.5,
                     "output_words": 17},
        "sentences": {"count": 2, "pieces": 3, "joins": {
            "joins": 1, "holes": 1, "hole_s_total": 0.21, "hole_s_max": 0.21,
            "silence_s": {"n": 1, "p50": 0.48, "p95": 0.48, "max": 0.48}, "clicks": 0,
            "step_max": 0.002},
            "offsets": {"sentences": 2, "start_offset_s": {"p50": 2.9, "mean": 2.9},
                        "end_offset_s": {"p50": 1.7, "mean": 1.8},
                        "laal_ca_s": {"p50": 2.6, "mean": 2.7},
                        "start_offset_nca_s": {"p50": 2.0, "mean": 2.1},
                        "end_offset_nca_s": {"p50": 0.9, "mean": 1.0},
                        "laal_s": {"p50": 1.9, "mean": 2.0}}},
        "floor": {"pipeline_s": _s(0.873), "floor_s": _s(0.55), "ratio_p50": 1.587,
                  "stages": {"asr": {"n": 3, "pipeline_p50": 0.31, "floor_p50": 0.3,
                                     "ratio_p50": 1.033}}},
        "lag": {"max_lag_s": 6.0, "max_s": 5.81, "p95_s": 5.2, "slope_s_per_min": -0.012,
                "slope_ci95_s_per_min": 0.27, "slope_distinguishable_from_zero": False,
                "steps": {"speedup": 40, "long_chunks": 12, "backlog_engine": 0, "skip": 2},
                "not_spoken": 2, "utterances": 65},
        "speculation": {"utterances": 65, "drafts_sent": 90, "cuts": 7, "cuts_late": 2,
                        "rechecks": 12, "recheck_s": 3.5,
                        "first_audio_s": {"first_chunk_ahead": _s(1.02),
                                          "not_ahead": _s(2.5)}, "stages": {
            "asr": {"made": 90, "used": 60, "wasted": 30, "not_needed": 0, "hit_rate": 0.667,
                    "utterances_ahead": 0.923, "cost_s": 18.2, "wasted_s": 6.1,
                    "wasted_s_per_min": 1.52}}},
        "budget": {"engines": {"asr": {"cpu": 0.061, "rtf": 0.036, "first_s": 0.43,
                                       "cores": 2.0}},
                   "keeps_up": True, "verdict": ["budget on local: ... keeps up"]},
        "bus": {"ipc": {"realtime": _bus(0.11, 0.42), "flood": _bus(0.9, 3.1)},
                "tcp": {"realtime": _bus(0.16, 0.57), "flood": _bus(1.4, 4.4)}},
        "quality": {"asr": {"wer": 0.0714, "substitutions": 1, "deletions": 0, "insertions": 0,
                            "reference_words": 14},
                    "mt": {"bleu": 41.27, "chrf": 63.5, "signature_bleu": "x",
                           "signature_chrf": "y"},
                    "round_trip": {"wer": 0.25, "chrf": 71.02, "sentences": 2,
                                   "pieces": 3}},
        "resources": {"asr": {"peak_rss_mb": 612.4, "rss_mb": 600.1, "cpu_s": 41.2, "fds": 23,
                              "threads": 9},
                      "tts": {"peak_rss_mb": 301.0, "rss_mb": 290.5, "cpu_s": 12.7, "fds": 17,
                              "threads": 5}},
        "soak": {"minutes": 30,
                 "latency_slope": {"slope_per_10min": 0.004, "ci95_per_10min": 0.011, "n": 31,
                                   "distinguishable_from_zero": False},
                 "rss_slope": {"asr": {"slope_per_10min": 1.5, "ci95_per_10min": 0.3, "n": 31,
                                       "distinguishable_from_zero": True},
                               "tts": {"slope_per_10min": None, "ci95_per_10min": None,
                                       "n": 2, "distinguishable_from_zero": False}},
                 "fds": {"asr": {"first": 23, "last": 23, "max": 24}},
                 "queue_depth": {"max": 3, "mean": 0.42},
                 "drops": {"player": {"late": 2}, "asr": {}},
                 "series": {"latency": [[x, 0.85 + 0.0001 * x / 60 + 0.01 * (k % 3)]
                                        for k, x in enumerate(t)],
                            "rss_mb": {"asr": [[x, 600 + x / 400] for x in t],
                                       "tts": [[x, 290.0] for x in t]},
                            "fds": {"asr": [[x, 23] for x in t]},
                            "queue_depth": [[x, k % 4] for k, x in enumerate(t)]}},
        "targets": [{"name": "speech end -> first audio p50", "target": "<= 1.0 s",
                     "goal": "interactive", "value": 0.873, "met": True},
                    {"name": "bus ipc p99", "target": "<= 0.3 ms", "goal": "cheap hops",
                     "value": 0.42, "met": False},
                    {"name": "LAAL_CA", "target": "<= 3 s", "goal": None, "value": None,
                     "met": None}],
    }


# ---------------------------------------------------------------------------- markdown


def test_markdown_full_report_has_key_figures():
    md = br.markdown(sample_report())
    for needle in ("voxweft bench --corpus samples --soak 30", "asr=faster-whisper base",
                   "## Targets", "| speech end -> first audio p50 | <= 1.0 s | interactive | "
                   "0.873 | yes |", "**NO**", "## Latency (s)", "| speech end -> first audio | 3 "
                   "| 0.873 |", "tts_first_chunk", "ratio p50 1.59", "pipeline p50 0.873 s (n 3)",
                   "by stage, pipeline / floor p50 (n): asr 0.310 / 0.300 s = 1.03 (3)", "## Bus",
                   "| tcp | flood |", "4.400", "WER 0.0714", "BLEU 41.27", "chrF 63.50",
                   "round trip WER 0.2500", "(2 sentences of 3 pieces, each heard whole)",
                   "## Resources", "612.4", "## Sentences",
                   "| EndOffset | 0.900 (1.000) | EndOffset_CA | 1.700 (1.800) |",
                   "holes (the player waited): 1, 0.210 s in all",
                   "| StartOffset | 2.500 | StartOffset_CA | 3.412 |",
                   "| EndOffset | 0.617 | EndOffset_CA | 1.205 |",
                   "| LAAL | 1.474 | LAAL_CA | 2.318 |", "| ATD | 1.806 | ATD_CA | 2.914 |",
                   "## Soak (30 min)", "flat within noise", "drifting",
                   "player late=2", "max 3", "## Lag behind the speaker",
                   "bound (max_lag_s): 6.0; lag (speech end -> first audio) max 5.81 s",
                   "slope -0.012 ± 0.270 s per minute (flat within noise)",
                   "speedup 40, long_chunks 12, backlog_engine 0, skip 2; skipped by the bound "
                   "2 of 65",
                   "## CPU budget", "| asr | 0.061 | 0.036 | 0.430 |",
                   "- budget on local: ... keeps up",
                   "## Speculative endpointing", "drafts sent by the segmenter: 90, for 65",
                   "earlier pause (asr's drafts agreed): 7 (too late: 2); grown utterances "
                   "rechecked by asr: 12 (3.50 s)",
                   "first chunk made ahead 1.02 s (3), not 2.50 s (3)",
                   "| asr | 90 | 60 | 30 | 0 | 0.67 | 0.92 | 18.20 | 6.10 | 1.52 |"):
        assert needle in md, needle
    assert md.count("\n") < 127         # compact (with two stretches ignored listed)


def test_markdown_opens_with_the_spoken_share_and_the_machine():
    lines = br.markdown(sample_report()).splitlines()
    assert lines[0].startswith("# voxweft bench")
    assert lines[2] == ("**Spoken: 97.3 % of the reference words** (1180 of 1212 words; 2 of 65 "
                        "utterances not spoken; 4.2 s of speech ignored (2 stretches); 95.2 % "
                        "of the speech heard)")
    assert lines[4] == ("- condensed: fillers removed 12 words, pauses cut 8.4 s; lag steps: "
                        "speed-up 40, long chunks 12, skip 2")
    assert lines[5] == ("- tts CPU 1.05 s per s of source speech (the budget counted on 1.09)")
    machine = next(line for line in lines if line.startswith("- Machine:"))
    assert machine == ("- Machine: Intel(R) Xeon(R) Gold 6338, 16 cores, VNNI yes; load 1-min "
                       "avg at start 0.42, at end 2.07; cores busy with other work at start "
                       "0.05, at end 1.02")
    md = "\n".join(lines)   # every stretch ignored, where (file, media time), how long, why
    assert "| lj2 | 3.10 | 1.40 | not the speaker: 12 dB under their level | 12.62 |" in md
    assert "| - | - | 2.80 | not the speaker: 9 dB under their level | 30.00 |" in md
    heard = sample_report()   # a corpus without reference texts: the seconds of speech
    heard["spoken"].update(share=0.9521, basis="speech heard", words=None, words_spoken=None)
    assert br.markdown(heard).splitlines()[2] == (
        "**Spoken: 95.2 % of the speech heard** (371.5 of 390.2 s; 2 of 65 utterances not "
        "spoken; 4.2 s of speech ignored (2 stretches))")
    first = sample_report()   # voxweft-bench/1: the share was of the words transcribed
    first["schema"] = "voxweft-bench/1"
    for key in ("basis", "speech_share", "heard_s", "spoken_s", "ignored_s", "ignored"):
        del first["spoken"][key]
    md = br.markdown(first)
    assert "warning" not in md and md.splitlines()[2] == (
        "**Spoken: 97.3 % of the words transcribed** (1180 of 1212 words; 2 of 65 utterances "
        "not spoken)")
    old = sample_report()
    del old["spoken"]
    old["host"] = {"cpus": 2}   # a report from before: no headline, the machine unknown
    md = br.markdown(old)
    assert "Spoken" not in md and "- Machine: -, 2 cores, VNNI unknown; load 1-min avg at " \
        "start -, at end -" in md


def test_markdown_tolerates_missing_sections():
    for report in ({}, {"schema": "voxweft-bench/2"}, {"latency": None, "bus": None,
                                                       "quality": None, "soak": None,
                                                       "host": None, "config": None,
                                                       "targets": None, "resources": None}):
        md = br.markdown(report)
        assert md.startswith("# voxweft bench") and "-" in md
    r = sample_report()
    r["latency"]["stages_s"]["asr"] = None
    r["quality"]["mt"] = None
    r["quality"]["asr"]["wer"] = None
    r["bus"]["tcp"] = None
    r["soak"]["latency_slope"] = None
    r["resources"]["asr"] = {"peak_rss_mb": None}
    r["config"]["engines"] = None
    r["schema"] = "voxweft-bench/3"
    md = br.markdown(r)
    assert "| ipc | realtime |" in md and "MT BLEU -, chrF -" in md and "warning: schema" in md


# ---------------------------------------------------------------------------- plots


def _png_ok(path):
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 1024


def test_plot_timeline_writes_png(tmp_path):
    path = tmp_path / "timeline.png"
    plot_timeline(sample_report(), path)
    assert _png_ok(path)
    empty = tmp_path / "empty.png"
    plot_timeline({"utterances": None}, empty)
    assert _png_ok(empty)


def test_plot_soak_writes_png(tmp_path):
    path = tmp_path / "soak.png"
    plot_soak(sample_report(), path)
    assert _png_ok(path)
    empty = tmp_path / "nosoak.png"
    plot_soak({"soak": None}, empty)
    assert _png_ok(empty)


# ---------------------------------------------------------------------------- compare


def _line(text, prefix):
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, (prefix, text)
    return lines[0]


def test_compare_identical_has_no_regression():
    r = sample_report()
    text = compare(r, copy.deepcopy(r))
    assert REGRESSION not in text and "warning" not in text
    assert text.rstrip().endswith("0 regression(s)")
    assert _line(text, "latency speech_end_to_first_audio_s p50:") == (
        "latency speech_end_to_first_audio_s p50: 0.8730 -> 0.8730 (+0.0000, +0.0 %)")


def test_compare_flags_regressions():
    old, new = sample_report(), sample_report()
    new["latency"]["speech_end_to_first_audio_s"]["p50"] = 1.0476     # +20 %
    new["latency"]["stages_s"]["asr"]["p50"] = 0.32                   # +3.2 %, within 10 %
    new["bus"]["tcp"]["flood"]["p99_ms"] = 5.5                        # +25 %
    new["quality"]["mt"]["chrf"] = 60.0                               # down
    new["quality"]["asr"]["wer"] = 0.05                               # better
    new["resources"]["asr"]["peak_rss_mb"] = 700.0                    # +14 %
    new["resources"]["tts"]["cpu_s"] = 10.0                           # better
    new["spoken"]["share"] = 0.95                                     # less spoken
    new["spoken"]["tts_cpu_per_source_s"] = 1.1                       # +4.5 %, within 10 %
    text = compare(old, new)
    line = _line(text, "latency speech_end_to_first_audio_s p50:")
    assert line.startswith("latency speech_end_to_first_audio_s p50: 0.8730 -> 1.0476 "
                           "(+0.1746, +20.0 %)") and REGRESSION in line
    assert REGRESSION not in _line(text, "stage asr p50:")
    assert REGRESSION in _line(text, "bus tcp flood p99_ms:")
    assert REGRESSION in _line(text, "quality mt chrf:")
    assert REGRESSION not in _line(text, "quality asr wer:")
    assert REGRESSION in _line(text, "resources asr peak_rss_mb:")
    assert REGRESSION not in _line(text, "resources tts cpu_s:")
    assert REGRESSION in _line(text, "spoken share:")
    assert REGRESSION not in _line(text, "spoken tts_cpu_per_source_s:")
    assert text.rstrip().endswith("5 regression(s)")


def test_compare_missing_keys_and_other_schema():
    old, new = sample_report(), sample_report()
    del new["latency"]["stages_s"]["player_wait"]
    new["quality"]["round_trip"] = None
    new["bus"] = None
    new["resources"]["mt"] = {"peak_rss_mb": 250.0, "cpu_s": 3.0}
    old["schema"] = "voxweft-bench/0"
    del old["floor"]
    text = compare(old, new)
    assert text.startswith("warning: schema old 'voxweft-bench/0', new 'voxweft-bench/2'")
    assert _line(text, "stage player_wait p50:").endswith("(missing)")
    assert _line(text, "bus ipc realtime p99_ms:") == (
        "bus ipc realtime p99_ms: 0.4200 -> - (missing)")
    assert _line(text, "floor ratio_p50:") == "floor ratio_p50: - -> 1.5870 (missing)"
    assert "resources mt peak_rss_mb: - -> 250.0000 (missing)" in text
    assert compare({}, {}).startswith("warning")
    assert compare(None, {"latency": {"stages_s": None}}).rstrip().endswith("0 regression(s)")


def test_compare_zero_old_value():
    old, new = sample_report(), sample_report()
    old["latency"]["stages_s"]["asr_queue"]["p50"] = 0.0
    new["latency"]["stages_s"]["asr_queue"]["p50"] = 0.01
    line = _line(compare(old, new), "stage asr_queue p50:")
    assert "n/a %" in line and REGRESSION in line


def test_main_prints_markdown_and_comparison(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(sample_report()))
    assert br.main([str(path), "--timeline", str(tmp_path / "t.png")]) == 0
    assert "## Latency (s)" in capsys.readouterr().out
    assert _png_ok(tmp_path / "t.png")
    assert br.main([str(path), "--compare", str(path)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out


@pytest.mark.parametrize("value, text", [(None, "-"), (True, "yes"), (3, "3"), (0.12345, "0.123"),
                                         ("a|b", "a/b"), ([1, None], "1, -")])
def test_fmt(value, text):
    assert fmt(value) == text


def test_compare_scores_the_new_translations_against_the_old_ones():
    def rows(*pieces):
        return {"utterances": [{"file": f, "placed": p, "media_start_s": s, "translation": t}
                               for f, p, s, t in pieces]}
    # Sentence by sentence (old) against in pieces (new), the pieces out of order in the
    # report: each file's translation is its pieces in source order.
    old = rows(("a", 0, 0.0, "E vale a pena mencionar de passagem que"),
               ("b", 1, 5.0, "Então no mesmo"))
    new = rows(("a", 0, 1.2, "mencionar de passagem que"), ("a", 0, 0.0, "E vale a pena"),
               ("b", 1, 5.0, "Então, no mesmo"), ("c", 2, 9.0, "não no antigo"))
    got = translation_chrf(old, new)
    assert got["files"] == 2 and got["same"] == 1 and 80 < got["chrf"] < 100
    assert translation_chrf(old, old)["chrf"] == 100
    assert "translations, new against old: chrF" in compare(old, new)
    assert translation_chrf(old, rows(("z", 0, 0.0, "x"))) is None


def test_underruns_inside_utterances_are_counted_and_reported():
    from voxweft.tools.bench.score import _underruns

    rows = [{"underruns": 0, "underrun_s": 0.0}, {"underruns": 2, "underrun_s": 0.61},
            {"underruns": None, "underrun_s": None}, {"underruns": 1, "underrun_s": 0.2}]
    summary = _underruns(rows)
    assert summary == {"underruns": 3, "utterances": 2, "of": 3, "s_total": 0.81,
                       "s_max": 0.61}
    md = br.markdown({**sample_report(), "underruns": summary})
    assert "- underruns inside an utterance (the next chunk came after the one before had " \
           "played): 3 in 2 of 3 utterances, 0.810 s in all, longest 0.610 s" in md


def test_the_work_per_second_of_speech_is_counted_live_beside_the_budgets_figure():
    """Issue 38: the bench says what asr and tts worked per second of the source's speech
    (every decode, draft and fallback; every piece), beside what the GPU line counts."""
    from voxweft.actors import budget
    from voxweft.deploy.topology import load
    from voxweft.protocol.messages import Status
    from voxweft.tools.bench.heartbeats import work
    from voxweft.tools.bench.run import BenchCollector

    topo = load(None)
    collected = BenchCollector()
    collected.statuses = {
        "asr": [Status(src="asr", state="ready", counters={"decodes": 30, "decoded_ms": 45_000,
                                                           "engine_ms": 9_000, "fallbacks": 3})],
        "tts": [Status(src="tts", state="ready", counters={"syntheses": 5, "pieces": 24,
                                                           "made_ms": 26_000,
                                                           "engine_ms": 12_000})]}
    rows = [{"speech_s": 5.0}, {"speech_s": 7.0}, {"speech_s": 8.0}]   # 20 s of speech
    budgets = {"asr": {"rtf": 0.2, "timed": 1.0},
               "tts": {"rtf": 0.4, "expansion": 1.2, "prefill_s": 0.25}}
    w = work(collected, rows, topo, budgets)
    assert w["speech_s"] == 20.0 and w["commits"] == "agreement"
    assert w["asr"] == {"decodes_per_s": 1.5, "decoded_s_per_s": 2.25, "fallback_share": 0.1,
                        "engine_s_per_s": 0.45, "one_pass_s_per_s": 0.2,
                        "counted_s_per_s": round(0.2 * budget.ASR_WORK["agreement"], 3)}
    assert w["tts"]["syntheses_per_s"] == 0.25 and w["tts"]["pieces_per_s"] == 1.2
    assert w["tts"]["engine_s_per_s"] == 0.6 and w["tts"]["made_s_per_s"] == 1.3
    assert w["tts"]["counted_s_per_s"] == round(budget.stage_need(
        topo, "tts", budgets["tts"], 0.4, budgets["asr"]), 3)
    assert work(collected, [], topo, budgets) == {}   # no speech: nothing per second
    md = br.markdown({**sample_report(), "work": w})
    assert "## Work per second of speech (counted live; commits: agreement)" in md
    assert "decodes 1.5, decoded_s 2.25, fallback_share 0.1" in md
