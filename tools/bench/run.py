"""`voxweft bench`: the real pipeline on a corpus, measured; a JSON report, Markdown and plots.

One run does, in order:

1. Joins the corpus's audio files (`NAME.wav`, optional `NAME.txt` transcript and
   `NAME.<tgt>.txt` translation references) into one session, 16 kHz mono, `pause_s` of
   silence after each file (looped for `--soak MINUTES`), and interprets it with the real
   supervised pipeline of the active topology (real time, or `--fast`), collecting every
   transcript, translation, speech chunk, playback event and status heartbeat from the bus.
2. Stops the pipeline, then runs the in-process floor (`tools.bench.floor`) on the same
   segments with the same engines, and transcribes the spoken translations back.
3. Measures the bus alone (`tools.bench.busbench`): 20 ms frames over ipc and tcp.
4. Computes latency, quality, resources and soak trends and writes `report.json` (schema
   "voxweft-bench/2", described in docs/performance.md), `report.md`, `timeline.png` and, with
   `--soak`, `soak.png`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxweft.actors import budget as cpu_budget
from voxweft.actors import lag as lag_policy
from voxweft.actors.engines.tts import cpu_has_vnni
from voxweft.deploy.supervisor import engine_env
from voxweft.deploy.topology import Topology
from voxweft.protocol import bus as wire
from voxweft.protocol.messages import (
    BUS_RATE,
    SpeechChunk,
    Status,
    Transcript,
    Translation,
    VadEvent,
    trace_ns,
)
from voxweft.tools.bench import metrics as benchmetrics
from voxweft.tools.bench import readers, room, terms
from voxweft.tools.bench import report as benchreport
from voxweft.tools.captions.room import SpokenShare, speech_seconds
from voxweft.tools.interpret import Collector, file_topology, run_supervised
from voxweft.tools.latency import STAGES, stage_times, summarize, utterance_latency

SCHEMA = "voxweft-bench/2"
AUDIO = (".wav", ".flac", ".ogg", ".mp3")
LEAD_S = 0.5                 # silence before the first file
CONTINUOUS_PAUSE_S = 0.3      # `--continuous`: the pause after each file
SAMPLE_EVERY_S = 5.0         # soak series: one point per actor this often
FLOOR_MAX = 60               # the floor and the round trip take the first this many
WARMUP_S = 60.0              # soak: memory trends are fitted after this (or 10 %)
#: Counters that mean something was lost, refused or broken.
#: A 10 ms window of played speech louder than this (RMS, about -40 dBFS) is voiced.
VOICED_RMS = 0.01
DROP_WORDS = ("gap", "overflow", "drop", "bad_", "error", "filled", "refused", "disconnect",
              "lost", "incomplete")
#: The floor's work on an utterance as the pipeline does it: each stage's compute and the hop
#: that brought it its input (`tools.latency` stage names); then the hop to the player.
WORK = {"asr": ("hop_segmenter_asr", "asr"), "mt": ("hop_asr_mt", "mt"),
        "tts": ("hop_mt_tts", "tts_first_chunk")}


class BenchError(Exception):
    """The bench cannot run as asked; the message says what to do. `code`: exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Item:
    """One corpus file and its references."""

    name: str
    path: Path
    ref_text: str | None
    ref_translation: str | None


@dataclass
class Placed:
    """One occurrence of an item in the session, in session seconds."""

    item: Item
    start_s: float
    end_s: float


def corpus_items(corpus: Path, tgt: str, limit: int | None = None) -> list[Item]:
    """The corpus's audio files, sorted by name, with their reference texts where present."""
    if not corpus.is_dir():
        raise BenchError(f"corpus {corpus} is not a folder of audio files")
    items = []
    for path in sorted(p for p in corpus.iterdir() if p.suffix.lower() in AUDIO):
        text = path.with_suffix(".txt")
        translation = path.with_suffix(f".{tgt}.txt")
        items.append(Item(path.stem, path,
                          text.read_text(encoding="utf-8").strip() if text.is_file() else None,
                          translation.read_text(encoding="utf-8").strip()
                          if translation.is_file() else None))
    if not items:
        raise BenchError(f"no audio files ({', '.join(AUDIO)}) in {corpus}")
    return items[:limit] if limit else items


