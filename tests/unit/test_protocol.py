"""Tests for the wire codec (protocol.codec) over the closed message registry.

Round trips cover every registered type; rejections check that each kind of malformed input
raises ProtocolError with the right counter name; hypothesis fuzzes `decode` with random and
corrupted frames and asserts that nothing but ProtocolError ever escapes.
"""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxweft.protocol.codec import (
    MAX_CHANNELS,
    MAX_FLOAT_SAMPLE,
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_TEXT_CHARS,
    MAX_TOPIC_BYTES,
    MAX_TRACE,
    MAX_WIRE_FLOAT,
    MAX_WIRE_INT,
    ProtocolError,
    decode,
    encode,
)
from voxweft.protocol.messages import (
    MAJOR,
    REGISTRY,
    AudioFrame,
    Cut,
    Done,
    EndOfStream,
    Message,
    PcmMessage,
    PlaybackEvent,
    Played,
    Segment,
    SpeechChunk,
    Status,
    Supervision,
    Transcript,
    Translation,
    VadEvent,
    Voice,
)

RNG = np.random.default_rng(1234)
TRACE = (("capture", 1_700_000_000_000_000_000, 0.02),
         ("speech_start", 1_700_000_000_100_000_000, 0.1),
         ("asr.first", 1_700_000_000_900_000_000, None))


def _f32(frames: int, channels: int = 1) -> np.ndarray:
    shape = (frames,) if channels == 1 else (frames, channels)
    return RNG.uniform(-1.0, 1.0, shape).astype(np.float32)


def _i16(frames: int, channels: int = 1) -> np.ndarray:
    shape = (frames,) if channels == 1 else (frames, channels)
    return RNG.integers(-32768, 32768, shape, dtype=np.int16)


def _samples() -> list[Message]:
    """Representative instances: at least one of every registered type."""
    ident = {"epoch": 3, "seq": 2**40, "sent_ns": 1_700_000_000_123_456_789}
    return [
        AudioFrame(src="capture", **ident, sample_rate=16000, pcm=_f32(320),
                   media_s=12.34, capture_ns=1_700_000_000_000_000_001, stream="file:x",
                   for_epoch=17),
        AudioFrame(src="capture", **ident, sample_rate=48000, pcm=_i16(960, 2),
                   media_s=0.0, capture_ns=0),
        EndOfStream(src="capture", **ident, media_s=61.5, utterances=7),
        VadEvent(src="segmenter", **ident, utt="u-0001", event="discard", media_s=3.25,
                 wall_ns=-1),
        Voice(src="segmenter", **ident, sample_rate=16000, pcm=_f32(48000), utt="u-0002",
              stream="file:0123abcd"),
        Segment(src="segmenter", **ident, sample_rate=16000, pcm=_f32(16000), utt="u-0002",
                src_lang="en", media_start_s=1.0, media_end_s=2.0, forced=True, goes_on=True,
                trace=TRACE),
        Segment(src="segmenter", **ident, sample_rate=16000, pcm=_i16(800, 2), utt="u-0003",
                src_lang="en", final=False, trace=()),
        Cut(src="asr", **ident, utt="u-0003", stream="mic:1", media_start_s=1.25,
            media_end_s=4.5, speech_end_s=4.4, text="When the sun rose, "),
        Transcript(src="asr", **ident, utt="u-0002", src_lang="en",
                   text="Hello — naïve café, 日本語, emoji 🎉\n\ttabs", final=False,
                   media_start_s=1.0, media_end_s=2.0, goes_on=True,
                   context=["When the sun rose,", "and the birds"], trace=TRACE),
        Translation(src="mt", **ident, utt="u-0002", src_lang="en", tgt_lang="pt",
                    source_text="Good morning", text="Bom dia, coração ção ã õ",
                    media_start_s=1.0, media_end_s=2.0, trace=TRACE),
        SpeechChunk(src="tts", **ident, sample_rate=24000, pcm=_f32(2400), utt="u-0002",
                    tgt_lang="pt", index=4, last=True, text="Bom dia", trace=TRACE),
        SpeechChunk(src="tts", **ident, sample_rate=24000, pcm=_i16(0), utt="u-0004",
                    tgt_lang="pt", index=0, last=False, text="", trace=()),
        SpeechChunk(src="tts", **ident, sample_rate=24000, pcm=_f32(0), utt="u-0005",
                    tgt_lang="pt", index=0, last=True, skipped="7.2 s behind the speaker"),
        PlaybackEvent(src="player", **ident, utt="u-0002", event="finished", duration_s=1.75,
                      complete=False, trace=TRACE),
        PlaybackEvent(src="player", **ident, utt="u-0005", event="skipped",
                      reason="7.2 s behind the speaker", trace=TRACE),
        Done(src="player", **ident, utt="u-0002", complete=False),
        Played(src="player", **ident, pcm=_f32(320), pos=4800, at_pos=4000,
               at_ns=1_700_000_000_020_000_000),
        Status(src="asr", **ident, state="ready", detail="model loaded ✓", pid=4242,
               engine="faster-whisper", busy_s=0.5,
               counters={"recv": 10, "bad_header": 0, "dropped": -1},
               peers={"segmenter": 3, "capture": 1}, links={"segmenter": 2}, outstanding=3,
               stream="file:0123abcd", media_ms=61_500,
               budget={"cpu": 0.21, "rtf": 0.12, "cores": 2.0}),
        Status(src="player"),
        Status(src="capture", **ident, echo={"converged": 1.0, "delay_ms": 62.5,
                                             "removed_db": 31.2, "playing_s": 12.0}),
        Supervision(src="supervisor.m2", **ident, actor="tts", host="m2", state="BACKOFF",
                    exit_status=75, expected=False, reason="tts: cannot start: out of memory",
                    since_ns=1_700_000_000_000_000_000),
    ]


