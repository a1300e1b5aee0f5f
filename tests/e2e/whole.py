"""What the chaos and hostile-peer tests share: a long recording of known clips, the actors of
an `interpret` run, and the check that every utterance came out once, in order, at its time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jiwer
import numpy as np
import psutil
import soundfile as sf

from tests.conftest import ROOT, VOXWEFT, corpus_clips, read_16k
from voxweft.tools.bench.metrics import normalize_text

ACTORS = ("capture", "segmenter", "asr", "mt", "tts", "player")
#: The pieces of a clip cover it to within this (the segmenter's pre-roll and hangover are
#: shorter; a word is longer).
COVER_S = 0.6
#: A hole between two pieces of a clip holds no word: no 20 ms of it this loud (RMS, full
#: scale 1). The LJ clips' speech: 5 % of its 20 ms windows over 0.01 are under 0.013, half
#: over 0.068; their pauses are under 0.005. (Before, a hole of up to COVER_S passed: a short
#: word, "has" or "in", fits in 0.6 s.)
WORD_RMS = 0.03
#: Character error rate of one clip's transcript against its reference, at most: Whisper
#: base makes ~6 % word errors on these clips (docs/performance.md), often a compound spelt
#: otherwise ("blockbooks": two word errors, one character); a piece of 4 words or more
#: lost or said twice is 30 % and more of a clip.
CLIP_CER = 0.2


def content_error(reference: str, said: str) -> float:
    """Character error rate of `said` against `reference`, both normalised as the bench's WER."""
    return jiwer.cer(normalize_text(reference), normalize_text(said))


def build_recording(path: Path, utterances: int, seed: int,
                    pause_s: tuple[float, float] = (3.0, 9.0)) -> list[tuple[float, Path]]:
    """LJ clips in turn, each after a random pause; returns (media start, clip) per clip."""
    rng = np.random.default_rng(seed)
    clips = corpus_clips()
    parts, placed, n = [], [], 0
    for i in range(utterances):
        pause = np.zeros(int(16000 * rng.uniform(*pause_s)), np.float32)
        speech = read_16k(clips[i % len(clips)])
        parts += [pause, speech]
        placed.append(((n + len(pause)) / 16000, clips[i % len(clips)]))
        n += len(pause) + len(speech)
    parts.append(np.zeros(16000 * 2, np.float32))
    sf.write(path, np.concatenate(parts), 16000, subtype="PCM_16")
    return placed


def hog(seconds: float) -> list[subprocess.Popen]:
    """Busy both cores for `seconds`."""
    code = f"import time\nt = time.monotonic() + {seconds}\nwhile time.monotonic() < t: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]


