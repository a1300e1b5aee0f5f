"""Acceptance of mlx-whisper: the packaged Whisper base, converted to MLX, against faster-whisper.

Both engines at their defaults (greedy, 5 s windows, English) on the five LJ Speech clips: the
MLX engine converts the packaged CTranslate2 weights into a fresh models folder on its first
load, then must come within 1 point of faster-whisper's WER and say the same words on at least
4 of the 5 clips. The same converted model then takes a glossary (the names it is told are
heard) and applies Whisper's no-speech rule (noise makes no words), as faster-whisper does in
tests/unit/test_asr_mt.py. The checks run in a process started as the asr actor starts one
(`MlxWhisperEngine.process_env`: OpenBLAS preloaded on Linux), so the test measures what a user
runs and takes ~1 min on 2 cores instead of ~4 with MLX's reference BLAS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import GLOSSARY_LINES, GLOSSARY_NAMES, corpus_clips, read_16k
from voxweft.tools.bench.metrics import normalize_text, wer

pytest.importorskip("mlx.core", reason="mlx is not installed (Linux: pip install 'mlx[cpu]')")
pytest.importorskip("mlx_whisper", reason="mlx-whisper is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _transcribe_all(engine, clips) -> tuple[list[str], list[float]]:
    engine.load()
    texts, seconds = [], []
    for _name, pcm, _ref in clips:
        start = time.perf_counter()
        texts.append(engine.transcribe(pcm, "en"))
        seconds.append(time.perf_counter() - start)
    return texts, seconds


def _as_the_actor_starts(tmp_path, test: str) -> bool:
    """Run `test` of this file again in a process with the environment the asr actor gets
    (OpenBLAS preloaded); False where this process has it already (or there is none)."""
    from voxweft.actors.engines.asr.mlx_whisper import MlxWhisperEngine

    env = MlxWhisperEngine.process_env()
    if all(os.environ.get(k) == v for k, v in env.items()):
        return False
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "--basetemp", str(tmp_path / "actor"), f"{__file__}::{test}"],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=850)
    print(run.stdout[-6000:], run.stderr[-3000:])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    return True


def test_converted_base_hears_what_faster_whisper_hears(tmp_path, monkeypatch):
    from voxweft.actors.engines.asr.faster_whisper import FasterWhisperEngine
    from voxweft.actors.engines.asr.mlx_whisper import MlxWhisperEngine

    if _as_the_actor_starts(tmp_path, "test_converted_base_hears_what_faster_whisper_hears"):
        return

    monkeypatch.setenv("VOXWEFT_MODELS", str(tmp_path))
    clips = [(c.stem, read_16k(c), c.with_suffix(".txt").read_text().strip())
             for c in corpus_clips()]
    refs = [ref for _name, _pcm, ref in clips]
    mlx = MlxWhisperEngine(model="base")
    mlx_texts, mlx_s = _transcribe_all(mlx, clips)
    import mlx.core as mx

    assert mx.set_cache_limit(0) == 256 << 20   # MLX keeps at most 256 MB of freed buffers
    fw_texts, fw_s = _transcribe_all(FasterWhisperEngine(model="base"), clips)
    assert (tmp_path / f"mlx-whisper-base-{mlx.dtype}" / "config.json").is_file()

    same = 0
    for (name, pcm, ref), a, b, ta, tb in zip(clips, mlx_texts, fw_texts, mlx_s, fw_s,
                                             strict=True):
        same += normalize_text(a) == normalize_text(b)
        print(f"{name} ({len(pcm) / 16000:.1f} s): mlx {ta:.2f} s WER "
              f"{wer([ref], [a])['wer']:.3f} {a!r} | faster-whisper {tb:.2f} s WER "
              f"{wer([ref], [b])['wer']:.3f} {b!r}")
    mlx_wer, fw_wer = wer(refs, mlx_texts)["wer"], wer(refs, fw_texts)["wer"]
    print(f"corpus WER: mlx-whisper ({mlx.dtype}, blas {mlx.blas or 'mlx reference'}) "
          f"{mlx_wer:.4f}, faster-whisper {fw_wer:.4f}; same words on {same}/{len(clips)}")
    assert mlx_wer <= fw_wer + 0.01
    assert same >= len(clips) - 1
    assert mlx.fallbacks == 0   # no 5 s window looped on these clips
    # the OpenBLAS the actor's environment preloads is the one in use
    assert bool(mlx.blas) == bool(MlxWhisperEngine.process_env()), mlx.blas

    # Told the first words a clip says (asr's prefix when a piece joins the one before), it
    # returns the words after them, as it heard them without.
    rest = [mlx.transcribe(pcm, "en", prefix=" ".join(a.split()[:3]))
            for (_name, pcm, _ref), a in zip(clips, mlx_texts, strict=True)]
    print("after a prefix:", rest)
    assert sum(normalize_text(r) == normalize_text(" ".join(a.split()[3:]))
               for r, a in zip(rest, mlx_texts, strict=True)) >= len(clips) - 1

    # A glossary: told the bench glossary's terms as its prompt, it hears the names.
    from voxweft.actors.glossary import Glossary
    from voxweft.tools.bench import room, terms

    say = room.reader()
    names = GLOSSARY_NAMES
    speech = [say(line) for line in GLOSSARY_LINES]
    without = [mlx.transcribe(pcm, "en") for pcm in speech]
    mlx.prompt = Glossary.read(terms.files("en", "pt")[0]).prompt()
    told = [mlx.transcribe(pcm, "en") for pcm in speech]
    mlx.prompt = ""
    heard = sum(n in t for n, t in zip(names, told, strict=True))
    print(f"glossary: names heard {heard}/3 with it, "
          f"{sum(n in t for n, t in zip(names, without, strict=True))}/3 without: {told}")
    assert heard >= 2 and heard > sum(n in t for n, t in zip(names, without, strict=True)), \
        (told, without)

    # Whisper's own no-speech rule: noise the VAD let through makes no words.
    import numpy as np

    rng = np.random.default_rng(1)
    noises = [room.white(48000, rng) * 10 ** (-30 / 20), room.pink(48000, rng) * 0.1]
    before = mlx.no_speech
    said = [mlx.transcribe(n.astype(np.float32), "en") for n in noises]
    assert said == ["", ""] and mlx.no_speech - before == 2, said
