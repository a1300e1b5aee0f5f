"""`voxweft tap` and `voxweft replay`: watch, record and replay the bus.

The tap only subscribes to PUB sockets (a tap on PUSH would steal work) with LINGER 0 and a
bounded receive queue: ZeroMQ drops for a slow tap, the pipeline never waits for it.

A recording is a stream of msgpack arrays ``[receive_ns, topic, header, payload?]``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import msgpack
import zmq

from voxweft.deploy.topology import Topology
from voxweft.protocol import sockets
from voxweft.protocol.client import BusClient
from voxweft.protocol.codec import (
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    ProtocolError,
    decode,
    encode,
)
from voxweft.protocol.messages import (
    CUSTODY_TYPES,
    EndOfStream,
    Message,
    PcmMessage,
    PlaybackEvent,
    SpeechChunk,
    Status,
    Transcript,
    Translation,
    VadEvent,
    is_draft,
    trace_ns,
)
from voxweft.tools.terminal import printable


def describe(msg: Message, recv_ns: int) -> dict:
    """The fields a person wants to see for one message, every text printable."""
    return {k: printable(v) for k, v in _fields(msg, recv_ns).items()}


def _fields(msg: Message, recv_ns: int) -> dict:
    row: dict = {"t": round(recv_ns / 1e9, 3), "topic": msg.topic().decode(), "src": msg.src,
                 "seq": msg.seq, "transit_ms": round((recv_ns - msg.sent_ns) / 1e6, 2)}
    if hasattr(msg, "utt"):
        row["utt"] = msg.utt
    if isinstance(msg, (Transcript, Translation)):
        row["text"] = msg.text
    if is_draft(msg):
        row["detail"] = "draft: the utterance if it ends at this pause"
    if isinstance(msg, PcmMessage):
        row["audio_s"] = round(msg.duration_s, 3)
    if isinstance(msg, (VadEvent, PlaybackEvent)):
        row["event"] = msg.event
    if isinstance(msg, VadEvent) and msg.event == "rejected":
        row["detail"] = (f"{msg.media_s:.2f}-{msg.end_s:.2f} s not interpreted: {msg.reason}")
    reason = getattr(msg, "reason", "") or getattr(msg, "skipped", "")
    if isinstance(msg, (PlaybackEvent, SpeechChunk)) and reason:
        row["detail"] = f"not spoken: {reason}"
    if isinstance(msg, Status):
        row.update(state=msg.state, busy_s=msg.busy_s, detail=msg.detail)
    if isinstance(msg, EndOfStream):
        row["media_s"] = msg.media_s
    trace = getattr(msg, "trace", ())
    speech_end = trace_ns(trace, "speech_end") if trace else None
    if speech_end is not None:
        row["since_speech_end_s"] = round((recv_ns - speech_end) / 1e9, 3)
    return row


def format_line(row: dict) -> str:
    """One human line per message."""
    millis = int(row["t"] * 1000) % 1000
    clock = time.strftime("%H:%M:%S", time.localtime(row["t"])) + f".{millis:03d}"
    parts = [clock, f"{row['topic']:<22}", f"seq={row['seq']:<6}"]
    if row.get("utt"):
        parts.append(f"utt={row['utt']}")
    for key in ("event", "state"):
        if key in row:
            parts.append(str(row[key]))
    if "audio_s" in row:
        parts.append(f"{row['audio_s']:.3f}s audio")
    if "text" in row:
        parts.append(json.dumps(row["text"], ensure_ascii=False))
    if row.get("detail"):
        parts.append(row["detail"])
    if "since_speech_end_s" in row:
        parts.append(f"+{row['since_speech_end_s']:.3f}s since speech end")
    return " ".join(parts)


def tap(topology: Topology, args, curve=None) -> int:
    """Print every message on the bus until --count or --duration."""
    endpoints = [topology.pub_connect(a) for a in topology.actors]
    bus = BusClient(endpoints, [args.topic.encode()], curve)
    record = _private(args.record) if args.record else None
    packer = msgpack.Packer(use_bin_type=True)
    seen = 0
    print(f"voxweft tap: listening on {', '.join(endpoints)}", file=sys.stderr)
    try:
        wanted = args.count is None or args.count > 0
        for got in bus.stream(args.duration or None) if wanted else ():
            if record:
                record.write(packer.pack([got.recv_ns, *got.frames]))
            if got.message is None:
                print(f"voxweft tap: undecodable message ({got.error})", file=sys.stderr)
                continue
            seen += 1
            row = describe(got.message, got.recv_ns)
            print(json.dumps(row, ensure_ascii=False) if args.json else format_line(row),
                  flush=True)
            if seen == args.count:
                break
    except KeyboardInterrupt:
        pass
    finally:
        bus.close()
        if record:
            record.close()
    print(f"voxweft tap: {seen} message(s), {sum(bus.bad.values())} undecodable",
          file=sys.stderr)
    return 0


def _private(path) -> object:
    """`path` opened to write, readable by its owner alone (a recording holds the talk)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)   # also when it was there before, with a wider mode
    return os.fdopen(fd, "wb")


