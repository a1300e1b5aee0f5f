"""A hostile peer: connects to every endpoint given and sends garbage of every kind.

    python -m tests.hostile --frames 100000 tcp://127.0.0.1:27601 tcp://127.0.0.1:27603 ...

Per endpoint, in turn until `--frames` frames are sent in all:
- as a ZeroMQ peer that passes the handshake (XSUB, the only type a PUB accepts; PUSH sockets
  accept only PULL, which cannot send): random frames, empty frames, random multipart,
  frames over the receiver's size limit;
- as a ZeroMQ peer of the wrong type (DEALER, PUSH): refused at the handshake;
- as a plain stream (TCP, or a unix socket for ipc://): random bytes, a greeting cut
  short, a valid greeting then a frame header that claims 2^62 bytes.
Prints one JSON line of what it sent.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import time

import zmq

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x01" + b"NULL" + b"\x00" * 16 + b"\x00" \
    + b"\x00" * 31


def _stream(endpoint: str) -> socket.socket:
    """A plain stream connection to a ZeroMQ endpoint: TCP, or a unix socket for ipc://."""
    if endpoint.startswith("ipc://"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1)
        try:
            s.connect(endpoint.removeprefix("ipc://"))
        except OSError:
            s.close()
            raise
        return s
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=1)


def raw_tcp(endpoint: str, rng: random.Random) -> int:
    """Three plain connections (TCP, or unix for ipc://) with garbage; the writes sent."""
    sent = 0
    for payload in (rng.randbytes(rng.randint(1, 4096)),
                    GREETING[:rng.randint(1, len(GREETING) - 1)],
                    GREETING + b"\x06" + struct.pack(">Q", 1 << 62) + rng.randbytes(64)):
        try:
            with _stream(endpoint) as s:
                s.sendall(payload)
                sent += 1
                s.settimeout(0.05)
                try:
                    s.recv(256)
                except OSError:
                    pass
        except OSError:
            pass
    return sent


def zmq_garbage(ctx: zmq.Context, endpoint: str, count: int, rng: random.Random) -> int:
    """`count` frames of garbage from a peer whose handshake succeeds."""
    sock = ctx.socket(zmq.XSUB)
    sock.setsockopt(zmq.LINGER, 200)   # let what is queued go out before the next peer
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.SNDTIMEO, 100)
    sock.connect(endpoint)
    sent = 0
    try:
        for i in range(count):
            kind = i % 10
            if kind == 0:
                frames = [b""]
            elif kind == 1:   # bigger than any output socket takes in: the link is dropped
                frames = [rng.randbytes(64 * 1024)]
            elif kind == 2:   # a multipart message of random parts
                frames = [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(2, 5))]
            elif kind == 3:   # a voxweft-looking topic with a broken header
                frames = [b"\x01status.asr", rng.randbytes(rng.randint(0, 300))]
            else:
                frames = [rng.randbytes(rng.randint(1, 200))]
            try:
                sock.send_multipart(frames)
                sent += len(frames)
            except zmq.Again:
                time.sleep(0.01)
    finally:
        sock.close(0)
    return sent


def wrong_type(ctx: zmq.Context, endpoint: str, rng: random.Random) -> int:
    """Peers of a type the endpoint does not accept: refused at the handshake."""
    sent = 0
    for kind in (zmq.DEALER, zmq.PUSH):
        sock = ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, 0)
        sock.setsockopt(zmq.IMMEDIATE, 0)
        sock.connect(endpoint)
        for _ in range(10):
            try:
                sock.send(rng.randbytes(32))
                sent += 1
            except zmq.Again:
                break
        time.sleep(0.05)
        sock.close(0)
    return sent


def main(argv: list[str] | None = None) -> int:
    """Attack every endpoint in turn until the frame budget is spent."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("endpoints", nargs="+")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    ctx = zmq.Context()
    sent = {"zmq": 0, "wrong_type": 0, "tcp": 0, "connections": 0}
    per_round = 500
    while sum(sent[k] for k in ("zmq", "wrong_type", "tcp")) < args.frames:
        for endpoint in args.endpoints:
            sent["zmq"] += zmq_garbage(ctx, endpoint, per_round, rng)
            sent["wrong_type"] += wrong_type(ctx, endpoint, rng)
            sent["tcp"] += raw_tcp(endpoint, rng)
            sent["connections"] += 6
    ctx.term()
    sent["frames"] = sent["zmq"] + sent["wrong_type"] + sent["tcp"]
    print(json.dumps(sent), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
