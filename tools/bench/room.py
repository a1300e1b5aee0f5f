"""The room (`voxweft bench --room`): the corpus as a room makes it, and what it costs.

Every recording in the corpus is one clean reader; a room is not. `build` writes, from the
corpus, a room corpus that the bench interprets in one session:

- each clip clean, then under noise at each SNR (the noise starts `LEAD_S` before the
  speaker and goes on `TAIL_S` after, as a room's does in the pauses): white, pink (1/f),
  babble (four other clips of the corpus at once) and music-like tones (chords of sines
  that change every half second, with attack and decay); the SNR is the speaker's active
  level (the 20 ms frames within 30 dB of the loudest) against the noise's RMS;
- each clip with a second talker at each level below the speaker (who also talks in the
  pause before and after the clip): another voice (piper's American English male voice,
  which the repository has) reading `TALKER_LINES`, sentences of other topics than the
  corpus, so their words can be told apart from the speaker's;
- no speech at all, 10 s each: pink noise at -35 dBFS, the tones at -35 dBFS, digital
  silence.

Everything is generated here from data the repository carries, with a fixed seed. `analyse`
reads the bench report back per condition: ASR WER against the speaker's words; intrusions
(the second talker's own words, those not in the speaker's text, that the transcripts of the
utterances spoken add to the speaker's words, against the talker's words that played under
the clips: a word heard in place of one of the speaker's, "and" for "than", is an error of
the WER, not an intrusion); the
lines committed on no-speech input (hallucinations); and the latency (speech end to first
audio, p50) against the clean clips'.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from voxweft.actors.loudness import active_rms
from voxweft.protocol.messages import BUS_RATE
from voxweft.tools.bench import metrics as benchmetrics

#: SNRs (dB) of the noises, and levels (dB below the speaker) of the second talker, by default.
DEFAULT_SNRS = (10.0,)
DEFAULT_TALKER_DB = (10.0,)
NOISES = ("white", "pink", "babble", "tones")
NO_SPEECH_S = 10.0
LEAD_S, TAIL_S = 0.5, 1.5   # the room's sound before and after the speaker's clip
QUIET_DBFS = -35.0
SEED = 7
#: The second talker's sentences: other topics than the corpus's (LJ Speech: printing).
TALKER_LINES = (
    "The train to the mountains leaves at seven every morning.",
    "Bring your umbrella, because the forecast promises heavy rain tonight.",
    "My brother repairs bicycles in a garage behind the bakery.",
    "Please turn the volume down, the baby is finally sleeping.",
    "We planted tomatoes, peppers and cucumbers along the fence.",
    "The football match was cancelled after the storm flooded the stadium.",
    "Her grandmother sends postcards from every island she visits.",
    "Could you pass the salt and the little jar of honey?",
    "Seventeen children waited patiently outside the dentist's office.",
    "The coffee machine on the third floor is broken again.",
)


@dataclass(frozen=True)
class Condition:
    """One way the room sounds: `kind` at `level_db`.

    clean; white, pink, babble, tones: noise at `level_db` dB SNR; talker: a second voice
    `level_db` dB below the speaker; quiet-pink, quiet-tones, silence: no speech, the noise
    at `level_db` dBFS.
    """

    kind: str
    level_db: float = 0.0

    @property
    def name(self) -> str:
        """How the report names it: "pink 10 dB", "talker -10 dB", "no speech: silence"."""
        if self.kind in PEOPLE:
            return PEOPLE[self.kind]
        if self.kind == "clean":
            return "clean"
        if self.kind in TALKERS:
            return f"{TALKERS[self.kind]} -{self.level_db:g} dB"
        if self.kind in NOISES:
            return f"{self.kind} {self.level_db:g} dB"
        return f"no speech: {self.kind}" + (f" {self.level_db:g} dBFS"
                                             if self.kind != "silence" else "")

    @property
    def speech(self) -> bool:
        """Whether the speaker speaks in it."""
        return self.kind in ("clean", *TALKERS, *NOISES, *PEOPLE)


#: The talker cases, with their names in the report: piper's voice under the corpus's reader
#: (`build`), a real person under a real reader, and the same with voices held out of every
#: choice made for the gate (`readers.build`).
TALKERS = {"talker": "talker", "talker-real": "real talker",
           "talker-held-out": "held-out talker"}
#: Those with real people, which `readers.build` makes.
REAL_TALKERS = tuple(kind for kind in TALKERS if kind != "talker")
#: The people's conditions (`readers`), with their names in the report.
PEOPLE = {"alone": "each reader alone", "readers": "readers in turn, 0 to -25 dB",
          "readers-no-pause": "readers in turn, no pause", "soft-starts": "soft starts",
          "fading": "sentences fading 15 dB"}


def conditions(snrs=DEFAULT_SNRS, talker_dbs=DEFAULT_TALKER_DB,
               people: bool = True) -> list[Condition]:
    """Every condition of the room, in the session's order.

    Clean, each noise at each SNR, the talker (piper's, then a real person's) at each level,
    the three silences, then the people's sessions (`readers`).
    """
    out = [Condition("clean")]
    out += [Condition(kind, float(snr)) for snr in snrs for kind in NOISES]
    out += [Condition("talker", float(db)) for db in talker_dbs]
    if people:
        out += [Condition(kind, float(db)) for kind in REAL_TALKERS for db in talker_dbs]
    out += [Condition("quiet-pink", QUIET_DBFS), Condition("quiet-tones", QUIET_DBFS),
            Condition("silence")]
    if people:
        out += [Condition(kind) for kind in PEOPLE]
    return out


def condition_entry(cond: Condition) -> dict:
    """A condition as the manifest lists it."""
    return asdict(cond) | {"name": cond.name}


# --- sounds -------------------------------------------------------------------------------

def rms(x: np.ndarray) -> float:
    """Root mean square (0 for nothing)."""
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0


def white(n: int, rng: np.random.Generator) -> np.ndarray:
    """White noise, RMS 1."""
    x = rng.standard_normal(n)
    return (x / rms(x)).astype(np.float32)


def pink(n: int, rng: np.random.Generator) -> np.ndarray:
    """Pink (1/f power) noise, RMS 1: white noise shaped in the frequency domain."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / BUS_RATE)
    spectrum[1:] /= np.sqrt(f[1:])
    spectrum[0] = 0.0
    x = np.fft.irfft(spectrum, n)
    return (x / rms(x)).astype(np.float32)


