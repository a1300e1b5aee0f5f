"""The room's people (`voxweft bench --room`): real readers, each at their own level.

`room` puts noise and one talker around one reader at one level. A room also has several
people who take the floor in turn, at the levels their distance from the microphone gives
them, soft words and sentences that fade. `build` writes, from the real voices the
repository carries (`tools/bench/corpus/voices`, see its NOTICE.md) and the corpus's reader:

- `alone`: every clip of the panel at the speaker's level, one file each (what each reader
  gets when nobody else speaks: the WER to compare the sessions with);
- `readers`: one session, the readers of `PANEL` one after another, each at their level
  (0 to -25 dB against the first), `PANEL_PAUSE_S` apart;
- `readers-no-pause`: the same with the levels in another order and `NO_PAUSE_S` between
  readers (a speaker change without a pause);
- `soft-starts`: the corpus reader and the LibriVox reader, each sentence's first
  `SOFT_S` at `SOFT_DB` under, after pauses of 0.8 and 2 s;
- `fading`: long sentences whose last `FADE_S` fade by `FADE_DB`;
- `talker-real`: the LibriVox reader with another real person (`REAL_TALKERS`) `level_db`
  under them from `room.LEAD_S` before each clip to `room.TAIL_S` after it, as `room`'s
  talker;
- `talker-held-out`: the same with three people no choice for the gate was made on
  (`HELD_OUT`): the gate's timings were chosen on the corpus reader and piper's voice, and
  the panel's voices were looked at while choosing how fades and soft words are given
  (docs/room.md), so these measure what the room's own talkers cannot.

Every speaker in `readers`, `readers-no-pause`, `soft-starts` and `fading` holds the floor:
any of their speech the gate ignores counts against it (`room.analyse`: `ignored_s`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxweft.protocol.messages import BUS_RATE
from voxweft.tools.bench import DEFAULT_CORPUS, room

VOICES = DEFAULT_CORPUS.parent / "voices"
#: The panel: (reader, level in dB against the first). "lj" is the corpus's reader.
PANEL = (("lj", 0.0), ("librivox-man", -20.0), ("harvard-woman", -8.0), ("linphone-man", -25.0),
         ("arctic-awb", -15.0), ("arctic-slt", 0.0), ("sphinx-man", -22.0), ("fox-man", -12.0))
#: The same readers in the session without pauses, with these levels (another order).
NO_PAUSE_LEVELS = (-25.0, 0.0, -18.0, -3.0, -22.0, -10.0, 0.0, -20.0)
PANEL_SECONDS = 10.5          # each reader reads their clips up to this long
PANEL_PAUSE_S, NO_PAUSE_S = 0.8, 0.1
SOFT_S, SOFT_DB = 0.4, 10.0
FADE_S, FADE_DB = 2.5, 15.0
REAL_TALKERS = ("harvard-woman", "linphone-man")
TALKER_SPEAKER = "librivox-man"
#: The held-out talker case: (speaker, their talkers).
HELD_OUT = ("allison", ("sonnet-reader", "mfa-man"))
#: Which talker case has which people: (speaker, talkers, the files' prefix).
TALKER_CASES = {"talker-real": (TALKER_SPEAKER, REAL_TALKERS, "librivox"),
                "talker-held-out": (*HELD_OUT, "allison")}
KINDS = (*room.PEOPLE, *TALKER_CASES)

Clip = tuple[str, np.ndarray]   # (transcript, 16 kHz mono float32)


def voices(items, folder: Path = VOICES) -> dict[str, list[Clip]]:
    """Each reader's clips, by name: the voices' folders, and "lj" for the corpus's items."""
    out = {"lj": [(item.ref_text or "", _trimmed(room.read16k(item.path))) for item in items]}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "licences"):
        out[sub.name] = [(wav.with_suffix(".txt").read_text(encoding="utf-8").strip(),
                          _trimmed(room.read16k(wav)))
                         for wav in sorted([*sub.glob("*.wav"), *sub.glob("*.flac")])]
    return out


def _trimmed(audio: np.ndarray, margin_s: float = 0.1) -> np.ndarray:
    """The recording from `margin_s` before its voice to `margin_s` after: pauses are ours."""
    a, b = speech_span(audio)
    margin = round(margin_s * BUS_RATE)
    return audio[max(0, a - margin):b + margin]


def at(audio: np.ndarray, level: float, db: float) -> np.ndarray:
    """`audio` with its active level at `level` (RMS) and `db` on top."""
    return (audio / max(room.active_rms(audio), 1e-9) * level * 10 ** (db / 20)).astype(
        np.float32)


def speech_span(audio: np.ndarray) -> tuple[int, int]:
    """First and last sample of `audio` above 5 % of its peak: where the voice is."""
    loud = np.flatnonzero(np.abs(audio) > 0.05 * np.abs(audio).max())
    return (int(loud[0]), int(loud[-1]) + 1) if len(loud) else (0, len(audio))


def _write(out: Path, name: str, audio: np.ndarray, text: str) -> None:
    """NAME.wav and its reference NAME.txt, as the bench reads a corpus."""
    room.write_wav(out / f"{name}.wav", audio)
    (out / f"{name}.txt").write_text(text, encoding="utf-8")


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * BUS_RATE), np.float32)


def _reading(clips: list[Clip], seconds: float) -> list[Clip]:
    """The reader's clips in order, as many as fit in `seconds` (at least one)."""
    out, total = [], 0.0
    for text, audio in clips:
        if out and total + len(audio) / BUS_RATE > seconds:
            break
        out.append((text, audio))
        total += len(audio) / BUS_RATE
    return out


