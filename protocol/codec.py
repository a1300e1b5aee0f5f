"""Encode messages to ZeroMQ multipart frames and decode untrusted frames back.

Wire layout: ``[topic, header]`` or ``[topic, header, pcm]``. The header is one msgpack map
holding the protocol major version ``v``, the type name ``type`` and the message fields.
PCM is raw little-endian samples in the third frame; the header names ``dtype``,
``channels`` and ``frames`` and the payload length must match them exactly.

Decoding never raises anything but :class:`ProtocolError`.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib

import msgpack
import numpy as np

from voxweft.protocol.messages import MAJOR, PCM_DTYPES, REGISTRY, Message, PcmMessage

MAX_TOPIC_BYTES = 128
MAX_HEADER_BYTES = 256 * 1024        # text of one utterance plus its trace fits easily
MAX_PAYLOAD_BYTES = 32 * 1024 * 1024  # 8 min of 16 kHz float32; a segment is <= 30 s
MAX_TEXT_CHARS = 16 * 1024
MAX_TRACE = 64
MAX_MAP_ITEMS = 64
MAX_CHANNELS = 8
# Real audio: the bus carries 16 kHz, the tts engines speak 22.05, 24 or 48 kHz; the same range
# as the player's `sample_rate` setting. A receiver resamples to its own rate, so a rate of 1 Hz
# would make it allocate gigabytes from one payload.
MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 192_000
# ... and what it makes is bounded by the duration: a segment is <= max_segment_s (<= 120 s).
MAX_PCM_S = 600
#: A float sample beyond this (30 dB over full scale) is no audio: its block is corrupt.
MAX_FLOAT_SAMPLE = 32.0
#: Every integer on the wire (seq, epoch, index, ns times, counters) is within +-2**62: a
#: wall clock in ns reaches it in 2116, and two of them add up to no more than int64 holds,
#: which is what msgpack packs (a peer's 2**64 once summed into a counter killed the
#: receiver's heartbeat at its next encode).
MAX_WIRE_INT = 2 ** 62
#: ... and every float (seconds of media, durations, levels, speeds, two hosts' clocks apart
#: in ms) within +-1e13: 317 years in ms, a clock reset to 1970 included. A media time of
#: 1e308 made the captions server's subtitles answer 500 for the rest of the session (its
#: milliseconds overflowed to inf).
MAX_WIRE_FLOAT = 1e13

#: The text of a bad value in an error: short, and flat however deep it is nested (the
#: builtin repr of a value nested 1000 deep raises RecursionError).
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict = 2, 40, 40, 4, 4


class ProtocolError(ValueError):
    """Bytes that are not a valid message of this protocol; `kind` is a short counter name."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def _refuse_ext(code: int, data: bytes) -> None:
    raise ProtocolError("ext_type", f"msgpack ext type {code} is not allowed")


def encode(msg: Message) -> list[bytes]:
    """Return the multipart frames for `msg`."""
    header: dict[str, object] = {"v": MAJOR, "type": msg.TYPE}
    payload = None
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if f.name == "pcm":
            pcm = np.asarray(value)
            if pcm.dtype.name not in PCM_DTYPES or pcm.ndim not in (1, 2):
                raise ValueError(f"pcm must be 1-D or 2-D int16/float32, got {pcm.dtype} "
                                 f"with {pcm.ndim} dims")
            header["dtype"] = pcm.dtype.name
            header["channels"] = 1 if pcm.ndim == 1 else pcm.shape[1]
            header["frames"] = pcm.shape[0]
            payload = np.ascontiguousarray(pcm, dtype=PCM_DTYPES[pcm.dtype.name]).tobytes()
        elif f.name == "trace":
            header["trace"] = [list(e) for e in value]
        else:
            header[f.name] = value
    frames = [msg.topic(), msgpack.packb(header, use_bin_type=True)]
    if payload is not None:
        frames.append(payload)
    return frames


