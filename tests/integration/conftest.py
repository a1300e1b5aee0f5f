"""Integration fixtures: a fake upstream actor on real sockets, a topology, actor processes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq

from tests.conftest import ROOT, corpus_clips, local_topology, write_session
from voxweft.protocol import sockets
from voxweft.protocol.client import BusClient
from voxweft.protocol.codec import encode
from voxweft.protocol.messages import stamp


class FakeUpstream:
    """Plays the upstream actor: binds its PUB endpoint; listens to the actor under test."""

    def __init__(self, topology, upstream: str, actor: str) -> None:
        self.ctx = zmq.Context()
        self.pub = sockets.pub(self.ctx, topology.pub_bind(upstream))
        self.bus = BusClient([topology.pub_connect(actor)])
        self.upstream = upstream
        self.seq = 0

    def send(self, msg) -> None:
        self.seq += 1
        self.pub.send_multipart(encode(stamp(msg, src=self.upstream, epoch=1, seq=self.seq)))

    def receive(self, kind, timeout_s: float, where=lambda m: True):
        for msg in self.bus.messages(timeout_s):
            if isinstance(msg, kind) and where(msg):
                return msg
        return None

    def close(self) -> None:
        self.pub.close(0)
        self.ctx.term()
        self.bus.close()


@pytest.fixture
def topology_path(short_tmp):
    session = short_tmp / "in.wav"
    write_session(session, corpus_clips()[:1])
    return local_topology(short_tmp, session, short_tmp / "out.wav")


def start_actor(topology_path, actor: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "voxweft.actors", "--topology",
                             str(topology_path), "--actor", actor], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
