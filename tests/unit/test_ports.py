"""Ports a pipeline binds lie outside the range kernels give outgoing connections.

A ZeroMQ socket reconnecting to a port nothing listens on yet is now and then given that
very port as its own and connected to itself; the actor that comes up to bind it then fails
"Address already in use" (CI, issue 37's run: segmenter on 47602).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from voxweft.deploy.topology import load
from voxweft.protocol.sockets import (
    IANA_EPHEMERAL,
    LINUX_EPHEMERAL,
    ephemeral_range,
    free_ports,
)
from voxweft.tools.cli_pipeline import ephemeral_ports

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_topologies_bind_no_port_an_outgoing_connection_may_take(path):
    topology = load(path)
    for host in topology.hosts_in_use():
        bound = topology.ports_bound_on(host)
        assert len(bound) >= 2
        for span in (LINUX_EPHEMERAL, IANA_EPHEMERAL, ephemeral_range()):
            assert ephemeral_ports(topology, host, span) == [], (path.name, host, span)


def test_up_warns_of_each_port_in_the_range_and_says_what_to_do():
    default = load(None)
    topology = default.with_overrides({"actors": {"segmenter": {"port": 47602}},
                                       "hosts": {"local": {"events_port": 50000}}})
    lines = ephemeral_ports(topology, "local", LINUX_EPHEMERAL)
    assert len(lines) == 2
    assert lines[0].startswith("hosts.local.events_port = 50000 lies in")
    assert lines[1].startswith("actors.segmenter.port = 47602 lies in")
    assert all("choose a port under 32768" in line for line in lines)
    assert ephemeral_ports(topology, "local", (60000, 61000)) == []


def test_free_ports_are_free_distinct_and_outside_the_range():
    low, high = ephemeral_range()
    held = socket.socket()
    held.bind(("127.0.0.1", 0))   # the kernel's choice: inside the range
    assert low <= held.getsockname()[1] <= high
    held.close()
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        assert not low <= port <= high and 1024 < port < 65536
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_this_machines_range_is_read_from_the_kernel():
    low, high = ephemeral_range()
    assert 1024 <= low < high <= 65535
    linux = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if linux.exists():
        assert (low, high) == tuple(int(x) for x in linux.read_text().split())
