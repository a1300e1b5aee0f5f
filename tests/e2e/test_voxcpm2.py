"""VoxCPM2 in the whole pipeline, both backends, on a tiny random-weight model built here.

A file in, the speaker's voice taken from the file's own speech (segmenter -> tts, raw PCM),
48 kHz audio out in output.wav. Random weights speak no words, so what is checked is the
plumbing a real model relies on: streamed chunks, the reference voice, the 48 kHz sink.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib

import numpy as np
import pytest
import soundfile as sf
import tomli_w

from tests.conftest import ROOT, VOXWEFT, corpus_clips, write_session
from tests.unit.tiny_voxcpm2 import build_tiny_voxcpm2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _topology(tmp_path, backend: str):
    model = build_tiny_voxcpm2(tmp_path / "voxcpm2-tiny")
    raw = tomllib.loads((ROOT / "deploy" / "default.toml").read_text(encoding="utf-8"))
    raw["actors"]["tts"].update(engine="voxcpm2", threads=1, settings={
        "backend": backend, "model": str(model), "voice": "speaker", "inference_timesteps": 2,
        "seed": 7})
    path = tmp_path / "voxcpm2.toml"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_voxcpm2_speaks_in_the_speakers_voice(tmp_path, backend):
    package = "voxcpm" if backend == "torch" else "mlx_audio"
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (tools/install.sh installs it)")
    topology = _topology(tmp_path, backend)
    session = tmp_path / "session.wav"
    references = write_session(session, corpus_clips()[:3])
    out = tmp_path / "out"
    proc = subprocess.run([*VOXWEFT, "interpret", "--topology", str(topology), "--input",
                           str(session), "--out", str(out), "--src", "en", "--tgt", "pt",
                           "--fast"], cwd=ROOT, capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    audio, rate = sf.read(out / "output.wav", dtype="float32")
    assert rate == 48000                      # the engine's rate, nothing resampled away
    assert np.sqrt(np.mean(audio ** 2)) > 0.01, "output.wav is silent"

    log = (out / "logs" / "tts.log").read_text(encoding="utf-8")
    spoken = re.findall(r"tts: (\S+) (\d+) chunk\(s\), ([\d.]+) s of speech", log)
    assert len(spoken) >= len(references), log[-3000:]
    assert all(float(seconds) > 0 for _, _, seconds in spoken)
    if backend == "torch":    # streamed: several chunks for an utterance
        assert max(int(n) for _, n, _ in spoken) > 1, spoken
    # The reference is the file's own speech: 3-10 s of it by the last utterance.
    voices = re.findall(r"in the speaker's voice \(([\d.]+) s of (\S+)\)", log)
    assert voices, log[-3000:]
    assert all(3.0 <= float(s) <= 10.0 for s, _ in voices), voices