SAMPLES = _samples()


def _header(frames: list[bytes]) -> dict:
    return msgpack.unpackb(frames[1], raw=False)


def _pack(header: dict) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def _with_header(msg: Message, drop: tuple[str, ...] = (), **changes) -> list[bytes]:
    """The frames of `msg` with header fields changed or dropped (topic unchanged)."""
    frames = encode(msg)
    header = _header(frames)
    header.update(changes)
    for key in drop:
        header.pop(key)
    return [frames[0], _pack(header), *frames[2:]]


def _kind(frames) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(frames)
    assert type(info.value) is ProtocolError
    return info.value.kind


def _assert_equal(a: Message, b: Message) -> None:
    assert type(a) is type(b)
    assert a == b
    if isinstance(a, PcmMessage):
        assert a.pcm.dtype == b.pcm.dtype
        assert a.pcm.shape == b.pcm.shape
        assert np.array_equal(a.pcm, b.pcm)


# --------------------------------------------------------------------------- round trips


def test_samples_cover_the_registry():
    assert {type(m) for m in SAMPLES} == set(REGISTRY.values())
    assert set(REGISTRY) == {"audio", "eos", "vad", "segment", "voice", "cut", "transcript",
                             "translation", "speech", "playback", "played", "done", "status",
                             "supervision"}


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: f"{m.TYPE}-{m.src}")
def test_round_trip(msg: Message):
    frames = encode(msg)
    assert all(isinstance(f, bytes) for f in frames)
    assert frames[0] == f"{msg.TYPE}.{msg.src}".encode()
    assert len(frames) == (3 if isinstance(msg, PcmMessage) else 2)
    header = _header(frames)
    assert header["v"] == MAJOR and header["type"] == msg.TYPE
    _assert_equal(decode(frames), msg)


