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

#: Drafts held at once: an utterance may pause several times before it ends (and be cut at
#: an earlier pause, see actors.asr), and a stage may see the drafts of several utterances
#: before their finals (several asr workers).
LIMIT = 6


class Drafts:
    """Bounded drafts by utterance id and key; `take` gives back the one made from the key."""

    def __init__(self, counters: collections.Counter, *, limit: int = LIMIT,
                 on_drop: Callable[[Any], None] | None = None) -> None:
        self.items: collections.OrderedDict[tuple[str, Hashable], tuple[Any, float]] = \
            collections.OrderedDict()
        self.counters = counters
        self.limit = limit
        self.on_drop = on_drop

    def __len__(self) -> int:
        return len(self.items)

    def keep(self, utt: str, key: Hashable, value: Any, cost_s: float) -> None:
        """Hold the draft of `utt` made from `key` (one made from the same key is wasted)."""
        if (utt, key) in self.items:
            self._waste(self.items.pop((utt, key)))
        self.items[utt, key] = (value, cost_s)
        self.counters["drafts"] += 1
        self.counters["draft_ms"] += round(cost_s * 1000)
        while len(self.items) > self.limit:
            self._waste(self.items.popitem(last=False)[1])

    def get(self, utt: str, key: Hashable) -> Any | None:
        """The draft of `utt` made from `key`, left in place; None if there is none."""
        item = self.items.get((utt, key))
        return None if item is None else item[0]

    def take(self, utt: str, key: Hashable) -> Any | None:
        """The draft of `utt` made from `key`, else None; the other drafts of `utt` are dropped.

        The final message of an utterance comes once: whatever else was drafted for it is
        wasted.
        """
        found = self.items.pop((utt, key), None)
        for other in [k for k in self.items if k[0] == utt]:
            self._waste(self.items.pop(other))
        if found is None:
            return None
        self.counters["drafts_used"] += 1
        return found[0]

    def _waste(self, item: tuple[Any, float]) -> None:
        self.counters["drafts_wasted"] += 1
        self.counters["draft_wasted_ms"] += round(item[1] * 1000)
        if self.on_drop is not None:
            self.on_drop(item[0])
