"""mt: source-language transcripts in, target-language translations out."""

from __future__ import annotations

from collections.abc import Iterator

from voxweft.actors import budget, condense
from voxweft.actors.actor import EngineActor
from voxweft.actors.drafts import Drafts
from voxweft.actors.phrases import Sentence, continuation, split_held
from voxweft.protocol.messages import (
    Message,
    Transcript,
    Translation,
    is_draft,
    now_ns,
    traced,
)


class MtActor(EngineActor):
    """Translates final transcripts; refuses text in a language the engine does not take."""

    name = "mt"
    downstream = "tts"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.glossary = topology.glossary   # its terms translated as it says, names kept
        # Translations of draft transcripts (speculative endpointing), by their source text
        # and the sentence they go on.
        self.drafts = Drafts(self.counters)
        self.sentence = Sentence()   # the pieces of the sentence so far (actors.phrases)
        self.hold_words = config.hold_words
        # (language pair, context asr sent) -> (sources, said, held) translated again
        self.replayed: dict[tuple, tuple[list[str], list[str], list[str]]] = {}

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """ASR's transcripts."""
        return [("asr", Transcript)]

    def load(self) -> None:
        """Build the translation models."""
        self.engine.load()

    def warmup(self) -> None:
        """Translate one sentence (lazy setup), then the budget: the 12 s sample's text."""
        self.budget = budget.warm_mt(self.engine, self.config.src_lang, self.config.tgt_lang)

    def close(self) -> None:
        """End engine helpers (apertium keeps a pipeline of processes per direction)."""
        self.engine.close()

    def _piece(self, msg: Transcript, tgt: str, source: str, sources: list[str],
               said: list[str], held: list[str]) -> str:
        """A piece's new words: what goes on from the sentence so far, or the piece's own.

        `sources` are the sentence's earlier pieces, `said` their translation said so far,
        `held` the last piece's words not said yet (see actors.phrases): the sentence's
        translation says them again where they belong; otherwise they come first.
        """
        if sources:
            full = self._translate(msg, tgt, " ".join([*sources, source]))
            rest = continuation(said, full)
            if rest is not None:
                self.counters["pieces_continued"] += 1
                return rest
            self.counters["pieces_unplaced"] += 1
        elif held:
            self.counters["held_unjoined"] += 1   # the next piece did not join: said first
        own = self._translate(msg, tgt, source)
        return " ".join([*held, own]) if held and own else own

    def _context(self, msg: Transcript, tgt: str) -> tuple[list[str], list[str], list[str]]:
        """(sources, said, held) of the sentence this piece goes on, if any.

        mt's own memory when the piece joins it; else the context asr sent, translated
        again piece by piece as it was (a restarted mt: actors.phrases, restarts).
        """
        sources, said = self.sentence.before(msg.media_start_s)
        if sources or not msg.context:
            return sources, said, self.sentence.held
        key = (msg.src_lang, tgt, tuple(msg.context))
        if key not in self.replayed:
            self.counters["contexts_replayed"] += 1
            sentence = Sentence()
            for i, source in enumerate(msg.context):
                before, said, held = sentence.sources, sentence.said, sentence.held
                new = self._piece(msg, tgt, source, before, said, held)
                say, held = self._held(i, i + 1, source, True, new, sentence)
                sentence.add(i, i + 1, source, say, held)
            self.replayed[key] = (sentence.sources, sentence.said, sentence.held)
            while len(self.replayed) > 8:
                self.replayed.pop(next(iter(self.replayed)))
        return self.replayed[key]

    def _held(self, start: float, end: float, source: str, goes_on: bool, new: str,
              sentence: Sentence) -> tuple[str, list[str]]:
        """(what to say of `new`, the words held back for the next piece)."""
        if not self.hold_words or not sentence.holds(start, end, source, goes_on):
            return new, []
        return split_held(new, self.hold_words)

    def _translate(self, msg: Transcript, tgt: str, source: str) -> str:
        if (msg.src_lang, tgt) not in self.engine.pairs():
            # Never translate text the engine was not built for (the modelled system fed
            # wrong-language text to its translator and "debugged" the symptoms for days).
            self.counters["refused_lang"] += 1
            self.log.error("mt: refused %s: text is %r, engine %s translates only %s",
                           msg.utt, msg.src_lang, self.engine.name,
                           ", ".join(f"{s}->{t}" for s, t in sorted(self.engine.pairs())))
            return ""
        # Fillers, stutters and false starts take time to say and mean nothing: not translated.
        text, _removed = condense.disfluencies(source, msg.src_lang)
        if not text:
            return ""
        if not self.glossary:
            return self.engine.translate(text, msg.src_lang, tgt)
        return self._with_glossary(text, msg.src_lang, tgt)

    def _with_glossary(self, text: str, src: str, tgt: str) -> str:
        """`text` translated with the glossary's translations of the terms it says.

        First with the translations in the text (MT copies them through, and fits the
        words around them); where MT changed one ("resultados de voz de síntese"), again
        with placeholders it keeps as it keeps names, put back afterwards; where both
        lost a term, MT's own translation (counted: glossary_missed).
        """
        glossary = self.glossary
        protected = glossary.protect(text)
        translated = glossary.spell(self.engine.translate(protected, src, tgt), "target")
        if protected == text or not glossary.missing(text, translated):
            return translated
        self.counters["glossary_placeholders"] += 1
        held, slots = glossary.hold(text)
        again = glossary.release(self.engine.translate(held, src, tgt), slots)
        if not glossary.missing(text, again):
            return again
        self.counters["glossary_missed"] += 1
        self.log.info("mt: the glossary's %s lost in %r", glossary.missing(text, again), text)
        return translated

    def handle(self, msg: Message) -> Iterator[Message]:
        """Translate a transcript into the configured target language.

        A draft is translated as a draft and kept; the final transcript of the same
        utterance with the same text takes it.
        """
        if not isinstance(msg, Transcript):
            return
        tgt = self.config.tgt_lang
        start = now_ns()
        sources, said, held = self._context(msg, tgt)
        sentence = Sentence.open(msg.media_start_s, sources, said, held)
        key = (msg.src_lang, msg.text, tuple(sources), tuple(held))
        text = None if is_draft(msg) else self.drafts.take(msg.utt, key)
        taken = text is not None
        if text is None:
            text = self._piece(msg, tgt, msg.text, sources, said, held)
        whole = text
        if not is_draft(msg):   # what was left untranslated, whether or not a draft was taken
            text, held = self._held(msg.media_start_s, msg.media_end_s, msg.text,
                                    msg.goes_on, whole, sentence)
            self.counters["words_held"] += len(held)
            self.counters["fillers_removed"] += condense.disfluencies(msg.text, msg.src_lang)[1]
        trace = traced(traced(self.arrived(msg.trace, "mt"), "mt.start", start), "mt.end")
        if taken:
            trace = traced(trace, "mt.draft")
        if is_draft(msg):
            self.drafts.keep(msg.utt, key, whole, (trace[-1][1] - start) / 1e9)
        else:
            sentence.add(msg.media_start_s, msg.media_end_s, msg.text, text, held)
            self.sentence = sentence
        self.log.info("mt: %s%s %r -> %r", msg.utt, " (draft)" if is_draft(msg) else "",
                      msg.text, text)
        yield Translation(utt=msg.utt, src_lang=msg.src_lang, tgt_lang=tgt,
                          source_text=msg.text, text=text, media_start_s=msg.media_start_s,
                          media_end_s=msg.media_end_s, final=msg.final, trace=trace)
