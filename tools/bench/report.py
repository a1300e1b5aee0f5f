"""Render, plot and compare ``voxweft bench`` reports (JSON schema ``voxweft-bench/2``).

Every function tolerates missing sections and None values: a missing figure renders as "-".
Run ``python -m voxweft.tools.bench.report REPORT.json [--compare OLD.json] [--timeline PNG]
[--soak PNG]`` to print a report as Markdown (or the comparison) from the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SCHEMA = "voxweft-bench/2"
#: Schemas the Markdown renders without a warning. /1: `spoken.share` counted the words of
#: the transcripts (speech the speaker gate ignored was not in it); /2: of the references.
KNOWN = ("voxweft-bench/1", SCHEMA)

#: compare(): a latency, bus, RSS or CPU figure that rose by more than this fraction regressed.
COST_TOLERANCE = 0.10

#: compare(): the marker appended to a regressed line.
REGRESSION = "<-- REGRESSION"

_HEADLINES = (("speech_end_to_first_voiced_s", "speech end -> first voiced audio"),
              ("speech_end_to_first_audio_s", "speech end -> first audio"),
              ("segment_to_first_audio_s", "segment -> first audio"))


# --------------------------------------------------------------------------------------------
# Helpers


def _get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or None as soon as a level is missing or not a dict."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _fmt(x: Any, nd: int = 3) -> str:
    """A value for a table cell: "-" for None, yes/no for booleans, ``nd`` decimals for floats."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:.{nd}f}"
    if isinstance(x, (list, tuple)):
        return ", ".join(_fmt(v, nd) for v in x) or "-"
    return str(x).replace("|", "/").replace("\n", " ") or "-"


def _table(headers: list[str], rows: Iterable[list[Any]], nd: int = 3) -> list[str]:
    rows = [[_fmt(c, nd) for c in row] for row in rows]
    if not rows:
        return []
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _met(x: Any) -> str:
    return "-" if x is None else ("yes" if x else "**NO**")


def _slope(s: Any, unit: str) -> str:
    s = _dict(s)
    if s.get("slope_per_10min") is None:
        return f"- (n={_fmt(s.get('n'))})"
    mark = "drifting" if s.get("distinguishable_from_zero") else "flat within noise"
    ci = s.get("ci95_per_10min")
    ci = f"{ci:.4g}" if isinstance(ci, (int, float)) else "-"
    return (f"{s['slope_per_10min']:+.4g} ± {ci} {unit}/10 min "
            f"(n={_fmt(s.get('n'))}, {mark})")


def _stage_names(utterances: list[dict]) -> list[str]:
    names: list[str] = []
    for u in utterances:
        for name in _dict(_get(u, "stages_s")):
            if name not in names:
                names.append(name)
    return names


# --------------------------------------------------------------------------------------------
# Markdown


def _pct(share: Any) -> str:
    return "-" if not isinstance(share, (int, float)) else f"{100 * share:.1f} %"


def _ignored_words(sp: dict) -> str:
    """How much speech the speaker gate ignored: "4.2 s of speech ignored (3 stretches)"."""
    n = sp.get("ignored")
    if not n:
        return "no speech ignored" if n == 0 else "speech ignored: -"
    return (f"{_fmt(sp.get('ignored_s'), 1)} s of speech ignored ({n} "
            f"stretch{'' if n == 1 else 'es'})")


def _headline(report: dict) -> list[str]:
    """The first lines: how much of the source was spoken, what condensed it, what tts cost."""
    sp = _dict(report.get("spoken"))
    if not sp:
        return []
    counts = (f"{_fmt(sp.get('utterances_not_spoken'))} of {_fmt(sp.get('utterances'))} "
              f"utterances not spoken; {_ignored_words(sp)}")
    if "basis" not in sp:   # voxweft-bench/1
        first = (f"**Spoken: {_pct(sp.get('share'))} of the words transcribed** "
                 f"({_fmt(sp.get('words_spoken'))} of {_fmt(sp.get('words'))} words; "
                 f"{_fmt(sp.get('utterances_not_spoken'))} of {_fmt(sp.get('utterances'))} "
                 "utterances not spoken)")
    elif sp.get("basis") == "speech heard":
        first = (f"**Spoken: {_pct(sp.get('share'))} of the speech heard** "
                 f"({_fmt(sp.get('spoken_s'), 1)} of {_fmt(sp.get('heard_s'), 1)} s; {counts})")
    else:
        first = (f"**Spoken: {_pct(sp.get('share'))} of the reference words** "
                 f"({_fmt(sp.get('words_spoken'))} of {_fmt(sp.get('words'))} words; {counts}; "
                 f"{_pct(sp.get('speech_share'))} of the speech heard)")
    return [
        first,
        "",
        f"- condensed: fillers removed {_fmt(sp.get('fillers_removed'))} words, pauses cut "
        f"{_fmt(sp.get('pauses_cut_s'), 1)} s; lag steps: speed-up "
        f"{_fmt(sp.get('lag_speedup'))}, long chunks {_fmt(sp.get('lag_long_chunks'))}, "
        f"skip {_fmt(sp.get('lag_skip'))}",
        f"- tts CPU {_fmt(sp.get('tts_cpu_per_source_s'), 2)} s per s of source speech "
        f"(the budget counted on {_fmt(sp.get('tts_budget_cpu_per_source_s'), 2)})",
        "",
    ]


