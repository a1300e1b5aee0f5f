"""The actor runtime: one actor in one process, its sockets, threads and poll loop.

One job: running an actor written against the contract in actors.actor (re-exported here,
with StartupError, for the modules that import both from this one). The runtime is split
in two (issue 35): this module is the process side (sockets and their monitors, the poll
loop and reconnects, loading with retries, status heartbeats, signals, exit codes, fault
injection at load, logging), actors.traffic the message side it inherits (sending, custody,
receiving, clocks, calling the actor's code). Threads, and why:

* main thread: load() then warm-up (so a model is built once, on the main thread), then the
  poll loop calling handle()/tick(). No lock is ever taken around a model call.
* output thread: ``zmq.proxy`` from an inproc PULL to the external PUB, so both the main
  thread and the heartbeat thread can publish without sharing a socket.
* heartbeat thread: publishes Status at 2 Hz whatever the main thread is doing, so liveness
  and readiness never wait on a model call of several seconds.
* signal thread: SIGTERM/SIGINT are blocked everywhere and taken here with sigwait; it asks the
  loop to stop and, if a model call is still running 1.5 s later, ends the process itself.
"""

from __future__ import annotations

import collections
import logging
import os
import resource
import signal
import sys
import threading
import time

import psutil
import zmq
from zmq.utils.monitor import recv_monitor_message

from voxweft.actors.actor import Actor
from voxweft.actors.settings.base import StartupError
from voxweft.actors.traffic import Traffic
from voxweft.protocol import bus, sockets
from voxweft.protocol.messages import Done, Message, Status, now_ns

__all__ = ["EXIT_CONFIG", "EXIT_RETRY", "START_SECS", "UNREACHABLE_S", "Actor", "Runtime",
           "StartupError", "output_proxy", "permanent", "resources", "setup_logging"]

HEARTBEAT_S = 0.5           # >= 1 Hz with margin: a tap or `up` sees each actor twice a second
STOP_GRACE_S = 1.5          # SIGTERM must end the process within 2 s, model call or not
DEGRADED_WINDOW_S = 30.0    # handler errors this recent mark the actor degraded
EXIT_CONFIG = 78            # EX_CONFIG: supervisord is told not to restart (see deploy/)
EXIT_RETRY = 75             # EX_TEMPFAIL: a transient load failure; supervisord restarts it
#: supervisord's startsecs. An exit before it is a failed start, retried whatever its code
#: (exitcodes apply only after RUNNING), so an actor exiting 78 lives at least this long.
START_SECS = 2
LOAD_BACKOFF_S = (1.0, 3.0, 9.0)   # waits between load attempts in one process

#: A peer whose heartbeat (2 Hz) we take and have not heard for this long is reported
#: unreachable in ours; ZMTP's own heartbeats drop such a connection after 3 s too.
UNREACHABLE_S = 3.0

log = logging.getLogger("voxweft")
#: How often an actor looks whether the process that started it (supervisord) is still there.
PARENT_POLL_S = 0.5
#: A refused peer (ZAP or CURVE handshake) is logged at most this often, and counted always.
REFUSED_LOG_S = 10.0
REFUSALS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "its key is not listed in the topology",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "not a voxweft peer, or without CURVE",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "no CURVE, or it expects another host's key",
}


def permanent(exc: BaseException) -> bool:
    """A load failure a restart cannot mend: configuration, a missing model, file or language.

    Anything else (out of memory, a device or file system hiccup, a runtime error inside an
    engine) is transient: retried with backoff, then left to supervisord to restart.
    """
    return isinstance(exc, (StartupError, ValueError, LookupError, ImportError,
                            FileNotFoundError, PermissionError, IsADirectoryError,
                            NotADirectoryError))


