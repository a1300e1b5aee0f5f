"""CURVE on the bus: keys, the topology's rules, and real sockets refusing what is not listed.

The socket tests bind a non-loopback address of this machine (CURVE applies only there) with
real libzmq and pyzmq's ZAP handler: a listed client hears everything; a client without
CURVE, with an unlisted key or with the wrong server key hears nothing, and the refusal is
logged and counted.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import stat
import time
from pathlib import Path

import psutil
import pytest
import zmq

from voxweft.deploy.topology import load, parse
from voxweft.protocol import security, sockets


def _lan_address() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not security.loopback(a.address):
                return a.address
    return None


LAN = _lan_address()


def needs_lan(test):
    """A socket proof on a non-loopback address: skipped without one, failed so as root."""
    skip = pytest.mark.skipif(LAN is None, reason="no non-loopback IPv4 address here")
    return pytest.mark.proof(skip(test))


@pytest.fixture
def keys(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXWEFT_KEYS", str(tmp_path / "keys"))
    return {name: security.create_keys(name) for name in ("m2", "ultra", "tap", "stranger")}


def test_keys_are_made_private_and_kept(keys, tmp_path):
    public_file, secret_file, key = keys["m2"]
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(secret_file.parent.stat().st_mode) == 0o700
    assert security.valid_public_key(key) and key in public_file.read_text()
    public, _secret = security.load_keys(secret_file)
    assert public.decode() == key
    with pytest.raises(FileExistsError, match="delete it first"):
        security.create_keys("m2")
    os.chmod(secret_file, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        security.load_keys(secret_file)
    with pytest.raises(ValueError, match="no secret key file"):
        security.load_keys(tmp_path / "nothing.key_secret")
    with pytest.raises(ValueError, match="holds no secret key"):
        security.load_keys(public_file)


@pytest.mark.timeout(20)
def test_a_secret_key_path_that_is_no_file_is_refused_before_it_is_read(tmp_path):
    # A FIFO would hang the actor reading it, /dev/zero fill its memory (issue 48).
    fifo = tmp_path / "pipe.key_secret"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(ValueError, match="is not a key file"):
            security.load_keys(path)
    big = tmp_path / "big.key_secret"
    big.write_bytes(b"#" * (security.MAX_KEY_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="is not a key file"):
        security.load_keys(big)


def test_keys_are_private_from_the_start_and_never_written_through_a_link(tmp_path,
                                                                         monkeypatch):
    created = []
    real = security.zmq.auth.create_certificates

    def watch(directory, name):
        public, secret = real(directory, name)
        created.append(stat.S_IMODE(os.stat(secret).st_mode))   # before any chmod
        return public, secret

    monkeypatch.setattr(security.zmq.auth, "create_certificates", watch)
    os.umask(0o022)
    public, secret, _key = security.create_keys("a", tmp_path / "k")
    assert created == [0o600] and stat.S_IMODE(public.stat().st_mode) == 0o644
    assert os.umask(0o022) == 0o022   # left as it was
    target = tmp_path / "elsewhere"
    (tmp_path / "k" / "b.key_secret").symlink_to(target)   # a link to nowhere
    with pytest.raises(FileExistsError, match="delete it first"):
        security.create_keys("b", tmp_path / "k")
    assert not target.exists()
    (tmp_path / "link").symlink_to(tmp_path / "k")
    with pytest.raises(FileExistsError, match="not a folder of its own"):
        security.create_keys("c", tmp_path / "link")


def _two_hosts(keys, bind_a="192.0.2.20", bind_b="192.0.2.30", **extra) -> dict:
    raw = copy.deepcopy(load(None).raw)
    raw["hosts"] = {"m2": {"address": bind_a, "bind": bind_a, **extra.get("m2", {})},
                    "ultra": {"address": bind_b, "bind": bind_b, **extra.get("ultra", {})}}
    for actor in ("mt", "tts"):
        raw["actors"][actor]["host"] = "ultra"
    for actor in ("capture", "segmenter", "asr", "player"):
        raw["actors"][actor]["host"] = "m2"
    return raw


def test_a_loopback_topology_needs_no_keys():
    assert load(None).curve("local") is None


def test_a_lan_topology_without_keys_says_how_to_make_them(keys):
    topo = parse(_two_hosts(keys))
    with pytest.raises(ValueError, match=r"voxweft keys --host m2.*\[hosts.m2\] public_key"):
        topo.curve("m2")


def test_a_lan_topology_with_keys_knows_every_server_and_client(keys):
    raw = _two_hosts(keys, m2={"public_key": keys["m2"][2], "allow": ["192.0.2.30"]},
                     ultra={"public_key": keys["ultra"][2]})
    raw["clients"] = {"tap": keys["tap"][2]}
    topo = parse(raw)
    curve = topo.curve("m2")
    assert curve.public.decode() == keys["m2"][2]
    assert curve.servers == {"192.0.2.20": keys["m2"][2].encode(),
                             "192.0.2.30": keys["ultra"][2].encode()}
    assert set(curve.clients.values()) == {"host m2", "host ultra", "client tap"}
    assert curve.addresses == ("192.0.2.30",)
    tap = topo.curve(key_file=keys["tap"][1])
    assert tap.public.decode() == keys["tap"][2] and tap.addresses == ()
    with pytest.raises(ValueError, match="not listed in this topology"):
        topo.curve(key_file=keys["stranger"][1])
    with pytest.raises(ValueError, match="give --host NAME"):
        topo.curve()


@pytest.mark.parametrize("change,words", [
    ({"hosts": {"m2": {"public_key": "short"}}}, "hosts.m2.public_key = 'short' is not a CURVE"),
    ({"hosts": {"m2": {"allow": ["10.0.0.0/8"]}}}, "is not an IP address"),
    ({"clients": {"tap": "~" * 40}}, "clients.tap = "),
])
def test_bad_keys_in_a_topology_name_the_key(keys, change, words):
    raw = _two_hosts(keys)
    for table, values in change.items():
        for name, value in values.items():
            if table == "hosts":
                raw["hosts"][name].update(value)
            else:
                raw.setdefault(table, {})[name] = value
    with pytest.raises(ValueError, match=words):
        parse(raw)


# --------------------------------------------------------------------------- real sockets

def _curve(keys, me: str, clients=("m2", "tap"), addresses=()) -> security.Curve:
    public, secret = security.load_keys(keys[me][1])
    return security.Curve(public=public, secret=secret,
                          servers={LAN: keys["m2"][2].encode()},
                          clients={keys[c][2].encode(): c for c in clients},
                          addresses=tuple(addresses),
                          workers=frozenset({keys["m2"][2].encode()}))   # the one host


def _receive(sock, n: int, timeout_s: float) -> list[bytes]:
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        if sock.poll(50):
            got.append(sock.recv())
    return got


def _joined(pub, sub, timeout_s: float = 30.0) -> None:
    """Probe until `sub` hears `pub` (its CURVE handshake and subscription are through):
    how long that takes depends on the machine, not a fixed sleep. The probes are drained."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pub.send(b"probe")
        if sub.poll(100):
            break
    else:
        raise AssertionError(f"not heard within {timeout_s} s")
    time.sleep(0.2)   # probes in flight, then drop them all
    while sub.poll(0):
        sub.recv()


