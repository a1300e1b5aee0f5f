"""Bus benchmark: one-way latency of 20 ms audio frames between two actor processes on one host.

What is measured: the actor runtime itself (:class:`actors.runtime.Runtime`), on both sides.
The sender is an actor whose ``tick()`` yields the real :class:`~protocol.messages.AudioFrame`
the capture actor publishes (320 float32 samples: 20 ms of 16 kHz mono); the runtime sends
each one as every actor's output goes: ``Runtime.send`` -> ``_send_on`` (``stamp()`` sets
``sent_ns``, then :func:`protocol.codec.encode`) -> inproc PUSH -> the output thread
(``zmq.proxy``) -> PUB (``sockets.pub``) -> ipc or tcp loopback. The receiver is an actor
subscribed to the sender (``subscriptions()``); its runtime's SUB (``sockets.sub``) is polled
and drained by ``Runtime._receive``, which decodes and calls ``handle()``. Latency =
``time.time_ns()`` on entering ``handle()`` minus the header's ``sent_ns``; both processes read
the same host clock.

So the figures include encode, the ZeroMQ queues and I/O threads, the kernel transport,
the poll wake-up, decode and the runtime's bookkeeping on both sides. They exclude any model
or audio device time, the network between hosts (tcp here is 127.0.0.1) and clock offsets
between hosts. Both runtimes also publish their 2 Hz status heartbeats, as in the pipeline.

Two modes:

* ``realtime``: one frame every 20 ms on a monotonic schedule, the load the capture actor
  puts on the bus; latency here is the idle-bus hop cost.
* ``flood``: frames back to back as fast as the runtime can stamp, encode and send; latency
  here includes queueing behind earlier frames, and ``rate_per_s`` is the throughput.

PUB drops silently at its high-water mark (the presets are not changed for the benchmark),
so ``lost`` counts frames sent but never received. PUB/SUB joins asynchronously: the sender
publishes warm-up frames (stream ``warmup``, not counted) until the receiver has seen one,
and only then starts the measured frames. A final end-of-stream marker, repeated until the
receiver acknowledges it, ends the run; the receiver also stops after a silence timeout,
and the caller kills both processes if they overrun, so nothing can hang.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
import traceback
from collections.abc import Iterator
from multiprocessing import connection

import numpy as np

from voxweft.actors.runtime import Actor, Runtime
from voxweft.protocol import bus as wire
from voxweft.protocol.codec import encode
from voxweft.protocol.messages import BUS_RATE, AudioFrame, EndOfStream, Message, now_ns, stamp
from voxweft.protocol.sockets import free_ports
from voxweft.tools.latency import percentile

TRANSPORTS = ("ipc", "tcp")
MODES = ("realtime", "flood")

FRAME_S = 0.02                                   # one capture frame: 20 ms
FRAME_SAMPLES = int(BUS_RATE * FRAME_S)       # 320 samples of float32

BENCH_SRC = "bench"          # the sending actor
RECEIVER = "bench-rx"        # the receiving actor (the runtime binds a PUB for it too)
BENCH_STREAM = "bench"       # stream of measured frames and of the end marker
WARMUP_STREAM = "warmup"     # stream of warm-up frames, discarded by the receiver
#: What the segmenter subscribes to from capture, but its heartbeat.
TAKEN = [kind for sender, kind in wire.inputs("segmenter") if sender == "capture"]

STARTUP_S = 30.0             # process start, imports and the PUB/SUB join, on a busy host
WARMUP_MIN = 25              # warm-up frames sent at least, so the code paths are warm
WARMUP_GAP_S = 0.01          # pace of warm-up frames while the receiver is not yet ready
SETTLE_S = 0.1               # let the last warm-up frames drain before measuring
IDLE_S = 5.0                 # receiver gives up after this long without any message
MARKER_GAP_S = 0.02          # the end marker is repeated this often until acknowledged ...
MARKER_S = 10.0              # ... for at most this long
JOIN_S = 5.0                 # how long a finished process may take to exit


class BenchTopology:
    """The part of a topology the runtime reads: where each bench actor's PUB is."""

    def __init__(self, endpoints: dict[str, str]) -> None:
        self.endpoints = endpoints

    def pub_bind(self, actor: str) -> str:
        """Endpoint the actor's PUB binds."""
        return self.endpoints[actor]

    def pub_connect(self, actor: str) -> str:
        """Endpoint a subscriber connects to (the same: one host)."""
        return self.endpoints[actor]

    def recorder_connect(self, actor: str) -> str:
        """No session recorder: the receiver subscribes."""
        return ""

    def curve(self, host: str | None = None) -> None:
        """No CURVE: the bench runs on one machine, over ipc or loopback TCP."""
        return None


