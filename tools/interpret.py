"""`voxweft interpret`: a file through the whole supervised pipeline, outputs into a folder.

This module makes the file's topology, collects what the bus says (`Collector`) and writes
the outputs; running the session itself, supervisord from start to stop, is deploy.session's.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

from voxweft.actors.settings.topology import DEFAULT_EVENTS_PORT
from voxweft.deploy.session import HOST, run_session
from voxweft.deploy.supervisor import CaptionsProgram
from voxweft.deploy.topology import Topology, parse
from voxweft.protocol import bus as wire
from voxweft.protocol.messages import (
    Done,
    EndOfStream,
    PlaybackEvent,
    Status,
    Transcript,
    Translation,
    VadEvent,
    trace_ns,
)
from voxweft.tools.captions import url
from voxweft.tools.captions.room import SpokenShare, speech_seconds
from voxweft.tools.languages import fit_engines
from voxweft.tools.latency import summarize, utterance_latency
from voxweft.tools.subtitles import NOT_SPOKEN, write_subtitles
from voxweft.tools.terminal import printable

WATCHED = wire.watched("interpret")
#: The stages that hold utterances; the session is over when none holds one after the end.
HOLDERS = ("segmenter", "asr", "mt", "tts", "player")
#: A heartbeat this long after the end of stream was built after it (heartbeats are 2 Hz).
AFTER_EOS_NS = 700_000_000
#: No utterance moved for this long while some are held: the wait ends with an error.
STALL_S = 300.0


def file_topology(base: Topology, input_path: Path, out_dir: Path, src: str, tgt: str,
                  fast: bool, live: bool = False) -> Topology:
    """The base topology on one local host, fed by the file, played into output.wav.

    Not `live`: every utterance is spoken, however far behind (no max_lag_s bound). `live`
    (the bench in real time) keeps the topology's bound, as with a microphone.

    Its ports are never bound: the session (deploy.session) puts every socket in its private
    run directory as an ipc:// endpoint. They are only told apart (a base topology on two
    hosts may use one port on both).
    """
    raw = copy.deepcopy(base.raw)
    raw.setdefault("pipeline", {}).update(src_lang=src, tgt_lang=tgt)
    for line in fit_engines(raw, src, tgt):   # the user asked for languages, not engines
        print(f"voxweft: {src}->{tgt} needs another engine: using {line}", flush=True)
    base = parse(raw, base.source)
    ports = [DEFAULT_EVENTS_PORT + 1 + i for i in range(8)]
    actors = {name: {"host": HOST, "port": ports[i]}
              for i, name in enumerate(base.actors)}
    actors["segmenter"]["push_port"] = ports[6]
    actors["capture"].update(source="file", path=str(input_path), fast=fast)
    actors["player"].update(sink="wav", path=str(out_dir / "output.wav"))
    pipeline = {"src_lang": src, "tgt_lang": tgt}
    if not live:
        pipeline["max_lag_s"] = 0
    return base.with_overrides({
        "pipeline": pipeline,
        "hosts": {HOST: {"address": "127.0.0.1", "bind": "127.0.0.1",
                         "events_port": DEFAULT_EVENTS_PORT}},
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
        self.done: set[str] = set()
        self.eos: EndOfStream | None = None
        # The output file's journal: utterance -> (complete, seconds played); read at the end.
        self.in_file: dict[str, tuple[bool, float]] = {}
        # Speech the segmenter did not interpret (its speaker gate), by where it started:
        # a restarted segmenter that reads the same audio again says it once more.
        self.ignored: dict[float, VadEvent] = {}
        self.latest: dict[str, Status] = {}
        self.progress_at = time.monotonic()   # when an utterance last moved
        self.verdict: tuple[bool, list[str]] | None = None   # the budget, said at ready

    def add(self, msg) -> None:
        """Record one message; print transcripts and translations as they arrive."""
        if isinstance(msg, Status):
            before = self.latest.get(msg.src)
            self.latest[msg.src] = msg
            if msg.src == "segmenter" and (before is None or (msg.media_ms, msg.epoch) !=
                                           (before.media_ms, before.epoch)):
                self.progress_at = time.monotonic()   # the audio moves (a pause moves too)
            return
        self.progress_at = time.monotonic()
        if isinstance(msg, VadEvent) and msg.event == "end":
            self.committed.append(msg.utt)
        elif isinstance(msg, VadEvent) and msg.event == "rejected":
            self.ignored.setdefault(round(msg.media_s, 2), msg)
        elif isinstance(msg, Done):
            self.done.add(msg.utt)
        elif isinstance(msg, Transcript) and msg.final:
            if msg.utt not in self.transcripts:   # sent again after a restart: once only
                print(printable(f"[{msg.utt}] {msg.src_lang}: {msg.text}"), flush=True)
            self.transcripts[msg.utt] = msg
        elif isinstance(msg, Translation) and msg.final:
            if msg.utt not in self.translations:
                print(printable(f"[{msg.utt}] {msg.tgt_lang}: {msg.text}"), flush=True)
            self.translations[msg.utt] = msg
        elif isinstance(msg, PlaybackEvent):
            if msg.event == "started":
                self.started[msg.utt] = msg
            else:
                if msg.reason and msg.utt not in self.ended:
                    print(printable(f"[{msg.utt}] not spoken: {msg.reason}"), flush=True)
                self.ended[msg.utt] = msg
        elif isinstance(msg, EndOfStream) and msg.src == "segmenter":
            self.eos = msg

    def finished(self) -> bool:
        """The source ended and no stage holds an utterance any more.

        The end of stream must come from the segmenter running now (a restarted one reads
        the rest of the file again), and every holder's heartbeat, built after it, must say
        it holds nothing: each keeps what it sent until the player is done with it.
        """
        seg = self.latest.get("segmenter")
        if self.eos is None or seg is None or seg.epoch != self.eos.epoch:
            return False
        after = self.eos.sent_ns + AFTER_EOS_NS
        return all(a in self.latest and self.latest[a].sent_ns > after
                   and self.latest[a].outstanding == 0 for a in HOLDERS)

    def stalled(self) -> str:
        """Why the session cannot end, else ''.

        It cannot when neither the audio (the segmenter's position) nor any utterance moved
        for STALL_S: a long pause in the input still moves the audio.
        """
        if time.monotonic() - self.progress_at < STALL_S:
            return ""
        held = {a: s.outstanding for a, s in self.latest.items() if s.outstanding}
        seg = self.latest.get("segmenter")
        states = ", ".join(f"{a} {s.state}" for a, s in self.latest.items())
        return (f"nothing moved for {STALL_S:.0f} s (segmenter at "
                f"{seg.media_ms / 1000 if seg else 0:.1f} s of the input); utterances held: "
                f"{held or 'none'}; {states}")

    def utterances(self) -> list[str]:
        """Every utterance transcribed, in media order (commit order breaks on a restart)."""
        seen = dict.fromkeys([*self.committed, *self.transcripts])
        return sorted(seen, key=lambda u: (self.transcripts[u].media_start_s
                                           if u in self.transcripts else float("inf")))

    def unspoken(self, utt: str) -> str:
        """Why the utterance's translation was not spoken (actors.lag), else ''."""
        ev = self.ended.get(utt)
        return ev.reason if ev and ev.event == "skipped" else ""

    def played(self, utt: str) -> bool:
        """Whether any of the utterance's translation was played (the file's journal first)."""
        if utt in self.in_file:
            return self.in_file[utt][1] > 0
        return utt in self.started

    def spoken_whole(self, utt: str) -> bool:
        """The utterance's translation was played, not skipped, not cut off by the player.

        Where the output file's journal has the utterance, the journal says (the player's
        events can be missed: a player killed between writing an utterance and saying so,
        or its events sent while this subscription was reconnecting).
        """
        if utt in self.in_file:
            complete, played_s = self.in_file[utt]
            return complete and played_s > 0 and not self.unspoken(utt)
        return (utt in self.started and not self.unspoken(utt)
                and (utt not in self.ended or self.ended[utt].complete))

    def read_journal(self, wav: Path) -> None:
        """What the output file holds, by its journal (`actors.sinks`): one story told."""
        journal = Path(str(wav) + ".journal")
        self.in_file = {}
        if not journal.is_file():
            return
        for line in journal.read_text(encoding="utf-8", errors="replace").splitlines()[1:]:
            try:
                entry = json.loads(line)
                if "utt" in entry:
                    self.in_file[str(entry["utt"])] = (bool(entry.get("complete", True)),
                                                       float(entry.get("played_s", 1.0)))
            except (ValueError, TypeError):
                continue   # a line cut short by a kill

    def stretches_ignored(self) -> list[dict]:
        """Each stretch of speech not interpreted, in media order: where, how long, why."""
        return [{"media_start_s": round(ev.media_s, 3), "media_end_s": round(ev.end_s, 3),
                 "length_s": round(max(ev.end_s - ev.media_s, 0.0), 3), "reason": ev.reason}
                for _start, ev in sorted(self.ignored.items())]

    def share(self) -> SpokenShare:
        """Seconds of speech spoken in translation, of all the speech heard (SpokenShare)."""
        return SpokenShare.of(
            ((speech_seconds(self.transcripts[u].trace) if u in self.transcripts else None,
              self.spoken_whole(u)) for u in self.utterances()),
            [s["length_s"] for s in self.stretches_ignored()])

    def write(self, out_dir: Path, fast: bool, src: str, tgt: str,
              partial: str = "") -> dict:
        """transcript.jsonl, translation.jsonl, ignored.jsonl, subtitles and latency.json.

        A translation that was not spoken keeps its place in all of them, marked. Whether it
        was spoken is what output.wav's journal says, where it says it.
        """
        self.read_journal(out_dir / "output.wav")
        order = self.utterances()
        with open(out_dir / "ignored.jsonl", "w", encoding="utf-8") as f:
            for stretch in self.stretches_ignored():
                f.write(json.dumps(stretch, ensure_ascii=False) + "\n")
        with open(out_dir / "transcript.jsonl", "w", encoding="utf-8") as f:
            for utt in order:
                t = self.transcripts.get(utt)
                if t:
                    f.write(json.dumps({"utt": utt, "lang": t.src_lang, "text": t.text,
                                        "media_start_s": round(t.media_start_s, 3),
                                        "media_end_s": round(t.media_end_s, 3),
                                        "goes_on": t.goes_on},
                                       ensure_ascii=False) + "\n")
        with open(out_dir / "translation.jsonl", "w", encoding="utf-8") as f:
            for utt in order:
                t = self.translations.get(utt)
                if t:
                    f.write(json.dumps({"utt": utt, "src_lang": t.src_lang,
                                        "tgt_lang": t.tgt_lang, "source_text": t.source_text,
                                        "text": t.text,
                                        "media_start_s": round(t.media_start_s, 3),
                                        "media_end_s": round(t.media_end_s, 3),
                                        "spoken": self.played(utt),
                                        "complete": self.spoken_whole(utt),
                                        "not_spoken": self.unspoken(utt)},
                                       ensure_ascii=False) + "\n")
        # Both subtitle files follow the input's timeline: they subtitle the original media.
        write_subtitles(out_dir, src, [vars_of(self.transcripts[u]) for u in order
                                       if u in self.transcripts])
        write_subtitles(out_dir, tgt, [
            {**vars_of(self.translations[u]),
             "text": (NOT_SPOKEN if self.unspoken(u) else "") + self.translations[u].text}
            for u in order if u in self.translations])
        rows = []
        for utt in order:
            ev = self.started.get(utt) or self.ended.get(utt)
            row = {"utt": utt, "played": self.played(utt), "not_spoken": self.unspoken(utt),
                   "speech_end_ns": trace_ns(ev.trace, "speech_end") if ev else None}
            row.update(utterance_latency(ev.trace) if ev else {})
            rows.append(row)
        report = {
            "mode": "fast" if fast else "realtime",
            # Stopped before the end (a signal, a failure): what was interpreted so far.
            "partial": bool(partial),
            "stopped": partial,
            "utterances": rows,
            "summary": {
                key: summarize([r.get(key) for r in rows])
                for key in ("speech_end_to_first_audio_s", "segment_to_first_audio_s")
            },
        }
        (out_dir / "latency.json").write_text(json.dumps(report, indent=2))
        return report


def run_supervised(topology: Topology, collector, topics: list[bytes], out_dir: Path,
                   timeout_s: float | None, what: str,
                   captions: CaptionsProgram | None = None) -> tuple[int, str]:
    """A session of the topology's actors until `collector` is done (deploy.session).

    The same, with the captions page's address in the words this layer gives it
    (tools.captions.url). Returns (exit code, reason): 0 when the collector finished.
    """
    link = url(captions.bind, captions.port, captions.token or None) if captions else ""
    return run_session(topology, collector, topics, out_dir, timeout_s, what, captions, link)


def interpret(base: Topology, input_path: Path, out_dir: Path, src: str, tgt: str,
              fast: bool, timeout_s: float | None = None, live: bool = False,
              captions: CaptionsProgram | None = None) -> int:
    """Run the pipeline on one file; return the exit code.

    `live`: as if the file were a microphone, the topology's bound on the lag applies
    (translations too late are not spoken); otherwise every utterance is spoken.
    """
    if live and fast:
        print("voxweft interpret: --live plays the file in real time; drop --fast",
              file=sys.stderr)
        return 2
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
    topology = file_topology(base, input_path.resolve(), out_dir.resolve(), src, tgt, fast,
                             live=live)
    collected = Collector()
    mode = ", fast" if fast else f", live: max_lag_s {topology.max_lag_s:g}" if live else ""
    code, reason = run_supervised(
        topology, collected, WATCHED, out_dir, timeout_s,
        f"interpreting {input_path.name} ({src} -> {tgt}{mode})", captions)
    report = collected.write(out_dir, fast, src, tgt, partial=reason if code else "")
    if code:
        print(f"voxweft interpret: {'stopped' if code >= 128 else 'failed'}: {reason}; "
              f"partial outputs ({len(collected.transcripts)} utterance(s)) in {out_dir}, "
              f"logs in {out_dir / 'logs'}", file=sys.stderr)
        return code
    print(summary_line(collected, report, out_dir), flush=True)
    return 0


def ignored_words(stretches: list[dict]) -> str:
    """How much speech was not interpreted, and why: "4.2 s ignored: not the speaker"."""
    if not stretches:
        return "nothing ignored"
    why = dict.fromkeys(s["reason"].split(":")[0].strip() or "?" for s in stretches)
    return f"{sum(s['length_s'] for s in stretches):.1f} s ignored: {', '.join(why)}"


def summary_line(collected: Collector, report: dict, out_dir: Path) -> str:
    """The last line: utterances, the share of the speech heard that was spoken, latency."""
    ignored = ignored_words(collected.stretches_ignored())
    if not collected.utterances():
        heard = "" if not collected.ignored else f" interpreted ({ignored})"
        return f"voxweft: no speech{heard or ' found in the input'}; outputs in {out_dir}"
    lat = report["summary"]["speech_end_to_first_audio_s"]
    unspoken = sum(1 for u in collected.utterances() if collected.unspoken(u))
    return (f"voxweft: {len(collected.utterances())} utterance(s)"
            f"{f' ({unspoken} not spoken: too late)' if unspoken else ''}; spoken "
            f"{collected.share().percent()} of the speech heard ({ignored}); end of speech -> "
            f"first audio p50 {lat['p50']} s, max {lat['max']} s; outputs in {out_dir}")