def _unpack_header(data: bytes) -> dict:
    if len(data) > MAX_HEADER_BYTES:
        raise ProtocolError("oversized", f"header of {len(data)} bytes > {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(
            data, raw=False, strict_map_key=True, ext_hook=_refuse_ext,
            max_str_len=MAX_HEADER_BYTES, max_bin_len=0, max_array_len=MAX_TRACE,
            max_map_len=MAX_MAP_ITEMS, max_ext_len=0)
    except ProtocolError:
        raise
    # msgpack raises its own errors and also ValueError, TypeError, RecursionError...
    except Exception as exc:  # noqa: BLE001 - every failure becomes one error type
        raise ProtocolError("bad_header", f"undecodable msgpack header ({exc!r:.80})") from None
    if not isinstance(header, dict):
        raise ProtocolError("bad_header", f"header is a {type(header).__name__}, not a map")
    return header


def _check_scalar(name: str, value: object, kind: str) -> object:
    if kind == "str":
        if isinstance(value, str) and len(value) <= MAX_TEXT_CHARS:
            return value
    elif kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool) and \
                -MAX_WIRE_INT <= value <= MAX_WIRE_INT:
            return value
    elif kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value) and -MAX_WIRE_FLOAT <= value <= MAX_WIRE_FLOAT:
                return float(value)
    elif kind == "float | None":
        return None if value is None else _check_scalar(name, value, "float")
    raise ProtocolError("bad_field",
                        f"field {name!r:.40} must be {kind}, got {_SHOW.repr(value)}")


def _check_trace(value: object) -> tuple:
    if not isinstance(value, list) or len(value) > MAX_TRACE:
        raise ProtocolError("bad_field", "field 'trace' must be a list of [event, ns, media_s]")
    out = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 3:
            raise ProtocolError("bad_field",
                                f"trace entry {_SHOW.repr(entry)} is not [event, ns, s]")
        out.append((_check_scalar("trace.event", entry[0], "str"),
                    _check_scalar("trace.ns", entry[1], "int"),
                    _check_scalar("trace.media_s", entry[2], "float | None")))
    return tuple(out)


def _check_map(name: str, value: object, kind: str) -> dict:
    if not isinstance(value, dict):
        raise ProtocolError("bad_field", f"field {name!r} must be a map of str to {kind}")
    return {_check_scalar(name, k, "str"): _check_scalar(name, v, kind)
            for k, v in value.items()}


def _decode_pcm(header: dict, payload: bytes) -> np.ndarray:
    dtype_name = header.get("dtype")
    if not isinstance(dtype_name, str) or dtype_name not in PCM_DTYPES:
        raise ProtocolError("bad_pcm",
                            f"dtype {_SHOW.repr(dtype_name)} not in {sorted(PCM_DTYPES)}")
    channels = _check_scalar("channels", header.get("channels"), "int")
    frames = _check_scalar("frames", header.get("frames"), "int")
    if not 1 <= channels <= MAX_CHANNELS or frames < 0:
        raise ProtocolError("bad_pcm", f"channels={channels} frames={frames} out of range")
    dtype = PCM_DTYPES[dtype_name]
    expected = frames * channels * dtype.itemsize
    if len(payload) != expected:
        raise ProtocolError("bad_pcm", f"payload is {len(payload)} bytes, header says "
                                       f"{frames} frames x {channels} ch x {dtype_name} "
                                       f"= {expected}")
    pcm = np.frombuffer(payload, dtype=dtype)
    if dtype.kind == "f":
        pcm = _clean(pcm)
    return pcm if channels == 1 else pcm.reshape(frames, channels)


