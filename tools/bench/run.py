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
4. Computes latency, quality, resources and soak trends (`tools.bench.score`) and writes
   `report.json` (schema "voxweft-bench/2", described in docs/performance.md), `report.md`,
   `timeline.png` and, with `--soak`, `soak.png` (`tools.bench.reportfiles`).

This module runs; scoring and the report's files are the modules named above.
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
)
from voxweft.tools.bench import readers, room, sentences, terms
from voxweft.tools.bench.reportfiles import BenchError, write
from voxweft.tools.bench.reportformat import SCHEMA
from voxweft.tools.bench.score import analyse
from voxweft.tools.interpret import Collector, file_topology, run_supervised

AUDIO = (".wav", ".flac", ".ogg", ".mp3")
LEAD_S = 0.5                 # silence before the first file
CONTINUOUS_PAUSE_S = 0.3      # `--continuous`: the pause after each file
FLOOR_MAX = 60               # the floor and the round trip take the first this many


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


def _floor(out: Path, topology: Topology, collected: BenchCollector, session: np.ndarray,
           src: str, tgt: str) -> dict:
    """Run tools.bench.floor in a child process with an actor's thread limits."""
    frozen = out / "topology.toml"
    frozen.write_text(topology.dumps(), encoding="utf-8")
    arrays: dict[str, np.ndarray] = {}
    segments = []
    for utt in collected.committed[:FLOOR_MAX]:
        t = collected.transcripts.get(utt)
        if t is None:
            continue
        a, b = int(round(t.media_start_s * BUS_RATE)), int(round(t.media_end_s * BUS_RATE))
        arrays[f"seg_{utt}"] = session[a:b]
        segments.append(utt)
    # The round trip hears each sentence as the listener did: its pieces' speech back to back.
    spoken, pieces = {}, {}
    for sentence in sentences.group(_pieces(collected)):
        said = [u for u in sentence if u in segments and collected.speech.get(u)
                and collected.speech_rate[u] == collected.speech_rate[sentence[0]]]
        if said and said[0] == sentence[0]:
            arrays[f"spk_{said[0]}"] = np.concatenate([c for u in said
                                                      for c in collected.speech[u]])
            spoken[said[0]], pieces[said[0]] = collected.speech_rate[said[0]], said
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
    result = json.loads(result_path.read_text())
    result["back_pieces"] = pieces
    return result


def _pieces(collected: BenchCollector) -> list[sentences.Piece]:
    """The committed utterances as `sentences.group` takes them, in commit order."""
    out = []
    for utt in collected.committed:
        t, tr = collected.transcripts.get(utt), collected.translations.get(utt)
        out.append((utt, t.media_start_s if t else None, t.media_end_s if t else None,
                    t.text if t else "", tr.text if tr else ""))
    return out


def _engines(topology: Topology) -> dict[str, str]:
    """Which engine (and its settings) or device each actor ran: the header's `engines`."""
    out = {}
    for name in ("asr", "mt", "tts"):
        cfg = topology.actors[name]
        settings = ", ".join(f"{k}={v}" for k, v in sorted(cfg.engine_settings().items()))
        out[name] = f"{cfg.engine} ({settings})"
    for name in ("capture", "segmenter", "player"):
        cfg = topology.actors[name]
        out[name] = getattr(cfg, "source", None) or getattr(cfg, "sink", None) or "silero"
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
        try:
            bus = busbench.run_all(bus_seconds, bus_frames)
        except OSError as exc:   # no free TCP port on this machine: the rest is kept
            print(f"voxweft bench: bus hops not measured ({exc}); the report goes on "
                  "without them", flush=True)
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
