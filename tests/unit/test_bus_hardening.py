"""The bus against a refused, keyless or hostile peer: backoff, quiet logs, no open doors.

Real libzmq sockets (LINGER 0, a per-test timeout); the CURVE tests bind a non-loopback
address of this machine, where CURVE applies.
"""

from __future__ import annotations

import logging
import threading
import time

import msgpack
import numpy as np
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from tests.unit.test_security import LAN, _two_hosts, needs_lan
from voxweft.deploy.topology import parse
from voxweft.protocol import security, sockets
from voxweft.protocol.codec import ProtocolError, decode, encode
from voxweft.protocol.messages import AudioFrame, SpeechChunk, Status
from voxweft.tools import tap

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)
    assert context.closed


def _handshakes(monitor: zmq.Socket, for_s: float, redial=None) -> int:
    """Connections the bound side accepted within `for_s` (each one a handshake)."""
    accepted, deadline = 0, time.monotonic() + for_s
    while time.monotonic() < deadline:
        if redial is not None:
            redial()
        if monitor.poll(10) and recv_monitor_message(monitor)["event"] == zmq.EVENT_ACCEPTED:
            accepted += 1
    return accepted


def _curve_server(ctx: zmq.Context) -> tuple[zmq.Socket, str]:
    """A CURVE PUB on loopback (made by hand: the bus uses plain sockets there)."""
    public, secret = zmq.curve_keypair()
    pub = ctx.socket(zmq.PUB)
    pub.linger = 0
    pub.curve_publickey, pub.curve_secretkey, pub.curve_server = public, secret, True
    pub.bind("tcp://127.0.0.1:*")
    return pub, pub.getsockopt_string(zmq.LAST_ENDPOINT)


def _client() -> security.Curve:
    """A CURVE client that expects another server key than the one it meets (a stale key)."""
    public, secret = zmq.curve_keypair()
    return security.Curve(public=public, secret=secret, clients={},
                          servers={"127.0.0.1": zmq.curve_keypair()[0]})


# --------------------------------------------------------------------------- 1. backoff

def test_a_refused_peer_retries_a_few_times_not_hundreds(ctx):
    # A stale server key: libzmq retries by itself, but after a failed handshake it starts
    # its backoff again from RECONNECT_IVL every time (it never grows).
    pub, endpoint = _curve_server(ctx)
    monitor = pub.get_monitor_socket(zmq.EVENT_ACCEPTED)
    sub = sockets.sub(ctx, [endpoint], [b""], _client())
    assert 1 <= _handshakes(monitor, 3.0) <= 8     # 30 with a 100 ms RECONNECT_IVL
    assert not sub.closed


def test_redial_backs_off_while_a_peer_keeps_refusing(ctx):
    # What libzmq gives up on (a protocol error) the runtime connects again itself; at once,
    # that was ~600 handshakes a second. Redial waits RECONNECT_IVL, doubling to _MAX.
    pub, endpoint = _curve_server(ctx)
    monitor = pub.get_monitor_socket(zmq.EVENT_ACCEPTED)
    curve = _client()
    sub = sockets.sub(ctx, [endpoint], [b""], curve)
    lost = sub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    redial = sockets.Redial(curve)

    def runtime_loop() -> None:
        while lost.poll(0):
            recv_monitor_message(lost)
            redial.lost(sub, endpoint, time.monotonic())
        redial.connect_due(time.monotonic())

    assert 1 <= _handshakes(monitor, 3.0, runtime_loop) <= 8
    sub.disable_monitor()


def test_redial_waits_from_the_start_again_after_a_connection_that_lasted(ctx):
    sock = ctx.socket(zmq.SUB)
    redial = sockets.Redial()
    first = sockets.COMMON[zmq.RECONNECT_IVL] / 1000
    most = sockets.COMMON[zmq.RECONNECT_IVL_MAX] / 1000
    endpoint, now, waits = "tcp://127.0.0.1:9", 100.0, []
    redial.lost(sock, endpoint, now)         # a peer restarted: at once, as before
    assert redial.connect_due(now) is None
    for _ in range(5):                       # refused at once each time
        redial.lost(sock, endpoint, now)
        waits.append(redial.connect_due(now))
        now += waits[-1]
        assert redial.connect_due(now) is None   # connected again
    assert waits == [min(first * 2 ** i, most) for i in range(5)]
    redial.lost(sock, endpoint, now + most + 1)   # after a connection that lasted
    assert redial.connect_due(now + most + 1) is None


# --------------------------------------------------------------------------- 2. quiet ZAP log

