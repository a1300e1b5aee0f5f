"""A topology is untrusted input: what it names must never become supervisord's own config.

A `[hosts."..."]` name once went unquoted into supervisord.conf: a line break and a
`[program:x]` section in it made supervisord run any command, and `../` moved the run
directory. Each hostile topology here is either refused at load with one line, or written
into a supervisord.conf that supervisord's own parser reads back as exactly the actors' (and
the event listener's) programs, with their commands, and every path in the run directory.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import tempfile
import tomllib
from pathlib import Path
from unittest import mock

import pytest
import tomli_w
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from supervisor.options import ServerOptions
from zmq.utils import z85

from voxweft.actors.settings.actors import ACTOR_NAMES
from voxweft.deploy.supervisor import Supervisor, SupervisorError, default_run_dir
from voxweft.deploy.topology import DEFAULT_TOPOLOGY, Topology, TopologyError, load

SRC = "t.toml"
#: The issue's attack: a host name that closes its line and opens a program of its own (the
#: config as once rendered gave supervisord a `[program:x]` running that command).
INJECTION = ("local\nevents=PROCESS_STATE\n[program:x]\n"
             "command=/bin/sh -c 'touch /tmp/voxweft-owned'\n[program:rest]\ncommand=true")
#: What a hostile name is made of: line breaks, section and comment marks, interpolation,
#: quotes, path steps, NUL, other scripts and spaces, long runs; then any character at all.
PIECES = ["\n", "\r", "\r\n", "[", "]", "[program:x]", "command=/bin/sh", "%", "%(here)s",
          "%(ENV_HOME)s", "=", ";", " ;", "#", " #", "../", "/", "..", "\x00", "\t", " ", "'",
          '"', ",", "-", "_", "\u2028", "\x85", "é", "名", "\u3000", "local", "x" * 300]
CHARACTERS = st.characters(exclude_categories=["Cs"])   # a TOML file is UTF-8: no surrogates
HOSTILE = st.lists(st.sampled_from(PIECES) | CHARACTERS, max_size=12).map("".join)
#: And from the environment: a byte that is no UTF-8 reads as a lone surrogate there.
UNCHECKED = st.lists(st.sampled_from([*PIECES, "\udcff"]) | CHARACTERS, max_size=12).map("".join)
PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _raw_on(host: str) -> dict:
    """default.toml with its one host renamed `host` and every actor placed there."""
    raw = tomllib.loads(DEFAULT_TOPOLOGY.read_text(encoding="utf-8"))
    raw["hosts"] = {host: raw["hosts"]["local"]}
    for table in raw["actors"].values():
        table["host"] = host
    return raw


def _load(raw: dict) -> Topology:
    """`raw` written as a TOML file (the hostile name quoted by TOML) and loaded from there."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / SRC
        path.write_text(tomli_w.dumps(raw), encoding="utf-8")
        return load(path)


def _moved_to(host: str) -> Topology:
    """The default topology with its host renamed `host` unchecked: as if the loader missed it."""
    topology = load()
    topology.hosts = {host: dataclasses.replace(topology.hosts["local"], name=host)}
    for config in topology.actors.values():
        config.host = host
    return topology


def _one_line(exc: Exception) -> str:
    """The message of `exc`, which must be one line."""
    message = str(exc)
    assert message and "\n" not in message and "\r" not in message, message
    return message


def _programs(run_dir: Path) -> dict:
    """supervisord's own reading of the run directory's config: program name -> its config."""
    options = ServerOptions()
    options.configfile, options.here = str(run_dir / "supervisord.conf"), str(run_dir)
    section = options.read_config(options.configfile)
    return {p.name: p for group in section.process_group_configs for p in group.process_configs}


