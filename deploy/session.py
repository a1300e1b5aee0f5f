"""One session of the pipeline on this machine, under a private supervisord, start to stop.

`voxweft interpret` and `voxweft bench` run a topology's actors under a supervisord of their
own in a fresh run directory, hand every message on the bus to a collector until it says
the session is over, then stop everything and keep the actors' logs. This module is that
runner; what a session collects and what it writes are the callers' (tools.interpret,
tools.bench). It also holds the signals that stop a session as Ctrl-C does.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from voxweft.actors import budget
from voxweft.actors.engines import memory_check
from voxweft.actors.settings.topology import IPC_FOLDER_MAX
from voxweft.deploy.events import Board, exit_words
from voxweft.deploy.supervisor import (
    CaptionsProgram,
    Supervisor,
    SupervisorError,
    down_for_good,
    wait_ready,
)
from voxweft.deploy.topology import Topology
from voxweft.protocol import bus as wire
from voxweft.protocol.client import BusClient

#: The one host of a session's topology: every actor on loopback, on this machine.
HOST = "_interpret"


class Terminated(Exception):
    """SIGTERM or SIGHUP: stop the pipeline and keep what was interpreted, as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def unblock_stop_signals() -> None:
    """Let SIGINT, SIGTERM and SIGHUP through to this process and whatever it starts.

    A signal mask is inherited through fork and exec: started by a process that blocks them
    (a test run did, for its whole length), `voxweft`, its supervisord and its actors' helpers
    would never see a stop, and a stop would wait out every timeout. Call before any thread
    starts (a thread takes the mask of the one that made it). An *ignored* SIGINT (a
    script's background job) stays ignored: that one is the shell's choice, not an accident.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {*STOP_SIGNALS, signal.SIGINT})


def raise_terminated(signum, _frame) -> None:
    """Signal handler: raise Terminated."""
    raise Terminated(signum)


def run_session(topology: Topology, collector, topics: list[bytes], out_dir: Path,
                timeout_s: float | None, what: str, captions: CaptionsProgram | None = None,
                captions_url: str = "") -> tuple[int, str]:
    """Run the topology's actors under a private supervisord until `collector` is done.

    Every message on `topics` goes to `collector.add` until `collector.finished()`; its
    `stalled()` ends the wait when nothing moves, and its `verdict` is set to the budget's
    when the pipeline is ready. Then the actors stop and their logs are copied to
    `out_dir/logs`. Returns (exit code, reason): 0 when the collector finished.
    `captions`: the captions page is served meanwhile (supervised beside the actors), and
    `captions_url`, where to open it, is said once its program is written.
    """
    fits, line = memory_check(topology, HOST, "here")   # before anything loads
    print(f"voxweft: {line}", flush=True)
    if not fits:
        return 1, line
    run_dir = Path(tempfile.mkdtemp(prefix="vw-"))
    if len(str(run_dir)) > IPC_FOLDER_MAX:
        shutil.rmtree(run_dir, ignore_errors=True)
        return 1, (f"the temporary folder {run_dir.parent} is too long a path for the bus's "
                   f"sockets (at most {IPC_FOLDER_MAX - 12} characters): set TMPDIR to a "
                   "shorter one")
    # `timeout`, systemd and CI runners send SIGTERM; a closed terminal SIGHUP.
    original = {s: signal.signal(s, raise_terminated) for s in STOP_SIGNALS}
    original[signal.SIGINT] = signal.getsignal(signal.SIGINT)
    # Every socket, the recorder's too, is an ipc:// endpoint in the private (0700) run
    # directory: no TCP port to find free and then lose to another run (two runs drew the
    # same port, and one's asr took the other's segments), none where the machine has no
    # free one, and no other local user on the bus.
    sup = Supervisor(run_dir)
    # Every actor dials this recorder from its start, so a restarted one is heard from its
    # first message: subscribed to its PUB instead, a restarted mt's translations went out
    # before our reconnect reached it (0.5-2 s of backoff; mt loads in 0.4-0.9 s) and were
    # missing from translation.jsonl though they were spoken (CI, test_chaos).
    bus = BusClient([], topics)
    recorder = bus.bind(f"ipc://{run_dir}/recorder")
    topology = topology.with_overrides({"hosts": {HOST: {"recorder": recorder,
                                                         "ipc": str(run_dir)}}})
    sup.write(topology, HOST, captions, owner=os.getpid())   # gone with us, even on SIGKILL
    if captions is not None:
        print(f"voxweft: captions: {captions_url}", flush=True)
    # Which actor is down and why, from supervisord's event listener.
    events = BusClient([topology.events_connect(HOST)], wire.watched("interpret", wire.EVENTS))
    code, reason = 0, ""
    try:
        code, reason = _follow(topology, sup, collector, bus, events, timeout_s, what)
    except SupervisorError as exc:
        code, reason = 1, str(exc)
    except KeyboardInterrupt:
        code, reason = 128 + signal.SIGINT, "stopped by SIGINT (Ctrl-C)"
    except Terminated as exc:
        code, reason = 128 + exc.signum, f"stopped by {signal.Signals(exc.signum).name}"
    finally:
        # A second signal must not cut the shutdown short: actors would be left behind.
        for signum in original:
            signal.signal(signum, signal.SIG_IGN)
        bus.close()
        events.close()
        try:
            sup.shutdown()
        except SupervisorError as exc:
            print(f"voxweft: {exc}", file=sys.stderr)
        shutil.copytree(run_dir / "logs", out_dir / "logs", dirs_exist_ok=True)
        kept = out_dir / "logs" / "supervisord.log"
        if (run_dir / "supervisord.log").exists():   # a reason may name it: kept, and named
            shutil.copy2(run_dir / "supervisord.log", kept)
            reason = reason.replace(str(run_dir / "supervisord.log"), str(kept))
        shutil.rmtree(run_dir, ignore_errors=True)
        for signum, handler in original.items():
            signal.signal(signum, handler)
    return code, reason


def _follow(topology: Topology, sup: Supervisor, collector, bus: BusClient, events: BusClient,
            timeout_s: float | None, what: str) -> tuple[int, str]:
    """Start supervisord, wait for the actors, then feed `collector` until it is done.

    Returns (1, why) when the session timed out or stalled, else (0, ""). Says which actor
    went down as supervisord's event listener tells it; raises SupervisorError when one is
    down for good.
    """
    board = Board()
    t0 = time.monotonic()
    sup.start()
    # Meanwhile the actors dial the recorder: take them in (see BusClient.attend).
    ready = wait_ready(sup, topology, list(topology.actors), progress=lambda _: bus.attend())
    print(f"voxweft: pipeline ready in {time.monotonic() - t0:.1f} s; {what}", flush=True)
    collector.verdict = budget.judge(topology, ready, HOST)
    for line in collector.verdict[1]:
        print(f"voxweft: {line}", flush=True)
    limit = time.monotonic() + (timeout_s or 3600)
    last_check = 0.0
    while not collector.finished():
        if time.monotonic() > limit:
            return 1, f"timed out after {timeout_s:.0f} s"
        msg = bus.recv(0.2)
        if msg is not None:
            collector.add(msg)
        while (msg := events.recv(0)) is not None:
            try:
                line = board.update(msg)
            except AttributeError:   # not a Supervision message
                continue
            if line:
                print(f"voxweft: {line}", flush=True)
        if time.monotonic() - last_check > 1.0:
            last_check = time.monotonic()
            stalled = collector.stalled()
            if stalled:
                return 1, stalled
            for name, info in sup.processes().items():
                if down_for_good(info["statename"], info["exitstatus"]):
                    raise SupervisorError(f"actor {name} failed ({info['statename']}, "
                                          f"{exit_words(info['exitstatus'])}): "
                                          f"{sup.last_error(name)}")
    return 0, ""
