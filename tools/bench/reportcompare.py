"""The comparison of two ``voxweft bench`` reports: each figure old -> new, regressions marked."""

from __future__ import annotations

from typing import Any

from voxweft.tools.bench.reportformat import HEADLINES, SCHEMA, as_dict, fmt, get

#: compare(): a latency, bus, RSS or CPU figure that rose by more than this fraction regressed.
COST_TOLERANCE = 0.10

#: compare(): the marker appended to a regressed line.
REGRESSION = "<-- REGRESSION"


def _metrics(old: dict, new: dict) -> list[tuple[str, Any, Any, str]]:
    """(label, old value, new value, kind) for every compared figure.

    kind: "cost" (lower is better, regressed when up by more than COST_TOLERANCE),
    "higher" (higher is better, regressed when down), "lower" (lower is better, regressed
    when up at all).
    """
    out = []
    for key, _label in HEADLINES:
        for q in ("p50", "p95"):
            out.append((f"latency {key} {q}", get(old, "latency", key, q),
                        get(new, "latency", key, q), "cost"))
    stages = list(as_dict(get(new, "latency", "stages_s")))
    stages += [s for s in as_dict(get(old, "latency", "stages_s")) if s not in stages]
    for s in stages:
        out.append((f"stage {s} p50", get(old, "latency", "stages_s", s, "p50"),
                    get(new, "latency", "stages_s", s, "p50"), "cost"))
    out.append(("floor ratio_p50", get(old, "floor", "ratio_p50"),
                get(new, "floor", "ratio_p50"), "cost"))
    out.append(("spoken share", get(old, "spoken", "share"), get(new, "spoken", "share"),
                "higher"))
    out.append(("spoken speech_share", get(old, "spoken", "speech_share"),
                get(new, "spoken", "speech_share"), "higher"))
    out.append(("spoken tts_cpu_per_source_s", get(old, "spoken", "tts_cpu_per_source_s"),
                get(new, "spoken", "tts_cpu_per_source_s"), "cost"))
    transports = list(as_dict(new.get("bus")))
    transports += [t for t in as_dict(old.get("bus")) if t not in transports]
    for t in transports:
        modes = list(as_dict(get(new, "bus", t)))
        modes += [m for m in as_dict(get(old, "bus", t)) if m not in modes]
        for m in modes:
            out.append((f"bus {t} {m} p99_ms", get(old, "bus", t, m, "p99_ms"),
                        get(new, "bus", t, m, "p99_ms"), "cost"))
    for path, kind in ((("asr", "wer"), "lower"), (("mt", "bleu"), "higher"),
                       (("mt", "chrf"), "higher"), (("round_trip", "wer"), "lower"),
                       (("round_trip", "chrf"), "higher")):
        out.append((f"quality {' '.join(path)}", get(old, "quality", *path),
                    get(new, "quality", *path), kind))
    actors = list(as_dict(new.get("resources")))
    actors += [a for a in as_dict(old.get("resources")) if a not in actors]
    for a in actors:
        for f in ("peak_rss_mb", "cpu_s"):
            out.append((f"resources {a} {f}", get(old, "resources", a, f),
                        get(new, "resources", a, f), "cost"))
    return out


def _by_file(report: dict) -> dict[tuple, str]:
    """Each corpus file's translation: its utterances' translations in source order, joined."""
    files: dict[tuple, list] = {}
    for row in report.get("utterances") or ():
        if isinstance(row, dict) and row.get("file") is not None:
            files.setdefault((row["file"], row.get("placed")), []).append(
                (row.get("media_start_s") or 0.0, row.get("translation") or ""))
    return {k: " ".join(t for _s, t in sorted(v) if t) for k, v in files.items()}


def translation_chrf(old: dict, new: dict) -> dict | None:
    """The chrF of the new report's translations against the old one's, file by file.

    The latency-quality trade-off of a policy: run the same corpus sentence by sentence
    (old) and with the policy (new); what the policy changed in the translation, not what
    the translation gets wrong against a human reference (`quality`). Files both reports
    interpreted, each as its utterances' translations joined in source order; chrF as
    `metrics.mt_scores` computes it. None when the reports share no file.
    """
    a, b = _by_file(as_dict(old)), _by_file(as_dict(new))
    keys = sorted(set(a) & set(b), key=str)
    if not keys:
        return None
    from voxweft.tools.bench.metrics import mt_scores

    scores = mt_scores([b[k] for k in keys], [a[k] for k in keys])
    return {"chrf": scores["chrf"], "bleu": scores["bleu"], "files": len(keys),
            "same": sum(a[k] == b[k] for k in keys)}


def _regressed(old: float, new: float, kind: str) -> bool:
    if kind == "cost":
        return new > old * (1 + COST_TOLERANCE) if old > 0 else new > old
    if kind == "higher":
        return new < old
    return new > old


def compare(old: dict, new: dict) -> str:
    """Line per figure, ``metric: old -> new (delta, +x %)``, regressions marked.

    Compared: headline p50/p95, every stage p50, floor ratio, the spoken shares (of the
    reference words, of the speech heard) and tts's CPU per second of source, bus p99 per
    transport and mode, WER/BLEU/chrF (ASR, MT, round trip), per-actor peak RSS and CPU. A
    latency, bus, RSS or CPU figure regressed when it rose by more than ``COST_TOLERANCE``
    (10 %); a quality figure regressed when it got worse at all (WER up, BLEU/chrF down).
    Figures missing in both reports are left out; one missing on a side shows "-". Then
    how far the new translations are from the old ones (`translation_chrf`). A schema
    other than ``voxweft-bench/2`` gives a warning line (in /1 the spoken share counted the
    words transcribed); the keys both reports have are still compared.
    """
    old, new = as_dict(old), as_dict(new)
    lines = []
    schemas = (old.get("schema"), new.get("schema"))
    if schemas[0] != schemas[1] or any(s != SCHEMA for s in schemas):
        lines.append(f"warning: schema old {schemas[0]!r}, new {schemas[1]!r} "
                     f"(expected {SCHEMA!r}); comparing the keys both have")
    regressions = 0
    for label, a, b, kind in _metrics(old, new):
        num = (int, float)
        a = a if isinstance(a, num) and not isinstance(a, bool) else None
        b = b if isinstance(b, num) and not isinstance(b, bool) else None
        if a is None and b is None:
            continue
        if a is None or b is None:
            lines.append(f"{label}: {fmt(a, 4)} -> {fmt(b, 4)} (missing)")
            continue
        pct = f"{(b - a) / abs(a) * 100:+.1f} %" if a else "n/a %"
        line = f"{label}: {fmt(float(a), 4)} -> {fmt(float(b), 4)} ({b - a:+.4f}, {pct})"
        if _regressed(a, b, kind):
            line += f"  {REGRESSION}"
            regressions += 1
        lines.append(line)
    against = translation_chrf(old, new)
    if against:
        lines.append(f"translations, new against old: chrF {fmt(against['chrf'], 1)}, BLEU "
                     f"{fmt(against['bleu'], 1)} ({against['files']} files, "
                     f"{against['same']} the same)")
    lines.append(f"{regressions} regression(s)")
    return "\n".join(lines) + "\n"
