"""A glossary: names and terms, and how they are said in the target language.

The file (UTF-8, one entry per line, `#` starts a comment)::

    # names are kept as they are
    Wojciech Zaremba
    Voxweft
    # a term and its translation
    machine translation = tradução automática

Three uses, one per stage that can get a term wrong:

* :meth:`Glossary.prompt`: the terms as Whisper's previous text (its "initial prompt"), so
  it expects them and spells them so;
* :meth:`Glossary.spell`: a transcript's near-misses of a term ("Voxwheft", "Zaremba's" is
  left alone) take the term's spelling, and a translation's near-misses of a translation
  take its spelling;
* :meth:`Glossary.protect`: before MT, a term in the text is replaced by its translation (a
  name by itself), which MT models mostly copy through, fitting the words around it; where
  MT changed it, :meth:`Glossary.hold` puts placeholders in its place instead, which MT keeps
  as it keeps names, and :meth:`Glossary.release` puts the translations back (the mt actor
  checks each with :meth:`Glossary.missing`).

Pure text: no model, no file but the glossary's own.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

#: At most this many entries (Whisper's prompt holds ~220 tokens; MT gets every term).
MAX_TERMS = 200
#: A near-miss of a term is at least this similar to it (difflib ratio, letters only) ...
NEAR = 0.84
#: ... and only terms this long (letters) are matched loosely; shorter ones exactly.
LOOSE_FROM = 5
#: The term with one of these endings is the term inflected ("translations"), not misheard.
ENDINGS = ("s", "es")
#: What stands for a term in MT's input when its translation itself is not copied through.
PLACEHOLDER = "Zxq"
_WORD = re.compile(r"\w+(?:-\w+)*", re.UNICODE)   # "Zaremba's": "Zaremba", "s"


#: A glossary is a list of terms: read no more than this (a few thousand terms fit in 64 KiB).
MAX_BYTES = 1024 * 1024
#: A term (or its translation) is a name or a phrase: at most this many words and characters.
#: (Spelling looks at every run of up to a term's words + 1 at every word of a transcript: a
#: 1000-word "term" cost 5 s of CPU per decode.)
MAX_TERM_WORDS = 8
MAX_TERM_CHARS = 80

class GlossaryError(ValueError):
    """A glossary file that cannot be used; the message names the line."""


def _key(text: str) -> str:
    """Letters and digits only, lower case, without accents: how terms compare."""
    return "".join(c for c in unicodedata.normalize("NFKD", text).lower()
                   if c.isalnum() and not unicodedata.combining(c))


@dataclass(frozen=True)
class Term:
    """One entry: `source` as said; `target` as it is to be said in the target language."""

    source: str
    target: str

    @property
    def name(self) -> bool:
        """A name: kept as it is (no translation given)."""
        return self.source == self.target


class Glossary:
    """The entries of a glossary file, and what each stage does with them."""

    def __init__(self, terms: list[Term] | tuple[Term, ...]) -> None:
        """`terms` in the file's order (kept for the prompt); matched longest first."""
        self.entries = tuple(terms)
        self.terms = tuple(sorted(terms, key=lambda t: -len(t.source)))

    @classmethod
    def read(cls, path: str | Path) -> Glossary:
        """Parse the file at `path`; GlossaryError with the line at fault."""
        path = Path(path)
        try:
            if path.exists() and not path.is_file():   # a fifo or /dev/zero: read for ever
                raise GlossaryError(f"glossary {path}: not a file; give a text file of "
                                    "terms, one per line")
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(0)
                data = f.read(MAX_BYTES + 1)
            if data and not size:   # /proc/self/environ: the environment as "terms"
                raise GlossaryError(f"glossary {path}: not a file on disk (a file of the "
                                    "system's, made as it is read); give a text file of terms")
            if len(data) > MAX_BYTES:
                raise GlossaryError(f"glossary {path}: over {MAX_BYTES // 1024} KiB; a "
                                    "glossary is a text file of terms, one per line")
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise GlossaryError(f"glossary {path}: cannot read it ({exc})") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, where: str = "glossary") -> Glossary:
        """Parse a glossary's text; `where` names it in errors."""
        terms: dict[str, Term] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            source, _, target = (part.strip() for part in line.partition("="))
            target = target or source
            if not _key(source) or not _key(target):
                raise GlossaryError(f"{where}:{number}: {line!r} has no term: write "
                                    "'Name' or 'term = translation'")
            for part in (source, target):
                if len(part) > MAX_TERM_CHARS or len(_WORD.findall(part)) > MAX_TERM_WORDS:
                    raise GlossaryError(f"{where}:{number}: {part[:40]!r}... is no term: at "
                                        f"most {MAX_TERM_WORDS} words, {MAX_TERM_CHARS} "
                                        "characters")
            if _key(source) in terms:
                raise GlossaryError(f"{where}:{number}: {source!r} is there twice")
            terms[_key(source)] = Term(source, target)
        if len(terms) > MAX_TERMS:
            raise GlossaryError(f"{where}: {len(terms)} entries; at most {MAX_TERMS}")
        return cls(list(terms.values()))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def prompt(self) -> str:
        """Whisper's previous text: the terms as a list, in the file's order."""
        return ", ".join(t.source for t in self.entries) + "." if self.entries else ""

    def spell(self, text: str, side: str = "source") -> str:
        """`text` with every near-miss of a term (of `side`: source or target) spelled right."""
        for term in self.terms:
            text = _respell(text, term.source if side == "source" else term.target)
        return text

    def protect(self, text: str) -> str:
        """Before MT: each term in `text` replaced by its translation (a name by itself)."""
        for term in self.terms:
            if not term.name:
                text = _replace(text, term.source, term.target)
        return text

    def hold(self, text: str) -> tuple[str, list[str]]:
        """Before MT, the other way: each term replaced by a placeholder ("Zxq1").

        MT copies a placeholder through as it does a name; `release` puts the translations
        in their place.
        """
        slots: list[str] = []

        def slot(term: Term) -> str:
            slots.append(term.target)
            return f"{PLACEHOLDER}{len(slots)}"

        for term in self.terms:
            if not term.name:
                text = _replace(text, term.source, lambda _m, t=term: slot(t))
        return text, slots

    def release(self, text: str, slots: list[str]) -> str:
        """MT's output of a `hold`'s text with the translations in the placeholders' place."""
        def back(m: re.Match) -> str:
            n = int(m.group(1))
            return slots[n - 1] if 1 <= n <= len(slots) else m.group(0)

        return re.sub(rf"{PLACEHOLDER}(\d+)", back, text, flags=re.IGNORECASE)

    def missing(self, text: str, translated: str) -> list[str]:
        """The translations of the terms `text` says that `translated` does not say."""
        said = set(self.found(translated, "target"))
        return [t.target for t in self.entries
                if _phrase_in(t.source, text) and t.target not in said]

    def found(self, text: str, side: str = "source") -> list[str]:
        """The terms (of `side`) that `text` says, word for word, in the file's order."""
        said = (t.source if side == "source" else t.target for t in self.entries)
        return [term for term in said if _phrase_in(term, text)]


