"""TTS engines: text -> speech, clause by clause. The interface and what engines share.

Each engine turns a translated text into speech one clause at a time, so the first clause can be
played while later ones are still being synthesized. One engine per file beside this one
(`kokoro`, `espeak`, `piper`); `actors.engines` registers them by name.

The engines are single-threaded by design (one per process, no locks); onnxruntime thread pools
are sized explicitly because the process shares a small CPU with other model processes.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import itertools
import logging
import math
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from voxweft.actors import budget
from voxweft.actors.engines.resources import Resources
from voxweft.actors.settings.base import Settings, StartupError
from voxweft.actors.settings.manifest import INSTALL
from voxweft.protocol.messages import BUS_RATE

log = logging.getLogger("voxweft.tts")   # the TTS engines' logger
# Characters that end a clause. "…" and runs like "..." or "?!" count as one mark.
CLAUSE_END = ".,;:!?…"
# Closing quotes/brackets that may follow the mark ("Sim," -> 'Sim,"' still ends a clause).
CLOSERS = "\"'”’»)]"
MIN_WORDS = 3   # fewest words in a clause; shorter pieces are merged into a neighbour
SHORT_WORD = 3  # a piece cut by length does not end on a word this short (it leans forward)
MID_CLAUSE_TAIL_S = 0.04   # silence kept after a chunk cut between two words of a clause
_DEFAULT_MAX_CHARS = 200

_ESPEAK_MISSING = f"espeak-ng not found on PATH; install it: {INSTALL[('tts', 'espeak')][0]}"


def split_clauses(text: str, max_chars: int = _DEFAULT_MAX_CHARS) -> list[str]:
    """Split ``text`` into speakable clauses, each at most ``max_chars`` long where possible.

    Splits after sentence/clause punctuation (. , ; : ! ? …) that is followed by a space or the
    end, so "3.5" or "1,5" stay whole; the punctuation stays with its clause. Pieces shorter than
    three words are merged into a neighbour (a one-word clause sounds choppy and costs a model
    call), and clauses longer than ``max_chars`` are cut at spaces into near-equal parts. A single
    word longer than ``max_chars`` is kept whole.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    words = text.split()
    if not words:
        return []

    # 1. Pieces ending at punctuation marks.
    pieces: list[list[str]] = []
    cur: list[str] = []
    for word in words:
        cur.append(word)
        if word.rstrip(CLOSERS)[-1:] in CLAUSE_END:
            pieces.append(cur)
            cur = []
    if cur:
        pieces.append(cur)

    # 2. Hard-split overlong pieces into balanced parts, so no tiny leftover part is produced.
    split: list[list[str]] = []
    for piece in pieces:
        length = len(" ".join(piece))
        if length <= max_chars:
            split.append(piece)
            continue
        target = length / math.ceil(length / max_chars)
        part: list[str] = []
        for word in piece:
            size = len(" ".join([*part, word]))
            if part and (size > max_chars or size > target * 1.1):
                split.append(part)
                part = []
            part.append(word)
        split.append(part)

    # 3. Merge short pieces forward (or, for the last one, backward) while the result fits.
    def fits(a: list[str], b: list[str]) -> bool:
        return len(" ".join(a + b)) <= max_chars

    merged: list[list[str]] = []
    for piece in split:
        if merged and len(merged[-1]) < MIN_WORDS and fits(merged[-1], piece):
            merged[-1] = merged[-1] + piece
        else:
            merged.append(piece)
    if len(merged) > 1 and len(merged[-1]) < MIN_WORDS and fits(merged[-2], merged[-1]):
        merged[-2:] = [merged[-2] + merged[-1]]
    return [" ".join(p) for p in merged]


def _leans(word: str) -> bool:
    """A short word without a mark: an article, a preposition, a conjunction, a pronoun."""
    return len(word) <= SHORT_WORD and word.isalpha()


