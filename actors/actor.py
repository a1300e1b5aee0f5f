"""The actor contract: what an actor author writes, and nothing about ZeroMQ or processes.

An actor subclasses :class:`Actor` (or :class:`EngineActor` when it owns a stage's engine),
says what it listens to (``subscriptions()``), builds its model in ``load()`` and turns each
input into outputs in ``handle()``; ``tick()``, ``health()``, ``held()`` and ``duplicate()``
are there for the actors that need them. The runtime (actors.runtime) runs one such object
in a process: its sockets, threads, poll loop, custody and heartbeats. The contract and the
plumbing live in separate modules (issue 35) so that writing or reading an actor means
reading this file only, and changing the plumbing never touches what an actor sees.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from typing import ClassVar

from voxweft.actors import engines
from voxweft.protocol.messages import Message, Trace, traced


class Actor:
    """Base class of the six actors: subclasses write load() and handle()."""

    name: ClassVar[str] = ""
    #: The next stage on the utterance path. When set, the runtime keeps this actor's
    #: utterance-path outputs until the player's Done and sends them again whenever that
    #: stage restarts or rejoins (see actors.custody).
    downstream: ClassVar[str] = ""

    def __init__(self, topology, config) -> None:
        self.topology = topology
        self.config = config
        self.epoch = 0            # set by the runtime before load()
        self.recv_ns = 0          # wall time the message being handled was received
        # Wall time this actor last became free to take a message (the end of its previous
        # call): a message sent before it waited in the queue, not on the wire.
        self.ready_ns = 0
        self.counters: collections.Counter[str] = collections.Counter()
        self.log = logging.getLogger(f"voxweft.{self.name}")
        # Progress on the audio stream, published in the heartbeat (file flow control and
        # resuming after a restart read it): which stream, and how far in (ms).
        self.stream = ""
        self.media_ms = 0
        # What its engine costs on this machine, measured at warm-up (actors.budget).
        self.budget: dict[str, float] = {}
        # Upstream actors to ask for everything they still hold for us (a message lost on
        # the way that no sequence gap showed): the runtime counts it as a broken link.
        self.again: set[str] = set()

    def arrived(self, trace: Trace, stage: str) -> Trace:
        """`trace` with this message's "<stage>.ready" and "<stage>.recv" events."""
        return traced(traced(trace, f"{stage}.ready", self.ready_ns), f"{stage}.recv",
                      self.recv_ns)

    # -- what an actor author writes ------------------------------------------------------
    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """(upstream actor, message type) pairs this actor's SUB socket listens to.

        Each one a route `protocol.bus` declares for this actor (checked at start); which
        PUSH queue it works and which types it pushes the bus says alone.
        """
        return []

    def engine_name(self) -> str:
        """Name of the engine this actor owns, for status lines.

        With the variant it chose at load when it has several ("faster-whisper int8").
        """
        chosen = getattr(getattr(self, "engine", None), "chosen", "")
        return f"{getattr(self.config, 'engine', '')} {chosen}".strip()

    def load(self) -> None:
        """Build the model once (main thread). Raise StartupError with one clear line."""

    def warmup(self) -> None:
        """Run the model once so the first real request does not pay for lazy setup."""

    def handle(self, msg: Message) -> Iterable[Message]:
        """Turn one input message into output messages (may be a generator)."""
        return ()

    def tick(self) -> Iterable[Message]:
        """Called every loop turn, also without input: sources and timers live here."""
        return ()

    def tick_interval_s(self) -> float:
        """Longest time the loop may wait for input before calling tick() again."""
        return 0.1

    def health(self) -> str:
        """A non-empty reason when the actor is degraded (checked by the heartbeat)."""
        return ""

    def held(self) -> int:
        """Utterances this actor holds besides its outbox (the player's queue)."""
        return 0

    def progress(self) -> dict[str, int]:
        """The player: words it has whole of each utterance it has begun (Status.progress).

        Called from the heartbeat thread: return a dict the main thread no longer changes.
        """
        return {}

    def echo_state(self) -> dict[str, float]:
        """Capture cancelling echo: how it goes (Status.echo); {} for every other actor.

        Called from the heartbeat thread: return a new dict.
        """
        return {}

    def duplicate(self, msg: Message) -> Iterable[Message]:
        """Called instead of handle() for an utterance-path input handled before."""
        return ()

    def close(self) -> None:
        """Release devices and files at shutdown."""


class EngineActor(Actor):
    """An actor that owns the engine of the stage it is named for: asr, mt or tts.

    Its engine is built (named and configured by the actor's config, validated, not loaded)
    as ``self.engine`` when the actor is constructed, so a wrong engine name or setting fails
    at start, before any model is read; ``load()`` then loads it.
    """

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.engine = engines.build(self.name, config.engine, config.engine_settings())
