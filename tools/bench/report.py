"""A ``voxweft bench`` report (JSON schema ``voxweft-bench/2``) as Markdown; its command line.

Every function tolerates missing sections and None values: a missing figure renders as "-".
Run ``python -m voxweft.tools.bench.report REPORT.json [--compare OLD.json] [--timeline PNG]
[--soak PNG]`` to print a report as Markdown (or the comparison) from the command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from voxweft.tools.bench import reportcompare, reportplots
from voxweft.tools.bench.reportformat import (
    HEADLINES,
    SCHEMA,
    as_dict,
    drift,
    fmt,
    get,
    table,
)

#: Schemas the Markdown renders without a warning. /1: `spoken.share` counted the words of
#: the transcripts (speech the speaker gate ignored was not in it); /2: of the references.
KNOWN = ("voxweft-bench/1", SCHEMA)


# --------------------------------------------------------------------------------------------
# Markdown


def _met(x: Any) -> str:
    return "-" if x is None else ("yes" if x else "**NO**")


def _pct(share: Any) -> str:
    return "-" if not isinstance(share, (int, float)) else f"{100 * share:.1f} %"


def _ignored_words(sp: dict) -> str:
    """How much speech the speaker gate ignored: "4.2 s of speech ignored (3 stretches)"."""
    n = sp.get("ignored")
    if not n:
        return "no speech ignored" if n == 0 else "speech ignored: -"
    return (f"{fmt(sp.get('ignored_s'), 1)} s of speech ignored ({n} "
            f"stretch{'' if n == 1 else 'es'})")


def _headline(report: dict) -> list[str]:
    """The first lines: how much of the source was spoken, what condensed it, what tts cost."""
    sp = as_dict(report.get("spoken"))
    if not sp:
        return []
    counts = (f"{fmt(sp.get('utterances_not_spoken'))} of {fmt(sp.get('utterances'))} "
              f"utterances not spoken; {_ignored_words(sp)}")
    if "basis" not in sp:   # voxweft-bench/1
        first = (f"**Spoken: {_pct(sp.get('share'))} of the words transcribed** "
                 f"({fmt(sp.get('words_spoken'))} of {fmt(sp.get('words'))} words; "
                 f"{fmt(sp.get('utterances_not_spoken'))} of {fmt(sp.get('utterances'))} "
                 "utterances not spoken)")
    elif sp.get("basis") == "speech heard":
        first = (f"**Spoken: {_pct(sp.get('share'))} of the speech heard** "
                 f"({fmt(sp.get('spoken_s'), 1)} of {fmt(sp.get('heard_s'), 1)} s; {counts})")
    else:
        first = (f"**Spoken: {_pct(sp.get('share'))} of the reference words** "
                 f"({fmt(sp.get('words_spoken'))} of {fmt(sp.get('words'))} words; {counts}; "
                 f"{_pct(sp.get('speech_share'))} of the speech heard)")
    return [
        first,
        "",
        f"- condensed: fillers removed {fmt(sp.get('fillers_removed'))} words, pauses cut "
        f"{fmt(sp.get('pauses_cut_s'), 1)} s; lag steps: speed-up "
        f"{fmt(sp.get('lag_speedup'))}, long chunks {fmt(sp.get('lag_long_chunks'))}, "
        f"skip {fmt(sp.get('lag_skip'))}",
        f"- tts CPU {fmt(sp.get('tts_cpu_per_source_s'), 2)} s per s of source speech "
        f"(the budget counted on {fmt(sp.get('tts_budget_cpu_per_source_s'), 2)})",
        "",
    ]


def _ignored(report: dict) -> list[str]:
    """Every stretch of speech not interpreted: where (file, media time), how long, why."""
    stretches = [s for s in report.get("ignored") or [] if isinstance(s, dict)]
    if not stretches:
        return []
    return ["", "## Speech ignored (not interpreted)", "",
            *table(["file", "start s", "length s", "reason", "session s"],
                   [[s.get("file"), s.get("start_s"), s.get("length_s"), s.get("reason"),
                     s.get("session_s")] for s in stretches], nd=2)]


def _machine(host: dict) -> str:
    """Machine: which CPU, how many cores, VNNI; how loaded at the start and at the end."""
    vnni = {True: "yes", False: "no"}.get(host.get("vnni"), "unknown")
    line = (f"- Machine: {fmt(host.get('cpu_model'))}, {fmt(host.get('cpus'))} cores, VNNI "
            f"{vnni}; load 1-min avg at start {fmt(host.get('load_1min_start'), 2)}, at end "
            f"{fmt(host.get('load_1min_end'), 2)}")
    if "others_busy_cores_start" in host:
        line += (f"; cores busy with other work at start "
                 f"{fmt(host.get('others_busy_cores_start'), 2)}, at end "
                 f"{fmt(host.get('others_busy_cores_end'), 2)}")
    return line


def markdown(report: dict) -> str:
    """The report as a short Markdown document, readable in a terminal."""
    report = as_dict(report)
    host, config = as_dict(report.get("host")), as_dict(report.get("config"))
    engines = ", ".join(f"{k}={v}" for k, v in as_dict(config.get("engines")).items()) or "-"
    lines = [f"# voxweft bench: `{fmt(report.get('command'))}`", ""]
    if report.get("schema") not in (None, *KNOWN):
        lines += [f"> warning: schema {report.get('schema')!r}, this renderer knows {SCHEMA!r}",
                  ""]
    lines += _headline(report)
    lines += [
        f"- created {fmt(report.get('created'))}; host {fmt(host.get('platform'))} "
        f"{fmt(host.get('machine'))}, Python {fmt(host.get('python'))}",
        _machine(host),
        f"- {fmt(config.get('topology'))}, corpus {fmt(config.get('corpus'))} "
        f"({fmt(config.get('files'))} files), {fmt(config.get('src_lang'))} -> "
        f"{fmt(config.get('tgt_lang'))}, fast {fmt(config.get('fast'))}, "
        f"pause {fmt(config.get('pause_s'))} s, soak {fmt(config.get('soak_minutes'))} min",
        f"- engines: {engines}",
    ]

    lines += _ignored(report)

    targets = [t for t in report.get("targets") or [] if isinstance(t, dict)]
    if targets:
        lines += ["", "## Targets", ""]
        lines += table(["name", "target", "goal", "measured", "met"],
                       [[t.get("name"), t.get("target"), t.get("goal"), t.get("value"),
                         _met(t.get("met"))] for t in targets])

    latency = as_dict(report.get("latency"))
    rows = [[label, *(get(latency, key, f) for f in ("n", "p50", "p95", "max"))]
            for key, label in HEADLINES]
    rows += [[f"  {name}", *(get(s, f) for f in ("n", "p50", "p95", "max"))]
             for name, s in as_dict(latency.get("stages_s")).items()]
    if latency:
        lines += ["", "## Latency (s)", ""]
        lines += table(["figure", "n", "p50", "p95", "max"], rows)

    floor = report.get("floor")
    if isinstance(floor, dict):
        lines += ["", f"Floor (asr + mt + tts first chunk, alone): pipeline p50 "
                      f"{fmt(get(floor, 'pipeline_s', 'p50'))} s (n "
                      f"{fmt(get(floor, 'pipeline_s', 'n'))}) / floor p50 "
                      f"{fmt(get(floor, 'floor_s', 'p50'))} s (n "
                      f"{fmt(get(floor, 'floor_s', 'n'))}), ratio p50 "
                      f"{fmt(floor.get('ratio_p50'), 2)}"]
        stages = as_dict(floor.get("stages"))
        if stages:
            lines.append("by stage, pipeline / floor p50 (n): " + "; ".join(
                f"{name} {fmt(get(st, 'pipeline_p50'))} / {fmt(get(st, 'floor_p50'))} s "
                f"= {fmt(get(st, 'ratio_p50'), 2)} ({fmt(get(st, 'n'))})"
                for name, st in stages.items()))

    bus = report.get("bus")
    if isinstance(bus, dict):
        rows = [[transport, mode, *(get(b, f) for f in ("p50_ms", "p99_ms", "max_ms")),
                 get(b, "lost"), get(b, "sent"), get(b, "rate_per_s")]
                for transport, modes in bus.items() for mode, b in as_dict(modes).items()]
        if rows:
            lines += ["", "## Bus", ""]
            lines += table(["transport", "mode", "p50 ms", "p99 ms", "max ms", "lost", "sent",
                            "rate/s"], rows)

    quality = as_dict(report.get("quality"))
    if quality:
        asr, mt, rt = (as_dict(quality.get(k)) for k in ("asr", "mt", "round_trip"))
        lines += ["", "## Quality", ""]
        lines.append(f"- ASR WER {fmt(asr.get('wer'), 4)} (S {fmt(asr.get('substitutions'))}"
                     f", D {fmt(asr.get('deletions'))}, I {fmt(asr.get('insertions'))} of "
                     f"{fmt(asr.get('reference_words'))} words)")
        lines.append(f"- MT BLEU {fmt(mt.get('bleu'), 2)}, chrF {fmt(mt.get('chrf'), 2)}")
        lines.append(f"- round trip WER {fmt(rt.get('wer'), 4)}, chrF {fmt(rt.get('chrf'), 2)}"
                     f" ({fmt(rt.get('sentences'))} sentences of {fmt(rt.get('pieces'))} "
                     "pieces, each heard whole)")

    resources = as_dict(report.get("resources"))
    if resources:
        lines += ["", "## Resources", ""]
        lines += table(["actor", "peak RSS MB", "RSS MB", "CPU s", "fds", "threads"],
                       [[actor, *(get(r, f) for f in ("peak_rss_mb", "rss_mb", "cpu_s", "fds",
                                                      "threads"))]
                        for actor, r in resources.items()], nd=1)

    if "drops" in report:
        drops = {a: c for a, c in as_dict(report.get("drops")).items() if c}
        lines += ["", "## Drops", "",
                  f"- live audio dropped at capture: "
                  f"{fmt(get(report, 'drops', 'capture', 'dropped_ms') or 0)} ms "
                  "(the one place live input is dropped by design; a file is never dropped)",
                  "- counters: " + ("; ".join(
                      f"{a} " + ", ".join(f"{k}={v}" for k, v in as_dict(c).items())
                      for a, c in drops.items()) or "none")]

    lag = report.get("lag")
    if isinstance(lag, dict):
        bound = lag.get("max_lag_s")
        slope = lag.get("slope_s_per_min")
        trend = "growing" if lag.get("slope_distinguishable_from_zero") else "flat within noise"
        steps = ", ".join(f"{k} {v}" for k, v in as_dict(lag.get("steps")).items()) or "-"
        lines += ["", "## Lag behind the speaker", "",
                  f"- bound (max_lag_s): {fmt(bound, 1) if bound else 'none'}; lag (speech "
                  f"end -> first audio) max {fmt(lag.get('max_s'), 2)} s, p95 "
                  f"{fmt(lag.get('p95_s'), 2)} s",
                  f"- slope {'-' if slope is None else f'{slope:+.3f}'} ± "
                  f"{fmt(lag.get('slope_ci95_s_per_min'))} s per minute ({trend})",
                  f"- degradation steps taken: {steps}; skipped by the bound "
                  f"{fmt(lag.get('not_spoken'))} of {fmt(lag.get('utterances'))} utterances "
                  "(the headline's \"not spoken\" also counts what had nothing to say)"]

    spec = report.get("speculation")
    if isinstance(spec, dict) and spec.get("stages"):
        lines += ["", "## Speculative endpointing (drafts at pauses)", "",
                  f"- drafts sent by the segmenter: {fmt(spec.get('drafts_sent'))}, for "
                  f"{fmt(spec.get('utterances'))} utterances; long utterances committed up "
                  f"to an earlier pause (asr's drafts agreed): {fmt(spec.get('cuts'))} "
                  f"(too late: {fmt(spec.get('cuts_late'))}); grown utterances rechecked "
                  f"by asr: {fmt(spec.get('rechecks'))} ({fmt(spec.get('recheck_s'), 2)} s)",
                  "- end of speech -> first audio p50 (n): first chunk made ahead "
                  f"{fmt(get(spec, 'first_audio_s', 'first_chunk_ahead', 'p50'), 2)} s "
                  f"({fmt(get(spec, 'first_audio_s', 'first_chunk_ahead', 'n'))}), not "
                  f"{fmt(get(spec, 'first_audio_s', 'not_ahead', 'p50'), 2)} s "
                  f"({fmt(get(spec, 'first_audio_s', 'not_ahead', 'n'))})", ""]
        lines += table(["stage", "made", "used", "wasted", "not needed", "hit rate",
                        "utterances ahead", "cost s", "wasted s", "wasted s per min"],
                       [[a, st.get("made"), st.get("used"), st.get("wasted"),
                         st.get("not_needed"), st.get("hit_rate"), st.get("utterances_ahead"),
                         st.get("cost_s"), st.get("wasted_s"), st.get("wasted_s_per_min")]
                        for a, st in as_dict(spec.get("stages")).items()], nd=2)

    words = report.get("asr_word_lag")
    if isinstance(words, dict) and words.get("words"):
        lines += ["", f"Per-word ASR lag (word spoken -> its transcript published, "
                      f"{fmt(words.get('words'))} words): mean {fmt(words.get('mean_s'), 2)} "
                      f"s, p50 {fmt(words.get('p50_s'), 2)} s, max {fmt(words.get('max_s'), 2)}"
                      " s"]

    budget = report.get("budget")
    if isinstance(budget, dict):
        lines += ["", "## CPU budget (measured at warm-up)", ""]
        lines += table(["engine", "CPU s per s of speech", "wall s per s", "first chunk s"],
                       [[a, get(b, "cpu"), get(b, "rtf"), get(b, "first_s")]
                        for a, b in as_dict(budget.get("engines")).items()])
        lines += [f"- {line}" for line in budget.get("verdict") or []]
    work = report.get("work")
    if isinstance(work, dict) and work:
        lines += ["", "## Work per second of speech (counted live; commits: "
                      f"{work.get('commits')})", ""]
        rows = []
        for stage, keys in (("asr", ("decodes_per_s", "decoded_s_per_s", "fallback_share")),
                            ("tts", ("syntheses_per_s", "pieces_per_s", "made_s_per_s"))):
            w = as_dict(work.get(stage))
            if w:
                rows.append([stage, get(w, "engine_s_per_s"), get(w, "counted_s_per_s"),
                             ", ".join(f"{k.removesuffix('_per_s')} {get(w, k)}"
                                       for k in keys)])
        lines += table(["stage", "wall s per s (live)", "as the budget counts it", "counts"],
                       rows)

    lf = report.get("longform")
    if isinstance(lf, dict):
        lines += ["", "## Long-form latency (SimulEval)", "",
                  f"Over {fmt(lf.get('source_duration_s'), 1)} s of source, "
                  f"{fmt(lf.get('output_words'))} output words. A translation is out when "
                  "its segment's source was read (as if computing took no time), or, _CA "
                  "(computation aware), when it was played.", ""]
        lines += table(["figure", "s", "computation aware", "s"],
                       [[name, lf.get(key), f"{name}_CA", lf.get(ca_key)]
                        for name, key, ca_key in (
                             ("StartOffset", "start_offset_nca_s", "start_offset_s"),
                             ("EndOffset", "end_offset_nca_s", "end_offset_s"),
                             ("LAAL", "laal_s", "laal_ca_s"), ("ATD", "atd_s", "atd_ca_s"))])
    sentences = report.get("sentences")
    if isinstance(sentences, dict) and isinstance(sentences.get("offsets"), dict):
        off, joins = as_dict(sentences.get("offsets")), as_dict(sentences.get("joins"))
        lines += ["", "## Sentences", "",
                  f"{fmt(sentences.get('count'))} sentences of {fmt(sentences.get('pieces'))} "
                  "pieces (asr's commits; mt joins them). Each sentence its own source: "
                  "p50 (mean) over the sentences heard.", ""]
        lines += table(["figure", "s", "computation aware", "s"],
                       [[name, f"{fmt(get(off, key, 'p50'))} ({fmt(get(off, key, 'mean'))})",
                         f"{name}_CA",
                         f"{fmt(get(off, ca, 'p50'))} ({fmt(get(off, ca, 'mean'))})"]
                        for name, key, ca in (
                            ("StartOffset", "start_offset_nca_s", "start_offset_s"),
                            ("EndOffset", "end_offset_nca_s", "end_offset_s"),
                            ("LAAL", "laal_s", "laal_ca_s"))])
        lines += ["", f"- joins inside a sentence: {fmt(joins.get('joins'))}; holes (the "
                      f"player waited): {fmt(joins.get('holes'))}, "
                      f"{fmt(joins.get('hole_s_total'))} s in all, longest "
                      f"{fmt(joins.get('hole_s_max'))} s; silence heard at a join p50 "
                      f"{fmt(get(joins, 'silence_s', 'p50'))} s, max "
                      f"{fmt(get(joins, 'silence_s', 'max'))} s; clicks "
                      f"{fmt(joins.get('clicks'))} (largest step {fmt(joins.get('step_max'))})"]
    under = report.get("underruns")
    if isinstance(under, dict):
        lines += [f"- underruns inside an utterance (the next chunk came after the one before "
                  f"had played): {fmt(under.get('underruns'))} in {fmt(under.get('utterances'))} "
                  f"of {fmt(under.get('of'))} utterances, {fmt(under.get('s_total'))} s in all, "
                  f"longest {fmt(under.get('s_max'))} s"]

    soak = report.get("soak")
    if isinstance(soak, dict):
        lines += ["", f"## Soak ({fmt(soak.get('minutes'), 1)} min)", "",
                  f"- latency: {drift(soak.get('latency_slope'), 's')}"]
        qd = as_dict(soak.get("queue_depth"))
        lines.append(f"- queue depth: max {fmt(qd.get('max'))}, mean {fmt(qd.get('mean'), 2)}")
        drops = {a: c for a, c in as_dict(soak.get("drops")).items() if c}
        lines.append("- drops: " + ("; ".join(
            f"{a} " + ", ".join(f"{k}={v}" for k, v in as_dict(c).items())
            for a, c in drops.items()) or "none"))
        fds = as_dict(soak.get("fds"))
        actors = list(as_dict(soak.get("rss_slope"))) + [
            a for a in fds if a not in as_dict(soak.get("rss_slope"))]
        if actors:
            lines.append("")
            lines += table(["actor", "RSS drift", "RSS, last half (MB)", "fds first",
                            "fds last", "fds max"],
                           [[a, drift(get(soak, "rss_slope", a), "MB"),
                             get(soak, "rss_last_half_mb", a),
                             get(fds, a, "first"), get(fds, a, "last"), get(fds, a, "max")]
                            for a in actors])
    if isinstance(report.get("room"), dict):
        from voxweft.tools.bench.room import markdown as room_markdown

        real_time = not as_dict(report.get("config")).get("fast")
        lines += ["", *room_markdown(report["room"], real_time).splitlines()]
    if isinstance(report.get("terms"), dict):
        from voxweft.tools.bench.terms import markdown as terms_markdown

        lines += ["", *terms_markdown(report["terms"]).splitlines()]
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
        text = reportcompare.compare(json.loads(args.compare.read_text()), report)
        sys.stdout.write(text)
    else:
        sys.stdout.write(markdown(report))
    if args.timeline:
        reportplots.plot_timeline(report, args.timeline)
    if args.soak:
        reportplots.plot_soak(report, args.soak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