def read_recording(path: Path):
    """Yield (receive_ns, frames) from a recording; bounded like the wire decoder."""
    with open(path, "rb") as f:
        unpacker = msgpack.Unpacker(f, raw=True, max_buffer_size=MAX_PAYLOAD_BYTES * 2,
                                    max_array_len=4, max_map_len=0,
                                    max_bin_len=MAX_PAYLOAD_BYTES + MAX_HEADER_BYTES)
        try:
            for item in unpacker:
                if not (isinstance(item, list) and len(item) >= 3 and
                        isinstance(item[0], int) and
                        all(isinstance(x, bytes) for x in item[1:])):
                    raise ValueError("not a voxweft tap recording")
                yield item[0], list(item[1:])
        except (ValueError, msgpack.UnpackException) as exc:
            raise ValueError(f"{path}: {exc}") from None


def replay(topology: Topology, path: Path, fast: bool, topic: str = "") -> int:
    """Publish a recording again, each message from its original sender's endpoint.

    Only messages whose topic starts with `topic` are published, so a recording of the
    whole bus can drive one live actor (e.g. `--topic transcript` into a running mt).
    Utterances get new ids (`ID~rRUN`): an actor that handled them before handles them again.
    Beyond loopback it publishes with CURVE and this host's keys, as the actors do.
    """
    if not path.exists():
        print(f"voxweft replay: {path} not found", file=sys.stderr)
        return 2
    ctx = zmq.Context()
    pubs: dict[str, zmq.Socket] = {}
    auth = None   # the ZAP handler, started with the first CURVE socket
    sent = 0
    run = f"{time.time_ns() // 1000 % 0xFFFFFF:06x}"
    try:
        items = []
        for recv, frames in read_recording(path):
            if not frames[0].startswith(topic.encode()):
                continue
            try:
                msg = decode(frames)
            except ProtocolError:
                continue   # recorded garbage is not published again
            if isinstance(msg, CUSTODY_TYPES):
                # A replayed utterance is a new one: a live actor drops what it handled
                # before (the utterance path is deduplicated by utterance id).
                frames = encode(dataclasses.replace(msg, utt=f"{msg.utt}~r{run}"))
            items.append((recv, frames, msg.src))
        for src in sorted({src for _, _, src in items if src in topology.actors}):
            host = topology.host_of(src).name
            try:   # the curve of the actor's own process
                curve = topology.curve(host)
            except ValueError as exc:
                print(f"voxweft replay: {src} publishes on a CURVE bus as host {host}: {exc}; "
                      "or replay into a topology that binds loopback", file=sys.stderr)
                return 1
            if curve is not None and auth is None:   # one per context (the first host's allow)
                auth = curve.start(ctx, "replay")
            try:
                pubs[src] = sockets.pub(ctx, topology.pub_bind(src), curve)
            except zmq.ZMQError as exc:
                print(f"voxweft replay: cannot bind {topology.pub_bind(src)} for {src} ({exc}); "
                      f"stop the live {src} actor first", file=sys.stderr)
                return 1
        # Subscribers retry at most RECONNECT_IVL_MAX apart: wait till they have joined.
        time.sleep(sockets.COMMON[zmq.RECONNECT_IVL_MAX] / 1000 + 0.5)
        first_recv, t0 = (items[0][0] if items else 0), time.monotonic()
        for recv, frames, src in items:
            if src not in pubs:
                continue
            if not fast:
                delay = (recv - first_recv) / 1e9 - (time.monotonic() - t0)
                if delay > 0:
                    time.sleep(delay)
            pubs[src].send_multipart(frames)
            sent += 1
        time.sleep(0.2)
    except ValueError as exc:
        print(f"voxweft replay: {exc}", file=sys.stderr)
        return 1
    finally:
        for sock in pubs.values():
            sock.close(0)
        if auth is not None:
            auth.stop()
        ctx.term()
    print(f"voxweft replay: published {sent} message(s) from {', '.join(pubs) or 'nobody'}",
          file=sys.stderr)
    return 0
