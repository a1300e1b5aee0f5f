"""Drafts: work done ahead on an utterance that may not be over (speculative endpointing).

When a pause begins the segmenter sends a draft of the open utterance (`is_draft`); asr,
mt and tts each do their part ahead and keep the result here, keyed by what it was made
from. The final message of the utterance takes the draft when it is made from the same
thing (the speaker did not go on): the same speech end for asr, the same text for mt and
tts. Otherwise the draft is dropped and counted as wasted, with the time it cost.

Counters (in the actor's status): `drafts` made, `drafts_used`, `drafts_wasted`,
`draft_ms` (time spent making them) and `draft_wasted_ms` (spent on the wasted ones).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import Any

#: Drafts held at once: the speaker pauses in one utterance at a time; a few more cover a
#: stage that sees the drafts of several utterances before their finals (several workers).
LIMIT = 4


class Drafts:
    """Bounded drafts by utterance id; `take` gives one back when its key matches."""

    def __init__(self, counters: collections.Counter, *, limit: int = LIMIT,
                 on_drop: Callable[[Any], None] | None = None) -> None:
        self.items: collections.OrderedDict[str, tuple[Hashable, Any, float]] = \
            collections.OrderedDict()
        self.counters = counters
        self.limit = limit
        self.on_drop = on_drop

    def __len__(self) -> int:
        return len(self.items)

    def keep(self, utt: str, key: Hashable, value: Any, cost_s: float) -> None:
        """Hold the draft of `utt` made from `key`; an older draft of it is wasted."""
        if utt in self.items:
            self._waste(self.items.pop(utt))
        self.items[utt] = (key, value, cost_s)
        self.counters["drafts"] += 1
        self.counters["draft_ms"] += round(cost_s * 1000)
        while len(self.items) > self.limit:
            self._waste(self.items.popitem(last=False)[1])

    def take(self, utt: str, key: Hashable) -> Any | None:
        """The draft of `utt` if it was made from `key`, else None (and it is dropped)."""
        item = self.items.pop(utt, None)
        if item is None:
            return None
        if item[0] != key:
            self._waste(item)
            return None
        self.counters["drafts_used"] += 1
        return item[1]

    def _waste(self, item: tuple[Hashable, Any, float]) -> None:
        self.counters["drafts_wasted"] += 1
        self.counters["draft_wasted_ms"] += round(item[2] * 1000)
        if self.on_drop is not None:
            self.on_drop(item[1])
