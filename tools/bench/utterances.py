"""Each utterance of a bench session in figures: the report's `utterances` and `ignored`.

From what the bus carried (`run.BenchCollector`), one row per utterance committed: the
corpus file it belongs to, its text and translation, its latency and stage times, when its
first voiced sample was heard, and the work the in-process floor also does, as the pipeline
did it (on a draft, for a stage that took one). And each stretch of speech the segmenter
did not interpret, placed in the corpus the same way. The session's figures are made from
these rows (`score`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from voxweft.protocol.messages import Transcript, Translation, trace_ns
from voxweft.tools.captions.room import speech_seconds
from voxweft.tools.latency import STAGES, stage_times, utterance_latency

if TYPE_CHECKING:   # run imports the scoring: its types only for the annotations
    from voxweft.tools.bench.run import BenchCollector, Placed

#: A 10 ms window of played speech louder than this (RMS, about -40 dBFS) is voiced.
VOICED_RMS = 0.01
#: The floor's work on an utterance as the pipeline does it: each stage's compute and the hop
#: that brought it its input (`tools.latency` stage names); then the hop to the player.
WORK = {"asr": ("hop_segmenter_asr", "asr"), "mt": ("hop_asr_mt", "mt"),
        "tts": ("hop_mt_tts", "tts_first_chunk")}


def session_start_ns(collected: BenchCollector) -> int | None:
    """Wall ns of session media time 0, from any trace's capture event."""
    for msg in list(collected.transcripts.values()) + list(collected.started.values()):
        for name, wall, media in msg.trace:
            if name == "capture" and media is not None:
                return wall - int(media * 1e9)
    return None


def utterance_rows(collected: BenchCollector, placed: list[Placed], floor: dict,
                   t0_ns: int | None) -> list[dict]:
    """One row per utterance committed, in commit order: what it was and how long it took.

    `floor`: the in-process floor's results (its `floor` and `back` per utterance); `t0_ns`:
    the session's start (`session_start_ns`), for `wall_s`, when its speech ended.
    """
    floor_rows = floor.get("floor", {})
    rows = []
    for utt in collected.committed:
        t = collected.transcripts.get(utt)
        tr = collected.translations.get(utt)
        ev = collected.started.get(utt) or collected.ended.get(utt)
        where = _assign(placed, t.media_start_s, t.media_end_s) if t else None
        lat = utterance_latency(ev.trace) if ev else {
            "speech_end_to_first_audio_s": None, "segment_to_first_audio_s": None,
            "stages_s": dict.fromkeys(STAGES)}
        speech_end = trace_ns(ev.trace if ev else (t.trace if t else ()), "speech_end")
        f = floor_rows.get(utt, {})
        # Stages that took work done ahead on a draft (speculative endpointing).
        drafted = [s for s in ("asr", "mt", "tts") if ev and trace_ns(ev.trace, f"{s}.draft")]
        taken = _drafts_taken(collected, utt, drafted)
        work = _work(lat["stages_s"], drafted, taken) if ev else {}
        rows.append({
            "utt": utt, "file": placed[where].item.name if where is not None else None,
            "placed": where,
            "media_start_s": round(t.media_start_s, 3) if t else None,
            "media_end_s": round(t.media_end_s, 3) if t else None,
            "speech_s": _round(speech_seconds(t.trace if t else ev.trace if ev else ())),
            "text": t.text if t else None, "translation": tr.text if tr else None,
            # What the round trip heard of the sentence this piece begins (None on its
            # other pieces: the sentence is heard whole, `sentences`)
            "back_text": floor.get("back", {}).get(utt),
            "played": utt in collected.started, "speed": collected.speed.get(utt),
            # False: the player gave up on it part of the way (a chunk came too late)
            "complete": collected.ended[utt].complete if utt in collected.ended else None,
            # Holes heard inside it: a chunk came after the one before had played
            "underruns": collected.ended[utt].underruns if utt in collected.ended else None,
            "underrun_s": collected.ended[utt].underrun_s if utt in collected.ended else None,
            "not_spoken": collected.unspoken(utt), **lat,
            "speech_end_to_first_voiced_s": _first_voiced(collected, utt,
                                                          lat["speech_end_to_first_audio_s"]),
            "drafted": drafted,
            # What the floor does, as the pipeline did it (on a draft, for a stage that took it)
            "pipeline_s": _pipeline_s(lat["stages_s"], drafted, taken) if ev else None,
            "pipeline_stages_s": {k: work.get(k) for k in ("asr", "mt", "tts_first_chunk")},
            "floor_s": f.get("total"),
            "floor_stages_s": {k: f.get(k) for k in ("asr", "mt", "tts_first_chunk")},
            "wall_s": round((speech_end - t0_ns) / 1e9, 3) if speech_end and t0_ns else None,
            "played_s": _played_s(collected, utt),
        })
    return rows


