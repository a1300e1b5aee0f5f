"""The actor runtime: sockets, the poll loop, signals, counters and status heartbeats.

An actor author subclasses :class:`Actor`, writes ``load()`` and ``handle()`` and nothing
about ZeroMQ. Threads, and why:

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
import dataclasses
import logging
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from typing import ClassVar

import psutil
import zmq
from zmq.utils.monitor import recv_monitor_message

from voxweft.actors.clock import Clocks
from voxweft.actors.custody import Finished, Outbox, Rejoin, Resync, Seen
from voxweft.actors.settings.base import StartupError
from voxweft.protocol import bus, sockets
from voxweft.protocol.codec import ProtocolError, decode, encode
from voxweft.protocol.messages import (
    CUSTODY_TYPES,
    Done,
    Message,
    Segment,
    Sender,
    Status,
    Trace,
    now_ns,
    traced,
)

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


class Actor:
    """Base class of the six actors: subclasses write load() and handle()."""

    name: ClassVar[str] = ""
    #: The next stage on the utterance path. When set, the runtime keeps this actor's
    #: utterance-path outputs until the player's Done and sends them again whenever that
    #: stage restarts or rejoins (see actors.custody).
    downstream: ClassVar[str] = ""

    def __init__(self, topology, config) -> None:
        self.topology = topology
        self.config = config
        self.epoch = 0            # set by the runtime before load()
        self.recv_ns = 0          # wall time the message being handled was received
        # Wall time this actor last became free to take a message (the end of its previous
        # call): a message sent before it waited in the queue, not on the wire.
        self.ready_ns = 0
        self.counters: collections.Counter[str] = collections.Counter()
        self.log = logging.getLogger(f"voxweft.{self.name}")
        # Progress on the audio stream, published in the heartbeat (file flow control and
        # resuming after a restart read it): which stream, and how far in (ms).
        self.stream = ""
        self.media_ms = 0
        # What its engine costs on this machine, measured at warm-up (actors.budget).
        self.budget: dict[str, float] = {}
        # Upstream actors to ask for everything they still hold for us (a message lost on
        # the way that no sequence gap showed): the runtime counts it as a broken link.
        self.again: set[str] = set()

    def arrived(self, trace: Trace, stage: str) -> Trace:
        """`trace` with this message's "<stage>.ready" and "<stage>.recv" events."""
        return traced(traced(trace, f"{stage}.ready", self.ready_ns), f"{stage}.recv",
                      self.recv_ns)

    # -- what an actor author writes ------------------------------------------------------
    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """(upstream actor, message type) pairs this actor's SUB socket listens to.

        Each one a route `protocol.bus` declares for this actor (checked at start); which
        PUSH queue it works and which types it pushes the bus says alone.
        """
        return []

    def engine_name(self) -> str:
        """Name of the engine this actor owns, for status lines.

        With the variant it chose at load when it has several ("faster-whisper int8").
        """
        chosen = getattr(getattr(self, "engine", None), "chosen", "")
        return f"{getattr(self.config, 'engine', '')} {chosen}".strip()

    def load(self) -> None:
        """Build the model once (main thread). Raise StartupError with one clear line."""

    def warmup(self) -> None:
        """Run the model once so the first real request does not pay for lazy setup."""

    def handle(self, msg: Message) -> Iterable[Message]:
        """Turn one input message into output messages (may be a generator)."""
        return ()

    def tick(self) -> Iterable[Message]:
        """Called every loop turn, also without input: sources and timers live here."""
        return ()

    def tick_interval_s(self) -> float:
        """Longest time the loop may wait for input before calling tick() again."""
        return 0.1

    def health(self) -> str:
        """A non-empty reason when the actor is degraded (checked by the heartbeat)."""
        return ""

    def held(self) -> int:
        """Utterances this actor holds besides its outbox (the player's queue)."""
        return 0

    def duplicate(self, msg: Message) -> Iterable[Message]:
        """Called instead of handle() for an utterance-path input handled before."""
        return ()

    def close(self) -> None:
        """Release devices and files at shutdown."""


