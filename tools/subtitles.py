"""Subtitles (SRT and WebVTT, written by pysubs2) from utterance texts and media times."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pysubs2

LINE_CHARS = 42        # the usual broadcast limit per subtitle line
LINES_PER_CUE = 2
MIN_CUE_S = 0.8        # a cue shorter than this cannot be read


def cues(utterances: list[dict]) -> list[tuple[float, float, str]]:
    """(start s, end s, text) cues: long texts are split over several cues by length."""
    out = []
    for u in utterances:
        text = " ".join(u["text"].split())
        if not text:
            continue
        start, end = float(u["media_start_s"]), float(u["media_end_s"])
        end = max(end, start + MIN_CUE_S)
        lines = textwrap.wrap(text, LINE_CHARS)
        groups = [lines[i:i + LINES_PER_CUE] for i in range(0, len(lines), LINES_PER_CUE)]
        total = sum(len(" ".join(g)) for g in groups)
        t = start
        for group in groups:
            share = (end - start) * len(" ".join(group)) / total
            out.append((t, t + share, "\n".join(group)))
            t += share
    return out


#: What a translation that was not spoken (too late: actors.lag) is marked with.
NOT_SPOKEN = "[not spoken] "
FORMATS = ("srt", "vtt")


def render(utterances: list[dict], fmt: str) -> str:
    """SRT or WebVTT text of `utterances` (text, media_start_s, media_end_s)."""
    subs = pysubs2.SSAFile()
    for start, end, text in cues(utterances):
        subs.append(pysubs2.SSAEvent(start=round(start * 1000), end=round(end * 1000),
                                     text=text.replace("\n", r"\N")))
    return subs.to_string(fmt)


def write_subtitles(out_dir: Path, lang: str, utterances: list[dict]) -> list[Path]:
    """Write `subtitles.<lang>.srt` and `.vtt`; return their paths."""
    paths = []
    for fmt in FORMATS:
        path = out_dir / f"subtitles.{lang}.{fmt}"
        path.write_text(render(utterances, fmt), encoding="utf-8")
        paths.append(path)
    return paths