def test_zap_refusals_are_counted_always_and_said_once_per_10_s(caplog):
    listed, stranger = zmq.curve_keypair()[0], zmq.curve_keypair()[0]
    curve = security.Curve(public=listed, secret=b"", servers={}, clients={listed: "tap"})
    admit = security._Admit(curve, "capture")
    caplog.set_level(logging.WARNING, logger="voxweft.security")
    assert admit.callback("voxweft", listed)
    assert not any(admit.callback("voxweft", stranger) for _ in range(500))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and stranger.decode() in lines[0], lines
    assert admit.refused == 500
    admit.said -= security.REFUSED_LOG_S               # 10 s later
    admit.callback("voxweft", stranger)
    assert len(caplog.records) == 2 and "501 refused" in caplog.records[-1].getMessage()


# --------------------------------------------------------------------------- 3. ZAP enforced

@needs_lan
def test_a_curve_server_without_a_zap_handler_admits_nobody(ctx):
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    server = security.Curve(public=server_public, secret=server_secret, servers={},
                            clients={client_public: "tap"})    # listed, but nobody checks
    pub = sockets.pub(ctx, f"tcp://{LAN}:0", server)            # no server.start(ctx, ...)
    client = security.Curve(public=client_public, secret=client_secret, clients={},
                            servers={LAN: server_public})
    sub = sockets.sub(ctx, [pub.getsockopt_string(zmq.LAST_ENDPOINT)], [b""], client)
    deadline, heard = time.monotonic() + 1.5, []
    while time.monotonic() < deadline and not heard:
        pub.send(b"audio")
        if sub.poll(50):
            heard.append(sub.recv())
    assert heard == []
    assert pub.getsockopt(zmq.ZAP_ENFORCE_DOMAIN) == 1


# --------------------------------------------------------------------------- 4. replay

def _recording(path) -> None:
    status = encode(Status(src="capture", state="ready"))
    path.write_bytes(msgpack.packb([time.time_ns(), *status], use_bin_type=True))


@needs_lan
def test_replay_refuses_a_lan_bind_without_keys(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXWEFT_KEYS", str(tmp_path / "keys"))
    topology = parse(_two_hosts(None, bind_a=LAN))          # capture on m2, no keys
    _recording(tmp_path / "rec")
    assert tap.replay(topology, tmp_path / "rec", fast=True) == 1   # was 0: published plain
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "voxweft keys --host m2" in lines[0] and "loopback" in lines[0]


@needs_lan
def test_replay_publishes_with_curve_on_a_lan_bus(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXWEFT_KEYS", str(tmp_path / "keys"))
    keys = {name: security.create_keys(name) for name in ("m2", "ultra", "tap")}
    raw = _two_hosts(keys, bind_a=LAN, m2={"public_key": keys["m2"][2]},
                     ultra={"public_key": keys["ultra"][2]})
    raw["clients"] = {"tap": keys["tap"][2]}
    topology = parse(raw)
    _recording(tmp_path / "rec")
    real_pub, bound = sockets.pub, threading.Event()

    def pub(*args, **kwargs):
        sock = real_pub(*args, **kwargs)
        bound.set()
        return sock

    monkeypatch.setattr(sockets, "pub", pub)
    done = []
    player = threading.Thread(target=lambda: done.append(
        tap.replay(topology, tmp_path / "rec", fast=True)))
    player.start()
    assert bound.wait(10)
    ctx = zmq.Context()
    endpoint = topology.pub_connect("capture")
    listed = sockets.sub(ctx, [endpoint], [b""], topology.curve(key_file=keys["tap"][1]))
    plain = sockets.sub(ctx, [endpoint], [b""])
    try:
        player.join(15)
        assert done == [0]
        assert listed.poll(0) and decode(listed.recv_multipart()).src == "capture"
        assert not plain.poll(0)
    finally:
        ctx.destroy(linger=0)


# --------------------------------------------------------------------------- 5. sample rate

@pytest.mark.parametrize("rate", [1, 7999, 192_001, 2**40])
def test_an_absurd_sample_rate_is_refused(rate):
    for msg in (AudioFrame(src="capture", pcm=np.zeros(4, np.float32), sample_rate=rate),
                SpeechChunk(src="tts", pcm=np.zeros(4, np.int16), sample_rate=rate)):
        with pytest.raises(ProtocolError) as err:
            decode(encode(msg))
        assert err.value.kind == "bad_pcm"


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 48000, 192_000])
def test_real_sample_rates_pass(rate):
    assert decode(encode(AudioFrame(src="capture", pcm=np.zeros(4, np.float32),
                                    sample_rate=rate))).sample_rate == rate


def test_audio_longer_than_max_pcm_s_is_refused():
    from voxweft.protocol.codec import MAX_PCM_S

    longest = np.zeros(8000 * MAX_PCM_S, np.int16)     # within MAX_PAYLOAD_BYTES at 8 kHz
    assert decode(encode(AudioFrame(src="capture", pcm=longest, sample_rate=8000)))
    with pytest.raises(ProtocolError, match="bad_pcm"):
        decode(encode(AudioFrame(src="capture", pcm=np.zeros(len(longest) + 8, np.int16),
                                 sample_rate=8000)))