def test_round_trip_preserves_trace_and_maps():
    msg = next(m for m in SAMPLES if isinstance(m, Transcript))
    out = decode(encode(msg))
    assert out.trace == TRACE
    assert isinstance(out.trace, tuple) and all(isinstance(e, tuple) for e in out.trace)
    assert out.trace[2][2] is None
    status = decode(encode(next(m for m in SAMPLES if isinstance(m, Status))))
    assert status.counters == {"recv": 10, "bad_header": 0, "dropped": -1}
    assert status.peers == {"segmenter": 3, "capture": 1}
    assert status.budget == {"cpu": 0.21, "rtf": 0.12, "cores": 2.0}


def test_decode_accepts_memoryview_and_tuple_frames():
    frames = encode(SAMPLES[0])
    out = decode(tuple(memoryview(f) for f in frames))
    _assert_equal(out, SAMPLES[0])


def test_float_field_given_as_int_decodes_as_float():
    out = decode(_with_header(EndOfStream(src="capture"), media_s=5))
    assert out.media_s == 5.0 and isinstance(out.media_s, float)


@given(text=st.text(max_size=200), seq=st.integers(0, MAX_WIRE_INT),
       start=st.floats(-MAX_WIRE_FLOAT, MAX_WIRE_FLOAT))
@settings(max_examples=100, deadline=None)
def test_round_trip_property_transcript(text: str, seq: int, start: float):
    msg = Transcript(src="asr", seq=seq, text=text, media_start_s=start, trace=TRACE)
    assert decode(encode(msg)) == msg


# --------------------------------------------------------------------------- PCM


@pytest.mark.parametrize("pcm", [_f32(320), _i16(320), _f32(100, 2), _i16(100, 2)],
                         ids=["f32-mono", "i16-mono", "f32-stereo", "i16-stereo"])
def test_pcm_travels_raw_in_third_frame(pcm: np.ndarray):
    msg = AudioFrame(src="capture", sample_rate=16000, pcm=pcm)
    frames = encode(msg)
    assert frames[2] == pcm.tobytes()
    assert len(frames[2]) == pcm.size * pcm.itemsize
    assert not frames[2].startswith(b"RIFF")
    assert b"WAVE" not in frames[2][:64] and b"RIFF" not in frames[1]
    header = _header(frames)
    assert header["dtype"] == pcm.dtype.name
    assert header["channels"] == (1 if pcm.ndim == 1 else pcm.shape[1])
    assert header["frames"] == pcm.shape[0]
    assert "pcm" not in header
    out = decode(frames)
    assert out.pcm.dtype == pcm.dtype and out.pcm.shape == pcm.shape
    assert np.array_equal(out.pcm.ravel()[:8], pcm.ravel()[:8])
    assert np.array_equal(out.pcm, pcm)
    assert out.duration_s == pytest.approx(pcm.shape[0] / 16000)


def test_pcm_known_samples_are_little_endian():
    pcm = np.array([1, -2, 32767, -32768], dtype=np.int16)
    frames = encode(AudioFrame(src="c", pcm=pcm))
    assert frames[2] == b"\x01\x00\xfe\xff\xff\x7f\x00\x80"
    assert decode(frames).pcm.tolist() == [1, -2, 32767, -32768]


def test_big_endian_and_non_contiguous_pcm_are_normalized():
    big = np.array([1, 2, 3], dtype=">i2")
    assert decode(encode(AudioFrame(src="c", pcm=big))).pcm.tolist() == [1, 2, 3]
    strided = np.arange(20, dtype=np.float32)[::2]
    out = decode(encode(AudioFrame(src="c", pcm=strided)))
    assert np.array_equal(out.pcm, strided)


@pytest.mark.parametrize("pcm", [np.zeros(4, np.float64), np.zeros(4, np.int32),
                                 np.zeros((2, 2, 2), np.float32), np.float32(1.0)],
                         ids=["float64", "int32", "3d", "0d"])
def test_encode_refuses_unsupported_pcm(pcm):
    with pytest.raises(ValueError):
        encode(AudioFrame(src="c", pcm=pcm))


