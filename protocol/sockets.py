"""Socket presets, each value with its reason.

Every option is set before bind/connect: libzmq applies options only to later calls.
"""

from __future__ import annotations

import zmq

from voxweft.protocol.codec import MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES
from voxweft.protocol.security import Curve, plain_bind, plain_connect

COMMON = {
    # Shutdown must never hang on unsent messages; a stopped actor has nothing worth waiting for.
    zmq.LINGER: 0,
    # ZMTP heartbeats: TCP alone notices a dead peer only after minutes. 1 s ping, 3 s timeout.
    zmq.HEARTBEAT_IVL: 1000,
    zmq.HEARTBEAT_TIMEOUT: 3000,
    # Ask the peer to drop us after 3 s of silence too (a frozen host on the LAN).
    zmq.HEARTBEAT_TTL: 3000,
    # Reconnect quickly after a restart (supervisord restarts an actor within ~1 s) ...
    zmq.RECONNECT_IVL: 100,
    # ... but back off to 2 s so a peer that stays down does not cost a busy loop.
    zmq.RECONNECT_IVL_MAX: 2000,
    # A connect whose SYNs go unanswered (a LAN cable pulled) is given up after 2 s and tried
    # again: left to the kernel, its retransmits (1, 2, 4 ... 32 s) delayed the reconnect
    # 12.6 s after a 60 s cut (measured across two network namespaces; with this, 0.01 s).
    zmq.CONNECT_TIMEOUT: 2000,
}

INBOUND = {
    # Refuse absurd frames before they are allocated: garbage on a port cannot eat memory.
    zmq.MAXMSGSIZE: MAX_PAYLOAD_BYTES + MAX_HEADER_BYTES,
}

# Output sockets (PUB, PUSH) take in only subscriptions and heartbeats: anything bigger is a
# hostile or broken peer, and libzmq drops its connection before allocating the frame.
OUTBOUND = {zmq.MAXMSGSIZE: 4096}

# PUB: 20 ms frames at 50/s; 10 000 messages is 200 s of audio before ZeroMQ drops
# silently. A subscriber that far behind is broken, and the publisher must never block.
PUB = {**COMMON, **OUTBOUND, zmq.SNDHWM: 10_000}

# SUB: the same depth on the receiving side, so a model call of several seconds never
# overflows the audio stream waiting behind it.
SUB = {**COMMON, **INBOUND, zmq.RCVHWM: 10_000}

PUSH = {
    **COMMON,
    **OUTBOUND,
    # Segments are the work queue; 100 utterances is minutes of speech. Beyond that we keep
    # our own counted backlog instead of blocking the segmenter.
    zmq.SNDHWM: 100,
    # Queue only to peers whose connection is complete: no stale backlog for a dead peer.
    zmq.IMMEDIATE: 1,
    # PUSH blocks when no peer is connected; never block the actor loop on send.
    zmq.SNDTIMEO: 0,
}

PULL = {**COMMON, **INBOUND, zmq.RCVHWM: 100}

#: What happens on a bound socket that is worth counting: who connected, who was refused
#: (not ZeroMQ, or the wrong socket type), who went away (or was dropped for a big frame).
BOUND_EVENTS = {
    zmq.EVENT_ACCEPTED: "peers_accepted",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "peers_refused",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "peers_refused",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "peers_refused",
    zmq.EVENT_DISCONNECTED: "peers_gone",
}


def connect(sock: zmq.Socket, endpoint: str, curve: Curve | None = None) -> None:
    """Connect `sock` to `endpoint`, as a CURVE client where the topology says so."""
    (curve.connect if curve is not None else plain_connect)(sock, endpoint)


def bind(sock: zmq.Socket, endpoint: str, curve: Curve | None = None) -> None:
    """Bind `sock` to `endpoint`, as a CURVE server beyond loopback where keys are set."""
    (curve.bind if curve is not None else plain_bind)(sock, endpoint)


def _socket(ctx: zmq.Context, kind: int, options: dict[int, int]) -> zmq.Socket:
    sock = ctx.socket(kind)
    for option, value in options.items():
        sock.setsockopt(option, value)
    return sock


def pub(ctx: zmq.Context, endpoint: str, curve: Curve | None = None) -> zmq.Socket:
    """A PUB socket bound to `endpoint`: the actor's broadcast output."""
    sock = _socket(ctx, zmq.PUB, PUB)
    bind(sock, endpoint, curve)
    return sock


def sub(ctx: zmq.Context, endpoints: list[str], topics: list[bytes],
        curve: Curve | None = None) -> zmq.Socket:
    """A SUB socket connected to each of `endpoints`, filtered on `topics`."""
    sock = _socket(ctx, zmq.SUB, SUB)
    for topic in topics:
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    for endpoint in endpoints:
        connect(sock, endpoint, curve)
    return sock


def push(ctx: zmq.Context, endpoint: str, curve: Curve | None = None) -> zmq.Socket:
    """A PUSH socket bound to `endpoint`: work handed to exactly one downstream worker."""
    sock = _socket(ctx, zmq.PUSH, PUSH)
    bind(sock, endpoint, curve)
    return sock


def pull(ctx: zmq.Context, endpoints: list[str], curve: Curve | None = None) -> zmq.Socket:
    """A PULL socket connected to each upstream PUSH endpoint."""
    sock = _socket(ctx, zmq.PULL, PULL)
    for endpoint in endpoints:
        connect(sock, endpoint, curve)
    return sock
