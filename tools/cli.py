"""The `voxweft` command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from voxweft.actors import budget
from voxweft.actors.clock import offsets as clock_offsets
from voxweft.actors.engines import memory_check
from voxweft.deploy import topology as topo_mod
from voxweft.deploy.events import DOWN, describe, supervision
from voxweft.deploy.session import (
    STOP_SIGNALS,
    Terminated,
    raise_terminated,
    unblock_stop_signals,
)
from voxweft.deploy.supervisor import (
    GROUP,
    BusWatcher,
    CaptionsProgram,
    Supervisor,
    SupervisorError,
    default_run_dir,
    wait_ready,
)
from voxweft.deploy.topology import TopologyError
from voxweft.tools.bench import DEFAULT_CORPUS


def _die(msg: str, code: int = 1) -> int:
    print(f"voxweft: {msg}", file=sys.stderr)
    return code


def _host(topology, requested: str | None) -> str:
    if requested:
        if requested not in topology.hosts:
            raise TopologyError(f"--host {requested!r} is not one of: "
                                f"{', '.join(topology.hosts)}")
        return requested
    used = sorted({config.host for config in topology.actors.values()})
    if len(used) == 1:
        return used[0]
    raise TopologyError(f"the topology places actors on several hosts; pass --host, one of: "
                        f"{', '.join(used)}")


def _supervisor(args) -> tuple[Supervisor, object]:
    """The running instance for these arguments and its frozen topology.

    Both are loaded for this host when it is known: other hosts' engines are not imported.
    """
    run_dir = Path(args.run_dir) if args.run_dir else None
    host = args.host
    if run_dir is None:
        host = _host(topo_mod.load(args.topology, host), host)
        run_dir = default_run_dir(host)
    sup = Supervisor(run_dir)
    if not sup.running():
        raise SupervisorError(f"voxweft is not running (no supervisord on {sup.socket}); "
                              "start it with `voxweft up`")
    return sup, topo_mod.load(run_dir / "topology.toml", host)


def cmd_up(args) -> int:
    """Start this host's actors under supervisord; return once all are ready."""
    topology = topo_mod.load(args.topology, args.host)   # only this host's engines imported
    host = _host(topology, args.host)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(host)
    try:   # beyond loopback the bus is CURVE: refuse to start without this host's keys
        curve = topology.curve(host)
    except ValueError as exc:
        return _die(f"up: {exc}")
    fits, line = memory_check(topology, host)   # before anything loads
    if not fits:
        return _die(f"up: {line}")
    print(f"voxweft: {line}")
    captions = _captions_program(args)
    sup = Supervisor(run_dir)
    sup.write(topology, host, captions)
    actors = topology.actors_on(host)
    t0 = time.monotonic()
    sup.start()
    print(f"voxweft: supervisord started for {', '.join(actors)} (run dir {run_dir})")
    shown: set[str] = set()

    def progress(ready: list[str]) -> None:
        for name in ready:
            if name not in shown:
                shown.add(name)
                print(f"  {name:<10} ready after {time.monotonic() - t0:5.1f} s", flush=True)

    try:
        statuses = wait_ready(sup, topology, actors, timeout_s=args.timeout, progress=progress,
                              curve=curve)
    except SupervisorError as exc:
        print(f"voxweft up: {exc}", file=sys.stderr)
        print(f"voxweft: actors are left running for inspection; stop with `voxweft down"
              f"{' --run-dir ' + str(run_dir) if args.run_dir else ''}`", file=sys.stderr)
        return 1
    print(f"voxweft: all {len(actors)} actors ready in {time.monotonic() - t0:.1f} s")
    for line in budget.judge(topology, statuses, host)[1]:
        print(f"voxweft: {line}")
    print(f"control: {sup.ctl_command()} status|restart {GROUP}:asr|tail -f {GROUP}:tts")
    if captions is not None:
        from voxweft.tools.captions import url

        print(f"captions: {url(captions.bind, captions.port, captions.token or None)}")
    if args.watch:
        return _watch_then_stop(topology, sup, run_dir, curve)
    return 0