class Runtime:
    """Runs one actor in this process until SIGTERM/SIGINT."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.epoch = time.time_ns()   # new at every process start: peers see a restart
        actor.epoch = self.epoch
        self.state = "loading"
        self.detail = ""
        self.busy_since: float | None = None
        self.stop = threading.Event()
        self.done = threading.Event()
        self.peers: dict[str, int] = {}
        self.last_seq: dict[tuple[str, str], int] = {}
        self.error_times: collections.deque[float] = collections.deque(maxlen=100)
        self.backlog: collections.deque[Message] = collections.deque()
        self.backlog_since: float | None = None
        self.sender = Sender(actor.name, self.epoch)
        self.push_types = bus.pushes(actor.name)   # sent on the PUSH queue, not the PUB
        self.outbox = Outbox()
        self.seen = Seen()
        self.finished = Finished()   # utterances the player is done with
        self.resync = Resync(actor.name, self.epoch)
        self.rejoin = Rejoin(actor.name)
        self.links: collections.Counter[str] = collections.Counter()   # see Status.links
        self.endpoint_peer: dict[str, str] = {}
        self.fault = _parse_fault(os.environ.get("VOXWEFT_FAULT", ""), actor.name)
        self.ctx = zmq.Context()
        self.curve = None      # protocol.security.Curve where the bus leaves loopback (run())
        self.auth = None
        self.refused_logged = -REFUSED_LOG_S
        # Clocks across hosts: the last heartbeat heard from each peer (its sent_ns, our
        # receive time), what that makes of each host's clock (actors.clock), and when each
        # peer whose heartbeat we take was last heard (Status.unreachable).
        self.host = getattr(actor.config, "host", "")
        self.echo: dict[str, tuple[int, int]] = {}
        self.clocks = Clocks()
        self.heard: dict[str, float] = {}
        self.started = time.monotonic()

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
                try:
                    status = self.status()
                except Exception:  # noqa: BLE001 - liveness must outlive a bug in a report
                    log.exception("%s: cannot build the status heartbeat", self.actor.name)
                    status = Status(state="degraded", detail="status report failed",
                                    pid=os.getpid())
                self._send_on(sock, status)
            self._send_on(sock, self.status())   # a last "stopping" for the tap
        except zmq.ZMQError:
            pass
        finally:
            sock.close(0)

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
                      clock_ms=self.clocks.offsets_ms(), unreachable=self.unreachable())

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

    # -- sending --------------------------------------------------------------------------
    def _send_on(self, sock: zmq.Socket, msg: Message) -> None:
        sock.send_multipart(encode(self.sender.stamp(msg)), copy=False)

    def send(self, msg: Message) -> None:
        """Send one output: PUSH types go to the work queue, the rest to the PUB."""
        if self.actor.downstream and isinstance(msg, CUSTODY_TYPES) and \
                msg.utt not in self.finished:
            forgotten = self.outbox.keep(msg)
            if forgotten:
                self.actor.counters["outbox_dropped"] += 1
                log.warning("%s: more than %d utterances in flight; no longer holding %s",
                            self.actor.name, self.outbox.limit, forgotten)
        self._transmit(msg)

    def _transmit(self, msg: Message) -> None:
        if isinstance(msg, self.push_types):
            self.backlog.append(msg)
            self._flush_backlog()
        else:
            self._send_on(self.out, msg)
            self.actor.counters["tx"] += 1

    def _flush_backlog(self) -> None:
        while self.backlog:
            msg = self.backlog[0]
            stamped = self.sender.stamp(msg, commit=False)
            frames = encode(stamped)
            try:
                self.push.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                if self.backlog_since is None:
                    self.backlog_since = time.monotonic()
                    log.warning("%s: no worker takes %s yet; keeping %d in backlog",
                                self.actor.name, msg.TYPE, len(self.backlog))
                return
            self.sender.sent(stamped)
            self.backlog.popleft()
            self.actor.counters["tx"] += 1
        self.backlog_since = None

    def _send_again(self, status: Status) -> None:
        """The downstream stage (re)joined: send it everything still held."""
        held = list(self.outbox.all())
        if not held:
            return
        queued = {id(m) for m in self.backlog}
        for msg in held:
            if id(msg) not in queued:
                self._transmit(msg)
        self.actor.counters["resent"] += len(held)
        log.info("%s: %s (epoch %d) joined; sent again %d message(s) of %d utterance(s)",
                 self.actor.name, status.src, status.epoch, len(held), len(self.outbox))

    def _emit(self, outputs: Iterable[Message] | None) -> None:
        # Each output goes out as soon as it is produced: streamed TTS chunks must not wait
        # for the end of the utterance. Nothing is held while the generator runs.
        slower = self.fault[1] if self.fault and self.fault[0] == "slower" else 1
        made = time.monotonic()
        for out in outputs or ():
            if slower > 1:   # a machine `slower` times slower: each output takes that long
                time.sleep((slower - 1) * (time.monotonic() - made))
            self.send(out)
            made = time.monotonic()

    # -- receiving ------------------------------------------------------------------------
    def _note(self, msg: Message) -> None:
        previous = self.peers.get(msg.src)
        if previous is not None and previous != msg.epoch:
            log.info("%s: peer %s restarted (new epoch)", self.actor.name, msg.src)
        self.peers[msg.src] = msg.epoch
        key = (msg.src, msg.TYPE)
        last = self.last_seq.get(key)
        if last is not None and previous == msg.epoch and msg.seq > last + 1:
            self.actor.counters["gaps"] += msg.seq - last - 1
            # Lost on the way (a PUB queue overflowed): ask the sender for what it holds.
            # Segments come over PUSH, where one worker's share has gaps by design.
            if isinstance(msg, CUSTODY_TYPES) and not isinstance(msg, Segment):
                self.links[msg.src] += 1
        self.last_seq[key] = msg.seq

    def _receive(self, sock: zmq.Socket) -> None:
        for _ in range(256):   # bounded: a flood on one socket must not starve tick()
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            self.actor.recv_ns = now_ns()
            try:
                msg = decode(frames)
            except ProtocolError as exc:
                self.actor.counters[f"bad_{exc.kind}"] += 1
                n = sum(v for k, v in self.actor.counters.items() if k.startswith("bad_"))
                if n <= 5 or n % 100 == 0:
                    log.warning("%s: dropped bad message #%d (%s)", self.actor.name, n, exc)
                continue
            self._note(msg)
            msg = self._in_our_clock(msg)
            if isinstance(msg, Done):
                self.outbox.release(msg.utt)
                self.finished.add(msg.utt)
                continue
            if isinstance(msg, Status):
                if msg.src == self.actor.downstream and self.resync.check(msg):
                    self._send_again(msg)
                self._call(self.actor.handle, msg)
                for held in self.rejoin.status(msg, now_ns()):
                    self._take(held)
                continue
            if isinstance(msg, CUSTODY_TYPES) and self.rejoin.hold(msg, time.monotonic()):
                self.actor.counters["held_at_rejoin"] += 1
                continue
            self._take(msg)

    def _take(self, msg: Message) -> None:
        """Handle one input (not a heartbeat): at most once on the utterance path."""
        self.actor.counters["rx"] += 1
        if isinstance(msg, CUSTODY_TYPES):
            if msg.utt in self.finished:   # sent again before its Done reached the sender
                self.actor.counters["after_done"] += 1
                return
            if msg in self.seen:
                self.actor.counters["duplicates"] += 1
                self._call(self.actor.duplicate, msg)
                return
            self.seen.add(msg)
        self._call(self.actor.handle, msg)
        if self.fault and self.fault[0] == "crash_after" and \
                self.actor.counters["rx"] >= self.fault[1]:
            log.error("%s: VOXWEFT_FAULT crash_after:%d reached", self.actor.name,
                      self.fault[1])
            os._exit(3)

    def _in_our_clock(self, msg: Message) -> Message:
        """Learn from heartbeats how far other hosts' clocks are; traces into our clock.

        A heartbeat is one NTP exchange with its host (actors.clock); a trace from another
        host is brought into our clock on arrival.
        """
        if msg.src in self.heard:
            self.heard[msg.src] = time.monotonic()
        peer = getattr(self.actor.topology, "actors", {}).get(msg.src)
        host = getattr(peer, "host", self.host)
        if isinstance(msg, Status):
            self.echo[msg.src] = (msg.sent_ns, self.actor.recv_ns)
            me = self.actor.name
            if host != self.host and me in msg.echo_sent and me in msg.echo_recv:
                self.clocks.exchange(host, msg.echo_sent[me], msg.echo_recv[me], msg.sent_ns,
                                     self.actor.recv_ns)
            return msg
        trace = getattr(msg, "trace", None)
        if host == self.host or not trace:
            return msg
        return dataclasses.replace(msg, trace=self.clocks.to_local(host, trace))

    def _call(self, fn, *args) -> None:
        self.busy_since = time.monotonic()
        try:
            self._emit(fn(*args))
        except Exception:  # noqa: BLE001 - survive at run time: log, count, continue
            self.actor.counters["errors"] += 1
            self.error_times.append(time.monotonic())
            log.error("%s: %s failed:\n%s", self.actor.name, getattr(fn, "__name__", fn),
                      traceback.format_exc(limit=6))
        finally:
            self.busy_since = None
            self.actor.ready_ns = now_ns()

    # -- lifecycle ------------------------------------------------------------------------
    def run(self) -> int:
        """Run until stopped; return the process exit code."""
        actor, topo = self.actor, self.actor.topology
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        threading.Thread(target=self._signal_thread, name="signals", daemon=True).start()
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
        if by_peer:
            sub = sockets.sub(self.ctx, [],
                              sorted({bus.topic(k) for ks in by_peer.values() for k in ks}))
            for peer in by_peer:
                sockets.connect(sub, topo.pub_connect(peer), self.curve)
                self.endpoint_peer[topo.pub_connect(peer)] = peer
            inputs.append(sub)
        if bus.pulls(actor.name):
            inputs.append(sockets.pull(self.ctx, [topo.push_connect()], self.curve))
            self.endpoint_peer[topo.push_connect()] = "segmenter"
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
                for held in self.rejoin.expired(time.monotonic()):
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


def _parse_fault(spec: str, actor: str = "") -> tuple[str, int] | None:
    """The VOXWEFT_FAULT a test injects into this actor, or None.

    'crash_after:N' (exit 3 after N inputs), 'fail_load', 'flaky_load:N' (the first N load
    attempts fail), 'slower:N' (every output takes N times as long to make, as on a machine
    N times slower). 'ACTOR/...' applies it to that actor only.
    """
    if not spec:
        return None
    if "/" in spec:
        only, _, spec = spec.partition("/")
        if only != actor:
            return None
    name, _, arg = spec.partition(":")
    if name not in ("crash_after", "fail_load", "flaky_load", "slower"):
        log.warning("ignoring unknown VOXWEFT_FAULT %r", spec)
        return None
    return name, int(arg or 0)


def setup_logging() -> None:
    """One line per event on stderr; supervisord keeps it in the actor's log."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
