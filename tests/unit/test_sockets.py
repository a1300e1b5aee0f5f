"""Tests for protocol.sockets on real libzmq sockets over tcp loopback.

Checks that every preset option is really set, that PUSH never blocks the actor loop, that an
encoded message survives PUB->SUB and PUSH->PULL, and what happens to a frame over
MAXMSGSIZE: libzmq treats it as a protocol error and drops the *connection* (the receiver does
not reconnect by itself), not just the message. See test_oversized_frame_drops_connection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from voxweft.protocol import sockets
from voxweft.protocol.codec import MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES, decode, encode
from voxweft.protocol.messages import AudioFrame, Segment, Status

ANY_PORT = "tcp://127.0.0.1:*"

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)   # closes every socket made in the test with linger 0, then terms
    assert context.closed


def _endpoint(sock: zmq.Socket) -> str:
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith(":0")
    return endpoint


def _pair(ctx: zmq.Context, kind: str, topics: tuple[bytes, ...] = (b"",)):
    """A bound sender and a connected receiver made by the presets."""
    if kind == "pub":
        tx = sockets.pub(ctx, ANY_PORT)
        rx = sockets.sub(ctx, [_endpoint(tx)], list(topics))
    else:
        tx = sockets.push(ctx, ANY_PORT)
        rx = sockets.pull(ctx, [_endpoint(tx)])
    return tx, rx


def _send_until_received(tx: zmq.Socket, rx: zmq.Socket, frames: list[bytes],
                         within_s: float = 5.0) -> list[bytes]:
    """Resend `frames` until `rx` gets a message (PUB drops until the SUB has joined)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            tx.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # PUSH: peer not connected yet
        if rx.poll(50):
            return rx.recv_multipart()
    pytest.fail(f"nothing received within {within_s} s")


def _drain(rx: zmq.Socket, for_s: float) -> list[list[bytes]]:
    got = []
    deadline = time.monotonic() + for_s
    while (left := deadline - time.monotonic()) > 0:
        if rx.poll(max(1, int(left * 1000))):
            got.append(rx.recv_multipart())
    return got


def _events(monitor: zmq.Socket, for_s: float) -> list[int]:
    events = []
    deadline = time.monotonic() + for_s
    while (left := deadline - time.monotonic()) > 0:
        if monitor.poll(max(1, int(left * 1000))):
            events.append(recv_monitor_message(monitor)["event"])
    return events


# --------------------------------------------------------------------------- presets


MAXMSG = MAX_PAYLOAD_BYTES + MAX_HEADER_BYTES


@pytest.mark.parametrize("kind", ["pub", "sub", "push", "pull"])
def test_presets_are_applied(ctx: zmq.Context, kind: str):
    tx, rx = _pair(ctx, "pub" if kind in ("pub", "sub") else "push")
    sock = tx if kind in ("pub", "push") else rx
    preset = {"pub": sockets.PUB, "sub": sockets.SUB, "push": sockets.PUSH,
              "pull": sockets.PULL}[kind]
    for option, value in preset.items():
        assert sock.getsockopt(option) == value, (kind, option)
    expected = {
        "pub": {zmq.SNDHWM: 10_000, zmq.MAXMSGSIZE: 4096, zmq.IMMEDIATE: 0},
        "sub": {zmq.RCVHWM: 10_000, zmq.MAXMSGSIZE: MAXMSG},
        "push": {zmq.SNDHWM: 100, zmq.IMMEDIATE: 1, zmq.SNDTIMEO: 0, zmq.MAXMSGSIZE: 4096},
        "pull": {zmq.RCVHWM: 100, zmq.MAXMSGSIZE: MAXMSG},
    }[kind]
    common = {zmq.LINGER: 0, zmq.HEARTBEAT_IVL: 1000, zmq.HEARTBEAT_TIMEOUT: 3000,
              zmq.HEARTBEAT_TTL: 3000, zmq.RECONNECT_IVL: 500, zmq.RECONNECT_IVL_MAX: 2000}
    for option, value in {**common, **expected}.items():
        assert sock.getsockopt(option) == value, (kind, option)


def test_maxmsgsize_admits_the_largest_valid_message():
    # The inbound limit must not refuse a header or payload the codec accepts.
    assert sockets.INBOUND[zmq.MAXMSGSIZE] >= MAX_PAYLOAD_BYTES
    assert sockets.INBOUND[zmq.MAXMSGSIZE] >= MAX_HEADER_BYTES


# --------------------------------------------------------------------------- PUSH never blocks


def test_push_without_peer_does_not_block(ctx: zmq.Context):
    push = sockets.push(ctx, ANY_PORT)
    frames = encode(Segment(src="segmenter", pcm=np.zeros(1600, np.float32)))
    start = time.monotonic()
    with pytest.raises(zmq.Again):
        push.send_multipart(frames, flags=zmq.NOBLOCK)
    with pytest.raises(zmq.Again):
        push.send_multipart(frames)  # SNDTIMEO = 0: even a blocking send returns at once
    assert time.monotonic() - start < 0.5


def test_push_to_dead_endpoint_does_not_block(ctx: zmq.Context):
    # A PULL connected to a port where nothing listens; the PUSH side is bound elsewhere.
    push = sockets.push(ctx, ANY_PORT)
    probe = ctx.socket(zmq.PULL)
    probe.bind(ANY_PORT)
    dead = _endpoint(probe)
    probe.close(linger=0)
    sockets.pull(ctx, [dead])   # connecting to nothing must not raise either
    start = time.monotonic()
    with pytest.raises(zmq.Again):
        push.send_multipart([b"x", b"y"])
    assert time.monotonic() - start < 0.5


# --------------------------------------------------------------------------- round trips


