"""voxweft voicecheck: which VoxCPM2 voice mode keeps the speaker's voice, in the target language.

For each clip of a corpus (a speaker's recording and its words), the topology's tts engine
(voxcpm2) speaks the clip's translation three ways: in its own voice (``default``), with the
clip as a *reference* (timbre only) and as a *prompt* (the clip and its words, continued).
Each result is measured against the clip:

- voice: cosine similarity of speaker embeddings (Resemblyzer's GE2E encoder, whose weights
  ship in its package), beside two anchors: the same speaker's other clips (how alike one
  voice is with itself) and the default voice (how alike any voice is);
- language: Whisper's language identification on the result (the share identified as the
  source language is English leaking into the translation) and the round-trip WER of the
  result transcribed in the target language against the text it was given.

The mode to choose keeps the voice (similarity) without leaking the language (a leak share
and a WER no worse than the default voice's). A report goes to OUT/voicecheck.json and .md.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxweft.actors import engines
from voxweft.actors.engines.tts import Reference
from voxweft.protocol.messages import BUS_RATE
from voxweft.tools.bench import metrics as benchmetrics

MODES = ("default", "reference", "prompt")


class VoiceCheckError(Exception):
    """The check cannot run; the message is the one line the user sees."""


@dataclass
class Clip:
    """A speaker's recording (16 kHz mono), its words and their translation."""

    name: str
    pcm: np.ndarray
    text: str
    translation: str


def _clips(corpus: Path, src: str, tgt: str, limit: int, mt) -> list[Clip]:
    import soundfile as sf
    import soxr

    from voxweft.tools.bench.run import corpus_items

    clips = []
    for item in corpus_items(corpus, tgt, limit):
        if not item.ref_text:
            continue   # a prompt needs the clip's words
        audio, rate = sf.read(str(item.path), dtype="float32", always_2d=True)
        mono = audio.mean(axis=1)
        pcm = soxr.resample(mono, rate, BUS_RATE) if rate != BUS_RATE else mono
        translation = item.ref_translation or mt.translate(item.ref_text, src, tgt)
        clips.append(Clip(item.name, np.ascontiguousarray(pcm, np.float32), item.ref_text,
                          translation))
    if len(clips) < 2:
        raise VoiceCheckError(f"{corpus}: need at least 2 clips with NAME.txt transcripts "
                              "(the same speaker's other clips are the voice's anchor)")
    return clips


class _Judge:
    """Speaker embeddings (Resemblyzer) and language identification + ASR (Whisper)."""

    def __init__(self, asr) -> None:
        try:
            from resemblyzer import VoiceEncoder, preprocess_wav
        except ImportError as exc:
            raise VoiceCheckError(f"resemblyzer is not installed ({exc}): run "
                                  "tools/install.sh") from None
        self.encoder = VoiceEncoder(device="cpu", verbose=False)
        self._prep = preprocess_wav
        self.asr = asr

    def embed(self, pcm16k: np.ndarray) -> np.ndarray | None:
        wav = self._prep(np.asarray(pcm16k, np.float32), source_sr=BUS_RATE)
        return self.encoder.embed_utterance(wav) if len(wav) >= BUS_RATE // 2 else None

    def language(self, pcm16k: np.ndarray) -> dict[str, float]:
        """Whisper's language probabilities for `pcm16k`."""
        _lang, _p, probs = self.asr.model.detect_language(np.asarray(pcm16k, np.float32))
        return dict(probs)