#: How supervisord runs the captions page (`python -m` ...).
CAPTIONS_COMMAND = ("voxweft.tools.cli", "captions")


def _topology(args):
    """The topology of --topology, with --glossary's file as its [pipeline] glossary."""
    base = topo_mod.load(args.topology)
    if getattr(args, "glossary", None):
        base = base.with_overrides({"pipeline": {"glossary": str(Path(args.glossary).resolve())}})
    return base


def _captions_program(args):
    """`up --captions`: the page's program for supervisord, with a token beyond loopback."""
    if not args.captions:
        return None
    import secrets

    from voxweft.protocol.security import loopback

    token = "" if loopback(args.captions_bind) else secrets.token_urlsafe(16)
    return CaptionsProgram(CAPTIONS_COMMAND, args.captions_bind, args.captions_port, token)


def cmd_captions(args) -> int:
    """Serve the captions page for the room from the bus."""
    from voxweft.tools.captions import read_token
    from voxweft.tools.captions.server import serve

    topology, curve = _listener(args, "captions")
    try:
        token = read_token(args.token_file, os.environ)
    except ValueError as exc:
        return _die(f"captions: {exc}")
    return serve(topology, args.host, args.bind, args.port, token, curve)


def _watch_then_stop(topology, sup: Supervisor, run_dir: Path, curve=None) -> int:
    """`up --watch`: watch until Ctrl-C, SIGTERM or SIGHUP, then stop what `up` started."""
    import signal

    from voxweft.tools.watch import watch

    previous = {s: signal.signal(s, raise_terminated) for s in STOP_SIGNALS}
    code = 130   # watch returns on Ctrl-C
    try:
        watch(topology, run_dir / "transcript.live.jsonl", curve=curve)
    except Terminated as exc:
        code = 128 + exc.signum
    finally:
        for signum in (*previous, signal.SIGINT):   # a second signal must not cut it short
            signal.signal(signum, signal.SIG_IGN)
        print("voxweft: stopping the pipeline", file=sys.stderr, flush=True)
        try:
            sup.shutdown()
        except SupervisorError as exc:
            print(f"voxweft: {exc}", file=sys.stderr)
            code = 1
    return code


def cmd_down(args) -> int:
    """Stop every actor and supervisord."""
    sup, _ = _supervisor(args)
    sup.shutdown()
    print("voxweft: stopped")
    return 0


def cmd_status(args) -> int:
    """Supervisor state and bus state per actor."""
    sup, topology = _supervisor(args)
    procs = sup.processes()
    watcher = BusWatcher(topology, list(procs), topology.curve(_host(topology, args.host)))
    try:
        watcher.poll(1.2)   # heartbeats come at 2 Hz
    finally:
        watcher.close()
    print(f"{'actor':<10} {'process':<9} {'pid':>7} {'uptime':>8}  {'bus':<9} {'engine':<15} "
          "detail")
    for name, info in procs.items():
        host = topology.actors[name].host
        st = watcher.latest.get(name)
        uptime = f"{info['now'] - info['start']}s" if info["statename"] == "RUNNING" else "-"
        bus = st.state if st else "silent"
        detail = st.detail if st else ""
        if info["statename"] in DOWN:   # why, in words (as `watch` and `interpret` say it)
            detail = describe(supervision(sup, info, host))
        elif st and st.counters.get("dropped_ms"):   # the one place live audio is dropped
            detail = f"dropped {st.counters['dropped_ms'] / 1000:.1f} s of live audio " + detail
        elif st and st.counters.get("lag_skip"):   # the bounded lag's last resort
            detail = f"{st.counters['lag_skip']} translation(s) not spoken (too late) " + detail
        if st and st.busy_s > 1:
            detail = f"busy {st.busy_s:.1f} s " + detail
        if st and st.unreachable:   # a cut link, a host or an actor down: whom, how long
            detail = "cannot hear " + ", ".join(
                f"{p} ({topology.actors[p].host if p in topology.actors else '?'}) for "
                f"{s:.0f} s" for p, s in sorted(st.unreachable.items())) + "; " + detail
        print(f"{name:<10} {info['statename']:<9} {info['pid']:>7} {uptime:>8}  {bus:<9} "
              f"{(st.engine if st else ''):<15} {detail}")
    here = next((topology.actors[a].host for a in procs), "")
    for host, ms in sorted(clock_offsets(watcher.latest.values()).items()):
        print(f"clock of host {host}: {abs(ms) / 1000:.3f} s "
              f"{'ahead of' if ms > 0 else 'behind'} this host's (corrected in traces)")
    for line in budget.judge(topology, watcher.latest, here)[1]:
        print(line)
    return 0


