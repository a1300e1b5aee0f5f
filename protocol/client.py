"""The one bus client every tool uses: subscribe, decode, drop and count bad frames.

It only ever holds a SUB socket (with the `sockets.SUB` presets: LINGER 0, heartbeats, a
bounded queue), so a slow or stopped client costs the publishers nothing: ZeroMQ drops for
it, the pipeline never waits. Nothing here knows a topology: callers pass endpoints, e.g.
``[topology.pub_connect(a) for a in topology.actors]``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import zmq

from voxweft.protocol import sockets
from voxweft.protocol.codec import ProtocolError, decode
from voxweft.protocol.messages import Message, now_ns
from voxweft.protocol.security import Curve


@dataclass(frozen=True)
class Received:
    """One multipart message off the bus: its frames, when, and what they decode to."""

    recv_ns: int                           # wall clock right after the receive
    frames: list[bytes]
    message: Message | None                # None: not a valid message (see `error`)
    error: ProtocolError | None = None


class BusClient:
    """A SUB socket on `endpoints`, filtered on topic prefixes; a context manager.

    A topic filter applies to every endpoint, as on any SUB socket; topics name their
    sender (``status.capture``) when only one actor's messages are wanted.
    """

    def __init__(self, endpoints: Iterable[str] = (), topics: Iterable[bytes] = (b"",),
                 curve: Curve | None = None) -> None:
        self.ctx = zmq.Context()
        self.curve = curve     # a CURVE bus: this client's keys (protocol.security)
        self.sock = sockets.sub(self.ctx, list(endpoints), list(topics), curve)
        #: Frames dropped because they did not decode, by `ProtocolError.kind`.
        self.bad: collections.Counter[str] = collections.Counter()

    def listen(self, endpoints: Iterable[str], topics: Iterable[bytes]) -> None:
        """Also subscribe to `topics` and connect to `endpoints`."""
        for topic in topics:
            self.sock.setsockopt(zmq.SUBSCRIBE, topic)
        for endpoint in endpoints:
            sockets.connect(self.sock, endpoint, self.curve)

    def bind(self, endpoint: str = "tcp://127.0.0.1:*") -> str:
        """Also listen on `endpoint` for publishers that dial us; returns it, port chosen.

        A publisher that dials is heard from its first message after it starts; one we
        connect to is heard only once our reconnect (its backoff up to 2 s) reaches it.
        """
        sockets.bind(self.sock, endpoint, self.curve)
        return self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def attend(self) -> None:
        """Take in the publishers that dialled us since the socket was last used.

        libzmq attaches them, and sends them our subscriptions, only when the socket is
        used (a poll, a receive): until then what they publish is dropped.
        """
        self.sock.getsockopt(zmq.EVENTS)

    def receive(self, timeout_s: float | None) -> Received | None:
        """The next frames within `timeout_s` (None: wait for ever), decoded or counted bad."""
        if not self.sock.poll(None if timeout_s is None else int(timeout_s * 1000)):
            return None
        frames = self.sock.recv_multipart()
        recv_ns = now_ns()
        try:
            return Received(recv_ns, frames, decode(frames))
        except ProtocolError as exc:
            self.bad[exc.kind] += 1
            return Received(recv_ns, frames, None, exc)

    def stream(self, duration_s: float | None = None) -> Iterator[Received]:
        """Everything that arrives for `duration_s` (None: for ever); 0 takes one look."""
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = self.receive(left)
            if got is not None:
                yield got
            if got is None or left == 0:   # past the deadline even if more is queued
                return

    def messages(self, duration_s: float | None = None) -> Iterator[Message]:
        """The valid messages that arrive for `duration_s`; bad frames are skipped."""
        return (got.message for got in self.stream(duration_s) if got.message is not None)

    def recv(self, timeout_s: float | None) -> Message | None:
        """The next valid message within `timeout_s`, else None."""
        return next(self.messages(timeout_s), None)

    def close(self) -> None:
        """Close the socket (LINGER 0) and end the context."""
        if not self.sock.closed:
            self.sock.close(0)
            self.ctx.term()

    def __enter__(self) -> BusClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
