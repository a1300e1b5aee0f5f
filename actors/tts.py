"""tts: translations in, speech chunks out, streamed clause by clause as they are produced."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import time
from collections.abc import Iterator

import numpy as np

from voxweft.actors import budget, condense, engines, lag
from voxweft.actors.actor import EngineActor
from voxweft.actors.drafts import Drafts
from voxweft.actors.engines.tts import Spoken, Timed
from voxweft.actors.faults import injected_fault
from voxweft.actors.voice import VoiceMemory
from voxweft.protocol.messages import (
    BUS_RATE,
    Message,
    PlaybackEvent,
    SpeechChunk,
    Status,
    Translation,
    Voice,
    is_draft,
    now_ns,
    trace_ns,
    traced,
)

#: The bounded lag expects a first chunk to take as long as the median of this many last.
FIRST_CHUNKS = 5
#: Just started, tts waits at most this long for the player's first heartbeat before it
#: speaks a translation: the heartbeat says how much of each utterance begun the player has
#: (a restarted tts speaks only the rest). mt sends what it holds again the moment tts is
#: ready, before the player's next heartbeat (2 Hz) has come: in CI, 3 restarts of 3.
PLAYER_WAIT_S = 2.0
#: The player's word on an utterance it had begun (its heartbeat, 2 Hz) is trusted this long:
#: older, that player may be gone, and a restarted one drops a half-written utterance, so it
#: has none of those words (test_kills_close: tts resumed from word 2 on the heartbeat of a
#: player killed 1.8 s before; the new player wrote words 2-4 of 4). tts then waits for a
#: fresh heartbeat (at most PLAYER_WAIT_S), and without one speaks the translation whole.
PROGRESS_FRESH_S = 1.2


@dataclasses.dataclass
class _Draft:
    """The first chunk of a draft translation, made ahead, and the synthesis to go on with."""

    plan: lag.Decision
    engine: object
    first: Spoken
    rest: Iterator[Spoken]
    made_s: float             # what making the first chunk took
    spans: list[tuple[int, int]]   # the words of each piece of its plan


class TtsActor(EngineActor):
    """Each clause goes out the moment it is synthesized; an empty `last` chunk closes it."""

    name = "tts"
    downstream = "player"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        # A faster engine for speech that is late (actors.lag), if the topology names one.
        self.backlog_engine = (engines.build("tts", config.backlog_engine, config.backlog_settings)
                               if config.backlog_engine else None)
        # When the player will have played what was sent: how far behind the listener is.
        self.timeline = lag.Timeline(topology.playout_buffer_s + 0.04)
        # How long the first chunk took lately (s): the warm-up's figure until speech comes;
        # the bounded lag needs what it takes now, on a machine that may be busier.
        self.first_chunks: collections.deque[float] = collections.deque(maxlen=FIRST_CHUNKS)
        # Wall seconds synthesis takes per character of text, lately (long chunks need it).
        self.s_per_char: float | None = None
        # Seconds the engines spent making speech, and the speech made (counted in _counted).
        self.engine_s = self.made_s = 0.0
        # VOXWEFT_FAULT pace:S (tests): every second of speech takes at least S s to make.
        fault = injected_fault(self.name)
        self.pace_s = fault[1] if fault and fault[0] == "pace" else 0.0
        # First chunks of draft translations (speculative endpointing), by text and language.
        self.drafts = Drafts(self.counters, on_drop=lambda draft: draft.rest.close())
        # The player's last word on each utterance it has begun: how many of its words it
        # has whole. A restarted tts goes on from there (the words before are played).
        self.player_has: dict[str, int] = {}
        self.player_heard = False    # a heartbeat of the player's since this process started
        self.player_heard_at = 0.0   # monotonic: the player's last heartbeat
        self.stale_since: float | None = None   # monotonic: held for a fresh heartbeat
        self.warmed_at: float | None = None   # monotonic: warm-up done, ready to speak
        self.wait_since: float | None = None  # monotonic: the first translation held
        self.waiting: list[Translation] = []   # translations held for the player's heartbeat
        # The speaker's recent speech, when the voice speaks as they do (bounded).
        self.voices = None
        if self.engine.wants_voice():
            s = self.engine.settings
            self.voices = VoiceMemory(s.reference_min_s, s.reference_max_s)

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """Translations, playback events (speech queued), and the speaker's speech if needed.

        The segmenter's Voice messages only when the engine speaks in the speaker's voice.
        """
        subs: list[tuple[str, type[Message]]] = [("mt", Translation),
                                                  ("player", PlaybackEvent)]
        if self.voices is not None:
            subs.append(("segmenter", Voice))
        return subs

    def backlog_s(self, now: int) -> float:
        """Seconds of speech sent to the player that it has not played yet."""
        return self.timeline.queued_s(now)

    def _long_chunk_fits(self, text: str, queued_s: float) -> bool:
        """Whether a long first chunk of `text` would be made before the queued speech ends.

        (Without this check long chunks broke the bound on a busy machine: a 4.3 s chunk
        took 6 s to make behind 2.3 s of queued speech, and was heard 11.7 s late.)
        """
        if self.s_per_char is None or not text:
            return False
        first = self.engine.plan(text, eager=False)[0]
        return self.s_per_char * len(first) < 0.8 * queued_s

    def first_chunk_s(self) -> float:
        """What making a first chunk takes now: the median of the last few, else warm-up's.

        (The longest of the last five overestimated the lag by ~0.6 s and skipped 11 of 65
        utterances of a continuous talk that this machine speaks within 5.8 s.)
        """
        if self.first_chunks:
            return float(np.median(self.first_chunks))
        return self.budget.get("first_s", 0.5)

    def load(self) -> None:
        """Build the voice model (and the backlog engine's)."""
        self.engine.load()
        if self.backlog_engine is not None:
            self.backlog_engine.load()

    def warmup(self) -> None:
        """Synthesize one short clause (lazy setup), then the budget: a typical sentence."""
        self.budget = budget.warm_tts(self.engine, self.config.tgt_lang,
                                      engines.tts.warmup_voice(self.engine))
        self.warmed_at = time.monotonic()

    def voice(self, msg: Translation):
        """The speaker's voice for `msg` (None: the engine's own, or not enough heard yet)."""
        if self.voices is None:
            return None
        self.voices.words(msg.utt, msg.source_text)
        ref = None
        if self.engine.settings.voice_mode == "prompt":
            ref = self.voices.prompt(msg.utt)
        ref = ref or self.voices.reference(msg.utt)
        self.counters["voice_speaker" if ref is not None else "voice_default"] += 1
        self.log.info("tts: %s%s in %s", msg.utt, " (draft)" if is_draft(msg) else "",
                      f"the speaker's voice ({ref.duration_s:.1f} s of {ref.key})"
                      if ref is not None else "the default voice (too little speech yet)")
        return ref

    def _plan(self, msg: Translation, trace, start: int, queued: float) -> lag.Decision:
        """How to speak `msg` now that the listener has `queued` s of speech still to hear."""
        speech_end = trace_ns(trace, "speech_end")
        plan = lag.decide(
            since_end_s=max(0.0, (start - speech_end) / 1e9) if speech_end else 0.0,
            queued_s=queued, first_chunk_s=self.first_chunk_s(),
            max_lag_s=self.topology.max_lag_s, speed_for_queue=self.config.speed(queued),
            max_speed=self.config.catchup_max_speed,
            has_backlog_engine=self.backlog_engine is not None)
        if plan.long_chunks and not self._long_chunk_fits(msg.text, queued):
            plan = dataclasses.replace(plan, long_chunks=False)
        return plan

    def _draft(self, msg: Translation, lang: str, plan: lag.Decision, queued: float,
               start: int) -> None:
        """Make the first chunk of a draft ahead, and keep it with the rest to make.

        Only when it can bring the first audio forward: not while the player has more
        speech queued than a first chunk takes to make (it would wait there anyway).
        """
        engine = self.backlog_engine if plan.backlog_engine else self.engine
        if not msg.text or plan.skip or lang not in engine.languages():
            return
        if queued > self.first_chunk_s():
            self.counters["drafts_not_needed"] += 1
            return
        # The plan now: an engine may size its pieces by what it measures, which changes
        # before the rest of the draft is made.
        spans = engines.tts.word_spans(engine.plan(msg.text, eager=not plan.long_chunks,
                                                       speed=plan.speed))
        chunks = self._counted(engine.speak(msg.text, lang, plan.speed,
                                            eager=not plan.long_chunks, voice=self.voice(msg)),
                               engine.sample_rate)
        first = next(chunks, None)
        if first is None:
            return
        made_s = (now_ns() - start) / 1e9
        self.drafts.keep(msg.utt, (msg.text, lang), _Draft(plan, engine, first, chunks, made_s,
                                                             spans),
                         made_s)
        self.log.info("tts: %s (draft) first chunk made ahead in %.0f ms", msg.utt,
                      made_s * 1000)

    def _counted(self, spoken: Iterator[Spoken], rate: int) -> Iterator[Spoken]:
        """`spoken`, its making counted (what the budget's GPU line is checked against).

        `syntheses`: started (drafts made ahead included); `engine_ms`: time spent making
        it (not waiting between chunks); `pieces`: pieces of a plan made (a model call
        each); `made_ms`: speech made.
        """
        timed, piece = Timed(_paced(spoken, rate, self.pace_s) if self.pace_s else spoken), None
        self.counters["syntheses"] += 1
        try:
            for item in timed:
                self.engine_s += timed.spent_s
                timed.spent_s = 0.0
                if item.piece != piece:
                    self.counters["pieces"] += 1
                    piece = item.piece
                self.made_s += len(item.pcm) / rate
                self.counters["engine_ms"] = round(self.engine_s * 1000)
                self.counters["made_ms"] = round(self.made_s * 1000)
                yield item
        finally:   # a draft dropped closes this: the engine's generator is closed with it
            self.engine_s += timed.spent_s
            self.counters["engine_ms"] = round(self.engine_s * 1000)
            if hasattr(spoken, "close"):
                spoken.close()

    def handle(self, msg: Message) -> Iterator[Message]:
        """Speak one translation, faster (or not at all) when the listener is behind.

        A draft gets its first chunk made ahead (not sent); the final translation of the
        same utterance with the same text sends it at once and goes on from there, unless
        the listener is now too far behind.
        """
        if isinstance(msg, PlaybackEvent):
            self.timeline.heard(msg, now_ns())
            return
        if isinstance(msg, Status):
            if msg.src == "player":
                self.player_has = dict(msg.progress)
                self.player_heard = True
                self.player_heard_at = time.monotonic()
            return
        if isinstance(msg, Voice):
            if self.voices is not None and msg.sample_rate == BUS_RATE and msg.pcm.ndim == 1:
                self.voices.add(msg.utt, msg.pcm, msg.sample_rate)
            else:
                self.counters["voice_bad_format"] += 1
            return
        if not isinstance(msg, Translation):
            return
        if not is_draft(msg):
            if self._before_the_player() or self._stale_for([msg]):
                if self.wait_since is None:
                    self.wait_since = time.monotonic()
                self.waiting.append(msg)
                self.counters["waited_for_player"] += 1
                return
            # What was held came first: spoken first (the player plays in arrival order). A
            # final that came while a draft was being made ahead, after the player was heard
            # but before tick() ran, once overtook them (tts killed on a slow machine).
            yield from self._spoken_held()
        yield from self._speak(msg)

    def _before_the_player(self) -> bool:
        """Warmed up and the player not heard yet: hold what to speak.

        At most PLAYER_WAIT_S from the first translation held: the player's heartbeat may be
        queued behind mt's resend and the drafts in it (in a test, the final came 2.7 s
        after ready, its drafts first).
        """
        return (not self.player_heard and self.warmed_at is not None
                and (self.wait_since is None
                     or time.monotonic() - self.wait_since < PLAYER_WAIT_S))

    def _fresh(self) -> bool:
        """Whether the player's last heartbeat (its word on each utterance) is recent."""
        return time.monotonic() - self.player_heard_at <= PROGRESS_FRESH_S

    def _stale_for(self, msgs: list[Translation]) -> bool:
        """Hold these: one is an utterance the player had begun, and its word on it is stale.

        At most PLAYER_WAIT_S from the first held so; a fresh heartbeat ends it.
        """
        if not self.player_heard or self._fresh() or \
                not any(m.utt in self.player_has for m in msgs):
            self.stale_since = None
            return False
        now = time.monotonic()
        if self.stale_since is None:
            self.stale_since = now
            self.counters["waited_for_fresh_progress"] += 1
        return now - self.stale_since < PLAYER_WAIT_S

    def tick(self) -> Iterator[Message]:
        """Speak what was held for the player's heartbeat, once it came (or not)."""
        if not self._before_the_player() and not self._stale_for(self.waiting):
            yield from self._spoken_held()

    def _spoken_held(self) -> Iterator[Message]:
        """Speak what was held for the player's first heartbeat, in the order it came."""
        while self.waiting:
            yield from self._speak(self.waiting.pop(0))

    def _speak(self, msg: Translation) -> Iterator[Message]:
        """handle() of a translation."""
        lang = msg.tgt_lang or self.config.tgt_lang
        start = now_ns()
        trace = traced(self.arrived(msg.trace, "tts"), "tts.start", start)
        queued = self.backlog_s(start)
        plan = self._plan(msg, trace, start, queued)
        if is_draft(msg):
            self._draft(msg, lang, plan, queued, start)
            return
        # The player has the first `said` words from a synthesis before this process's: the
        # rest is spoken, so the new synthesis follows on from the old without a seam.
        words = msg.text.split()
        said = min(self.player_has.get(msg.utt, 0), len(words)) if self._fresh() else 0
        text = " ".join(words[said:]) if said else msg.text
        if said:
            self.counters["resumed"] += 1
            self.log.info("tts: %s: the player has %d of its %d words; going on from there",
                          msg.utt, said, len(words))
        # Not spoken (or spoken in part already): its drafts are wasted (no key matches None).
        draft = self.drafts.take(msg.utt, None if plan.skip or said else (msg.text, lang))
        ahead = 0.0   # time spent on this translation before it came (its draft)
        spans: list[tuple[int, int]] = []
        if draft is not None:
            plan, engine, ahead, spans = draft.plan, draft.engine, draft.made_s, draft.spans
            chunks = itertools.chain([draft.first], draft.rest)
            trace = traced(trace, "tts.draft")
        else:
            engine = self.backlog_engine if plan.backlog_engine else self.engine
            chunks = None
        for step in plan.steps():
            self.counters[f"lag_{step}"] += 1
        index, samples, failed = 0, 0, ""
        if plan.skip:
            self.log.warning("tts: %s not spoken: %s", msg.utt, plan.skip)
        elif msg.text and lang not in engine.languages():
            self.counters["refused_lang"] += 1
            self.log.error("tts: %s is in %r; engine %s speaks only %s", msg.utt, lang,
                           engine.name, ", ".join(sorted(engine.languages())))
        elif text:
            # Each chunk says which words of the translation it speaks (the plan's pieces).
            if chunks is None:
                spans = engines.tts.word_spans(engine.plan(text, eager=not plan.long_chunks,
                                                           speed=plan.speed), said)
                chunks = _until_it_fails(lambda: self._counted(engine.speak(
                    text, lang, plan.speed, eager=not plan.long_chunks,
                    voice=self.voice(msg)), engine.sample_rate))
            else:
                chunks = _until_it_fails(lambda drafted=chunks: drafted)
            piece, part = -1, 0
            for spoken in chunks:
                if isinstance(spoken, Exception):   # the utterance is closed all the same
                    failed = f"tts engine failed after {index} chunk(s): " \
                             f"{type(spoken).__name__}: {spoken}"[:300]
                    self.counters["engine_failed"] += 1
                    self.log.error("tts: %s: %s", msg.utt, failed)
                    break
                part = part + 1 if spoken.piece == piece else 0
                piece, pcm = spoken.piece, spoken.pcm
                first_word, end_word = spans[piece]
                if plan.speed > 1.0:   # speech is queued: the pauses nobody waits for go
                    shorter = condense.shorten_pauses(pcm, engine.sample_rate,
                                                      condense.PAUSE_WHEN_BEHIND_S)
                    self.counters["pauses_cut_ms"] += round(
                        1000 * (len(pcm) - len(shorter)) / engine.sample_rate)
                    pcm = shorter
                samples += len(pcm)
                if index == 0:
                    trace = traced(trace, "tts.first")
                self.timeline.sent(msg.utt, len(pcm) / engine.sample_rate, now_ns())
                yield SpeechChunk(utt=msg.utt, tgt_lang=lang, index=index, last=False,
                                  sample_rate=engine.sample_rate,
                                  pcm=np.asarray(pcm, np.float32), speed=plan.speed,
                                  word=first_word, words=end_word - first_word, part=part,
                                  piece_end=spoken.ends, trace=trace)
                if index == 0:   # it is out: what it took (ahead, for a draft), sending included
                    self.first_chunks.append(ahead or (now_ns() - start) / 1e9)
                index += 1
        trace = traced(trace, "tts.end")
        if samples and text:   # what synthesis costs now, per character (wall)
            spent = ((trace[-1][1] - start) / 1e9 + ahead) / len(text)
            self.s_per_char = spent if self.s_per_char is None else \
                0.7 * self.s_per_char + 0.3 * spent
        self.log.info("tts: %s %d chunk(s), %.2f s of speech at speed %.2f (queued %.1f s, "
                      "lag %.1f s%s)%s in %.0f ms", msg.utt, index,
                      samples / engine.sample_rate, plan.speed, queued, plan.lag_s,
                      "".join(f", {s}" for s in plan.steps()),
                      " first chunk made ahead," if ahead else "", (now_ns() - start) / 1e6)
        yield SpeechChunk(utt=msg.utt, tgt_lang=lang, index=index, last=True,
                          sample_rate=engine.sample_rate, pcm=np.zeros(0, np.float32),
                          speed=plan.speed, skipped=plan.skip or failed, word=len(words),
                          trace=trace)


def _until_it_fails(make):
    """The chunks `make()` gives, then the exception that stopped the engine, if one did.

    An engine that fails partway must not leave its utterance open: the player (reading a
    file, it waits for what a holder lists) would wait for its end for ever.
    """
    try:
        yield from make()
    except Exception as exc:  # noqa: BLE001 - any engine error: said, counted, closed
        yield exc


def _paced(spoken: Iterator[Spoken], rate: int, s_per_s: float) -> Iterator[Spoken]:
    """`spoken`, each item made in at least `s_per_s` seconds per second of its speech.

    The fault `pace:S`: a machine on which this voice is that slow, in seconds (a factor on
    this machine's own time made a test's premise depend on the machine, and the drafts
    made ahead, which do not pass through the runtime's output, were made at full speed).
    """
    start = time.monotonic()
    for item in spoken:
        time.sleep(max(0.0, start + s_per_s * len(item.pcm) / rate - time.monotonic()))
        yield item
        start = time.monotonic()
