"""One actor's traffic on the bus: what it sends and what it takes, message by message.

The runtime (actors.runtime) is split in two (issue 35). This module is the message side,
which needs no socket of its own: stamping and sending each output (the PUB, or the PUSH
work queue with its backlog while no worker is connected), custody (keeping what was sent
until the player's Done and sending it again when the next stage rejoins, handling each
utterance-path input at most once: actors.custody), sequence gaps and broken links, peers'
restarts, clocks across hosts (actors.clock), and calling the actor's handle()/tick() so
that a failing call is logged and counted rather than fatal. actors.runtime is the process
side: it opens the sockets, runs the threads and the poll loop, and hands this class each
socket that has input; it provides ``self.out`` (the inproc PUSH to the output thread) and
``self.push`` (the work queue, or None) before the first message moves.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
import traceback
from collections.abc import Iterable

import zmq

from voxweft.actors.actor import Actor
from voxweft.actors.clock import Clocks
from voxweft.actors.custody import Finished, Outbox, Rejoin, Resync, Seen
from voxweft.actors.faults import injected_fault
from voxweft.protocol import bus
from voxweft.protocol.codec import ProtocolError, decode, encode
from voxweft.protocol.messages import (
    CUSTODY_TYPES,
    Done,
    Message,
    Segment,
    Sender,
    Status,
    now_ns,
)

log = logging.getLogger("voxweft")

#: The most messages one sequence gap counts as lost. A PUB queue that overflows drops what
#: its high-water mark held (a few thousand); a bigger jump is a peer that lies about its
#: seq (garbage on the socket), counted once as a `seq_jump`: counted as loss, two frames
#: could push the gap counter past what a heartbeat can carry.
MAX_GAP = 100_000
#: A message whose handling took this long (a model call) ends its socket's turn.
LONG_CALL_S = 0.05


class Traffic:
    """The messages of one actor: sending, custody, receiving, clocks, calling its code."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.epoch = time.time_ns()   # new at every process start: peers see a restart
        actor.epoch = self.epoch
        self.busy_since: float | None = None
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
        self.rejoin = Rejoin(actor.name, upstreams=frozenset(
            src for src, _kind in actor.subscriptions()))
        self.links: collections.Counter[str] = collections.Counter()   # see Status.links
        self.fault = injected_fault(actor.name)
        # Clocks across hosts: the last heartbeat heard from each peer (its sent_ns, our
        # receive time), what that makes of each host's clock (actors.clock), and when each
        # peer whose heartbeat we take was last heard (Status.unreachable).
        self.host = getattr(actor.config, "host", "")
        self.echo: dict[str, tuple[int, int]] = {}
        self.clocks = Clocks()
        self.heard: dict[str, float] = {}
        self.started = time.monotonic()

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
        for out in outputs or ():
            self.send(out)

    # -- receiving ------------------------------------------------------------------------
    def _note(self, msg: Message) -> None:
        previous = self.peers.get(msg.src)
        if previous is not None and previous != msg.epoch:
            log.info("%s: peer %s restarted (new epoch)", self.actor.name, msg.src)
            self.rejoin.restarted(msg.src, time.monotonic())
        elif previous is None and msg.src in self.rejoin.broken:   # heard again after a break
            self.rejoin.restarted(msg.src, time.monotonic())
        self.peers[msg.src] = msg.epoch
        key = (msg.src, msg.TYPE)
        last = self.last_seq.get(key)
        if last is not None and previous == msg.epoch and msg.seq - last - 1 > MAX_GAP:
            self.actor.counters["seq_jumps"] += 1
        elif last is not None and previous == msg.epoch and msg.seq > last + 1:
            self.actor.counters["gaps"] += msg.seq - last - 1
            # Lost on the way (a PUB queue overflowed): ask the sender for what it holds.
            # Segments come over PUSH, where one worker's share has gaps by design.
            if isinstance(msg, CUSTODY_TYPES) and not isinstance(msg, Segment):
                self.links[msg.src] += 1
        self.last_seq[key] = msg.seq

    def _receive(self, sock: zmq.Socket) -> None:
        # Bounded: a flood on one socket must not starve tick(), nor a model call the other
        # sockets: after a message that took long the poll loop turns to them (an asr with
        # segments queued read mt's heartbeat, and sent again what mt had lost in a cut, only
        # once it had transcribed them all). Cheap messages go on being taken in a row
        # (capture takes all the reference that came before it cancels the microphone).
        for _ in range(256):
            started = time.monotonic()
            if not self._receive_one(sock) or time.monotonic() - started > LONG_CALL_S:
                return

    def _receive_one(self, sock: zmq.Socket) -> bool:
        """Take one message from `sock`: False when there was none."""
        try:
            frames = sock.recv_multipart(flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        self.actor.recv_ns = now_ns()
        try:
            msg = decode(frames)
        except ProtocolError as exc:
            self.actor.counters[f"bad_{exc.kind}"] += 1
            n = sum(v for k, v in self.actor.counters.items() if k.startswith("bad_"))
            if n <= 5 or n % 100 == 0:
                log.warning("%s: dropped bad message #%d (%s)", self.actor.name, n, exc)
            return True
        peer = self.socket_peer.get(sock)
        if peer is not None and msg.src != peer:   # forged, or a wiring error: not used
            self.actor.counters["bad_src"] += 1
            if self.actor.counters["bad_src"] in (1, 10, 100) or \
                    self.actor.counters["bad_src"] % 1000 == 0:
                log.warning("%s: dropped a %s that says it is from %r on %s's socket (#%d)",
                            self.actor.name, msg.TYPE, msg.src, peer,
                            self.actor.counters["bad_src"])
            return True
        self._note(msg)
        msg = self._in_our_clock(msg)
        if isinstance(msg, Done):
            self.outbox.release(msg.utt)
            self.finished.add(msg.utt)
            return True
        if isinstance(msg, Status):
            if msg.src == self.actor.downstream and self.resync.check(msg):
                self._send_again(msg)
            self._call(self.actor.handle, msg)
            for held in self.rejoin.status(msg, now_ns(), time.monotonic()):
                self._take(held)
            return True
        if isinstance(msg, CUSTODY_TYPES) and self.rejoin.hold(msg, time.monotonic()):
            self.actor.counters["held_at_rejoin"] += 1
            return True
        self._take(msg)
        return True

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
