"""`voxweft up` checks memory before anything loads: one line, and nothing started."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import tomli_w

from voxweft.deploy.topology import load


def _topology_with_voice_model(tmp_path, gigabytes: int):
    """The default topology with VoxCPM2 (torch) tts whose weights are `gigabytes` big.

    The weights file is sparse: it takes no disk, but has the size of a model that big.
    """
    model = tmp_path / "voxcpm2"
    model.mkdir()
    with open(model / "model.safetensors", "wb") as f:
        f.truncate(gigabytes * 1_000_000_000)
    raw = copy.deepcopy(load(None).raw)
    for actor, port in zip(raw["actors"], range(47951, 47960), strict=False):
        raw["actors"][actor]["port"] = port
    raw["actors"]["segmenter"]["push_port"] = 47960
    raw["actors"]["tts"].update(engine="voxcpm2", settings={"backend": "torch",
                                                            "model": str(model)})
    path = tmp_path / "topology.toml"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path


def _up(path, run_dir):
    return subprocess.run([sys.executable, "-m", "voxweft.tools.cli", "up", "--topology",
                           str(path), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_up_refuses_a_topology_bigger_than_the_machine_before_anything_starts(tmp_path):
    import psutil

    total_gb = psutil.virtual_memory().total / 1e9
    path = _topology_with_voice_model(tmp_path, int(total_gb) + 1)
    run_dir = tmp_path / "run"
    done = _up(path, run_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("voxweft: up: memory on local: asr 0.6 + mt 0.2 + tts ")
    assert "does NOT fit" in lines[0]
    assert 'tts (voxcpm2) needs the most: settings.model = "voxcpm2-mlx-4bit"' in lines[0]
    assert "supervisord started" not in done.stdout
    assert not (run_dir / "supervisord.conf").exists()     # nothing written, nothing started