def build_session(items: list[Item], pause_s: float, soak_minutes: float | None,
                  path: Path) -> tuple[list[Placed], float]:
    """Write the session WAV (16 kHz mono); return where each file is and the duration."""
    import soundfile as sf
    import soxr

    clips = []
    for item in items:
        try:
            audio, rate = sf.read(str(item.path), dtype="float32", always_2d=True)
        except (RuntimeError, OSError) as exc:
            raise BenchError(f"cannot read {item.path} as audio ({exc})") from exc
        mono = audio.mean(axis=1)
        clips.append(soxr.resample(mono, rate, BUS_RATE) if rate != BUS_RATE else mono)
    pause = np.zeros(int(pause_s * BUS_RATE), np.float32)
    parts = [np.zeros(int(LEAD_S * BUS_RATE), np.float32)]
    placed: list[Placed] = []
    n = len(parts[0])
    want = (soak_minutes or 0) * 60 * BUS_RATE
    while True:
        for item, clip in zip(items, clips, strict=True):
            placed.append(Placed(item, n / BUS_RATE, (n + len(clip)) / BUS_RATE))
            parts += [clip.astype(np.float32), pause]
            n += len(clip) + len(pause)
        if n >= want:
            break
    session = np.concatenate(parts)
    sf.write(str(path), session, BUS_RATE, subtype="PCM_16")
    return placed, len(session) / BUS_RATE


class BenchCollector(Collector):
    """interpret's collector, plus heartbeats, commit times, drafts and the spoken audio.

    And how busy the machine was when the session was over, before the pipeline stops.
    """

    def __init__(self) -> None:
        super().__init__()
        self.commit_ns: dict[str, int] = {}
        # utt -> its draft transcripts and translations (a stage that took one worked on it)
        self.drafts: dict[str, list[Transcript | Translation]] = {}
        self.statuses: dict[str, list[Status]] = {}
        self.speech: dict[str, list[np.ndarray]] = {}
        self.speech_rate: dict[str, int] = {}
        self.speed: dict[str, float] = {}
        self.load_at_end: float | None = None        # 1-minute load average
        self.busy_at_end: float | None = None        # cores busy with other work

    def add(self, msg) -> None:
        """Record one message."""
        super().add(msg)
        if isinstance(msg, VadEvent) and msg.event == "end":
            self.commit_ns[msg.utt] = msg.sent_ns
        elif isinstance(msg, (Transcript, Translation)) and not msg.final:
            self.drafts.setdefault(msg.utt, []).append(msg)
        elif isinstance(msg, Status):
            self.statuses.setdefault(msg.src, []).append(msg)
        elif isinstance(msg, SpeechChunk) and len(msg.pcm):
            self.speech.setdefault(msg.utt, []).append(np.asarray(msg.pcm, np.float32))
            self.speech_rate[msg.utt] = msg.sample_rate
            self.speed[msg.utt] = msg.speed

    def finished(self) -> bool:
        """Whether the session is over (interpret's test); when it first is, measure the load."""
        done = super().finished()
        if done and self.load_at_end is None:
            self.load_at_end = os.getloadavg()[0]
            self.busy_at_end = cpu_budget.others_busy_cores(
                [seen[-1].pid for seen in self.statuses.values() if seen and seen[-1].pid])
        return done


def _session_start_ns(collected: BenchCollector) -> int | None:
    """Wall ns of session media time 0, from any trace's capture event."""
    for msg in list(collected.transcripts.values()) + list(collected.started.values()):
        for name, wall, media in msg.trace:
            if name == "capture" and media is not None:
                return wall - int(media * 1e9)
    return None


def _assign(placed: list[Placed], start_s: float, end_s: float) -> int | None:
    """Index of the placed file this utterance overlaps most (None: none)."""
    best, best_overlap = None, 0.0
    for i, p in enumerate(placed):
        overlap = min(end_s, p.end_s) - max(start_s, p.start_s)
        if overlap > best_overlap:
            best, best_overlap = i, overlap
    return best


