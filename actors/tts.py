"""tts: translations in, speech chunks out, streamed clause by clause as they are produced."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from actors.runtime import Actor
from actors.tts_engines import ENGINES
from protocol.messages import Message, SpeechChunk, Translation, now_ns, traced


class TtsActor(Actor):
    """Each clause goes out the moment it is synthesized; an empty `last` chunk closes it."""

    name = "tts"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.engine = ENGINES[config.engine](**config.engine_settings())

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """MT's translations."""
        return [("mt", b"translation.")]

    def load(self) -> None:
        """Build the voice model."""
        self.engine.load()

    def warmup(self) -> None:
        """Synthesize one short clause so the first utterance pays no lazy setup."""
        for _ in self.engine.synthesize("Olá." if self.config.tgt_lang == "pt" else "Hello.",
                                        self.config.tgt_lang):
            pass

    def handle(self, msg: Message) -> Iterator[Message]:
        """Speak one translation."""
        if not isinstance(msg, Translation):
            return
        rate = self.engine.sample_rate
        lang = msg.tgt_lang or self.config.tgt_lang
        start = now_ns()
        trace = traced(self.arrived(msg.trace, "tts"), "tts.start", start)
        index = 0
        if msg.text and lang not in self.engine.languages():
            self.counters["refused_lang"] += 1
            self.log.error("tts: %s is in %r; engine %s speaks only %s", msg.utt, lang,
                           self.engine.name, ", ".join(sorted(self.engine.languages())))
        elif msg.text:
            for pcm in self.engine.synthesize(msg.text, lang):
                if index == 0:
                    trace = traced(trace, "tts.first")
                yield SpeechChunk(utt=msg.utt, tgt_lang=lang, index=index, last=False,
                                  sample_rate=rate, pcm=np.asarray(pcm, np.float32),
                                  trace=trace)
                index += 1
        trace = traced(trace, "tts.end")
        self.log.info("tts: %s %d chunk(s) in %.0f ms", msg.utt, index,
                      (now_ns() - start) / 1e6)
        yield SpeechChunk(utt=msg.utt, tgt_lang=lang, index=index, last=True, sample_rate=rate,
                          pcm=np.zeros(0, np.float32), trace=trace)
