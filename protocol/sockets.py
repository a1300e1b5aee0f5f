"""Socket presets, each value with its reason.

Every option is set before bind/connect: libzmq applies options only to later calls.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

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
    # Retry 0.5 s after a peer is lost, then at 1.5, 3.5 s ...: a restart (supervisord restarts
    # an actor within ~1 s) is back by 1.5 s, as with 100 ms (0.1, 0.3, 0.7, 1.5 s). A refused
    # handshake is retried after this interval every time: libzmq starts its backoff again
    # with each TCP connection (libzmq #883); at 100 ms a stale key handshook 10 times a second.
    zmq.RECONNECT_IVL: 500,
    # Back off to 2 s so a peer that stays down does not cost a busy loop.
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
#: Why a peer was refused, counted beside `peers_refused` (a test, or `status`, tells them apart).
REFUSED_WHY = {
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "refused_no_curve",      # or CURVE to a plain bus
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "refused_server_key",         # it expects another key
}


def refused_why(event: dict) -> str:
    """The counter of a refusal a bound socket's monitor reported (see BOUND_EVENTS)."""
    if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return "refused_key"       # a key the topology does not list, or an address not allowed
    if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return REFUSED_WHY.get(event["value"], "refused_protocol")
    return "refused_other"


def connect(sock: zmq.Socket, endpoint: str, curve: Curve | None = None) -> None:
    """Connect `sock` to `endpoint`, as a CURVE client where the topology says so."""
    (curve.connect if curve is not None else plain_connect)(sock, endpoint)


def bind(sock: zmq.Socket, endpoint: str, curve: Curve | None = None,
         work: bool = False) -> None:
    """Bind `sock` to `endpoint`, as a CURVE server beyond loopback where keys are set.

    `work`: a work queue, open to hosts' keys only.
    """
    if curve is not None:
        curve.bind(sock, endpoint, work)
    else:
        plain_bind(sock, endpoint)


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
    bind(sock, endpoint, curve, work=True)
    return sock


def pull(ctx: zmq.Context, endpoints: list[str], curve: Curve | None = None) -> zmq.Socket:
    """A PULL socket connected to each upstream PUSH endpoint."""
    sock = _socket(ctx, zmq.PULL, PULL)
    for endpoint in endpoints:
        connect(sock, endpoint, curve)
    return sock


class Redial:
    """Connects again, after a wait, the endpoints of connections libzmq dropped for good.

    libzmq does not reconnect after a protocol error (a frame over MAXMSGSIZE, a refused
    handshake), so the runtime connects again itself. Connected again at once every time, a
    peer refused every time handshook ~600 times a second, a log line each; so only a
    connection that lasted (longer than RECONNECT_IVL_MAX) is made again at once, and while
    they fail at once the wait is libzmq's own backoff: RECONNECT_IVL doubling up to _MAX.
    """

    FIRST_S = COMMON[zmq.RECONNECT_IVL] / 1000
    MOST_S = COMMON[zmq.RECONNECT_IVL_MAX] / 1000

    def __init__(self, curve: Curve | None = None) -> None:
        self.curve = curve
        self.due: dict[tuple[zmq.Socket, str], float] = {}   # when to connect again
        # the last wait and when it ended (the connection's start), by (socket, endpoint)
        self.waits: dict[tuple[zmq.Socket, str], tuple[float, float]] = {}

    def lost(self, sock: zmq.Socket, endpoint: str, now: float) -> float:
        """`sock` lost `endpoint` (a monitor's EVENT_DISCONNECTED): connect it again later.

        Returns the wait: 0 for a connection that lasted, more while they fail at once.
        """
        try:
            sock.disconnect(endpoint)   # libzmq's own retry, if any, would not wait
        except zmq.ZMQError:
            pass   # libzmq already forgot it
        wait, since = self.waits.get((sock, endpoint), (0.0, float("-inf")))
        wait = 0.0 if now - since > self.MOST_S else min(max(2 * wait, self.FIRST_S),
                                                         self.MOST_S)
        self.waits[(sock, endpoint)] = (wait, now + wait)
        self.due[(sock, endpoint)] = now + wait
        return wait

    def connect_due(self, now: float) -> float | None:
        """Connect what is due; the seconds until the next is (None: nothing waits)."""
        for (sock, endpoint), at in list(self.due.items()):
            if at <= now:
                del self.due[(sock, endpoint)]
                connect(sock, endpoint, self.curve)
        return min(self.due.values()) - now if self.due else None


#: Where kernels take the local port of an outgoing connection when none is set: Linux's
#: default, and IANA's (macOS, Windows). A port a socket binds in this range can be taken
#: first: a ZeroMQ socket that keeps reconnecting to a port nothing listens on yet is, now
#: and then, given that very port and connected to itself (TCP simultaneous open), and it
#: holds it: the actor that comes up to bind it fails "Address already in use" (CI, once;
#: 4 SUB sockets reconnecting every 1 ms took an even port in that range within 3 s here).
LINUX_EPHEMERAL = (32768, 60999)
IANA_EPHEMERAL = (49152, 65535)
#: Where `free_ports` looks: under both ranges, above the well-known ports and the usual
#: development servers, and under the shipped topologies' ports (27600-27607), so that
#: `interpret` never takes one a user's `up` is about to bind.
FREE_FROM, FREE_TO = 20000, 27599


def ephemeral_range() -> tuple[int, int]:
    """The range (inclusive) this machine takes outgoing connections' local ports from."""
    try:
        if sys.platform.startswith("linux"):
            low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
            return int(low), int(high)
        if sys.platform == "darwin":
            out = subprocess.run(["sysctl", "-n", "net.inet.ip.portrange.first",
                                  "net.inet.ip.portrange.last"], capture_output=True,
                                 text=True, timeout=5).stdout.split()
            return int(out[0]), int(out[1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        pass
    return IANA_EPHEMERAL


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports free now on `host`, outside the ephemeral range (see above).

    The kernel's bind(0) would give ports inside it, which a connection may take.
    """
    low, high = ephemeral_range()
    candidates = [p for p in range(FREE_FROM, FREE_TO + 1) if not low <= p <= high]
    random.shuffle(candidates)
    held: list[socket.socket] = []
    try:
        for port in candidates:
            if len(held) == n:
                break
            s = socket.socket()
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            held.append(s)
        if len(held) < n:
            raise OSError(f"fewer than {n} free ports between {FREE_FROM} and {FREE_TO}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()
