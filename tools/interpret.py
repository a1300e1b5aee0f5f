"""`voxweft interpret`: a file through the whole supervised pipeline, outputs into a folder."""

from __future__ import annotations

import copy
import json
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import zmq

from deploy.supervisor import Supervisor, SupervisorError, wait_ready
from deploy.topology import Topology, parse
from protocol import sockets
from protocol.codec import ProtocolError, decode
from protocol.messages import EndOfStream, PlaybackEvent, Transcript, Translation, VadEvent
from tools.languages import fit_engines
from tools.latency import summarize, utterance_latency
from tools.subtitles import write_subtitles

WATCHED = [b"vad.", b"transcript.", b"translation.", b"playback.", b"eos."]


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on loopback (so a live `voxweft up` is left alone)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def file_topology(base: Topology, input_path: Path, out_dir: Path, src: str, tgt: str,
                  fast: bool) -> Topology:
    """The base topology on one local host, fed by the file, played into output.wav."""
    raw = copy.deepcopy(base.raw)
    raw.setdefault("pipeline", {}).update(src_lang=src, tgt_lang=tgt)
    for line in fit_engines(raw, src, tgt):   # the user asked for languages, not engines
        print(f"voxweft: {src}->{tgt} needs another engine: using {line}", flush=True)
    base = parse(raw, base.source)
    ports = free_ports(7)
    actors = {name: {"host": "_interpret", "port": ports[i]}
              for i, name in enumerate(base.actors)}
    actors["segmenter"]["push_port"] = ports[6]
    actors["capture"].update(source="file", path=str(input_path), fast=fast)
    actors["player"].update(sink="wav", path=str(out_dir / "output.wav"))
    return base.with_overrides({
        "pipeline": {"src_lang": src, "tgt_lang": tgt},
        "hosts": {"_interpret": {"address": "127.0.0.1", "bind": "127.0.0.1"}},
        "actors": actors,
    })


def vars_of(msg) -> dict:
    """The text and media times of a transcript or translation."""
    return {"text": msg.text, "media_start_s": msg.media_start_s,
            "media_end_s": msg.media_end_s}


class Collector:
    """Everything `interpret` writes, gathered from the bus as it happens."""

    def __init__(self) -> None:
        self.committed: list[str] = []     # utterance ids in commit order
        self.transcripts: dict[str, Transcript] = {}
        self.translations: dict[str, Translation] = {}
        self.started: dict[str, PlaybackEvent] = {}
        self.ended: dict[str, PlaybackEvent] = {}
        self.eos: EndOfStream | None = None

    def add(self, msg) -> None:
        """Record one message; print transcripts and translations as they arrive."""
        if isinstance(msg, VadEvent) and msg.event == "end":
            self.committed.append(msg.utt)
        elif isinstance(msg, Transcript) and msg.final:
            self.transcripts[msg.utt] = msg
            print(f"[{msg.utt}] {msg.src_lang}: {msg.text}", flush=True)
        elif isinstance(msg, Translation):
            self.translations[msg.utt] = msg
            print(f"[{msg.utt}] {msg.tgt_lang}: {msg.text}", flush=True)
        elif isinstance(msg, PlaybackEvent):
            if msg.event == "started":
                self.started[msg.utt] = msg
            else:
                self.ended[msg.utt] = msg
        elif isinstance(msg, EndOfStream) and msg.src == "segmenter":
            self.eos = msg

    def finished(self) -> bool:
        """The source ended and every committed utterance has been spoken (or skipped)."""
        return (self.eos is not None and len(self.committed) >= self.eos.utterances
                and all(u in self.ended for u in self.committed))

    def write(self, out_dir: Path, fast: bool, src: str, tgt: str) -> dict:
        """transcript.jsonl, translation.jsonl, subtitles and latency.json."""
        with open(out_dir / "transcript.jsonl", "w", encoding="utf-8") as f:
            for utt in self.committed:
                t = self.transcripts.get(utt)
                if t:
                    f.write(json.dumps({"utt": utt, "lang": t.src_lang, "text": t.text,
                                        "media_start_s": round(t.media_start_s, 3),
                                        "media_end_s": round(t.media_end_s, 3)},
                                       ensure_ascii=False) + "\n")
        with open(out_dir / "translation.jsonl", "w", encoding="utf-8") as f:
            for utt in self.committed:
                t = self.translations.get(utt)
                if t:
                    f.write(json.dumps({"utt": utt, "src_lang": t.src_lang,
                                        "tgt_lang": t.tgt_lang, "source_text": t.source_text,
                                        "text": t.text,
                                        "media_start_s": round(t.media_start_s, 3),
                                        "media_end_s": round(t.media_end_s, 3)},
                                       ensure_ascii=False) + "\n")
        # Both subtitle files follow the input's timeline: they subtitle the original media.
        write_subtitles(out_dir, src, [vars_of(self.transcripts[u]) for u in self.committed
                                       if u in self.transcripts])
        write_subtitles(out_dir, tgt, [vars_of(self.translations[u]) for u in self.committed
                                       if u in self.translations])
        rows = []
        for utt in self.committed:
            ev = self.started.get(utt) or self.ended.get(utt)
            row = {"utt": utt, "played": utt in self.started}
            row.update(utterance_latency(ev.trace) if ev else {})
            rows.append(row)
        report = {
            "mode": "fast" if fast else "realtime",
            "utterances": rows,
            "summary": {
                key: summarize([r.get(key) for r in rows])
                for key in ("speech_end_to_first_audio_s", "segment_to_first_audio_s")
            },
        }
        (out_dir / "latency.json").write_text(json.dumps(report, indent=2))
        return report