def _run_actor(actor: Actor) -> None:
    """Run `actor` under the real runtime until it sets `actor.stop`; raise what went wrong."""
    os.environ.pop("VOXWEFT_FAULT", None)   # meant for the pipeline's actors, not the bench's
    runtime = Runtime(actor)
    actor.stop = runtime.stop
    code = runtime.run()
    if actor.failure:
        raise RuntimeError(actor.failure)
    if code:
        raise RuntimeError(f"the {actor.name} runtime exited with code {code} (see its log)")


# -- sender process ---------------------------------------------------------------------------
class BenchSender(Actor):
    """Publishes warm-up frames, the measured frames, then end markers; then stops."""

    name = BENCH_SRC

    def __init__(self, topology: BenchTopology, mode: str, count: int, ready, done) -> None:
        super().__init__(topology, None)
        self.mode, self.count = mode, count
        self.ready, self.done = ready, done    # set by the receiver: it hears us / it is done
        self.pcm = np.random.default_rng(0).uniform(-0.5, 0.5, FRAME_SAMPLES).astype(np.float32)
        self.stop = None                       # the runtime's stop event
        self.failure = ""
        self.result: dict | None = None

    def frame(self, i: int, stream: str) -> AudioFrame:
        """The i-th 20 ms frame of `stream`."""
        return AudioFrame(pcm=self.pcm, sample_rate=BUS_RATE, stream=stream,
                          media_s=i * FRAME_S, capture_ns=now_ns())

    def tick(self) -> Iterator[Message]:
        """The whole run, on the first turn of the loop; the runtime sends each output."""
        if self.result is not None or self.failure:
            return
        try:
            yield from self._run()
        except Exception:  # noqa: BLE001 - the runtime would only log it
            self.failure = traceback.format_exc()
        finally:
            self.stop.set()

    def _run(self) -> Iterator[Message]:
        # Warm-up until the receiver has seen a frame: only then is the subscription active.
        deadline = time.monotonic() + STARTUP_S
        warmup = 0
        while not self.ready.is_set() or warmup < WARMUP_MIN:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the subscriber received no warm-up frame within "
                                   f"{STARTUP_S:.0f} s")
            warmup += 1
            yield self.frame(warmup, WARMUP_STREAM)
            self.ready.wait(WARMUP_GAP_S)
        time.sleep(SETTLE_S)

        t0 = time.monotonic()
        for i in range(self.count):
            if self.mode == "realtime":
                delay = t0 + i * FRAME_S - time.monotonic()   # fixed schedule: no drift
                if delay > 0:
                    time.sleep(delay)
            yield self.frame(i, BENCH_STREAM)

        # The end marker may itself be dropped at the high-water mark: repeat it until the
        # subscriber says it is done (or gave up). Stopping before that would discard, with
        # linger 0, frames still queued in the PUB.
        deadline = time.monotonic() + MARKER_S
        while True:
            yield EndOfStream(media_s=self.count * FRAME_S, stream=BENCH_STREAM)
            if self.done.wait(MARKER_GAP_S) or time.monotonic() > deadline:
                break

        last = stamp(self.frame(self.count - 1, BENCH_STREAM), src=self.name, epoch=1,
                     seq=self.count)
        self.result = {"sent": self.count, "warmup": warmup,
                       "payload_bytes": sum(len(part) for part in encode(last))}


def _publisher(topology: BenchTopology, mode: str, count: int, ready, done,
               result_out) -> None:
    """Sender process entry point: result or traceback goes back on `result_out`."""
    try:
        sender = BenchSender(topology, mode, count, ready, done)
        _run_actor(sender)
        result_out.send(("ok", sender.result))
    except Exception:  # noqa: BLE001 - the parent raises it with the traceback
        result_out.send(("error", traceback.format_exc()))
    finally:
        result_out.close()