#: Pieces a Pace learns from (the last ones made).
PACE_PIECES = 24
#: Seconds a paced piece is planned to be ready before the audio before it has played: what
#: making a piece varies by, and the time to send it to the player; more where the pieces
#: made here came later than the pace said (`Pace.margin_s`), at most PACE_MARGIN_MAX_S.
PACE_MARGIN_S = 0.1
PACE_MARGIN_MAX_S = 1.0
#: How late a piece may come, as a share of the pieces: the margin covers all but this.
PACE_LATE_SHARE = 0.05
#: Seconds a paced first piece may take longer to make than the quickest one with no hole
#: after it, for a plan cut better (fewer pieces, cuts at clause marks).
PACE_EASE_S = 0.15
#: What a paced plan counts against itself: each piece (a prefill), a cut inside a clause,
#: and more for one after a word that leans on the next ("de", "the") than a piece more.
PIECE_COST, MID_CLAUSE_COST, LEAN_COST = 1, 2, 4
#: Seconds of first audio a first piece that ends on a word that leans on the next counts
#: as costing more: it ends there only to bring the first audio forward by more.
PACE_LEAN_S = 0.3


@dataclasses.dataclass
class Pace:
    """What making a piece costs, and how long a character speaks.

    For an engine that makes each piece whole before its audio plays (VoxCPM2 on MLX).
    Making `c` characters takes `prefill_s + rate * c * s_per_char` wall seconds (a fixed
    cost per piece, then a cost per second of audio). An engine measures each piece it makes
    (`took`), so its plan (`growing_chunks`) sizes pieces for this machine as it is now.
    """

    prefill_s: float = 0.25
    rate: float = 0.5
    s_per_char: float = 0.065
    pieces: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=PACE_PIECES))
    fitted: bool = False   # prefill and rate both come from the pieces (else guesses)

    def forget(self) -> None:
        """Back to the guesses.

        What was learnt included one-time costs (the first call's voice encoding, compile
        trace, each kernel's first use: see budget.warm_tts).
        """
        fresh = Pace()
        self.prefill_s, self.rate, self.s_per_char = fresh.prefill_s, fresh.rate, \
            fresh.s_per_char
        self.pieces.clear()
        self.fitted = False

    def made(self, chars: int, speed: float = 1.0) -> tuple[float, float]:
        """(seconds making `chars` characters takes, seconds they play at `speed`).

        Catching up (`speed` > 1) the engine makes the speech whole and time-stretches it:
        the making is the same, the playing shorter.
        """
        speech = chars * self.s_per_char
        return self.prefill_s + self.rate * speech, speech / speed

    def margin_s(self) -> float:
        """Seconds a piece is planned to be ready early.

        PACE_MARGIN_S, or how much later than the pace says the pieces made here came, all
        but the latest PACE_LATE_SHARE (another engine sharing the GPU, Whisper decoding,
        delays some by 0.2-0.35 s), once five are known; at most PACE_MARGIN_MAX_S.
        """
        if len(self.pieces) < 5:
            return PACE_MARGIN_S
        late = [wall - self.made(chars)[0] for wall, _, chars in self.pieces]
        return float(np.clip(np.quantile(late, 1 - PACE_LATE_SHARE), PACE_MARGIN_S,
                             PACE_MARGIN_MAX_S))

    def timeline(self, pieces: list[str], speed: float = 1.0) -> tuple[float, list[float]]:
        """(seconds to the first audio, the holes heard inside) of `pieces` at this pace.

        Made one after the other, each played (at `speed`) once made and the one before has
        played.
        """
        made = played = 0.0
        first, holes = None, []
        for piece in pieces:
            making, speech = self.made(len(piece), speed)
            made += making
            if first is None:
                first = made
            elif made > played:
                holes.append(made - played)
            played = max(made, played) + speech
        return first or 0.0, holes

    def took(self, wall_s: float, speech_s: float, chars: int) -> None:
        """A piece of `chars` characters took `wall_s` to make `speech_s` of speech: learn.

        The seconds per character from all the pieces kept; prefill and rate by least squares
        over them once their lengths differ enough, else the rate alone.
        """
        if speech_s <= 0 or chars <= 0 or wall_s <= 0:
            return
        self.pieces.append((wall_s, speech_s, chars))
        walls, speeches, lengths = (np.array(x, float) for x in zip(*self.pieces, strict=True))
        self.s_per_char = float(speeches.sum() / lengths.sum())
        if len(self.pieces) >= 3 and np.std(speeches) > 0.2:
            rate, prefill = np.polyfit(speeches, walls, 1)
            self.rate = float(np.clip(rate, 0.05, 5.0))
            self.prefill_s = float(np.clip(prefill, 0.0, 3.0))
            self.fitted = True
        else:
            self.rate = float(np.clip((walls.sum() - len(walls) * self.prefill_s)
                                      / speeches.sum(), 0.05, 5.0))


