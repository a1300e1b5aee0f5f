"""Per-utterance latency from a message's timing trace, and simple summaries."""

from __future__ import annotations

from voxweft.protocol.messages import Trace, trace_ns

#: The stages of one utterance in pipeline order: (previous stage's event, stage prefix,
#: compute start event, compute end event). Each hop from one actor to the next is split into
#: its transit on the bus and its queueing (the actor was still busy with earlier work).
HOPS = (
    ("segment", "asr", "asr.start", "asr.end"),
    ("asr.end", "mt", "mt.start", "mt.end"),
    ("mt.end", "tts", "tts.start", "tts.first"),
)
_PREVIOUS = {"asr": "segmenter", "mt": "asr", "tts": "mt"}

#: Stage names in order; their times add up to end of speech -> first audio.
STAGES = ("endpointing",
          "hop_segmenter_asr", "asr_queue", "asr",
          "hop_asr_mt", "mt_queue", "mt",
          "hop_mt_tts", "tts_queue", "tts_first_chunk",
          "hop_tts_player", "player_wait")


def _span(trace: Trace, a: str, b: str) -> float | None:
    ta, tb = trace_ns(trace, a), trace_ns(trace, b)
    return None if ta is None or tb is None else round((tb - ta) / 1e9, 4)


def _hop(trace: Trace, sent: str, stage: str) -> tuple[float | None, float | None]:
    """(transit, queueing) in s of the message `sent` at event `sent`, taken by `stage`.

    The receiver stamps when it became free ("<stage>.ready") and when it read the message
    ("<stage>.recv"): the message was on the wire until max(sent, ready) and queued after.
    Without a ready event (an older sender) all of it counts as transit.
    """
    t_sent, t_recv = trace_ns(trace, sent), trace_ns(trace, f"{stage}.recv")
    if t_sent is None or t_recv is None:
        return None, None
    t_ready = trace_ns(trace, f"{stage}.ready")
    free = max(t_sent, t_ready) if t_ready is not None else t_sent
    free = min(free, t_recv)
    return round((t_recv - free) / 1e9, 4), round((free - t_sent) / 1e9, 4)


def stage_times(trace: Trace) -> dict[str, float | None]:
    """Seconds spent in each of STAGES, from a playback 'started' trace."""
    out: dict[str, float | None] = {"endpointing": _span(trace, "speech_end", "segment")}
    for sent, stage, start, end in HOPS:
        transit, queued = _hop(trace, sent, stage)
        waited = _span(trace, f"{stage}.recv", start)   # read, not yet started: ~0
        out[f"hop_{_PREVIOUS[stage]}_{stage}"] = transit
        out[f"{stage}_queue"] = None if queued is None or waited is None else \
            round(queued + waited, 4)
        out["tts_first_chunk" if stage == "tts" else stage] = _span(trace, start, end)
    transit, queued = _hop(trace, "tts.first", "play")
    out["hop_tts_player"] = transit
    # The player's share: queueing behind the previous utterance plus its jitter buffer.
    waited = _span(trace, "play.recv", "play.start")
    out["player_wait"] = None if queued is None or waited is None else round(queued + waited, 4)
    return {name: out[name] for name in STAGES}


def utterance_latency(trace: Trace) -> dict:
    """Stage times and headline figures (seconds) from a playback 'started' trace."""
    return {
        "speech_end_to_first_audio_s": _span(trace, "speech_end", "play.start"),
        "segment_to_first_audio_s": _span(trace, "segment", "play.start"),
        "stages_s": stage_times(trace),
    }


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    pos = (len(values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return round(values[lo] + (values[hi] - values[lo]) * (pos - lo), 4)


def summarize(values: list[float]) -> dict:
    """p50, p95 and max of a list of seconds."""
    present = [v for v in values if v is not None]
    return {"n": len(present), "p50": percentile(present, 50), "p95": percentile(present, 95),
            "max": round(max(present), 4) if present else None}
