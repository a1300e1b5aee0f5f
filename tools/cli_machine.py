"""`voxweft languages | devices | models | doctor`: what this installation and machine have."""

from __future__ import annotations

from voxweft.tools.cli_common import die


def cmd_languages(args) -> int:
    """Language pairs this installation can interpret, with the engine for each stage."""
    from voxweft.tools.languages import main as languages_main

    return languages_main((["--topology", args.topology] if args.topology else [])
                          + (["--json"] if args.json else []))


def cmd_devices(args) -> int:
    """List audio devices."""
    from voxweft.actors.devices import list_devices, open_sounddevice
    from voxweft.actors.settings.base import StartupError

    try:
        sd = open_sounddevice("devices")
    except StartupError as exc:
        return die(str(exc))
    print(f"{'index':>5}  {'in':>3} {'out':>3} {'rate':>6}  name")
    for d in list_devices(sd):
        default = f" (default {d['default']})" if d.get("default") else ""
        print(f"{d['index']:>5}  {d['inputs']:>3} {d['outputs']:>3} {d['rate']:>6}  "
              f"{d['name']}{default}")
    return 0


def cmd_models(args) -> int:
    """Models installed, where, and which topology needs which; fetch or convert one."""
    from voxweft.tools import models

    if args.models_command == "fetch":
        return models.cmd_fetch(args.name)
    if args.models_command == "convert-whisper":
        return models.cmd_convert_whisper(args.ct2_dir, args.out_dir, args.dtype, args.bits)
    return models.cmd_list(args.topology, as_json=args.json, verify=args.verify)


def cmd_doctor(args) -> int:
    """What this machine is and has, and whether each topology fits it."""
    from voxweft.tools import doctor

    return doctor.cmd_doctor(args.measure, args.json, args.topology, args.host)