def growing_chunks(text: str, first_chars: int, growth: float, max_chars: int,
                   eager: bool = True, pace: Pace | None = None,
                   speed: float = 1.0) -> list[str]:
    """The pieces to synthesize one after the other: a short first piece, then growing ones.

    For an engine whose first audio waits for a whole piece: the first piece ends at its
    first clause mark or at `first_chars` (never before two words, so "Olá," may be all of
    it); each later piece (three words or more, ending at a clause mark where one comes) may
    be `growth` times longer than the one before, up to `max_chars`, so it is ready about when
    the one before has played. A piece cut by length gives its trailing short words ("de",
    "the") to the next one. A tail of fewer than three words joins the piece before it.
    Not `eager`: pieces of up to `max_chars` from the first on.

    With a `pace` (what making a piece costs here), the pieces are planned on the timeline
    instead (`paced_chunks`, played at `speed`); `first_chars` and `growth` do not count.
    """
    if pace is not None:
        return paced_chunks(text, max_chars, pace, eager, speed)
    chunks: list[str] = []
    budget = float(first_chars if eager else max_chars)
    clauses = [c.split() for c in split_clauses(text, max_chars)]
    words: list[str] = []
    while clauses or words:
        if not words:
            words = clauses.pop(0)
        first = eager and not chunks
        least = 2 if first else MIN_WORDS   # fewest words before a cut
        take: list[str] = []
        while True:
            if not words:   # the clause ends: so does the piece
                break
            if len(take) >= least and len(" ".join([*take, words[0]])) > budget:
                # cut by length: not after a short word ("de", "the", "ao"), which
                # mostly leans on the next one; a phrase ends before it
                while len(take) > least and _leans(take[-1]):
                    words.insert(0, take.pop())
                break
            take.append(words.pop(0))
            if take[-1].rstrip(CLOSERS)[-1:] in CLAUSE_END and (first or len(take) >= least):
                break   # a natural break
        if chunks and 0 < len(words) < MIN_WORDS and \
                len(" ".join(take + words)) <= max_chars:
            take, words = take + words, []
        chunks.append(" ".join(take))
        budget = min(max_chars, max(budget, len(chunks[-1])) * growth)
    return chunks


def paced_chunks(text: str, max_chars: int, pace: Pace, eager: bool = True,
                 speed: float = 1.0) -> list[str]:
    """The pieces to synthesize one after the other, planned on `pace`'s timeline.

    Played at `speed` (catching up: > 1, the same making, shorter playing: `Pace.made`);
    where no plan keeps that timeline, the plan for speed 1 (less silence than clauses where
    a piece takes about as long to make as to play at the speed: r 0.75 at 1.4, 26-58 s in
    14 sentences against 35-72 s).

    Every piece is three words or more (a text of fewer than six is one piece), at most
    `max_chars` long (or three words), and made `Pace.margin_s` before the audio before it
    has played. Of the plans that keep that timeline: the earliest first audio (`eager`;
    within `PACE_EASE_S`, a first piece that ends on a word that leans on the next counted
    `PACE_LEAN_S` later), then the fewest pieces, cuts inside a clause and after a leaning
    word ("de", "the"; `PIECE_COST`...). Where the engine cannot keep up (a piece of
    `max_chars` takes longer to make than to play: rate near 1 or above) or no plan keeps
    the timeline: the sentence's clauses (`split_clauses`), as few prefills as natural pieces
    allow, whatever holes they leave.
    """
    words = text.split()
    if len(words) < 2 * MIN_WORDS:
        return [" ".join(words)] if words else []
    margin = pace.margin_s()
    cuts = None
    for played_at in dict.fromkeys((speed, 1.0)):
        making, speech = pace.made(max_chars, played_at)
        if making + margin < speech:
            cuts = _paced_cuts(words, max_chars, pace, eager, margin, played_at)
        if cuts is not None:
            break
    if cuts is None:
        return split_clauses(text, max_chars)
    return [" ".join(words[i:j]) for i, j in itertools.pairwise([0, *cuts])]


