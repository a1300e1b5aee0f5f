"""The whole pipeline on real English speech: supervised processes, real models, real bus."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import ROOT, VOXWEFT, corpus_clips, write_session
from tests.e2e.whole import content_error, played_whole, spoken_as_translated

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def normalize(text: str) -> str:
    """Lower case, no punctuation, single spaces (the usual WER normalisation)."""
    text = re.sub(r"[^\w\s']", " ", text.lower())
    return " ".join(text.split())


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def run_interpret(tmp_path, clips, *extra):
    session = tmp_path / "session.wav"
    references = write_session(session, clips)
    out = tmp_path / "out"
    proc = subprocess.run([*VOXWEFT, "interpret", "--input", str(session), "--out", str(out),
                           "--src", "en", "--tgt", "pt", *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, references, proc


def check_outputs(out, references):
    transcripts = read_jsonl(out / "transcript.jsonl")
    translations = read_jsonl(out / "translation.jsonl")
    # One utterance per clip, or more where a long one was committed up to an inner pause.
    assert len(references) <= len(transcripts) <= 2 * len(references), transcripts
    # By characters: a compound spelt otherwise ("blockbooks") is two word errors of ~20.
    cer = content_error(" ".join(references), " ".join(t["text"] for t in transcripts))
    assert cer < 0.05, f"CER {cer:.3f}: {[t['text'] for t in transcripts]}"
    # media times are increasing and inside the session
    starts = [t["media_start_s"] for t in transcripts]
    assert starts == sorted(starts) and starts[0] >= 0.5

    assert [t["utt"] for t in translations] == [t["utt"] for t in transcripts]
    for tr in translations:
        assert tr["src_lang"] == "en" and tr["tgt_lang"] == "pt"
        assert tr["text"] and normalize(tr["text"]) != normalize(tr["source_text"]), tr
    portuguese = " ".join(t["text"].lower() for t in translations)
    assert re.search(r"\b(que|de|os|nunca|em|com)\b", portuguese), portuguese

    audio, rate = sf.read(out / "output.wav", dtype="float32")
    assert rate == 24000
    assert len(audio) / rate > 0.5 * len(references)
    assert np.sqrt(np.mean(audio ** 2)) > 0.01, "output.wav is silent"

    for lang in ("en", "pt"):
        srt = (out / f"subtitles.{lang}.srt").read_text(encoding="utf-8")
        assert srt.count(" --> ") >= len(references)
        assert (out / f"subtitles.{lang}.vtt").read_text().startswith("WEBVTT")
    assert translations[0]["text"].split()[0] in (out / "subtitles.pt.srt").read_text()

    latency = json.loads((out / "latency.json").read_text())
    rows = latency["utterances"]
    assert [r["utt"] for r in rows] == [t["utt"] for t in transcripts]
    played_whole(out, [t["utt"] for t in transcripts])
    for row in rows:
        assert row["played"] and not row["not_spoken"], row
        figure = row["speech_end_to_first_audio_s"]
        assert figure is not None and figure > 0
        stages = row["stages_s"]
        assert all(v is not None and v >= 0 for v in stages.values()), stages
        # the stages add up to the end-to-end figure (same clock, same trace)
        assert abs(sum(stages.values()) - figure) < 0.01
    return transcripts, translations, latency


def test_interpret_five_clips_fast(tmp_path):
    out, references, proc = run_interpret(tmp_path, corpus_clips(), "--fast")
    check_outputs(out, references)
    assert (out / "logs" / "asr.log").exists()
    # The audio check (tests/e2e/whole.py, used by chaos and the hostile peer) passes on this
    # output, and fails it with one utterance's audio removed or said twice (issue 48).
    spoken_as_translated(out)
    for tamper in ("removed", "doubled"):
        bad = tmp_path / tamper
        bad.mkdir()
        shutil.copy(out / "translation.jsonl", bad)
        _tampered(out, bad, 1, tamper)
        with pytest.raises(AssertionError, match="does not say its translations"):
            spoken_as_translated(bad)


def _tampered(out, bad, index: int, how: str) -> None:
    """out's output.wav and journal into `bad`, utterance `index`'s audio removed (the
    journal as it was) or written twice (the journal counting both)."""
    audio, rate = sf.read(out / "output.wav", dtype="float32")
    lines = (out / "output.wav.journal").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    written = [r for r in rows if "utt" in r]
    a = written[index - 1]["end"] if index else 0
    b = written[index]["end"]
    if how == "removed":
        audio = np.concatenate([audio[:a], audio[b:]])
    else:
        audio = np.concatenate([audio[:b], audio[a:b], audio[b:]])
        for r in written[index:]:
            r["end"] += b - a
    sf.write(bad / "output.wav", audio, rate, subtype="PCM_16")
    (bad / "output.wav.journal").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_interpret_real_time(tmp_path):
    out, references, proc = run_interpret(tmp_path, corpus_clips()[:2])
    _, _, latency = check_outputs(out, references)
    assert latency["mode"] == "realtime"
    print(json.dumps(latency["summary"], indent=1))