def ignored_stretches(collected: BenchCollector, placed: list[Placed]) -> list[dict]:
    """Each stretch of speech the segmenter did not interpret, in session order.

    `file`: the corpus file it overlaps most (None: in a pause), `start_s`: where it starts
    in that file (media time), `session_s`: where in the session, `length_s`, `reason`.
    """
    out = []
    for stretch in collected.stretches_ignored():
        a, b = stretch["media_start_s"], stretch["media_end_s"]
        where = _assign(placed, a, b)
        out.append({"file": placed[where].item.name if where is not None else None,
                    "start_s": round(a - placed[where].start_s, 3) if where is not None
                    else None,
                    "session_s": a, "length_s": stretch["length_s"],
                    "reason": stretch["reason"]})
    return out


def _assign(placed: list[Placed], start_s: float, end_s: float) -> int | None:
    """Index of the placed file this utterance overlaps most (None: none)."""
    best, best_overlap = None, 0.0
    for i, p in enumerate(placed):
        overlap = min(end_s, p.end_s) - max(start_s, p.start_s)
        if overlap > best_overlap:
            best, best_overlap = i, overlap
    return best


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def voiced_bounds(audio: np.ndarray, rate: int) -> tuple[float, float] | None:
    """(lead, tail): the seconds of silence audio starts and ends with (None: all silent).

    Silence: 10 ms windows no louder than VOICED_RMS.
    """
    win = max(1, rate // 100)
    n = len(audio) // win
    if n == 0:
        return None
    rms = np.sqrt(np.mean(audio[:n * win].reshape(n, win) ** 2, axis=1))
    loud = np.flatnonzero(rms > VOICED_RMS)
    if not loud.size:
        return None
    return float(loud[0] * win / rate), float((len(audio) - (loud[-1] + 1) * win) / rate)


def _first_voiced(collected: BenchCollector, utt: str, first_audio_s: float | None,
                  ) -> float | None:
    """End of speech -> the first *voiced* sample heard.

    That is the first audio plus the silence its speech begins with (`voiced_bounds`; all
    of it when none is voiced).
    """
    chunks = collected.speech.get(utt)
    if first_audio_s is None or not chunks:
        return None
    audio, rate = np.concatenate(chunks), collected.speech_rate[utt]
    if len(audio) < max(1, rate // 100):
        return None
    bounds = voiced_bounds(audio, rate)
    lead = bounds[0] if bounds else len(audio) / rate
    return round(float(first_audio_s) + lead, 3)


def _drafts_taken(collected: BenchCollector, utt: str, drafted: list[str]) -> dict:
    """The traces of the drafts asr and mt took for the utterance: {stage: trace}.

    asr takes the draft of the same speech (its transcript's speech end and text), mt the
    draft translation of the same text; the last such one, as the stage keeps the last.
    """
    t, tr = collected.transcripts.get(utt), collected.translations.get(utt)
    speech_end = _media(t.trace, "speech_end") if t else None
    out: dict = {}
    for msg in reversed(collected.drafts.get(utt, ())):
        if ("asr" in drafted and "asr" not in out and t and isinstance(msg, Transcript)
                and msg.text == t.text and _media(msg.trace, "speech_end") == speech_end):
            out["asr"] = msg.trace
        elif ("mt" in drafted and "mt" not in out and tr and isinstance(msg, Translation)
              and (msg.source_text, msg.text) == (tr.source_text, tr.text)):
            out["mt"] = msg.trace
    return out


def _media(trace, event: str) -> float | None:
    """Media time of the last `event` in a trace (None when absent)."""
    return next((m for name, _wall, m in reversed(trace) if name == event), None)


def _work(stages: dict, drafted: list[str] = (), drafts: dict | None = None) -> dict:
    """The floor's work on one utterance as the pipeline did it: {WORK key: s or None}.

    `stages`: the utterance's stage times (at the commit). A stage that took its draft did
    its work on the draft: its figures come from the trace of the draft message it made
    (`drafts`: asr's transcript, mt's translation); tts's draft is not on the bus (None).
    """
    drafts = drafts or {}
    out = {"hop_tts_player": stages.get("hop_tts_player")}
    for stage, keys in WORK.items():
        source = (stages if stage not in drafted else
                  stage_times(drafts[stage]) if stage in drafts else {})
        out.update({key: source.get(key) for key in keys})
    return out


def _pipeline_s(stages: dict, drafted: list[str] = (), drafts: dict | None = None,
                ) -> float | None:
    """What the floor does, done by separate processes: the sum of `_work`.

    Each stage's compute and the bus hop that brought it its input, and the hop to the
    player; queueing behind earlier work is left out. None when a part was not seen.
    """
    parts = _work(stages, drafted, drafts).values()
    return None if None in parts else round(sum(parts), 4)


def _played_s(collected: BenchCollector, utt: str) -> float | None:
    """How long the player played the utterance's speech (None when not seen whole)."""
    start, end = collected.started.get(utt), collected.ended.get(utt)
    if not start or not end:
        return None
    a, b = trace_ns(start.trace, "play.start"), trace_ns(end.trace, "play.end")
    return round((b - a) / 1e9, 3) if a and b else None
