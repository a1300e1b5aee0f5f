"""The loudspeaker in the room (`voxweft bench --echo`): echo cancelling measured offline.

A session of continuous speech by several real readers at their own levels (the speaker, the
near end) and, from 2.5 s on, the interpreter's own Portuguese voice (the topology's tts, the
far end) playing on for `AFTER_S` after the speaker stops, as a live run does. The room
brings the loudspeaker back to the microphone: a delay (30-150 ms), reverberation (an
exponential tail of noise, RT60 0.3-0.6 s) and a level against the speaker's (-20 to 0 dB),
over a noise floor at -65 dBFS. The microphone is then cancelled through capture's own path
(actors.echo.EchoPath: 20 ms frames, the reference stamped as the player stamps it) with each
echo engine, and against the headphones (the speaker alone) and no cancelling at all:

- `wer`: the topology's asr on each of the speaker's clips (its span, 0.2 s either side),
  against the readers' words: what the speaker lost to the loudspeaker, and to cancelling;
- `heard_back`: what is said after the speaker stopped (Silero VAD, then asr): utterances and
  words that are the loudspeaker heard back (0 is right);
- `erle_db`: echo removed on single talk once converged (the last 8 s, the loudspeaker alone),
  from the residual (output minus speaker and noise: exact for a linear canceller);
- `converged_s`: seconds of loudspeaker playing until the canceller says converged (what the
  microphone hears while it plays is held until then, and silenced when the loudspeaker
  stopped before it was learnt); `gated_s`: how long was silenced;
- `cpu`: CPU seconds per second of audio; `latency_ms`: what cancelling adds (frames pass
  straight through: 0, plus the CPU time of a frame).

Everything but the voices and the tts's speech is generated here with a fixed seed.
"""

from __future__ import annotations

import collections
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import jiwer
import numpy as np
import soxr

from voxweft.actors.echo import EchoPath
from voxweft.actors.engines import build
from voxweft.actors.engines.echo import canceller
from voxweft.deploy.topology import Topology
from voxweft.protocol.messages import BUS_RATE
from voxweft.tools.bench import DEFAULT_CORPUS, readers

#: The speaker: (reader, level in dB against the first), each reading up to READ_S.
CAST = (("lj", 0.0), ("harvard-woman", -8.0), ("arctic-awb", -15.0), ("fox-man", -4.0),
        ("librivox-man", -10.0))
READ_S, GAP_S, LEVEL = 14.0, 0.3, 0.05
FAR_FROM_S, FAR_GAP_S, AFTER_S = 2.5, 0.4, 14.0
NOISE_DBFS = -65.0
#: What the interpreter says (Portuguese sentences of everyday topics).
FAR_LINES = (
    "Eu gosto muito de ler livros antigos sobre a história da impressão.",
    "O livro mais antigo foi impresso com tipos móveis de metal.",
    "A biblioteca fica aberta todos os dias, exceto aos domingos.",
    "Eles disseram que a reunião começa às nove horas da manhã.",
    "Na minha opinião, a arte moderna é menos bonita do que a antiga.",
    "O comboio para Lisboa sai da estação central ao meio-dia.",
    "Precisamos de mais tempo para terminar este trabalho difícil.",
    "O que é que você gosta na manifestação de ontem à noite?",
)
#: (delay ms, RT60 s, echo level dB against the speaker) measured by default.
DEFAULT_ROOMS = ((80, 0.4, -20.0), (80, 0.4, -10.0), (80, 0.4, 0.0),
                 (30, 0.3, -10.0), (150, 0.6, -10.0), (150, 0.6, 0.0))
ENGINES = ("speex", "webrtc")
SEED = 11


@dataclass(frozen=True)
class Session:
    """The near end, its clips (start, end sample, words) and the far end, at BUS_RATE."""

    near: np.ndarray
    clips: list[tuple[int, int, str]]
    far: np.ndarray