def cmd_restart(args) -> int:
    """Restart one actor."""
    sup, _ = _supervisor(args)
    sup.restart(args.actor)
    print(f"voxweft: restarted {args.actor}")
    return 0


def cmd_logs(args) -> int:
    """Show (or follow) an actor's log."""
    sup, _ = _supervisor(args)
    path = sup.run_dir / "logs" / f"{args.actor}.log"
    if args.follow:
        os.execvp("tail", ["tail", "-n", str(args.lines), "-f", str(path)])
    print(sup.log_tail(args.actor, args.lines))
    return 0


def cmd_interpret(args) -> int:
    """Interpret one file through the supervised pipeline."""
    from voxweft.tools.interpret import interpret

    base = _topology(args)
    return interpret(base, Path(args.input), Path(args.out), args.src, args.tgt, args.fast,
                     timeout_s=args.timeout, live=args.live,
                     captions=_captions_program(args))


def cmd_bench(args) -> int:
    """Measure the pipeline on a corpus; write report.json/.md and plots; compare."""
    from voxweft.tools.bench import report as benchreport
    from voxweft.tools.bench import run as bench
    from voxweft.tools.bench.reportfiles import BenchError, load_report

    try:
        if args.report:   # compare two reports already written; run nothing
            if not args.compare:
                return _die("voxweft bench: --report needs --compare OLD.json", 2)
            new = load_report(Path(args.report))
        else:
            if args.compare:   # an unreadable old report fails now, not after the run
                load_report(Path(args.compare))
            base = _topology(args)
            out = Path(args.out or time.strftime("bench-%Y%m%d-%H%M%S"))
            command = "voxweft bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else ""
            pause_s, soak = args.pause_s, args.soak
            if args.continuous:   # a speaker who does not stop: short pauses, minutes long
                pause_s, soak = bench.CONTINUOUS_PAUSE_S, args.continuous
            corpus = Path(args.corpus or DEFAULT_CORPUS)
            options = {"pause_s": pause_s, "soak_minutes": soak, "bus_seconds": args.bus_seconds,
                       "bus_frames": args.bus_frames, "command": command}
            if args.terms:
                new = bench.bench_terms(base, out, args.src, args.tgt, args.fast, **options)
            elif args.room:
                new = bench.bench_room(base, corpus, out, args.src, args.tgt, args.fast,
                                       args.room_snr, args.room_talker_db, args.limit,
                                       **options)
            else:
                new = bench.bench(base, corpus, out, args.src, args.tgt, args.fast,
                                  limit=args.limit, **options)
            print(benchreport.markdown(new))
            print(f"voxweft bench: report in {out / 'report.json'} (and report.md, "
                  f"timeline.png{', soak.png' if args.soak else ''})")
        if args.compare:
            old = load_report(Path(args.compare))
            print(benchreport.compare(old, new))
    except BenchError as exc:
        return _die(f"voxweft bench: {exc}", exc.code)
    return 0


