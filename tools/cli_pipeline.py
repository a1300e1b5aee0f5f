"""`voxweft up | captions | down | status | restart | logs`: this host's supervised pipeline."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from voxweft.actors import budget
from voxweft.actors.clock import offsets as clock_offsets
from voxweft.actors.echo import describe as echo_words
from voxweft.actors.engines import memory_check
from voxweft.deploy import topology as topo_mod
from voxweft.deploy.events import DOWN, describe, supervision
from voxweft.deploy.session import STOP_SIGNALS, Terminated, raise_terminated
from voxweft.deploy.supervisor import (
    GROUP,
    BusWatcher,
    Supervisor,
    SupervisorError,
    default_run_dir,
    wait_ready,
)
from voxweft.protocol.sockets import ephemeral_range
from voxweft.tools.cli_common import (
    captions_program,
    die,
    listener,
    running_supervisor,
    which_host,
)
from voxweft.tools.terminal import follow, shown


def ephemeral_ports(topology, host: str, span: tuple[int, int] | None = None) -> list[str]:
    """One line per port `host` binds that an outgoing connection may take first."""
    low, high = span or ephemeral_range()
    return [f"{key} = {port} lies in this machine's range for outgoing connections "
            f"({low}-{high}): a connection may hold it and the actor fail to bind; "
            f"choose a port under {low} in the topology"
            for key, port in topology.ports_bound_on(host) if low <= port <= high]


def cmd_up(args) -> int:
    """Start this host's actors under supervisord; return once all are ready."""
    topology = topo_mod.load(args.topology, args.host)   # only this host's engines imported
    host = which_host(topology, args.host)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(host)
    try:   # beyond loopback the bus is CURVE: refuse to start without this host's keys
        curve = topology.curve(host)
    except ValueError as exc:
        return die(f"up: {exc}")
    fits, line = memory_check(topology, host)   # before anything loads
    if not fits:
        return die(f"up: {line}")
    print(f"voxweft: {line}")
    for line in ephemeral_ports(topology, host):
        print(f"voxweft: warning: {line}")
    captions = captions_program(args)
    sup = Supervisor(run_dir)
    sup.write(topology, host, captions)
    actors = topology.actors_on(host)
    t0 = time.monotonic()
    sup.start()
    print(f"voxweft: supervisord started for {', '.join(actors)} (run dir {run_dir})")
    shown: set[str] = set()

    def progress(ready: list[str]) -> None:
        for name in ready:
            if name not in shown:
                shown.add(name)
                print(f"  {name:<10} ready after {time.monotonic() - t0:5.1f} s", flush=True)

    try:
        statuses = wait_ready(sup, topology, actors, timeout_s=args.timeout, progress=progress,
                              curve=curve)
    except SupervisorError as exc:
        print(f"voxweft up: {exc}", file=sys.stderr)
        print(f"voxweft: actors are left running for inspection; stop with `voxweft down"
              f"{' --run-dir ' + str(run_dir) if args.run_dir else ''}`", file=sys.stderr)
        return 1
    print(f"voxweft: all {len(actors)} actors ready in {time.monotonic() - t0:.1f} s")
    for line in budget.judge(topology, statuses, host)[1]:
        print(f"voxweft: {line}")
    print(f"control: {sup.ctl_command()} status|restart {GROUP}:asr|tail -f {GROUP}:tts")
    if captions is not None:
        from voxweft.tools.captions import url

        print(f"captions: {url(captions.bind, captions.port, captions.token or None)}")
    if args.watch:
        return _watch_then_stop(topology, sup, run_dir, curve)
    return 0


def cmd_captions(args) -> int:
    """Serve the captions page for the room from the bus."""
    from voxweft.tools.captions import read_token
    from voxweft.tools.captions.server import serve

    topology, curve = listener(args, "captions")
    try:
        token = read_token(args.token_file, os.environ)
    except ValueError as exc:
        return die(f"captions: {exc}")
    return serve(topology, args.host, args.bind, args.port, token, curve)


