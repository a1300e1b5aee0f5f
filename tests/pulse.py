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
import sys

import pytest

from voxweft.tools.bench.soundserver import DEVICE, INSTALL, MONITOR, SINK, PulseDaemon, missing

__all__ = ["DEVICE", "MONITOR", "SINK", "PulseDaemon", "pulse", "reinitialize_portaudio"]


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
    lacking = missing()
    if lacking:   # on Linux, tools/test.sh installs them: their absence is a failure
        pytest.fail(f"{', '.join(lacking)} not found: {INSTALL} (tools/test.sh does)")


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
