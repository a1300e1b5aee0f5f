"""Actor process states onto the bus: supervisord's event listener, and how to read it.

supervisord starts `python -m voxweft.deploy.events` next to the actors of a host (see
deploy.supervisor.render). It receives every PROCESS_STATE event and publishes it as a
`Supervision` message on the host's events port, with the actor's own last error line, and
publishes every actor's latest state again each second so a late subscriber knows it too.
`voxweft status`, `watch` and `interpret` read these (`Board`) and say in words which actor
is down and why.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path

import psutil
import zmq
from supervisor import childutils

from voxweft.actors.runtime import EXIT_CONFIG, EXIT_RETRY
from voxweft.deploy.supervisor import GROUP, Supervisor
from voxweft.deploy.topology import Topology, load
from voxweft.protocol import sockets
from voxweft.protocol.codec import encode
from voxweft.protocol.messages import Sender, Supervision, now_ns

log = logging.getLogger("voxweft")

REPEAT_S = 1.0
#: States in which an actor does not run; EXITED and BACKOFF are normally followed by a
#: restart, FATAL and an expected EXITED (exit 0 or 78) are not.
DOWN = ("BACKOFF", "STOPPED", "EXITED", "FATAL")


def exit_words(status: int) -> str:
    """An exit status in words."""
    if status == -1:
        return "killed by a signal"
    if status == EXIT_CONFIG:
        return f"exit {status}: configuration, model or language; not restarted"
    if status == EXIT_RETRY:
        return f"exit {status}: its model failed to load again and again"
    return f"exit {status}"


def describe(msg: Supervision) -> str:
    """One line: which actor, on which host, is in which state, and why."""
    where = f"{msg.actor} on {msg.host}"
    if msg.state == "RUNNING":
        return f"{where} is running again"
    if msg.state == "STARTING":
        return f"{where} is starting"
    if msg.state == "BACKOFF":
        what = f"{where} exited too soon after starting; supervisord retries it"
    elif msg.state == "FATAL":
        what = f"{where} is down: it failed every start; supervisord gave up"
    elif msg.state == "EXITED" and not msg.expected:
        what = f"{where} crashed; supervisord restarts it"
        if msg.exit_status:
            what = f"{where} crashed ({exit_words(msg.exit_status)}); supervisord restarts it"
    elif msg.state == "EXITED":
        what = f"{where} is down ({exit_words(msg.exit_status)})"
    else:
        what = f"{where} is {msg.state.lower()}"
    return f"{what}: {msg.reason}" if msg.reason else what


class Board:
    """The latest Supervision per actor, and the lines worth showing a person."""

    def __init__(self) -> None:
        self.latest: dict[str, Supervision] = {}

    def update(self, msg: Supervision) -> str:
        """Record `msg`; return a line to show when the actor went down or came back, else ''."""
        before = self.latest.get(msg.actor)
        self.latest[msg.actor] = msg
        if before is not None and before.since_ns == msg.since_ns:
            return ""   # the same state said again
        if msg.state in DOWN:
            return describe(msg)
        if msg.state == "RUNNING" and before is not None and before.state in (*DOWN, "STARTING"):
            return describe(msg)
        return ""



def supervision(sup: Supervisor, info: dict, host: str, state: str = "",
                expected: bool | None = None) -> Supervision:
    """A Supervision message from supervisord's process info for one actor.

    `state` and `expected` come from an event when it is older than `info`: by the time the
    listener asks, a crashed actor is already starting again and its exit status is gone.
    """
    now = info.get("statename", "")
    state = state or now
    status = int(info.get("exitstatus") or 0) if now == state else 0
    if state == "EXITED" and not status:
        status = sup.last_exit(info["name"]) or 0
    if expected is None:
        expected = status in (0, EXIT_CONFIG)
    reason = ""
    if state in DOWN:
        reason = sup.last_error(info["name"], fallback=False).split(" ERROR ", 1)[-1]
        if state in ("BACKOFF", "FATAL") and info.get("spawnerr"):
            reason = f"{info['spawnerr']}; {reason}"
    return Supervision(actor=info["name"], host=host, state=state, exit_status=status,
                       expected=expected, reason=reason, since_ns=now_ns())


class Listener:
    """The event listener: supervisord events in on stdin, Supervision out on the bus."""

    def __init__(self, topology: Topology, host: str, sup: Supervisor) -> None:
        self.host, self.sup = host, sup
        self.ctx = zmq.Context()
        # Beyond loopback a CURVE server with this host's keys (`up` checked they exist).
        self.curve = topology.curve(host) if host in topology.hosts else None
        self.auth = self.curve.start(self.ctx, f"supervisor.{host}") if self.curve else None
        # Its port taken, it still watches the owner and answers supervisord: it only says
        # nothing on the bus (when it exited instead, the run went on without its watchdog,
        # and a killed `interpret` left everything running, issue 48).
        self.pub = None
        try:
            self.pub = sockets.pub(self.ctx, topology.events_bind(host), self.curve)
        except zmq.ZMQError as exc:
            log.error("events: cannot bind %s (%s); change hosts.%s.events_port (the actors' "
                      "states are not published; the run is still watched)",
                      topology.events_bind(host), exc, host)
        self.lock = threading.Lock()
        self.latest: dict[str, Supervision] = {}
        self.sender = Sender(f"supervisor.{host}")

    def send(self, msg: Supervision) -> None:
        """Publish one message (from either thread)."""
        if self.pub is None:
            return
        with self.lock:
            self.pub.send_multipart(encode(self.sender.stamp(msg)))

    def event(self, name: str, payload: str) -> None:
        """One supervisord event."""
        if not name.startswith("PROCESS_STATE_"):
            return
        headers = childutils.get_headers(payload.split("\n", 1)[0])
        if headers.get("groupname") != GROUP:
            return
        actor = headers["processname"]
        try:
            info = self.sup.rpc().supervisor.getProcessInfo(f"{GROUP}:{actor}")
        except Exception as exc:  # noqa: BLE001 - supervisord going away: say what we know
            log.warning("events: no process info for %s (%s)", actor, exc)
            info = {"name": actor}
        # The event's state, not the one now: it may have moved on (each comes in turn).
        expected = headers["expected"] == "1" if "expected" in headers else None
        msg = supervision(self.sup, info, self.host, state=name.removeprefix("PROCESS_STATE_"),
                          expected=expected)
        self.latest[actor] = msg
        log.info("events: %s", describe(msg))
        self.send(msg)

    def repeat(self, stop: threading.Event, owner: Owner | None = None) -> None:
        """Say every actor's latest state again each second; shut down when `owner` is gone."""
        while not stop.wait(REPEAT_S):
            for msg in list(self.latest.values()):
                self.send(msg)
            if owner is not None and owner.gone():
                log.warning("events: the command that started this run (pid %d) is gone: "
                            "stopping the actors and supervisord", owner.pid)
                try:
                    self.sup.rpc().supervisor.shutdown()
                except Exception as exc:  # noqa: BLE001 - said; supervisord may be going
                    log.error("events: could not shut supervisord down: %s", exc)
                return


