"""An actor's traffic under garbage: sequence numbers that lie, and a heartbeat that must not
die of a report it cannot send (issue 35, part 6)."""

from __future__ import annotations

from types import SimpleNamespace

import zmq

from voxweft.actors.runtime import Actor, Runtime
from voxweft.actors.traffic import MAX_GAP
from voxweft.protocol.codec import MAX_WIRE_INT, decode, encode
from voxweft.protocol.messages import Status, Transcript, stamp


class _Mt(Actor):
    name = "mt"
    downstream = "tts"

    def handle(self, msg):
        return ()


def _runtime():
    return Runtime(_Mt(SimpleNamespace(actors={}), SimpleNamespace(host="")))


def test_sequence_jumps_are_counted_once_and_the_heartbeat_still_encodes():
    # Two frames, each a jump to the wire's largest seq, used to add 2^62 twice to the gap
    # counter: the heartbeat then could not be encoded, its thread died, and the actor ran on
    # with nobody to see it.
    rt = _runtime()
    seqs = [1, 2, 5, MAX_WIRE_INT // 2, MAX_WIRE_INT, 1, 2 + MAX_GAP + 1]
    for seq in seqs:
        rt._note(stamp(Transcript(utt="u1", text="x"), src="asr", epoch=7, seq=seq))
    assert rt.actor.counters["gaps"] == 2              # 3 and 4: lost on the way
    assert rt.actor.counters["seq_jumps"] == 3         # garbage, counted once each
    status = decode(encode(stamp(rt.status(), src="mt", epoch=1, seq=1)))
    assert status.counters["gaps"] == 2 and status.counters["seq_jumps"] == 3


def test_the_heartbeat_sends_a_plain_status_when_its_report_fails():
    rt = _runtime()
    sink = rt.ctx.socket(zmq.PULL)
    sink.bind("inproc://beats")
    sock = rt.ctx.socket(zmq.PUSH)
    sock.connect("inproc://beats")
    try:
        rt._beat(sock)
        assert decode(sink.recv_multipart()).state != "degraded"
        rt.actor.counters["rx"] = 2 ** 70   # a counter past what msgpack can carry
        rt._beat(sock)
        sent = decode(sink.recv_multipart())
        assert isinstance(sent, Status) and sent.state == "degraded"
        assert "status report failed" in sent.detail
        assert rt.actor.counters["status_failed"] == 1

        def broken():
            raise KeyError("a bug in a report")

        rt.status = broken
        rt._beat(sock)
        assert decode(sink.recv_multipart()).state == "degraded"
    finally:
        sink.close(0)
        sock.close(0)


def test_a_done_or_status_is_taken_only_from_the_socket_of_the_actor_it_names():
    """A Done forged by another publisher we hear would silence that utterance for good."""
    from voxweft.protocol.messages import Done

    rt = _runtime()
    pull = rt.ctx.socket(zmq.PULL)
    pull.bind("inproc://player")
    push = rt.ctx.socket(zmq.PUSH)
    push.connect("inproc://player")
    rt.socket_peer[pull] = "player"
    try:
        for forged in (stamp(Done(utt="u1"), src="tts", epoch=1, seq=1),
                       stamp(Status(state="ready"), src="asr", epoch=1, seq=1)):
            push.send_multipart(encode(forged))
        import time

        time.sleep(0.05)
        rt._receive(pull)
        assert "u1" not in rt.finished and "asr" not in rt.peers
        assert rt.actor.counters["bad_src"] == 2
        push.send_multipart(encode(stamp(Done(utt="u1"), src="player", epoch=1, seq=1)))
        time.sleep(0.05)
        rt._receive(pull)
        assert "u1" in rt.finished and rt.actor.counters["bad_src"] == 2
    finally:
        push.close(0)
        pull.close(0)
