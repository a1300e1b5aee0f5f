"""How far another host's wall clock is from ours, NTP-style, from the status heartbeats.

Traces carry wall-clock times, and a trace that crosses hosts mixes two clocks: with the
Ultra's clock 5 s behind the M2's, the hop from ASR (M2) to MT (Ultra) would read -5 s and
end of speech -> first audio would be 5 s short. So every heartbeat says, for each peer it
hears, when that peer sent its last heartbeat (the peer's clock) and when it arrived (ours).
A peer's heartbeat then gives the four NTP timestamps for one exchange:

    t1  we sent a heartbeat           (our clock)    echoed back in the peer's `clock`
    t2  the peer received it          (its clock)    echoed back in the peer's `clock`
    t3  the peer sent its heartbeat   (its clock)    its `sent_ns`
    t4  we received that              (our clock)

    offset = ((t2 - t1) + (t3 - t4)) / 2     the peer's clock minus ours
    delay  = (t4 - t1) - (t3 - t2)           the round trip, less the time the peer held it

The time the peer held our heartbeat before answering (up to one heartbeat period) drops
out, as in NTP. Of the last `SAMPLES` exchanges with a host the one with the shortest round
trip is taken (NTP's clock filter): queueing delays are one-sided, so the quickest exchange
is the least skewed. Clocks on one host are the same clock: no offset is ever applied there.

A receiver brings each trace it gets from another host into its own clock on arrival (see
`Clocks.to_local`), so a trace is always in the clock of the actor holding it, and the
player's trace, from which latency is read, is wholly in the player's clock.
"""

from __future__ import annotations

import collections

#: Exchanges kept per host; at 2 Hz heartbeats this is the last 8 s.
SAMPLES = 16


class Clocks:
    """Offsets of other hosts' clocks from ours, from heartbeat exchanges."""

    def __init__(self, samples: int = SAMPLES) -> None:
        self.exchanges: dict[str, collections.deque[tuple[int, int]]] = {}
        self.samples = samples

    def exchange(self, host: str, t1: int, t2: int, t3: int, t4: int) -> None:
        """Record one exchange with `host` (ns; t1, t4 ours, t2, t3 the peer's)."""
        delay = (t4 - t1) - (t3 - t2)
        if delay < 0:   # a reordered or restarted peer's echo: not an exchange
            return
        offset = ((t2 - t1) + (t3 - t4)) // 2
        kept = self.exchanges.setdefault(host, collections.deque(maxlen=self.samples))
        kept.append((delay, offset))

    def offset_ns(self, host: str) -> int | None:
        """`host`'s clock minus ours, in ns, or None before the first exchange."""
        kept = self.exchanges.get(host)
        return min(kept)[1] if kept else None

    def offsets_ms(self) -> dict[str, float]:
        """Every host's offset in ms, for the heartbeat and `voxweft status`."""
        return {host: round(min(kept)[1] / 1e6, 1) for host, kept in self.exchanges.items()}

    def round_trip_ms(self, host: str) -> float | None:
        """The shortest round trip to `host` seen lately (the estimate's error bound)."""
        kept = self.exchanges.get(host)
        return round(min(kept)[0] / 1e6, 2) if kept else None

    def to_local(self, host: str, trace: tuple) -> tuple:
        """`trace` (in `host`'s clock) in ours; unchanged before the first exchange."""
        offset = self.offset_ns(host)
        if not offset:
            return trace
        return tuple((event, wall - offset, media) for event, wall, media in trace)


def offsets(statuses) -> dict[str, float]:
    """Each other host's clock minus this host's (ms), as this host's actors say.

    The median of what the heartbeats in `statuses` carry.
    """
    said: dict[str, list[float]] = {}
    for status in statuses:
        for host, ms in status.clock_ms.items():
            said.setdefault(host, []).append(ms)
    return {host: sorted(v)[len(v) // 2] for host, v in said.items()}
