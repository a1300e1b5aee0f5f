"""Smoke tests of the two-host network-namespace harness (tests/netns.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.netns import TwoHosts, available, namespaces, stale

REASON = available()
pytestmark = [pytest.mark.proof, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

PY = sys.executable

PUB = """
import sys, time, zmq
pub = zmq.Context().socket(zmq.PUB)
pub.bind(sys.argv[1])
print("ready", flush=True)
while True:
    pub.send(b"hello over the LAN")
    time.sleep(0.02)
"""

SUB = """
import sys, zmq
sub = zmq.Context().socket(zmq.SUB)
sub.subscribe(b"")
sub.setsockopt(zmq.RCVTIMEO, 5000)
sub.connect(sys.argv[1])
print(sub.recv().decode())
"""

LISTEN = """
import socket, sys, time
server = socket.create_server((sys.argv[1], int(sys.argv[2])), backlog=64)
print("ready", flush=True)
time.sleep(60)
"""

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("ok")
except OSError as error:
    print(type(error).__name__, error)
"""


@pytest.fixture(scope="module", autouse=True)
def _sweep():
    stale()


@pytest.fixture
def lan():
    with TwoHosts() as lan:
        yield lan


def start(lan: TwoHosts, host: str, script: str, *args: str) -> subprocess.Popen:
    """A python script in a host's namespace, once it has printed 'ready'."""
    proc = lan.popen(host, [PY, "-c", script, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def connect(lan: TwoHosts, host: str, address: str, port: int, timeout: float = 2.0) -> str:
    """'ok' when a TCP connect from host to address:port succeeds, else the error."""
    done = lan.run(host, [PY, "-c", CONNECT, address, str(port), str(timeout)],
                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def running(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def veths() -> set[str]:
    """The veth devices in the machine's own network namespace."""
    done = subprocess.run(["ip", "-o", "link", "show", "type", "veth"],
                          capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip() for line in done.stdout.splitlines()}


def test_pub_sub_across_the_lan(lan):
    start(lan, "a", PUB, f"tcp://{lan.address('a')}:5555")
    done = lan.run("b", [PY, "-c", SUB, f"tcp://{lan.address('a')}:5555"],
                   capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello over the LAN"


def test_loopback_is_private_to_each_host(lan):
    start(lan, "a", LISTEN, "127.0.0.1", "7001")
    assert connect(lan, "a", "127.0.0.1", 7001) == "ok"
    assert connect(lan, "b", "127.0.0.1", 7001).startswith("ConnectionRefusedError")
    assert connect(lan, "b", lan.address("a"), 7001).startswith("ConnectionRefusedError")


@pytest.mark.parametrize("pulled", ["a", None], ids=["a's cable", "both cables"])
def test_cut_and_restore(lan, pulled):
    start(lan, "a", LISTEN, "0.0.0.0", "7002")
    assert connect(lan, "b", lan.address("a"), 7002) == "ok"
    lan.cut(pulled)
    assert not lan.linked("a")
    assert lan.linked("b") == (pulled is not None)
    assert connect(lan, "b", lan.address("a"), 7002, timeout=0.5) != "ok"
    lan.restore(pulled)
    assert connect(lan, "b", lan.address("a"), 7002) == "ok"


def test_close_leaves_nothing_behind():
    before = veths()
    lan = TwoHosts()
    names = [lan.namespace("a"), lan.namespace("b"), lan.switch]
    lan.popen("a", ["sleep", "300"])
    # a detached grandchild in its own session: found through the namespace, not the parent
    lan.popen("b", ["sh", "-c", "setsid sleep 301 </dev/null >/dev/null 2>&1 & sleep 300"])
    deadline = time.monotonic() + 10
    while len(lan.pids("a")) + len(lan.pids("b")) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    inside = lan.pids("a") + lan.pids("b")
    assert len(inside) >= 3
    lan.close()
    assert not set(names) & set(namespaces())
    assert not [pid for pid in inside if running(pid)]
    assert veths() <= before
    lan.close()   # idempotent


def test_close_on_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt):
        with TwoHosts() as lan:
            names = [lan.namespace("a"), lan.namespace("b"), lan.switch]
            sleeper = lan.popen("b", ["sleep", "300"])
            raise KeyboardInterrupt
    assert not set(names) & set(namespaces())
    assert sleeper.poll() is not None


def test_stale_removes_what_a_killed_run_left():
    script = (
        "import os, signal, sys, time\n"
        "from tests.netns import TwoHosts\n"
        "lan = TwoHosts()\n"
        "lan.popen('a', ['sleep', '300'], stdout=-3, stderr=-3)\n"
        "while not lan.pids('a'): time.sleep(0.01)\n"
        "print(lan.namespace('a'), lan.namespace('b'), lan.switch, *lan.pids('a'), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=30,
                          cwd=ROOT)
    assert done.returncode == -signal.SIGKILL, done.stderr
    *names, pid = done.stdout.split()
    assert set(names) <= set(namespaces())
    assert running(int(pid))
    assert set(names) <= set(stale())
    assert not set(names) & set(namespaces())
    deadline = time.monotonic() + 5
    while running(int(pid)) and time.monotonic() < deadline:   # the orphan is reaped by init
        time.sleep(0.02)
    assert not running(int(pid))
