"""Custody of the utterance path: nothing lost on a crash, nothing handled twice.

The rule, for every stage from the segmenter to tts:

* A sender keeps every utterance-path message it sent (`Outbox`) until the player reports
  the utterance done (a `Done` message: written whole to the sink, or skipped). Keeping it
  end to end rather than for one hop means a stage that crashes after passing an utterance
  on loses nothing: its upstream still holds the utterance and sends it again.
* It sends everything it holds again whenever its downstream stage (re)joins: a new epoch
  (a restart) or a new link count (a dropped connection, a sequence gap), as soon as that
  stage's heartbeat shows it hears this sender's current epoch (`Resync`).
* A receiver handles a message at most once (`Seen`); duplicates are counted and dropped.
* A stage that restarted takes what its upstream sends again before what the upstream sent
  while it loaded (`Rejoin`), so utterances keep their order across a restart.
* Drafts (`is_draft`: work ahead on an utterance that may go on) are outside custody: never
  held, never sent again, never taken for a duplicate of the final message.
* A holder asks rather than only waits to be told: its heartbeat lists the oldest utterances
  it holds (`Status.holding`), and the player says again the Done of any it has finished.
  A Done missed (published while the holder was restarting, or before it took the utterance
  its upstream sent again) is so made up within a heartbeat. A stage remembers the Dones it
  heard (`Finished`) and does no work on an utterance already done.

Bounded memory: an outbox holds at most `OUTBOX_UTTERANCES`; beyond that the oldest is
forgotten and counted (`outbox_dropped`). A file source never gets there: it stops reading
while `max_outstanding` utterances are in flight (see the capture actor).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator

from voxweft.protocol.messages import Message, SpeechChunk, Status, is_draft

#: Utterances one stage holds at most: minutes of speech, a few MB of PCM at the segmenter.
OUTBOX_UTTERANCES = 64
#: Inputs a receiver remembers having handled (ids are a few dozen bytes).
SEEN_INPUTS = 4096
#: How long after it is ready a (re)started stage waits for its upstream to send again.
REJOIN_WINDOW_S = 5.0
#: ... and at most how long while the upstream's heartbeat says it is in a model call (it
#: reads our heartbeat, and sends again, once the call is over: an asr behind the speaker
#: takes its queued segments first).
REJOIN_BUSY_MAX_S = 30.0
#: A heartbeat older than this says nothing about whether its sender is busy now.
BUSY_HEARD_S = 2.0
#: Utterances a heartbeat lists as held (the oldest): what a missed Done leaves behind is the
#: oldest held, so it is always asked about.
HOLDING_LISTED = 16
#: Dones a stage remembers (ids are a few dozen bytes).
FINISHED_UTTERANCES = 1024


class Outbox:
    """What this stage sent per utterance, in send order, until the utterance is done."""

    def __init__(self, limit: int = OUTBOX_UTTERANCES) -> None:
        self.items: collections.OrderedDict[str, list[Message]] = collections.OrderedDict()
        self.limit = limit
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.items)

    def keep(self, msg: Message) -> str | None:
        """Hold `msg` (not a draft); return the utterance forgotten to make room, if any."""
        if is_draft(msg):
            return None
        self.items.setdefault(msg.utt, []).append(msg)
        if len(self.items) > self.limit:
            utt, _ = self.items.popitem(last=False)
            self.dropped += 1
            return utt
        return None

    def release(self, utt: str) -> bool:
        """Forget an utterance the player is done with; True when it was held."""
        return self.items.pop(utt, None) is not None

    def all(self) -> Iterator[Message]:
        """Everything held, oldest utterance first, each in its send order."""
        for messages in list(self.items.values()):
            yield from messages

    def oldest(self, n: int = HOLDING_LISTED) -> list[str]:
        """The `n` oldest utterances held (safe from the heartbeat thread: one C call)."""
        return list(itertools.islice(self.items, n))


class Recent:
    """A bounded set that forgets its oldest member first (ids, keys: a few dozen bytes)."""

    def __init__(self, limit: int) -> None:
        self.items: collections.OrderedDict[object, None] = collections.OrderedDict()
        self.limit = limit

    def __contains__(self, item: object) -> bool:
        return item in self.items

    def add(self, item: object) -> None:
        """Remember `item` (the oldest is forgotten beyond `limit`)."""
        self.items[item] = None
        if len(self.items) > self.limit:
            self.items.popitem(last=False)


class Finished(Recent):
    """The utterances the player is done with (the Dones heard)."""

    def __init__(self, limit: int = FINISHED_UTTERANCES) -> None:
        super().__init__(limit)


class Seen:
    """Bounded memory of the inputs already handled, by (type, utterance, index).

    A speech chunk also by its sender's epoch: it belongs to one synthesis, and a restarted
    tts makes a new one (actors.player `_of_synthesis`), whose chunk i is not the old one's.
    """

    def __init__(self, limit: int = SEEN_INPUTS) -> None:
        self.keys = Recent(limit)

    @staticmethod
    def key(msg: Message) -> tuple:
        """What identifies an input on the utterance path."""
        return (msg.TYPE, getattr(msg, "utt", ""), getattr(msg, "index", 0),
                msg.epoch if isinstance(msg, SpeechChunk) else 0)

    def __contains__(self, msg: Message) -> bool:
        return not is_draft(msg) and self.key(msg) in self.keys

    def add(self, msg: Message) -> None:
        """Remember `msg` as handled (drafts are not remembered: each is new)."""
        if is_draft(msg):
            return
        self.keys.add(self.key(msg))


class Resync:
    """Decides when a sender must send its outbox again to its downstream stage."""

    def __init__(self, me: str, epoch: int) -> None:
        self.me = me
        self.epoch = epoch
        self.token: tuple[int, int] | None = None   # (downstream epoch, its link count)

    def check(self, status: Status) -> bool:
        """True when `status` shows the downstream stage (re)joined us since the last check.

        It has joined once it hears our current epoch (its subscription to us is live);
        every restart or broken link of it changes the token.
        """
        if status.peers.get(self.me) != self.epoch:
            self.token = None   # it does not hear us (yet): send again once it does
            return False
        token = (status.epoch, status.links.get(self.me, 0))
        if token == self.token:
            return False
        self.token = token
        return True


class Rejoin:
    """A (re)started stage takes its upstream's messages in utterance order.

    While a stage loads, its upstream goes on sending: those messages wait in ZeroMQ's queue
    ahead of the held utterances the upstream sends again once it sees that the new stage
    hears it (`Resync`). Taken as they come, later utterances would be spoken before earlier
    ones. So, for `window_s` after the stage is ready, what an upstream that heartbeats sends
    on the utterance path is held until that upstream has had one of our heartbeats sent
    after we first heard it (its `echo_sent` for us says so): its resend has then gone out,
    and the held messages are taken in the order of their last copy (a message sent live and
    again counts where it was sent again). A sender that never gets there (a replay, a
    test's stand-in) is released when the window ends: nothing is ever dropped here. One
    whose heartbeat says it is in a model call (`busy_s`) has not read ours yet: it is
    waited for past the window, up to `busy_max_s` (an asr behind the speaker after a
    minute-long cut sent again only once its queued segments were done; its live utterances
    were taken first and journalled before the resent ones, CI 2026-12-07).

    An actor upstream of us (`upstreams`) is held from the first message, even before its
    first heartbeat reaches us: a player killed while tts sent two pieces took the second,
    sent live before tts's heartbeat came, ahead of the first, sent again (the chaos test).
    Any other sender is held only once we have heard it heartbeat.
    """

    def __init__(self, me: str, window_s: float = REJOIN_WINDOW_S,
                 upstreams: frozenset[str] = frozenset(),
                 busy_max_s: float = REJOIN_BUSY_MAX_S) -> None:
        self.me, self.window_s, self.upstreams = me, window_s, upstreams
        self.busy_max_s = busy_max_s
        self.busy: dict[str, float] = {}        # sender -> when its heartbeat said busy
        self.until: float | None = None         # set when the stage is ready
        self.heard_ns: dict[str, int] = {}      # sender -> when we first heard it (our ns)
        self.caught_up: set[str] = set()        # senders that have sent us their resend
        self.held: dict[str, list[Message]] = {}
        self.sender_until: dict[str, float] = {}   # a restarted sender's own window
        self.broken: set[str] = set()           # senders whose link to us broke

    def ready(self, now: float) -> None:
        """The stage is ready: the window starts."""
        self.until = now + self.window_s

    def holding(self, now: float) -> bool:
        """Whether the window is open."""
        return self.until is not None and now < self.until

    def link_lost(self, src: str) -> None:
        """Our link to `src` broke (it stopped, or the network): see `restarted`."""
        if src in self.upstreams:
            self.broken.add(src)

    def restarted(self, src: str, now: float) -> None:
        """`src`, upstream of us, restarted or is heard again after a break: held.

        As at our own start: from a new epoch, or its first message after its link broke.
        What it sent before our subscription to it was live again is lost (PUB/SUB), and
        comes again in its resend, after what it sent live since: a restarted mt's utterance
        7 reached tts before 5 and 6, and was spoken first (test_kills_close).
        """
        self.broken.discard(src)
        if src in self.upstreams:
            self.sender_until[src] = now + self.window_s
            self.caught_up.discard(src)
            self.heard_ns.pop(src, None)

    def _open(self, src: str, now: float) -> bool:
        return self.holding(now) or now < self.sender_until.get(src, 0.0)

    def _waiting(self, src: str, now: float) -> bool:
        """Whether `src`'s resend is still waited for.

        Its window, or past it while its heartbeat says it is in a model call (up to
        `busy_max_s` after the window opened).
        """
        if self._open(src, now):
            return True
        return now - self.busy.get(src, -BUSY_HEARD_S) < BUSY_HEARD_S and \
            self._open(src, now - self.busy_max_s + self.window_s)

    def hold(self, msg: Message, now: float) -> bool:
        """Hold `msg` (True) when it comes from an upstream that has not caught us up yet."""
        if is_draft(msg) or not self._waiting(msg.src, now):
            return False
        if msg.src in self.caught_up or \
                (msg.src not in self.heard_ns and msg.src not in self.upstreams):
            return False
        self.held.setdefault(msg.src, []).append(msg)
        return True

    def status(self, status: Status, now_ns: int, now: float | None = None) -> list[Message]:
        """A sender's heartbeat: what to take now that it has caught us up, if anything.

        Every heartbeat of ours sent after we first heard a sender tells it we hear it; once
        it has had one (`echo_sent`), it has sent again all it holds for us. `now`
        (monotonic): when it came, to wait past the window for a sender in a model call.
        """
        if self.until is None:
            return []
        if now is not None:
            if status.busy_s > 0:
                self.busy[status.src] = now
            else:
                self.busy.pop(status.src, None)
        # +50 ms: a heartbeat built just before we heard the sender is stamped a moment later
        since = self.heard_ns.setdefault(status.src, now_ns + 50_000_000)
        if status.src in self.caught_up or status.echo_sent.get(self.me, 0) < since:
            return []
        self.caught_up.add(status.src)
        return self._release(status.src)

    def expired(self, now: float, pending: bool = False) -> list[Message]:
        """Once a sender's window has closed, everything still held of it, in order.

        `pending`: our own input queue still holds messages. Not released then (for at most
        another window): the sender's resend may be among them, queued behind work that kept
        us busy past the window (a restarted tts made drafts for 6 s beside two hogs, then
        spoke the live utterance 5 it held before the resent 0-4, test_kills_close). Taken
        after the window, the resend is not held, so it goes first.
        """
        def due(src: str) -> bool:
            if self._waiting(src, now):
                return False
            return not pending or not self._open(src, now - self.window_s)

        return [m for src in list(self.held) if due(src) for m in self._release(src)]

    def _release(self, src: str) -> list[Message]:
        held = self.held.pop(src, [])
        last = {Seen.key(m): i for i, m in enumerate(held)}
        return [m for i, m in enumerate(held) if last[Seen.key(m)] == i]
