"""Two hosts on a LAN, made of Linux network namespaces, for tests that need a real network.

Layout (three namespaces, all named ``vwnet-<pid>.<starttime>-<k>-<role>``)::

    ns "-0" (host a)            ns "-s" (the switch)              ns "-1" (host b)
    lo 127.0.0.1                                                  lo 127.0.0.1
    eth0 10.77.<n>.1/24 ==veth== p0 --+-- br0 --+-- p1 ==veth== eth0 10.77.<n>.2/24

Each host has its own loopback, its own port space and its own routing table, so fixed ports
never collide with the machine or with other tests, and 127.0.0.1 in one host is not reachable
from the other.  The filesystem is shared: /tmp, run directories and ZeroMQ ``ipc://`` paths are
the same files in every namespace (ipc crosses "hosts"; tcp does not).

A cable pull is modelled by taking a host's *switch port* down (``ip link set pX down`` in the
switch namespace): the host's own ``eth0`` then loses carrier (NO-CARRIER, still
administratively up, address and routes kept), its packets vanish silently, and the other host
keeps a live link into a switch that just stops delivering, which is what a real cable pull on a
switched LAN looks like.  Downing ``eth0`` inside the host instead would flush its routes and make
every send fail at once with ENETUNREACH, a kinder failure than a real one; veth cannot drop
carrier on its own (``ip link set ... carrier off`` is unsupported), hence the switch.

Every process started in a namespace, and anything it forks, is killed by ``close()``: it is run
by ``with``, by the fixture's teardown, and by ``atexit`` as a last resort.  A test process that
is SIGKILLed leaves its namespaces behind; ``stale()`` removes those whose owner is gone.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

PREFIX = "vwnet"
DEVICE = "eth0"
_NAME = re.compile(rf"^{PREFIX}-(\d+)\.(\d+)-(\d+)-([01s])$")
_COUNTER = itertools.count()


def _ip(*args: str, check: bool = True, timeout: float = 10) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; raise with its stderr when it fails and ``check`` is set."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def _starttime(pid: int) -> int | None:
    """A process's start time in clock ticks since boot, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]) if fields[0] != "Z" else None   # field 22 of stat(5); zombies are gone


def namespaces() -> list[str]:
    """The names of all network namespaces that ``ip netns`` knows."""
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def pids(namespace: str) -> list[int]:
    """The processes whose network namespace is ``namespace``."""
    done = _ip("netns", "pids", namespace, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def kill_all(namespace: str, grace: float = 0.0, deadline: float = 10.0) -> list[int]:
    """Kill every process in ``namespace`` (SIGTERM, ``grace`` seconds, then SIGKILL).

    Processes that fork while being killed are caught by repeating the sweep until the namespace
    is empty or ``deadline`` seconds have passed; returns the pids that were still found then.
    """
    try:
        if grace > 0 and _signal_all(pids(namespace), signal.SIGTERM):
            end = time.monotonic() + grace
            while pids(namespace) and time.monotonic() < end:
                time.sleep(0.05)
    finally:
        end = time.monotonic() + deadline
        while (left := pids(namespace)) and time.monotonic() < end:
            _signal_all(left, signal.SIGKILL)
            time.sleep(0.02)
    return left


def _signal_all(targets: list[int], sig: int) -> bool:
    """Send ``sig`` to each pid, ignoring the ones that already exited; True if any existed."""
    sent = False
    for pid in targets:
        try:
            os.kill(pid, sig)
            sent = True
        except ProcessLookupError:
            pass
    return sent


def delete(namespace: str) -> None:
    """Kill everything in ``namespace`` and delete it (its veth ends go with it)."""
    try:
        kill_all(namespace)
    finally:
        _ip("netns", "delete", namespace, check=False)


def stale() -> list[str]:
    """Delete the namespaces left by test processes that are no longer running; return them."""
    removed = []
    for name in namespaces():
        match = _NAME.match(name)
        if match and _starttime(int(match[1])) != int(match[2]):
            delete(name)
            removed.append(name)
    return removed


@functools.cache
def available() -> str | None:
    """None when namespaces, veth and bridges can be made here, else a one-line reason."""
    if sys.platform != "linux":
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed (apt-get install -y iproute2)"
    probe = f"{PREFIX}-{os.getpid()}.{_starttime(os.getpid())}-{next(_COUNTER)}-s"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "br0", "type", "bridge")
        _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return f"cannot make a network namespace with veth and bridge: {error}"
    finally:
        _ip("netns", "delete", probe, check=False)
    return None