@pytest.mark.parametrize("delta", [-1, 1, -4, 4, -1280])
def test_payload_length_mismatch_is_bad_pcm(delta: int):
    frames = encode(AudioFrame(src="capture", pcm=_f32(320)))
    payload = frames[2][:delta] if delta < 0 else frames[2] + b"\x00" * delta
    assert _kind([frames[0], frames[1], payload]) == "bad_pcm"


@pytest.mark.parametrize("changes", [
    {"dtype": "float64"}, {"dtype": None}, {"dtype": 5}, {"dtype": []}, {"dtype": {"a": 1}},
    {"channels": 0},
    {"channels": MAX_CHANNELS + 1}, {"channels": -1}, {"frames": -1},
    {"channels": 2},
], ids=str)
def test_bad_pcm_description(changes: dict):
    msg = AudioFrame(src="capture", pcm=_f32(320))
    kind = _kind(_with_header(msg, **changes))
    assert kind == "bad_pcm"


@pytest.mark.parametrize("changes", [{"channels": "1"}, {"frames": 1.5}, {"channels": True},
                                     {"frames": 2**63}], ids=str)
def test_pcm_description_of_wrong_type(changes: dict):
    assert _kind(_with_header(AudioFrame(src="capture", pcm=_f32(4)), **changes)) == "bad_field"


def test_pcm_description_missing():
    msg = AudioFrame(src="capture", pcm=_f32(4))
    assert _kind(_with_header(msg, drop=("dtype",))) == "bad_pcm"
    assert _kind(_with_header(msg, drop=("frames",))) == "bad_field"


@pytest.mark.parametrize("rate", [0, -16000])
def test_non_positive_sample_rate(rate: int):
    for msg in (AudioFrame(src="c", pcm=_f32(4)), SpeechChunk(src="tts", pcm=_i16(4))):
        assert _kind(_with_header(msg, sample_rate=rate)) == "bad_pcm"


# --------------------------------------------------------------------------- rejections