def started_at(pid: int) -> float:
    """When process `pid` started, by a clock no step moves; psutil.NoSuchProcess if none.

    On Linux the kernel's own record: clock ticks since boot (/proc/PID/stat, field 22),
    exact for the life of the process. psutil's `create_time` adds that to a boot time it
    derives from the wall clock, so a clock step (a laptop waking, time synchronisation, a
    VM resumed) moved it by seconds under a live `interpret`, whose run was then shut down
    (issue 48). Elsewhere (macOS) the kernel keeps the start as a fixed time: psutil's.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            raise psutil.NoSuchProcess(pid) from None
        return psutil.Process(pid).create_time()
    except OSError:
        return psutil.Process(pid).create_time()
    return float(stat.rsplit(")", 1)[1].split()[19])   # after "(comm)": field 3 is index 0


class Owner:
    """The process whose run this is; `gone()` once it has exited (a zombie is gone too)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.started = started_at(pid)
        except psutil.Error:
            self.started = None   # gone before we looked

    def gone(self) -> bool:
        """Whether the owner has ended (its pid free, a zombie, or another process's now)."""
        if self.started is None:
            return True
        try:
            if started_at(self.pid) != self.started:
                return True   # the pid is another process's now
            return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False


def main(argv: list[str] | None = None) -> int:
    """Run the listener until supervisord stops it."""
    parser = argparse.ArgumentParser(prog="python -m voxweft.deploy.events", description=__doc__)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--owner", type=int, default=0,
                        help="pid of the command whose run this is: shut down when it is gone")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    topology = load(args.topology, args.host)   # other hosts' engines are not imported
    sup = Supervisor(Path(args.topology).resolve().parent)
    listener = Listener(topology, args.host, sup)
    stop = threading.Event()
    owner = Owner(args.owner) if args.owner else None
    threading.Thread(target=listener.repeat, args=(stop, owner), daemon=True).start()
    try:
        while True:
            headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
            try:
                listener.event(headers.get("eventname", ""), payload)
            finally:
                childutils.listener.ok(sys.stdout)
    except (KeyboardInterrupt, BrokenPipeError, ValueError, KeyError):
        return 0
    finally:
        stop.set()


if __name__ == "__main__":
    sys.exit(main())