class TwoHosts:
    """Two hosts on one switched /24, each in its own network namespace.

    Use as ``with TwoHosts() as lan:`` or from a fixture (``yield lan`` then ``lan.close()``).
    Hosts are addressed by the labels given (default ``"a"`` and ``"b"``).
    """

    def __init__(self, hosts: Sequence[str] = ("a", "b")):
        if len(hosts) != 2 or hosts[0] == hosts[1]:
            raise ValueError(f"two distinct host labels expected, not {hosts!r}")
        pid, k = os.getpid(), next(_COUNTER)
        base = f"{PREFIX}-{pid}.{_starttime(pid)}-{k}"
        # Any subnet would do (each pair is isolated), but distinct ones read better in logs.
        self.subnet = f"10.77.{(pid + k) % 254 + 1}"
        self.hosts = tuple(hosts)
        self._ns = {host: f"{base}-{i}" for i, host in enumerate(self.hosts)}
        self._port = {host: f"p{i}" for i, host in enumerate(self.hosts)}
        self._addr = {host: f"{self.subnet}.{i + 1}" for i, host in enumerate(self.hosts)}
        self.switch = f"{base}-s"
        self._procs: list[subprocess.Popen] = []
        self._made: list[str] = []
        self._closed = False
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        """Create the namespaces, the switch and the cables, and bring everything up."""
        for namespace in (self.switch, *self._ns.values()):
            _ip("netns", "add", namespace)
            self._made.append(namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
        sw = ("-n", self.switch)
        _ip(*sw, "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
        for host, namespace in self._ns.items():
            port = self._port[host]
            _ip(*sw, "link", "add", port, "type", "veth", "peer", "name", DEVICE,
                "netns", namespace)
            _ip(*sw, "link", "set", port, "master", "br0", "up")
            _ip("-n", namespace, "addr", "add", f"{self._addr[host]}/24", "dev", DEVICE)
            _ip("-n", namespace, "link", "set", DEVICE, "up")
        _ip(*sw, "link", "set", "br0", "up")
        for host in self.hosts:
            self._wait_carrier(host, True)

    def __enter__(self) -> TwoHosts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h}={self._addr[h]} in {self._ns[h]}" for h in self.hosts)
        return f"TwoHosts({hosts}{', closed' if self._closed else ''})"

    def namespace(self, host: str) -> str:
        """The name of ``host``'s network namespace."""
        return self._ns[host]

    def address(self, host: str) -> str:
        """``host``'s IPv4 address on the LAN (its ``eth0``)."""
        return self._addr[host]

    def prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command in ``host``'s namespace (``ip netns exec NS``)."""
        return ["ip", "netns", "exec", self._ns[host]]

    def popen(self, host: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside ``host``'s namespace; ``close()`` kills and reaps it."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        proc = subprocess.Popen([*self.prefix(host), *argv], **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, host: str, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``host``'s namespace to completion (``subprocess.run`` kwargs)."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        return subprocess.run([*self.prefix(host), *argv], **kwargs)

    def pids(self, host: str) -> list[int]:
        """The processes now running in ``host``'s namespace."""
        return pids(self._ns[host])

    def cut(self, host: str | None = None) -> None:
        """Pull ``host``'s cable (both cables when None) and wait until it has lost carrier."""
        for each in self._which(host):
            _ip("-n", self.switch, "link", "set", self._port[each], "down")
        for each in self._which(host):
            self._wait_carrier(each, False)

    def restore(self, host: str | None = None) -> None:
        """Plug ``host``'s cable back in (both when None) and wait until it has carrier."""
        for each in self._which(host):
            _ip("-n", self.switch, "link", "set", self._port[each], "up")
        for each in self._which(host):
            self._wait_carrier(each, True)

    def linked(self, host: str) -> bool:
        """Whether ``host``'s ``eth0`` has carrier (its cable is plugged in)."""
        done = _ip("-n", self._ns[host], "-o", "link", "show", DEVICE)
        return "LOWER_UP" in done.stdout.split(">", 1)[0]

    def link_bytes(self, host: str) -> tuple[int, int]:
        """(received, sent) bytes on ``host``'s ``eth0`` so far: all it exchanged on the LAN."""
        done = _ip("-n", self._ns[host], "-j", "-s", "link", "show", DEVICE)
        stats = json.loads(done.stdout)[0]["stats64"]
        return stats["rx"]["bytes"], stats["tx"]["bytes"]

    def _which(self, host: str | None) -> tuple[str, ...]:
        """The hosts that ``host`` names: itself, or both when None."""
        if host is None:
            return self.hosts
        if host not in self._ns:
            raise KeyError(f"no host {host!r} in {self.hosts}")
        return (host,)

    def _wait_carrier(self, host: str, up: bool, timeout: float = 5.0) -> None:
        """Wait until ``host``'s ``eth0`` has (or has lost) carrier."""
        end = time.monotonic() + timeout
        while self.linked(host) != up:
            if time.monotonic() > end:
                raise TimeoutError(f"{host}'s {DEVICE} did not go {'up' if up else 'down'}")
            time.sleep(0.01)

    def close(self, grace: float = 0.0) -> None:
        """Kill every process in the namespaces and delete them; safe to call more than once.

        ``grace`` > 0 sends SIGTERM first and waits that long before SIGKILL.
        """
        if self._closed:
            return
        try:
            for proc in self._procs:   # may not have entered its namespace yet
                if grace <= 0 and proc.poll() is None:
                    proc.kill()
            for namespace in self._made:
                kill_all(namespace, grace)
        finally:
            try:
                for proc in self._procs:
                    if proc.poll() is None:
                        proc.kill()
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
            finally:
                for namespace in reversed(self._made):
                    delete(namespace)
                self._closed = True
                atexit.unregister(self.close)
                left = [name for name in self._made if name in namespaces()]
                if left:
                    raise RuntimeError(f"namespaces not deleted: {left}")