def test_pub_sub_round_trip(ctx: zmq.Context):
    pcm = np.sin(np.linspace(0, 100, 320, dtype=np.float32))
    msg = AudioFrame(src="capture", epoch=2, seq=17, sent_ns=123, sample_rate=16000, pcm=pcm,
                     media_s=0.34, capture_ns=456)
    pub, sub = _pair(ctx, "pub", topics=(b"audio.",))
    frames = _send_until_received(pub, sub, encode(msg))
    assert len(frames) == 3 and frames[0] == b"audio.capture"
    out = decode(frames)
    assert out == msg and np.array_equal(out.pcm, pcm) and out.pcm.dtype == np.float32


def test_sub_filters_on_topic(ctx: zmq.Context):
    pub, sub = _pair(ctx, "pub", topics=(b"audio.",))
    audio = encode(AudioFrame(src="capture", pcm=np.zeros(4, np.int16)))
    _send_until_received(pub, sub, audio)   # the subscription is live from here on
    pub.send_multipart(encode(Status(src="capture", state="ready")))
    pub.send_multipart(audio)
    got = _drain(sub, 0.5)
    assert got and all(f[0] == b"audio.capture" for f in got)


def test_push_pull_round_trip(ctx: zmq.Context):
    pcm = (np.arange(800, dtype=np.int16) - 400).reshape(400, 2)
    msg = Segment(src="segmenter", utt="u-7", src_lang="en", pcm=pcm, sample_rate=16000,
                  trace=(("segment", 1, 0.5),))
    push, pull = _pair(ctx, "push")
    out = decode(_send_until_received(push, pull, encode(msg)))
    assert out == msg and np.array_equal(out.pcm, pcm)


# --------------------------------------------------------------------------- MAXMSGSIZE


@pytest.mark.parametrize("kind", ["pub", "push"])
def test_largest_valid_payload_is_delivered(ctx: zmq.Context, kind: str):
    tx, rx = _pair(ctx, kind)
    _send_until_received(tx, rx, [b"warmup", b""])
    payload = bytes(MAX_PAYLOAD_BYTES)
    tx.send_multipart([b"big", b"h", payload])
    assert rx.poll(10_000)
    got = rx.recv_multipart(copy=False)
    assert [len(f.buffer) for f in got] == [3, 1, MAX_PAYLOAD_BYTES]


@pytest.mark.parametrize("kind", ["pub", "push"])
def test_oversized_frame_drops_connection(ctx: zmq.Context, kind: str):
    """A frame over MAXMSGSIZE never reaches the receiver.

    What libzmq (4.3) really does is stronger than dropping one message: the receiving
    connection fails with a protocol error and is closed, and because the session ends on a
    protocol error (rather than a connection error) the connecting SUB/PULL does not reconnect.
    Messages sent after the oversized one are lost too, until the receiver is recreated.
    """
    tx, rx = _pair(ctx, kind)
    monitor = rx.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED)
    _send_until_received(tx, rx, [b"before", b"1"])
    _events(monitor, 0.05)   # forget the connection events of the warm-up

    tx.send_multipart([b"huge", bytes(MAXMSG + 1)])
    try:
        tx.send_multipart([b"after", b"2"], flags=zmq.NOBLOCK)
    except zmq.Again:
        assert kind == "push"   # PUSH may already know it has no peer left
    assert _drain(rx, 1.0) == []   # neither the oversized frame nor the one after it
    events = _events(monitor, 2.5)  # longer than RECONNECT_IVL_MAX
    assert zmq.EVENT_DISCONNECTED in events
    assert zmq.EVENT_CONNECTED not in events   # no automatic reconnect
    for _ in range(5):
        try:
            tx.send_multipart([b"later", b"3"], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass
    assert _drain(rx, 0.5) == []
    rx.disable_monitor()
    monitor.close(linger=0)

    # The sender is unharmed: a fresh receiver on the same endpoint gets normal messages.
    rx.close(linger=0)
    endpoint = _endpoint(tx)
    fresh = sockets.sub(ctx, [endpoint], [b""]) if kind == "pub" else sockets.pull(ctx, [endpoint])
    assert _send_until_received(tx, fresh, [b"again", b"4"]) == [b"again", b"4"]


def test_a_refusal_is_counted_by_why():
    # The two-host test's strangers (no CURVE, a wrong server key; an unlisted key is ZAP's
    # refusal) are each told apart on the bound socket, not only summed into peers_refused.
    from zmq.utils.monitor import recv_monitor_message

    from voxweft.protocol.sockets import BOUND_EVENTS, refused_why

    ctx = zmq.Context()
    server_public, server_secret = zmq.curve_keypair()
    other_public, _ = zmq.curve_keypair()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.curve_server = True
    pub.curve_secretkey = server_secret
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    mon = pub.get_monitor_socket(sum(set(BOUND_EVENTS)))

    def refused(make) -> str:
        client = make()
        client.setsockopt(zmq.LINGER, 0)
        client.connect(f"tcp://127.0.0.1:{port}")
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and mon.poll(1000):
                event = recv_monitor_message(mon)
                if BOUND_EVENTS.get(event["event"]) == "peers_refused":
                    return refused_why(event)
            return "not refused"
        finally:
            client.close(0)

    def curve_sub(server_key):
        sock = ctx.socket(zmq.SUB)
        sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.curve_serverkey = server_key
        return sock

    try:
        assert refused(lambda: ctx.socket(zmq.SUB)) == "refused_no_curve"
        assert refused(lambda: curve_sub(other_public)) == "refused_server_key"
    finally:
        pub.disable_monitor()
        mon.close(0)
        pub.close(0)
        ctx.term()