def test_truncated_header():
    frames = encode(SAMPLES[6])
    for cut in (0, 1, len(frames[1]) // 2, len(frames[1]) - 1):
        assert _kind([frames[0], frames[1][:cut]]) == "bad_header"


def test_oversized_header_topic_and_payload():
    frames = encode(EndOfStream(src="capture"))
    assert _kind([frames[0], b"\x00" * (MAX_HEADER_BYTES + 1)]) == "oversized"
    assert _kind([b"x" * (MAX_TOPIC_BYTES + 1), frames[1]]) == "oversized"
    # A valid header whose text field makes the header itself exceed the limit.
    big = _pack({**_header(frames), "junk": "a" * MAX_HEADER_BYTES})
    assert _kind([frames[0], big]) == "oversized"
    audio = encode(AudioFrame(src="capture", pcm=_f32(4)))
    payload = bytes(MAX_PAYLOAD_BYTES + 4)
    assert _kind([audio[0], audio[1], payload]) == "oversized"


def test_long_src_gives_oversized_topic():
    # The encoder does not limit `src`; the decoder refuses topics over MAX_TOPIC_BYTES.
    assert _kind(encode(EndOfStream(src="s" * MAX_TOPIC_BYTES))) == "oversized"


def test_text_over_limit_is_bad_field():
    ok = Transcript(src="asr", text="é" * MAX_TEXT_CHARS)
    assert decode(encode(ok)) == ok
    assert _kind(encode(Transcript(src="asr", text="é" * (MAX_TEXT_CHARS + 1)))) == "bad_field"


def test_trace_over_limit():
    trace = tuple(("asr.recv", i, None) for i in range(MAX_TRACE))
    ok = Transcript(src="asr", trace=trace)
    assert decode(encode(ok)) == ok
    too_long = Transcript(src="asr", trace=trace + (("x", 1, None),))
    assert _kind(encode(too_long)) in ("bad_header", "bad_field")


def test_deeply_nested_msgpack():
    assert _kind([b"eos.capture", b"\x91" * 100_000 + b"\xc0"]) == "bad_header"
    nested_map = b"\x81\xa1a" * 50_000 + b"\xc0"  # 150 kB: under MAX_HEADER_BYTES
    assert _kind([b"eos.capture", nested_map]) == "bad_header"


def test_huge_declared_lengths_are_refused_without_allocation():
    # array32 / map32 / str32 claiming 2**32-1 items or bytes, with no data behind them.
    for raw in (b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff"):
        assert _kind([b"eos.capture", raw]) == "bad_header"


@pytest.mark.parametrize("raw", [
    msgpack.packb([1, "eos"]), msgpack.packb("eos"), msgpack.packb(None), msgpack.packb(3),
    msgpack.packb(b"bytes", use_bin_type=True),
], ids=["list", "str", "nil", "int", "bin"])
def test_non_map_header(raw: bytes):
    assert _kind([b"eos.capture", raw]) == "bad_header"


def test_non_str_map_keys():
    raw = msgpack.packb({"v": 1, "type": "eos", 7: 1})
    assert _kind([b"eos.", raw]) == "bad_header"


def test_binary_values_are_refused():
    raw = msgpack.packb({"v": 1, "type": "eos", "src": b"capture"}, use_bin_type=True)
    assert _kind([b"eos.capture", raw]) == "bad_header"


def test_invalid_utf8_in_header():
    raw = _pack({"v": 1, "type": "eos"}).replace(b"\xa3eos", b"\xa3\xff\xfe\xfd")
    assert _kind([b"eos.", raw]) == "bad_header"


@pytest.mark.parametrize("field,value", [
    ("seq", "7"), ("seq", True), ("seq", 1.0), ("epoch", None), ("src", 5), ("src", None),
    ("media_s", float("nan")), ("media_s", float("inf")), ("media_s", "0.5"),
    ("media_s", 1e308), ("media_s", -2e13),   # finite, but no media time (the captions' 500)
    ("media_s", False), ("utterances", [1]), ("utterances", {"a": 1}),
])
def test_wrong_field_types_eos(field: str, value):
    assert _kind(_with_header(EndOfStream(src="capture"), **{field: value})) == "bad_field"


@pytest.mark.parametrize("msg,field,value", [
    (Segment(src="s", pcm=_f32(4)), "forced", 1),
    (Segment(src="s", pcm=_f32(4)), "trace", "capture"),
    (Segment(src="s", pcm=_f32(4)), "trace", [["capture", 1]]),
    (Segment(src="s", pcm=_f32(4)), "trace", [["capture", 1.5, None]]),
    (Segment(src="s", pcm=_f32(4)), "trace", [[1, 1, None]]),
    (Segment(src="s", pcm=_f32(4)), "trace", [["capture", 1, float("nan")]]),
    (Segment(src="s", pcm=_f32(4)), "trace", [["capture", 1, "0.1"]]),
    (Segment(src="s", pcm=_f32(4)), "trace", [{"e": 1}]),
    (Transcript(src="asr"), "final", "yes"),
    (Transcript(src="asr"), "text", ["a"]),
    (Transcript(src="asr"), "context", "a sentence, not a list of pieces"),
    (Transcript(src="asr"), "context", [1, 2]),
    (Transcript(src="asr"), "goes_on", 1),
    (SpeechChunk(src="tts", pcm=_f32(4)), "index", True),
    (SpeechChunk(src="tts", pcm=_f32(4)), "sample_rate", 16000.0),
    (Status(src="asr"), "counters", [1, 2]),
    (Status(src="asr"), "counters", {"recv": "1"}),
    (Status(src="asr"), "counters", {"recv": True}),
    (Status(src="asr"), "peers", {"asr": 1.5}),
    (Status(src="asr"), "peers", None),
    (Status(src="asr"), "budget", {"cpu": "fast"}),
    (Status(src="asr"), "budget", {"cpu": float("nan")}),
    (Status(src="asr"), "budget", [0.2]),
    (SpeechChunk(src="tts", pcm=_f32(0)), "skipped", 1),
    (Status(src="asr"), "busy_s", float("-inf")),
])
def test_wrong_field_types(msg: Message, field: str, value):
    assert _kind(_with_header(msg, **{field: value})) == "bad_field"


@pytest.mark.parametrize("type_name", ["nope", "", "Audio", "AUDIO", 5, None, ["audio"]])
def test_unknown_type(type_name):
    raw = _pack({"v": MAJOR, "type": type_name})
    assert _kind([b"audio.", raw]) == "unknown_type"


def test_missing_type():
    assert _kind([b"eos.", _pack({"v": MAJOR})]) == "unknown_type"


def test_msgpack_ext_types_are_refused():
    # fixext / ext8 with data: refused by the unpacker's max_ext_len=0 -> "bad_header".
    for ext in (msgpack.ExtType(5, b"abc"), msgpack.ExtType(1, b"x" * 300),
                msgpack.Timestamp(1, 0)):
        raw = msgpack.packb({"v": MAJOR, "type": "eos", "src": ext})
        assert _kind([b"eos.", raw]) == "bad_header"
        raw = msgpack.packb({"v": MAJOR, "type": "eos", "unknown": ext})
        assert _kind([b"eos.", raw]) == "bad_header"
    # A zero-length ext reaches the ext hook, which names it "ext_type".
    raw = _pack({"v": MAJOR, "type": "eos"})
    raw = b"\x83" + raw[1:] + b"\xa1x\xc7\x00\x05"
    assert _kind([b"eos.", raw]) == "ext_type"


def test_versions():
    msg = EndOfStream(src="capture")
    assert _kind(_with_header(msg, v=MAJOR + 1)) == "newer_version"
    assert _kind(_with_header(msg, v=2**40)) == "newer_version"
    for bad in ("1", 1.0, True, None):
        assert _kind(_with_header(msg, v=bad)) == "bad_header"
    assert _kind(_with_header(msg, drop=("v",))) == "bad_header"
    assert decode(_with_header(msg, v=0)) == msg  # an older major is read tolerantly


def test_newer_version_refused_before_type():
    raw = _pack({"v": MAJOR + 1, "type": "hologram", "x": 1})
    assert _kind([b"hologram.x", raw]) == "newer_version"


def test_wrong_frame_count():
    pcm_frames = encode(AudioFrame(src="c", pcm=_f32(4)))
    plain = encode(EndOfStream(src="c"))
    assert _kind([]) == "bad_frames"
    assert _kind([plain[0]]) == "bad_frames"
    assert _kind([*pcm_frames, b""]) == "bad_frames"
    assert _kind(pcm_frames[:2]) == "bad_frames"        # PCM type without its payload
    assert _kind([*plain, b"\x00\x00"]) == "bad_frames"  # plain type with a payload


@pytest.mark.parametrize("topic", [b"", b"eos", b"eos.", b"eos.capturex", b"audio.capture",
                                   b"EOS.capture", b"eos.capture\x00", b"vad.capture"])
def test_topic_must_match_type_and_src(topic: bytes):
    frames = encode(EndOfStream(src="capture"))
    assert _kind([topic, frames[1]]) == "bad_topic"


def test_topic_with_unicode_src():
    msg = Transcript(src="ásr-ü")
    frames = encode(msg)
    assert frames[0] == "transcript.ásr-ü".encode()
    assert decode(frames) == msg


# --------------------------------------------------------------------------- tolerant reader


def test_unknown_header_fields_are_ignored():
    msg = SAMPLES[4]  # a Segment with a trace
    frames = _with_header(msg, future_field={"nested": [1, 2, 3]}, another=None,
                          TYPE="hack", pcm="not used")
    _assert_equal(decode(frames), msg)


@pytest.mark.parametrize("cls", list(REGISTRY.values()), ids=lambda c: c.TYPE)
def test_missing_optional_fields_take_defaults(cls: type[Message]):
    header = {"v": MAJOR, "type": cls.TYPE}
    frames = [f"{cls.TYPE}.".encode(), _pack(header)]
    if issubclass(cls, PcmMessage):
        header.update(dtype="int16", channels=1, frames=2)
        frames = [frames[0], _pack(header), b"\x01\x00\x02\x00"]
    out = decode(frames)
    expected = cls(pcm=np.array([1, 2], np.int16)) if issubclass(cls, PcmMessage) else cls()
    _assert_equal(out, expected)


def test_missing_some_fields_keeps_others():
    msg = next(m for m in SAMPLES if isinstance(m, Transcript))
    out = decode(_with_header(msg, drop=("trace", "final", "media_end_s", "seq")))
    assert out == dataclasses.replace(msg, trace=(), final=True, media_end_s=0.0, seq=0)


# --------------------------------------------------------------------------- fuzzing


def _check_decode(frames: list[bytes]) -> Message | None:
    """Decode must return a registered message or raise ProtocolError; nothing else."""
    try:
        msg = decode(frames)
    except ProtocolError as exc:
        assert isinstance(exc.kind, str) and exc.kind
        return None
    assert isinstance(msg, Message)
    assert type(msg) in REGISTRY.values()
    # Whatever decodes is a well-formed message: it re-encodes to an equal message.
    again = decode(encode(msg))
    _assert_equal(again, msg)
    return msg


FUZZ = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(st.lists(st.binary(max_size=64), min_size=0, max_size=4))
def test_fuzz_random_frames(frames: list[bytes]):
    _check_decode(frames)


@FUZZ
@given(sample=st.sampled_from(SAMPLES), data=st.data())
def test_fuzz_corrupted_valid_encodings(sample: Message, data):
    frames = encode(sample)
    index = data.draw(st.integers(0, len(frames) - 1), label="frame")
    frame = bytearray(frames[index])
    action = data.draw(st.sampled_from(["truncate", "flip", "both", "append"]), label="action")
    if action in ("truncate", "both"):
        frame = frame[:data.draw(st.integers(0, len(frame)), label="cut")]
    if action in ("flip", "both") and frame:
        flips = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(1, 255)),
                                   min_size=1, max_size=8), label="flips")
        for pos, mask in flips:
            frame[pos] ^= mask
    if action == "append":
        frame += data.draw(st.binary(min_size=1, max_size=16), label="tail")
    frames[index] = bytes(frame)
    msg = _check_decode(frames)
    if index == 2 and action == "flip":
        # PCM bytes are opaque: flipping them (same length) still decodes, to the new samples,
        # unless a float sample became one no audio has: then the block is cleaned.
        assert msg is not None
        flipped = np.frombuffer(frames[2], dtype=msg.pcm.dtype)
        if msg.pcm.dtype.kind == "f" and flipped.size and not (
                np.isfinite(flipped).all() and np.abs(flipped).max() <= MAX_FLOAT_SAMPLE):
            assert np.isfinite(msg.pcm).all() and np.abs(msg.pcm).max() <= 1.0
        else:
            assert msg.pcm.tobytes() == frames[2]


SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
           | st.binary(max_size=20))
VALUES = st.recursive(
    SCALARS,
    lambda children: (st.lists(children, max_size=5)
                      | st.dictionaries(st.text(max_size=8) | st.integers(-3, 3), children,
                                        max_size=5)),
    max_leaves=25)
# Values any msgpack header may carry in an unknown field: no bin, no ext, str keys only.
TOLERATED = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
    | st.text(max_size=20),
    lambda children: (st.lists(children, max_size=5)
                      | st.dictionaries(st.text(max_size=8), children, max_size=5)),
    max_leaves=25)


@FUZZ
@given(header=VALUES, topic=st.binary(max_size=24))
def test_fuzz_random_msgpack_header(header, topic: bytes):
    raw = msgpack.packb(header, use_bin_type=True)
    _check_decode([topic, raw])
    _check_decode([topic, raw, b"\x00" * 8])


@FUZZ
@given(sample=st.sampled_from(SAMPLES), data=st.data())
def test_fuzz_plausible_headers_with_random_values(sample: Message, data):
    frames = encode(sample)
    header = _header(frames)
    keys = data.draw(st.lists(st.sampled_from(sorted(header)), max_size=4, unique=True),
                     label="keys")
    for key in keys:
        header[key] = data.draw(VALUES, label=key)
    extra = data.draw(st.dictionaries(st.text(max_size=8), TOLERATED, max_size=3),
                      label="extra")
    header.update({k: v for k, v in extra.items() if k not in header})
    topic = data.draw(st.sampled_from([frames[0]]) | st.binary(max_size=24), label="topic")
    msg = _check_decode([topic, msgpack.packb(header, use_bin_type=True), *frames[2:]])
    if not keys and topic == frames[0]:
        assert msg is not None  # only unknown extra fields were added: still valid


