"""What the `voxweft` commands share: errors, this host, the running pipeline, a listener.

Loading a topology for a host imports that host's engines alone (`deploy.topology.load`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from voxweft.deploy import topology as topo_mod
from voxweft.deploy.supervisor import (
    CaptionsProgram,
    Supervisor,
    SupervisorError,
    check_own,
    default_run_dir,
)
from voxweft.deploy.topology import TopologyError


def die(msg: str, code: int = 1) -> int:
    """Say `msg` on stderr as "voxweft: msg" and return the exit status `code`."""
    print(f"voxweft: {msg}", file=sys.stderr)
    return code


def which_host(topology, requested: str | None) -> str:
    """The host this machine is: --host when given, else the one host the actors are on."""
    if requested:
        if requested not in topology.hosts:
            raise TopologyError(f"--host {requested!r} is not one of: "
                                f"{', '.join(topology.hosts)}")
        return requested
    used = sorted({config.host for config in topology.actors.values()})
    if len(used) == 1:
        return used[0]
    raise TopologyError(f"the topology places actors on several hosts; pass --host, one of: "
                        f"{', '.join(used)}")


def running_supervisor(args) -> tuple[Supervisor, object]:
    """The running instance for these arguments and its frozen topology.

    Both are loaded for this host when it is known: other hosts' engines are not imported.
    """
    run_dir = Path(args.run_dir) if args.run_dir else None
    host = args.host
    if run_dir is None:
        host = which_host(topo_mod.load(args.topology, host), host)
        run_dir = default_run_dir(host)
    if run_dir.exists():   # another user's (or a link) is never read or talked to
        check_own(run_dir)
    sup = Supervisor(run_dir)
    if not sup.running():
        raise SupervisorError(f"voxweft is not running (no supervisord on {sup.socket}); "
                              "start it with `voxweft up`")
    return sup, topo_mod.load(run_dir / "topology.toml", host)


#: How supervisord runs the captions page (`python -m` ...).
CAPTIONS_COMMAND = ("voxweft.tools.cli", "captions")


def captions_program(args):
    """`up --captions`: the page's program for supervisord, with a token beyond loopback."""
    if not args.captions:
        return None
    import secrets

    from voxweft.protocol.security import loopback

    token = "" if loopback(args.captions_bind) else secrets.token_urlsafe(16)
    return CaptionsProgram(CAPTIONS_COMMAND, args.captions_bind, args.captions_port, token)


def listener(args, command: str):
    """The topology a bus listener (tap, captions) hears and the CURVE keys it listens with.

    The keys: None on a loopback bus; else this host's, or with `--key FILE` a client's
    listed key. Keys it cannot have raise TopologyError, "COMMAND: why", which `main` says.
    """
    topology = tap_topology(args)
    try:
        return topology, topology.curve(None if args.key else which_host(topology, args.host),
                                        Path(args.key).expanduser() if args.key else None)
    except ValueError as exc:
        raise TopologyError(f"{command}: {exc}") from None


def tap_topology(args):
    """The topology to tap, loaded for --host when given (its engines alone are imported)."""
    run_dir = Path(args.run_dir) if args.run_dir else None
    if run_dir is None and not args.topology:
        topology = topo_mod.load(None, args.host)
        hosts = {config.host for config in topology.actors.values()}
        run_dir = default_run_dir(which_host(topology, args.host)) if len(hosts) == 1 else None
    if run_dir is not None and os.path.lexists(run_dir):
        check_own(run_dir)   # its topology names the endpoints we connect to
    if run_dir is not None and (run_dir / "topology.toml").exists():
        return topo_mod.load(run_dir / "topology.toml", args.host)
    return topo_mod.load(args.topology, args.host)
