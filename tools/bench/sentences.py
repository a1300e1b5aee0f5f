"""The sentences of a bench session: the pieces asr committed, joined as mt joined them.

asr commits a sentence in pieces while the speaker speaks (`actors.asr`); mt translates
each piece as the sentence so far (`actors.phrases`). The listener hears sentences, so the
bench scores them whole: which pieces make one (`group`, mt's own rule replayed), the holes
and jumps where one piece of a sentence hands over to the next (`joins`), and each
sentence's start and end offsets (`offsets`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from voxweft.actors.phrases import Sentence
from voxweft.tools.bench import metrics as benchmetrics
from voxweft.tools.bench.utterances import voiced_bounds
from voxweft.tools.latency import summarize

#: Where one piece hands over to the next without silence between them, a step between the
#: last sample of one and the first of the next larger than this (about -26 dBFS) is a click.
CLICK_STEP = 0.05
#: A hole inside a sentence: the player waited this long (s) for the next piece, or longer.
HOLE_S = 0.02

Piece = tuple[str, float, float, str, str]   # (utt, media start s, end s, source, translation)


def group(pieces: Iterable[Piece]) -> list[list[str]]:
    """The sentences of the committed pieces, in commit order: lists of utterance ids.

    A piece goes on the sentence before it exactly when mt would translate it as that
    sentence's continuation (`actors.phrases.Sentence`: it starts where the last ended and
    the last did not end a sentence). A piece with no transcript starts its own sentence.
    """
    out: list[list[str]] = []
    sentence = Sentence()
    for utt, start, end, source, translation in pieces:
        if start is None or end is None or not source:
            sentence = Sentence()
            out.append([utt])
            continue
        sources, _said = sentence.before(start)
        if sources and out:
            out[-1].append(utt)
        else:
            out.append([utt])
        sentence.add(start, end, source, translation or "")
    return out


def joins(sentences: Sequence[Sequence[str]], played: dict[str, tuple[float, float]],
          speech: dict[str, tuple[np.ndarray, int]]) -> dict:
    """Where a sentence's pieces hand over, what the listener hears.

    `played`: utt -> (wall s its first sample was heard, wall s its last one was);
    `speech`: utt -> (its audio as tts sent it, rate). For each join of two pieces of one
    sentence, both played: `wait_s`, how long the player had nothing to play (the next
    piece started after the last one ended: a hole, when at least HOLE_S); `silence_s`,
    the silence heard between the last voiced sound of one and the first of the next (the
    wait plus the quiet the voice put at their ends); and where nothing was waited for, the
    `step` from one piece's last sample to the next one's first (a click above CLICK_STEP;
    the device sink fades audio where it runs dry, so a wait never clicks).
    """
    waits, silences, steps = [], [], []
    for sentence in sentences:
        for a, b in zip(sentence, sentence[1:], strict=False):
            if a not in played or b not in played:
                continue
            wait = max(0.0, played[b][0] - played[a][1])
            waits.append(wait)
            if a in speech and b in speech:
                va, vb = voiced_bounds(*speech[a]), voiced_bounds(*speech[b])
                if va and vb:
                    silences.append(va[1] + wait + vb[0])
                if wait < HOLE_S and len(speech[a][0]) and len(speech[b][0]):
                    steps.append(abs(float(speech[b][0][0]) - float(speech[a][0][-1])))
    holes = [w for w in waits if w >= HOLE_S]
    return {
        "joins": len(waits),
        "holes": len(holes), "hole_s_total": round(sum(holes), 3),
        "hole_s_max": round(max(holes), 3) if holes else 0.0,
        "silence_s": summarize(silences),
        "clicks": sum(1 for s in steps if s > CLICK_STEP),
        "step_max": round(max(steps), 4) if steps else None,
    }


def offsets(sentences: Sequence[Sequence[str]], rows: dict[str, dict],
            played: dict[str, tuple[float, float]], spoken: dict[str, tuple[float, float]],
            ) -> dict:
    """Per sentence, each its own source (SimulEval's sentence-level view): p50 and mean.

    `rows`: utt -> its report row (`media_end_s`, `translation`, `played_s`); `played`:
    utt -> wall s (first heard, last heard); `spoken`: utt -> wall s its speech started and
    ended (the segmenter's events). A sentence's source runs from its first piece's speech
    start to its last piece's speech end; its pieces are output segments emitted when they
    were heard (computation aware) or when their source was read (the piece's speech end).
    Keys: `sentences`, and per figure of `metrics.longform` (`start_offset_s`,
    `end_offset_s`, `laal_ca_s`, `start_offset_nca_s`, `end_offset_nca_s`, `laal_s`)
    `{p50, mean}`.
    """
    per: dict[str, list[float]] = {}
    n = 0
    for sentence in sentences:
        heard = [u for u in sentence if u in played and u in spoken and rows[u]["translation"]
                 and rows[u].get("played_s") is not None]
        if not heard:
            continue
        a, b = spoken[heard[0]][0], spoken[heard[-1]][1]
        if b <= a:
            continue
        segments = [(played[u][0] - a, rows[u]["played_s"], len(rows[u]["translation"].split()))
                    for u in heard]
        read = [max(0.0, spoken[u][1] - a) for u in heard]
        one = benchmetrics.longform(b - a, segments, read_s=read)
        n += 1
        for key in ("start_offset_s", "end_offset_s", "laal_ca_s", "start_offset_nca_s",
                    "end_offset_nca_s", "laal_s"):
            if one[key] is not None:
                per.setdefault(key, []).append(one[key])
    out: dict = {"sentences": n}
    for key, values in per.items():
        out[key] = {"p50": summarize(values)["p50"], "mean": round(float(np.mean(values)), 3)}
    return out