def run_supervised(topology: Topology, collector, topics: list[bytes], out_dir: Path,
                   timeout_s: float | None, what: str) -> tuple[int, str]:
    """Run the topology's actors under a private supervisord until `collector` is done.

    Every message on `topics` goes to `collector.add` until `collector.finished()`; then the
    actors stop and their logs are copied to `out_dir/logs`.
    Returns (exit code, reason): 0 when the collector finished.
    """
    run_dir = Path(tempfile.mkdtemp(prefix="vw-"))
    sup = Supervisor(run_dir)
    sup.write(topology, "_interpret")
    ctx = zmq.Context()
    # Subscribe before anything starts: the file source waits for every actor to be ready,
    # by which time these subscriptions have long been live.
    sub = sockets.sub(ctx, [topology.pub_connect(a) for a in topology.actors], topics)
    code, reason = 0, ""
    t0 = time.monotonic()
    try:
        sup.start()
        wait_ready(sup, topology, list(topology.actors))
        print(f"voxweft: pipeline ready in {time.monotonic() - t0:.1f} s; {what}", flush=True)
        limit = time.monotonic() + (timeout_s or 3600)
        last_check = 0.0
        while not collector.finished():
            if time.monotonic() > limit:
                code, reason = 1, f"timed out after {timeout_s:.0f} s"
                break
            if sub.poll(200):
                try:
                    collector.add(decode(sub.recv_multipart()))
                except ProtocolError:
                    continue
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                for name, info in sup.processes().items():
                    if info["statename"] in ("FATAL", "EXITED"):
                        raise SupervisorError(f"actor {name} failed: {sup.last_error(name)}")
    except SupervisorError as exc:
        code, reason = 1, str(exc)
    except KeyboardInterrupt:
        code, reason = 130, "interrupted"
    finally:
        sub.close(0)
        ctx.term()
        try:
            sup.shutdown()
        except SupervisorError as exc:
            print(f"voxweft: {exc}", file=sys.stderr)
        shutil.copytree(run_dir / "logs", out_dir / "logs", dirs_exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    return code, reason


def interpret(base: Topology, input_path: Path, out_dir: Path, src: str, tgt: str,
              fast: bool, timeout_s: float | None = None) -> int:
    """Run the pipeline on one file; return the exit code."""
    if not input_path.is_file():
        print(f"voxweft interpret: input {input_path} not found", file=sys.stderr)
        return 2
    try:   # fail before starting six processes when the file is not audio
        import soundfile as sf

        info = sf.info(str(input_path))
    except (RuntimeError, OSError) as exc:
        print(f"voxweft interpret: cannot read {input_path} as audio ({exc}); give a WAV, "
              "FLAC, OGG or MP3 file", file=sys.stderr)
        return 2
    if info.frames == 0:
        print(f"voxweft interpret: {input_path} holds no audio", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    topology = file_topology(base, input_path.resolve(), out_dir.resolve(), src, tgt, fast)
    collected = Collector()
    code, reason = run_supervised(
        topology, collected, WATCHED, out_dir, timeout_s,
        f"interpreting {input_path.name} ({src} -> {tgt}{', fast' if fast else ''})")
    report = collected.write(out_dir, fast, src, tgt)
    if code:
        print(f"voxweft interpret: failed: {reason} (logs in {out_dir / 'logs'})",
              file=sys.stderr)
        return code
    if not collected.committed:
        print(f"voxweft: no speech found in the input; outputs in {out_dir}", flush=True)
        return 0
    lat = report["summary"]["speech_end_to_first_audio_s"]
    print(f"voxweft: {len(collected.committed)} utterance(s); end of speech -> first audio "
          f"p50 {lat['p50']} s, max {lat['max']} s; outputs in {out_dir}", flush=True)
    return 0
