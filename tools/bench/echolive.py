"""The loudspeaker in the room, live (`voxweft bench --echo --live`): real devices, real time.

`voxweft bench --echo` measures the cancelling offline, on a synthetic session; this runs the
whole pipeline in real time through a private PulseAudio daemon (actors.bench.soundserver)
with two null sinks, as a room with a loudspeaker does:

- the room (a `Relay`, its own real-time process) plays into the sink ``room``, whose monitor
  is the microphone: the speaker (the five readers of `voxweft bench --echo`, at their own
  levels, talking on with 0.3 s pauses) and what the loudspeaker plays, coming back
  through the room: a delay, a reverberation tail (the impulse response of `voxweft bench
  --echo`, same seed) and a level against the speaker's;
- the player plays the translation into the sink ``speaker``, whose monitor the relay reads;
- headphones: the same with the room's noise alone (nothing of the translation reaches the
  microphone).

Per condition: the speaker's WER (every final transcript against the readers' text, in
order), the share of their words heard, the words heard that were not said, the lines
transcribed after the speaker stopped (the loudspeaker interpreted), and capture's echo
state (converged, delay, removed, how long what the microphone heard was held while the
canceller learnt). The relay adds its own latency (the recorder's and the player's buffers,
tens of ms) to the room's delay; capture's `delay_ms` says what the canceller found.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jiwer
import numpy as np

from voxweft.deploy.session import run_session
from voxweft.deploy.topology import Topology
from voxweft.protocol import bus as wire
from voxweft.protocol.messages import BUS_RATE, AudioFrame, Status, Transcript, VadEvent
from voxweft.tools.bench import echo as offline
from voxweft.tools.bench import room
from voxweft.tools.bench.soundserver import DEVICE, INSTALL, PulseDaemon, missing, realtime
from voxweft.tools.interpret import file_topology

#: (name, echo_mode, room: (delay ms, RT60 s, echo level dB against the speaker) or None).
CONDITIONS = (("headphones", "off", None),
              ("loudspeaker", "cancel", (80, 0.4, -10.0)),
              ("loudspeaker", "cancel", (80, 0.4, 0.0)),
              ("loudspeaker", "gate", (80, 0.4, -10.0)))
#: After the speaker stops the translation still plays: this long is watched for echo...
AFTER_S = 20.0
#: ... and, while an utterance that started after the speaker stopped has no transcript yet
#: (a slow machine's asr is behind), up to this long: what the microphone took from the
#: loudspeaker is judged on its words, not on how fast this machine makes them.
AFTER_MAX_S = 90.0
#: The pipeline ready, the speaker starts this much later (capture is streaming by then).
START_S = 2.0


class LiveBenchError(RuntimeError):
    """The live bench cannot run here (no sound server, no relay) or a session failed."""


def speech(path: Path, near: offline.Session | None = None) -> str:
    """Write the speaker's continuous speech (the offline bench's cast); return its words."""
    near = near or offline.near_end()
    room.write_wav(path, near.near)
    return " ".join(text for *_span, text in near.clips)


class Relay:
    """The room, as its own process (tools.bench.roomrelay).

    What the loudspeaker (sink ``speaker``) plays comes back into the microphone's sink
    (``room``) through `response`, over the room's noise floor. No `response`: headphones,
    the noise alone.
    """

    def __init__(self, env: dict, response: np.ndarray | None, folder: Path,
                 speech: Path | None = None) -> None:
        self.env = {**env, "PULSE_SOURCE": "speaker.monitor", "PULSE_SINK": "room"}
        self.speech = speech
        self.path = folder / "room-response.npy"
        np.save(self.path, np.zeros(1) if response is None else np.asarray(response))
        self.log = folder / "relay.log"
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        self.recorders: list[tuple[subprocess.Popen, Path]] = []

    def start(self, timeout_s: float = 20.0) -> None:
        """Start relaying; LiveBenchError if the stream does not open."""
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "voxweft.tools.bench.roomrelay", str(self.path),
                 *([str(self.speech)] if self.speech else [])],
                env=self.env, stdin=subprocess.PIPE, stdout=log, stderr=log,
                start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while "relaying" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise LiveBenchError("the room's relay did not start: "
                                   + self.log.read_text(errors="replace")[-1500:])
            time.sleep(0.05)
        # The room's two ends, as heard (for analysis: `heard.wav`, the microphone before
        # cancelling; `played.wav`, the loudspeaker), from now on, each from its own start.
        for sink, name in (("room", "heard"), ("speaker", "played")):
            raw = self.folder / f"{name}.raw"
            with open(raw, "wb") as out:
                self.recorders.append((subprocess.Popen(
                    ["pacat", "--record", f"--device={sink}.monitor", "--raw",
                     "--format=float32le", f"--rate={BUS_RATE}", "--channels=1",
                     "--latency-msec=20"], env=self.env, stdout=out,
                    stderr=subprocess.DEVNULL, start_new_session=True), raw))
            realtime(self.recorders[-1][0].pid)   # a slow one drops samples

    def talk(self) -> None:
        """The speaker starts talking (SPEECH, in the relay's own stream)."""
        self.proc.send_signal(signal.SIGUSR1)

    def spoke(self) -> bool:
        """The speaker has said all of it (or the relay ended)."""
        return self.proc.poll() is not None or \
            "spoke" in self.log.read_text(errors="replace").split()

    def stop(self) -> str:
        """Stop relaying; what it said at the end (blocks late)."""
        for proc, raw in self.recorders:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            room.write_wav(raw.with_suffix(".wav"), np.fromfile(raw, np.float32))
            raw.unlink()
        self.recorders = []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        said = self.log.read_text(errors="replace").strip().splitlines()
        return said[-1] if said else ""


def room_response(tts, delay_ms: float, rt60_s: float, level_db: float) -> np.ndarray:
    """The room's impulse response: the tts's voice comes back `level_db` dB against the speaker.

    Measured on what it says (the player plays it as made).
    """
    h = offline.room_response(delay_ms, rt60_s, np.random.default_rng(offline.SEED))
    voice = offline.far_end(tts, 12 * BUS_RATE, level=None)   # as loud as the player plays it
    echo = np.convolve(voice, h)[:len(voice)]
    loud = np.abs(voice) > 1e-3
    level = offline.LEVEL * 10 ** (level_db / 20)
    return h * level / np.sqrt(np.mean(echo[loud] ** 2))


class LiveCollector:
    """What one condition heard: the room's relay starts the speaker once the pipeline is ready."""

    def __init__(self, room: Relay) -> None:
        self.room = room
        self.verdict = (True, [])
        self.seen: list = []
        self.frames: list[AudioFrame] = []     # what capture passed on (after cancelling)
        self.ready_at: float | None = None
        self.talking = False
        self.ended: float | None = None
        self.end_ns = 0

    def add(self, msg) -> None:
        """Keep every message."""
        (self.frames if isinstance(msg, AudioFrame) else self.seen).append(msg)

    def finished(self) -> bool:
        """Start the speaker once ready; done `AFTER_S` after they stopped.

        And once every utterance started since has its transcript (at most `AFTER_MAX_S`).
        """
        now = time.monotonic()
        self.ready_at = self.ready_at or now
        if not self.talking and now - self.ready_at >= START_S:
            self.room.talk()
            self.talking = True
        if self.talking and self.ended is None and self.room.spoke():
            self.ended, self.end_ns = now, time.time_ns()
        if self.ended is None or now - self.ended < AFTER_S:
            return False
        return not self.awaited() or now - self.ended >= AFTER_MAX_S

    def awaited(self) -> set[str]:
        """Utterances started after the speaker stopped with no transcript yet.

        As `measure` counts them; a discarded one is closed too.
        """
        started = {m.utt for m in self.seen if isinstance(m, VadEvent) and m.event == "start"
                   and m.sent_ns > self.end_ns + 1e9}
        closed = {m.utt for m in self.seen if isinstance(m, Transcript) and m.final} | \
            {m.utt for m in self.seen if isinstance(m, VadEvent) and m.event == "discard"}
        return started - closed

    def stalled(self) -> str:
        """Never: the session is timed by the speaker."""
        return ""


def _words(text: str) -> list[str]:
    return offline._words(text).split()


def passed_on(frames: list[AudioFrame]) -> tuple[np.ndarray, float]:
    """What capture passed on, each frame at its stream time; the stream time of sample 0."""
    if not frames:
        return np.zeros(0, np.float32), 0.0
    t0 = min(f.media_s for f in frames)
    at = [round((f.media_s - t0) * BUS_RATE) for f in frames]
    out = np.zeros(max(i + len(f.pcm) for i, f in zip(at, frames, strict=True)), np.float32)
    for i, f in zip(at, frames, strict=True):
        out[i:i + len(f.pcm)] = f.pcm
    return out, t0


def offset(heard: np.ndarray, near: np.ndarray) -> int:
    """Where `near` (the speaker's recording) starts in `heard`: the cross-correlation's peak."""
    n = 1 << int(np.ceil(np.log2(len(heard) + len(near))))
    xc = np.fft.irfft(np.fft.rfft(heard, n) * np.conj(np.fft.rfft(near, n)), n)
    return int(np.argmax(xc[:max(1, len(heard) - len(near) // 2)]))


def per_clip(asr, collector: LiveCollector, near: offline.Session, folder: Path) -> dict:
    """Each clip of the speaker as capture passed it on and as the pipeline transcribed it.

    Separates the cancelling from the streaming: `clip_wer` is Whisper on capture's output,
    clip by clip, as `voxweft bench --echo` measures it offline; `clips` lists each clip's
    words as the pipeline's final transcripts said them (each final at its middle's clip).
    """
    heard, t0 = passed_on(collector.frames)
    if len(heard) < len(near.near) // 2:
        return {}
    k = offset(heard, near.near)
    room.write_wav(folder / "passed-on.wav", heard)
    aligned = heard[k:]
    clip_words = [_words(text) for *_span, text in near.clips]
    said: list[list[str]] = [[] for _ in near.clips]
    for m in (m for m in collector.seen if isinstance(m, Transcript) and m.final):
        middle = ((m.media_start_s + m.media_end_s) / 2 - t0) * BUS_RATE - k
        i = int(np.argmin([0 if a <= middle <= b else min(abs(middle - a), abs(middle - b))
                           for a, b, _t in near.clips]))
        said[i] += _words(m.text)
    whisper = offline.measure(asr, near, aligned)
    return {"clip_wer": whisper["wer"], "clip_heard_back": whisper["heard_back"],
            "speaker_at_s": round(k / BUS_RATE, 3),
            "clips": [{"said": " ".join(ref), "pipeline": " ".join(hyp),
                       "wer": round(100 * jiwer.wer(" ".join(ref), " ".join(hyp) or "-"), 1)}
                      for ref, hyp in zip(clip_words, said, strict=True)]}


def measure(collector: LiveCollector, reference: str) -> dict:
    """The speaker's WER and recall, words not said, lines after they stopped, echo state."""
    seen = collector.seen
    starts = {m.utt: m.sent_ns for m in seen if isinstance(m, VadEvent) and m.event == "start"}
    finals = [m for m in seen if isinstance(m, Transcript) and m.final]
    heard, said = _words(" ".join(m.text for m in finals)), _words(reference)
    matched = sum(min(heard.count(w), said.count(w)) for w in set(said))
    after = [m.text for m in finals if starts.get(m.utt, 0) > collector.end_ns + 1e9]
    status = [m for m in seen if isinstance(m, Status) and m.src == "capture"]
    delays = [m.echo["delay_ms"] for m in status if m.echo and m.echo.get("converged")
              and "delay_ms" in m.echo]
    counters = status[-1].counters if status else {}
    return {"wer": round(100 * jiwer.wer(" ".join(said), " ".join(heard) or "-"), 1),
            "heard_pct": round(100 * matched / len(said), 1),
            "not_said_words": len(heard) - matched,
            "after_lines": len(after), "after": after,
            # speech the segmenter refused as not the speaker's (stream time, why)
            "rejected": [[round(m.media_s, 2), round(m.end_s, 2), m.reason] for m in seen
                         if isinstance(m, VadEvent) and m.event == "rejected"],
            "echo": status[-1].echo if status and status[-1].echo else {},
            # the echo's delay as the canceller found it, first and last once converged: a
            # room's does not move (the relay's may, when it is starved of CPU)
            "delay_ms": [delays[0], delays[-1]] if delays else [],
            "held_s": round(counters.get("echo_held_max_ms", 0) / 1000, 1),
            "silenced_s": round(counters.get("echo_gated_ms", 0) / 1000, 1)}


def condition(base: Topology, out: Path, name: str, mode: str, response, wav: Path,
              reference: str, asr=None, near: offline.Session | None = None) -> dict:
    """One live session of the speaker in the room (`response`: None for headphones).

    `mode`: the segmenter's echo_mode ("": the topology's). With `asr` and `near` (the
    speaker's session) also each clip as capture passed it on (`per_clip`).
    """
    out.mkdir(parents=True, exist_ok=True)
    # At the bus's rate, mono: nothing between the loudspeaker and the microphone resamples
    # (at 44.1 kHz its delay was no whole number of samples, and it moved by several).
    daemon = PulseDaemon(sinks=("speaker", "room"), source="room.monitor", rate=BUS_RATE,
                         channels=1)
    saved = {k: os.environ.get(k) for k in ("PULSE_SERVER", "PULSE_RUNTIME_PATH")}
    relay, said = None, ""
    try:
        try:
            daemon.start()
        except RuntimeError as exc:
            raise LiveBenchError(f"the sound server: {exc}") from None
        os.environ.update(PULSE_SERVER=daemon.server, PULSE_RUNTIME_PATH=str(daemon.dir))
        topology = file_topology(base, wav, out, "en", "pt", fast=False, live=True)
        topology = topology.with_overrides({"actors": {
            "capture": {"source": "microphone", "device": DEVICE},
            "player": {"sink": "device", "device": DEVICE},
            **({"segmenter": {"echo_mode": mode}} if mode else {})}})
        relay = Relay(daemon.env, response, out, wav)
        relay.start()
        collector = LiveCollector(relay)
        topics = [wire.topic(VadEvent), wire.topic(Transcript), wire.topic(Status, "capture"),
                  *([wire.topic(AudioFrame, "capture")] if asr is not None else [])]
        code, reason = run_session(topology, collector, topics, out, timeout_s=600,
                                   what=f"live: {name}")
        if code:
            raise LiveBenchError(f"{name}: {reason}")
        row = {"echo_handling": topology.echo_handling, **measure(collector, reference),
               **(per_clip(asr, collector, near, out) if asr is not None else {})}
    finally:
        if relay is not None:
            said = relay.stop()
            print(f"voxweft bench: {said}", flush=True)
        daemon.cleanup()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {**row, "relay_late_blocks": late_blocks(said)}


def late_blocks(said: str) -> int | None:
    """How many blocks the relay said came late (None: it did not say).

    A late block moves the relay's echo path for good, which a room's never does: a row with
    any measured a moving room (live, they came while the actors loaded their models).
    """
    late = re.search(r"(\d+) block\(s\) late", said)
    return int(late.group(1)) if late else None


def bench_echo_live(base: Topology, out: Path, conditions=CONDITIONS) -> dict:
    """Every condition, one live session each; echo-live.json and echo-live.md."""
    lacking = missing()
    if lacking:
        raise LiveBenchError(f"{', '.join(lacking)} not found: the live echo bench needs a "
                             f"PulseAudio daemon ({INSTALL})")
    from voxweft.actors.engines import build

    tts = build("tts", base.actors["tts"].engine, base.actors["tts"].engine_settings())
    tts.load()
    asr = build("asr", base.actors["asr"].engine, base.actors["asr"].engine_settings())
    asr.load()
    out.mkdir(parents=True, exist_ok=True)
    wav = out / "speaker.wav"
    near = offline.near_end()
    reference = speech(wav, near)
    rows = []
    for i, (name, mode, shape) in enumerate(conditions):
        label = name if shape is None else (f"{name}: {shape[0]} ms, RT60 {shape[1]} s, "
                                            f"echo {shape[2]:+.0f} dB")
        response = None if shape is None else room_response(tts, *shape)
        rows.append({"condition": label, "echo_mode": mode,
                     **condition(base, out / f"{i}-{name}-{mode}", label, mode, response, wav,
                                 reference, asr, near)})
        print(json.dumps(rows[-1]), flush=True)
    report = {"speaker_words": len(_words(reference)), "readers": [r for r, _db in offline.CAST],
              "after_s": AFTER_S, "rows": rows}
    return offline.save(out, "echo-live", report, markdown)


def markdown(report: dict) -> str:
    """The table of echo-live.json."""
    lines = [f"# The loudspeaker in the room, live: {report['speaker_words']} words of "
             f"{len(report['readers'])} readers", "",
             "| condition | echo_mode | WER % | words heard % | heard, not said | lines after "
             "the speaker stopped | converged | delay ms | removed dB | held s | silenced s "
             "| WER % of capture's output, clip by clip | relay: blocks late (the room moved) |",
             "|---" * 13 + "|"]
    for r in report["rows"]:
        e = r["echo"]
        lines.append(f"| {r['condition']} | {r['echo_mode']} | {r['wer']} | {r['heard_pct']} "
                     f"| {r['not_said_words']} | {r['after_lines']} | "
                     f"{'yes' if e.get('converged') else '-'} | "
                     f"{'-'.join(f'{d:.0f}' for d in r.get('delay_ms', [])) or '-'} | "
                     f"{e.get('removed_db', '-')} | {r['held_s']} | {r['silenced_s']} | "
                     f"{r.get('clip_wer', '-')} | {r.get('relay_late_blocks', '-')} |")
    return "\n".join(lines) + "\n"