def _paced_cuts(words: list[str], max_chars: int, pace: Pace, eager: bool,
                margin: float = PACE_MARGIN_S, speed: float = 1.0) -> list[int] | None:
    """Where `paced_chunks` cuts `words` (the end of each piece); None: every plan has a hole.

    Backwards over the word boundaries: the fewest seconds of speech that must be queued
    when a piece ending at word j is made, for the rest to follow with no hole (`need`).
    Forwards: from each first piece that leaves that much, the plans that keep it, each
    boundary keeping those no other beats on cost, first audio and speech queued, and none
    costing more than one plan found greedily (`bound`).
    """
    n = len(words)
    prefill, rate, s_per_char = pace.prefill_s, pace.rate, pace.s_per_char
    ends = [0]   # characters up to word j and a space: words i..j are ends[j] - ends[i] - 1
    for word in words:
        ends.append(ends[-1] + len(word) + 1)
    marks = [j == n or words[j - 1].rstrip(CLOSERS)[-1:] in CLAUSE_END for j in range(n + 1)]
    # a cut after word j - 1: what it costs; None where it would leave a tail under MIN_WORDS
    costs: list[int | None] = [
        PIECE_COST if marks[j] else None if n - j < MIN_WORDS else
        PIECE_COST + MID_CLAUSE_COST + (LEAN_COST if _leans(words[j - 1]) else 0)
        for j in range(n + 1)]
    # The pieces that may begin at word i: (end, seconds to make, seconds of speech, cost)
    starts: list[list[tuple[int, float, float, int]]] = []
    for i in range(n):
        starts.append([])
        for j in range(i + MIN_WORDS, n + 1):
            chars = ends[j] - ends[i] - 1
            if chars > max_chars and j - i > MIN_WORDS:
                break
            if costs[j] is not None:
                made = chars * s_per_char   # seconds of speech made; played at `speed`
                starts[i].append((j, prefill + rate * made, made / speed, costs[j]))
    need = [math.inf] * (n + 1)
    need[n] = 0.0
    for i in range(n - MIN_WORDS, 0, -1):
        need[i] = min((max(wait + margin, need[j] + wait - speech)
                       for j, wait, speech, _ in starts[i]), default=math.inf)
    eps = 1e-9   # `need` and the plans add the same seconds in another order
    firsts = [(wait + (PACE_LEAN_S if cost > PIECE_COST + MID_CLAUSE_COST else 0.0),
               j, speech, cost) for j, wait, speech, cost in starts[0] if speech + eps >= need[j]]
    if not firsts:
        return None
    soonest = min(first[0] for first in firsts)
    # The least cost from word i to the end, whatever the time (`least`), and the cost of
    # one plan that keeps the timeline (`bound`: each piece the one of least cost to the end
    # that leaves enough queued): no plan costing more than `bound` is followed.
    least = [0.0] * (n + 1)
    for i in range(n - MIN_WORDS, 0, -1):
        least[i] = min((cost + least[j] for j, _, _, cost in starts[i]), default=math.inf)
    _, i, queued, bound = min(first for first in firsts if first[0] == soonest)
    while i < n:
        step = min(((cost + least[j], wait - speech, j, cost)
                    for j, wait, speech, cost in starts[i] if wait + margin <= queued + eps
                    and queued - wait + speech + eps >= need[j]), default=None)
        if step is None:   # lost to rounding: follow every plan
            bound = math.inf
            break
        _, spent, i, cost = step
        queued, bound = queued - spent, bound + cost
    # The plans so far that end at word j: (cost, first audio s (+ PACE_LEAN_S)) -> (speech
    # queued s, the plan before: its end and key), the most queued of each.
    plans: list[dict[tuple[int, float], tuple[float, int, tuple | None]]] = \
        [{} for _ in range(n + 1)]
    for first, j, speech, cost in firsts:
        if eager and first > soonest + PACE_EASE_S:
            continue
        key = (cost, first if eager else 0.0)
        if speech > plans[j].get(key, (-1.0,))[0]:
            plans[j][key] = (speech, 0, None)
    for i in range(1, n):
        kept: list[tuple[int, float, float]] = []   # those no other beats
        for key in sorted(plans[i]):
            queued = plans[i][key][0]
            if any(first <= key[1] and more >= queued for _, first, more in kept):
                continue
            kept.append((*key, queued))
            room = queued - margin + eps
            for j, wait, speech, cost in starts[i]:
                if wait > room:
                    break
                left = queued - wait + speech
                if left + eps >= need[j] and key[0] + cost + least[j] <= bound:
                    at = plans[j]
                    nkey = (key[0] + cost, key[1])
                    if left > at.get(nkey, (-1.0,))[0]:
                        at[nkey] = (left, i, key)
    if not plans[n]:
        return None
    key = min(plans[n])
    cuts, j = [], n
    while key is not None:
        cuts.append(j)
        _, i, before = plans[j][key]
        j, key = i, before
    return cuts[::-1]


