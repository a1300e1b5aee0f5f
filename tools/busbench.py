"""Bus benchmark: one-way latency of 20 ms audio frames between two processes on one host.

What is measured: the time from the sender stamping a message (``stamp()`` sets ``sent_ns``,
exactly as the actor runtime does before it encodes and sends) to the receiver holding the
decoded message. Each frame is the real :class:`~protocol.messages.AudioFrame` the capture
actor publishes: 320 float32 samples (20 ms of 16 kHz mono), encoded with
:func:`protocol.codec.encode` and decoded with :func:`protocol.codec.decode`. The path is the
actors' own: sender process -> inproc PUSH -> ``zmq.proxy`` thread -> PUB (``sockets.pub``)
-> ipc or tcp loopback -> SUB (``sockets.sub``) polled and drained like ``Runtime._receive``
-> decode, in a separate receiver process. Latency = receiver ``time.time_ns()`` right after
recv + decode minus the header's ``sent_ns``; both processes read the same host clock.

So the figures include encode, the ZeroMQ queues and I/O threads, the kernel transport,
the poll wake-up and decode. They exclude any model or audio device time, the network
between hosts (tcp here is 127.0.0.1) and clock offsets between hosts.

Two modes:

* ``realtime``: one frame every 20 ms on a monotonic schedule, the load the capture actor
  puts on the bus; latency here is the idle-bus hop cost.
* ``flood``: frames back to back as fast as the sender can stamp, encode and send; latency
  here includes queueing behind earlier frames, and ``rate_per_s`` is the throughput.

PUB drops silently at its high-water mark (the presets are not changed for the benchmark),
so ``lost`` counts frames sent but never received. PUB/SUB joins asynchronously: the sender
publishes warm-up frames (sender name ``warmup``, not counted) until the receiver has seen
one, and only then starts the measured frames. A final end-of-stream marker, repeated until
the receiver acknowledges it, ends the run; the receiver also stops after a silence timeout,
and the caller kills both processes if they overrun, so nothing can hang.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import tempfile
import threading
import time
import traceback
from multiprocessing import connection

import numpy as np
import zmq

from actors.runtime import output_proxy
from protocol import sockets
from protocol.codec import decode, encode
from protocol.messages import AudioFrame, EndOfStream, now_ns, stamp
from tools.latency import percentile

TRANSPORTS = ("ipc", "tcp")
MODES = ("realtime", "flood")

SAMPLE_RATE = 16000
FRAME_S = 0.02                                   # one capture frame: 20 ms
FRAME_SAMPLES = int(SAMPLE_RATE * FRAME_S)       # 320 samples of float32

BENCH_SRC = "bench"          # sender name of measured frames and of the end marker
WARMUP_SRC = "warmup"        # sender name of warm-up frames, discarded by the receiver
TOPICS = [b"audio.", b"eos."]   # what the segmenter subscribes to from capture
INPROC = "inproc://out"      # the runtime's internal output queue

STARTUP_S = 30.0             # process start, imports and the PUB/SUB join, on a busy host
WARMUP_MIN = 25              # warm-up frames sent at least, so the code paths are warm
WARMUP_GAP_S = 0.01          # pace of warm-up frames while the receiver is not yet ready
SETTLE_S = 0.1               # let the last warm-up frames drain before measuring
IDLE_S = 5.0                 # receiver gives up after this long without any message
MARKER_GAP_S = 0.02          # the end marker is repeated this often until acknowledged ...
MARKER_S = 10.0              # ... for at most this long
POLL_MS = 100                # receiver poll timeout (the runtime's default tick interval)
JOIN_S = 5.0                 # how long a finished process may take to exit


# -- sender process ---------------------------------------------------------------------------
def _publish(bind: str, mode: str, count: int, ready, done, endpoint_out) -> dict:
    ctx = zmq.Context()
    out = proxy = None
    try:
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(INPROC)
        pub = sockets.pub(ctx, bind)
        endpoint = pub.getsockopt_string(zmq.LAST_ENDPOINT)   # the real port for tcp ":*"
        proxy = threading.Thread(target=output_proxy, args=(pull, pub), name="output", daemon=True)
        proxy.start()
        out = ctx.socket(zmq.PUSH)
        out.setsockopt(zmq.LINGER, 0)
        out.connect(INPROC)
        endpoint_out.send(endpoint)

        epoch = time.time_ns()
        pcm = np.random.default_rng(0).uniform(-0.5, 0.5, FRAME_SAMPLES).astype(np.float32)

        def frame(i: int) -> AudioFrame:
            return AudioFrame(pcm=pcm, sample_rate=SAMPLE_RATE, media_s=i * FRAME_S,
                              capture_ns=now_ns())

        def send(msg, src: str, seq: int) -> None:
            # Runtime._send_on: stamp (sets sent_ns), encode, send on the inproc queue.
            msg = stamp(msg, src=src, epoch=epoch, seq=seq)
            out.send_multipart(encode(msg), copy=False)

        # Warm-up until the receiver has seen a frame: only then is the subscription active.
        deadline = time.monotonic() + STARTUP_S
        warmup = 0
        while not ready.is_set() or warmup < WARMUP_MIN:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the subscriber received no warm-up frame within "
                                   f"{STARTUP_S:.0f} s")
            warmup += 1
            send(frame(warmup), WARMUP_SRC, warmup)
            ready.wait(WARMUP_GAP_S)
        time.sleep(SETTLE_S)

        t0 = time.monotonic()
        for i in range(count):
            if mode == "realtime":
                delay = t0 + i * FRAME_S - time.monotonic()   # fixed schedule: no drift
                if delay > 0:
                    time.sleep(delay)
            send(frame(i), BENCH_SRC, i + 1)
        send_s = time.monotonic() - t0

        # The end marker may itself be dropped at the high-water mark: repeat it until the
        # subscriber says it is done (or gave up). Closing before that would discard, with
        # linger 0, frames still queued in the PUB.
        deadline = time.monotonic() + MARKER_S
        marker = 0
        while True:
            marker += 1
            send(EndOfStream(media_s=count * FRAME_S), BENCH_SRC, marker)
            if done.wait(MARKER_GAP_S) or time.monotonic() > deadline:
                break

        last = stamp(frame(count - 1), src=BENCH_SRC, epoch=epoch, seq=count)
        return {"sent": count, "send_s": send_s, "warmup": warmup,
                "payload_bytes": sum(len(part) for part in encode(last))}
    finally:
        if out is not None:
            out.close(0)
        if proxy is None:
            ctx.destroy(linger=0)      # failed before the proxy owned its sockets
        else:
            ctx.term()                 # ends zmq.proxy; the thread closes pull and pub
            proxy.join(JOIN_S)


def _publisher(bind: str, mode: str, count: int, ready, done, endpoint_out, result_out) -> None:
    """Sender process entry point: result or traceback goes back on `result_out`."""
    try:
        result_out.send(("ok", _publish(bind, mode, count, ready, done, endpoint_out)))
    except Exception:  # noqa: BLE001 - the parent raises it with the traceback
        result_out.send(("error", traceback.format_exc()))
    finally:
        result_out.close()
        endpoint_out.close()


# -- receiver process -------------------------------------------------------------------------
def _subscribe(endpoint_in, ready, done) -> dict:
    if not endpoint_in.poll(STARTUP_S):
        raise RuntimeError(f"the publisher sent no endpoint within {STARTUP_S:.0f} s")
    endpoint = endpoint_in.recv()
    ctx = zmq.Context()
    sock = sockets.sub(ctx, [endpoint], TOPICS)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    latencies_ns: list[int] = []
    first_ns = last_ns = 0
    warmup = 0
    ended = False
    heard: float | None = None          # monotonic time of the last message
    deadline = time.monotonic() + STARTUP_S
    try:
        while not ended:
            if not poller.poll(POLL_MS):
                now = time.monotonic()
                if heard is None and now > deadline:
                    raise RuntimeError(f"no frame from {endpoint} within {STARTUP_S:.0f} s")
                if heard is not None and now - heard > IDLE_S:
                    break           # publisher gone or end marker lost: report what came
                continue
            heard = time.monotonic()
            for _ in range(256):    # drained like Runtime._receive
                try:
                    frames = sock.recv_multipart(flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = decode(frames)
                recv_ns = time.time_ns()
                if msg.src == WARMUP_SRC:
                    warmup += 1
                    if warmup == 1:
                        ready.set()
                    continue
                if isinstance(msg, EndOfStream):
                    ended = True
                    break
                latencies_ns.append(recv_ns - msg.sent_ns)
                first_ns = first_ns or recv_ns
                last_ns = recv_ns
    finally:
        done.set()
        sock.close(0)
        ctx.term()
    return {"latencies_ns": latencies_ns, "first_ns": first_ns, "last_ns": last_ns,
            "warmup": warmup, "ended": ended}


def _subscriber(endpoint_in, ready, done, result_out) -> None:
    """Receiver process entry point: result or traceback goes back on `result_out`."""
    try:
        result_out.send(("ok", _subscribe(endpoint_in, ready, done)))
    except Exception:  # noqa: BLE001 - the parent raises it with the traceback
        done.set()
        result_out.send(("error", traceback.format_exc()))
    finally:
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
    """Measure one-way PUB->SUB latency of 20 ms audio frames between two processes.

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
    bind = f"ipc://{tmp}/bus" if tmp else "tcp://127.0.0.1:*"
    mp = multiprocessing.get_context("spawn")
    ready, done = mp.Event(), mp.Event()
    endpoint_in, endpoint_out = mp.Pipe(duplex=False)
    pub_in, pub_out = mp.Pipe(duplex=False)
    sub_in, sub_out = mp.Pipe(duplex=False)
    publisher = mp.Process(target=_publisher, name="busbench-pub", daemon=True,
                           args=(bind, mode, count, ready, done, endpoint_out, pub_out))
    subscriber = mp.Process(target=_subscriber, name="busbench-sub", daemon=True,
                            args=(endpoint_in, ready, done, sub_out))
    procs = {"publisher": publisher, "subscriber": subscriber}
    try:
        for proc in procs.values():
            proc.start()
        for conn in (endpoint_in, endpoint_out, pub_out, sub_out):
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
    """``python -m tools.busbench``: run every transport and mode and print a table."""
    parser = argparse.ArgumentParser(prog="python -m tools.busbench", description=__doc__
                                     .splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of realtime runs")
    parser.add_argument("--frames", type=int, default=20000, help="frames in flood runs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    results = run_all(args.seconds, args.frames)
    print(json.dumps(results, indent=1) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