def _runs_the_actors_and_nothing_else(topology: Topology, host: str, run_dir: Path) -> dict:
    """Write the config for `host`; assert what supervisord reads back; its programs.

    A name the config cannot hold may be refused instead, with one line.
    """
    try:
        Supervisor(run_dir).write(topology, host)
    except SupervisorError as exc:
        _one_line(exc)
        return {}
    programs = _programs(run_dir)
    actors = topology.actors_on(host)
    assert sorted(programs) == sorted([*actors, "events"])
    frozen = str(run_dir / "topology.toml")
    for actor in actors:
        assert shlex.split(programs[actor].command) == [
            sys.executable, "-m", "voxweft.actors", "--topology", frozen, "--host", host,
            "--actor", actor]
        assert Path(programs[actor].stdout_logfile) == run_dir / "logs" / f"{actor}.log"
    assert shlex.split(programs["events"].command) == [
        sys.executable, "-m", "voxweft.deploy.events", "--topology", frozen, "--host", host]
    return programs


# --------------------------------------------------------------------------- the issue


def test_the_issues_host_name_is_refused_at_load():
    with pytest.raises(TopologyError) as info:
        _load(_raw_on(INJECTION))
    assert f"{SRC}: hosts: " in _one_line(info.value)


def test_the_issues_host_name_cannot_reach_supervisord_even_unchecked(tmp_path):
    with pytest.raises(SupervisorError) as info:
        Supervisor(tmp_path).write(_moved_to(INJECTION), INJECTION)
    assert "supervisord" in _one_line(info.value)
    assert not (tmp_path / "supervisord.conf").exists()


@pytest.mark.parametrize("host", ["../../elsewhere", "..", "a/b", "/etc"])
def test_a_host_name_with_a_path_step_is_refused(host):
    with pytest.raises(TopologyError, match="hosts"):
        _load(_raw_on(host))
    with pytest.raises(SupervisorError, match="run directory"):
        default_run_dir(host)


@pytest.mark.parametrize("host", ["local", "m2", "ultra", "_interpret", "mac-mini_2"])
def test_plain_host_names_still_run_their_actors(host, tmp_path):
    topology = _load(_raw_on(host))
    assert sorted(_runs_the_actors_and_nothing_else(topology, host, tmp_path)) == sorted(
        [*ACTOR_NAMES, "events"])
    assert default_run_dir(host).name.endswith(f"-{host}")


@pytest.mark.parametrize("name", ["default", "two-hosts", "mac"])
def test_the_shipped_topologies_run_their_actors_on_each_host(name, tmp_path):
    topology = load(DEFAULT_TOPOLOGY.with_name(f"{name}.toml"))
    for host in topology.hosts_in_use():
        programs = _runs_the_actors_and_nothing_else(topology, host, tmp_path / host)
        assert sorted(programs) == sorted([*topology.actors_on(host), "events"])


@pytest.mark.parametrize("host", ["50%(ENV_HOME)s%%", "名 前", "it's;#x", "a=b,c [x]"])
def test_what_a_config_line_can_hold_is_quoted_and_escaped_not_refused(host, tmp_path):
    # Unchecked names: `%` is doubled (supervisord expands `%(name)s`), the rest shell-quoted.
    assert _runs_the_actors_and_nothing_else(_moved_to(host), host, tmp_path)


# --------------------------------------------------------------------------- any hostile input


def _base() -> Path:
    """Where run directories belong."""
    return Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())


@PROPERTY
@given(host=HOSTILE)
def test_a_hostile_host_name_is_refused_or_runs_only_the_actors(host):
    try:
        topology = _load(_raw_on(host))
    except TopologyError as exc:
        _one_line(exc)
        event("refused at load")
        return
    event("loaded")
    assert default_run_dir(host).parent == _base()
    with tempfile.TemporaryDirectory() as run_dir:
        assert _runs_the_actors_and_nothing_else(topology, host, Path(run_dir))


@PROPERTY
@given(host=UNCHECKED)
def test_an_unchecked_host_name_is_refused_or_runs_only_the_actors(host):
    # The second wall: render quotes and escapes whatever it is given, or refuses it.
    with tempfile.TemporaryDirectory() as run_dir:
        written = _runs_the_actors_and_nothing_else(_moved_to(host), host, Path(run_dir))
    event("written" if written else "refused by render")


@PROPERTY
@given(host=UNCHECKED)
def test_a_run_directory_stays_where_it_belongs(host):
    try:
        run_dir = default_run_dir(host)
    except SupervisorError as exc:
        _one_line(exc)
        return
    assert run_dir.parent == _base() and run_dir.name not in ("", ".", "..")