def test_a_sender_stamps_its_identity_and_a_gapless_seq_per_type():
    from voxweft.protocol.messages import Sender

    sender = Sender("asr", epoch=7)
    first = sender.stamp(Status(state="ready"))
    held = sender.stamp(Transcript(utt="u1", text="a"), commit=False)   # not sent yet
    again = sender.stamp(Transcript(utt="u1", text="a"), commit=False)
    assert (first.src, first.epoch, first.seq) == ("asr", 7, 1) and first.sent_ns > 0
    assert held.seq == again.seq == 1               # nothing went out: the seq is not taken
    sender.sent(again)
    assert sender.stamp(Transcript(utt="u2", text="b")).seq == 2
    assert sender.stamp(Status(state="ready")).seq == 2   # its own count per type
    assert Sender("mt").epoch != Sender("mt", epoch=1).epoch


def test_float_pcm_off_the_wire_is_finite_and_within_full_scale():
    pcm = np.array([np.nan, np.inf, -np.inf, 1e30, -2.0, 0.5, -0.25], np.float32)
    got = decode(encode(AudioFrame(sample_rate=16000, pcm=pcm, media_s=0.0))).pcm
    np.testing.assert_array_equal(got, np.array([0, 1, -1, 1, -1, 0.5, -0.25], np.float32))
    for bad in (np.nan, np.inf, 33.0):   # one sample no audio has: the block is cleaned
        got = decode(encode(AudioFrame(sample_rate=16000, pcm=np.array([bad, 2.0], np.float32),
                                       media_s=0.0))).pcm
        assert np.isfinite(got).all() and np.abs(got).max() <= 1.0
    loud = np.array([2.5, -3.0, 0.1], np.float32)   # a loud float signal passes as it came
    np.testing.assert_array_equal(
        decode(encode(AudioFrame(sample_rate=16000, pcm=loud, media_s=0.0))).pcm, loud)
    ints = np.array([32767, -32768, 5], np.int16)   # integers cannot be out of range
    np.testing.assert_array_equal(
        decode(encode(AudioFrame(sample_rate=16000, pcm=ints, media_s=0.0))).pcm, ints)


def test_utterance_ids_tell_the_order_of_one_segmenters_utterances():
    from voxweft.protocol.messages import utt_before, utt_id

    a, b, c = utt_id(0x234567, 9), utt_id(0x234567, 10), utt_id(7, 0)
    assert a == "234567.00009" and utt_before(a, b) and not utt_before(b, a)
    assert not utt_before(a, a)
    assert not utt_before(c, a) and not utt_before(a, c)   # two segmenters: no order
    assert not utt_before("u1", "u2") and not utt_before("x.1a", "x.2")
