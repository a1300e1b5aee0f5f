"""PortAudio devices through sounddevice: import, list, resolve, open, lose and reopen."""

from __future__ import annotations

import time

from voxweft.actors.settings.base import StartupError


def open_sounddevice(actor: str):
    """Import sounddevice, turning a missing PortAudio into one actionable line."""
    try:
        import sounddevice
    except OSError as exc:
        raise StartupError(f"{actor}: PortAudio library not found ({exc}); install it with "
                           "`apt-get install libportaudio2` or `brew install portaudio`") from None
    return sounddevice


def list_devices(sd) -> list[dict]:
    """Every device with its index, name, channels, default rate and host API.

    `name` is exactly what a topology's `device` key takes; `default` says whether ""
    selects this device ("input", "output", "input, output" or "").
    """
    try:
        default_in, default_out = sd.default.device
    except (TypeError, ValueError):
        default_in = default_out = -1
    apis = [api["name"] for api in sd.query_hostapis()]
    rows = []
    for i, d in enumerate(sd.query_devices()):
        marks = [label for label, index in (("input", default_in), ("output", default_out))
                 if index == i]
        rows.append({"index": i, "name": d["name"], "default": ", ".join(marks),
                     "inputs": d["max_input_channels"], "outputs": d["max_output_channels"],
                     "rate": int(d["default_samplerate"]),
                     "hostapi": apis[d["hostapi"]] if d["hostapi"] < len(apis) else ""})
    return rows


def open_device(sd, actor: str, name: str, make):
    """Call `make()` (which opens a stream); a refusal becomes one line naming the device."""
    try:
        return make()
    except (sd.PortAudioError, ValueError) as exc:
        raise StartupError(f"{actor}: cannot open audio device {name!r} ({exc}); run "
                           "`voxweft devices` to list devices") from None


def resolve_device(sd, spec: str, kind: str) -> tuple[int | None, dict]:
    """Find an input/output device by index or (sub)name; "" means the system default."""
    key = "max_input_channels" if kind == "input" else "max_output_channels"
    devices = list(enumerate(sd.query_devices()))
    if spec == "":
        try:
            info = sd.query_devices(kind=kind)
        except (ValueError, sd.PortAudioError):
            raise StartupError(f"no default {kind} device; run `voxweft devices` to list "
                               f"devices and set one in the topology") from None
        return None, info
    if spec.isdigit():
        matches = [(i, d) for i, d in devices if i == int(spec) and d[key] > 0]
    else:
        matches = [(i, d) for i, d in devices if d["name"] == spec and d[key] > 0] or \
                  [(i, d) for i, d in devices if spec.lower() in d["name"].lower() and d[key] > 0]
    if not matches:
        raise StartupError(f"{kind} device {spec!r} not found; run `voxweft devices` to list "
                           "devices")
    return matches[0]


def echo_pairing(sd, input_spec: str, output_spec: str) -> tuple[bool, str]:
    """Whether capture can cancel the player's echo with these two devices, and why, one line.

    The reference and the microphone are aligned by their devices' DAC and ADC times, which
    PortAudio gives per host API: the two must be found, and on one host API (one clock).
    """
    try:
        i, mic = resolve_device(sd, input_spec, "input")
        o, out = resolve_device(sd, output_spec, "output")
    except (StartupError, sd.PortAudioError) as exc:
        return False, f"cannot pair the devices for echo cancelling: {exc}"
    apis = [api["name"] for api in sd.query_hostapis()]
    api_in, api_out = (apis[d["hostapi"]] if d["hostapi"] < len(apis) else "?"
                       for d in (mic, out))
    if api_in != api_out:
        return False, (f"input {mic['name']!r} ({api_in}) and output {out['name']!r} "
                       f"({api_out}) are on different host APIs, whose clocks are not one: "
                       "pick both from one (`voxweft devices`), or set echo_mode = \"gate\"")
    return True, (f"input {mic['name']!r} and output {out['name']!r} ({api_in}) can be "
                  "paired for echo cancelling")


#: Why a stream stopped that we did not stop.
STREAM_LOST = "the audio stream stopped (device unplugged or sound server gone)"


class DeviceStream:
    """What a PortAudio stream of ours shares, input or output: noticing loss, closing.

    A subclass opens `stream` (from `sd`) with `finished_callback=self._finished` and sets
    `lost` and `closing` to "" and False first. PortAudio ends a callback stream by itself
    only when the device failed: `lost` then says why, unless we were closing it.
    """

    sd = None
    stream = None
    lost = ""         # why the stream stopped by itself; "" while it runs
    closing = False   # we are stopping it: its end is no loss

    def _finished(self) -> None:
        if not self.closing:
            self.lost = STREAM_LOST

    def _close_stream(self) -> None:
        """Stop and close the stream (a lost device cannot be stopped cleanly: freed anyway)."""
        self.closing = True
        try:
            self.stream.stop()
            self.stream.close()
        except self.sd.PortAudioError:
            pass
        finally:
            self.closing = False


def reopen(sd, make) -> str:
    """Re-initialize PortAudio, then call `make()` (which opens a device again).

    PortAudio lists devices only when it initializes: without this a device plugged in
    again is not found. Returns "" when `make()` succeeded, else why not (still missing).
    """
    try:
        sd._terminate()
        sd._initialize()
        make()
    except (StartupError, sd.PortAudioError) as exc:
        return str(exc)
    return ""


class Recovery:
    """An actor's lost device, tried again every `retry_ms` until it opens.

    The actor keeps running rather than exit: the rest of the pipeline is fine, and a
    headset that comes back should just work again. Exiting would not help: supervisord
    would restart the actor, load() would fail with the device still missing, exit 78, and
    nobody would restart it when the device returns. The loss is said once (and counted in
    `device_lost`), the return once.
    """

    def __init__(self, actor: str, kind: str, meanwhile: str, counters, log) -> None:
        self.actor = actor          # "capture" or "player"
        self.kind = kind            # "input" or "output"
        self.meanwhile = meanwhile  # what the actor does while it waits, said in the error
        self.counters = counters
        self.log = log
        self.lost_at: float | None = None   # monotonic time the loss was noticed
        self.last_retry = 0.0

    def step(self, device: str, why: str, retry_ms: int, again) -> bool:
        """One try, called while the device is lost; True when it is back.

        The loss is said once; every `retry_ms`, `again()` opens the device and returns a
        line about it, or "" while it is still missing.
        """
        now = time.monotonic()
        if self.lost_at is None:
            self.lost_at = now
            self.counters["device_lost"] += 1
            self.log.error("%s: %s device %r lost (%s); %s every %.1f s; run `voxweft devices` "
                           "to list devices", self.actor, self.kind, device or "default", why,
                           self.meanwhile, retry_ms / 1000)
        if now - self.last_retry < retry_ms / 1000:
            return False
        self.last_retry = now
        back = again()
        if not back:
            return False
        self.log.info("%s: %s device back after %.1f s: %s", self.actor, self.kind,
                      now - self.lost_at, back)
        self.lost_at = None
        return True