def near_end() -> Session:
    """The readers one after another (0.5 s of silence first), no far end yet."""
    from voxweft.tools.bench.run import corpus_items

    voices = readers.voices(corpus_items(DEFAULT_CORPUS, "pt"))
    parts, clips, at = [np.zeros(int(0.5 * BUS_RATE), np.float32)], [], int(0.5 * BUS_RATE)
    for reader, db in CAST:
        for text, clip in readers._reading(voices[reader], READ_S):
            pcm = readers.at(clip, LEVEL, db)
            parts += [pcm, np.zeros(int(GAP_S * BUS_RATE), np.float32)]
            clips.append((at, at + len(pcm), text))
            at += len(pcm) + int(GAP_S * BUS_RATE)
    near = np.concatenate(parts)
    return Session(near, clips, np.zeros_like(near))


def far_end(tts, n: int, start: int = 0, level: float | None = LEVEL) -> np.ndarray:
    """`n` samples of the interpreter's voice (FAR_LINES, FAR_GAP_S apart) from `start` on.

    Each line at `level` (active RMS), or as the voice made it (None).
    """
    far = np.zeros(n, np.float32)
    pos, k = start, 0
    while pos < n - 3 * BUS_RATE:
        pcm = np.concatenate(list(tts.synthesize(FAR_LINES[k % len(FAR_LINES)], "pt")))
        pcm = soxr.resample(pcm, tts.sample_rate, BUS_RATE).astype(np.float32)
        pcm = pcm[:n - pos] if level is None else readers.at(pcm[:n - pos], level, 0.0)
        far[pos:pos + len(pcm)] = pcm
        pos, k = pos + len(pcm) + int(FAR_GAP_S * BUS_RATE), k + 1
    return far


def session(tts) -> Session:
    """The readers one after another; the interpreter's voice from FAR_FROM_S on."""
    s = near_end()
    near = np.concatenate([s.near, np.zeros(int(AFTER_S * BUS_RATE), np.float32)])
    return Session(near, s.clips, far_end(tts, len(near), int(FAR_FROM_S * BUS_RATE)))


def room_response(delay_ms: float, rt60_s: float, rng) -> np.ndarray:
    """A loudspeaker `delay_ms` away in a room of reverberation `rt60_s`: its impulse response."""
    k = int(delay_ms * BUS_RATE / 1000)
    n = k + int(rt60_s * BUS_RATE)
    h = np.zeros(n, np.float32)
    h[k] = 1.0
    t = np.arange(n - k - 1) / BUS_RATE
    h[k + 1:] = rng.standard_normal(n - k - 1) * np.exp(-t * 6.9 / rt60_s) * 0.08
    return h


def room_echo(far: np.ndarray, delay_ms: float, rt60_s: float, rng) -> np.ndarray:
    """`far` from a loudspeaker `delay_ms` away in a room of reverberation `rt60_s`."""
    return np.convolve(far, room_response(delay_ms, rt60_s, rng))[:len(far)].astype(np.float32)