def tones(n: int, rng: np.random.Generator, note_s: float = 0.5) -> np.ndarray:
    """Music-like tones, RMS 1: a three-note chord (with overtones) every `note_s`."""
    t = np.arange(int(note_s * BUS_RATE)) / BUS_RATE
    envelope = np.minimum(1.0, t / 0.02) * np.exp(-t / (note_s / 2))
    notes = []
    while sum(len(x) for x in notes) < n:
        root = 110 * 2 ** (rng.integers(0, 24) / 12)
        chord = sum(np.sin(2 * np.pi * root * ratio * k * t) / k
                    for ratio in (1.0, 1.26, 1.5) for k in (1, 2, 3))
        notes.append(chord * envelope)
    x = np.concatenate(notes)[:n]
    return (x / rms(x)).astype(np.float32)


def babble(n: int, clips: list[np.ndarray], rng: np.random.Generator,
           voices: int = 4) -> np.ndarray:
    """Babble, RMS 1: `voices` of the clips at once, each looped from a random offset."""
    x = np.zeros(n)
    for i in range(voices):
        clip = clips[i % len(clips)]
        start = int(rng.integers(0, len(clip)))
        looped = np.resize(np.roll(clip, -start), n)
        x += looped / max(rms(looped), 1e-9)
    return (x / max(rms(x), 1e-9)).astype(np.float32)


