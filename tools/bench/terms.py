"""The words that matter (`voxweft bench --terms`): names and terms, heard and spoken right.

The repository carries a glossary (`terms/glossary.SRC-TGT.txt`: names, and terms with
their translations) and sentences that say them (`terms/sentences.SRC.txt`). `build` has
piper read each sentence into a corpus; the bench interprets it twice, without and with the
glossary; `score` says, per run, of the glossary terms the sentences say:

- heard: the share whose words the final transcript has, spelled as the glossary does;
- spoken: the share whose translation (a name: the name) the spoken translation has;

and which were missed, so a reader sees what went wrong.
"""

from __future__ import annotations

from pathlib import Path

from voxweft.actors.glossary import Glossary
from voxweft.tools.bench.room import reader, spoken, write_wav

HERE = Path(__file__).resolve().parent / "terms"


class TermsError(ValueError):
    """No glossary and sentences for this language pair."""


def files(src: str, tgt: str) -> tuple[Path, Path]:
    """The glossary and the sentences for `src` -> `tgt`."""
    glossary, sentences = HERE / f"glossary.{src}-{tgt}.txt", HERE / f"sentences.{src}.txt"
    if not glossary.is_file() or not sentences.is_file():
        have = sorted(p.name[len("glossary."):-len(".txt")] for p in HERE.glob("glossary.*.txt"))
        raise TermsError(f"--terms: no glossary for {src}->{tgt} in {HERE} (there is: "
                         f"{', '.join(have) or 'none'})")
    return glossary, sentences


def sentences(path: Path) -> list[str]:
    """The sentences of a sentences file (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text("utf-8").splitlines())
    return [line for line in lines if line]


def build(src: str, tgt: str, out: Path) -> tuple[Glossary, dict[str, str]]:
    """Write the sentences read aloud into `out` (NAME.wav + NAME.txt).

    Returns the glossary and each file's sentence.
    """
    glossary_path, sentences_path = files(src, tgt)
    glossary = Glossary.read(glossary_path)
    said = sentences(sentences_path)
    missing = [t.source for t in glossary.terms
               if not any(t.source in glossary.found(s) for s in said)]
    if missing:
        raise TermsError(f"{sentences_path}: no sentence says {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    say = reader()
    text_of = {}
    for i, sentence in enumerate(said):
        name = f"term{i:02d}"
        write_wav(out / f"{name}.wav", say(sentence))
        (out / f"{name}.txt").write_text(sentence, encoding="utf-8")
        text_of[name] = sentence
    return glossary, text_of


def score(report: dict, glossary: Glossary, text_of: dict[str, str]) -> dict:
    """Of the glossary terms the sentences say, the shares heard and spoken right."""
    rows_of: dict[str, list[dict]] = {}
    for row in report["utterances"]:
        if row["file"] is not None:
            rows_of.setdefault(row["file"], []).append(row)
    target_of = {t.source: t.target for t in glossary.terms}
    total = heard = said = 0
    misses: list[dict] = []
    for name, sentence in text_of.items():
        rows = rows_of.get(name, [])
        transcript = " ".join(r["text"] or "" for r in rows)
        translation = " ".join(r["translation"] or "" for r in rows if spoken(r))
        got_heard = set(glossary.found(transcript))
        got_spoken = set(glossary.found(translation, "target"))
        for term in glossary.found(sentence):
            total += 1
            ok_heard, ok_spoken = term in got_heard, target_of[term] in got_spoken
            heard += ok_heard
            said += ok_spoken
            if not (ok_heard and ok_spoken):
                misses.append({"term": term, "heard": ok_heard, "spoken": ok_spoken,
                               "transcript": transcript, "translation": translation})
    return {"terms": total, "heard": round(heard / total, 3) if total else None,
            "spoken": round(said / total, 3) if total else None, "misses": misses}


def markdown(terms: dict) -> str:
    """The terms table of a report: without and with the glossary."""
    lines = ["## The words that matter (glossary terms)", "",
             "| run | terms | heard right | spoken right |", "|---|---|---|---|"]
    for run, e in terms.items():
        heard = "-" if e["heard"] is None else f"{100 * e['heard']:.0f} %"
        spoken = "-" if e["spoken"] is None else f"{100 * e['spoken']:.0f} %"
        lines.append(f"| {run} glossary | {e['terms']} | {heard} | {spoken} |")
    for run, e in terms.items():
        for miss in e["misses"][:12]:
            what = "not heard" if not miss["heard"] else "not spoken"
            lines.append(f"- {run}: {miss['term']!r} {what}: {miss['transcript']!r} -> "
                         f"{miss['translation']!r}")
    return "\n".join(lines) + "\n"