# -- receiver process -------------------------------------------------------------------------
class BenchReceiver(Actor):
    """Takes the sender's frames through the runtime and notes each one's latency."""

    name = RECEIVER

    def __init__(self, topology: BenchTopology, ready, done) -> None:
        super().__init__(topology, None)
        self.ready, self.done = ready, done
        self.stop = None                       # the runtime's stop event
        self.failure = ""
        self.latencies_ns: list[int] = []
        self.first_ns = self.last_ns = 0
        self.warmups = 0
        self.ended = False
        self.heard: float | None = None        # monotonic time of the last frame or marker
        self.deadline = 0.0

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """The sender's audio and end of stream, as the segmenter takes capture's."""
        return [(BENCH_SRC, kind) for kind in TAKEN]

    def load(self) -> None:
        """Start the clock for the first frame."""
        self.deadline = time.monotonic() + STARTUP_S

    def handle(self, msg: Message) -> Iterator[Message]:
        """Note a measured frame's latency; a warm-up frame says the sender is heard."""
        recv_ns = time.time_ns()
        if isinstance(msg, AudioFrame | EndOfStream) and not self.ended:
            self.heard = time.monotonic()
            if isinstance(msg, EndOfStream):
                self.ended = True
                self.finish()
            elif msg.stream == WARMUP_STREAM:
                self.warmups += 1
                self.ready.set()
            else:
                self.latencies_ns.append(recv_ns - msg.sent_ns)
                self.first_ns = self.first_ns or recv_ns
                self.last_ns = recv_ns
        return ()

    def tick(self) -> Iterator[Message]:
        """Give up when the sender never came, or went quiet (its end marker lost)."""
        now = time.monotonic()
        if self.heard is None and now > self.deadline and not self.stop.is_set():
            self.failure = (f"no frame from {self.topology.pub_connect(BENCH_SRC)} within "
                            f"{STARTUP_S:.0f} s")
            self.finish()
        if self.heard is not None and now - self.heard > IDLE_S:
            self.finish()   # report what came
        return ()

    def finish(self) -> None:
        """Tell the sender we are done, and stop."""
        self.done.set()
        self.stop.set()


def _subscriber(topology: BenchTopology, ready, done, result_out) -> None:
    """Receiver process entry point: result or traceback goes back on `result_out`."""
    try:
        receiver = BenchReceiver(topology, ready, done)
        _run_actor(receiver)
        result_out.send(("ok", {"latencies_ns": receiver.latencies_ns,
                                "first_ns": receiver.first_ns, "last_ns": receiver.last_ns,
                                "warmup": receiver.warmups, "ended": receiver.ended}))
    except Exception:  # noqa: BLE001 - the parent raises it with the traceback
        result_out.send(("error", traceback.format_exc()))
    finally:
        done.set()
        result_out.close()


# -- parent -----------------------------------------------------------------------------------
def _collect(waiting: dict, timeout_s: float) -> dict:
    """Results of the processes in `waiting` ({connection: (name, process)})."""
    results = {}
    deadline = time.monotonic() + timeout_s
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            names = " and ".join(name for name, _proc in waiting.values())
            raise RuntimeError(f"busbench: the {names} did not finish within {timeout_s:.0f} s "
                               "and was killed")
        for conn in connection.wait(list(waiting), left):
            name, proc = waiting.pop(conn)
            try:
                kind, value = conn.recv()
            except EOFError:
                proc.join(1.0)
                raise RuntimeError(f"busbench: the {name} process died (exit code "
                                   f"{proc.exitcode}) without a result") from None
            if kind != "ok":
                raise RuntimeError(f"busbench: the {name} process failed:\n{value}")
            results[name] = value
    return results


