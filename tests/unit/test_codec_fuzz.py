"""The decoder on arbitrary msgpack: only ProtocolError or a valid message comes out."""

from __future__ import annotations

import msgpack
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxweft.protocol import codec
from voxweft.protocol.codec import MAX_WIRE_INT, ProtocolError, decode, encode
from voxweft.protocol.messages import REGISTRY, AudioFrame, Message, Status

#: Any value msgpack packs: integers over its whole range, floats (nan, inf), text, bytes,
#: lists and maps nested a few levels.
_SCALARS = (st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) |
            st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40) |
            st.binary(max_size=40))
VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
FIELDS = sorted({name for cls in REGISTRY.values() for name in cls.__dataclass_fields__})


@st.composite
def headers(draw) -> dict:
    """A header that is often nearly right: a real type, a version, real field names."""
    header = draw(st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), VALUES,
                                  max_size=8))
    if draw(st.booleans()):
        header["type"] = draw(st.sampled_from(sorted(REGISTRY)) | VALUES)
    if draw(st.booleans()):
        header["v"] = draw(st.sampled_from([1, 0, 2]) | VALUES)
    return header


def _frames(draw_topic: bytes, header: dict, pcm: bytes | None) -> list[bytes]:
    frames = [draw_topic, msgpack.packb(header, use_bin_type=True)]
    return frames + ([pcm] if pcm is not None else [])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=headers(), topic=st.binary(max_size=24) | st.sampled_from(
    [f"{t}.{s}".encode() for t in REGISTRY for s in ("", "asr", "capture")]),
    pcm=st.none() | st.binary(max_size=64))
def test_arbitrary_headers_give_a_message_or_a_protocol_error(header, topic, pcm):
    try:
        msg = decode(_frames(topic, header, pcm))
    except ProtocolError:
        return
    assert isinstance(msg, Message) and msg.topic() == topic
    # what was taken goes out again as it came (every integer within the wire's bounds)
    assert decode(encode(msg)) == msg


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200), n=st.integers(0, 5))
def test_arbitrary_bytes_give_a_protocol_error(raw, n):
    frames = [b"status.asr", raw] + [raw] * max(0, n - 2)
    try:
        decode(frames[:n])
    except ProtocolError:
        return
    raise AssertionError("garbage decoded")   # pragma: no cover


def test_a_value_nested_1000_deep_is_refused_in_one_line():
    deep: list = []
    for _ in range(1000):
        deep = [deep]
    for header in ({"v": 1, "type": "transcript", "src": "asr", "text": deep},
                   {"v": 1, "type": deep}):
        try:
            decode([b"transcript.asr", msgpack.packb(header)])
        except ProtocolError as exc:
            assert len(str(exc)) < 200 and "\n" not in str(exc)
        else:
            raise AssertionError("decoded")


def test_integers_out_of_the_wire_bounds_are_refused():
    for seq in (MAX_WIRE_INT + 1, -MAX_WIRE_INT - 1, 2 ** 64 - 1):
        frames = encode(Status(src="asr", seq=0))
        header = msgpack.unpackb(frames[1]) | {"seq": seq}
        try:
            decode([frames[0], msgpack.packb(header)])
        except ProtocolError as exc:
            assert exc.kind == "bad_field"
        else:
            raise AssertionError(seq)
    ok = encode(Status(src="asr", seq=MAX_WIRE_INT, counters={"gaps": MAX_WIRE_INT}))
    assert decode(ok).seq == MAX_WIRE_INT


def test_a_type_that_refuses_its_fields_is_a_protocol_error(monkeypatch):
    """A message type's own construction failing is the peer's bad message, not a crash."""
    frame = encode(AudioFrame(src="capture", pcm=np.zeros(320, np.float32)))

    def refuse(*args, **kwargs):
        raise TypeError("no")

    monkeypatch.setitem(codec.REGISTRY, "audio", type("Refusing", (AudioFrame,), {
        "__init__": refuse, "TYPE": "audio"}))
    try:
        decode(frame)
    except ProtocolError as exc:
        assert exc.kind == "bad_field"
    else:
        raise AssertionError("decoded")