def cancel(engine: str, mic: np.ndarray, far: np.ndarray) -> tuple[np.ndarray, dict]:
    """The microphone through capture's EchoPath with `engine`, in 20 ms frames."""
    counters: collections.Counter = collections.Counter()
    eng = canceller(engine)
    eng.load()
    path = EchoPath(eng, counters)
    t0 = time.time_ns()
    frame, piece = BUS_RATE // 50, BUS_RATE // 2   # capture's default frame_ms; 0.5 s pieces
    outs, fed, cpu = [], 0, 0.0
    for i in range(0, len(mic) - frame + 1, frame):
        while fed < min(len(far), i + 2 * piece):   # the player's pieces, a second ahead
            path.played(fed, far[fed:fed + piece], (fed, t0 + fed * 10**9 // BUS_RATE))
            fed += piece
        start = time.process_time()
        outs.append(path.cancel(mic[i:i + frame], t0 + i * 10**9 // BUS_RATE)[0])
        cpu += time.process_time() - start
    out = np.concatenate(outs)
    return out, {"cpu": round(cpu / (len(out) / BUS_RATE), 4),
                 "latency_ms": round(cpu / (len(out) / frame) * 1000, 2),
                 "converged_s": round(counters["echo_converged_after_ms"] / 1000, 1)
                 if counters["echo_converged_after_ms"] else None,
                 "gated_s": round(counters["echo_gated_ms"] / 1000, 1),
                 # held while the filter learnt, then cancelled again: late once, this much
                 "held_s": round(counters["echo_held_max_ms"] / 1000, 1),
                 "delay_ms": path.state().get("delay_ms")}


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z']+", text.lower()))


def measure(asr, s: Session, out: np.ndarray) -> dict:
    """WER on the speaker's clips; what is heard back after the speaker stopped."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    margin = int(0.2 * BUS_RATE)
    refs = [_words(text) for _a, _b, text in s.clips]
    hyps = [_words(asr.transcribe(out[max(0, a - margin):b + margin], "en"))
            for a, b, _text in s.clips]
    tail = out[s.clips[-1][1] + int(0.5 * BUS_RATE):]
    spans = get_speech_timestamps(tail, VadOptions(min_speech_duration_ms=250))
    back = [_words(asr.transcribe(tail[x["start"]:x["end"]], "en")) for x in spans]
    return {"wer": round(100 * jiwer.wer(refs, hyps), 1), "heard_back_lines": len(spans),
            "heard_back_words": sum(len(b.split()) for b in back), "heard_back": back}


def bench_echo(base: Topology, out: Path, rooms=DEFAULT_ROOMS, engines=ENGINES) -> dict:
    """Every room with every engine, headphones and no cancelling; echo.json and echo.md."""
    tts = build("tts", base.actors["tts"].engine, base.actors["tts"].engine_settings())
    tts.load()
    asr = build("asr", base.actors["asr"].engine, base.actors["asr"].engine_settings())
    asr.load()
    s = session(tts)
    rng = np.random.default_rng(SEED)
    rows = [{"room": "headphones", "engine": "-", **measure(asr, s, s.near)}]
    print(json.dumps(rows[-1]), flush=True)
    single = slice(len(s.near) - 8 * BUS_RATE, len(s.near) - BUS_RATE)
    for delay_ms, rt60_s, level_db in rooms:
        echo = room_echo(s.far, delay_ms, rt60_s, rng)
        loud = np.abs(s.far) > 1e-3
        echo *= LEVEL * 10 ** (level_db / 20) / np.sqrt(np.mean(echo[loud] ** 2))
        noise = rng.standard_normal(len(echo)).astype(np.float32) * 10 ** (NOISE_DBFS / 20)
        mic = (s.near + echo + noise).astype(np.float32)
        name = f"{delay_ms} ms, RT60 {rt60_s} s, echo {level_db:+.0f} dB"
        for engine in ("none", *engines):
            if engine == "none":
                got, extra = mic, {}
            else:
                got, extra = cancel(engine, mic, s.far)
            n = len(got)
            residual = got - s.near[:n] - noise[:n]
            on = loud[:n][single]
            erle = 10 * np.log10(np.mean(echo[:n][single][on] ** 2) /
                                 max(np.mean(residual[single][on] ** 2), 1e-20))
            rows.append({"room": name, "engine": engine, **measure(asr, s, got),
                         "erle_db": round(float(erle), 1), **extra})
            print(json.dumps(rows[-1]), flush=True)
    report = {"speech_s": round(len(s.near) / BUS_RATE, 1),
              "speaker_words": sum(len(_words(t).split()) for *_x, t in s.clips),
              "readers": [r for r, _db in CAST], "rows": rows}
    return save(out, "echo", report, markdown)


def save(out: Path, name: str, report: dict, table) -> dict:
    """`report` as out/NAME.json and its `table` as out/NAME.md; the report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    (out / f"{name}.md").write_text(table(report))
    return report


def markdown(report: dict) -> str:
    """The table of echo.json."""
    lines = [f"# The loudspeaker in the room: {report['speech_s']} s, "
             f"{report['speaker_words']} words of {len(report['readers'])} readers", "",
             "| room | engine | WER % | heard back (lines/words) | ERLE dB | converged after s "
             "| silenced s | held s | delay ms | CPU s/s |", "|---" * 10 + "|"]
    for r in report["rows"]:
        lines.append(f"| {r['room']} | {r['engine']} | {r['wer']} | {r['heard_back_lines']}/"
                     f"{r['heard_back_words']} | {r.get('erle_db', '-')} | "
                     f"{r.get('converged_s', '-')} | {r.get('gated_s', '-')} | "
                     f"{r.get('held_s', '-')} | "
                     f"{r.get('delay_ms', '-')} | {r.get('cpu', '-')} |")
    return "\n".join(lines) + "\n"

