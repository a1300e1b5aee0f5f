"""The CPU budget: measured cost per second of speech, and the keeps-up verdict per host."""

from __future__ import annotations

import copy
import time

import pytest

from voxweft.actors import budget
from voxweft.deploy.topology import load, parse


def test_measure_counts_cpu_and_wall_per_second_of_speech():
    def work():
        t = time.process_time()
        yield 1
        while time.process_time() - t < 0.2:   # 0.2 s of CPU
            pass
        yield 2
        time.sleep(0.2)                        # and 0.2 s waiting

    m = budget.measure(work, 2.0)
    assert m["cpu"] == pytest.approx(0.1, abs=0.03)    # 0.2 CPU s / 2 s of speech
    # 0.4 wall s / 2 s on an idle machine; a busy one stretches the CPU part's wall time
    assert 0.19 <= m["rtf"] < 0.2 + 0.5
    assert m["first_s"] < 0.05 and m["cores"] >= 1
    made = []
    m = budget.measure(lambda: (made.append(n) for n in (3, 4)), lambda: sum(made))
    assert made == [3, 4] and m["rtf"] < 0.01          # speech told afterwards: 7 s


def _topo(**hosts):
    raw = copy.deepcopy(load(None).raw)
    for actor, host in hosts.items():
        raw["hosts"].setdefault(host, {"address": "127.0.0.2", "bind": "127.0.0.2"})
        raw["actors"][actor]["host"] = host
    return parse(raw)


def test_verdict_adds_up_what_continuous_speech_needs_per_host():
    topo = _topo()
    cheap = {"asr": {"cpu": 0.2, "cores": 2.0}, "mt": {"cpu": 0.05, "cores": 2.0},
             "tts": {"cpu": 0.5, "cores": 2.0}}
    ok, lines = budget.verdict(topo, cheap)
    # 0.2 + 0.05 + 0.5 x 1.3 (Portuguese is longer) + 3 x 0.1 = 1.2 <= 0.9 x 2 cores
    assert ok and lines == ["budget on local: continuous speech needs asr 0.20 + mt 0.05 + "
                            "tts 0.65 + others 0.3 = 1.20 of 2 cores: keeps up"]
    tight = {**cheap, "tts": {"cpu": 1.0, "cores": 2.0}}   # 1.85; at 1.4x speed 1.48
    ok, lines = budget.verdict(topo, tight)
    assert ok and lines[0].endswith("keeps up only by speaking faster (1.4x) when speech queues")
    slow = {**cheap, "tts": {"cpu": 2.0, "cores": 2.0}}    # 3.15; at 1.4x 2.41 > 1.8
    ok, lines = budget.verdict(topo, slow)
    assert not ok and "does NOT keep up" in lines[0] and "skip ~25 %" in lines[0]
    assert "tts (kokoro) is the heaviest: a lighter engine" in lines[0]
    assert lines[0].endswith("or a host of its own")
    assert budget.verdict(topo, {"asr": cheap["asr"]}) == (True, [])   # not all measured


def test_tts_is_counted_per_second_of_the_speech_it_translates():
    """A voice that measured its own expansion is counted by it, not by the language's."""
    topo = _topo()
    measured = {"asr": {"cpu": 0.2, "cores": 2.0}, "mt": {"cpu": 0.05, "cores": 2.0},
                "tts": {"cpu": 1.0, "expansion": 1.05, "source_cpu": 1.05, "cores": 2.0}}
    ok, lines = budget.verdict(topo, measured)
    assert "tts 1.05 + others 0.3 = 1.60 of 2 cores: keeps up" in lines[0]
    assert budget.source_cpu({"cpu": 1.0}, "pt") == pytest.approx(1.3)
    assert budget.source_cpu({"cpu": 1.0}, "de") == pytest.approx(budget.DEFAULT_EXPANSION)


def test_verdict_judges_each_host_on_its_own_cores():
    topo = _topo(tts="studio", player="studio")
    ok, lines = budget.verdict(topo, {"asr": {"cpu": 0.2, "cores": 2.0},
                                      "mt": {"cpu": 0.05, "cores": 2.0},
                                      "tts": {"cpu": 2.0, "cores": 8.0}})
    assert ok and len(lines) == 2
    assert lines[0].startswith("budget on local: continuous speech needs asr 0.20 + mt 0.05 "
                               "+ others 0.2 = 0.45 of 2 cores")
    assert lines[1].startswith("budget on studio: continuous speech needs tts 2.60 + others "
                               "0.1 = 2.70 of 8 cores: keeps up")


def test_a_machine_busy_with_other_work_has_fewer_cores():
    topo = _topo()
    cheap = {"asr": {"cpu": 0.2, "cores": 2.0}, "mt": {"cpu": 0.05, "cores": 2.0},
             "tts": {"cpu": 0.5, "cores": 2.0}}
    ok, lines = budget.verdict(topo, cheap, busy={"local": 1.0})   # 1.2 > 0.9 x (2 - 1)
    assert not ok and "= 1.20 of 2 cores (1.0 busy with other work): does NOT keep up" \
        in lines[0]


def test_other_work_is_measured_apart_from_the_pipeline():
    import subprocess
    import sys

    code = "import time\nt = time.monotonic() + 3\nwhile time.monotonic() < t: pass"
    spin = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.3)
        other = budget.others_busy_cores([], interval_s=1.0)
        ours = budget.others_busy_cores([spin.pid], interval_s=1.0)   # the spinner is ours
    finally:
        spin.kill()
        spin.wait()
    # one spinning process is up to a core of other work (less when the machine is busier),
    # and not counted when it is the pipeline's own
    assert other >= 0.3 and ours <= other - 0.2