def _floor(out: Path, topology: Topology, collected: BenchCollector, session: np.ndarray,
           src: str, tgt: str) -> dict:
    """Run tools.bench.floor in a child process with an actor's thread limits."""
    frozen = out / "topology.toml"
    frozen.write_text(topology.dumps(), encoding="utf-8")
    arrays: dict[str, np.ndarray] = {}
    segments, spoken = [], {}
    for utt in collected.committed[:FLOOR_MAX]:
        t = collected.transcripts.get(utt)
        if t is None:
            continue
        a, b = int(round(t.media_start_s * BUS_RATE)), int(round(t.media_end_s * BUS_RATE))
        arrays[f"seg_{utt}"] = session[a:b]
        segments.append(utt)
        if collected.speech.get(utt):
            arrays[f"spk_{utt}"] = np.concatenate(collected.speech[utt])
            spoken[utt] = collected.speech_rate[utt]
    meta = {"topology": str(frozen), "src_lang": src, "tgt_lang": tgt,
            "segments": segments, "spoken": spoken,
            "speed": {u: collected.speed.get(u, 1.0) for u in segments}}
    job = out / "floor-job.npz"
    np.savez(job, meta=np.array(json.dumps(meta)), **arrays)
    threads = str(max(topology.actors[a].threads for a in ("asr", "mt", "tts")))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
           "MKL_NUM_THREADS": threads}
    for stage in ("asr", "mt", "tts"):   # what the engines need from the start (a preload)
        env.update(engine_env(stage, topology.actors[stage]))
    result_path = out / "floor.json"
    print(f"voxweft bench: in-process floor on {len(segments)} segment(s)", flush=True)
    proc = subprocess.run([sys.executable, "-m", "voxweft.tools.bench.floor", str(job),
                           str(result_path)],
                          env=env, cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=3600)
    job.unlink(missing_ok=True)
    if proc.returncode:
        (out / "floor.log").write_text(proc.stdout + proc.stderr)
        raise BenchError(f"the in-process floor failed (see {out / 'floor.log'}): "
                         f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(result_path.read_text())


def _engines(topology: Topology) -> dict[str, str]:
    out = {}
    for name in ("asr", "mt", "tts"):
        cfg = topology.actors[name]
        settings = ", ".join(f"{k}={v}" for k, v in sorted(cfg.engine_settings().items()))
        out[name] = f"{cfg.engine} ({settings})"
    for name in ("capture", "segmenter", "player"):
        cfg = topology.actors[name]
        out[name] = getattr(cfg, "source", None) or getattr(cfg, "sink", None) or "silero"
    return out


def _resources(statuses: dict[str, list[Status]]) -> dict:
    out = {}
    for actor, seen in sorted(statuses.items()):
        with_res = [s for s in seen if s.resources]
        if not with_res:
            continue
        last = with_res[-1].resources
        ready = next((s.resources for s in with_res if s.state != "loading"), last)
        out[actor] = {
            "peak_rss_mb": round(max(s.resources.get("peak_rss_kb", 0) for s in with_res)
                                 / 1024, 1),
            "rss_mb": round(last.get("rss_kb", 0) / 1024, 1),
            "cpu_s": round(last.get("cpu_ms", 0) / 1000, 2),
            "cpu_s_after_ready": round((last.get("cpu_ms", 0) - ready.get("cpu_ms", 0))
                                       / 1000, 2),
            "fds": last.get("fds"), "threads": last.get("threads"),
        }
    return out


def _counters(collected: BenchCollector, actor: str) -> dict[str, int]:
    """The actor's counters in its last heartbeat ({} when none was heard)."""
    seen = collected.statuses.get(actor)
    return seen[-1].counters if seen else {}


def _drops(statuses: dict[str, list[Status]]) -> dict:
    out = {}
    for actor, seen in sorted(statuses.items()):
        counters = seen[-1].counters if seen else {}
        out[actor] = {k: v for k, v in sorted(counters.items())
                      if v and any(w in k for w in DROP_WORDS)}
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
        "drops": _drops(collected.statuses),
        "series": {"latency": latency, "rss_mb": rss, "fds": fds, "queue_depth": queue},
    }