def _session(parts: list[tuple[str, np.ndarray, float]],
             gap_s: float) -> tuple[np.ndarray, list[dict]]:
    """The readings one after another: audio, the reference, and who speaks where."""
    audio, who, at_sample = [_silence(gap_s)], [], round(gap_s * BUS_RATE)
    for reader, clip, db in parts:
        audio += [clip, _silence(gap_s)]
        a, b = speech_span(clip)
        who.append({"reader": reader, "level_db": db, "start_s": (at_sample + a) / BUS_RATE,
                    "end_s": (at_sample + b) / BUS_RATE})
        at_sample += len(clip) + round(gap_s * BUS_RATE)
    return np.concatenate(audio), who


def build(items, out: Path, conds, voices_of: dict[str, list[Clip]] | None = None) -> dict:
    """Write the people's files of `conds` (kinds in KINDS) into `out`; their manifest part.

    Returns ``{"conditions": [...], "files": {...}}`` in `room.build`'s manifest form; each
    file entry has `reference` (the words said, in order) and `readers` (who spoke where).
    """
    out.mkdir(parents=True, exist_ok=True)
    people = voices_of or voices(items)
    level = room.active_rms(np.concatenate([a for _, a in people["lj"]]))
    files: dict[str, dict] = {}
    for cond in conds:
        entry = {"condition": cond.name, "kind": cond.kind}
        panel = [(reader, _reading(people[reader], PANEL_SECONDS)) for reader, _ in PANEL]
        if cond.kind == "alone":
            for k, (reader, clips) in enumerate(panel):
                for i, (text, clip) in enumerate(clips):
                    name = f"people-1-alone-{k}-{reader}-{i}"
                    _write(out, name, np.concatenate(
                        [_silence(0.5), at(clip, level, 0.0), _silence(0.5)]), text)
                    files[name] = entry | {"reference": text, "readers": [reader]}
            continue
        if cond.kind in ("readers", "readers-no-pause"):
            levels = [db for _, db in PANEL] if cond.kind == "readers" else NO_PAUSE_LEVELS
            gap = PANEL_PAUSE_S if cond.kind == "readers" else NO_PAUSE_S
            parts = [(reader, at(np.concatenate([c for _, c in clips]), level, db), db)
                     for (reader, clips), db in zip(panel, levels, strict=True)]
            audio, who = _session(parts, gap)
            text = " ".join(t for _, clips in panel for t, _ in clips)
            name = f"people-2-{cond.kind}"
        elif cond.kind == "soft-starts":
            clips = people["lj"][:3] + people[TALKER_SPEAKER][:3]
            parts, pauses = [], []
            for i, (_, clip) in enumerate(clips):
                clip = at(clip, level, 0.0)
                a, _ = speech_span(clip)
                soft = clip.copy()
                soft[:a + round(SOFT_S * BUS_RATE)] *= 10 ** (-SOFT_DB / 20)
                parts.append(("lj" if i < 3 else TALKER_SPEAKER, soft, -SOFT_DB))
                pauses.append(2.0 if i % 2 else 0.8)
            audio = [_silence(1.0)]
            for (_, clip, _), pause in zip(parts, pauses, strict=True):
                audio += [_silence(pause), clip]
            audio = np.concatenate(audio + [_silence(1.0)])
            who = [{"reader": r, "soft_s": SOFT_S, "soft_db": SOFT_DB} for r, _, _ in parts]
            text = " ".join(t for t, _ in clips)
            name = "people-3-soft-starts"
        elif cond.kind == "fading":
            clips = sorted(people["lj"] + people[TALKER_SPEAKER], key=lambda c: -len(c[1]))[:4]
            parts = []
            for _, clip in clips:
                clip = at(clip, level, 0.0)
                _, b = speech_span(clip)
                k = min(round(FADE_S * BUS_RATE), b)
                gain = np.ones(len(clip), np.float32)
                gain[b - k:b] = 10 ** (-np.linspace(0, FADE_DB, k) / 20)
                gain[b:] = 10 ** (-FADE_DB / 20)
                parts.append(("", clip * gain, -FADE_DB))
            audio, who = _session(parts, 1.0)
            text = " ".join(t for t, _ in clips)
            name = "people-4-fading"
        elif cond.kind in TALKER_CASES:
            files.update(_talker(people, level, cond, out))
            continue
        else:
            raise ValueError(f"not a people condition: {cond.kind!r}")
        _write(out, name, audio, text)
        files[name] = entry | {"reference": text, "readers": who}
    return {"conditions": [room.condition_entry(c) for c in conds], "files": files}


def _talker(people: dict[str, list[Clip]], level: float, cond, out: Path) -> dict:
    """`room`'s talker case with real people: a reader, other people under (`TALKER_CASES`)."""
    speaker, talkers, prefix = TALKER_CASES[cond.kind]
    lines = [(text, audio) for name in talkers for text, audio in people[name]]
    clips = people[speaker]
    heard_s = sum(len(a) / BUS_RATE + room.LEAD_S + room.TAIL_S for _, a in clips)
    talk, spans = room.read_aloud(lines, heard_s)
    files, at_sample = {}, 0
    for i, (text, clip) in enumerate(clips):
        speech = np.concatenate([_silence(room.LEAD_S), at(clip, level, 0.0),
                                 _silence(room.TAIL_S)])
        cut = talk[at_sample:at_sample + len(speech)]
        cut = np.pad(cut, (0, len(speech) - len(cut)))
        lines_under, words = room.under(spans, at_sample, at_sample + len(speech))
        at_sample += len(speech)
        name = f"{prefix}-{i}@{cond.kind}"
        _write(out, name, speech + at(cut, level, -cond.level_db), text)
        files[name] = {"condition": cond.name, "kind": cond.kind, "reference": text,
                       "talker_lines": lines_under, "talker_words": round(words)}
    return files
