"""The figures of a bench session, once it is over: the body of its report.

`analyse` makes every section but the header (which machine, which configuration: `run`)
from what the bus carried (`run.BenchCollector`), where each corpus file was in the session
(`run.Placed`) and the in-process floor's results: the utterances (`utterances`), how much
of what was said was spoken, latency, the floor against the pipeline, quality against the
references, how far behind the speaker the listener was (lag, long-form delay, per-word ASR
lag), the actors' own figures (`heartbeats`), soak trends, and each figure against its target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from voxweft.actors import budget as cpu_budget
from voxweft.actors import lag as lag_policy
from voxweft.deploy.topology import Topology
from voxweft.protocol.messages import trace_ns
from voxweft.tools.bench import heartbeats, room, sentences
from voxweft.tools.bench import metrics as benchmetrics
from voxweft.tools.bench.utterances import ignored_stretches, session_start_ns, utterance_rows
from voxweft.tools.captions.room import SpokenShare
from voxweft.tools.latency import STAGES, summarize

if TYPE_CHECKING:   # run imports the scoring: its types only for the annotations
    from voxweft.tools.bench.run import BenchCollector, Placed

SAMPLE_EVERY_S = 5.0         # soak series: one point per actor this often
WARMUP_S = 60.0              # soak: memory trends are fitted after this (or 10 %)


def analyse(collected: BenchCollector, placed: list[Placed], duration_s: float,
            floor: dict, bus: dict | None, fast: bool, soak_minutes: float | None,
            topology: Topology) -> dict:
    """Everything in the report but its header: latency, floor, quality, resources, soak."""
    t0_ns = session_start_ns(collected)
    max_lag_s = topology.max_lag_s
    floor_rows = floor.get("floor", {})
    rows = utterance_rows(collected, placed, floor, t0_ns)
    groups = sentences.group((r["utt"], r["media_start_s"], r["media_end_s"], r["text"],
                              r["translation"]) for r in rows)
    head = {utt: group[0] for group in groups for utt in group}
    for r in rows:
        r["sentence"] = head[r["utt"]]
    latency = {key: summarize([r[key] for r in rows])
               for key in ("speech_end_to_first_voiced_s", "speech_end_to_first_audio_s",
                           "segment_to_first_audio_s")}
    latency["stages_s"] = {name: summarize([r["stages_s"][name] for r in rows])
                           for name in STAGES}
    pipeline = summarize([r["pipeline_s"] for r in rows])
    floor_s = summarize([r["floor_s"] for r in rows])
    ratio = (round(pipeline["p50"] / floor_s["p50"], 3)
             if pipeline["p50"] and floor_s["p50"] else None)
    resources = heartbeats.resources(collected.statuses)
    budget = heartbeats.budget(collected, topology)
    ignored = ignored_stretches(collected, placed)
    report = {
        "spoken": _spoken(collected, rows, placed, resources, budget, topology.tgt_lang,
                          ignored),
        "utterances": rows,
        "ignored": ignored,
        "latency": latency,
        "longform": None if fast else _longform(collected, rows, placed, duration_s, t0_ns),
        "sentences": _sentences(collected, rows, groups, t0_ns),
        "underruns": _underruns(rows),
        "floor": {"pipeline_s": pipeline, "floor_s": floor_s, "ratio_p50": ratio,
                  "stages": _floor_stages(rows), "load_s": floor.get("load_s")},
        "bus": bus,
        "quality": _quality(rows, placed, floor, groups),
        "resources": resources,
        # What was lost, refused or dropped, per actor (live audio: capture's dropped_ms).
        "drops": heartbeats.drops(collected.statuses),
        "lag": _lag(collected, rows, max_lag_s),
        "speculation": heartbeats.speculation(collected, rows, duration_s),
        "asr_word_lag": _word_lag(collected, floor_rows, None if fast else t0_ns),
        "budget": budget,
        "work": heartbeats.work(collected, rows, topology, budget["engines"]),
        "soak": _soak(collected, rows, t0_ns, soak_minutes) if soak_minutes and t0_ns else None,
    }
    report["targets"] = _targets(report)
    return report


def _underruns(rows: list[dict]) -> dict:
    """The holes heard inside utterances (the player's underruns).

    How many, in how many utterances, how long in all and the longest utterance's.
    """
    heard = [r for r in rows if r.get("underruns") is not None]
    holes = [r for r in heard if r["underruns"]]
    return {"underruns": sum(r["underruns"] for r in heard), "utterances": len(holes),
            "of": len(heard), "s_total": round(sum(r["underrun_s"] for r in holes), 3),
            "s_max": max((r["underrun_s"] for r in holes), default=0.0)}


def _spoken(collected: BenchCollector, rows: list[dict], placed: list[Placed],
            resources: dict, budget: dict, tgt: str, ignored: list[dict] = ()) -> dict:
    """The headline: how much of what was said the listener heard translated, and the cost.

    `share`: with reference texts (`basis` "reference words"), the share of the reference's
    words whose translation was spoken: per file, the reference aligned with the transcripts,
    in order, of that file's utterances spoken whole (played, not skipped, not cut off by
    the player: `room.spoken`); a reference word aligned to a word of them (the same, or
    misheard) was spoken, a deleted one (ignored by the speaker gate, not transcribed, or in
    an utterance not spoken) was not (`metrics.matched_words`): `words_spoken` of `words`.
    Without any (`basis` "speech heard"): `speech_share`, seconds of speech of the
    utterances spoken / of every utterance and every stretch ignored (SpokenShare: `heard_s`,
    `spoken_s`, `ignored_s`, `ignored`), which is given in both cases.
    What condensed the speech to keep up, from the actors' last counters (0 when absent):
    `fillers_removed` (mt: words not translated), `pauses_cut_s` (tts: silence taken out),
    `lag_speedup`, `lag_long_chunks`, `lag_skip` (tts: the bounded lag's steps, actors.lag).
    `tts_cpu_per_source_s`: tts's CPU seconds after it was ready / seconds of source speech
    (the corpus files, pauses left out); `tts_budget_cpu_per_source_s`: what the budget
    counted on, tts's warm-up CPU per second of its own speech times the target language's
    expansion (as `actors.budget.verdict` counts it).
    """
    seconds = SpokenShare.of(((r.get("speech_s"), room.spoken(r)) for r in rows),
                             [s["length_s"] for s in ignored]).summary()
    refs, said = [], []
    for i, p in enumerate(placed):
        if p.item.ref_text is not None:
            spoken = sorted((r for r in rows if r.get("placed") == i and room.spoken(r)),
                            key=lambda r: r["media_start_s"] or 0.0)
            refs.append(p.item.ref_text)
            said.append(" ".join(r["text"] or "" for r in spoken))
    matched, words = benchmetrics.matched_words(refs, said)
    mt, tts = heartbeats.counters(collected, "mt"), heartbeats.counters(collected, "tts")
    pauses_s = (tts["pauses_cut_ms"] / 1000 if "pauses_cut_ms" in tts
                else tts.get("pauses_cut_s", 0))
    source_s = sum(p.end_s - p.start_s for p in placed)
    tts_cpu = (resources.get("tts") or {}).get("cpu_s_after_ready")
    tts_budget = (budget.get("engines") or {}).get("tts")
    return {
        "share": round(matched / words, 4) if words else seconds["share"],
        "basis": "reference words" if words else "speech heard",
        "words_spoken": matched if words else None, "words": words or None,
        "speech_share": seconds.pop("share"), **seconds,
        "fillers_removed": mt.get("fillers_removed", 0),
        "pauses_cut_s": round(pauses_s, 2),
        **{f"lag_{step}": tts.get(f"lag_{step}", 0) for step in ("speedup", "long_chunks",
                                                                  "skip")},
        "tts_cpu_per_source_s": (round(tts_cpu / source_s, 3)
                                 if tts_cpu is not None and source_s > 0 else None),
        "tts_budget_cpu_per_source_s": (round(cpu_budget.source_cpu(tts_budget, tgt), 3)
                                        if tts_budget else None),
    }


def _lag(collected: BenchCollector, rows: list[dict], max_lag_s: float) -> dict:
    """How far behind the speaker the listener was, and what the bounded lag did about it.

    The lag of an utterance is end of its speech -> its first audio. The slope (s per
    minute of session, with its 95 % interval) is ~0 when the pipeline keeps up.
    """
    pts = [(r["wall_s"], r["speech_end_to_first_audio_s"]) for r in rows
           if r.get("wall_s") is not None and r.get("speech_end_to_first_audio_s") is not None]
    slope = benchmetrics.slope_per_10min([t for t, _ in pts], [v for _, v in pts])
    per_min = {k: (round(v / 10, 4) if isinstance(v, float) else v) for k, v in slope.items()
               if k in ("slope_per_10min", "ci95_per_10min")}
    counters = heartbeats.counters(collected, "tts")
    lags = [v for _, v in pts]
    return {
        "max_lag_s": max_lag_s,
        "max_s": round(max(lags), 3) if lags else None,
        "p95_s": summarize(lags)["p95"],
        "slope_s_per_min": per_min.get("slope_per_10min"),
        "slope_ci95_s_per_min": per_min.get("ci95_per_10min"),
        "slope_distinguishable_from_zero": slope["distinguishable_from_zero"],
        "steps": {step: counters.get(f"lag_{step}", 0) for step in lag_policy.STEPS},
        "not_spoken": sum(1 for r in rows if r.get("not_spoken")),
        "utterances": len(rows),
    }


def _word_lag(collected: BenchCollector, floor_rows: dict, t0_ns: int | None) -> dict:
    """Per-word ASR lag: when each word's transcript was published, after the word was spoken.

    A word was spoken at the end of its word timestamp (the floor aligns each segment the
    floor ran, the first `run.FLOOR_MAX`); its transcript was published at the utterance's
    `asr.end`. Comparable with streaming ASR projects' per-word latency.
    """
    lags = []
    for utt, row in floor_rows.items():
        t = collected.transcripts.get(utt)
        published = trace_ns(t.trace, "asr.end") if t else None
        if published is None or t0_ns is None:
            continue
        for _word, _start, end in row.get("words") or ():
            spoken = t0_ns + (t.media_start_s + end) * 1e9
            lags.append((published - spoken) / 1e9)
    if not lags:
        return {"words": 0, "mean_s": None, "p50_s": None, "max_s": None}
    return {"words": len(lags), "mean_s": round(float(np.mean(lags)), 3),
            "p50_s": summarize(lags)["p50"], "max_s": round(max(lags), 3)}


def _longform(collected: BenchCollector, rows: list[dict], placed: list[Placed],
              duration_s: float, t0_ns: int | None) -> dict | None:
    """Start/end offset, LAAL and ATD of the spoken translation (real time), both flavours.

    Computation aware: a translation is emitted when the player started it (wall clock).
    Not: when the system had read the source up to the end of its segment (the
    transcript's `media_end_s`, session seconds), as if computing took no time. Keys:
    `metrics.longform`'s (per sentence: `_sentences`).
    """
    if t0_ns is None:
        return None
    # Each played translation: one output segment of the session, in source order.
    segments = []
    for r in rows:
        ev = collected.started.get(r["utt"])
        if not ev or not r["translation"] or r["played_s"] is None or r["media_end_s"] is None:
            continue
        start = trace_ns(ev.trace, "play.start")
        words = len(r["translation"].split())
        segments.append((r["media_end_s"], ((start - t0_ns) / 1e9, r["played_s"], words)))
    if not segments:
        return None
    segments.sort(key=lambda seg: seg[0])
    refs = [p.item.ref_translation for p in placed]
    ref_words = (sum(len(r.split()) for r in refs) if all(refs) else None)
    out = benchmetrics.longform(duration_s, [seg for _read, seg in segments], ref_words,
                                read_s=[read for read, _seg in segments])
    return out


def _sentences(collected: BenchCollector, rows: list[dict], groups: list[list[str]],
               t0_ns: int | None) -> dict:
    """The session's sentences, as the listener hears them (`tools.bench.sentences`).

    `count`, `pieces` (utterances committed), `joins` (the holes, silences and clicks where
    a sentence's pieces hand over: `sentences.joins`) and `offsets` (each sentence its own
    source, as sentence-level SimulEval reports: `sentences.offsets`); both None without a
    session start.
    """
    out: dict = {"count": len(groups), "pieces": len(rows), "joins": None, "offsets": None}
    if t0_ns is None:
        return out

    def wall(ev, event: str) -> float | None:
        ns = trace_ns(ev.trace, event) if ev else None
        return None if ns is None else (ns - t0_ns) / 1e9

    played, spoken = {}, {}
    for r in rows:
        start, end = collected.started.get(r["utt"]), collected.ended.get(r["utt"])
        a, b = wall(start, "play.start"), wall(end, "play.end")
        if a is not None and b is not None:
            played[r["utt"]] = (a, b)
        c, d = wall(start, "speech_start"), wall(start, "speech_end")
        if c is not None and d is not None:
            spoken[r["utt"]] = (c, d)
    speech = {u: (np.concatenate(c), collected.speech_rate[u])
              for u, c in collected.speech.items() if c}
    out["joins"] = sentences.joins(groups, played, speech)
    out["offsets"] = sentences.offsets(groups, {r["utt"]: r for r in rows}, played, spoken)
    return out


def _soak(collected: BenchCollector, rows: list[dict], t0_ns: int, minutes: float) -> dict:
    """Latency, RSS, descriptors and pipeline queue depth over time, and their trends."""
    latency = [[r["wall_s"], r["speech_end_to_first_audio_s"]] for r in rows
               if r.get("wall_s") is not None and r.get("speech_end_to_first_audio_s")]
    rss: dict[str, list] = {}
    fds: dict[str, list] = {}
    for actor, seen in collected.statuses.items():
        last_t = -SAMPLE_EVERY_S
        for s in seen:
            t = (s.sent_ns - t0_ns) / 1e9
            if t < 0 or not s.resources or s.state == "loading" or t - last_t < SAMPLE_EVERY_S:
                continue
            last_t = t
            rss.setdefault(actor, []).append([round(t, 1),
                                              round(s.resources["rss_kb"] / 1024, 1)])
            if "fds" in s.resources:
                fds.setdefault(actor, []).append([round(t, 1), s.resources["fds"]])
    # Pipeline queue depth: utterances committed but not yet heard.
    spans = []
    for utt, commit in collected.commit_ns.items():
        ev = collected.started.get(utt)
        heard = (trace_ns(ev.trace, "play.start") or ev.sent_ns) if ev else None
        spans.append(((commit - t0_ns) / 1e9,
                      (heard - t0_ns) / 1e9 if heard else float("inf")))
    end_s = max([b for _a, b in spans if b != float("inf")] + [0.0])
    queue = [[round(t, 1), sum(1 for a, b in spans if a <= t < b)]
             for t in np.arange(0.0, end_s + SAMPLE_EVERY_S, SAMPLE_EVERY_S)]
    depths = [d for _t, d in queue]
    # Memory is judged after the warm-up (allocator arenas, lazily built caches, the first
    # long utterance): the first 10 % of the session or 60 s, whichever is longer.
    warm_s = max(WARMUP_S, 0.1 * minutes * 60)
    settled = {a: [p for p in pts if p[0] >= warm_s] for a, pts in rss.items()}
    return {
        "minutes": minutes,
        "latency_slope": benchmetrics.slope_per_10min([t for t, _ in latency],
                                                      [v for _, v in latency]),
        "rss_after_s": warm_s,
        "rss_slope": {a: benchmetrics.slope_per_10min([t for t, _ in pts], [v for _, v in pts])
                      for a, pts in sorted(settled.items())},
        # RSS grows in steps (arenas, caches), which a line fit calls a trend; what a leak
        # shows is growth that goes on: the change over the second half of the session.
        "rss_last_half_mb": {a: _last_half_growth(pts) for a, pts in sorted(rss.items())},
        "fds": {a: {"first": pts[0][1], "last": pts[-1][1], "max": max(v for _, v in pts)}
                for a, pts in sorted(fds.items())},
        "queue_depth": {"max": max(depths, default=0),
                        "mean": round(float(np.mean(depths)), 3) if depths else 0},
        "drops": heartbeats.drops(collected.statuses),
        "series": {"latency": latency, "rss_mb": rss, "fds": fds, "queue_depth": queue},
    }


def _last_half_growth(points: list) -> float | None:
    """Last value minus the first value at or after half the series' time span."""
    if len(points) < 2:
        return None
    half = points[0][0] + (points[-1][0] - points[0][0]) / 2
    start = next(v for t, v in points if t >= half)
    return round(points[-1][1] - start, 2)


def _floor_stages(rows: list[dict]) -> dict:
    """Per stage, its compute in the pipeline against the floor's, on the same utterances.

    `{asr|mt|tts_first_chunk: {n, pipeline_p50, floor_p50, ratio_p50}}`; the pipeline's
    compute on a draft where the stage took one (tts's is not on the bus).
    """
    out = {}
    for stage in ("asr", "mt", "tts_first_chunk"):
        pairs = [(r["pipeline_stages_s"][stage], r["floor_stages_s"][stage]) for r in rows
                 if r["pipeline_stages_s"].get(stage) is not None
                 and r["floor_stages_s"].get(stage) is not None]
        a, b = (summarize([p[k] for p in pairs])["p50"] for k in (0, 1))
        out[stage] = {"n": len(pairs), "pipeline_p50": a, "floor_p50": b,
                      "ratio_p50": round(a / b, 3) if a and b else None}
    return out


def _quality(rows: list[dict], placed: list[Placed], floor: dict,
             groups: list[list[str]]) -> dict:
    """WER of the transcripts, MT scores of the translations, each against the references.

    Per corpus file, its utterances' texts joined; and the round trip, per sentence: the
    translations of its pieces that were spoken, joined, against what the floor heard when
    it transcribed their speech, played back to back, back (`back_pieces`: which pieces).
    """
    by_placed: dict[int, list[dict]] = {}
    for r in rows:
        if r["placed"] is not None:
            by_placed.setdefault(r["placed"], []).append(r)
    asr_refs, asr_hyps, mt_refs, mt_hyps = [], [], [], []
    for i, p in enumerate(placed):
        got = by_placed.get(i, [])
        if p.item.ref_text is not None:
            asr_refs.append(p.item.ref_text)
            asr_hyps.append(" ".join(r["text"] or "" for r in got))
        if p.item.ref_translation is not None:
            mt_refs.append(p.item.ref_translation)
            mt_hyps.append(" ".join(r["translation"] or "" for r in got))
    asr = benchmetrics.wer(asr_refs, asr_hyps) if asr_refs else None
    if asr:
        asr["files"] = len(asr_refs)
    mt = benchmetrics.mt_scores(mt_hyps, mt_refs) if mt_refs else None
    if mt:
        mt["files"] = len(mt_refs)
    translation = {r["utt"]: r["translation"] or "" for r in rows}
    back, pieces = floor.get("back", {}), floor.get("back_pieces", {})
    heads = [g[0] for g in groups if g[0] in back]
    said = [" ".join(translation.get(u, "") for u in pieces.get(h, [h])) for h in heads]
    if any(s.strip() for s in said):
        heard = [back[h] for h in heads]
        round_trip = {**benchmetrics.wer(said, heard),
                      "chrf": benchmetrics.mt_scores(heard, said)["chrf"],
                      "sentences": len(heads),
                      "pieces": sum(len(pieces.get(h, [h])) for h in heads)}
    else:
        round_trip = {"skipped": floor.get("round_trip_skipped") or "nothing was spoken"}
    return {"asr": asr, "mt": mt, "round_trip": round_trip}


def _targets(report: dict) -> list[dict]:
    """Each figure against its target: met at or below it (at or above: higher is better)."""
    def row(name, target, goal, value, lower_is_better=True):
        met = None if value is None else bool(value <= target if lower_is_better
                                              else value >= target)
        return {"name": name, "target": target, "goal": goal, "value": value, "met": met}

    spoken = report.get("spoken") or {}
    share = spoken.get("share")
    out = [
        # What the listener gets: every word said, spoken in translation.
        row("spoken share (%)", 100, None,
            None if share is None else round(100 * share, 1), lower_is_better=False),
        # The honest headline: the first sample the listener can hear as speech.
        row("end of speech -> first voiced audio p50 (s)", 1.5, 1.0,
            (report["latency"].get("speech_end_to_first_voiced_s") or {}).get("p50")),
        row("end of speech -> first audio p50 (s)", 1.5, 1.0,
            report["latency"]["speech_end_to_first_audio_s"]["p50"]),
        row("pipeline / in-process floor (p50)", 1.10, 1.03, report["floor"]["ratio_p50"]),
        # The system we model: VoxCPM2 (MLX, 4-bit) on an M3 Ultra, first audio 124-168 ms
        # after a request.
        row("tts first chunk p50 (s)", 0.168, 0.124,
            ((report["latency"].get("stages_s") or {}).get("tts_first_chunk") or {})
            .get("p50")),
    ]
    for transport in ("ipc", "tcp"):
        rt = ((report.get("bus") or {}).get(transport) or {}).get("realtime") or {}
        out.append(row(f"bus hop p99 at real-time rate, {transport} (ms)", 1.0, None,
                       rt.get("p99_ms")))
    words = report.get("asr_word_lag") or {}
    out.append(row("per-word ASR lag mean (s)", 1.5, None, words.get("mean_s")))
    # Continuous speech: the whole talk's lag, and what the voice costs to keep up with it.
    # A human interpreter's ear-voice span is ~3 s; LAAL leaves computing out (what a Mac,
    # where computing costs little, would see).
    longform = report.get("longform") or {}
    out.append(row("LAAL_CA (s)", 3.0, None, longform.get("laal_ca_s")))
    out.append(row("LAAL (s)", 2.0, None, longform.get("laal_s")))
    sentences = report.get("sentences") or {}
    out.append(row("EndOffset_CA per sentence p50 (s)", 3.0, None,
                   ((sentences.get("offsets") or {}).get("end_offset_s") or {}).get("p50")))
    out.append(row("holes inside a sentence", 0, None,
                   (sentences.get("joins") or {}).get("holes")))
    out.append(row("underruns inside an utterance", 0, None,
                   (report.get("underruns") or {}).get("underruns")))
    out.append(row("tts CPU s per s of source", 0.8, None, spoken.get("tts_cpu_per_source_s")))
    lag = report.get("lag") or {}
    if lag.get("max_lag_s"):
        out.append(row("max lag (s), within the bound", lag["max_lag_s"], None,
                       lag.get("max_s")))
    soak = report.get("soak")
    if soak:
        slope = soak["latency_slope"]
        out.append({"name": "soak: latency slope (s per 10 min)", "target": "0 within 95 % CI",
                    "goal": None, "value": slope.get("slope_per_10min"),
                    "met": None if slope.get("slope_per_10min") is None
                    else not slope["distinguishable_from_zero"]})
        grow = {a: g for a, g in soak["rss_last_half_mb"].items() if g is not None}
        worst = max(grow.items(), key=lambda kv: kv[1], default=None)
        last_mb = {a: pts[-1][1] for a, pts in soak["series"]["rss_mb"].items() if pts}
        out.append({"name": "soak: largest RSS growth over the second half (MB)",
                    "target": "< 1 % of the actor's RSS", "goal": None,
                    "value": f"{worst[0]} {worst[1]:+.2f}" if worst else None,
                    "met": None if not worst else all(
                        g < 0.01 * last_mb.get(a, 0) for a, g in grow.items())})
    return out