def watch_parent(stop: threading.Event, name: str, poll_s: float = PARENT_POLL_S) -> None:
    """SIGTERM to this process once the process that started it is gone (until `stop`).

    supervisord stops its actors when it stops, but killed (SIGKILL, the OOM killer) or
    crashed it cannot: its actors went on as orphans, holding their sockets, the microphone
    and the loudspeaker, with nobody to stop them (issue 48). An orphan is given a new
    parent, so a changed parent pid means the old one is gone. Polled, not prctl's
    PDEATHSIG: the same on macOS, and a parent that died before the watch began is seen too.
    """
    parent = os.getppid()
    while not stop.wait(poll_s):
        if os.getppid() != parent:
            log.warning("%s: the process that started it (pid %d, supervisord) is gone: "
                        "stopping; start the run again (`voxweft up`)", name, parent)
            os.kill(os.getpid(), signal.SIGTERM)
            return


class Runtime(Traffic):
    """Runs one actor in this process until SIGTERM/SIGINT."""

    def __init__(self, actor: Actor) -> None:
        super().__init__(actor)   # the message side: custody, sequences, clocks (traffic)
        self.state = "loading"
        self.detail = ""
        self.stop = threading.Event()
        self.done = threading.Event()
        self.endpoint_peer: dict[str, str] = {}
        # Each input socket hears one peer: what comes on it must be that peer's (see _receive).
        self.socket_peer: dict[zmq.Socket, str] = {}
        self.ctx = zmq.Context()
        self.curve = None      # protocol.security.Curve where the bus leaves loopback (run())
        self.auth = None
        self.refused_logged = -REFUSED_LOG_S

    # -- threads --------------------------------------------------------------------------
    def _signal_thread(self) -> None:
        signum = signal.sigwait({signal.SIGTERM, signal.SIGINT})
        log.info("%s: got %s, stopping", self.actor.name, signal.Signals(signum).name)
        self.state = "stopping"
        self.stop.set()
        if not self.done.wait(STOP_GRACE_S):
            # The main thread is inside a model call that cannot be interrupted; the OS
            # closes the sockets. Exit 0: this is the requested stop, not a crash.
            log.info("%s: model call still running; exiting now", self.actor.name)
            os._exit(0)

    def _heartbeat_thread(self) -> None:
        sock = self.ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect("inproc://out")
        try:
            while not self.stop.wait(HEARTBEAT_S):
                self._beat(sock)
            self._beat(sock)   # a last "stopping" for the tap
        except zmq.ZMQError:
            pass
        finally:
            sock.close(0)

    def _beat(self, sock: zmq.Socket) -> None:
        """Send one heartbeat; a report that cannot be built or encoded sends a plain one.

        Liveness must outlive a bug in a report: a thread that died here would leave the
        actor running with nobody to see it (supervisord sees a live process).
        """
        try:
            self._send_on(sock, self.status())
            return
        except zmq.ZMQError:
            raise
        except Exception:  # noqa: BLE001 - any failure of the report, not of the socket
            self.actor.counters["status_failed"] += 1
            n = self.actor.counters["status_failed"]
            if n <= 3 or n % 120 == 0:   # every minute at most, after the first few
                log.exception("%s: cannot build the status heartbeat (#%d)", self.actor.name, n)
        self._send_on(sock, Status(state="degraded", detail="status report failed",
                                   pid=os.getpid()))

    def status(self) -> Status:
        """The current Status heartbeat."""
        state, detail = self.state, self.detail
        if state == "ready":
            reason = self._degraded_reason()
            if reason:
                state, detail = "degraded", reason
        busy = time.monotonic() - self.busy_since if self.busy_since is not None else 0.0
        counters = dict(self.actor.counters)
        counters["backlog"] = len(self.backlog)
        return Status(state=state, detail=detail, pid=os.getpid(),
                      engine=self.actor.engine_name(), busy_s=round(busy, 3),
                      counters=counters, peers=dict(self.peers), links=dict(self.links),
                      outstanding=len(self.outbox) + self.actor.held(),
                      holding=self.outbox.oldest(),
                      stream=self.actor.stream, media_ms=int(self.actor.media_ms),
                      resources=resources(), budget=dict(self.actor.budget),
                      echo_sent={p: e[0] for p, e in self.echo.items()},
                      echo_recv={p: e[1] for p, e in self.echo.items()},
                      clock_ms=self.clocks.offsets_ms(), unreachable=self.unreachable(),
                      progress=self.actor.progress(), echo=self.actor.echo_state())

    def unreachable(self) -> dict[str, float]:
        """Peers whose heartbeat we take and have not heard lately: seconds silent."""
        now = time.monotonic()
        silent = {peer: now - self.heard.get(peer, self.started) for peer in self.heard}
        return {peer: round(s, 1) for peer, s in silent.items() if s > UNREACHABLE_S}

    def _degraded_reason(self) -> str:
        now = time.monotonic()
        recent = sum(1 for t in self.error_times if now - t < DEGRADED_WINDOW_S)
        if recent:
            return f"{recent} handler error(s) in the last {DEGRADED_WINDOW_S:.0f} s"
        if self.backlog_since is not None and now - self.backlog_since > 2.0:
            return f"{len(self.backlog)} segment(s) waiting: no ASR worker connected"
        return self.actor.health()

    # -- lifecycle ------------------------------------------------------------------------
    def run(self) -> int:
        """Run until stopped; return the process exit code."""
        actor, topo = self.actor, self.actor.topology
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        threading.Thread(target=self._signal_thread, name="signals", daemon=True).start()
        threading.Thread(target=watch_parent, args=(self.stop, actor.name), name="parent",
                         daemon=True).start()
        try:   # beyond loopback the bus is CURVE: this host's keys, a ZAP handler
            self.curve = topo.curve(getattr(actor.config, "host", None))
        except ValueError as exc:
            log.error("%s: cannot start: %s", actor.name, exc)
            return EXIT_CONFIG
        self.auth = self.curve.start(self.ctx, actor.name) if self.curve else None
        self.redial = sockets.Redial(self.curve)
        try:
            pull = self.ctx.socket(zmq.PULL)
            pull.setsockopt(zmq.LINGER, 0)
            pull.bind("inproc://out")
            pub = sockets.pub(self.ctx, topo.pub_bind(actor.name), self.curve)
            recorder = topo.recorder_connect(actor.name)
            if recorder:   # a session's recorder listens: it hears us from our first message
                sockets.connect(pub, recorder)
            # Before the output thread owns it: a socket is not shared between threads.
            bound = [self._watch_bound(pub)]
        except zmq.ZMQError as exc:
            log.error("%s: cannot bind %s (%s): is another voxweft running? "
                      "try `voxweft down` or change the port in the topology",
                      actor.name, topo.pub_bind(actor.name), exc)
            return EXIT_CONFIG
        threading.Thread(target=output_proxy, args=(pull, pub), name="output",
                         daemon=True).start()
        self.out = self.ctx.socket(zmq.PUSH)
        self.out.setsockopt(zmq.LINGER, 0)
        self.out.connect("inproc://out")
        threading.Thread(target=self._heartbeat_thread, name="heartbeat", daemon=True).start()

        # Inputs connect before load(): what arrives meanwhile waits in ZeroMQ's queues.
        inputs = []
        by_peer: dict[str, set[type[Message]]] = collections.defaultdict(set)
        for peer, kind in actor.subscriptions():
            # Every upstream's heartbeat too: our own then shows whom we hear (Status.peers),
            # which is how a sender knows we can take what it sends again.
            by_peer[peer] |= {kind, Status}
        if actor.downstream:   # its restarts, and the word that an utterance is done: from
            # the player, or from the next stage when it drops an utterance it already has
            by_peer[actor.downstream] |= {Status, Done}
            by_peer["player"].add(Done)
        for peer, kinds in by_peer.items():
            for kind in kinds:   # a wiring error: a bug, said at start (not a bench's harness)
                if actor.name in bus.ACTORS:
                    bus.check(actor.name, peer, kind)
        # Whose heartbeat we take is whom we report unreachable when it falls silent.
        self.heard = {p: self.started for p, kinds in by_peer.items() if Status in kinds}
        # One socket per peer, so that a message that says it is another actor's (a Done
        # forged by any publisher we hear would silence utterances) is known for what it is.
        for peer, kinds in sorted(by_peer.items()):
            sub = sockets.sub(self.ctx, [], sorted({bus.topic(k) for k in kinds}))
            sockets.connect(sub, topo.pub_connect(peer), self.curve)
            self.endpoint_peer[topo.pub_connect(peer)] = peer
            self.socket_peer[sub] = peer
            inputs.append(sub)
        if bus.pulls(actor.name):
            pull = sockets.pull(self.ctx, [topo.push_connect()], self.curve)
            inputs.append(pull)
            self.endpoint_peer[topo.push_connect()] = "segmenter"
            self.socket_peer[pull] = "segmenter"
        self.push = None
        if self.push_types:
            try:
                self.push = sockets.push(self.ctx, topo.push_bind(), self.curve)
                bound.append(self._watch_bound(self.push))
            except zmq.ZMQError as exc:
                log.error("%s: cannot bind %s (%s)", actor.name, topo.push_bind(), exc)
                return EXIT_CONFIG

        code = None
        try:
            t0 = time.monotonic()
            code = self._load()
            if code is None:
                log.info("%s: ready (engine %s) after %.1f s", actor.name,
                         actor.engine_name() or "-", time.monotonic() - t0)
                if not self.stop.is_set():
                    self.state = "ready"
                    self.detail = ""
                self._loop(inputs, bound)
        finally:
            self.state = "stopping"
            self.stop.set()
            try:
                actor.close()
            finally:
                for sock in inputs + bound + [self.out] + ([self.push] if self.push else []):
                    sock.close(0)
                time.sleep(0.05)   # let the heartbeat thread send "stopping" and close
                if self.auth is not None:
                    self.auth.stop()
                self.ctx.term()
                self.done.set()
        return code or 0

    def _load(self) -> int | None:
        """Load and warm the model; None when done, else the exit code.

        A permanent failure (see `permanent`) exits 78 and is not restarted; a transient one
        is tried again after LOAD_BACKOFF_S, and after the last try exits 75 for supervisord
        to restart the process. Each failure is one line in the log and in the heartbeat.
        """
        actor = self.actor
        for attempt, wait in enumerate((*LOAD_BACKOFF_S, None)):
            try:
                self._load_fault(attempt)
                actor.load()
                actor.warmup()
                return None
            except Exception as exc:  # noqa: BLE001 - one clear line, no traceback
                if permanent(exc):
                    log.error("%s: cannot start: %s", actor.name, exc)
                    return EXIT_CONFIG
                if wait is None:
                    log.error("%s: cannot start: %s: %s (transient; failed %d times, "
                              "exiting for supervisord to restart it)", actor.name,
                              type(exc).__name__, exc, attempt + 1)
                    return EXIT_RETRY
                self.detail = f"load failed ({type(exc).__name__}: {exc}); retry in {wait:.0f} s"
                log.warning("%s: %s", actor.name, self.detail)
                if self.stop.wait(wait):
                    return 0

    def _load_fault(self, attempt: int) -> None:
        """VOXWEFT_FAULT fail_load (permanent) and flaky_load:N (first N attempts fail)."""
        if self.fault and self.fault[0] == "fail_load":
            raise StartupError("VOXWEFT_FAULT fail_load: simulated missing model")
        if self.fault and self.fault[0] == "flaky_load" and attempt < self.fault[1]:
            raise OSError(f"VOXWEFT_FAULT flaky_load: simulated failure {attempt + 1}")

    def _watch_bound(self, sock: zmq.Socket) -> zmq.Socket:
        """A monitor of a bound socket: peers that connect, are refused or go away."""
        return sock.get_monitor_socket(sum(set(sockets.BOUND_EVENTS)))

    def _count_bound(self, mon: zmq.Socket) -> None:
        event = recv_monitor_message(mon)
        kind = sockets.BOUND_EVENTS.get(event["event"], "peer_events")
        self.actor.counters[kind] += 1
        if kind == "peers_refused":
            self.actor.counters[sockets.refused_why(event)] += 1
        now = time.monotonic()
        # A refused peer retries every 0.1-2 s: said once per REFUSED_LOG_S, counted always.
        if kind == "peers_refused" and now - self.refused_logged >= REFUSED_LOG_S:
            self.refused_logged = now
            log.warning("%s: refused a peer on %s (%s); %d refused so far", self.actor.name,
                        event["endpoint"].decode(errors="replace"),
                        REFUSALS.get(event["event"], "handshake failed"),
                        self.actor.counters[kind])

    def _loop(self, inputs: list[zmq.Socket], bound: list[zmq.Socket]) -> None:
        poller = zmq.Poller()
        for mon in bound:
            poller.register(mon, zmq.POLLIN)
        monitors = {}
        for sock in inputs:
            poller.register(sock, zmq.POLLIN)
            # libzmq drops a connection whose peer sent a frame over MAXMSGSIZE and never
            # reconnects it by itself (seen with 4.3.5): watch for disconnects and reconnect.
            mon = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            monitors[mon] = sock
            poller.register(mon, zmq.POLLIN)
        self.actor.ready_ns = now_ns()
        self.rejoin.ready(time.monotonic())
        try:
            while not self.stop.is_set():
                timeout_ms = max(0, int(self.actor.tick_interval_s() * 1000))
                if self.rejoin.held:   # release what is held when the window closes
                    timeout_ms = min(timeout_ms, 200)
                wait_s = self.redial.connect_due(time.monotonic())
                if wait_s is not None:   # a lost connection is made again then
                    timeout_ms = min(timeout_ms, int(wait_s * 1000) + 1)
                events = dict(poller.poll(timeout_ms))
                for sock in inputs:
                    if sock in events:
                        self._receive(sock)
                if self.rejoin.held:
                    pending = any(sock.poll(0) for sock in inputs)
                    for held in self.rejoin.expired(time.monotonic(), pending):
                        self._take(held)
                for mon, sock in monitors.items():
                    if mon in events:
                        self._reconnect(mon, sock)
                for mon in bound:
                    for _ in range(256) if mon in events else ():   # bounded, as inputs
                        if not mon.poll(0):
                            break
                        self._count_bound(mon)
                self._call(self.actor.tick)
                while self.actor.again:
                    self.links[self.actor.again.pop()] += 1
                if self.backlog:
                    self._flush_backlog()
        finally:
            for mon, sock in monitors.items():
                sock.disable_monitor()
                mon.close(0)

    def _reconnect(self, mon: zmq.Socket, sock: zmq.Socket) -> None:
        event = recv_monitor_message(mon)
        endpoint = event["endpoint"].decode()
        self.actor.counters["disconnects"] += 1
        # What was queued on that connection is gone: its sender sends its outbox again ...
        peer = self.endpoint_peer.get(endpoint, endpoint)
        self.links[peer] += 1
        # ... once we hear it again over the new connection. Until its next heartbeat comes
        # we do not claim to hear it: sent while our side was still reconnecting, the outbox
        # was lost again (a 5 s cable pull lost an utterance for good).
        self.peers.pop(peer, None)
        self.rejoin.link_lost(peer)   # what it sends until its resend is held (custody)
        if not self.redial.lost(sock, endpoint, time.monotonic()):   # said once, not per retry
            log.info("%s: lost %s (peer stopped, refused us or sent an oversized frame); "
                     "reconnecting", self.actor.name, endpoint)


def output_proxy(pull: zmq.Socket, pub: zmq.Socket) -> None:
    """The output thread: forward the inproc queue every thread sends on to the PUB socket."""
    try:
        zmq.proxy(pull, pub)
    except zmq.ContextTerminated:
        pass
    finally:
        pull.close(0)
        pub.close(0)


def resources() -> dict[str, int]:
    """Memory, CPU time, open descriptors and threads of this process (status, bench)."""
    proc = psutil.Process()
    with proc.oneshot():
        cpu = proc.cpu_times()
        out = {"rss_kb": proc.memory_info().rss // 1024,
               "cpu_ms": int((cpu.user + cpu.system) * 1000),
               "threads": proc.num_threads()}
        if hasattr(proc, "num_fds"):   # not on Windows
            out["fds"] = proc.num_fds()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # kB on Linux, bytes on macOS
    out["peak_rss_kb"] = peak // 1024 if sys.platform == "darwin" else peak
    return out


def setup_logging() -> None:
    """One line per event on stderr; supervisord keeps it in the actor's log."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
