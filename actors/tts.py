"""tts: translations in, speech chunks out, streamed clause by clause as they are produced."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from actors.runtime import Actor
from actors.tts_engines import ENGINES
from protocol.messages import (
    Message,
    PlaybackEvent,
    SpeechChunk,
    Translation,
    now_ns,
    trace_ns,
    traced,
)

#: An utterance the player never reports finished is forgotten this long after it was sent.
FORGET_AFTER_S = 60.0


class TtsActor(Actor):
    """Each clause goes out the moment it is synthesized; an empty `last` chunk closes it."""

    name = "tts"
    downstream = "player"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.engine = ENGINES[config.engine](**config.engine_settings())
        # Speech sent but not yet heard: utt -> [seconds of audio, wall ns sent]; and when
        # the player started each (its playback events), to know how far behind we are.
        self.queued: dict[str, list] = {}
        self.playing: dict[str, int] = {}
        self.player_epoch = 0

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """MT's translations; the player's playback events (how much speech is queued)."""
        return [("mt", b"translation."), ("player", b"playback.")]

    def backlog_s(self, now: int) -> float:
        """Seconds of speech sent to the player that it has not played yet."""
        total = 0.0
        for utt, (seconds, sent) in list(self.queued.items()):
            if now - sent > (seconds + FORGET_AFTER_S) * 1e9:   # the player lost it
                del self.queued[utt]
                self.playing.pop(utt, None)
                continue
            started = self.playing.get(utt)
            total += seconds if started is None else max(0.0, seconds - (now - started) / 1e9)
        return total

    def _on_playback(self, msg: PlaybackEvent) -> None:
        if msg.epoch != self.player_epoch:   # a restarted player dropped what it had queued
            self.player_epoch = msg.epoch
            self.queued.clear()
            self.playing.clear()
        if msg.event == "started":
            self.playing[msg.utt] = trace_ns(msg.trace, "play.start") or msg.sent_ns
        else:
            self.queued.pop(msg.utt, None)
            self.playing.pop(msg.utt, None)

    def load(self) -> None:
        """Build the voice model."""
        self.engine.load()

    def warmup(self) -> None:
        """Synthesize one short clause so the first utterance pays no lazy setup."""
        for _ in self.engine.synthesize("Olá." if self.config.tgt_lang == "pt" else "Hello.",
                                        self.config.tgt_lang):
            pass

    def handle(self, msg: Message) -> Iterator[Message]:
        """Speak one translation, faster when earlier speech is still queued at the player."""
        if isinstance(msg, PlaybackEvent):
            self._on_playback(msg)
            return
        if not isinstance(msg, Translation):
            return
        rate = self.engine.sample_rate
        lang = msg.tgt_lang or self.config.tgt_lang
        start = now_ns()
        trace = traced(self.arrived(msg.trace, "tts"), "tts.start", start)
        index, samples = 0, 0
        backlog = self.backlog_s(start)
        speed = self.config.speed(backlog)
        if speed > 1.0:
            self.counters["catchup"] += 1
        if msg.text and lang not in self.engine.languages():
            self.counters["refused_lang"] += 1
            self.log.error("tts: %s is in %r; engine %s speaks only %s", msg.utt, lang,
                           self.engine.name, ", ".join(sorted(self.engine.languages())))
        elif msg.text:
            for pcm in self.engine.synthesize(msg.text, lang, speed):
                samples += len(pcm)
                if index == 0:
                    trace = traced(trace, "tts.first")
                yield SpeechChunk(utt=msg.utt, tgt_lang=lang, index=index, last=False,
                                  sample_rate=rate, pcm=np.asarray(pcm, np.float32),
                                  speed=speed, trace=trace)
                index += 1
        trace = traced(trace, "tts.end")
        if samples:
            self.queued[msg.utt] = [samples / rate, now_ns()]
        self.log.info("tts: %s %d chunk(s), %.2f s of speech at speed %.2f (backlog %.1f s) in "
                      "%.0f ms", msg.utt, index, samples / rate, speed, backlog,
                      (now_ns() - start) / 1e6)
        yield SpeechChunk(utt=msg.utt, tgt_lang=lang, index=index, last=True, sample_rate=rate,
                          pcm=np.zeros(0, np.float32), speed=speed, trace=trace)
