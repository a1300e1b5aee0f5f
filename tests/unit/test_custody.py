"""Custody of the utterance path: outbox, duplicate filter, when to send again."""

from __future__ import annotations

import time
from types import SimpleNamespace

import zmq

from voxweft.actors.custody import Finished, Outbox, Rejoin, Resync, Seen
from voxweft.actors.runtime import Actor, Runtime
from voxweft.protocol.codec import decode, encode
from voxweft.protocol.messages import (
    Done,
    SpeechChunk,
    Status,
    Transcript,
    Translation,
    stamp,
)


def speech(utt, index):
    return SpeechChunk(utt=utt, index=index)


def test_outbox_keeps_until_done_in_order_and_is_bounded():
    box = Outbox(limit=3)
    for msg in (speech("a", 0), speech("b", 0), speech("a", 1), speech("c", 0)):
        assert box.keep(msg) is None
    assert [(m.utt, m.index) for m in box.all()] == [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    assert box.release("a") and not box.release("a") and len(box) == 2
    box.keep(speech("d", 0))
    assert box.keep(speech("e", 0)) == "b"   # the oldest is forgotten, and counted
    assert box.dropped == 1 and [m.utt for m in box.all()] == ["c", "d", "e"]


def test_seen_tells_duplicates_by_type_utterance_and_index():
    seen = Seen(limit=2)
    seen.add(speech("a", 0))
    assert speech("a", 0) in seen and speech("a", 1) not in seen
    assert Transcript(utt="a") not in seen
    seen.add(speech("a", 1))
    seen.add(speech("a", 2))
    assert speech("a", 0) not in seen   # bounded: the oldest is forgotten


def test_drafts_are_neither_held_nor_remembered():
    box, seen = Outbox(), Seen()
    draft = Transcript(utt="a", text="The book", final=False)
    assert box.keep(draft) is None and len(box) == 0
    seen.add(draft)
    assert draft not in seen
    final = Transcript(utt="a", text="The book is on the table.")
    assert final not in seen   # the final message of the utterance is new after its draft
    box.keep(final)
    seen.add(final)
    assert list(box.all()) == [final] and final in seen
    assert Transcript(utt="a", text="The book", final=False) not in seen   # drafts: always new


def status(epoch, peers, links=None):
    return Status(src="mt", epoch=epoch, peers=peers, links=links or {})


def test_resync_sends_again_when_the_next_stage_restarts_or_rejoins():
    sync = Resync("asr", epoch=100)
    assert not sync.check(status(7, {}))             # does not hear us yet
    assert sync.check(status(7, {"asr": 100}))       # joined: send what we hold
    assert not sync.check(status(7, {"asr": 100}))   # nothing changed
    assert sync.check(status(8, {"asr": 100}))       # restarted (new epoch)
    assert sync.check(status(8, {"asr": 100}, {"asr": 1}))   # its link to us broke
    assert not sync.check(status(8, {"asr": 99}))    # hears an older us: wait
    assert sync.check(status(8, {"asr": 100}, {"asr": 1}))   # hears us again


def _from_mt(utt, final=True):
    return Translation(src="mt", utt=utt, text=utt, final=final)


def test_a_restarted_stage_takes_what_is_sent_again_before_what_came_while_it_loaded():
    # tts restarted and loaded; mt went on sending u6, u7 meanwhile. mt sends again all it
    # holds (u2..u7) once it has a heartbeat of ours saying we hear it. Order: u2..u7.
    rejoin = Rejoin("tts")
    rejoin.ready(now=0.0)
    # mt's heartbeats queued while we loaded: it heard our loading heartbeats, not that we hear it
    assert rejoin.status(Status(src="mt", echo_sent={"tts": 50}), now_ns=100) == []
    assert rejoin.status(Status(src="mt", echo_sent={"tts": 90}), now_ns=101) == []
    live = [_from_mt("u6"), _from_mt("u7")]
    again = [_from_mt(u) for u in ("u2", "u3", "u4", "u5", "u6", "u7")]
    assert all(rejoin.hold(m, now=1.0) for m in live + again)
    assert not rejoin.hold(_from_mt("u8", final=False), now=1.0)     # drafts never wait
    # mt has had a heartbeat of ours sent after we heard it (at 100): it has sent again
    taken = rejoin.status(Status(src="mt", echo_sent={"tts": 100 + 60_000_000}), now_ns=200)
    assert [m.utt for m in taken] == ["u2", "u3", "u4", "u5", "u6", "u7"]
    assert not rejoin.hold(_from_mt("u8"), now=1.5)                  # then as they come


def test_a_sender_that_never_catches_us_up_is_released_when_the_window_ends():
    rejoin = Rejoin("tts", window_s=5.0)
    assert not rejoin.hold(_from_mt("u1"), now=-1.0)   # not ready: nothing is held
    rejoin.ready(now=0.0)
    assert not rejoin.hold(_from_mt("u1"), now=0.1)    # no heartbeat from it: a stand-in
    rejoin.status(Status(src="mt", echo_sent={"tts": 3}), now_ns=10)   # a replayed one
    assert rejoin.hold(_from_mt("u2"), now=0.2) and rejoin.hold(_from_mt("u3"), now=0.3)
    assert rejoin.status(Status(src="mt", echo_sent={"tts": 3}), now_ns=20) == []
    assert rejoin.expired(now=4.9) == []
    assert [m.utt for m in rejoin.expired(now=5.0)] == ["u2", "u3"]   # nothing dropped
    assert not rejoin.hold(_from_mt("u4"), now=5.1) and rejoin.held == {}


def test_an_upstream_that_restarted_is_held_until_it_has_sent_again():
    # mt restarted while tts ran on: u5, u6 went out before tts's subscription to the new mt
    # was live (lost), u7 after. mt sends u5..u7 again once it hears tts: u7 must not be
    # spoken first (test_kills_close: output.wav had 7 before 5 and 6).
    rejoin = Rejoin("tts", upstreams=frozenset({"mt"}))
    rejoin.ready(now=0.0)
    rejoin.status(Status(src="mt", epoch=1, echo_sent={"tts": 10**9}), now_ns=10)
    assert not rejoin.hold(_from_mt("u4"), now=10.0)    # long after our start: as they come
    rejoin.restarted("mt", now=20.0)
    assert rejoin.hold(_from_mt("u7"), now=20.1)
    assert rejoin.status(Status(src="mt", epoch=2, echo_sent={"tts": 5}), now_ns=100) == []
    again = [_from_mt(u) for u in ("u5", "u6", "u7")]
    assert all(rejoin.hold(m, now=20.5) for m in again)
    taken = rejoin.status(Status(src="mt", epoch=2, echo_sent={"tts": 100 + 60_000_000}),
                          now_ns=200)
    assert [m.utt for m in taken] == ["u5", "u6", "u7"]
    assert not rejoin.hold(_from_mt("u8"), now=21.0)
    # A broken link (the sender stopped): held from its first message after it.
    rejoin.link_lost("mt")
    assert not rejoin.hold(_from_mt("u8b"), now=22.0) and "mt" in rejoin.broken
    rejoin.restarted("mt", now=23.0)   # what traffic does when it hears mt again
    assert rejoin.hold(_from_mt("u9a"), now=23.1) and not rejoin.broken
    assert [m.utt for m in rejoin.expired(now=28.0)] == ["u9a"]
    # A restarted sender that never catches up is released when its own window ends.
    rejoin.restarted("mt", now=30.0)
    assert rejoin.hold(_from_mt("u9"), now=30.1) and rejoin.expired(now=34.9) == []
    assert [m.utt for m in rejoin.expired(now=35.0)] == ["u9"]


def test_an_upstream_is_held_before_its_first_heartbeat_reaches_us():
    # The player restarted while tts sent two pieces: u2 (sent before the kill, lost) and
    # u3, sent live just after we were ready, before tts's first heartbeat reached us. tts
    # sends u2, u3 again once it hears us: u3 must not be taken first (the chaos test).
    rejoin = Rejoin("player", upstreams=frozenset({"tts"}))
    rejoin.ready(now=0.0)
    u3 = SpeechChunk(src="tts", utt="u3", index=0)
    assert rejoin.hold(u3, now=0.3)
    assert rejoin.status(Status(src="tts", echo_sent={"player": 50}), now_ns=100) == []
    again = [SpeechChunk(src="tts", utt=u, index=0) for u in ("u2", "u3")]
    assert all(rejoin.hold(m, now=0.8) for m in again)
    taken = rejoin.status(Status(src="tts", echo_sent={"player": 100 + 60_000_000}), now_ns=200)
    assert [m.utt for m in taken] == ["u2", "u3"]
    # a sender that is not upstream of us and never heartbeats is not held (a stand-in)
    assert not rejoin.hold(SpeechChunk(src="replay", utt="u9", index=0), now=1.0)


def test_outbox_lists_its_oldest_utterances_and_finished_is_bounded():
    box = Outbox()
    for i in range(20):
        box.keep(speech(f"u{i}", 0))
    box.release("u0")
    assert box.oldest(3) == ["u1", "u2", "u3"] and len(box.oldest()) == 16
    done = Finished(limit=2)
    for utt in ("a", "b", "c"):
        done.add(utt)
    assert "a" not in done and "b" in done and "c" in done


class _Mt(Actor):
    name = "mt"
    downstream = "tts"

    def handle(self, msg):
        if isinstance(msg, Transcript):
            yield Translation(utt=msg.utt, text=msg.text.upper())


def test_a_stage_does_no_work_on_an_utterance_already_done_and_lists_what_it_holds():
    # The captions run under a CPU hog: mt was killed, asr sent "u1" to the new mt again,
    # and the player's Done for "u1" reached mt before mt took "u1" (its upstream's resend
    # waits out the rejoin window). mt then translated "u1" and held it for ever: the file
    # never finished ("utterances held: {'mt': 1}"). A stage now remembers the Dones it heard
    # and takes no utterance already done; and its heartbeat lists what it holds, so the
    # player can answer a Done it missed (see the player's test).
    rt = Runtime(_Mt(SimpleNamespace(actors={}), SimpleNamespace(host="")))
    inbound, feed = rt.ctx.socket(zmq.PULL), rt.ctx.socket(zmq.PUSH)
    inbound.bind("inproc://in")
    feed.connect("inproc://in")
    sink = rt.ctx.socket(zmq.PULL)
    sink.bind("inproc://out")
    rt.out = rt.ctx.socket(zmq.PUSH)
    rt.out.connect("inproc://out")
    try:
        for seq, (msg, src) in enumerate([(Done(utt="u1"), "player"),
                                          (Transcript(utt="u1", text="late"), "asr"),
                                          (Transcript(utt="u2", text="new"), "asr")], 1):
            feed.send_multipart(encode(stamp(msg, src=src, epoch=1, seq=seq)))
        while inbound.poll(500) and rt.actor.counters["rx"] + rt.actor.counters["after_done"] < 2:
            rt._receive(inbound)
        sent = []
        while sink.poll(200):
            sent.append(decode(sink.recv_multipart()))
        assert [m.utt for m in sent] == ["u2"]
        assert rt.actor.counters["after_done"] == 1
        assert rt.outbox.oldest() == ["u2"]
        status = decode(encode(stamp(rt.status(), src="mt", epoch=1, seq=9)))
        assert status.holding == ["u2"]   # over the wire as a list of ids
    finally:
        for sock in (inbound, feed, sink, rt.out):
            sock.close(0)
        rt.ctx.term()


def test_a_window_that_closes_while_our_own_queue_holds_messages_waits_for_them():
    # A restarted tts made drafts for 6 s beside two hogs; its window closed meanwhile and the
    # live utterance 5 it held was spoken before 0-4, which mt had sent again and which sat in
    # tts's own queue behind the drafts (test_kills_close). While input is pending, what is
    # held waits (at most another window); the resend, taken after the window, is not held.
    rejoin = Rejoin("tts", window_s=5.0, upstreams=frozenset({"mt"}))
    rejoin.ready(now=0.0)
    assert rejoin.hold(_from_mt("u5"), now=1.0)
    assert rejoin.expired(now=6.0, pending=True) == []
    assert not rejoin.hold(_from_mt("u0"), now=6.1)          # the resend, as it comes
    assert [m.utt for m in rejoin.expired(now=6.2)] == ["u5"]
    late = Rejoin("tts", window_s=5.0, upstreams=frozenset({"mt"}))
    late.ready(now=0.0)
    assert late.hold(_from_mt("u5"), now=1.0)
    assert [m.utt for m in late.expired(now=10.0, pending=True)] == ["u5"]   # bounded


def _from_asr(utt):
    return Transcript(src="asr", utt=utt, text=utt)


def test_a_sender_in_a_model_call_is_waited_for_past_the_window():
    # A 60 s cut: asr, behind the speaker, sent u14.. live once the link was back and sent
    # u1..u13 again only after the segments queued before mt's heartbeat; mt's window had
    # closed and u14.. were taken first (CI: the journal had 0, 14..23, 1..13). asr's
    # heartbeat says it is in a model call (busy_s): it has not read ours yet.
    def cut(busy_s: float) -> Rejoin:
        rejoin = Rejoin("mt", window_s=5.0, upstreams=frozenset({"asr"}), busy_max_s=30.0)
        rejoin.ready(now=0.0)
        rejoin.status(Status(src="asr", echo_sent={"mt": 10**9}), now_ns=10, now=1.0)
        rejoin.link_lost("asr")
        rejoin.restarted("asr", now=100.0)   # heard again after the cut
        assert rejoin.hold(_from_asr("u14"), now=100.1)
        assert rejoin.status(Status(src="asr", busy_s=busy_s, echo_sent={"mt": 5}),
                             now_ns=20, now=100.2) == []
        return rejoin

    busy = cut(busy_s=3.0)
    for t in (104.0, 106.0, 108.0):   # its heartbeats go on saying it is in a call
        assert busy.status(Status(src="asr", busy_s=t - 100, echo_sent={"mt": 5}),
                           now_ns=30, now=t) == []
        assert busy.expired(now=t + 1.0) == []
    assert busy.hold(_from_asr("u15"), now=109.0)
    again = [_from_asr(f"u{i}") for i in range(1, 16)]
    assert all(busy.hold(m, now=109.5) for m in again)
    taken = busy.status(Status(src="asr", echo_sent={"mt": 20 + 60_000_000}),
                        now_ns=40, now=110.0)
    assert [m.utt for m in taken] == [f"u{i}" for i in range(1, 16)]   # in order
    # A sender that stays in a call is not waited for forever: busy_max_s after the break.
    stuck = cut(busy_s=1.0)
    for t in range(101, 131):
        stuck.status(Status(src="asr", busy_s=float(t), echo_sent={"mt": 5}), now_ns=t, now=t)
        if t < 130:
            assert stuck.expired(now=t + 0.5) == []
    assert [m.utt for m in stuck.expired(now=130.1)] == ["u14"]
    # Without a heartbeat that says so (idle, or none for BUSY_HEARD_S), the window as before.
    idle = cut(busy_s=0.0)
    assert [m.utt for m in idle.expired(now=105.0)] == ["u14"]
    quiet = cut(busy_s=2.0)
    assert [m.utt for m in quiet.expired(now=105.0)] == ["u14"]   # last heard 100.2


class _SlowMt(_Mt):
    def handle(self, msg):
        if isinstance(msg, Transcript):
            time.sleep(0.2)   # a model call
        yield from super().handle(msg)


def test_after_a_model_call_the_other_sockets_get_their_turn():
    # asr with segments queued read mt's heartbeat (and sent again what mt had lost in a
    # cut) only once it had transcribed them all. One socket's turn ends after a model call.
    rt = Runtime(_SlowMt(SimpleNamespace(actors={}), SimpleNamespace(host="")))
    inbound, feed = rt.ctx.socket(zmq.PULL), rt.ctx.socket(zmq.PUSH)
    inbound.bind("inproc://slow")
    feed.connect("inproc://slow")
    rt.out = rt.ctx.socket(zmq.PUSH)
    rt.out.connect("inproc://nowhere")
    try:
        # Cheap messages are taken in a row (capture takes all the reference that came before
        # it cancels the microphone); a model call ends the turn.
        cheap = [Translation(utt=f"c{i}", text="x") for i in range(5)]
        calls = [Transcript(utt=f"u{i}", text="x") for i in range(4)]
        for seq, msg in enumerate(cheap + calls, 1):
            feed.send_multipart(encode(stamp(msg, src="asr", epoch=1, seq=seq)))
        assert inbound.poll(1000)
        time.sleep(0.1)   # all queued
        rt._receive(inbound)
        assert rt.actor.counters["rx"] == 6 and inbound.poll(0)
        while inbound.poll(100):
            rt._receive(inbound)
        assert rt.actor.counters["rx"] == 9   # the rest on later turns, none lost
    finally:
        for sock in (inbound, feed, rt.out):
            sock.close(0)
        rt.ctx.term()
