"""A private PulseAudio daemon with a null sink: real, real-time audio devices without hardware.

What the player plays to the sink ``out`` comes back on its monitor ``out.monitor`` (the
default source), paced by the daemon's clock as a sound card would. PortAudio reaches it
through the ALSA device ``pulse`` (libasound2-plugins), which follows ``PULSE_SERVER``.

Use it by importing the fixture into a test module::

    from tests.pulse import pulse  # noqa: F401  (pytest fixture)

The fixture sets ``PULSE_SERVER`` (and ``PULSE_RUNTIME_PATH``) in ``os.environ`` for the
module's duration, so actor processes started from the test inherit it; supervisord passes
both through as well. It restores the environment and leaves no process at teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SINK = "out"
MONITOR = "out.monitor"
DEVICE = "pulse"            # the ALSA PCM (libasound2-plugins) PortAudio lists


class PulseDaemon:
    """One private ``pulseaudio`` process whose files all live in a temporary directory."""

    def __init__(self) -> None:
        # Short path: the unix socket path must stay under 108 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="vwpa-"))
        self.socket = self.dir / "native"
        self.server = f"unix:{self.socket}"
        self.proc: subprocess.Popen | None = None
        self.keeper: subprocess.Popen | None = None
        script = self.dir / "null.pa"
        script.write_text(
            f"load-module module-native-protocol-unix socket={self.socket} auth-anonymous=1\n"
            f"load-module module-null-sink sink_name={SINK} rate=44100 channels=2\n"
            f"set-default-sink {SINK}\n"
            f"set-default-source {MONITOR}\n")
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
        self._start_keeper(deadline)

    def _accepts(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(self.socket))
            return True
        except OSError:
            return False

    def _start_keeper(self, deadline: float) -> None:
        # A null sink with no client sleeps for up to its 2 s maximum latency and only
        # notices a new stream when that timer fires: playback would start 0-2 s late. A
        # permanent 10 ms monitor recorder keeps the sink's timer short, as a sound card's
        # interrupt is. Wait until it receives audio: the sink is then really running.
        out = self.dir / "keeper.raw"
        with open(out, "wb") as sink_file:
            self.keeper = subprocess.Popen(
                ["pacat", "--record", f"--device={MONITOR}", "--raw", "--format=s16le",
                 "--rate=8000", "--channels=1", "--latency-msec=10"],
                env=self.env, stdout=sink_file, stderr=subprocess.DEVNULL,
                start_new_session=True)
        seen = 0
        while time.monotonic() < deadline:
            size = out.stat().st_size
            if seen and size > seen:   # grew twice: delivered steadily, not one start burst
                return
            seen = seen or size
            time.sleep(0.05)
        raise RuntimeError("pulseaudio null sink never ran (no monitor data)")

    def stop(self) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL) and its keeper; wait for both."""
        for proc in (self.keeper, self.proc):
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.keeper = self.proc = None

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


def reinitialize_portaudio() -> None:
    """Make an already imported sounddevice see the devices that exist now.

    PortAudio enumerates devices once, in Pa_Initialize (at `import sounddevice`); a
    process that imported it before the daemon started would never list ``pulse``.
    Re-initializing closes every open stream of this process.
    """
    sd = sys.modules.get("sounddevice")
    if sd is not None:
        sd._terminate()
        sd._initialize()


def _require_pulseaudio() -> None:
    if sys.platform != "linux":
        pytest.skip("the PulseAudio null sink is Linux only")
    missing = [tool for tool in ("pulseaudio", "pacat") if shutil.which(tool) is None]
    if missing:   # on Linux, tools/test.sh installs them: their absence is a failure
        pytest.fail(f"{', '.join(missing)} not found: install pulseaudio pulseaudio-utils "
                    "libasound2-plugins (tools/test.sh does)")


@pytest.fixture(scope="module")
def pulse():
    """A running private PulseAudio null sink; the environment points PortAudio at it."""
    _require_pulseaudio()
    daemon = PulseDaemon()
    saved = {k: os.environ.get(k) for k in ("PULSE_SERVER", "PULSE_RUNTIME_PATH")}
    try:
        daemon.start()
        # The client side needs only the server address: HOME stays the user's (model
        # caches live there) and no cookie is needed (auth-anonymous on a 0700 directory).
        os.environ["PULSE_SERVER"] = daemon.server
        os.environ["PULSE_RUNTIME_PATH"] = str(daemon.dir)
        reinitialize_portaudio()
        yield daemon
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        daemon.cleanup()
        reinitialize_portaudio()   # forget the device that no longer exists
