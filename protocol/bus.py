"""The bus, declared once: every topic, its type, who sends it, on which socket, who takes it.

The six actors talk over two kinds of socket: each actor's PUB (a topic per message type,
`<type>.<sender>`, so a subscriber filters by type or by sender) and the segmenter's PUSH
queue (utterances to the asr workers, each taken once). Each host's supervisord event
listener publishes the actors' process states on its own PUB (`events`). This module is the
one place that says which is which:

* the actor runtime subscribes an actor to what :func:`inputs` allows it (an actor picks, by
  its settings, among the routes declared for it; a pick not declared here is a wiring
  error at start, and in the unit tests);
* the tools (`tap`, `interpret`, `watch`, the captions page, the bench) read what they watch
  with :func:`watched`;
* docs/protocol.md's table is :func:`table`, and a test keeps it and the README's diagram in
  step with :data:`ROUTES`.

No other module writes a topic as a literal (a unit test fails on one): adding a message type
is its dataclass in :mod:`protocol.messages`, one :class:`Route` here, and its handler.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxweft.protocol import messages as m
from voxweft.protocol.messages import Message

#: The six actors, upstream first.
ACTORS = ("capture", "segmenter", "asr", "mt", "tts", "player")
#: Every actor (a heartbeat, a `done`): the sender or taker of a route any actor may use.
ANY = "*"
#: The host's supervisord event listener (deploy/events.py).
SUPERVISOR = "supervisor"
#: The tools that watch the bus (they take, never send).
TOOLS = ("tap", "interpret", "watch", "captions", "bench", "up")

PUB, PUSH, EVENTS = "PUB", "PUSH", "events"


@dataclass(frozen=True)
class Route:
    """One message type on the bus: `senders` send it on `socket`, `takers` act on it."""

    message: type[Message]
    senders: tuple[str, ...]    # actors, ANY, or SUPERVISOR
    socket: str                 # PUB, PUSH (a work queue: each message to one taker) or EVENTS
    takers: tuple[str, ...]     # actors that subscribe (PUB) or pull (PUSH); ANY: any actor
    watchers: tuple[str, ...]   # tools that read it (`tap` reads every PUB topic)
    why: str                    # one line: what it is for

    @property
    def type(self) -> str:
        """The message type's name on the wire (the first part of its topic)."""
        return self.message.TYPE

    @property
    def topic(self) -> bytes:
        """The SUB prefix for this type from any sender: `<type>.`."""
        return f"{self.type}.".encode()


ROUTES: tuple[Route, ...] = (
    Route(m.AudioFrame, ("capture",), PUB, ("segmenter",), ("tap", "bench"),
          "20 ms of 16 kHz mono PCM"),
    Route(m.EndOfStream, ("capture", "segmenter"), PUB, ("segmenter",),
          ("tap", "interpret", "bench"),
          "a file source ended (capture's; the segmenter's says how many utterances it made)"),
    Route(m.Segment, ("segmenter",), PUSH, ("asr",), (),
          "an utterance's speech (or a draft of the open one) to one asr worker"),
    Route(m.VadEvent, ("segmenter",), PUB, (), ("tap", "interpret", "captions", "bench"),
          "an utterance started, ended, was discarded; speech refused as not the speaker's"),
    Route(m.Voice, ("segmenter",), PUB, ("tts",), ("tap",),
          "an utterance's speech, for a voice that speaks as the speaker does"),
    Route(m.Cut, ("asr",), PUB, ("segmenter",), ("tap",),
          "commit the open utterance up to an earlier pause"),
    Route(m.Transcript, ("asr",), PUB, ("mt",), ("tap", "interpret", "watch", "captions", "bench"),
          "the source-language text of an utterance (final, or a draft)"),
    Route(m.Translation, ("mt",), PUB, ("tts",), ("tap", "interpret", "watch", "captions", "bench"),
          "the target-language text"),
    Route(m.SpeechChunk, ("tts",), PUB, ("player",), ("tap", "bench"),
          "a clause of synthesised speech, streamed"),
    Route(m.PlaybackEvent, ("player",), PUB, ("tts", "segmenter"),
          ("tap", "interpret", "watch", "captions", "bench"),
          "an utterance was queued, began or ended playing (or was skipped)"),
    Route(m.Played, ("player",), PUB, ("capture",), ("tap",),
          "what the loudspeaker is about to play, 16 kHz: capture's echo reference"),
    Route(m.Done, (ANY,), PUB, (ANY,), ("tap", "interpret", "bench"),
          "an utterance is finished (the player wrote it, or a stage dropped it): "
          "its holders may forget it"),
    Route(m.Status, (ANY,), PUB, (ANY,), ("tap", "interpret", "watch", "captions", "bench", "up"),
          "every actor's heartbeat (2 Hz): state, counters, resources, whom it hears"),
    Route(m.Supervision, (SUPERVISOR,), EVENTS, (), ("interpret", "watch", "captions"),
          "an actor's process state, from the host's supervisord event listener"),
)

_BY_TYPE: dict[type[Message], Route] = {r.message: r for r in ROUTES}


def route(message: type[Message]) -> Route:
    """The route of `message`'s type (KeyError: a type the bus does not carry)."""
    return _BY_TYPE[message]


def topic(message: type[Message], sender: str = "") -> bytes:
    """The SUB prefix for `message`'s type from any sender, or from `sender` only."""
    return route(message).topic + sender.encode()


def inputs(actor: str) -> list[tuple[str, type[Message]]]:
    """Every (sender, type) `actor` may subscribe to; ANY as sender: any actor's."""
    return [(sender, r.message) for r in ROUTES for sender in r.senders
            if r.socket == PUB and (actor in r.takers or ANY in r.takers)]


def check(actor: str, sender: str, message: type[Message]) -> None:
    """Raise ValueError unless the bus declares that `actor` takes `message` from `sender`."""
    r = _BY_TYPE.get(message)
    ok = r is not None and r.socket == PUB and (actor in r.takers or ANY in r.takers) and \
        (sender in r.senders or (ANY in r.senders and sender in ACTORS))
    if not ok:
        raise ValueError(f"{actor}: the bus declares no {getattr(message, 'TYPE', message)!r}"
                         f" from {sender!r} to it (protocol/bus.py ROUTES)")


def pushes(actor: str) -> tuple[type[Message], ...]:
    """The types `actor` sends on its PUSH queue rather than its PUB socket."""
    return tuple(r.message for r in ROUTES if r.socket == PUSH and actor in r.senders)


def pulls(actor: str) -> bool:
    """`actor` is a worker of a PUSH queue (the segmenter's)."""
    return any(r.socket == PUSH and actor in r.takers for r in ROUTES)


def watched(tool: str, socket: str = PUB) -> list[bytes]:
    """The topics `tool` reads from the actors' PUB sockets (or, EVENTS, the listener's)."""
    return [r.topic for r in ROUTES if tool in r.watchers and r.socket == socket]


def table() -> str:
    """docs/protocol.md's table of the bus (Markdown), from ROUTES."""
    rows = ["| topic | sender | socket | taken by | watched by | what |",
            "|---|---|---|---|---|---|"]
    for r in ROUTES:
        takers = ", ".join("every actor" if t == ANY else t for t in r.takers) or "-"
        senders = ", ".join("every actor" if s == ANY else s for s in r.senders)
        rows.append(f"| `{r.type}` | {senders} | {r.socket} | {takers} | "
                    f"{', '.join(r.watchers) or '-'} | {r.why} |")
    return "\n".join(rows) + "\n"
