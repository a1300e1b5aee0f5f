"""asr: speech segments in, source-language transcripts out (one Whisper model per process)."""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from voxweft.actors import budget
from voxweft.actors.actor import EngineActor
from voxweft.actors.drafts import Drafts
from voxweft.actors.loudness import levelled
from voxweft.actors.phrases import Sentence
from voxweft.protocol.messages import (
    BUS_RATE,
    Cut,
    Done,
    Message,
    Segment,
    Status,
    Transcript,
    is_draft,
    now_ns,
    trace_ns,
    traced,
)

log = logging.getLogger("voxweft.asr")
#: A committed prefix ends with one of these in the later of the two drafts, or with one
#: of EARLIER_MARKS in the earlier one (Whisper ends any text with a period where the audio
#: stops, but puts a comma there only when it hears a clause going on)...
CLAUSE_MARKS = ",;:.?!"
EARLIER_MARKS = ",;:"   # not "?" or "!": Whisper put one on "Which were the immediate?"
#: ...and has at least this many words: a clause, not a hesitation.
MIN_PREFIX_WORDS = 3
_CLOSERS = "\"')»”"


def _letters(text: str) -> str:
    """`text` lower-cased, without punctuation or spaces: how drafts' words are compared."""
    return re.sub(r"[^\w']", "", text.lower())


def agreed_prefix(earlier: str, later: str) -> bool:
    """Whether `later` (a longer draft) agrees with `earlier` on all its words, at a clause end.

    Two drafts of a growing utterance, the second with more audio: when the second starts
    with the very words of the first (case, punctuation and word splits aside: "blockbooks"
    is "block books") and a clause ends after them (a clause mark there in the second, or a
    comma-like mark ending the first), both hypotheses agree on what the audio up to the
    first one's pause says, and that pause ends a clause. Then that part can be committed.
    """
    a, b = earlier.split(), later.split()
    if len(a) < MIN_PREFIX_WORDS or len(b) <= len(a):
        return False

    target = _letters("".join(a))
    for j in range(1, len(b)):   # the shortest run of `later`'s words spelling the same
        run = _letters("".join(b[:j]))
        if len(run) >= len(target):
            if run != target:
                return False
            return b[j - 1].rstrip(_CLOSERS)[-1:] in CLAUSE_MARKS or \
                a[-1].rstrip(_CLOSERS)[-1:] in EARLIER_MARKS
    return False



#: LocalAgreement: words two successive drafts agree on are committed when there are at
#: least this many (fewer make pieces too small for MT).
MIN_AGREED_WORDS = 4
#: A grown draft older than this when asr gets to it is skipped (asr is behind: a
#: commit from it would come late, and its decode would put asr further behind).
STALE_DRAFT_S = 0.5
#: A piece of at most this much speech is decoded again with the piece that joins it (its
#: words said first: Whisper's prefix), so the words at the join are neither lost nor said
#: twice; a longer one is not (the next decodes would cost more than they save).
MAX_CONTEXT_S = 6.0


class Before(NamedTuple):
    """The last piece asr committed: what the next one, if it joins it, is decoded after."""

    stream: str
    lang: str
    end_s: float          # media time where it ended: a piece starting here joins it
    pcm: np.ndarray       # its speech (16 kHz float32, as it came)
    text: str             # its words


def agreed_words(earlier: list[str], later: list[str]) -> int:
    """LocalAgreement-2: how many words of `later` to commit, given the draft before it.

    The words both start with (case and punctuation aside), never the last of `later` (the
    audio may end inside it); then `committable`.
    """
    n = 0
    for a, b in zip(earlier, later[:-1], strict=False):
        if _letters(a) != _letters(b) or not _letters(b):
            break
        n += 1
    return committable(later, n)


def settled_words(words: list[tuple[str, float, float]], heard_s: float, settle_s: float) -> int:
    """How many words of a draft to commit without a second draft: those that settled.

    The leading words (never the last) that Whisper's alignment ends at least `settle_s`
    before the end of the audio it heard (`heard_s`): the audio after them is what a later
    draft would hear more of, and a word that far back seldom changes (38 clips of 12
    readers, offline, 1 s drafts: settled 0.5 s, 1.43 s per-word lag and WER 7.2 %, against
    2.31 s and 7.4 % waiting for two drafts to agree); then `committable`.
    """
    n = 0
    for _w, _start, end in words[:-1]:
        if end > heard_s - settle_s:
            break
        n += 1
    return committable([w for w, _s, _e in words], n)