def _watch_then_stop(topology, sup: Supervisor, run_dir: Path, curve=None) -> int:
    """`up --watch`: watch until Ctrl-C, SIGTERM or SIGHUP, then stop what `up` started."""
    import signal

    from voxweft.tools.watch import watch

    previous = {s: signal.signal(s, raise_terminated) for s in STOP_SIGNALS}
    code = 130   # watch returns on Ctrl-C
    try:
        watch(topology, run_dir / "transcript.live.jsonl", curve=curve)
    except Terminated as exc:
        code = 128 + exc.signum
    finally:
        for signum in (*previous, signal.SIGINT):   # a second signal must not cut it short
            signal.signal(signum, signal.SIG_IGN)
        print("voxweft: stopping the pipeline", file=sys.stderr, flush=True)
        try:
            sup.shutdown()
        except SupervisorError as exc:
            print(f"voxweft: {exc}", file=sys.stderr)
            code = 1
    return code


def cmd_down(args) -> int:
    """Stop every actor and supervisord."""
    sup, _ = running_supervisor(args)
    sup.shutdown()
    print("voxweft: stopped")
    return 0


def cmd_status(args) -> int:
    """Supervisor state and bus state per actor."""
    sup, topology = running_supervisor(args)
    procs = sup.processes()
    watcher = BusWatcher(topology, list(procs), topology.curve(which_host(topology, args.host)))
    try:
        watcher.poll(1.2)   # heartbeats come at 2 Hz
    finally:
        watcher.close()
    print(f"{'actor':<10} {'process':<9} {'pid':>7} {'uptime':>8}  {'bus':<9} {'engine':<15} "
          "detail")
    for name, info in procs.items():
        host = topology.actors[name].host
        st = watcher.latest.get(name)
        uptime = f"{info['now'] - info['start']}s" if info["statename"] == "RUNNING" else "-"
        bus = st.state if st else "silent"
        detail = st.detail if st else ""
        if info["statename"] in DOWN:   # why, in words (as `watch` and `interpret` say it)
            detail = describe(supervision(sup, info, host))
        elif st and st.counters.get("dropped_ms"):   # the one place live audio is dropped
            detail = f"dropped {st.counters['dropped_ms'] / 1000:.1f} s of live audio " + detail
        elif st and st.counters.get("lag_skip"):   # the bounded lag's last resort
            detail = f"{st.counters['lag_skip']} translation(s) not spoken (too late) " + detail
        if st and st.echo:   # capture cancelling the loudspeaker: learnt or not, how well
            detail = echo_words(st.echo) + ("; " + detail if detail else "")
        if st and st.busy_s > 1:
            detail = f"busy {st.busy_s:.1f} s " + detail
        if st and st.unreachable:   # a cut link, a host or an actor down: whom, how long
            detail = "cannot hear " + ", ".join(
                f"{p} ({topology.actors[p].host if p in topology.actors else '?'}) for "
                f"{s:.0f} s" for p, s in sorted(st.unreachable.items())) + "; " + detail
        print(f"{name:<10} {info['statename']:<9} {info['pid']:>7} {uptime:>8}  {bus:<9} "
              f"{(st.engine if st else ''):<15} {detail}")
    here = next((topology.actors[a].host for a in procs), "")
    for host, ms in sorted(clock_offsets(watcher.latest.values()).items()):
        print(f"clock of host {host}: {abs(ms) / 1000:.3f} s "
              f"{'ahead of' if ms > 0 else 'behind'} this host's (corrected in traces)")
    for line in budget.judge(topology, watcher.latest, here)[1]:
        print(line)
    return 0


def cmd_restart(args) -> int:
    """Restart one actor."""
    sup, _ = running_supervisor(args)
    sup.restart(args.actor)
    print(f"voxweft: restarted {args.actor}")
    return 0


def cmd_logs(args) -> int:
    """Show (or follow) an actor's log."""
    sup, _ = running_supervisor(args)
    path = sup.run_dir / "logs" / f"{args.actor}.log"
    if args.follow:   # not `tail -f`: what came on the bus reaches the terminal escaped
        try:
            follow(path, args.lines, lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            pass
        except FileNotFoundError:
            return die(f"logs: {path} does not exist (has {args.actor} started?)")
        return 0
    print(shown(sup.log_tail(args.actor, args.lines)))
    return 0

