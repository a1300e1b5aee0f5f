"""Long speech without pauses is split near pauses, and nothing said is lost (real VAD+ASR)."""

from __future__ import annotations

import re

import jiwer
import numpy as np

from tests.conftest import corpus_clips, read_16k
from tests.unit.helpers import run_actor
from tests.unit.test_actors import frames_of
from voxweft.actors.engines.asr.faster_whisper import FasterWhisperEngine
from voxweft.actors.segmenter import SegmenterActor
from voxweft.deploy.topology import load
from voxweft.protocol.messages import EndOfStream, Segment


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def test_speech_without_pauses_is_split_near_pauses_and_transcribed_whole():
    clips = corpus_clips()[:3]
    speech = np.concatenate([read_16k(c) for c in clips])   # ~13 s, no silence between
    reference = " ".join(c.with_suffix(".txt").read_text().strip() for c in clips)
    stream = np.concatenate([np.zeros(8000, np.float32), speech, np.zeros(16000, np.float32)])
    topo = load(None).with_overrides({"actors": {"segmenter": {"max_segment_s": 6.0}}})
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    out = run_actor(seg, frames_of(stream) + [EndOfStream(media_s=len(stream) / 16000)],
                    src="capture")
    segments = [m for m in out if isinstance(m, Segment) and m.final]
    assert len(segments) >= 3 and all(s.duration_s <= 6.0 + 1e-6 for s in segments)
    # pieces are contiguous: no sample lost between a forced cut and the next piece
    for a, b in zip(segments, segments[1:], strict=False):
        assert b.media_start_s <= a.media_end_s + 0.5

    asr = FasterWhisperEngine(threads=2)
    asr.load()
    hypothesis = " ".join(asr.transcribe(s.pcm, "en") for s in segments)
    wer = jiwer.wer(normalize(reference), normalize(hypothesis))
    assert wer < 0.2, (wer, hypothesis)