def reader():
    """`say(line)`: piper's American English man reading `line`, 16 kHz mono float32.

    The same lines in the same order sound the same every run: piper draws its prosody's
    noise from onnxruntime's random generator, seeded here before the model is loaded (unseeded,
    two runs of the room bench, or of a test, heard two different talkers).
    """
    import onnxruntime
    import soxr

    from voxweft.actors.engines import build

    engine = build("tts", "piper", {})
    onnxruntime.set_seed(SEED)   # the session's generators are seeded when it is made
    engine.load()

    def say(line: str) -> np.ndarray:
        audio = np.concatenate(list(engine.synthesize(line, "en")))
        return soxr.resample(audio, engine.sample_rate, BUS_RATE).astype(np.float32)

    return say


def talker_speech(seconds: float) -> tuple[np.ndarray, list[tuple[str, int, int]]]:
    """The second talker reading TALKER_LINES (repeated) for at least `seconds`, 16 kHz.

    Piper's en_US voice (a man; the corpus is a woman), 0.3 s between sentences. Returns the
    audio and each sentence read with its first and last sample.
    """
    say = reader()
    return read_aloud(((line, say(line)) for line in TALKER_LINES), seconds)


def read_aloud(lines, seconds: float) -> tuple[np.ndarray, list[tuple[str, int, int]]]:
    """`lines` ((text, 16 kHz audio) pairs, repeated) 0.3 s apart for at least `seconds`.

    Returns the audio and each line read with its first and last sample.
    """
    lines = list(lines)
    gap = np.zeros(int(0.3 * BUS_RATE), np.float32)
    parts: list[np.ndarray] = []
    spans: list[tuple[str, int, int]] = []
    total = 0
    while total < seconds * BUS_RATE:
        line, audio = lines[len(spans) % len(lines)]
        parts += [audio, gap]
        spans.append((line, total, total + len(audio)))
        total += len(audio) + len(gap)
    return np.concatenate(parts), spans


# --- the room corpus ------------------------------------------------------------------------

def read16k(path: Path) -> np.ndarray:
    """An audio file as 16 kHz mono float32."""
    import soundfile as sf
    import soxr

    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono = audio.mean(axis=1)
    return soxr.resample(mono, rate, BUS_RATE).astype(np.float32) if rate != BUS_RATE else mono


def write_wav(path: Path, audio: np.ndarray) -> None:
    """16 kHz 16-bit WAV of `audio` (clipped)."""
    import soundfile as sf

    sf.write(str(path), np.clip(audio, -1.0, 1.0), BUS_RATE, subtype="PCM_16")


def _talker_words(lines: list[str]) -> list[str]:
    return benchmetrics.normalize_text(" ".join(lines)).split()


def under(spans: list[tuple[str, int, int]], start: int, end: int) -> tuple[list[str], float]:
    """The talker's sentences heard in samples [start, end), and how many of their words.

    A sentence partly inside counts its words times the share of it inside.
    """
    lines, words = [], 0.0
    for line, a, b in spans:
        inside = min(b, end) - max(a, start)
        if inside > 0:
            lines.append(line)
            words += len(_talker_words([line])) * inside / (b - a)
    return lines, words


