"""A private PulseAudio daemon with null sinks: real, real-time audio devices without hardware.

What is played to a sink ``NAME`` comes back on its monitor ``NAME.monitor``, paced by the
daemon's clock as a sound card would. PortAudio reaches it through the ALSA device ``pulse``
(libasound2-plugins), which follows ``PULSE_SERVER``: the default sink is what the player
plays to, the default source what capture records. The tests' devices (tests/pulse.py) and
the live loudspeaker bench (`voxweft bench --echo --live`) run on it. Linux only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SINK = "out"
MONITOR = "out.monitor"
DEVICE = "pulse"            # the ALSA PCM (libasound2-plugins) PortAudio lists
#: What it needs, and how to get it.
INSTALL = "apt-get install pulseaudio pulseaudio-utils libasound2-plugins"


#: SCHED_FIFO priority of the daemon's main thread (its clients' streams; its null sinks'
#: timer threads set their own, RR 5) and of the recorders that stand in for hardware.
RT_PRIORITY = 4


def realtime(pid: int = 0, priority: int = RT_PRIORITY) -> str:
    """Put `pid` (0: this thread) at real-time priority; "" or why not.

    The daemon stands in for a sound card, whose clock does not wait for the CPU: beside two
    CPU hogs and the six actors on 2 cores its main thread (which moves every client's audio)
    came late, and the bench's room relay with it (9 late blocks in one run, each moving the
    room's echo for good: docs/development-log.md). Needs root or RLIMIT_RTPRIO.
    """
    try:
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(priority))
        return ""
    except (AttributeError, OSError) as exc:
        return str(exc)


def missing() -> list[str]:
    """The PulseAudio programs this machine lacks (empty: it can run one)."""
    return [tool for tool in ("pulseaudio", "pacat") if shutil.which(tool) is None]


class PulseDaemon:
    """One private ``pulseaudio`` process whose files all live in a temporary directory."""

    def __init__(self, sinks: tuple[str, ...] = (SINK,), source: str = "",
                 rate: int = 44100, channels: int = 2) -> None:
        """Null sinks `sinks` by name, the first the default, at `rate` Hz, `channels`.

        `source`: the default source (default: the first sink's monitor).
        """
        self.sinks = sinks
        # Short path: the unix socket path must stay under 108 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="vwpa-"))
        self.socket = self.dir / "native"
        self.server = f"unix:{self.socket}"
        self.proc: subprocess.Popen | None = None
        self.keepers: list[subprocess.Popen] = []
        script = self.dir / "null.pa"
        script.write_text(
            f"load-module module-native-protocol-unix socket={self.socket} auth-anonymous=1\n"
            + "".join(f"load-module module-null-sink sink_name={name} rate={rate} "
                      f"channels={channels}\n" for name in sinks)
            + f"set-default-sink {sinks[0]}\n"
            f"set-default-source {source or sinks[0] + '.monitor'}\n")
        self.script = script
        home = self.dir / "home"
        home.mkdir()
        # Everything the daemon might write (cookie, state, pid file) stays in self.dir:
        # it never touches the user's own PulseAudio or ~/.config.
        self.env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(self.dir),
                    "XDG_CONFIG_HOME": str(home / ".config"),
                    "PULSE_RUNTIME_PATH": str(self.dir), "PULSE_STATE_PATH": str(self.dir),
                    "PULSE_SERVER": self.server}

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the daemon and wait until its null sink runs at low latency."""
        log = open(self.dir / "pulseaudio.log", "ab")  # noqa: SIM115 - kept by the Popen
        self.socket.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            ["pulseaudio", "-n", "-F", str(self.script), "--daemonize=no",
             "--exit-idle-time=-1", "--use-pid-file=no", "--disable-shm=yes",
             "--log-target=stderr"], env=self.env, stdout=log, stderr=log,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("pulseaudio did not start: "
                                   + (self.dir / "pulseaudio.log").read_text()[-2000:])
            time.sleep(0.02)
        realtime(self.proc.pid)   # as it can; else a busy machine may delay its streams
        for name in self.sinks:
            self._start_keeper(name, deadline)

    def _accepts(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(self.socket))
            return True
        except OSError:
            return False

    def _start_keeper(self, sink: str, deadline: float) -> None:
        # A null sink with no client sleeps for up to its 2 s maximum latency and only
        # notices a new stream when that timer fires: playback would start 0-2 s late. A
        # permanent 10 ms monitor recorder keeps the sink's timer short, as a sound card's
        # interrupt is. Wait until it receives audio: the sink is then really running.
        out = self.dir / f"keeper-{sink}.raw"
        with open(out, "wb") as sink_file:
            self.keepers.append(subprocess.Popen(
                ["pacat", "--record", f"--device={sink}.monitor", "--raw", "--format=s16le",
                 "--rate=8000", "--channels=1", "--latency-msec=10"],
                env=self.env, stdout=sink_file, stderr=subprocess.DEVNULL,
                start_new_session=True))
        realtime(self.keepers[-1].pid)
        seen = 0
        while time.monotonic() < deadline:
            size = out.stat().st_size
            if seen and size > seen:   # grew twice: delivered steadily, not one start burst
                return
            seen = seen or size
            time.sleep(0.05)
        raise RuntimeError("pulseaudio null sink never ran (no monitor data)")

    def stop(self) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL) and its keepers; wait for them."""
        for proc in (*self.keepers, self.proc):
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.keepers, self.proc = [], None

    def kill(self) -> None:
        """Kill the daemon abruptly, as when a device vanishes."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
        self.stop()

    def cleanup(self) -> None:
        """Stop and remove the temporary directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