@needs_lan
def test_a_curve_pub_is_heard_only_by_listed_keys(keys, caplog):
    ctx = zmq.Context()
    server = _curve(keys, "m2")
    auth = server.start(ctx, "capture")
    caplog.set_level(logging.WARNING, logger="voxweft.security")
    pub = sockets.pub(ctx, f"tcp://{LAN}:0", server)
    endpoint = pub.getsockopt(zmq.LAST_ENDPOINT).decode()
    monitor = pub.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                     | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                     | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    listed = sockets.sub(ctx, [endpoint], [b""], _curve(keys, "tap"))
    plain = sockets.sub(ctx, [endpoint], [b""])                   # no CURVE at all
    stranger = sockets.sub(ctx, [endpoint], [b""], _curve(keys, "stranger"))
    wrong = security.Curve(public=server.public, secret=server.secret,   # a listed key, but
                           servers={LAN: keys["ultra"][2].encode()},    # the wrong server's
                           clients={})
    impostor = sockets.sub(ctx, [endpoint], [b""], wrong)
    try:
        _joined(pub, listed)
        for i in range(20):
            pub.send(b"audio %d" % i)
            time.sleep(0.01)
        assert _receive(listed, 20, 5.0) == [b"audio %d" % i for i in range(20)]
        for sock in (plain, stranger, impostor):   # nothing, probes included
            assert _receive(sock, 1, 0.5) == []
        refused = [r.getMessage() for r in caplog.records if "unlisted key" in r.getMessage()]
        assert any(keys["stranger"][2] in line for line in refused), refused
        failures, deadline = 0, time.monotonic() + 1.0   # refused clients keep retrying
        while time.monotonic() < deadline and monitor.poll(100):
            monitor.recv_multipart()
            failures += 1
        assert failures >= 2    # the stranger (ZAP) and the one without CURVE at least
    finally:
        for sock in (listed, plain, stranger, impostor, pub, monitor):
            sock.close(0)
        auth.stop()
        ctx.term()