def _spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _WORD.finditer(text)]


def _phrase_in(phrase: str, text: str) -> bool:
    want = [_key(w) for w in _WORD.findall(phrase)]
    have = [_key(w) for w in _WORD.findall(text)]
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def _replace(text: str, term: str, by) -> str:
    """Every whole-word occurrence of `term` (any case) replaced by `by` (text or function)."""
    pattern = r"(?<!\w)" + r"\W+".join(re.escape(w) for w in _WORD.findall(term)) + r"(?!\w)"
    return re.sub(pattern, by if callable(by) else (lambda _m: by), text, flags=re.IGNORECASE)


def _respell(text: str, term: str) -> str:
    """Runs of 1..n+1 words of `text` that are `term` misheard take `term`'s spelling.

    A run matches when its letters equal the term's (case, spaces, hyphens: "vox weft"), or,
    for terms of LOOSE_FROM letters and more, start with the same letter and are NEAR it.
    The term with an ending is left as it is ("translations", "Zaremba's").
    """
    want = _key(term)
    if not want:
        return text
    n = len(_WORD.findall(term))
    spans = _spans(text)

    def runs(i: int):
        for size in range(1, min(n + 2, len(spans) - i) + 1):   # "c translate 2"
            start, end = spans[i][0], spans[i + size - 1][1]
            if not re.search(r"[.!?;:,'’]", text[start:end]):   # within a phrase, no "'s"
                yield start, end, size, _key(text[start:end])

    def near(have: str) -> bool:
        # not the term with an ending ("translations"): that is the term, inflected
        return (len(want) >= LOOSE_FROM and
                not (have.startswith(want) and have[len(want):] in ENDINGS) and
                have[:1] == want[:1] and
                abs(len(have) - len(want)) <= 2 and
                difflib.SequenceMatcher(None, have, want).ratio() >= NEAR)

    out, last, i = [], 0, 0
    while i < len(spans):
        candidates = list(runs(i))
        best = next((c for c in candidates if c[3] == want), None) or \
            next((c for c in candidates if near(c[3])), None)
        if best is None:
            i += 1
            continue
        start, end, size, _ = best
        out += [text[last:start], term]
        last, i = end, i + size
    return "".join(out) + text[last:]
