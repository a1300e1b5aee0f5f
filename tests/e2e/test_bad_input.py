"""Bad input as a new user would bring it: clear errors, no crash loops, nothing lost."""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import ROOT, VOXWEFT, corpus_clips, read_16k
from voxweft.deploy.supervisor import BusWatcher
from voxweft.deploy.topology import load

pytestmark = pytest.mark.timeout(600)


def interpret(*args, timeout=500):
    return subprocess.run([*VOXWEFT, "interpret", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def sentences(out) -> list[dict]:
    """transcript.jsonl's rows, a sentence's pieces joined: one committed up to a pause inside
    it comes in pieces (`goes_on`; beside two CPU hogs one did), one sentence at the first
    piece's time."""
    rows: list[dict] = []
    for row in (json.loads(x) for x in (out / "transcript.jsonl").read_text().splitlines()):
        if rows and rows[-1].get("goes_on"):
            rows[-1] = {**row, "media_start_s": rows[-1]["media_start_s"],
                        "text": f"{rows[-1]['text']} {row['text']}"}
        else:
            rows.append(row)
    return rows


def test_text_file_renamed_wav_is_refused_before_anything_starts(tmp_path):
    fake = tmp_path / "notes.wav"
    fake.write_text("this is not audio\n" * 50)
    proc = interpret("--input", str(fake), "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 2
    assert "cannot read" in proc.stderr and "WAV, FLAC" in proc.stderr
    assert not (tmp_path / "out" / "logs").exists()   # no actor was started


def test_missing_input_and_unknown_language_codes(tmp_path):
    missing = interpret("--input", str(tmp_path / "nope.wav"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "not found" in missing.stderr
    clip = tmp_path / "clip.wav"
    sf.write(clip, np.zeros(1600, np.float32), 16000)
    for flags, expected in ((["--src", "xx"], "cannot do xx"),
                            (["--tgt", "de"], "en->pt, pt->en"),
                            (["--src", "english"], "two-letter")):
        proc = interpret("--input", str(clip), "--out", str(tmp_path / "o"), *flags, timeout=60)
        assert proc.returncode != 0 and expected in proc.stderr, proc.stderr


@pytest.mark.slow
def test_ten_minutes_of_silence_then_speech_at_48k_stereo_float(tmp_path):
    # 10 minutes of room noise and one sentence at the very end, as 48 kHz float stereo:
    # the pipeline must not invent utterances from the noise nor lose the sentence.
    rng = np.random.default_rng(1)
    speech = read_16k(corpus_clips()[3])
    import soxr

    speech48 = soxr.resample(speech, 16000, 48000)
    noise = (rng.standard_normal(48000 * 600) * 0.002).astype(np.float32)
    mono = np.concatenate([noise, speech48, np.zeros(48000, np.float32)])
    path = tmp_path / "long.wav"
    sf.write(path, np.stack([mono, mono], axis=1), 48000, subtype="FLOAT")
    out = tmp_path / "out"
    proc = interpret("--input", str(path), "--out", str(out), "--fast")
    assert proc.returncode == 0, proc.stderr
    rows = sentences(out)
    assert len(rows) == 1 and "surpassed" in rows[0]["text"].lower(), rows
    assert rows[0]["media_start_s"] > 599


@pytest.mark.slow
@pytest.mark.timeout(900)   # above the test's own 580 + 60 s, which fail with what they saw
def test_thirty_minute_recording_keeps_every_utterance_at_its_time(tmp_path):
    # Half an hour of quiet room noise with a sentence every five minutes: bounded memory
    # (the file is read in blocks), every sentence found, at the right media time.
    rng = np.random.default_rng(2)
    clips = corpus_clips()
    total_s, every_s = 1800, 300
    audio = (rng.standard_normal(16000 * total_s) * 0.002).astype(np.float32)
    placed = []
    for n, at in enumerate(range(60, total_s - 30, every_s)):
        speech = read_16k(clips[n % len(clips)])
        audio[at * 16000:at * 16000 + len(speech)] += speech
        placed.append((at, clips[n % len(clips)]))
    path = tmp_path / "half-hour.wav"
    sf.write(path, audio, 16000, subtype="PCM_16")
    del audio
    out = tmp_path / "out"
    run_root = tmp_path / "runs"
    run_root.mkdir()
    proc = subprocess.Popen([*VOXWEFT, "interpret", "--input", str(path), "--out", str(out),
                             "--fast"], cwd=ROOT, env={**os.environ, "TMPDIR": str(run_root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # Memory, from the actors' own heartbeats: what each had once ready, and the most it ever
    # had (peak RSS); the whole file is 57 MB as 16-bit samples, 115 MB as float32.
    early, peak, watcher = {}, {}, None
    deadline = time.monotonic() + 580
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if watcher is None:
                tops = list(run_root.glob("*/topology.toml"))
                watcher = BusWatcher(load(tops[0])) if tops else None
                time.sleep(0.5)
                continue
            watcher.poll(0.5)
            for actor in ("capture", "segmenter"):
                said = watcher.latest.get(actor)
                if said and said.resources and said.state == "ready":
                    early.setdefault(actor, said.resources["rss_kb"])
                    peak[actor] = said.resources["peak_rss_kb"]
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        if watcher:
            watcher.close()
    assert proc.returncode == 0, stderr
    assert set(early) == set(peak) == {"capture", "segmenter"}, (early, peak)
    for actor in early:   # bounded: it never held a good part of the file
        assert peak[actor] - early[actor] < 20 * 1024, (actor, early[actor], peak[actor])
    rows = sentences(out)
    assert len(rows) == len(placed), [(r["media_start_s"], r["text"]) for r in rows]
    for row, (at, clip) in zip(rows, placed, strict=True):
        assert abs(row["media_start_s"] - at) < 0.5, (row, at)
        reference = set(clip.with_suffix(".txt").read_text().lower().split())
        assert len(reference & set(row["text"].lower().replace(",", "").split())) >= 2