def _decibels(text: str) -> tuple[float, ...]:
    """A comma-separated list of decibels ("10,5"); argparse reports a bad one."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give decibels such as 10 or 10,5") \
            from None
    if not values or not all(-20 <= v <= 60 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each level between -20 and 60 dB")
    return values


def cmd_watch(args) -> int:
    """Live console view and rolling transcript of a running pipeline."""
    from voxweft.tools.watch import watch

    sup, topology = _supervisor(args)
    path = Path(args.transcript) if args.transcript else sup.run_dir / "transcript.live.jsonl"
    return watch(topology, path, args.duration,
                 curve=topology.curve(_host(topology, args.host)))


def cmd_demo(args) -> int:
    """Interpret the bundled sample, then play the translation if a speaker exists."""
    from voxweft.tools.interpret import interpret

    sample = budget.SAMPLE_WAV   # the speech the engines warm up on, too
    out = Path(args.out)
    code = interpret(topo_mod.load(args.topology), sample, out, "en", "pt", fast=args.fast)
    if code or args.no_play:
        return code
    from voxweft.actors.devices import open_sounddevice

    try:
        sd = open_sounddevice("demo")
        sd.query_devices(kind="output")
    except Exception as exc:  # noqa: BLE001 - StartupError, PortAudioError, ValueError
        print(f"voxweft demo: no output device ({exc}); listen to {out / 'output.wav'}")
        return 0
    import soundfile as sf

    audio, rate = sf.read(out / "output.wav", dtype="float32")
    print(f"voxweft demo: playing {out / 'output.wav'} ({len(audio) / rate:.1f} s)")
    sd.play(audio, rate)
    sd.wait()
    return 0


def cmd_tap(args) -> int:
    """Print (and optionally record) every message on the bus."""
    from voxweft.tools.tap import tap

    topology, curve = _listener(args, "tap")
    return tap(topology, args, curve)


def cmd_keys(args) -> int:
    """Make a CURVE key pair for a host or a client; print the public key for the topology."""
    from voxweft.actors.settings.topology import name_error
    from voxweft.protocol import security

    name = args.host or args.client
    if error := name_error(name):   # it names the key files: "../x" would write elsewhere
        return _die(f"keys: {'host' if args.host else 'client'} {error}")
    directory = Path(args.dir).expanduser() if args.dir else None
    try:
        public_file, secret_file, key = security.create_keys(name, directory)
    except (FileExistsError, OSError) as exc:
        return _die(f"keys: {exc}")
    table = f"[hosts.{name}]" if args.host else "[clients]"
    line = "public_key = " if args.host else f"{name} = "
    print(f"voxweft keys: secret key in {secret_file} (mode 600: keep it on this machine)")
    print(f"voxweft keys: public key in {public_file}; put it in every host's topology:")
    print(f"{table}\n{line}\"{key}\"")
    return 0


def cmd_replay(args) -> int:
    """Publish a recording again."""
    from voxweft.tools.tap import replay

    return replay(_tap_topology(args), Path(args.file), args.fast, args.topic)


def _listener(args, command: str):
    """The topology a bus listener (tap, captions) hears and the CURVE keys it listens with.

    The keys: None on a loopback bus; else this host's, or with `--key FILE` a client's
    listed key. Keys it cannot have raise TopologyError, "COMMAND: why", which `main` says.
    """
    topology = _tap_topology(args)
    try:
        return topology, topology.curve(None if args.key else _host(topology, args.host),
                                        Path(args.key).expanduser() if args.key else None)
    except ValueError as exc:
        raise TopologyError(f"{command}: {exc}") from None


def _tap_topology(args):
    """The topology to tap, loaded for --host when given (its engines alone are imported)."""
    run_dir = Path(args.run_dir) if args.run_dir else None
    if run_dir is None and not args.topology:
        topology = topo_mod.load(None, args.host)
        hosts = {config.host for config in topology.actors.values()}
        run_dir = default_run_dir(_host(topology, args.host)) if len(hosts) == 1 else None
    if run_dir is not None and (run_dir / "topology.toml").exists():
        return topo_mod.load(run_dir / "topology.toml", args.host)
    return topo_mod.load(args.topology, args.host)


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
        return _die(str(exc))
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

    return doctor.cmd_doctor(args.measure, args.json, args.topology)


def cmd_voicecheck(args) -> int:
    """Compare VoxCPM2's voice modes on a corpus: likeness to the speaker, language kept."""
    from voxweft.tools import voicecheck

    try:
        report = voicecheck.check(topo_mod.load(args.topology), Path(args.corpus),
                                  Path(args.out), limit=args.limit)
    except (voicecheck.VoiceCheckError, ValueError) as exc:
        return _die(f"voxweft voicecheck: {exc}")
    print(voicecheck.markdown(report))
    print(f"voxweft voicecheck: report in {Path(args.out) / 'voicecheck.json'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand, added group by group in `--help`'s order."""
    p = argparse.ArgumentParser(prog="voxweft", description="Local speech-to-speech "
                                "interpreter: six supervised actors on a ZeroMQ bus.")
    sub = p.add_subparsers(dest="command", required=True)
    for add_group in (_pipeline_commands, _file_commands, _bus_commands, _machine_commands):
        add_group(sub)
    return p


def _common(sp, run=True) -> None:
    """--topology and --host; with `run`, --run-dir too (a command of a running pipeline)."""
    sp.add_argument("--topology", help="topology TOML (default: deploy/default.toml)")
    sp.add_argument("--host", help="which host of the topology this machine is")
    if run:
        sp.add_argument("--run-dir", help="private run directory of supervisord")


def _captions_address(sp, bind: str, port: str) -> None:
    """The captions page's address and port options, under the names `bind` and `port`."""
    from voxweft.tools.captions import DEFAULT_PORT

    sp.add_argument(bind, default="127.0.0.1",
                    help="address the captions page listens on (default 127.0.0.1; a "
                         "LAN address for phones in the room: the URL then has a token)")
    sp.add_argument(port, type=int, default=DEFAULT_PORT,
                    help=f"its port (default {DEFAULT_PORT})")


def _glossary_option(sp) -> None:
    """--glossary: the file of names and terms (interpret, bench)."""
    sp.add_argument("--glossary", metavar="FILE",
                    help="names and terms, one per line ('Name' or 'term = translation'):"
                         " Whisper expects them, MT keeps or translates them so (the "
                         "topology's [pipeline] glossary)")


def _pipeline_commands(sub) -> None:
    """up, captions, down, status, restart, logs: this host's supervised pipeline."""
    sp = sub.add_parser("up", help="start this host's actors; return when all are ready")
    _common(sp)
    sp.add_argument("--timeout", type=float, default=300, help="seconds to wait for ready")
    sp.add_argument("--watch", action="store_true",
                    help="then show each utterance and its translation; Ctrl-C, SIGTERM or "
                         "SIGHUP stops the pipeline")
    sp.add_argument("--captions", action="store_true",
                    help="also serve the captions page (supervised beside the actors)")
    _captions_address(sp, "--captions-bind", "--captions-port")
    sp.set_defaults(fn=cmd_up)

    sp = sub.add_parser("captions", help="serve the live captions page for the room")
    _common(sp)
    _captions_address(sp, "--bind", "--port")
    # No --token: a command line shows in `ps` to every user of the machine.
    sp.add_argument("--token-file", metavar="PATH",
                    help="file that holds the access token for the page's URL (default: "
                         "$VOXWEFT_CAPTIONS_TOKEN, else beyond loopback a new random one)")
    sp.add_argument("--key", help="a client's secret key file (`voxweft keys --client`), "
                                  "to listen to a CURVE bus from a machine that is no host")
    sp.set_defaults(fn=cmd_captions)
    for name, fn, text in (("down", cmd_down, "stop everything"),
                           ("status", cmd_status, "supervisor and bus state per actor")):
        sp = sub.add_parser(name, help=text)
        _common(sp)
        sp.set_defaults(fn=fn)
    for name, fn, text in (("restart", cmd_restart, "restart one actor"),
                           ("logs", cmd_logs, "show an actor's log")):
        sp = sub.add_parser(name, help=text)
        _common(sp)
        sp.add_argument("actor")
        if name == "logs":
            sp.add_argument("-f", "--follow", action="store_true")
            sp.add_argument("-n", "--lines", type=int, default=40)
        sp.set_defaults(fn=fn)


def _file_commands(sub) -> None:
    """interpret, bench, voicecheck, demo: a file or a corpus through the pipeline."""
    sp = sub.add_parser("interpret", help="interpret an audio file into DIR")
    _common(sp, run=False)
    sp.add_argument("--input", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--src", default="en")
    sp.add_argument("--tgt", default="pt")
    sp.add_argument("--fast", action="store_true", help="do not pace the file in real time")
    sp.add_argument("--live", action="store_true",
                    help="as from a microphone: translations later than the topology's "
                         "max_lag_s are not spoken (default: every utterance is spoken)")
    sp.add_argument("--timeout", type=float, default=3600)
    _glossary_option(sp)
    sp.add_argument("--captions", action="store_true",
                    help="serve the captions page while it interprets")
    _captions_address(sp, "--captions-bind", "--captions-port")
    sp.set_defaults(fn=cmd_interpret)

    _bench_command(sub)

    sp = sub.add_parser("voicecheck", help="VoxCPM2: which voice mode keeps the speaker's "
                        "voice without leaking their language")
    _common(sp, run=False)
    sp.add_argument("--corpus", default=str(DEFAULT_CORPUS),
                    help="one speaker's NAME.wav + NAME.txt (+ NAME.<tgt>.txt translations); "
                    "default: the five LJ Speech clips the project carries")
    sp.add_argument("--out", default="voicecheck", help="report folder")
    sp.add_argument("--limit", type=int, default=5, help="only the first N clips")
    sp.set_defaults(fn=cmd_voicecheck)

    sp = sub.add_parser("demo", help="interpret the bundled English sample into Portuguese")
    _common(sp, run=False)
    sp.add_argument("--out", default="demo-out")
    sp.add_argument("--fast", action="store_true")
    sp.add_argument("--no-play", action="store_true", help="do not play the result")
    sp.set_defaults(fn=cmd_demo)


def _bench_command(sub) -> None:
    """bench: its run, its variants (--soak, --continuous, --room, --terms) and --compare."""
    sp = sub.add_parser("bench", help="measure latency, quality, bus and resources on a corpus")
    _common(sp, run=False)
    sp.add_argument("--corpus", help="folder of NAME.wav (+ NAME.txt, NAME.<tgt>.txt); default: "
                    "the five LJ Speech clips the project carries (tools/bench/corpus)")
    sp.add_argument("--out", help="report folder (default: bench-DATE-TIME)")
    sp.add_argument("--src", default="en")
    sp.add_argument("--tgt", default="pt")
    sp.add_argument("--fast", action="store_true",
                    help="do not pace in real time (latency figures then include queueing)")
    sp.add_argument("--pause-s", type=float, default=1.0, help="silence after each file")
    sp.add_argument("--soak", type=float, metavar="MINUTES",
                    help="loop the corpus as continuous speech for this long; report trends")
    sp.add_argument("--continuous", type=float, metavar="MINUTES",
                    help="continuous speech: the corpus looped for this long with "
                         "0.3 s pauses, in real time (lag slope, degradation steps)")
    sp.add_argument("--limit", type=int, help="only the first N files")
    _glossary_option(sp)
    sp.add_argument("--room", action="store_true",
                    help="the corpus as a room makes it: noise, a second talker, no speech; "
                         "WER, intrusions, made-up lines and latency per condition")
    sp.add_argument("--terms", action="store_true",
                    help="the words that matter: sentences with names and terms (read by "
                         "piper), without and with the glossary the project carries; the "
                         "shares of terms heard and spoken right")
    sp.add_argument("--room-snr", type=_decibels, default=(10.0,), metavar="DB[,DB...]",
                    help="--room: noise SNRs in dB (default 10)")
    sp.add_argument("--room-talker-db", type=_decibels, default=(10.0,), metavar="DB[,DB...]",
                    help="--room: the second talker's level below the speaker, dB (default 10)")
    sp.add_argument("--bus-seconds", type=float, default=10.0,
                    help="real-time bus measurement length (0 skips the bus measurement)")
    sp.add_argument("--bus-frames", type=int, default=20000, help="frames in the bus flood")
    sp.add_argument("--compare", metavar="OLD.json", help="print differences from this report")
    sp.add_argument("--report", metavar="NEW.json",
                    help="with --compare: compare this report instead of running")
    sp.set_defaults(fn=cmd_bench)


def _bus_commands(sub) -> None:
    """watch, tap, keys, replay: the bus, heard, secured and played again."""
    sp = sub.add_parser("watch", help="live view: source | translation, rolling transcript")
    _common(sp)
    sp.add_argument("--transcript", help="rolling JSONL file (default: in the run directory)")
    sp.add_argument("--duration", type=float, help="stop after S seconds")
    sp.set_defaults(fn=cmd_watch)

    sp = sub.add_parser("tap", help="print every message on the bus (subscribe only)")
    _common(sp)
    sp.add_argument("--topic", default="", help="topic prefix, e.g. transcript or status.asr")
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
    sp.add_argument("--record", help="keep every raw message with its receive time")
    sp.add_argument("--count", type=int, help="stop after N messages")
    sp.add_argument("--duration", type=float, help="stop after S seconds")
    sp.add_argument("--key", help="a client's secret key file (`voxweft keys --client`), "
                                  "listed in the topology's [clients]: to tap a CURVE bus")
    sp.set_defaults(fn=cmd_tap)

    sp = sub.add_parser("keys", help="make the CURVE key pair of a host (or of a client such "
                                     "as a tap) for a bus that leaves loopback")
    who = sp.add_mutually_exclusive_group(required=True)
    who.add_argument("--host", help="this machine's host name in the topology")
    who.add_argument("--client", help="a client's name (a tap, a captions page)")
    sp.add_argument("--dir", help="where to keep them (default: $VOXWEFT_KEYS or "
                                  "~/.config/voxweft/keys)")
    sp.set_defaults(fn=cmd_keys)

    sp = sub.add_parser("replay", help="publish a --record file again")
    _common(sp)
    sp.add_argument("file")
    sp.add_argument("--fast", action="store_true", help="no pauses between messages")
    sp.add_argument("--topic", default="", help="only messages with this topic prefix")
    sp.set_defaults(fn=cmd_replay)


def _machine_commands(sub) -> None:
    """languages, devices, models, doctor: what this installation and machine have."""
    sp = sub.add_parser("languages", help="language pairs this installation can interpret")
    sp.add_argument("--topology", help="also count this topology's engines")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(fn=cmd_languages)

    sp = sub.add_parser("devices", help="list audio input and output devices")
    sp.set_defaults(fn=cmd_devices)

    sp = sub.add_parser("models", help="models installed, where, which topology needs which; "
                                       "fetch or convert one")
    sp.add_argument("--topology", action="append",
                    help="also this topology (every deploy/*.toml is always read)")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.add_argument("--verify", action="store_true",
                    help="check each catalogue file's sha256 too (reads every byte)")
    msub = sp.add_subparsers(dest="models_command", metavar="{fetch,convert-whisper}")
    mp = msub.add_parser("fetch", help="download a catalogue model at its pinned revision; "
                                       "every file's sha256 is checked")
    mp.add_argument("name", help="a catalogue name, as `voxweft models` lists it")
    mp = msub.add_parser("convert-whisper", help="turn a CTranslate2 Whisper into an MLX one")
    mp.add_argument("ct2_dir", metavar="CT2_DIR",
                    help="a CTranslate2 Whisper folder, or base / tiny.en (the packaged ones)")
    mp.add_argument("out_dir", metavar="OUT_DIR")
    mp.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    mp.add_argument("--bits", type=int, choices=(4, 8),
                    help="quantize the weights to 4 or 8 bits (needs mlx)")
    sp.set_defaults(fn=cmd_models)

    sp = sub.add_parser("doctor", help="this machine, its engines and models, and whether "
                                       "each topology fits it: run it first on a new machine")
    sp.add_argument("--measure", action="store_true",
                    help="also time each engine here (loads each model once; minutes)")
    sp.add_argument("--topology", action="append",
                    help="also this topology (every deploy/*.toml is always read)")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(fn=cmd_doctor)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `voxweft` console script."""
    unblock_stop_signals()
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (TopologyError, SupervisorError) as exc:
        return _die(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