def build(items, out: Path, conds: list[Condition], seed: int = SEED) -> dict:
    """Write the room corpus into `out` (NAME@CONDITION.wav + .txt); return its manifest.

    `items`: the corpus (`run.Item`s with their reference text). The manifest (also written
    as `room.json`) says per file its condition, its speaker's reference and, with a second
    talker, the talker's words that play under it.
    """
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    clips = {item.name: read16k(item.path) for item in items}
    talkers = sum(c.kind == "talker" for c in conds)
    heard_s = sum(len(c) / BUS_RATE + LEAD_S + TAIL_S for c in clips.values())
    audio, spans = talker_speech(talkers * heard_s) if talkers else (np.zeros(0, np.float32),
                                                                      [])
    files: dict[str, dict] = {}
    at = 0   # where the talker is: each clip hears the next part of what they say
    for cond in conds:
        if cond.kind in PEOPLE or cond.kind in REAL_TALKERS:
            raise ValueError(f"{cond.name}: the people's conditions are built by readers.build")
        tag = cond.name.replace(":", "").replace(" ", "_")
        if not cond.speech:
            n = int(NO_SPEECH_S * BUS_RATE)
            gain = 10 ** (cond.level_db / 20)
            noise = (np.zeros(n, np.float32) if cond.kind == "silence" else
                     (pink if cond.kind == "quiet-pink" else tones)(n, rng) * gain)
            name = f"nospeech@{tag}"
            write_wav(out / f"{name}.wav", noise)
            files[name] = {"condition": cond.name, "kind": cond.kind, "reference": None}
            continue
        for item in items:
            level = active_rms(clips[item.name])
            entry = {"condition": cond.name, "kind": cond.kind, "reference": item.ref_text}
            speech = mixed = clips[item.name]
            if cond.kind != "clean":   # the room sounds before and after the speaker too
                speech = mixed = np.concatenate([np.zeros(int(LEAD_S * BUS_RATE), np.float32),
                                                 speech,
                                                 np.zeros(int(TAIL_S * BUS_RATE), np.float32)])
            if cond.kind in NOISES:
                others = [c for k, c in clips.items() if k != item.name] or [speech]
                noise = (babble(len(speech), others, rng) if cond.kind == "babble" else
                         {"white": white, "pink": pink, "tones": tones}[cond.kind](
                             len(speech), rng))
                mixed = speech + noise * level * 10 ** (-cond.level_db / 20)
            elif cond.kind == "talker":
                cut = audio[at:at + len(speech)]
                entry["talker_lines"], words = under(spans, at, at + len(speech))
                entry["talker_words"] = round(words)
                at += len(speech)
                mixed = speech + cut / max(active_rms(cut), 1e-9) * level * \
                    10 ** (-cond.level_db / 20)
            name = f"{item.name}@{tag}"
            write_wav(out / f"{name}.wav", mixed.astype(np.float32))
            (out / f"{name}.txt").write_text(item.ref_text or "", encoding="utf-8")
            files[name] = entry
    manifest = {"seed": seed, "conditions": [condition_entry(c) for c in conds],
                "files": files}
    (out / "room.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


def merge(manifest: dict, people: dict, conds: list[Condition], out: Path) -> dict:
    """`build`'s manifest with the people's (`readers.build`) in it, as `room.json` too.

    The conditions are listed in `conds`' order.
    """
    manifest = manifest | {"conditions": [condition_entry(c) for c in conds],
                           "files": manifest["files"] | people["files"]}
    (out / "room.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


# --- what the room cost ---------------------------------------------------------------------

def spoken(row: dict) -> bool:
    """The utterance of a report row was spoken, whole."""
    return bool(row["played"] and not row["not_spoken"] and row["complete"] is not False)


def _p50(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(float(np.median(values)), 3) if values else None


def analyse(report: dict, manifest: dict) -> dict:
    """Per condition: WER, intrusions, lines on no speech, latency (see the module docstring).

    And `spoken_share`: the share of the speaker's reference words whose translation was
    spoken (`metrics.matched_words` over the utterances spoken whole; None on no speech).

    `report`: the bench report of the room corpus (its `utterances` rows name their file).
    """
    rows_of: dict[str, list[dict]] = {}
    for row in report["utterances"]:
        if row["file"] is not None:
            rows_of.setdefault(row["file"], []).append(row)
    out: dict[str, dict] = {}
    for cond in manifest["conditions"]:
        name = cond["name"]
        files = {f: e for f, e in manifest["files"].items() if e["condition"] == name}
        rows = [r for f in files for r in rows_of.get(f, [])]
        entry: dict = {"files": len(files), "utterances": len(rows)}
        refs = [(e["reference"], " ".join(r["text"] or "" for r in rows_of.get(f, [])))
                for f, e in files.items() if e["reference"]]
        if refs:
            entry["wer"] = round(benchmetrics.wer([a for a, _ in refs],
                                                  [b for _, b in refs])["wer"], 4)
        else:   # no speech: every committed line is one the room made up
            entry["lines"] = len(rows)
            entry["texts"] = [r["text"] for r in rows]
        if cond["kind"] in TALKERS:
            said = 0
            intruded: list[str] = []
            for f, e in files.items():
                own = set(benchmetrics.normalize_text(e["reference"] or "").split())
                theirs = set(_talker_words(e["talker_lines"])) - own
                said += e["talker_words"]
                heard = " ".join(r["text"] or "" for r in rows_of.get(f, []) if spoken(r))
                intruded += [w for w in benchmetrics.inserted_words(e["reference"], heard)
                             if w in theirs]
            entry["intrusions"] = {"words": len(intruded), "talker_words": said,
                                   "share": round(len(intruded) / said, 4) if said else None,
                                   "examples": sorted(set(intruded))[:12]}
        entry["latency_p50_s"] = _p50([r["speech_end_to_first_audio_s"] for r in rows])
        # The reference's words whose translation was spoken (as the bench's headline).
        said = [(e["reference"], " ".join(r["text"] or "" for r in rows_of.get(f, [])
                                          if spoken(r)))
                for f, e in files.items() if e["reference"]]
        matched, words = benchmetrics.matched_words([a for a, _ in said], [b for _, b in said])
        entry["spoken_share"] = round(matched / words, 4) if words else None
        ignored = [s["length_s"] for s in report.get("ignored") or [] if s["file"] in files]
        entry["ignored_s"] = round(sum(ignored), 2)
        entry["ignored"] = len(ignored)
        out[name] = entry
    alone = out.get(PEOPLE["alone"], {}).get("wer")
    for kind in ("readers", "readers-no-pause"):
        if PEOPLE[kind] in out:   # the same clips, each reader alone at the speaker's level
            out[PEOPLE[kind]]["wer_alone"] = alone
    clean = out.get("clean", {}).get("latency_p50_s")
    for entry in out.values():
        lat = entry["latency_p50_s"]
        entry["latency_cost_s"] = round(lat - clean, 3) if lat is not None and clean else None
    return out


def markdown(room: dict, real_time: bool = True) -> str:
    """The room table of a report; latency only of a real-time run (`--fast` has none)."""
    lines = ["## The room", "",
             "| condition | WER | intrusions (talker words spoken) | lines on no speech "
             "| spoken | speech ignored | latency p50 s (cost) |",
             "|---|---|---|---|---|---|---|"]
    if not real_time:
        lines[2:2] = ["(--fast: the file is read faster than real time, so no latency is "
                      "given; run without --fast for the latency cost)", ""]
    for name, e in room.items():
        wer = f"{100 * e['wer']:.1f} %" if "wer" in e else "-"
        if e.get("wer_alone") is not None:
            wer += f" (alone {100 * e['wer_alone']:.1f} %)"
        share = e.get("spoken_share")
        share = "-" if share is None else f"{100 * share:.1f} %"
        ignored = (f"{e['ignored_s']:.1f} s ({e['ignored']})" if e.get("ignored")
                   else "0 s" if "ignored_s" in e else "-")
        intr = e.get("intrusions")
        intr = (f"{intr['words']} of {intr['talker_words']} "
                f"({100 * (intr['share'] or 0):.1f} %)" if intr else "-")
        said = str(e["lines"]) if "lines" in e else "-"
        lat = e["latency_p50_s"]
        cost = e["latency_cost_s"]
        lat = "-" if lat is None or not real_time else \
            f"{lat:.2f}" + (f" ({cost:+.2f})" if cost else "")
        lines.append(f"| {name} | {wer} | {intr} | {said} | {share} | {ignored} | {lat} |")
    return "\n".join(lines) + "\n"
