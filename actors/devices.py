"""PortAudio devices through sounddevice: import, list and resolve by name or index."""

from __future__ import annotations

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