def start_interpret(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    """`voxweft interpret` of tmp_path/talk.wav into tmp_path/out, its supervisord directory
    under tmp_path/runs (TMPDIR, so `actor_pid` finds its actors): (process, out, runs)."""
    out, run_root = tmp_path / "out", tmp_path / "runs"
    run_root.mkdir()
    proc = subprocess.Popen([*VOXWEFT, "interpret", "--input", str(tmp_path / "talk.wav"),
                             "--out", str(out)], cwd=ROOT, text=True,
                            env={**os.environ, "TMPDIR": str(run_root)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc, out, run_root


def actor_pid(tmp_root: Path, actor: str) -> int | None:
    """The pid of an actor whose supervisord runs from a directory under `tmp_root`."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "--actor" in cmd and cmd[-1] == actor and any(str(tmp_root) in c for c in cmd):
            return proc.pid
    return None


def loudest_s(recording: Path, start_s: float, end_s: float) -> float:
    """The RMS of the loudest 20 ms of `recording` between two times (0 for none)."""
    audio, rate = sf.read(recording, dtype="float32", start=max(0, int(start_s * 16000)),
                          stop=max(0, int(end_s * 16000)))
    n = int(0.02 * rate)
    return max((float(np.sqrt(np.mean(audio[i:i + n] ** 2)))
                for i in range(0, len(audio) - n + 1, n)), default=0.0)


def running_topology(proc: subprocess.Popen, run_root: Path, timeout_s: float = 240):
    """Wait until every actor of `interpret`'s run under `run_root` runs; its topology."""
    from voxweft.deploy.topology import load

    deadline = time.monotonic() + timeout_s
    while not all(actor_pid(run_root, a) for a in ACTORS):
        assert proc.poll() is None and time.monotonic() < deadline, "pipeline never ran"
        time.sleep(0.5)
    return load(next(run_root.glob("*/topology.toml")))


def by_clip(transcripts: list[dict], placed: list[tuple[float, Path]],
            recording: Path | None = None) -> list[list[dict]]:
    """The transcript rows of each placed clip, in order.

    A clip is one utterance, or several pieces when a long one was committed up to a pause
    inside it (simultaneous commits): the pieces tile it, in order, without overlap and
    without a hole, from its first word to its last. With the `recording` (16 kHz), a hole
    between two pieces must hold no word (WORD_RMS); without, it must be under COVER_S.
    """
    ends = [at + sf.info(str(clip)).duration for at, clip in placed]
    pieces: list[list[dict]] = [[] for _ in placed]
    for row in transcripts:
        overlap = [min(row["media_end_s"], end) - max(row["media_start_s"], at)
                   for (at, _), end in zip(placed, ends, strict=True)]
        best = max(range(len(placed)), key=overlap.__getitem__)
        assert overlap[best] > 0, f"{row} is no clip's"
        pieces[best].append(row)
    rows = [row for clip in pieces for row in clip]
    assert rows == transcripts, "utterances out of order"
    for clip, (at, _), end in zip(pieces, placed, ends, strict=True):
        assert clip, [(t["media_start_s"], t["text"]) for t in transcripts]
        for a, b in zip(clip, clip[1:], strict=False):
            assert a["media_end_s"] <= b["media_start_s"] + 1e-3, (a, b)   # nothing twice
            assert b["media_start_s"] - a["media_end_s"] < COVER_S, (a, b)  # nothing left out
            if recording is not None and b["media_start_s"] > a["media_end_s"]:
                loud = loudest_s(recording, a["media_end_s"], b["media_start_s"])
                assert loud < WORD_RMS, f"speech between two pieces ({loud:.3f}): {a}, {b}"
        assert clip[0]["media_start_s"] < at + COVER_S and \
            clip[-1]["media_end_s"] > end - COVER_S, (at, end, clip)
    return pieces


def check_whole(out: Path, placed: list[tuple[float, Path]]) -> list[dict]:
    """Every utterance exactly once, in order, at its time, recognisably, in the transcript,
    the translation and output.wav (by the player's journal). Returns the transcript rows."""
    transcripts = heard_whole(out, placed)
    translations = [json.loads(x) for x in (out / "translation.jsonl").read_text().splitlines()]
    said, meant = [t["utt"] for t in transcripts], [t["utt"] for t in translations]
    assert meant == said, (f"transcribed, not translated: {sorted(set(said) - set(meant))}; "
                           f"translated, not transcribed: {sorted(set(meant) - set(said))}; "
                           f"transcripts {said}, translations {meant}")
    assert all(t["text"] for t in translations), [t for t in translations if not t["text"]]

    played_whole(out, [t["utt"] for t in transcripts])
    spoken_as_translated(out)
    # Every output tells the same story: what the file holds whole is spoken, everywhere.
    unsaid = [t["utt"] for t in translations if not (t["spoken"] and t["complete"])]
    assert not unsaid, f"translation.jsonl says {unsaid} were not spoken whole"
    rows = json.loads((out / "latency.json").read_text())["utterances"]
    assert all(r["played"] for r in rows), [r["utt"] for r in rows if not r["played"]]
    return transcripts


#: What the listener hears, checked against what was said, utterance by utterance: a run of
#: this many words of an utterance's translation missing from (or added to) its own span of
#: output.wav, transcribed, is a lost (or repeated) piece. Whisper base mishears words of the
#: synthetic voice (round trip 16-27 % WER, docs/performance.md), mostly one for another, and
#: drops or adds single short words ("os", "em"); so a single lost word is caught by the
#: player's journal (the words it wrote, `played_whole`), a piece by this.
LOST_RUN = 3
#: An utterance's span says less than this share of its translation's words: it holds
#: another's audio (one removed before it shifts every span after) or none. Only for one of
#: SHARE_WORDS words or more: Whisper hears a short piece of the synthetic voice as other
#: words ("e vale a", 3 words, heard as none of them in CI-like runs, alone too).
HEARD_SHARE = 0.5
SHARE_WORDS = 6


def spoken_as_translated(out: Path) -> dict[str, list[list[str]]]:
    """output.wav says each translation on that utterance's own span (the player's journal):
    no run of LOST_RUN words lost or said twice, and most of its words there.

    The file is transcribed once, whole (long-form, with Whisper's VAD: span by span, Whisper
    loops on a three-word piece, "De Valia De Valia De Valia"), with word times; each word
    heard belongs to the span its middle falls in, and each utterance is decided on its own
    words (`_judged`). What looks wrong is heard again on its span alone, and counts only if
    it looks wrong there too (Whisper's long form dropped one copy of a sentence said nine
    times). Returns, per utterance, the runs of words lost or added ("+" first)."""
    import soxr

    from voxweft.actors.engines.asr.faster_whisper import FasterWhisperEngine

    translations = [json.loads(x) for x in (out / "translation.jsonl").read_text().splitlines()]
    audio, rate = sf.read(out / "output.wav", dtype="float32")
    whisper = FasterWhisperEngine(threads=2)
    whisper.load()
    lang = translations[0]["tgt_lang"] if translations else None

    def transcribe(pcm: np.ndarray) -> list[tuple[float, str]]:
        """(middle second, word) of what Whisper hears in `pcm`, normalised."""
        # temperature 0 only: the same audio, the same words (its fallback samples: once a
        # phrase heard offline was missing in CI's transcription of the same file)
        segments, _ = whisper.model.transcribe(
            soxr.resample(pcm, rate, 16000).astype(np.float32), language=lang, beam_size=1,
            vad_filter=True, condition_on_previous_text=False, temperature=0.0,
            word_timestamps=True)
        return [((w.start + w.end) / 2, n) for s in segments for w in (s.words or [])
                for n in normalize_text(w.word).split()]

    journal = [json.loads(x) for x in (out / "output.wav.journal").read_text().splitlines()]
    written = [j for j in journal if "utt" in j]
    spans = {j["utt"]: (a, j["end"]) for a, j in zip([0] + [j["end"] for j in written],
                                                      written, strict=False)}
    played = {j["utt"] for j in written if j.get("played_s", 1)}
    heard: dict[str, list[str]] = {utt: [] for utt in spans}
    for at, word in transcribe(audio):
        for utt, (a, b) in spans.items():
            if a <= at * rate < b:
                heard[utt].append(word)
                break

    runs: dict[str, list[list[str]]] = {}
    bad = []
    for t in translations:
        said = normalize_text(t["text"]).split()
        if t["utt"] not in played or not said:
            continue   # not spoken (too late to be worth hearing: said so elsewhere)
        runs[t["utt"]], wrong = _judged(said, heard[t["utt"]])
        if wrong:   # a second opinion: the span alone, transcribed, says it
            _runs, again = _judged(said, [w for _t, w in
                                          transcribe(audio[slice(*spans[t["utt"]])])])
            if again:
                bad.append((t["utt"], wrong, "alone:", again))
    print("spoken as translated: words lost or added, per utterance:",
          {u: r for u, r in runs.items() if r})
    assert not bad, f"output.wav does not say its translations: {bad}"
    return runs


def _judged(said: list[str], got: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """The runs of `said` lost from `got` or added to it ("+" first), and those that are a
    piece lost or said twice: LOST_RUN words in a row lost, LOST_RUN of its own words added
    (Whisper mishearing a short piece adds others: "Então, no" heard as "em T-Sounds, N-O-R"),
    or, of SHARE_WORDS or more, fewer than HEARD_SHARE heard at all (another's audio)."""
    runs, wrong, hits = [], [], 0
    for c in jiwer.process_words(" ".join(said), " ".join(got) or "-").alignments[0]:
        if c.type == "equal":
            hits += c.ref_end_idx - c.ref_start_idx
        elif c.type == "delete":
            runs.append(said[c.ref_start_idx:c.ref_end_idx])
            if len(runs[-1]) >= LOST_RUN:
                wrong.append(runs[-1])
        elif c.type == "insert":
            runs.append(["+", *got[c.hyp_start_idx:c.hyp_end_idx]])
            if sum(w in said for w in runs[-1][1:]) >= LOST_RUN:
                wrong.append(runs[-1])
    if len(said) >= SHARE_WORDS and hits < HEARD_SHARE * len(said):
        wrong.append([f"{hits} of {len(said)} words heard"])
    return runs, wrong


def heard_whole(out: Path, placed: list[tuple[float, Path]]) -> list[dict]:
    """Every clip transcribed once, in order, at its time, recognisably (transcript.jsonl)."""
    transcripts = [json.loads(x) for x in (out / "transcript.jsonl").read_text().splitlines()]
    recording = out.parent / "talk.wav"   # where build_recording's callers put it
    pieces_of = by_clip(transcripts, placed, recording if recording.is_file() else None)
    for pieces, (at, clip) in zip(pieces_of, placed, strict=True):
        assert abs(pieces[0]["media_start_s"] - at) < COVER_S, (pieces, at)
        said = " ".join(row["text"] for row in pieces)
        score = content_error(clip.with_suffix(".txt").read_text(), said)
        assert score <= CLIP_CER, (clip.name, score, said)
    return transcripts


def played_whole(out: Path, utts: list[str]) -> None:
    """output.wav holds each of `utts` once, in order, whole (by the player's journal), and
    each with speech in it."""
    journal = [json.loads(x) for x in (out / "output.wav.journal").read_text().splitlines()]
    written = [j for j in journal if "utt" in j]
    assert [j["utt"] for j in written] == utts
    audio, rate = sf.read(out / "output.wav", dtype="float32")
    ends = [0] + [j["end"] for j in written]
    assert ends == sorted(ends) and ends[-1] <= len(audio)
    cut_short = [j["utt"] for j in written if not j.get("complete")]
    assert not cut_short, f"the player gave up on {cut_short} before their last chunk"
    for j in written:   # the words written: the translation's, each once, in order
        spans = j.get("words", [])
        assert spans and [a for a, _ in spans] == [0] + [b for _, b in spans[:-1]] and \
            spans[-1][1] == j["of"], f"{j['utt']}: words written {spans} of {j.get('of')}"
    for (start, end), row in zip(zip(ends, ends[1:], strict=False), written, strict=True):
        loud = np.abs(audio[start:end]) > 0.01
        assert loud.sum() / rate > 0.3, f"{row['utt']}: no speech in output.wav"
