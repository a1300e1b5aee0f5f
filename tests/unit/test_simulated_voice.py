"""The simulated Mac voice (issue 50 item 1): VoxCPM2 on MLX's plan and timeline, spoken by
espeak-ng, so pacing is measured here through the real tts actor and player."""

from __future__ import annotations

import time

import pytest

from voxweft.actors import budget
from voxweft.actors.engines import build
from voxweft.actors.engines.tts import growing_chunks
from voxweft.deploy.topology import load
from voxweft.tools import cli
from voxweft.tools.cli_files import simulated_mac

TEXT = ("Sim, e vale a pena mencionar de passagem que, como exemplo de tipografia fina, o "
        "verdadeiro livro impresso nunca foi superado.")


def test_each_piece_takes_at_least_what_the_profile_says_and_teaches_the_pace():
    voice = build("tts", "simulated", {"prefill_s": 0.1, "rate": 0.2, "late_share": 0.0,
                                       "first_call_s": 0.4})
    voice.load()
    started = time.monotonic()
    first = list(voice.speak("Olá.", "pt"))
    assert len(first) == 1 and time.monotonic() - started >= 0.4 + 0.1   # the first call
    assert voice.plan(TEXT) == growing_chunks(TEXT, 24, 2.0, 200, pace=voice.pace)
    pieces = voice.plan(TEXT)
    spoken = list(voice.speak(TEXT, "pt"))
    assert [s.piece for s in spoken] == list(range(len(pieces))) and len(pieces) >= 2
    learnt = list(voice.pace.pieces)[1:]   # each piece: at least P + r x its speech
    assert all(wall >= 0.1 + 0.2 * speech for wall, speech, _ in learnt), learnt
    assert all(s.pcm.size and s.pcm.dtype.name == "float32" for s in spoken)


def test_the_warm_up_keeps_its_first_call_out_of_the_pace_it_learns():
    voice = build("tts", "simulated", {"prefill_s": 0.2, "rate": 0.3, "late_share": 0.0,
                                       "first_call_s": 0.8})
    voice.load()
    measured = budget.warm_tts(voice, "pt")
    assert measured["first_call_s"] > 0.5 and measured["gen_rate"] < 0.6, measured


def test_bench_simulate_mac_puts_the_voice_in_place_of_tts():
    args = cli.build_parser().parse_args(["bench", "--simulate-mac", "0.9,0.6"])
    assert args.simulate_mac == (0.9, 0.6)
    assert cli.build_parser().parse_args(["bench", "--simulate-mac"]).simulate_mac == (0.6, 0.45)
    assert cli.build_parser().parse_args(["bench"]).simulate_mac is None
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["bench", "--simulate-mac", "fast"])
    base = load(None)
    topology = simulated_mac(base, 0.9, 0.6)
    tts = topology.actors["tts"]
    assert tts.engine == "simulated" and tts.settings == {"prefill_s": 0.9, "rate": 0.6}
    assert [a.engine for n, a in topology.actors.items() if n != "tts" and
            hasattr(a, "engine")] == [a.engine for n, a in base.actors.items()
                                      if n != "tts" and hasattr(a, "engine")]
