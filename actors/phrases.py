"""A sentence interpreted in pieces: each piece's translation goes on from what was said.

asr commits the words of a sentence in pieces, before the speaker's pause (see
`actors.asr`). Translated alone, a piece loses what the words around it say: "em
passagem" for "in passing" without "mentioning" before it, "no mesmo" for "in the same"
before "operations" (chrF 80 against the sentence-level translation, offline on 18 clips).
So mt translates the **sentence so far**, its pieces' source joined, and says only what
goes on from the translation already said: the words of the new translation after the
last of the said words it contains (aligned word by word, case and punctuation aside).
What was said is never taken back; a word the new translation puts among the said ones
goes first. When the new translation keeps too little of what was said to place the rest
(less than half of the said words), the piece's own translation is said.

A piece joins the sentence when it starts where the last one ended (a cut or a forced
split: the same speech going on) and the last did not end a sentence.

**Held words.** A translation's last words are the ones the next piece most often changes
("em passagem que tem um" before "example of fine typography"). When the speech goes on in
the next piece (the segmenter says so: `goes_on`) and the sentence with it, mt says all but
the last `hold_words` of a piece's new words; they are not "said", so the next piece's
translation says them, as the whole sentence puts them (chrF against the sentence-level
translation 90.2 -> 94.7 with one word held, offline on the continuous bench). A piece
whose source ends a clause (",;:") holds nothing: the words there are settled. Held words
are never lost: a next piece that does not join says them first.

**Restarts.** asr sends with each piece its sentence's earlier source pieces (`context`,
by the same rule); a restarted mt, which remembers nothing, translates them again to know
what was said (`MtActor._context`), and a restarted asr, which sends no context, leaves mt
its own memory.
"""

from __future__ import annotations

import difflib
import re

#: The sentence so far is translated whole while it has at most this many source words (a
#: translation model's input is bounded; a sentence this long starts afresh).
MAX_SENTENCE_WORDS = 60
#: A piece starting this close after the end of the last one (s) goes on from it.
JOIN_S = 0.01
SENTENCE_ENDS = ".?!"
#: A piece whose source ends with one of these holds no word back (a clause ends there).
CLAUSE_ENDS = ",;:"
_CLOSERS = "\"')»”"


def _key(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


def continuation(said: list[str], full: str) -> str | None:
    """The words of `full` (a translation of the sentence so far) after those already `said`.

    A word `full` puts among the said ones where nothing was said ("os antecessores
    imediatos" where "os imediatos" was said) goes first: else it would be lost. None when
    `full` keeps less than half of the said words in order (it cannot be placed).
    """
    words = full.split()
    if not said:
        return full
    match = difflib.SequenceMatcher(a=[_key(w) for w in said], b=[_key(w) for w in words],
                                    autojunk=False)
    blocks = [m for m in match.get_matching_blocks() if m.size]
    if sum(m.size for m in blocks) * 2 < len(said):
        return None
    inserted = [w for m, n in zip(blocks, blocks[1:], strict=False) if n.a == m.a + m.size
                for w in words[m.b + m.size:n.b]]
    return " ".join(inserted + words[blocks[-1].b + blocks[-1].size:])


def _last_mark(text: str) -> str:
    return text.rstrip().rstrip(_CLOSERS)[-1:]


def ends_sentence(text: str) -> bool:
    """Whether `text` ends a sentence (Whisper puts a full stop where the speaker did)."""
    return _last_mark(text) in SENTENCE_ENDS


def split_held(words: str, hold: int) -> tuple[str, list[str]]:
    """(what is said, the words held back): the last `hold` of `words`, never all of them."""
    split = words.split()
    n = min(hold, len(split) - 1)
    if n <= 0:
        return words, []
    return " ".join(split[:-n]), split[-n:]


class Sentence:
    """The open sentence of a stream of pieces: their source, and the translation said."""

    def __init__(self) -> None:
        self.end_s: float | None = None    # media time the last piece ended
        self.sources: list[str] = []
        self.said: list[str] = []
        self.held: list[str] = []          # the last piece's words not said yet

    @classmethod
    def open(cls, end_s: float, sources: list[str], said: list[str],
             held: list[str]) -> Sentence:
        """A sentence whose last piece ended at `end_s` (none open when no `sources`)."""
        sentence = cls()
        sentence.end_s = end_s if sources else None
        sentence.sources, sentence.said, sentence.held = list(sources), list(said), list(held)
        return sentence

    def goes_on_after(self, media_start_s: float, media_end_s: float, source: str,
                      translation: str = "x") -> bool:
        """Whether the sentence goes on after this piece (if one joins it), or ends with it."""
        sources, _said = self.before(media_start_s)
        return bool(translation) and not ends_sentence(source) and \
            media_end_s > media_start_s and \
            sum(len(s.split()) for s in [*sources, source]) <= MAX_SENTENCE_WORDS

    def holds(self, media_start_s: float, media_end_s: float, source: str,
              goes_on: bool) -> bool:
        """Whether a piece may hold its last words back: the speech and its sentence go on."""
        return goes_on and _last_mark(source) not in CLAUSE_ENDS and \
            self.goes_on_after(media_start_s, media_end_s, source)

    def before(self, media_start_s: float) -> tuple[list[str], list[str]]:
        """(source pieces, said words) a piece starting at `media_start_s` goes on from."""
        if self.end_s is None or not 0 <= media_start_s - self.end_s <= JOIN_S:
            return [], []
        return self.sources, self.said

    def add(self, media_start_s: float, media_end_s: float, source: str,
            translation: str, held: list[str] | None = None) -> None:
        """A piece was translated (final): the sentence goes on with it, or ends.

        `translation`: what was said of it; `held`: its words not said yet.
        """
        goes_on = self.goes_on_after(media_start_s, media_end_s, source, translation)
        sources, said = self.before(media_start_s)
        sources, said = [*sources, source], [*said, *translation.split()]
        self.held = list(held or [])
        if not goes_on:
            self.end_s, self.sources, self.said = None, [], []
            return
        self.end_s, self.sources, self.said = media_end_s, sources, said
