"""The bench's own bookkeeping: the session it builds, where utterances belong, its spans."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tools.bench import (
    LEAD_S,
    BenchError,
    _assign,
    _pipeline_s,
    build_session,
    corpus_items,
)

S = 1_000_000_000


def _corpus(tmp_path):
    for name, seconds, rate in (("a", 1.0, 16000), ("b", 0.5, 22050)):
        sf.write(str(tmp_path / f"{name}.wav"), np.full(int(seconds * rate), 0.1, np.float32),
                 rate)
    (tmp_path / "a.txt").write_text("hello there\n")
    (tmp_path / "a.pt.txt").write_text("olá\n")
    (tmp_path / "readme.md").write_text("not audio")
    return tmp_path


def test_corpus_items_and_references(tmp_path):
    items = corpus_items(_corpus(tmp_path), "pt")
    assert [i.name for i in items] == ["a", "b"]
    assert items[0].ref_text == "hello there" and items[0].ref_translation == "olá"
    assert items[1].ref_text is None and items[1].ref_translation is None
    assert [i.name for i in corpus_items(tmp_path, "pt", limit=1)] == ["a"]
    with pytest.raises(BenchError, match="not a folder"):
        corpus_items(tmp_path / "a.txt", "pt")


def test_session_layout_and_soak_looping(tmp_path):
    items = corpus_items(_corpus(tmp_path), "pt")
    placed, duration = build_session(items, 1.0, None, tmp_path / "s.wav")
    # 0.5 lead, a 1.0 s, pause 1.0, b 0.5 s (resampled from 22.05 kHz), pause 1.0
    assert [(p.item.name, p.start_s, p.end_s) for p in placed] == [
        ("a", LEAD_S, 1.5), ("b", 2.5, 3.0)]
    assert duration == pytest.approx(4.0)
    audio, rate = sf.read(str(tmp_path / "s.wav"))
    assert rate == 16000 and len(audio) == 4 * 16000
    assert abs(audio[int(0.7 * rate)] - 0.1) < 1e-3 and audio[int(1.7 * rate)] == 0
    placed, duration = build_session(items, 1.0, 0.2, tmp_path / "soak.wav")   # >= 12 s
    assert len(placed) == 8 and duration == pytest.approx(14.5)   # whole loops of 3.5 s
    assert placed[2].item.name == "a" and placed[2].start_s == pytest.approx(4.0)


def test_utterances_go_to_the_file_they_overlap_most():
    from tools.bench import Item, Placed

    a, b = Item("a", None, None, None), Item("b", None, None, None)
    placed = [Placed(a, 0.5, 1.5), Placed(b, 2.5, 3.0)]
    assert _assign(placed, 0.3, 1.8) == 0          # pre-roll and hangover around a
    assert _assign(placed, 1.2, 2.9) == 1          # more of b than of a
    assert _assign(placed, 1.6, 2.4) is None       # in the pause


def test_pipeline_span_leaves_out_queueing():
    trace = (("segment", 10 * S, None), ("play.recv", 12 * S, None))
    stages = {"asr_queue": 0.25, "mt_queue": 0.0, "tts_queue": 0.5}
    assert _pipeline_s(trace, stages) == 1.25
    assert _pipeline_s((("segment", 0, None),), stages) is None