def trim(audio: np.ndarray, sample_rate: int, lead_s: float = 0.03, tail_s: float = 0.12,
         threshold: float = 0.01) -> np.ndarray:
    """Cut near-silence at both ends, keeping a short lead-in and a tail.

    The tail is kept longer so consecutive clauses, played back to back, still have a pause.
    """
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if loud.size == 0:
        return audio[:0]
    start = max(0, loud[0] - int(lead_s * sample_rate))
    end = min(audio.size, loud[-1] + 1 + int(tail_s * sample_rate))
    return audio[start:end]


def cpu_has_vnni() -> bool | None:
    """Whether this x86 CPU has VNNI int8 instructions; None when unknown or not x86."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return None
    return bool({"avx512_vnni", "avx_vnni"} & set(flags)) if flags else None


def release_freed_memory() -> None:
    """Give memory freed while building a model back to the OS.

    glibc keeps it otherwise: ~700 MB after the float32 conversion.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    except OSError:
        pass


def espeak_path() -> str:
    """Return the espeak-ng executable, or raise StartupError explaining how to install it."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise StartupError(_ESPEAK_MISSING)
    return path


def run_espeak(args: list[str], text: str) -> bytes:
    """Run espeak-ng with ``text`` on stdin (so text starting with '-' is not read as an option)."""
    proc = subprocess.run(args, input=text.encode("utf-8"), capture_output=True, check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"espeak-ng failed ({proc.returncode}): {err}")
    return proc.stdout


@dataclasses.dataclass(frozen=True)
class Reference:
    """A voice to speak in: someone's speech, and its exact words when they are known."""

    key: str                  # names this audio: engines keep what they derive from it by key
    pcm: np.ndarray           # float32 mono
    sample_rate: int
    text: str = ""            # the words spoken in `pcm`; "" when unknown

    @property
    def duration_s(self) -> float:
        """Length of the speech in seconds."""
        return len(self.pcm) / self.sample_rate


@dataclasses.dataclass(frozen=True)
class Spoken:
    """Audio of one piece of a synthesis plan (`TtsEngine.plan`), or a part of it."""

    piece: int                # the piece's index in the plan
    pcm: np.ndarray           # float32 mono in [-1, 1] at the engine's sample_rate
    ends: bool = True         # the piece's last part (engines that stream within a piece)


class Timed(Iterator):
    """An iterator that counts the seconds spent making its items, and the items.

    Not the time its consumer spends between them: a draft's rest waits for its final.
    """

    def __init__(self, items: Iterable) -> None:
        self.items = iter(items)
        self.spent_s = 0.0
        self.count = 0

    def __next__(self):
        start = time.monotonic()
        try:
            item = next(self.items)
        finally:
            self.spent_s += time.monotonic() - start
        self.count += 1
        return item


def word_spans(pieces: list[str], first: int = 0) -> list[tuple[int, int]]:
    """The words of the text each piece speaks: [start, end) word indices, from `first`.

    The plans cut a text at spaces and join its words again, so piece i is words
    start..end of `text.split()`.
    """
    spans, at = [], first
    for piece in pieces:
        n = len(piece.split())
        spans.append((at, at + n))
        at += n
    return spans