@needs_lan
def test_an_unlisted_pull_takes_no_utterance(keys):
    ctx = zmq.Context()
    server = _curve(keys, "m2")
    auth = server.start(ctx, "segmenter")
    push = sockets.push(ctx, f"tcp://{LAN}:0", server)
    endpoint = push.getsockopt(zmq.LAST_ENDPOINT).decode()
    thief = sockets.pull(ctx, [endpoint], _curve(keys, "stranger"))
    tap = sockets.pull(ctx, [endpoint], _curve(keys, "tap"))   # a listed client, no host
    asr = sockets.pull(ctx, [endpoint], _curve(keys, "m2"))
    try:
        sent, deadline = 0, time.monotonic() + 30   # PUSH waits for a peer whose
        while sent < 10 and time.monotonic() < deadline:   # handshake is through
            try:
                push.send(b"segment %d" % sent, zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                time.sleep(0.05)
        assert sent == 10
        assert len(_receive(asr, 10, 5.0)) == 10   # all of them: none to the thief or tap
        assert _receive(thief, 1, 0.5) == [] and _receive(tap, 1, 0.5) == []
    finally:
        for sock in (thief, tap, asr, push):
            sock.close(0)
        auth.stop()
        ctx.term()


@needs_lan
def test_allow_admits_only_the_listed_source_addresses(keys):
    ctx = zmq.Context()
    server = _curve(keys, "m2", addresses=("192.0.2.99",))   # not where we connect from
    auth = server.start(ctx, "capture")
    pub = sockets.pub(ctx, f"tcp://{LAN}:0", server)
    endpoint = pub.getsockopt(zmq.LAST_ENDPOINT).decode()
    listed = sockets.sub(ctx, [endpoint], [b""], _curve(keys, "tap"))
    try:
        time.sleep(1.0)
        for i in range(5):
            pub.send(b"x%d" % i)
        assert _receive(listed, 1, 1.0) == []
    finally:
        for sock in (listed, pub):
            sock.close(0)
        auth.stop()
        ctx.term()


def test_keys_and_up_commands(tmp_path):
    import subprocess

    import tomli_w

    from tests.conftest import ROOT, VOXWEFT

    env = {**os.environ, "VOXWEFT_KEYS": str(tmp_path / "keys")}
    made = subprocess.run([*VOXWEFT, "keys", "--host", "m2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1].split('"')[1]
    assert "[hosts.m2]" in made.stdout and security.valid_public_key(key)
    secret = tmp_path / "keys" / "m2.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    again = subprocess.run([*VOXWEFT, "keys", "--host", "m2"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "delete it first" in again.stderr
    outside = subprocess.run([*VOXWEFT, "keys", "--client", "../../escaped"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=60)
    assert outside.returncode == 1 and "must be 1 to 63 letters" in outside.stderr
    assert not list(tmp_path.glob("**/escaped*")) and not (tmp_path.parent /
                                                            "escaped.key_secret").exists()

    topology = tmp_path / "lan.toml"
    topology.write_text(tomli_w.dumps(_two_hosts(None)), encoding="utf-8")
    up = subprocess.run([*VOXWEFT, "up", "--topology", str(topology), "--host", "m2",
                         "--run-dir", str(tmp_path / "run")], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 1
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and "voxweft keys --host m2" in lines[0], up.stderr
    assert not (tmp_path / "run" / "supervisord.pid").exists()   # nothing was started


def test_a_skipped_proof_fails_as_root(tmp_path):
    """CI is root: a LAN or network-namespace proof skipped there was never run, so it fails."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    test = tmp_path / "test_proof.py"
    test.write_text("import pytest\n\n\n@pytest.mark.proof\n"
                    "@pytest.mark.skipif(True, reason='no namespace here')\n"
                    "def test_p():\n    pass\n\n\ndef test_q():\n"
                    "    pytest.skip('a plain skip stays a skip')\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-p", "tests.conftest", str(test)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    if os.geteuid() == 0:
        assert done.returncode != 0 and "a proof was skipped as root" in done.stdout, done.stdout
        assert "a plain skip stays a skip" in done.stdout
    else:
        assert done.returncode == 0 and "2 skipped" in done.stdout, done.stdout
