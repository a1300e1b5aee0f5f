"""Per-utterance latency from a message's timing trace, and simple summaries."""

from __future__ import annotations

from protocol.messages import Trace, trace_ns

#: (name, from event, to event): each stage's share of the end-to-end time, in pipeline order.
STAGES = (
    ("endpointing", "speech_end", "segment"),        # VAD hangover + post-roll
    ("hop_segmenter_asr", "segment", "asr.recv"),    # includes waiting in the segment queue
    ("asr_wait", "asr.recv", "asr.start"),
    ("asr", "asr.start", "asr.end"),
    ("hop_asr_mt", "asr.end", "mt.recv"),            # a hop counts queueing behind earlier work
    ("mt_wait", "mt.recv", "mt.start"),
    ("mt", "mt.start", "mt.end"),
    ("hop_mt_tts", "mt.end", "tts.recv"),            # includes TTS busy with the previous one
    ("tts_wait", "tts.recv", "tts.start"),
    ("tts_first_chunk", "tts.start", "tts.first"),
    ("hop_tts_player", "tts.first", "play.recv"),
    ("player_wait", "play.recv", "play.start"),      # previous utterance still playing
)


def _span(trace: Trace, a: str, b: str) -> float | None:
    ta, tb = trace_ns(trace, a), trace_ns(trace, b)
    return None if ta is None or tb is None else round((tb - ta) / 1e9, 4)


def utterance_latency(trace: Trace) -> dict:
    """Stage times and headline figures (seconds) from a playback 'started' trace."""
    return {
        "speech_end_to_first_audio_s": _span(trace, "speech_end", "play.start"),
        "segment_to_first_audio_s": _span(trace, "segment", "play.start"),
        "stages_s": {name: _span(trace, a, b) for name, a, b in STAGES},
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
