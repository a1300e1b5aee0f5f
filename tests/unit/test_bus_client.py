"""The one bus client on real sockets: it decodes, counts and skips garbage, and times out."""

from __future__ import annotations

import time

import pytest
import zmq

from voxweft.protocol import sockets
from voxweft.protocol.client import BusClient
from voxweft.protocol.codec import encode
from voxweft.protocol.messages import Status, Transcript, stamp

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def publisher(tmp_path):
    ctx = zmq.Context()
    pub = sockets.pub(ctx, f"ipc://{tmp_path}/pub")
    yield pub
    pub.close(0)
    ctx.term()


def _joined(pub: zmq.Socket, bus: BusClient) -> None:
    """Publish heartbeats until the client hears one: PUB/SUB joins asynchronously."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pub.send_multipart(encode(stamp(Status(state="ready"), src="mt", epoch=1, seq=1)))
        if bus.recv(0.05) is not None:
            while bus.recv(0.05) is not None:   # what was still queued
                pass
            return
    pytest.fail("the client never heard the publisher")


def test_garbage_is_counted_and_skipped(publisher):
    endpoint = publisher.getsockopt_string(zmq.LAST_ENDPOINT)
    with BusClient([endpoint]) as bus:
        _joined(publisher, bus)
        publisher.send_multipart([b"transcript.asr", b"\xc1 not msgpack"])
        publisher.send_multipart([b"junk"])
        msg = Transcript(utt="u1", src_lang="en", text="hello")
        publisher.send_multipart(encode(stamp(msg, src="asr", epoch=1, seq=1)))
        got = bus.recv(5)
        assert isinstance(got, Transcript) and got.text == "hello"
        assert bus.bad == {"bad_header": 1, "bad_frames": 1}
    assert bus.sock.closed


def test_raw_frames_come_with_the_error(publisher):
    endpoint = publisher.getsockopt_string(zmq.LAST_ENDPOINT)
    with BusClient([endpoint]) as bus:
        _joined(publisher, bus)
        publisher.send_multipart([b"junk"])
        got = bus.receive(5)
        assert got is not None and got.frames == [b"junk"] and got.message is None
        assert got.error.kind == "bad_frames" and got.recv_ns > 0


def test_topics_filter_and_timeouts_end_the_wait(publisher):
    endpoint = publisher.getsockopt_string(zmq.LAST_ENDPOINT)
    with BusClient([], [b"status."]) as bus:
        bus.listen([endpoint], [b"transcript.asr"])
        _joined(publisher, bus)
        for src in ("asr", "other"):
            msg = Transcript(utt="u1", src_lang="en", text=src)
            publisher.send_multipart(encode(stamp(msg, src=src, epoch=1, seq=1)))
        assert [m.text for m in bus.messages(0.5)] == ["asr"]
        t0 = time.monotonic()
        assert bus.recv(0.2) is None and bus.recv(0) is None
        assert list(bus.stream(0.2)) == []
        assert 0.35 < time.monotonic() - t0 < 2


def test_a_recorder_hears_a_restarted_publisher_from_its_first_messages(tmp_path):
    """A session's recorder binds and every actor's PUB dials it (deploy.session): a client
    that connects to a publisher hears a restarted one only when its reconnect, backing off
    up to 2 s, reaches it, while a restarted mt translates what asr sends again 0.4-0.9 s
    after it starts: CI's chaos run lost two translations from translation.jsonl so."""
    with BusClient([], [b""]) as recorder:
        endpoint = recorder.bind()
        assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith(":*")
        ctx = zmq.Context()
        try:
            for epoch in (1, 2, 3):   # the same actor, started three times on one port
                pub = sockets.pub(ctx, f"ipc://{tmp_path}/mt")
                try:
                    sockets.connect(pub, endpoint)
                    # The handshake and our subscription: milliseconds, while we listen
                    # (libzmq attaches a dialling peer when the socket is used: `attend`).
                    assert recorder.recv(0.2) is None
                    pub.send_multipart(encode(stamp(Transcript(utt=f"u{epoch}", text="x"),
                                                    src="mt", epoch=epoch, seq=1)))
                    got = recorder.recv(2.0)
                finally:
                    pub.close(0)
                assert got is not None and got.utt == f"u{epoch}", f"start {epoch}: {got}"
            pub = sockets.pub(ctx, f"ipc://{tmp_path}/asr")
            try:   # not listening meanwhile (a session waiting for its actors): attended
                sockets.connect(pub, endpoint)
                time.sleep(0.2)
                recorder.attend()
                time.sleep(0.1)
                pub.send_multipart(encode(stamp(Transcript(utt="a1", text="x"), src="asr",
                                                epoch=1, seq=1)))
                got = recorder.recv(2.0)
            finally:
                pub.close(0)
            assert got is not None and got.utt == "a1"
        finally:
            ctx.term()