A_PUBLIC_KEY = z85.encode(bytes(32)).decode()
KEYS = {   # where a hostile text goes: (tables down to it, then its key; None: a table's name)
    "capture path": (("actors", "capture"), "path"),
    "player path": (("actors", "player"), "path"),
    "secret key file": (("hosts", "local"), "secret_key"),
    "address": (("hosts", "local"), "address"),
    "device": (("actors", "capture"), "device"),
    "engine setting": (("actors", "tts", "settings"), "voice"),
    "client name": (("clients",), None),
    "actor name": (("actors",), None),
}


@PROPERTY
@given(where=st.sampled_from(sorted(KEYS)), text=HOSTILE)
def test_hostile_text_anywhere_in_a_topology_is_refused_or_kept_out_of_supervisord(where, text):
    raw = _raw_on("local")
    tables, key = KEYS[where]
    table = raw
    for name in tables:
        table = table.setdefault(name, {})
    if key is None:
        table[text] = {} if tables == ("actors",) else A_PUBLIC_KEY
    else:
        table[key] = text
    try:
        topology = _load(raw)
    except TopologyError as exc:
        _one_line(exc)
        event(f"{where}: refused at load")
        return
    event(f"{where}: loaded")
    with tempfile.TemporaryDirectory() as run_dir:
        assert _runs_the_actors_and_nothing_else(topology, "local", Path(run_dir))


@PROPERTY
@given(value=UNCHECKED)
def test_a_hostile_environment_value_is_refused_or_passed_exactly(value):
    # HOME (and the other variables passed through) come from whoever runs `voxweft up`.
    assume("\x00" not in value)   # no environment holds a NUL
    topology = load()
    with mock.patch.dict(os.environ, {"HOME": value}), \
            tempfile.TemporaryDirectory() as run_dir:
        programs = _runs_the_actors_and_nothing_else(topology, "local", Path(run_dir))
    event("passed" if programs else "refused by render")
    for actor in ACTOR_NAMES if programs else ():
        assert programs[actor].environment["HOME"] == value


def test_a_run_directory_someone_else_made_is_refused_not_used(tmp_path):
    """In /tmp anyone may make `voxweft-UID-HOST` first: a link or another user's folder."""
    topology = load(None)
    target = tmp_path / "theirs"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(SupervisorError, match="is a link") as info:
        Supervisor(link).write(topology, "local")
    _one_line(info.value)
    assert list(target.iterdir()) == []           # nothing written through the link
    other = tmp_path / "other"
    other.mkdir(mode=0o777)
    if os.getuid() == 0:   # CI is root: hand it to nobody, as another user would have made it
        os.chown(other, 65534, 65534)
        with pytest.raises(SupervisorError, match="owned by uid 65534"):
            Supervisor(other).write(topology, "local")
        assert list(other.iterdir()) == []
    mine = tmp_path / "mine"
    Supervisor(mine).write(topology, "local")
    assert (mine / "supervisord.conf").exists() and (mine.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("command", ["status", "down", "logs", "restart", "tap", "watch",
                                     "captions", "replay"])
def test_every_command_refuses_a_run_directory_someone_else_made(tmp_path, command):
    # Only `up` checked: the others talked to the supervisord socket or read the topology
    # (the endpoints to connect to) of a folder anyone could have made first (issue 48).
    import argparse

    from voxweft.tools.cli_common import running_supervisor, tap_topology

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "topology.toml").write_text(load(None).dumps())
    link = tmp_path / "link"
    link.symlink_to(theirs)
    folders = [link]
    if os.getuid() == 0:   # CI is root: hand it to nobody, as another user would have made it
        os.chown(theirs, 65534, 65534)
        folders.append(theirs)
    args = argparse.Namespace(run_dir=None, host=None, topology=None, key=None)
    read = tap_topology if command in ("tap", "captions", "replay") else \
        running_supervisor
    for folder in folders:
        args.run_dir = str(folder)
        with pytest.raises(SupervisorError, match="someone else may have made it") as info:
            read(args)
        _one_line(info.value)
