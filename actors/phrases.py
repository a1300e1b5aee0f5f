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
split: the same speech going on) and the last did not end a sentence. A restarted mt has
no sentence open: its first piece is translated alone.
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


def ends_sentence(text: str) -> bool:
    """Whether `text` ends a sentence (Whisper puts a full stop where the speaker did)."""
    return text.rstrip().rstrip(_CLOSERS)[-1:] in SENTENCE_ENDS


class Sentence:
    """The open sentence of a stream of pieces: their source, and the translation said."""

    def __init__(self) -> None:
        self.end_s: float | None = None    # media time the last piece ended
        self.sources: list[str] = []
        self.said: list[str] = []

    def before(self, media_start_s: float) -> tuple[list[str], list[str]]:
        """(source pieces, said words) a piece starting at `media_start_s` goes on from."""
        if self.end_s is None or not 0 <= media_start_s - self.end_s <= JOIN_S:
            return [], []
        return self.sources, self.said

    def add(self, media_start_s: float, media_end_s: float, source: str,
            translation: str) -> None:
        """A piece was translated (final): the sentence goes on with it, or ends."""
        sources, said = self.before(media_start_s)
        sources, said = [*sources, source], [*said, *translation.split()]
        if not translation or ends_sentence(source) or media_end_s <= media_start_s or \
                sum(len(s.split()) for s in sources) > MAX_SENTENCE_WORDS:
            self.end_s, self.sources, self.said = None, [], []
            return
        self.end_s, self.sources, self.said = media_end_s, sources, said
