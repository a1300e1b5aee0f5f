"""Clocks across hosts (actors.clock) and what the runtime does with them.

The real thing, one host's clock shifted by libfaketime, is tests/e2e/test_two_hosts.py.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from voxweft.actors.clock import Clocks, offsets
from voxweft.actors.runtime import UNREACHABLE_S, Actor, Runtime
from voxweft.protocol.codec import decode, encode
from voxweft.protocol.messages import Status, Transcript, stamp

S = 10**9
MS = 10**6


def test_offset_and_round_trip_from_one_exchange():
    clocks = Clocks()
    # The peer's clock is 5 s ahead. We send at 100 s; 2 ms on the wire; it holds our
    # heartbeat 300 ms before sending its own; 2 ms back.
    t1 = 100 * S
    t2 = t1 + 2 * MS + 5 * S
    t3 = t2 + 300 * MS
    t4 = t3 - 5 * S + 2 * MS
    clocks.exchange("ultra", t1, t2, t3, t4)
    assert clocks.offset_ns("ultra") == 5 * S
    assert clocks.round_trip_ms("ultra") == 4.0   # the 300 ms hold drops out
    assert clocks.offsets_ms() == {"ultra": 5000.0}
    assert clocks.offset_ns("m3") is None


def test_the_quickest_exchange_wins_over_queued_ones():
    clocks = Clocks()
    offset = -3 * S
    for out_ms, back_ms in ((80, 1), (1, 40), (1, 1), (30, 2)):   # queueing is one-sided
        t1 = 200 * S
        t2 = t1 + out_ms * MS + offset
        t3 = t2 + 100 * MS
        t4 = t3 - offset + back_ms * MS
        clocks.exchange("m2", t1, t2, t3, t4)
    assert clocks.offset_ns("m2") == offset
    assert clocks.round_trip_ms("m2") == 2.0


def test_an_impossible_exchange_is_ignored_and_old_ones_age_out():
    clocks = Clocks(samples=2)
    clocks.exchange("b", 10 * S, 10 * S, 12 * S, 11 * S)   # answered before asked: negative
    assert clocks.offset_ns("b") is None
    clocks.exchange("b", 0, 1 * S, 1 * S, 0)         # +1 s, round trip 0
    clocks.exchange("b", 0, 2 * S, 2 * S + MS, 2 * MS)   # +2 s, round trip 1 ms
    clocks.exchange("b", 0, 2 * S, 2 * S + MS, 3 * MS)   # +2 s, round trip 2 ms
    assert clocks.offset_ns("b") == 2 * S - MS // 2
    assert clocks.round_trip_ms("b") == 1.0   # the 0 ms one of +1 s is no longer kept


def test_a_trace_is_moved_into_our_clock():
    clocks = Clocks()
    trace = (("asr.end", 105 * S, 1.5), ("mt.recv", 105 * S + 3 * MS, None))
    assert clocks.to_local("ultra", trace) == trace   # nothing known yet: unchanged
    clocks.exchange("ultra", 0, 5 * S, 5 * S, 0)
    assert clocks.to_local("ultra", trace) == (("asr.end", 100 * S, 1.5),
                                               ("mt.recv", 100 * S + 3 * MS, None))


def test_offsets_of_a_host_are_the_median_of_its_actors():
    said = [Status(clock_ms={"ultra": 5001.0}), Status(clock_ms={"ultra": 4999.5}),
            Status(clock_ms={"ultra": 5000.2, "m3": -20.0}), Status()]
    assert offsets(said) == {"ultra": 5000.2, "m3": -20.0}


class _Mt(Actor):
    name = "mt"


def _runtime() -> Runtime:
    topology = SimpleNamespace(actors={a: SimpleNamespace(host=h) for a, h in
                                       (("asr", "m2"), ("mt", "ultra"), ("tts", "ultra"))})
    rt = Runtime(_Mt(topology, SimpleNamespace(host="ultra")))
    rt.heard = {"asr": rt.started, "tts": rt.started}
    return rt


def _arrive(rt: Runtime, msg, src: str, at_ns: int, sent_ns: int):
    """`msg` from `src` as decoded off the wire, sent at `sent_ns`, received at `at_ns`."""
    wire = decode(encode(stamp(msg, src=src, epoch=1, seq=1)))
    wire = wire.__class__(**{**wire.__dict__, "sent_ns": sent_ns})
    rt.actor.recv_ns = at_ns
    return rt._in_our_clock(wire)


@pytest.fixture
def rt():
    runtime = _runtime()
    yield runtime
    runtime.ctx.term()


def test_the_runtime_learns_the_offset_from_heartbeats_and_corrects_traces(rt):
    # We are MT on the Ultra; ASR's host, the M2, is 5 s ahead of us. Our heartbeat left at
    # 1000 s (ours) and reached ASR 1 ms later; ASR echoes that in its own 400 ms later.
    mine = 1000 * S
    at_asr = mine + MS + 5 * S
    asr_sent = at_asr + 400 * MS
    status = Status(echo_sent={"mt": mine}, echo_recv={"mt": at_asr})
    _arrive(rt, status, "asr", at_ns=asr_sent - 5 * S + MS, sent_ns=asr_sent)
    assert rt.status().clock_ms == {"m2": 5000.0}
    assert rt.status().echo_sent == {"asr": asr_sent}   # what ASR learns our offset from
    # A transcript whose trace is in the M2's clock comes out in ours; a same-host sender's
    # trace is left as it is.
    trace = (("speech_end", 2000 * S, 3.0), ("asr.end", 2000 * S + 700 * MS, None))
    got = _arrive(rt, Transcript(utt="u1", text="hi", trace=trace), "asr", 0, 0)
    assert [t for _, t, _ in got.trace] == [1995 * S, 1995 * S + 700 * MS]
    same = _arrive(rt, Transcript(utt="u2", text="hi", trace=trace), "tts", 0, 0)
    assert same.trace == trace


def test_status_names_the_peers_not_heard_lately(rt):
    assert rt.status().unreachable == {}
    rt.heard["asr"] = time.monotonic() - UNREACHABLE_S - 2
    rt.heard["tts"] = time.monotonic()
    assert list(rt.status().unreachable) == ["asr"]
    assert rt.status().unreachable["asr"] >= UNREACHABLE_S + 2
    _arrive(rt, Status(), "asr", time.time_ns(), time.time_ns())   # heard again
    assert rt.status().unreachable == {}