def _ignored(report: dict) -> list[str]:
    """Every stretch of speech not interpreted: where (file, media time), how long, why."""
    stretches = [s for s in report.get("ignored") or [] if isinstance(s, dict)]
    if not stretches:
        return []
    return ["", "## Speech ignored (not interpreted)", "",
            *_table(["file", "start s", "length s", "reason", "session s"],
                    [[s.get("file"), s.get("start_s"), s.get("length_s"), s.get("reason"),
                      s.get("session_s")] for s in stretches], nd=2)]


def _machine(host: dict) -> str:
    """Machine: which CPU, how many cores, VNNI; how loaded at the start and at the end."""
    vnni = {True: "yes", False: "no"}.get(host.get("vnni"), "unknown")
    line = (f"- Machine: {_fmt(host.get('cpu_model'))}, {_fmt(host.get('cpus'))} cores, VNNI "
            f"{vnni}; load 1-min avg at start {_fmt(host.get('load_1min_start'), 2)}, at end "
            f"{_fmt(host.get('load_1min_end'), 2)}")
    if "others_busy_cores_start" in host:
        line += (f"; cores busy with other work at start "
                 f"{_fmt(host.get('others_busy_cores_start'), 2)}, at end "
                 f"{_fmt(host.get('others_busy_cores_end'), 2)}")
    return line