def _last_half_growth(points: list) -> float | None:
    """Last value minus the first value at or after half the series' time span."""
    if len(points) < 2:
        return None
    half = points[0][0] + (points[-1][0] - points[0][0]) / 2
    start = next(v for t, v in points if t >= half)
    return round(points[-1][1] - start, 2)


def analyse(collected: BenchCollector, placed: list[Placed], duration_s: float,
            floor: dict, bus: dict | None, fast: bool, soak_minutes: float | None,
            topology: Topology) -> dict:
    """Everything in the report but its header: latency, floor, quality, resources, soak."""
    t0_ns = _session_start_ns(collected)
    max_lag_s = topology.max_lag_s
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
            "back_text": floor.get("back", {}).get(utt),
            "played": utt in collected.started, "speed": collected.speed.get(utt),
            # False: the player gave up on it part of the way (a chunk came too late)
            "complete": collected.ended[utt].complete if utt in collected.ended else None,
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
    latency = {key: summarize([r[key] for r in rows])
               for key in ("speech_end_to_first_voiced_s", "speech_end_to_first_audio_s",
                           "segment_to_first_audio_s")}
    latency["stages_s"] = {name: summarize([r["stages_s"][name] for r in rows])
                           for name in STAGES}
    pipeline = summarize([r["pipeline_s"] for r in rows])
    floor_s = summarize([r["floor_s"] for r in rows])
    ratio = (round(pipeline["p50"] / floor_s["p50"], 3)
             if pipeline["p50"] and floor_s["p50"] else None)
    resources = _resources(collected.statuses)
    budget = _budget(collected, topology)
    ignored = _ignored(collected, placed)
    report = {
        "spoken": _spoken(collected, rows, placed, resources, budget, topology.tgt_lang,
                          ignored),
        "utterances": rows,
        "ignored": ignored,
        "latency": latency,
        "longform": None if fast else _longform(collected, rows, placed, duration_s, t0_ns),
        "floor": {"pipeline_s": pipeline, "floor_s": floor_s, "ratio_p50": ratio,
                  "stages": _floor_stages(rows), "load_s": floor.get("load_s")},
        "bus": bus,
        "quality": _quality(rows, placed, floor),
        "resources": resources,
        # What was lost, refused or dropped, per actor (live audio: capture's dropped_ms).
        "drops": _drops(collected.statuses),
        "lag": _lag(collected, rows, max_lag_s),
        "speculation": _speculation(collected, rows, duration_s),
        "asr_word_lag": _word_lag(collected, floor_rows, None if fast else t0_ns),
        "budget": budget,
        "soak": _soak(collected, rows, t0_ns, soak_minutes) if soak_minutes and t0_ns else None,
    }
    report["targets"] = _targets(report)
    return report


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _ignored(collected: BenchCollector, placed: list[Placed]) -> list[dict]:
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
    mt, tts = _counters(collected, "mt"), _counters(collected, "tts")
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


