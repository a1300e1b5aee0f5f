"""MT engines: text -> text in the target language. The interface every engine implements.

One engine per file beside this one; `actors.engines` registers them by name.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from voxweft.actors.engines.resources import Resources


class MtEngine(Resources, abc.ABC):
    """Text -> text for one process; every direction it offers is built by load()."""

    name: ClassVar[str] = ""
    #: Resident memory once loaded (MB; measured RSS of its actor on Linux, see Resources).
    MEMORY_MB: ClassVar[int] = 250

    @abc.abstractmethod
    def pairs(self) -> frozenset[tuple[str, str]]:
        """(source, target) ISO 639-1 pairs this engine translates."""

    def installed_pairs(self) -> frozenset[tuple[str, str]]:
        """Pairs whose data is installed here, without loading anything; pairs() by default.

        An engine whose pairs() also names pairs it could do once installed (apertium,
        when the program is missing) narrows this to what is there now.
        """
        return self.pairs()

    @abc.abstractmethod
    def load(self) -> None:
        """Build the models (heavy work here, never in __init__)."""

    @abc.abstractmethod
    def translate(self, text: str, src: str, tgt: str) -> str:
        """Translate `text` from `src` to `tgt`; the pair must be one of pairs()."""

    def close(self) -> None:
        """Release helper processes at shutdown (most engines have none)."""
        return None

    @classmethod
    def process_env(cls) -> dict[str, str]:
        """Environment the actor process must start with (e.g. a preload); {} by default."""
        return {}
