"""The in-process floor of `voxweft bench`: the same engines, chained in one process, no bus.

Run by the bench as a child process (`python -m voxweft.tools.bench.floor JOB.npz OUT.json`)
with the thread limits an actor gets, after the pipeline has stopped, so both measure the
same engines on the same cores. The engines are built by the actors' own classes from the
same frozen topology (same engine, settings, warm-up), then each segment the pipeline
transcribed is run through ASR -> MT -> TTS's first chunk, timed with a monotonic clock.
The rest of each TTS stream is drained untimed, as the pipeline's TTS would.

Each segment's words are also aligned (word timestamps) for the per-word ASR lag. The same
process then transcribes each spoken translation back (the round trip), with the
ASR engine in the target language, when that engine knows the language.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from voxweft.protocol.messages import BUS_RATE


def _build(topology, name: str):
    from voxweft.actors import actor_class

    actor = actor_class(name)(topology, topology.actors[name])
    actor.load()
    actor.warmup()
    return actor.engine


def run(job_path: Path, out_path: Path) -> dict:
    """Load the engines, time the floor per segment, transcribe the spoken audio back."""
    from voxweft.deploy.topology import load

    job = np.load(job_path, allow_pickle=False)
    meta = json.loads(str(job["meta"]))
    topology = load(meta["topology"])
    src, tgt = meta["src_lang"], meta["tgt_lang"]
    t0 = time.monotonic()
    asr, mt, tts = (_build(topology, name) for name in ("asr", "mt", "tts"))
    result: dict = {"load_s": round(time.monotonic() - t0, 2), "floor": {}, "back": {},
                    "round_trip_skipped": None}
    for utt in meta["segments"]:
        pcm = np.ascontiguousarray(job[f"seg_{utt}"], np.float32)
        t_asr = time.monotonic()
        text = asr.transcribe(pcm, src)
        t_mt = time.monotonic()
        translation = mt.translate(text, src, tgt) if text else ""
        t_tts = time.monotonic()
        t_first = None
        # At the speaking rate the pipeline's voice used for this utterance (catching up).
        speed = float(meta.get("speed", {}).get(utt, 1.0))
        for _chunk in tts.synthesize(translation, tgt, speed) if translation else ():
            if t_first is None:
                t_first = time.monotonic()
        result["floor"][utt] = {
            "asr": round(t_mt - t_asr, 4), "mt": round(t_tts - t_mt, 4),
            "tts_first_chunk": None if t_first is None else round(t_first - t_tts, 4),
            "total": None if t_first is None else round(t_first - t_asr, 4),
            "text": text, "translation": translation}
        # When each word was spoken, within the segment (untimed: the per-word ASR lag).
        words = asr.word_times(pcm, src)   # None: this engine cannot time words
        if words is not None:
            result["floor"][utt]["words"] = words
    if tgt not in asr.languages():
        result["round_trip_skipped"] = (f"the ASR engine ({topology.actors['asr'].engine}) "
                                        f"cannot transcribe {tgt!r}")
    else:
        import soxr

        for utt, rate in meta["spoken"].items():
            audio = np.asarray(job[f"spk_{utt}"], np.float32)
            if rate != BUS_RATE:
                audio = soxr.resample(audio, rate, BUS_RATE)
            result["back"][utt] = asr.transcribe(np.ascontiguousarray(audio, np.float32), tgt)
    out_path.write_text(json.dumps(result, ensure_ascii=False, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    """`python -m voxweft.tools.bench.floor JOB.npz OUT.json`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m voxweft.tools.bench.floor JOB.npz OUT.json", file=sys.stderr)
        return 2
    run(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
