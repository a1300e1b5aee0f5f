"""The `voxweft` command: its argument parser and `main`.

The commands themselves live by the parser's groups: `cli_pipeline` (this host's supervised
pipeline), `cli_files` (a file or a corpus through it), `cli_bus` (the bus) and `cli_machine`
(this installation and machine); what they share is in `cli_common`. Each imports what is
heavy inside the command, so `voxweft --help` stays quick.
"""

from __future__ import annotations

import argparse
import sys

from voxweft.deploy.session import unblock_stop_signals
from voxweft.deploy.supervisor import SupervisorError
from voxweft.deploy.topology import TopologyError
from voxweft.tools.bench import DEFAULT_CORPUS
from voxweft.tools.cli_bus import cmd_keys, cmd_replay, cmd_tap, cmd_watch
from voxweft.tools.cli_common import die
from voxweft.tools.cli_files import cmd_bench, cmd_demo, cmd_interpret, cmd_voicecheck
from voxweft.tools.cli_machine import cmd_devices, cmd_doctor, cmd_languages, cmd_models
from voxweft.tools.cli_pipeline import (
    cmd_captions,
    cmd_down,
    cmd_logs,
    cmd_restart,
    cmd_status,
    cmd_up,
)


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
    sp.add_argument("--echo", action="store_true",
                    help="the loudspeaker in the room, offline: continuous speech with the "
                         "interpreter's voice coming back at several delays, reverberations "
                         "and levels; WER, lines heard back, ERLE, convergence per echo engine")
    sp.add_argument("--live", action="store_true",
                    help="with --echo: the whole pipeline in real time through a private "
                         "PulseAudio daemon, the loudspeaker coming back through a room "
                         "(delay, reverberation, level) beside headphones; Linux")
    sp.add_argument("--simulate-mac", metavar="P,R", type=_mac_profile, nargs="?",
                    const=(0.6, 0.45),
                    help="tts takes the time a Mac's VoxCPM2 would: a prefill of P s per "
                         "piece, R s per s of audio (default 0.6,0.45), some pieces late as "
                         "while Whisper decodes, the first call slower; espeak-ng speaks. "
                         "Measures pacing (holes inside utterances) before a Mac run")
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


def _mac_profile(text: str) -> tuple[float, float]:
    """--simulate-mac's P,R: two numbers of seconds."""
    try:
        prefill, rate = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give P,R, e.g. 0.6,0.45") from None
    if not (0 <= prefill <= 5 and 0 <= rate <= 5):
        raise argparse.ArgumentTypeError(f"{text!r}: P and R are seconds between 0 and 5")
    return prefill, rate


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
    sp.add_argument("--host", help="which host of a several-host topology this machine is "
                                   "(default: the one whose address is this machine's); "
                                   "only it is judged")
    sp.set_defaults(fn=cmd_doctor)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `voxweft` console script."""
    unblock_stop_signals()
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (TopologyError, SupervisorError) as exc:
        return die(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