def _first_voiced(collected: BenchCollector, utt: str, first_audio_s: float | None,
                  ) -> float | None:
    """End of speech -> the first *voiced* sample heard.

    That is the first audio plus the silence its speech begins with (10 ms windows, up to
    the first louder than VOICED_RMS).
    """
    chunks = collected.speech.get(utt)
    if first_audio_s is None or not chunks:
        return None
    audio, rate = np.concatenate(chunks), collected.speech_rate[utt]
    win = max(1, rate // 100)
    n = len(audio) // win
    if n == 0:
        return None
    rms = np.sqrt(np.mean(audio[:n * win].reshape(n, win) ** 2, axis=1))
    loud = np.flatnonzero(rms > VOICED_RMS)
    lead = int(loud[0]) * win if loud.size else len(audio)
    return round(float(first_audio_s) + lead / rate, 3)


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
    counters = _counters(collected, "tts")
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


def _speculation(collected: BenchCollector, rows: list[dict], duration_s: float) -> dict:
    """Speculative endpointing: drafts sent at pauses, and what each stage did with them.

    Per stage: drafts made, used by the final message (hit rate = used / made), wasted
    (the speaker went on, or the text changed), the time they cost and the time wasted
    (in s per minute of input: the CPU speculation costs); tts also counts drafts it did
    not make because speech queued at the player would have hidden the gain.
    """
    segmenter = (collected.statuses.get("segmenter") or [None])[-1]
    counters = segmenter.counters if segmenter else {}
    ahead = [r for r in rows if "tts" in (r.get("drafted") or ())]
    others = [r for r in rows if "tts" not in (r.get("drafted") or ())]
    out: dict = {"utterances": len(rows),
                 "drafts_sent": counters.get("drafts") if segmenter else None,
                 "cuts": counters.get("cuts", 0), "cuts_late": counters.get("cuts_late", 0),
                 # The headline for utterances whose first chunk was made ahead, and the rest
                 # (often queued behind earlier speech at the player: no draft was needed).
                 "first_audio_s": {
                     "first_chunk_ahead": summarize(
                         [r["speech_end_to_first_audio_s"] for r in ahead]),
                     "not_ahead": summarize([r["speech_end_to_first_audio_s"] for r in others])},
                 "stages": {}}
    minutes = duration_s / 60 if duration_s else None
    asr = (collected.statuses.get("asr") or [None])[-1]
    if asr is not None:   # grown utterances asr transcribed to check the words to a pause
        out["rechecks"] = asr.counters.get("rechecks", 0)
        out["recheck_s"] = round(asr.counters.get("recheck_ms", 0) / 1000, 2)
    for actor in ("asr", "mt", "tts"):
        last = (collected.statuses.get(actor) or [None])[-1]
        if last is None:
            continue
        c = last.counters
        made, used = c.get("drafts", 0), c.get("drafts_used", 0)
        out["stages"][actor] = {
            "made": made, "used": used, "wasted": c.get("drafts_wasted", 0),
            "not_needed": c.get("drafts_not_needed", 0),
            "hit_rate": round(used / made, 3) if made else None,
            "utterances_ahead": round(used / len(rows), 3) if rows else None,
            "cost_s": round(c.get("draft_ms", 0) / 1000, 2),
            "wasted_s": round(c.get("draft_wasted_ms", 0) / 1000, 2),
            "wasted_s_per_min": (round(c.get("draft_wasted_ms", 0) / 1000 / minutes, 3)
                                 if minutes else None),
        }
    return out


def _word_lag(collected: BenchCollector, floor_rows: dict, t0_ns: int | None) -> dict:
    """Per-word ASR lag: when each word's transcript was published, after the word was spoken.

    A word was spoken at the end of its word timestamp (the floor aligns each segment the
    floor ran, the first FLOOR_MAX); its transcript was published at the utterance's
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


def _budget(collected: BenchCollector, topology: Topology) -> dict:
    """Each engine's measured cost (warm-up) and the verdict: it keeps up, or not."""
    budgets = {}
    for actor, seen in collected.statuses.items():
        measured = next((s.budget for s in reversed(seen) if s.budget), None)
        if measured:
            budgets[actor] = measured
    # As said when the pipeline was ready: the machine's other work measured then.
    ok, lines = collected.verdict or cpu_budget.verdict(topology, budgets)
    return {"engines": budgets, "keeps_up": ok if lines else None, "verdict": lines}


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


def _played_s(collected: BenchCollector, utt: str) -> float | None:
    start, end = collected.started.get(utt), collected.ended.get(utt)
    if not start or not end:
        return None
    a, b = trace_ns(start.trace, "play.start"), trace_ns(end.trace, "play.end")
    return round((b - a) / 1e9, 3) if a and b else None


def _longform(collected: BenchCollector, rows: list[dict], placed: list[Placed],
              duration_s: float, t0_ns: int | None) -> dict | None:
    """Start/end offset, LAAL and ATD of the spoken translation (real time), both flavours.

    Computation aware: a translation is emitted when the player started it (wall clock).
    Not: when the system had read the source up to the end of its segment (the
    transcript's `media_end_s`, session seconds), as if computing took no time. Keys:
    `metrics.longform`'s, and `laal_ca_sentence_mean_s`, `sentences`.
    """
    if t0_ns is None:
        return None
    # Each played translation: one output segment of the session, in source order, and, as
    # sentence-level SimulEval reports it, one of its own utterance (from its first to its
    # last voiced sample).
    segments, per = [], []
    for r in rows:
        ev = collected.started.get(r["utt"])
        if not ev or not r["translation"] or r["played_s"] is None or r["media_end_s"] is None:
            continue
        start = trace_ns(ev.trace, "play.start")
        words = len(r["translation"].split())
        segments.append((r["media_end_s"], ((start - t0_ns) / 1e9, r["played_s"], words)))
        a, b = trace_ns(ev.trace, "speech_start"), trace_ns(ev.trace, "speech_end")
        if a is not None and b is not None and b > a:
            one = benchmetrics.longform((b - a) / 1e9, [((start - a) / 1e9, r["played_s"],
                                                         words)])
            per.append(one["laal_ca_s"])
    if not segments:
        return None
    segments.sort(key=lambda seg: seg[0])
    refs = [p.item.ref_translation for p in placed]
    ref_words = (sum(len(r.split()) for r in refs) if all(refs) else None)
    out = benchmetrics.longform(duration_s, [seg for _read, seg in segments], ref_words,
                                read_s=[read for read, _seg in segments])
    out["laal_ca_sentence_mean_s"] = round(float(np.mean(per)), 3) if per else None
    out["sentences"] = len(per)
    return out


def _quality(rows: list[dict], placed: list[Placed], floor: dict) -> dict:
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
    pairs = [(r["translation"], r["back_text"]) for r in rows
             if r["translation"] and r["back_text"] is not None]
    if pairs:
        said, heard = [a for a, _ in pairs], [b for _, b in pairs]
        round_trip = {**benchmetrics.wer(said, heard),
                      "chrf": benchmetrics.mt_scores(heard, said)["chrf"],
                      "utterances": len(pairs)}
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
    out.append(row("LAAL_CA (s)", 3.0, None, (report.get("longform") or {}).get("laal_ca_s")))
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


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host(load_start: float, busy_start: float, collected: BenchCollector) -> dict:
    """Which machine, and how busy with other work when the run started and when it ended.

    `load_1min_*`: the 1-minute load average; `others_busy_cores_*`: cores busy with work
    other than the pipeline's actors (`actors.budget.others_busy_cores`), measured before
    the pipeline started and when the session was over, before it stopped.
    """
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    return {"platform": platform.platform(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "cpu_model": _cpu_model(), "vnni": cpu_has_vnni(),
            "load_1min_start": r(load_start), "load_1min_end": r(collected.load_at_end),
            "others_busy_cores_start": r(busy_start),
            "others_busy_cores_end": r(collected.busy_at_end)}


def bench(base: Topology, corpus: Path, out: Path, src: str, tgt: str, fast: bool,
          pause_s: float = 1.0, soak_minutes: float | None = None, limit: int | None = None,
          bus_seconds: float = 10.0, bus_frames: int = 20000, command: str = "") -> dict:
    """Run the whole bench; write the report files into `out`; return the report."""
    items = corpus_items(corpus, tgt, limit)
    out.mkdir(parents=True, exist_ok=True)
    session_path = out / "session.wav"
    placed, duration_s = build_session(items, pause_s, soak_minutes, session_path)
    print(f"voxweft bench: {len(items)} file(s), session {duration_s:.1f} s"
          f"{' (soak)' if soak_minutes else ''} -> {session_path}", flush=True)
    # In real time the bench is a live talk: the bounded lag applies (not with --fast).
    topology = file_topology(base, session_path.resolve(), out.resolve(), src, tgt, fast,
                             live=not fast)
    collected = BenchCollector()
    limit_s = (duration_s / (50 if fast else 1)) + 300 + 10 * len(placed)
    # How busy the machine is before the pipeline starts: all of it is other work.
    load_start, busy_start = os.getloadavg()[0], cpu_budget.others_busy_cores([])
    code, reason = run_supervised(topology, collected,
                                  wire.watched("bench"), out, limit_s,
                                  f"benchmarking {len(placed)} file(s)")
    if code:   # stopped or failed: what was interpreted so far, marked partial
        collected.write(out, fast, src, tgt, partial=reason)
        raise BenchError(f"{'stopped' if code >= 128 else 'the pipeline failed'}: {reason}; "
                         f"partial outputs ({len(collected.transcripts)} utterance(s)) in "
                         f"{out}, logs in {out / 'logs'}", code)
    import soundfile as sf

    session, _ = sf.read(str(session_path), dtype="float32")
    floor = _floor(out, topology, collected, session, src, tgt)
    bus = None
    if bus_seconds > 0:
        from voxweft.tools.bench import busbench

        print("voxweft bench: bus hops (ipc, tcp; real time and flood)", flush=True)
        bus = busbench.run_all(bus_seconds, bus_frames)
    report = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "host": _host(load_start, busy_start, collected),
        "config": {"topology": base.source, "corpus": str(corpus), "files": len(items),
                   "src_lang": src, "tgt_lang": tgt, "fast": fast, "pause_s": pause_s,
                   "soak_minutes": soak_minutes, "session_s": round(duration_s, 2),
                   "engines": _engines(topology)},
        **analyse(collected, placed, duration_s, floor, bus, fast, soak_minutes, topology),
    }
    write(report, out)
    return report


def bench_room(base: Topology, corpus: Path, out: Path, src: str, tgt: str, fast: bool,
               snrs=room.DEFAULT_SNRS, talker_dbs=room.DEFAULT_TALKER_DB,
               limit: int | None = None, **options) -> dict:
    """The bench on the corpus as a room makes it (`room`): its report with `room` added."""
    items = corpus_items(corpus, tgt, limit)
    print(f"voxweft bench: the room: {len(items)} file(s) under noise at "
          f"{', '.join(f'{s:g}' for s in snrs)} dB SNR, a second talker "
          f"{', '.join(f'{d:g}' for d in talker_dbs)} dB below, and no speech", flush=True)
    conds = room.conditions(snrs, talker_dbs)
    manifest = room.merge(
        room.build(items, out / "room", [c for c in conds if c.kind not in readers.KINDS]),
        readers.build(items, out / "room", [c for c in conds if c.kind in readers.KINDS]),
        conds, out / "room")
    report = bench(base, out / "room", out, src, tgt, fast, **options)
    report["room"] = room.analyse(report, manifest)
    write(report, out)
    return report


def bench_terms(base: Topology, out: Path, src: str, tgt: str, fast: bool, **options) -> dict:
    """The bench on the glossary's sentences (`terms`), without and then with the glossary.

    The report is the run with the glossary, with `terms` (both runs' scores) added; the run
    without it is in `OUT/without`.
    """
    try:
        glossary_path, _ = terms.files(src, tgt)
        glossary, text_of = terms.build(src, tgt, out / "terms")
    except terms.TermsError as exc:
        raise BenchError(str(exc)) from None
    print(f"voxweft bench: the words that matter: {len(text_of)} sentences with "
          f"{len(glossary.terms)} glossary terms, without and with the glossary", flush=True)
    without = bench(base.with_overrides({"pipeline": {"glossary": ""}}), out / "terms",
                    out / "without", src, tgt, fast, **options)
    report = bench(base.with_overrides({"pipeline": {"glossary": str(glossary_path)}}),
                   out / "terms", out, src, tgt, fast, **options)
    report["terms"] = {"without": terms.score(without, glossary, text_of),
                       "with": terms.score(report, glossary, text_of)}
    write(report, out)
    return report


def write(report: dict, out: Path) -> None:
    """report.json, report.md, timeline.png and (soak) soak.png."""
    # A numpy scalar that slipped into the figures must not cost the run its report.
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False,
                                                default=_plain))
    (out / "report.md").write_text(benchreport.markdown(report), encoding="utf-8")
    benchreport.plot_timeline(report, out / "timeline.png")
    if report.get("soak"):
        benchreport.plot_soak(report, out / "soak.png")


def _plain(value):
    """JSON for a numpy scalar (or, failing that, its text)."""
    return value.item() if hasattr(value, "item") else str(value)


def load_report(path: Path) -> dict:
    """A report written by an earlier run."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read bench report {path}: {exc}") from exc
    if not isinstance(report, dict) or "schema" not in report:
        raise BenchError(f"{path} is not a voxweft bench report (no 'schema' key)")
    return report