def _similarity(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    return None if a is None or b is None else round(float(np.dot(a, b)), 4)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(float(np.mean(values)), 4) if values else None


def check(topology, corpus: Path, out: Path, limit: int = 5, modes=MODES) -> dict:
    """Run the check; write OUT/voicecheck.json and .md; return the report."""
    import soxr

    src, tgt = topology.src_lang, topology.tgt_lang
    tts_cfg = topology.actors["tts"]
    if tts_cfg.engine != "voxcpm2":
        raise VoiceCheckError(f"the topology's tts engine is {tts_cfg.engine!r}: voicecheck "
                              "compares VoxCPM2's voice modes (engine = \"voxcpm2\")")
    settings = {**tts_cfg.engine_settings(), "voice": "speaker"}
    tts = engines.build("tts", "voxcpm2", settings)
    asr = engines.build("asr", "faster-whisper", {"model": "base"})
    mt = engines.build("mt", topology.actors["mt"].engine,
                       topology.actors["mt"].engine_settings())
    t0 = time.monotonic()
    for engine in (tts, asr, mt):
        engine.load()
    judge = _Judge(asr)
    clips = _clips(corpus, src, tgt, limit, mt)
    print(f"voxweft voicecheck: {len(clips)} clip(s), modes {', '.join(modes)}; engines loaded "
          f"in {time.monotonic() - t0:.1f} s", flush=True)

    refs = {c.name: judge.embed(c.pcm) for c in clips}
    same = [_similarity(refs[a.name], refs[b.name])
            for i, a in enumerate(clips) for b in clips[i + 1:]]
    rows = []
    for clip in clips:
        for mode in modes:
            voice = None if mode == "default" else Reference(
                key=f"{clip.name}:{mode}", pcm=clip.pcm, sample_rate=BUS_RATE,
                text=clip.text if mode == "prompt" else "")
            start = time.monotonic()
            audio = np.concatenate([np.zeros(0, np.float32),
                                    *tts.synthesize(clip.translation, tgt, voice=voice)])
            made_s = time.monotonic() - start
            pcm = soxr.resample(audio, tts.sample_rate, BUS_RATE) if len(audio) else audio
            probs = judge.language(pcm) if len(pcm) else {}
            heard = asr.transcribe(np.ascontiguousarray(pcm, np.float32), tgt) if len(pcm) \
                else ""
            rows.append({
                "clip": clip.name, "mode": mode, "said": clip.translation, "heard": heard,
                "seconds": round(len(audio) / tts.sample_rate, 2), "made_s": round(made_s, 2),
                "similarity": _similarity(refs[clip.name], judge.embed(pcm) if len(pcm)
                                          else None),
                "p_tgt": round(probs.get(tgt, 0.0), 4), "p_src": round(probs.get(src, 0.0), 4),
                "identified": max(probs, key=probs.get) if probs else None,
            })
            print(f"  {clip.name} {mode:<9} similarity {rows[-1]['similarity']} "
                  f"{rows[-1]['identified']} ({rows[-1]['p_tgt']:.2f} {tgt}) "
                  f"{rows[-1]['seconds']} s in {made_s:.1f} s", flush=True)

    summary = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        summary[mode] = {
            "n": len(mine),
            "similarity": _mean(r["similarity"] for r in mine),
            "leak": round(sum(r["identified"] == src for r in mine) / len(mine), 4),
            "p_tgt": _mean(r["p_tgt"] for r in mine),
            "round_trip_wer": benchmetrics.wer([r["said"] for r in mine],
                                               [r["heard"] for r in mine])["wer"],
            "made_s_per_s": _mean(r["made_s"] / r["seconds"] for r in mine if r["seconds"]),
        }
    report = {"tts": {"engine": "voxcpm2", "backend": tts.backend, "model": str(tts.folder),
                      "settings": json.loads(tts.settings.model_dump_json())},
              "src_lang": src, "tgt_lang": tgt, "corpus": str(corpus),
              "anchors": {"same_speaker_similarity": _mean(same)},
              "modes": summary, "choice": choose(summary), "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "voicecheck.json").write_text(json.dumps(report, indent=1, ensure_ascii=False),
                                         encoding="utf-8")
    (out / "voicecheck.md").write_text(markdown(report), encoding="utf-8")
    return report


def choose(summary: dict) -> dict:
    """The voice mode to use: the most like the speaker of the fair ones.

    Fair: no more of the source language and no less intelligible (round-trip WER + 5 points)
    than the model's own voice.
    """
    base = summary.get("default")
    fair = [m for m in ("reference", "prompt") if m in summary and (
        base is None or (summary[m]["leak"] <= base["leak"]
                         and summary[m]["round_trip_wer"] <= base["round_trip_wer"] + 0.05))]
    if not fair:
        return {"mode": "default", "why": "every voice mode leaks the source language or is "
                                          "less intelligible than the model's own voice"}
    if all(summary[m]["similarity"] is None for m in fair):
        return {"mode": None, "why": "no result was long enough speech to compare voices"}
    best = max(fair, key=lambda m: summary[m]["similarity"] or -1.0)
    return {"mode": best, "why": f"the most like the speaker ({summary[best]['similarity']}) "
                                 "of the modes that leak no more language and are as "
                                 "intelligible as the default voice"}


def markdown(report: dict) -> str:
    """The report as a short Markdown table."""
    src, tgt = report["src_lang"], report["tgt_lang"]
    lines = [f"# voxweft voicecheck: {report['tts']['backend']} {report['tts']['model']}", "",
             f"Same speaker, other clips (the voice's own likeness): similarity "
             f"{report['anchors']['same_speaker_similarity']}", "",
             f"| mode | n | similarity to the speaker | identified as {src} (leak) | "
             f"P({tgt}) | round-trip WER | s to make 1 s |", "|---|---|---|---|---|---|---|"]
    for mode, s in report["modes"].items():
        lines.append(f"| {mode} | {s['n']} | {s['similarity']} | {s['leak']:.0%} | "
                     f"{s['p_tgt']} | {s['round_trip_wer']:.1%} | {s['made_s_per_s']} |")
    lines += ["", f"Choice: **{report['choice']['mode'] or 'none'}** "
                  f"({report['choice']['why']})."]
    return "\n".join(lines) + "\n"
