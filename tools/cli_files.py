"""`voxweft interpret | bench | voicecheck | demo`: a file or a corpus through the pipeline."""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

from voxweft.actors import budget
from voxweft.deploy import topology as topo_mod
from voxweft.tools.bench import DEFAULT_CORPUS
from voxweft.tools.cli_common import captions_program, die


def _topology(args):
    """The topology of --topology, with --glossary's file as its [pipeline] glossary."""
    base = topo_mod.load(args.topology)
    if getattr(args, "glossary", None):
        base = base.with_overrides({"pipeline": {"glossary": str(Path(args.glossary).resolve())}})
    return base


def simulated_mac(base, prefill_s: float, rate: float):
    """`base` with tts the simulated Mac voice (its own settings, not the engine's before)."""
    raw = copy.deepcopy(base.raw)
    raw["actors"]["tts"].update(engine="simulated",
                                settings={"prefill_s": prefill_s, "rate": rate})
    return topo_mod.parse(raw, base.source)


def cmd_interpret(args) -> int:
    """Interpret one file through the supervised pipeline."""
    from voxweft.tools.interpret import interpret

    base = _topology(args)
    return interpret(base, Path(args.input), Path(args.out), args.src, args.tgt, args.fast,
                     timeout_s=args.timeout, live=args.live,
                     captions=captions_program(args))


def cmd_bench(args) -> int:
    """Measure the pipeline on a corpus; write report.json/.md and plots; compare."""
    from voxweft.tools.bench import report as benchreport
    from voxweft.tools.bench import run as bench
    from voxweft.tools.bench.reportcompare import compare
    from voxweft.tools.bench.reportfiles import BenchError, load_report

    try:
        if args.report:   # compare two reports already written; run nothing
            if not args.compare:
                return die("voxweft bench: --report needs --compare OLD.json", 2)
            new = load_report(Path(args.report))
        else:
            if args.compare:   # an unreadable old report fails now, not after the run
                load_report(Path(args.compare))
            base = _topology(args)
            if args.simulate_mac:   # actors/engines/tts/simulated.py
                base = simulated_mac(base, *args.simulate_mac)
            out = Path(args.out or time.strftime("bench-%Y%m%d-%H%M%S"))
            command = "voxweft bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else ""
            pause_s, soak = args.pause_s, args.soak
            if args.continuous:   # a speaker who does not stop: short pauses, minutes long
                pause_s, soak = bench.CONTINUOUS_PAUSE_S, args.continuous
            corpus = Path(args.corpus or DEFAULT_CORPUS)
            options = {"pause_s": pause_s, "soak_minutes": soak, "bus_seconds": args.bus_seconds,
                       "bus_frames": args.bus_frames, "command": command}
            if args.echo and args.live:   # real devices, real time: its own report
                from voxweft.tools.bench import echolive

                try:
                    print(echolive.markdown(echolive.bench_echo_live(base, out)))
                except echolive.LiveBenchError as exc:
                    return die(f"bench --echo --live: {exc}")
                print(f"voxweft bench: report in {out / 'echo-live.json'} (and echo-live.md)")
                return 0
            if args.echo:   # offline: no pipeline, its own report
                from voxweft.tools.bench.echo import bench_echo, markdown

                print(markdown(bench_echo(base, out)))
                print(f"voxweft bench: report in {out / 'echo.json'} (and echo.md)")
                return 0
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
            print(compare(old, new))
    except BenchError as exc:
        return die(f"voxweft bench: {exc}", exc.code)
    return 0


def cmd_voicecheck(args) -> int:
    """Compare VoxCPM2's voice modes on a corpus: likeness to the speaker, language kept."""
    from voxweft.tools import voicecheck

    try:
        report = voicecheck.check(topo_mod.load(args.topology), Path(args.corpus),
                                  Path(args.out), limit=args.limit)
    except (voicecheck.VoiceCheckError, ValueError) as exc:
        return die(f"voxweft voicecheck: {exc}")
    print(voicecheck.markdown(report))
    print(f"voxweft voicecheck: report in {Path(args.out) / 'voicecheck.json'}")
    return 0


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

