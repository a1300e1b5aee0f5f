"""voxweft voicecheck: the voice modes compared on the tiny model; its judge, on real voices."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import tomllib

import numpy as np
import pytest
import soundfile as sf
import soxr
import tomli_w

from tests.conftest import ROOT, VOXWEFT, corpus_clips
from tests.unit.tiny_voxcpm2 import build_tiny_voxcpm2
from voxweft.actors import engines

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(importlib.util.find_spec("resemblyzer") is None,
                                 reason="resemblyzer is not installed (tools/install.sh)")]


@pytest.fixture(scope="module")
def judge():
    from voxweft.tools.voicecheck import _Judge

    asr = engines.build("asr", "faster-whisper", {"model": "base"})
    asr.load()
    return _Judge(asr)


def _read(path):
    audio, rate = sf.read(str(path), dtype="float32")
    return soxr.resample(audio, rate, 16000) if rate != 16000 else audio


def test_the_judge_tells_the_speaker_from_other_voices_and_hears_the_language(judge):
    from voxweft.tools.voicecheck import _similarity

    a, b = (_read(p) for p in corpus_clips()[3:5])       # the same LJ speaker, twice
    kokoro = engines.build("tts", "kokoro", {"voice": "pm_alex"})   # another voice: a man
    kokoro.load()
    pt = np.concatenate(list(kokoro.synthesize(
        "O mercado de ações subiu hoje depois que o banco cortou os juros.", "pt")))
    other = soxr.resample(pt, kokoro.sample_rate, 16000)
    same = _similarity(judge.embed(a), judge.embed(b))
    different = _similarity(judge.embed(a), judge.embed(other))
    assert same > 0.7 and different < same - 0.15, (same, different)   # seen: 0.80 vs 0.50
    assert max(judge.language(a).items(), key=lambda kv: kv[1])[0] == "en"
    assert judge.language(other)["pt"] > 0.9


def test_voicecheck_compares_the_three_modes(tmp_path):
    if importlib.util.find_spec("voxcpm") is None:
        pytest.skip("voxcpm is not installed (tools/install.sh)")
    model = build_tiny_voxcpm2(tmp_path / "tiny")
    raw = tomllib.loads((ROOT / "deploy" / "default.toml").read_text(encoding="utf-8"))
    raw["actors"]["tts"].update(engine="voxcpm2", threads=1, settings={
        "backend": "torch", "model": str(model), "inference_timesteps": 2, "seed": 1})
    topology = tmp_path / "t.toml"
    topology.write_text(tomli_w.dumps(raw), encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.run([*VOXWEFT, "voicecheck", "--topology", str(topology), "--corpus",
                           str(corpus_clips()[0].parent), "--out", str(out), "--limit", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "voicecheck.json").read_text(encoding="utf-8"))
    assert set(report["modes"]) == {"default", "reference", "prompt"}
    assert len(report["rows"]) == 6 and all(r["seconds"] > 0 for r in report["rows"])
    assert report["anchors"]["same_speaker_similarity"] > 0.7
    assert "choice" in report and "| reference |" in (out / "voicecheck.md").read_text()

    kokoro = tmp_path / "k.toml"
    raw["actors"]["tts"].update(engine="kokoro", settings={})
    kokoro.write_text(tomli_w.dumps(raw), encoding="utf-8")
    proc = subprocess.run([*VOXWEFT, "voicecheck", "--topology", str(kokoro), "--corpus",
                           str(corpus_clips()[0].parent)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "compares VoxCPM2's voice modes" in proc.stderr
    assert "Traceback" not in proc.stderr
