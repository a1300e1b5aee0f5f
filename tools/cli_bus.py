"""`voxweft watch | tap | keys | replay`: the bus, heard, secured and played again."""

from __future__ import annotations

from pathlib import Path

from voxweft.tools.cli_common import die, listener, running_supervisor, tap_topology, which_host


def cmd_watch(args) -> int:
    """Live console view and rolling transcript of a running pipeline."""
    from voxweft.tools.watch import watch

    sup, topology = running_supervisor(args)
    path = Path(args.transcript) if args.transcript else sup.run_dir / "transcript.live.jsonl"
    return watch(topology, path, args.duration,
                 curve=topology.curve(which_host(topology, args.host)))


def cmd_tap(args) -> int:
    """Print (and optionally record) every message on the bus."""
    from voxweft.tools.tap import tap

    topology, curve = listener(args, "tap")
    return tap(topology, args, curve)


def cmd_keys(args) -> int:
    """Make a CURVE key pair for a host or a client; print the public key for the topology."""
    from voxweft.actors.settings.topology import name_error
    from voxweft.protocol import security

    name = args.host or args.client
    if error := name_error(name):   # it names the key files: "../x" would write elsewhere
        return die(f"keys: {'host' if args.host else 'client'} {error}")
    directory = Path(args.dir).expanduser() if args.dir else None
    try:
        public_file, secret_file, key = security.create_keys(name, directory)
    except (FileExistsError, OSError) as exc:
        return die(f"keys: {exc}")
    table = f"[hosts.{name}]" if args.host else "[clients]"
    line = "public_key = " if args.host else f"{name} = "
    print(f"voxweft keys: secret key in {secret_file} (mode 600: keep it on this machine)")
    print(f"voxweft keys: public key in {public_file}; put it in every host's topology:")
    print(f"{table}\n{line}\"{key}\"")
    return 0


def cmd_replay(args) -> int:
    """Publish a recording again."""
    from voxweft.tools.tap import replay

    return replay(tap_topology(args), Path(args.file), args.fast, args.topic)
