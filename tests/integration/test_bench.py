"""`voxweft bench` on two LJ clips, --fast: the report is complete and self-consistent."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, VOXWEFT, corpus_clips
from voxweft.tools.latency import STAGES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

# A reference translation written for the test, so the MT scores are computed too.
PT = {"LJ001-0002": "Em ser comparativamente moderno."}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("corpus")
    for clip in corpus_clips()[:2]:
        shutil.copy(clip, corpus)
        shutil.copy(clip.with_suffix(".txt"), corpus)
        if clip.stem in PT:
            (corpus / f"{clip.stem}.pt.txt").write_text(PT[clip.stem])
    (corpus / "notes.md").write_text("not audio: ignored")
    out = tmp_path_factory.mktemp("bench")
    run = subprocess.run([*VOXWEFT, "bench", "--corpus", str(corpus), "--out", str(out),
                          "--fast", "--bus-seconds", "1", "--bus-frames", "1000"],
                         cwd=ROOT, capture_output=True, text=True, timeout=380)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "| end of speech -> first voiced audio p50 (s) |" in run.stdout   # Markdown table
    return out, json.loads((out / "report.json").read_text())


def test_report_files_and_header(report):
    out, r = report
    assert r["schema"] == "voxweft-bench/2"
    for name in ("report.md", "timeline.png", "session.wav", "output.wav"):
        assert (out / name).stat().st_size > 1000, name
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r["config"]["files"] == 2 and r["config"]["fast"] is True
    assert set(r["config"]["engines"]) >= {"asr", "mt", "tts"}
    assert r["host"]["cpus"] >= 1


def test_every_utterance_is_measured_and_adds_up(report):
    _out, r = report
    rows = r["utterances"]
    assert len(rows) == 2 and {row["file"] for row in rows} == {c.stem for c in
                                                              corpus_clips()[:2]}
    for row in rows:
        assert row["played"] and row["text"] and row["translation"]
        assert row["back_text"] if row["sentence"] == row["utt"] else row["back_text"] is None
        stages = row["stages_s"]
        assert list(stages) == list(STAGES) and all(v is not None and v >= 0
                                                    for v in stages.values()), stages
        # The stages partition end of speech -> first audio.
        assert sum(stages.values()) == pytest.approx(row["speech_end_to_first_audio_s"],
                                                     abs=0.002)
        assert 0 < row["segment_to_first_audio_s"] < row["speech_end_to_first_audio_s"]
        assert 0 < row["floor_s"] == pytest.approx(sum(row["floor_stages_s"].values()),
                                                   abs=0.01)
        # A stage that took its draft worked on it: its work is the draft's (tts's is not
        # on the bus: no floor comparison for an utterance whose first chunk was ahead).
        assert set(row["drafted"]) <= {"asr", "mt", "tts"}
        work = row["pipeline_stages_s"]
        assert all(work[k] > 0 for k in ("asr", "mt")), work
        if "tts" in row["drafted"]:
            assert row["pipeline_s"] is None and work["tts_first_chunk"] is None
        else:
            assert row["pipeline_s"] == pytest.approx(sum(work.values()), abs=0.05)
            if not row["drafted"]:
                assert 0 < row["pipeline_s"] <= row["segment_to_first_audio_s"]
    head = r["latency"]["speech_end_to_first_audio_s"]
    assert head["n"] == 2 and head["p50"] <= head["p95"] <= head["max"]
    assert head["max"] == max(row["speech_end_to_first_audio_s"] for row in rows)
    for row in rows:   # the first voiced sample comes at or after the first sample
        assert row["speech_end_to_first_audio_s"] <= row["speech_end_to_first_voiced_s"] \
            < row["speech_end_to_first_audio_s"] + 0.5
    assert r["latency"]["speech_end_to_first_voiced_s"]["n"] == 2


def test_lag_and_budget(report):
    _out, r = report
    lag = r["lag"]
    # --fast interprets a file: no bound, nothing skipped; the steps are all counted
    assert lag["max_lag_s"] == 0 and lag["not_spoken"] == 0 and lag["utterances"] == 2
    assert set(lag["steps"]) == {"speedup", "long_chunks", "backlog_engine", "skip"}
    assert lag["steps"]["skip"] == 0 and lag["max_s"] >= lag["p95_s"] > 0
    budget = r["budget"]
    assert set(budget["engines"]) == {"asr", "mt", "tts"}
    for actor, b in budget["engines"].items():
        assert b["cpu"] > 0 and b["rtf"] > 0 and b["cores"] >= 1, actor
    assert budget["keeps_up"] in (True, False) and len(budget["verdict"]) == 1
    assert budget["verdict"][0].startswith("budget on _interpret: continuous speech needs asr")


def test_speculation(report):
    out, r = report
    spec = r["speculation"]
    # Each utterance ends at a pause: a draft went out before each commit, and asr used
    # the drafts of the pauses that ended them (it handles the draft, then the commit).
    assert spec["utterances"] == 2 and spec["drafts_sent"] >= 2
    asr = spec["stages"]["asr"]
    # ... and those asr made itself where two drafts of a growing utterance agreed (how many
    # depends on the machine's speed: 5 made of 4 sent once on 2 cores)
    assert asr["made"] == spec["drafts_sent"] + spec["agreements"] and asr["used"] >= 1
    assert sum("asr" in row["drafted"] for row in r["utterances"]) == asr["used"]
    assert spec["first_audio_s"]["first_chunk_ahead"]["n"] == spec["stages"]["tts"]["used"]
    assert asr["made"] == asr["used"] + asr["wasted"]   # none left over at the end
    assert 0 < asr["hit_rate"] <= 1 and asr["cost_s"] > 0
    assert set(spec["stages"]) == {"asr", "mt", "tts"}
    assert "## Speculative endpointing" in (out / "report.md").read_text()


def test_floor_quality_resources_and_bus(report):
    _out, r = report
    floor = r["floor"]
    # Each stage's work, in the pipeline (on its draft where it took one) and alone
    assert floor["stages"]["asr"]["n"] == 2 and floor["stages"]["asr"]["ratio_p50"] > 0
    if floor["pipeline_s"]["n"] == 0:   # tts made every first chunk ahead
        assert floor["ratio_p50"] is None
    else:
        assert floor["ratio_p50"] == pytest.approx(floor["pipeline_s"]["p50"]
                                                   / floor["floor_s"]["p50"], rel=0.01)
    q = r["quality"]
    assert q["asr"]["files"] == 2 and q["asr"]["wer"] < 0.2
    assert q["mt"]["files"] == 1 and q["mt"]["chrf"] > 30
    # Each clip is a sentence: heard whole, its pieces back to back
    assert q["round_trip"]["sentences"] == 2 and q["round_trip"]["pieces"] == 2
    assert q["round_trip"]["wer"] < 0.6
    assert r["sentences"]["count"] == 2 and r["sentences"]["pieces"] == 2
    assert set(r["resources"]) == {"capture", "segmenter", "asr", "mt", "tts", "player"}
    for actor, res in r["resources"].items():
        assert res["peak_rss_mb"] >= res["rss_mb"] * 0.5 > 0 and res["cpu_s"] > 0, actor
    assert r["resources"]["tts"]["cpu_s"] > r["resources"]["player"]["cpu_s"]
    for transport in ("ipc", "tcp"):
        for mode in ("realtime", "flood"):
            b = r["bus"][transport][mode]
            assert b["received"] + b["lost"] == b["sent"] and b["received"] > 0
            assert 0 < b["p50_ms"] <= b["p99_ms"] <= b["max_ms"]
    names = [t["name"] for t in r["targets"]]
    assert "end of speech -> first audio p50 (s)" in names
    assert r["longform"] is None and r["soak"] is None   # fast mode: no time-based figures


def test_compare_two_reports(report, tmp_path):
    out, r = report
    worse = json.loads(json.dumps(r))
    worse["latency"]["speech_end_to_first_audio_s"]["p50"] *= 2
    (tmp_path / "new.json").write_text(json.dumps(worse))
    run = subprocess.run([*VOXWEFT, "bench", "--compare", str(out / "report.json"),
                          "--report", str(tmp_path / "new.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "REGRESSION" in run.stdout


def test_bad_corpus_is_one_clear_line(tmp_path):
    run = subprocess.run([*VOXWEFT, "bench", "--corpus", str(tmp_path), "--out",
                          str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode != 0 and "no audio files" in run.stderr
