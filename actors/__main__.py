"""Run one actor: `python -m voxweft.actors --topology FILE [--host HOST] --actor NAME`.

What supervisord starts, with the actor's host: the topology is then validated for that host,
so the engines of actors placed on other hosts are not imported (nor need be installed).
"""

from __future__ import annotations

import signal
import time

STARTED = time.monotonic()   # supervisord counts the start from about here

# Block SIGTERM/SIGINT before any import can start a thread (BLAS pools, ONNX runtime...):
# every thread inherits the mask, so the runtime's signal thread alone takes them (sigwait).
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})

import argparse
import logging
import os
import sys

from voxweft.actors import actor_class
from voxweft.actors.runtime import EXIT_CONFIG, START_SECS, Runtime, StartupError, setup_logging
from voxweft.actors.settings.actors import ACTOR_NAMES


def main(argv: list[str] | None = None) -> int:
    """Run the actor; return its exit code.

    A configuration error (78) is returned only once supervisord counts the start as done,
    or it would retry it (see START_SECS).
    """
    code = run(argv)
    if code == EXIT_CONFIG:
        time.sleep(max(0.0, START_SECS + 0.5 - (time.monotonic() - STARTED)))
    return code


def run(argv: list[str] | None = None) -> int:
    """Parse arguments, build the actor, run it until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m voxweft.actors", description=__doc__)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--host", help="the host it runs on: only that host's engines are "
                                       "checked (default: every host's)")
    parser.add_argument("--actor", required=True, choices=ACTOR_NAMES)
    args = parser.parse_args(argv)
    setup_logging()
    log = logging.getLogger("voxweft")
    from voxweft.actors.engines import check_engine
    from voxweft.actors.settings.topology import TopologyError, load

    try:
        topology = load(args.topology, args.host, check_engine)
        actor = actor_class(args.actor)(topology, topology.actors[args.actor])
    except (TopologyError, ValueError, StartupError) as exc:
        log.error("%s: cannot start: %s", args.actor, exc)
        return EXIT_CONFIG
    config = topology.actors[args.actor]
    if config.nice:
        os.nice(config.nice)
    log.info("%s: starting (pid %d, %d thread(s), nice %d)", args.actor, os.getpid(),
             config.threads, os.nice(0))
    return Runtime(actor).run()


if __name__ == "__main__":
    sys.exit(main())