#: Seconds of the bundled sample a voice that speaks as the speaker does is measured with.
WARMUP_VOICE_S = 8.0


def warmup_voice(engine) -> Reference | None:
    """The reference to warm up and measure `engine` with; None if it needs none.

    The bundled sample's speech, for an engine that speaks in the speaker's voice: what it
    will do when it runs.
    """
    if not engine.wants_voice():
        return None
    audio, _text = budget.sample_speech()
    return Reference(key="warm-up", pcm=audio[:int(WARMUP_VOICE_S * BUS_RATE)],
                     sample_rate=BUS_RATE)


class TtsEngine(Resources, abc.ABC):
    """Text -> streamed speech for one process; built once by load()."""

    name: ClassVar[str]
    sample_rate: int
    #: Resident memory once loaded (MB; measured RSS of its actor on Linux, see Resources).
    MEMORY_MB: ClassVar[int] = 450
    #: It speaks faster only by time-stretching what it made at speed 1.0 (no rate knob):
    #: speaking faster saves it no synthesis (the budget's verdict gives it no credit).
    STRETCHES: ClassVar[bool] = False

    class Settings(Settings):
        """Every engine takes the actor's thread budget."""

        threads: int = Field(1, ge=1, le=64)

    def __init__(self, **settings: Any) -> None:
        """Validate settings; an unknown or invalid key raises ValueError naming it."""
        self.settings = self.Settings.check(settings)

    @abc.abstractmethod
    def languages(self) -> frozenset[str]:
        """ISO-639-1 codes this engine can speak."""

    def plan(self, text: str, eager: bool = True, speed: float = 1.0) -> list[str]:
        """The pieces of `text` synthesize() yields one audio chunk for, in order.

        Spoken at `speed`: an engine whose pieces are paced plans them for it.
        """
        return split_clauses(text)

    @abc.abstractmethod
    def load(self) -> None:
        """Build the model once; all heavy work happens here, never in __init__."""

    def wants_voice(self) -> bool:
        """Whether it speaks in the speaker's voice: then tts hears the source speech (Voice)."""
        return False

    @classmethod
    def process_env(cls) -> dict[str, str]:
        """Environment the actor process must start with (e.g. a preload); {} by default."""
        return {}

    def synthesize(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
                   voice: Reference | None = None) -> Iterator[np.ndarray]:
        """Yield float32 mono audio in [-1, 1] at ``sample_rate``, clause by clause.

        The audio of `speak()`, without saying which piece each array speaks.
        """
        return (spoken.pcm for spoken in self.speak(text, lang, speed, eager, voice))

    @abc.abstractmethod
    def speak(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
              voice: Reference | None = None) -> Iterator[Spoken]:
        """Yield the audio of each piece of ``plan(text, eager)`` as soon as it is ready.

        Each `Spoken` names its piece; a piece comes in one part or several (an engine that
        streams within a piece), the last marked `ends`; a piece whose audio is empty yields
        nothing. Unsupported ``lang`` raises ValueError at the call; empty or whitespace-only
        text yields nothing. ``speed`` multiplies the configured speaking rate (the tts actor
        speeds up to catch up with a backlog). ``eager``: a short first chunk, for the first
        audio's latency; False when that audio would wait at the player anyway (engines whose
        cost per second of speech is lower in long chunks then make long ones). ``voice``:
        the speaker's recent speech, for an engine whose `wants_voice()` is true; others
        ignore it.
        """

    def _check_lang(self, lang: str) -> None:
        if lang not in self.languages():
            raise ValueError(
                f"{self.name}: language {lang!r} not supported; use one of "
                f"{sorted(self.languages())}"
            )

    def _ready(self, lang: str, loaded: object, call: str = "synthesize") -> None:
        """Refuse a language it does not speak, and a `call` before load() (`loaded` is None).

        What every engine checks first when asked to speak: one copy, one wording.
        """
        self._check_lang(lang)
        if loaded is None:
            raise RuntimeError(f"{type(self).__name__}.load() must be called before {call}()")