def markdown(report: dict) -> str:
    """The report as a short Markdown document, readable in a terminal."""
    report = _dict(report)
    host, config = _dict(report.get("host")), _dict(report.get("config"))
    engines = ", ".join(f"{k}={v}" for k, v in _dict(config.get("engines")).items()) or "-"
    lines = [f"# voxweft bench: `{_fmt(report.get('command'))}`", ""]
    if report.get("schema") not in (None, *KNOWN):
        lines += [f"> warning: schema {report.get('schema')!r}, this renderer knows {SCHEMA!r}",
                  ""]
    lines += _headline(report)
    lines += [
        f"- created {_fmt(report.get('created'))}; host {_fmt(host.get('platform'))} "
        f"{_fmt(host.get('machine'))}, Python {_fmt(host.get('python'))}",
        _machine(host),
        f"- {_fmt(config.get('topology'))}, corpus {_fmt(config.get('corpus'))} "
        f"({_fmt(config.get('files'))} files), {_fmt(config.get('src_lang'))} -> "
        f"{_fmt(config.get('tgt_lang'))}, fast {_fmt(config.get('fast'))}, "
        f"pause {_fmt(config.get('pause_s'))} s, soak {_fmt(config.get('soak_minutes'))} min",
        f"- engines: {engines}",
    ]

    lines += _ignored(report)

    targets = [t for t in report.get("targets") or [] if isinstance(t, dict)]
    if targets:
        lines += ["", "## Targets", ""]
        lines += _table(["name", "target", "goal", "measured", "met"],
                        [[t.get("name"), t.get("target"), t.get("goal"), t.get("value"),
                          _met(t.get("met"))] for t in targets])

    latency = _dict(report.get("latency"))
    rows = [[label, *(_get(latency, key, f) for f in ("n", "p50", "p95", "max"))]
            for key, label in _HEADLINES]
    rows += [[f"  {name}", *(_get(s, f) for f in ("n", "p50", "p95", "max"))]
             for name, s in _dict(latency.get("stages_s")).items()]
    if latency:
        lines += ["", "## Latency (s)", ""]
        lines += _table(["figure", "n", "p50", "p95", "max"], rows)

    floor = report.get("floor")
    if isinstance(floor, dict):
        lines += ["", f"Floor (asr + mt + tts first chunk, alone): pipeline p50 "
                      f"{_fmt(_get(floor, 'pipeline_s', 'p50'))} s (n "
                      f"{_fmt(_get(floor, 'pipeline_s', 'n'))}) / floor p50 "
                      f"{_fmt(_get(floor, 'floor_s', 'p50'))} s (n "
                      f"{_fmt(_get(floor, 'floor_s', 'n'))}), ratio p50 "
                      f"{_fmt(floor.get('ratio_p50'), 2)}"]
        stages = _dict(floor.get("stages"))
        if stages:
            lines.append("by stage, pipeline / floor p50 (n): " + "; ".join(
                f"{name} {_fmt(_get(st, 'pipeline_p50'))} / {_fmt(_get(st, 'floor_p50'))} s "
                f"= {_fmt(_get(st, 'ratio_p50'), 2)} ({_fmt(_get(st, 'n'))})"
                for name, st in stages.items()))

    bus = report.get("bus")
    if isinstance(bus, dict):
        rows = [[transport, mode, *(_get(b, f) for f in ("p50_ms", "p99_ms", "max_ms")),
                 _get(b, "lost"), _get(b, "sent"), _get(b, "rate_per_s")]
                for transport, modes in bus.items() for mode, b in _dict(modes).items()]
        if rows:
            lines += ["", "## Bus", ""]
            lines += _table(["transport", "mode", "p50 ms", "p99 ms", "max ms", "lost", "sent",
                             "rate/s"], rows)

    quality = _dict(report.get("quality"))
    if quality:
        asr, mt, rt = (_dict(quality.get(k)) for k in ("asr", "mt", "round_trip"))
        lines += ["", "## Quality", ""]
        lines.append(f"- ASR WER {_fmt(asr.get('wer'), 4)} (S {_fmt(asr.get('substitutions'))}"
                     f", D {_fmt(asr.get('deletions'))}, I {_fmt(asr.get('insertions'))} of "
                     f"{_fmt(asr.get('reference_words'))} words)")
        lines.append(f"- MT BLEU {_fmt(mt.get('bleu'), 2)}, chrF {_fmt(mt.get('chrf'), 2)}")
        lines.append(f"- round trip WER {_fmt(rt.get('wer'), 4)}, chrF {_fmt(rt.get('chrf'), 2)}"
                     f" ({_fmt(rt.get('utterances'))} utterances)")

    resources = _dict(report.get("resources"))
    if resources:
        lines += ["", "## Resources", ""]
        lines += _table(["actor", "peak RSS MB", "RSS MB", "CPU s", "fds", "threads"],
                        [[actor, *(_get(r, f) for f in ("peak_rss_mb", "rss_mb", "cpu_s", "fds",
                                                        "threads"))]
                         for actor, r in resources.items()], nd=1)

    if "drops" in report:
        drops = {a: c for a, c in _dict(report.get("drops")).items() if c}
        lines += ["", "## Drops", "",
                  f"- live audio dropped at capture: "
                  f"{_fmt(_get(report, 'drops', 'capture', 'dropped_ms') or 0)} ms "
                  "(the one place live input is dropped by design; a file is never dropped)",
                  "- counters: " + ("; ".join(
                      f"{a} " + ", ".join(f"{k}={v}" for k, v in _dict(c).items())
                      for a, c in drops.items()) or "none")]

    lag = report.get("lag")
    if isinstance(lag, dict):
        bound = lag.get("max_lag_s")
        slope = lag.get("slope_s_per_min")
        trend = "growing" if lag.get("slope_distinguishable_from_zero") else "flat within noise"
        steps = ", ".join(f"{k} {v}" for k, v in _dict(lag.get("steps")).items()) or "-"
        lines += ["", "## Lag behind the speaker", "",
                  f"- bound (max_lag_s): {_fmt(bound, 1) if bound else 'none'}; lag (speech "
                  f"end -> first audio) max {_fmt(lag.get('max_s'), 2)} s, p95 "
                  f"{_fmt(lag.get('p95_s'), 2)} s",
                  f"- slope {'-' if slope is None else f'{slope:+.3f}'} ± "
                  f"{_fmt(lag.get('slope_ci95_s_per_min'))} s per minute ({trend})",
                  f"- degradation steps taken: {steps}; not spoken "
                  f"{_fmt(lag.get('not_spoken'))} of {_fmt(lag.get('utterances'))} utterances"]

    spec = report.get("speculation")
    if isinstance(spec, dict) and spec.get("stages"):
        lines += ["", "## Speculative endpointing (drafts at pauses)", "",
                  f"- drafts sent by the segmenter: {_fmt(spec.get('drafts_sent'))}, for "
                  f"{_fmt(spec.get('utterances'))} utterances; long utterances committed up "
                  f"to an earlier pause (asr's drafts agreed): {_fmt(spec.get('cuts'))} "
                  f"(too late: {_fmt(spec.get('cuts_late'))}); grown utterances rechecked "
                  f"by asr: {_fmt(spec.get('rechecks'))} ({_fmt(spec.get('recheck_s'), 2)} s)",
                  "- end of speech -> first audio p50 (n): first chunk made ahead "
                  f"{_fmt(_get(spec, 'first_audio_s', 'first_chunk_ahead', 'p50'), 2)} s "
                  f"({_fmt(_get(spec, 'first_audio_s', 'first_chunk_ahead', 'n'))}), not "
                  f"{_fmt(_get(spec, 'first_audio_s', 'not_ahead', 'p50'), 2)} s "
                  f"({_fmt(_get(spec, 'first_audio_s', 'not_ahead', 'n'))})", ""]
        lines += _table(["stage", "made", "used", "wasted", "not needed", "hit rate",
                         "utterances ahead", "cost s", "wasted s", "wasted s per min"],
                        [[a, st.get("made"), st.get("used"), st.get("wasted"),
                          st.get("not_needed"), st.get("hit_rate"), st.get("utterances_ahead"),
                          st.get("cost_s"), st.get("wasted_s"), st.get("wasted_s_per_min")]
                         for a, st in _dict(spec.get("stages")).items()], nd=2)

    words = report.get("asr_word_lag")
    if isinstance(words, dict) and words.get("words"):
        lines += ["", f"Per-word ASR lag (word spoken -> its transcript published, "
                      f"{_fmt(words.get('words'))} words): mean {_fmt(words.get('mean_s'), 2)} "
                      f"s, p50 {_fmt(words.get('p50_s'), 2)} s, max {_fmt(words.get('max_s'), 2)}"
                      " s"]

    budget = report.get("budget")
    if isinstance(budget, dict):
        lines += ["", "## CPU budget (measured at warm-up)", ""]
        lines += _table(["engine", "CPU s per s of speech", "wall s per s", "first chunk s"],
                        [[a, _get(b, "cpu"), _get(b, "rtf"), _get(b, "first_s")]
                         for a, b in _dict(budget.get("engines")).items()])
        lines += [f"- {line}" for line in budget.get("verdict") or []]

    lf = report.get("longform")
    if isinstance(lf, dict):
        lines += ["", "## Long-form latency (SimulEval)", "",
                  f"Over {_fmt(lf.get('source_duration_s'), 1)} s of source, "
                  f"{_fmt(lf.get('output_words'))} output words. A translation is out when "
                  "its segment's source was read (as if computing took no time), or, _CA "
                  "(computation aware), when it was played.", ""]
        lines += _table(["figure", "s", "computation aware", "s"],
                        [[name, lf.get(key), f"{name}_CA", lf.get(ca_key)]
                         for name, key, ca_key in (
                             ("StartOffset", "start_offset_nca_s", "start_offset_s"),
                             ("EndOffset", "end_offset_nca_s", "end_offset_s"),
                             ("LAAL", "laal_s", "laal_ca_s"), ("ATD", "atd_s", "atd_ca_s"))])
        lines += ["", f"Per utterance (each its own source, mean over "
                      f"{_fmt(lf.get('sentences'))}): LAAL_CA "
                      f"{_fmt(lf.get('laal_ca_sentence_mean_s'))} s"]

    soak = report.get("soak")
    if isinstance(soak, dict):
        lines += ["", f"## Soak ({_fmt(soak.get('minutes'), 1)} min)", "",
                  f"- latency: {_slope(soak.get('latency_slope'), 's')}"]
        qd = _dict(soak.get("queue_depth"))
        lines.append(f"- queue depth: max {_fmt(qd.get('max'))}, mean {_fmt(qd.get('mean'), 2)}")
        drops = {a: c for a, c in _dict(soak.get("drops")).items() if c}
        lines.append("- drops: " + ("; ".join(
            f"{a} " + ", ".join(f"{k}={v}" for k, v in _dict(c).items()) for a, c in drops.items())
            or "none"))
        fds = _dict(soak.get("fds"))
        actors = list(_dict(soak.get("rss_slope"))) + [
            a for a in fds if a not in _dict(soak.get("rss_slope"))]
        if actors:
            lines.append("")
            lines += _table(["actor", "RSS drift", "RSS, last half (MB)", "fds first",
                             "fds last", "fds max"],
                            [[a, _slope(_get(soak, "rss_slope", a), "MB"),
                              _get(soak, "rss_last_half_mb", a),
                              _get(fds, a, "first"), _get(fds, a, "last"), _get(fds, a, "max")]
                             for a in actors])
    if isinstance(report.get("room"), dict):
        from voxweft.tools.bench.room import markdown as room_markdown

        real_time = not _dict(report.get("config")).get("fast")
        lines += ["", *room_markdown(report["room"], real_time).splitlines()]
    if isinstance(report.get("terms"), dict):
        from voxweft.tools.bench.terms import markdown as terms_markdown

        lines += ["", *terms_markdown(report["terms"]).splitlines()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(report: dict, path: str | Path) -> None:
    """PNG: one row per utterance, its stages as consecutive bars from its speech end (x = 0)."""
    plt = _pyplot()
    utterances = [u for u in _dict(report).get("utterances") or [] if isinstance(u, dict)]
    names = _stage_names(utterances)
    cmap = plt.get_cmap("tab20")
    colours = {name: cmap(i % 20) for i, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(11, min(2 + 0.3 * len(utterances), 40)))
    try:
        labelled: set[str] = set()
        for row, u in enumerate(utterances):
            x = 0.0
            for name, seconds in _dict(u.get("stages_s")).items():
                if not isinstance(seconds, (int, float)) or seconds <= 0:
                    continue
                ax.barh(row, seconds, left=x, height=0.7, color=colours[name],
                        label=None if name in labelled else name)
                labelled.add(name)
                x += seconds
            total = u.get("speech_end_to_first_audio_s")
            if isinstance(total, (int, float)):
                ax.plot([total], [row], marker="|", color="black", markersize=12)
        ax.set_yticks(range(len(utterances)))
        ax.set_yticklabels([str(u.get("utt", i)) for i, u in enumerate(utterances)],
                           fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("seconds after the end of speech")
        ax.set_ylabel("utterance")
        ax.set_title("Per-utterance stage timeline (| = first audio)")
        if not utterances:
            ax.text(0.5, 0.5, "no utterances", ha="center", va="center",
                    transform=ax.transAxes)
        if labelled:
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
        ax.grid(axis="x", alpha=0.3)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def _xy(points: Any) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in points or []:
        if (isinstance(p, (list, tuple)) and len(p) == 2
                and all(isinstance(v, (int, float)) for v in p)):
            xs.append(p[0] / 60)
            ys.append(p[1])
    return xs, ys


def plot_soak(report: dict, path: str | Path) -> None:
    """PNG: latency over the soak (scatter and least-squares line) above RSS per actor."""
    import numpy as np

    plt = _pyplot()
    soak = _dict(_dict(report).get("soak"))
    series = _dict(soak.get("series"))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    try:
        xs, ys = _xy(series.get("latency"))
        ax1.scatter(xs, ys, s=8, alpha=0.6, label="speech end -> first audio")
        if len(xs) >= 2 and max(xs) > min(xs):
            b, a = np.polyfit(xs, ys, 1)
            line = np.array([min(xs), max(xs)])
            ax1.plot(line, a + b * line, color="red",
                     label=f"fit: {_slope(soak.get('latency_slope'), 's')}")
        ax1.set_ylabel("latency (s)")
        ax1.set_title(f"Soak ({_fmt(soak.get('minutes'), 1)} min)")
        if xs:
            ax1.legend(fontsize=8)
        else:
            ax1.text(0.5, 0.5, "no latency series", ha="center", va="center",
                     transform=ax1.transAxes)
        ax1.grid(alpha=0.3)
        plotted = False
        for actor, points in _dict(series.get("rss_mb")).items():
            xs, ys = _xy(points)
            if xs:
                ax2.plot(xs, ys, label=str(actor))
                plotted = True
        if plotted:
            ax2.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        else:
            ax2.text(0.5, 0.5, "no RSS series", ha="center", va="center",
                     transform=ax2.transAxes)
        ax2.set_ylabel("RSS (MB)")
        ax2.set_xlabel("minutes since start")
        ax2.grid(alpha=0.3)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# Comparison


def _metrics(old: dict, new: dict) -> list[tuple[str, Any, Any, str]]:
    """(label, old value, new value, kind) for every compared figure.

    kind: "cost" (lower is better, regressed when up by more than COST_TOLERANCE),
    "higher" (higher is better, regressed when down), "lower" (lower is better, regressed
    when up at all).
    """
    out = []
    for key, _label in _HEADLINES:
        for q in ("p50", "p95"):
            out.append((f"latency {key} {q}", _get(old, "latency", key, q),
                        _get(new, "latency", key, q), "cost"))
    stages = list(_dict(_get(new, "latency", "stages_s")))
    stages += [s for s in _dict(_get(old, "latency", "stages_s")) if s not in stages]
    for s in stages:
        out.append((f"stage {s} p50", _get(old, "latency", "stages_s", s, "p50"),
                    _get(new, "latency", "stages_s", s, "p50"), "cost"))
    out.append(("floor ratio_p50", _get(old, "floor", "ratio_p50"),
                _get(new, "floor", "ratio_p50"), "cost"))
    out.append(("spoken share", _get(old, "spoken", "share"), _get(new, "spoken", "share"),
                "higher"))
    out.append(("spoken speech_share", _get(old, "spoken", "speech_share"),
                _get(new, "spoken", "speech_share"), "higher"))
    out.append(("spoken tts_cpu_per_source_s", _get(old, "spoken", "tts_cpu_per_source_s"),
                _get(new, "spoken", "tts_cpu_per_source_s"), "cost"))
    transports = list(_dict(new.get("bus")))
    transports += [t for t in _dict(old.get("bus")) if t not in transports]
    for t in transports:
        modes = list(_dict(_get(new, "bus", t)))
        modes += [m for m in _dict(_get(old, "bus", t)) if m not in modes]
        for m in modes:
            out.append((f"bus {t} {m} p99_ms", _get(old, "bus", t, m, "p99_ms"),
                        _get(new, "bus", t, m, "p99_ms"), "cost"))
    for path, kind in ((("asr", "wer"), "lower"), (("mt", "bleu"), "higher"),
                       (("mt", "chrf"), "higher"), (("round_trip", "wer"), "lower"),
                       (("round_trip", "chrf"), "higher")):
        out.append((f"quality {' '.join(path)}", _get(old, "quality", *path),
                    _get(new, "quality", *path), kind))
    actors = list(_dict(new.get("resources")))
    actors += [a for a in _dict(old.get("resources")) if a not in actors]
    for a in actors:
        for f in ("peak_rss_mb", "cpu_s"):
            out.append((f"resources {a} {f}", _get(old, "resources", a, f),
                        _get(new, "resources", a, f), "cost"))
    return out


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
    Figures missing in both reports are left out; one missing on a side shows "-". A schema
    other than ``voxweft-bench/2`` gives a warning line (in /1 the spoken share counted the
    words transcribed); the keys both reports have are still compared.
    """
    old, new = _dict(old), _dict(new)
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
            lines.append(f"{label}: {_fmt(a, 4)} -> {_fmt(b, 4)} (missing)")
            continue
        pct = f"{(b - a) / abs(a) * 100:+.1f} %" if a else "n/a %"
        line = f"{label}: {_fmt(float(a), 4)} -> {_fmt(float(b), 4)} ({b - a:+.4f}, {pct})"
        if _regressed(a, b, kind):
            line += f"  {REGRESSION}"
            regressions += 1
        lines.append(line)
    lines.append(f"{regressions} regression(s)")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    """Print a report as Markdown, or its comparison with an older one; optionally plot it."""
    p = argparse.ArgumentParser(prog="python -m voxweft.tools.bench.report",
                                description=main.__doc__)
    p.add_argument("report", type=Path)
    p.add_argument("--compare", type=Path, metavar="OLD", help="compare with this older report")
    p.add_argument("--timeline", type=Path, metavar="PNG", help="write the stage timeline")
    p.add_argument("--soak", type=Path, metavar="PNG", help="write the soak plot")
    args = p.parse_args(argv)
    report = json.loads(args.report.read_text())
    if args.compare:
        text = compare(json.loads(args.compare.read_text()), report)
        sys.stdout.write(text)
    else:
        sys.stdout.write(markdown(report))
    if args.timeline:
        plot_timeline(report, args.timeline)
    if args.soak:
        plot_soak(report, args.soak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