def _clean(pcm: np.ndarray) -> np.ndarray:
    """Float samples as audio has them: a corrupt block cleaned, anything else as it came.

    A block holding a sample no audio has (NaN, inf, or over MAX_FLOAT_SAMPLE) is corrupt:
    NaN becomes silence and the rest is clipped to full scale, so one bad sample is one
    click. Uncleaned, one NaN made the speaker gate's running level NaN, and every later word
    was refused until a restart. Moderate overs (a loud float signal, a resampler's
    overshoot) pass as they are: the ASR levels what it hears.
    """
    if pcm.size == 0 or (np.isfinite(pcm).all() and np.abs(pcm).max() <= MAX_FLOAT_SAMPLE):
        return pcm
    return np.clip(np.nan_to_num(pcm, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)


def decode(frames: list[bytes]) -> Message:
    """Decode multipart `frames` from an untrusted peer; only ProtocolError escapes."""
    if not isinstance(frames, (list, tuple)) or len(frames) not in (2, 3):
        raise ProtocolError("bad_frames", f"expected 2 or 3 frames, got {_SHOW.repr(frames)}")
    if not all(isinstance(f, (bytes, bytearray, memoryview)) for f in frames):
        raise ProtocolError("bad_frames", "frames must be bytes")
    topic, raw_header = bytes(frames[0]), bytes(frames[1])
    if len(topic) > MAX_TOPIC_BYTES:
        raise ProtocolError("oversized", f"topic of {len(topic)} bytes")
    header = _unpack_header(raw_header)
    version = header.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or \
            not 0 <= version <= MAX_WIRE_INT:
        raise ProtocolError("bad_header", "header has no integer protocol version 'v'")
    if version > MAJOR:
        raise ProtocolError("newer_version", f"peer speaks protocol {version}, this is {MAJOR}: "
                                             "upgrade voxweft on this host")
    cls = REGISTRY.get(header.get("type")) if isinstance(header.get("type"), str) else None
    if cls is None:
        raise ProtocolError("unknown_type",
                            f"unknown message type {_SHOW.repr(header.get('type'))}")
    is_pcm = issubclass(cls, PcmMessage)
    if is_pcm != (len(frames) == 3):
        raise ProtocolError("bad_frames", f"{cls.TYPE} needs {'3' if is_pcm else '2'} frames")
    if is_pcm and len(frames[2]) > MAX_PAYLOAD_BYTES:
        raise ProtocolError("oversized", f"payload of {len(frames[2])} bytes")

    kwargs: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name == "pcm":
            kwargs["pcm"] = _decode_pcm(header, bytes(frames[2]))
            continue
        if f.name not in header:
            continue  # absent fields take their documented default (tolerant reader)
        value = header[f.name]
        if f.type == "Trace":
            kwargs[f.name] = _check_trace(value)
        elif f.type in ("dict[str, int]", "dict[str, float]"):
            kwargs[f.name] = _check_map(f.name, value, f.type[10:-1])
        elif f.type == "list[str]":
            if not isinstance(value, list):
                raise ProtocolError("bad_field", f"field {f.name!r} must be a list of str")
            kwargs[f.name] = [_check_scalar(f.name, v, "str") for v in value]
        else:
            kwargs[f.name] = _check_scalar(f.name, value, f.type)
    try:
        msg = cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - a type's own checks refuse what it cannot hold
        raise ProtocolError("bad_field", f"{cls.TYPE}: {_SHOW.repr(exc)}") from None
    if is_pcm and not MIN_SAMPLE_RATE <= msg.sample_rate <= MAX_SAMPLE_RATE:
        raise ProtocolError("bad_pcm", f"sample_rate {msg.sample_rate} is not within "
                                       f"{MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz")
    if is_pcm and len(msg.pcm) > MAX_PCM_S * msg.sample_rate:
        raise ProtocolError("bad_pcm", f"{len(msg.pcm)} frames at {msg.sample_rate} Hz is "
                                       f"longer than {MAX_PCM_S} s")
    if topic != msg.topic():
        raise ProtocolError("bad_topic", f"topic {topic!r:.40} does not match {msg.topic()!r}")
    return msg