def committable(words: list[str], n: int) -> int:
    """Of the first `n` of `words`, how many to commit: 0 when fewer than MIN_AGREED_WORDS.

    When a clause ends among them, only up to that clause's end (MT translates a clause
    better than a clause and a half).
    """
    clause = max((i + 1 for i in range(MIN_AGREED_WORDS - 1, n)
                  if words[i].rstrip(_CLOSERS)[-1:] in CLAUSE_MARKS), default=n)
    return clause if clause >= MIN_AGREED_WORDS else 0


class AsrActor(EngineActor):
    """Pulls Segments from the segmenter's queue and publishes final Transcripts."""

    name = "asr"
    downstream = "mt"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.glossary = topology.glossary   # names and terms: expected, and spelled so
        # (segmenter epoch, media start, end) of the segments taken from each stream.
        self.taken: collections.deque[tuple[int, float, float]] = collections.deque(maxlen=256)
        # Transcripts of drafts (speculative endpointing), by the speech they were made from.
        self.drafts = Drafts(self.counters)
        # Seconds spent decoding, and seconds of audio decoded (`_count_decode`).
        self.engine_s = self.decoded_s = 0.0
        # The last draft at a pause of each open utterance: (its speech, text, segment), to
        # find the words a later draft agrees on (simultaneous commits, see `agreed_prefix`).
        self.pauses: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        self.cuts = topology.commits.at_pauses
        # LocalAgreement: the words of each open utterance's last draft, by its start.
        # (Only with an engine that times words as it goes.)
        self.agree = topology.commits.by_agreement and self.engine.times_words()
        self.hypotheses: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        # Words this far behind a draft's end are committed without waiting for agreement.
        self.settle_s = config.settle_ms / 1000
        self.cut_short: collections.deque[str] = collections.deque(maxlen=16)  # by agreement
        # The last piece committed: a piece that starts where it ended (a cut, a forced
        # split) is decoded with it (see `_joined`).
        self.before: Before | None = None
        # The open sentence's committed pieces: sent with each piece (Transcript.context),
        # so that a restarted mt knows what it goes on (actors.phrases).
        self.sentence = Sentence()
        # A grown draft's age is read on one clock only (the segmenter's host is ours).
        self.same_clock = topology.same_host("segmenter", self.name)

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """The segmenter's heartbeat: segments come over PULL, this proves we hear it."""
        return [("segmenter", Status)]

    def _retold(self, msg: Segment) -> bool:
        """The same speech from a restarted segmenter (it resumes from our last heartbeat)."""
        for epoch, start, end in self.taken:
            overlap = min(end, msg.media_end_s) - max(start, msg.media_start_s)
            shorter = min(end - start, msg.media_end_s - msg.media_start_s)
            if epoch != msg.epoch and shorter > 0 and overlap > shorter / 2:
                return True
        return False

    def load(self) -> None:
        """Build the model; tell it the glossary's terms."""
        self.engine.load()
        if self.glossary:
            self.engine.prompt = self.glossary.prompt()

    def warmup(self) -> None:
        """One decode of quiet noise (lazy setup), then the budget: 12 s of known speech."""
        self.budget = budget.warm_asr(self.engine, self.config.src_lang)

    def _worth_checking(self, utt: str) -> bool:
        """Whether a grown utterance can confirm its last pause as a clause end.

        Only when the draft at that pause ends with a comma-like mark: Whisper ends any
        text with a period where the audio stops, and left the comma out of most grown
        drafts (70 rechecks of every pause cost 13 s of asr in 4 minutes for 3 cuts).
        """
        earlier = self.pauses.get(utt)
        return self.cuts and earlier is not None and \
            earlier[1].rstrip(_CLOSERS)[-1:] in EARLIER_MARKS

    def _cut(self, msg: Segment, speech: tuple, text: str) -> Cut | None:
        """A Cut when this draft agrees with the utterance's last draft at a pause.

        This draft (at a later pause, or grown since) heard more than the one at the pause:
        when it starts with that one's words and puts a clause mark after them, the
        utterance can be committed at that pause.
        """
        earlier = self.pauses.get(msg.utt)
        if not msg.growing:   # a pause: the next drafts are checked against this one
            self.pauses.pop(msg.utt, None)
            self.pauses[msg.utt] = (speech, text, msg)
            while len(self.pauses) > 8:
                self.pauses.popitem(last=False)
        if not self.cuts or earlier is None:
            return None
        (stream, start, speech_end, lang), before, seg = earlier
        if (stream, start, lang) != (speech[0], speech[1], speech[3]) or \
                not agreed_prefix(before, text):
            return None
        self.pauses.pop(msg.utt, None)
        self.counters["cuts_proposed"] += 1
        self.log.info("asr: %s agreed up to %.2f s: %r", msg.utt, seg.media_end_s, before)
        return Cut(utt=msg.utt, stream=stream, media_start_s=start,
                   media_end_s=seg.media_end_s, speech_end_s=speech_end, text=before)

    def handle(self, msg: Message) -> Iterator[Message]:
        """Transcribe one segment in the language the message names.

        A draft's transcript is published as a draft and kept; the final segment of the
        same utterance uses it when its speech ends at the same sample (the speaker did not
        go on: the audio differs at most by trailing silence), instead of transcribing again.
        """
        if not isinstance(msg, Segment):
            return
        if msg.stream != self.stream:
            self.stream, self.media_ms = msg.stream, 0
            self.taken.clear()
            self.sentence = Sentence()
        if is_draft(msg):
            if msg.growing and not (self.agree or self._worth_checking(msg.utt)):
                self.counters["rechecks_skipped"] += 1
                return
            if msg.growing and self._stale(msg):
                self.counters["grown_stale"] += 1
                return
            if msg.growing and msg.utt in self.cut_short:   # sent before our cut arrived
                self.counters["grown_after_cut"] += 1
                return
            yield from self._transcribe(msg)
            return
        if self._retold(msg):
            self.counters["duplicates"] += 1
            self.log.info("asr: %s repeats speech already taken (%.2f-%.2f s); dropped",
                          msg.utt, msg.media_start_s, msg.media_end_s)
            yield Done(utt=msg.utt, complete=False)   # the segmenter may forget it
            return
        self.taken.append((msg.epoch, msg.media_start_s, msg.media_end_s))
        self.media_ms = max(self.media_ms, int(msg.media_end_s * 1000))
        yield from self._transcribe(msg)

    def _stale(self, msg: Segment) -> bool:
        """A grown draft asr got to too late to be worth a decode (it is behind)."""
        sent = trace_ns(msg.trace, "segment")
        return self.agree and self.same_clock and sent is not None and \
            now_ns() - sent > STALE_DRAFT_S * 1e9

    def _agreement(self, msg: Segment, speech: tuple, words: list | None, text: str,
                   offset_s: float, spent: float) -> Cut | None:
        """A Cut after the words this draft and the one before agree on, or None.

        Made from `words` (word, start, end in the decoded audio, which starts `offset_s`
        before the utterance: the piece it joins) of a draft of a growing utterance; the
        draft before is the utterance's last one (grown or at a pause). The cut is halfway
        between the last agreed word and the next, as Whisper's alignment places them: the
        alignment may be off by a few tenths of a second, but nothing is lost or doubled
        there, because the next piece is decoded after this one, its words said first
        (`_joined`). The agreed words are kept as this piece's transcript (its final takes
        them).
        """
        if not self.agree:
            return None
        key = (speech[0], speech[1], speech[3])
        earlier = self.hypotheses.pop(msg.utt, None)
        self.hypotheses[msg.utt] = (key, text.split())
        while len(self.hypotheses) > 8:
            self.hypotheses.popitem(last=False)
        if not words:
            return None
        agreed = agreed_words(earlier[1], [w for w, _s, _e in words]) \
            if earlier is not None and earlier[0] == key else 0
        settled = settled_words(words, offset_s + msg.duration_s, self.settle_s) \
            if self.settle_s else 0
        n = max(agreed, settled)
        if not n:
            return None
        at = (words[n - 1][2] + words[n][1]) / 2 - offset_s
        if not 0.1 <= at <= msg.duration_s - 0.1:
            self.counters["agreed_no_cut"] += 1
            return None
        cut = round((msg.media_start_s + at) * BUS_RATE)
        media_end_s = cut / BUS_RATE
        committed = " ".join(w for w, _s, _e in words[:n])
        self.drafts.keep(msg.utt, (speech[0], speech[1], media_end_s, speech[3]), committed,
                         spent)
        self.hypotheses.pop(msg.utt, None)
        self.cut_short.append(msg.utt)
        self.counters["agreements"] += 1
        self.counters["agreed_words"] += n
        self.counters["settled_words"] += n - agreed   # committed by settling alone
        self.log.info("asr: %s: %s up to %.2f s: %r", msg.utt,
                      "two drafts agree" if agreed >= n else "words settled", media_end_s,
                      committed)
        return Cut(utt=msg.utt, stream=speech[0], media_start_s=speech[1],
                   media_end_s=media_end_s, speech_end_s=media_end_s, text=committed)

    def _joined(self, msg: Segment, pcm: np.ndarray, lang: str) -> tuple[np.ndarray, str, float]:
        """The audio to decode for `msg`, the words it starts with, and where `msg` starts in it.

        A piece that starts where the last committed one ended (same stream and language)
        is decoded after it: that piece's speech, then this one's, with that piece's words
        as Whisper's prefix. Otherwise the piece alone.
        """
        b = self.before
        if b is None or (b.stream, b.lang) != (msg.stream, lang) or \
                abs(b.end_s - msg.media_start_s) * BUS_RATE > 1:
            return pcm, "", 0.0
        self.counters["joined"] += 1
        return np.concatenate([b.pcm, pcm]), b.text, len(b.pcm) / BUS_RATE

    def _count_decode(self, spent_s: float, audio_s: float) -> None:
        """One decode counted: what the budget's GPU line is checked against.

        `decodes`, finals and drafts alike; `decoded_ms`, the audio decoded (a joined piece's
        too); `engine_ms`, the time decoding; `fallbacks`, short windows decoded again whole.
        """
        self.engine_s += spent_s
        self.decoded_s += audio_s
        self.counters["decodes"] += 1
        self.counters["engine_ms"] = round(self.engine_s * 1000)
        self.counters["decoded_ms"] = round(self.decoded_s * 1000)
        self.counters["fallbacks"] = getattr(self.engine, "fallbacks", 0)

    def _committed(self, msg: Segment, pcm: np.ndarray, lang: str, text: str) -> None:
        """Remember the piece just committed: the next may join it."""
        short = pcm is not None and text and len(pcm) <= MAX_CONTEXT_S * BUS_RATE
        self.before = Before(msg.stream, lang, msg.media_end_s, pcm, text) if short else None

    @staticmethod
    def _pcm(msg: Segment) -> np.ndarray:
        """The segment's speech as 16 kHz mono float32."""
        pcm = msg.pcm if msg.pcm.ndim == 1 else msg.pcm.mean(axis=1)
        if msg.sample_rate != BUS_RATE:
            import soxr
            pcm = soxr.resample(pcm.astype(np.float32), msg.sample_rate, BUS_RATE)
        pcm = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm
        return np.ascontiguousarray(pcm, np.float32)

    def _transcribe(self, msg: Segment) -> Iterator[Message]:
        lang = msg.src_lang or self.config.src_lang
        if lang not in self.engine.languages():
            self.counters["refused_lang"] += 1
            self.log.error("asr: segment %s is in %r, which engine %s cannot transcribe",
                           msg.utt, lang, self.engine.name)
            lang = self.config.src_lang
        # What a draft is made from: the same start and speech end in the same language.
        speech = (msg.stream, msg.media_start_s,
                  next((m for n, _w, m in msg.trace if n == "speech_end"), None), lang)
        start = now_ns()
        text = None if is_draft(msg) else self.drafts.take(msg.utt, speech)
        taken = text is not None
        words = None
        offset_s = 0.0
        pcm = self._pcm(msg)
        if text is None:
            heard, prefix, offset_s = self._joined(msg, pcm, lang)
            heard = levelled(heard, self.config.level_dbfs)
            decode = time.monotonic()
            if self.agree and msg.growing:
                words = self.engine.timed(heard, lang, prefix)
            text = " ".join(w for w, _s, _e in words) if words else \
                self.engine.transcribe(heard, lang, prefix)
            self._count_decode(time.monotonic() - decode, len(heard) / BUS_RATE)
            if self.glossary:
                text = self.glossary.spell(text)
        trace = traced(traced(self.arrived(msg.trace, "asr"), "asr.start", start), "asr.end")
        spent = (trace[-1][1] - start) / 1e9
        if taken:
            trace = traced(trace, "asr.draft")   # the text was made ahead, from a draft
        self.log.info("asr: %s%s [%s] %r (%.2f s audio, %.0f ms)", msg.utt,
                      " (draft)" if is_draft(msg) else "", lang, text, msg.duration_s,
                      spent * 1000)
        context, _ = self.sentence.before(msg.media_start_s)
        if not is_draft(msg):
            self.pauses.pop(msg.utt, None)
            self.hypotheses.pop(msg.utt, None)
            self._committed(msg, pcm, lang, text)
            self.sentence.add(msg.media_start_s, msg.media_end_s, text, text)
        else:
            if msg.growing:
                self.counters["rechecks"] += 1
                self.counters["recheck_ms"] += round(spent * 1000)
            else:
                self.drafts.keep(msg.utt, speech, text, spent)
            cut = self._cut(msg, speech, text) or \
                self._agreement(msg, speech, words, text, offset_s, spent)
            if cut is not None:
                # Its utterance is to end at the earlier pause: this draft would be wasted
                # work downstream (mt, and tts before the committed part).
                yield cut
                return
            if msg.growing:   # for asr alone
                return
        yield Transcript(utt=msg.utt, src_lang=lang, text=text, final=msg.final,
                         media_start_s=msg.media_start_s, media_end_s=msg.media_end_s,
                         goes_on=msg.goes_on, context=list(context), trace=trace)