def measure(transport: str, mode: str, seconds: float = 10.0, frames: int = 20000) -> dict:
    """Measure one-way latency of 20 ms audio frames between two actor runtimes.

    Args:
        transport: ``"ipc"`` (a unix socket in a fresh temporary directory, removed
            afterwards) or ``"tcp"`` (127.0.0.1 on a free port).
        mode: ``"realtime"`` (one frame every 20 ms for `seconds`) or ``"flood"``
            (`frames` frames as fast as the sender can go).
        seconds: Length of a realtime run.
        frames: Number of frames in a flood run.

    Returns:
        A dict with ``transport``, ``mode``, ``sent``, ``received``, ``lost``
        (sent - received: dropped at a high-water mark), ``p50_ms``, ``p99_ms``, ``max_ms``,
        ``mean_ms`` (latency of received frames), ``rate_per_s`` (received frames divided by
        the time from the first to the last receive) and ``payload_bytes`` (the last
        frame encoded: topic + header + PCM). Floats are rounded to 4 decimals; latency
        figures are None when nothing arrived, the rate when fewer than two frames did.

    Raises:
        ValueError: An unknown transport or mode, or a non-positive length.
        RuntimeError: A process failed, died, or overran its time and was killed.

    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, not {transport!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "realtime":
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, not {seconds!r}")
        count, run_s = max(1, round(seconds / FRAME_S)), seconds
    else:
        if frames <= 0:
            raise ValueError(f"frames must be positive, not {frames!r}")
        count, run_s = int(frames), frames * 0.001   # 1 ms a frame: very generous

    tmp = tempfile.mkdtemp(prefix="vwbench-") if transport == "ipc" else None
    names = (BENCH_SRC, RECEIVER)
    ends = ([f"ipc://{tmp}/{a}" for a in names] if tmp
            else [f"tcp://127.0.0.1:{port}" for port in free_ports(len(names))])
    topology = BenchTopology(dict(zip(names, ends, strict=True)))
    mp = multiprocessing.get_context("spawn")
    ready, done = mp.Event(), mp.Event()
    pub_in, pub_out = mp.Pipe(duplex=False)
    sub_in, sub_out = mp.Pipe(duplex=False)
    publisher = mp.Process(target=_publisher, name="busbench-pub", daemon=True,
                           args=(topology, mode, count, ready, done, pub_out))
    subscriber = mp.Process(target=_subscriber, name="busbench-sub", daemon=True,
                            args=(topology, ready, done, sub_out))
    procs = {"publisher": publisher, "subscriber": subscriber}
    try:
        for proc in procs.values():
            proc.start()
        for conn in (pub_out, sub_out):
            conn.close()    # the children hold them now; EOF then means a child died
        results = _collect({pub_in: ("publisher", publisher), sub_in: ("subscriber", subscriber)},
                           2 * STARTUP_S + MARKER_S + run_s)
        for name, proc in procs.items():
            proc.join(JOIN_S)
            if proc.is_alive():
                raise RuntimeError(f"busbench: the {name} process did not exit within "
                                   f"{JOIN_S:.0f} s after its result and was killed")
    finally:
        for proc in procs.values():
            if proc.pid is not None and proc.is_alive():
                proc.kill()
                proc.join(JOIN_S)
        for conn in (pub_in, sub_in):
            conn.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    sent = results["publisher"]["sent"]
    sub = results["subscriber"]
    latencies_ms = [ns / 1e6 for ns in sub["latencies_ns"]]
    received = len(latencies_ms)
    span_s = (sub["last_ns"] - sub["first_ns"]) / 1e9
    return {
        "transport": transport,
        "mode": mode,
        "sent": sent,
        "received": received,
        "lost": sent - received,
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "max_ms": round(max(latencies_ms), 4) if latencies_ms else None,
        "mean_ms": round(statistics.fmean(latencies_ms), 4) if latencies_ms else None,
        "rate_per_s": round(received / span_s, 4) if span_s > 0 else None,
        "payload_bytes": results["publisher"]["payload_bytes"],
    }


def run_all(seconds: float = 10.0, frames: int = 20000) -> dict:
    """Run :func:`measure` for every transport and mode, one after the other.

    Args:
        seconds: Length of each realtime run.
        frames: Number of frames in each flood run.

    Returns:
        ``{"ipc": {"realtime": {...}, "flood": {...}}, "tcp": {...}}``.

    """
    return {transport: {mode: measure(transport, mode, seconds, frames) for mode in MODES}
            for transport in TRANSPORTS}


def format_table(results: dict) -> str:
    """A small text table of :func:`run_all` results."""
    columns = ("sent", "received", "lost", "p50_ms", "p99_ms", "max_ms", "mean_ms",
               "rate_per_s")
    lines = [f"{'transport':<10}{'mode':<10}" + "".join(f"{c:>12}" for c in columns)]
    for transport, by_mode in results.items():
        for mode, row in by_mode.items():
            cells = "".join(f"{'-' if row[c] is None else row[c]:>12}" for c in columns)
            lines.append(f"{transport:<10}{mode:<10}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m voxweft.tools.bench.busbench``: every transport and mode, as a table."""
    parser = argparse.ArgumentParser(prog="python -m voxweft.tools.bench.busbench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of realtime runs")
    parser.add_argument("--frames", type=int, default=20000, help="frames in flood runs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    results = run_all(args.seconds, args.frames)
    print(json.dumps(results, indent=1) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
