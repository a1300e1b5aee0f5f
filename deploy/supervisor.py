"""Render a supervisord config for one host's actors and drive supervisord unprivileged.

Everything lives in one private run directory (mode 0700): the frozen topology, the config,
the control socket, the pidfile and the logs. supervisord never listens on the network.
"""

from __future__ import annotations

import configparser
import io
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path

from voxweft.actors.runtime import EXIT_CONFIG, START_SECS
from voxweft.actors.settings.topology import CONTROL, name_error
from voxweft.deploy.topology import Topology
from voxweft.protocol import bus as wire
from voxweft.protocol.client import BusClient
from voxweft.protocol.messages import Status

GROUP = "voxweft"
# Model loading happens after startsecs; readiness is read from the bus, not from RUNNING.
START_RETRIES = 3
STOP_WAIT_SECS = 5    # actors exit within 2 s of SIGTERM; the rest is margin


def engine_env(actor: str, config) -> dict[str, str]:
    """What an actor's engine needs in its process environment from the start (a preload)."""
    from voxweft.actors import engines

    if actor not in engines.STAGES:
        return {}
    cls = engines.engine_class(actor, config.engine)
    return dict(cls.process_env())   # every stage's engine base class defaults it to {}


def down_for_good(state: str, exit_status: int) -> bool:
    """Whether supervisord will not start this actor again by itself.

    It gave up (FATAL), or the actor exited in a way that is not restarted (exit 0, or 78:
    configuration). An EXITED after a crash is followed by a restart at once.
    """
    return state == "FATAL" or (state in ("EXITED", "STOPPED")
                                and exit_status in (0, EXIT_CONFIG))


class SupervisorError(RuntimeError):
    """supervisord could not be started or reached, or an actor failed; one clear line."""


def default_run_dir(host: str) -> Path:
    """Private per-user run directory; short, because unix socket paths are <= 107 bytes."""
    if error := name_error(host):   # a loaded topology's names pass; `../` would leave base
        raise SupervisorError(f"run directory: host {error}")
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"voxweft-{os.getuid()}-{host}"


def check_own(folder: Path) -> None:
    """Refuse a run folder this user did not make: a link, or another user's.

    In /tmp anyone may make `voxweft-UID-HOST` first, and read or replace what is put in it.
    """
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or \
            info.st_uid != os.getuid():
        what = "a link" if stat.S_ISLNK(info.st_mode) else \
            "not a folder" if not stat.S_ISDIR(info.st_mode) else \
            f"owned by uid {info.st_uid}, not you ({os.getuid()})"
        raise SupervisorError(f"run directory {folder} is {what}: someone else may have made "
                              "it; remove it or choose another --run-dir")


@dataclass(frozen=True)
class CaptionsProgram:
    """`voxweft up --captions`: the captions page, supervised beside the actors.

    `command` is what runs it (`python -m` and its arguments, before the topology's): the
    commands layer above names its own entry point, this layer never does.
    """

    command: tuple[str, ...]
    bind: str
    port: int
    token: str = ""    # required in the page's URL (bound beyond loopback)


def _literal(text: str) -> str:
    """`text` as supervisord reads it back: it expands `%(name)s` in values, so `%` doubles.

    `%(here)s` cannot be written: supervisord replaces it before expanding, even in `%%(here)s`.
    """
    if "%(here)s" in text:
        raise SupervisorError(f"supervisord.conf: cannot write {text!r}: supervisord replaces "
                              "'%(here)s' in it, escaped or not")
    return text.replace("%", "%%")


def _arg(text: object) -> str:
    """One argument of a command line (supervisord splits them as a shell does)."""
    return _literal(shlex.quote(str(text)))


def _unreadable(text: str) -> bool:
    """Whether supervisord would read `text` back otherwise than written on a config line."""
    # configparser ends a line at a line break, drops a ";" or "#" after a space as a comment
    # and strips spaces from both ends; a lone surrogate (a byte of the environment that is no
    # UTF-8) cannot be written at all.
    return bool(CONTROL.search(text) or re.search(r"\s[;#]|[\ud800-\udfff]", text)
                or text != text.strip())


def _environment(env: dict[str, object]) -> str:
    """The `KEY="value",...` of supervisord, which reads no escapes: no quotes inside."""
    for key, value in env.items():
        value = str(value)
        if (not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or '"' in value
                or value != value.strip("'") or _unreadable(value)):   # it strips end quotes
            # not the value: it may be the captions page's token
            raise SupervisorError(f"supervisord.conf: cannot pass {key!r} to the actors: "
                                  "supervisord would not read its value back as it is (a quote, "
                                  "a line break or other control character, ' ;' or ' #', or "
                                  "a space at an end)")
    return ",".join(f'{key}="{_literal(str(value))}"' for key, value in env.items())


def _line(section: str, key: str, value: str) -> str:
    """`value` if supervisord reads back all of it on its line; else SupervisorError."""
    if _unreadable(value):
        raise SupervisorError(f"supervisord.conf: cannot write [{section}] {key} = {value!r}: "
                              "supervisord would not read it back as it is (a line break or "
                              "other control character, ' ;' or ' #', or a space at an end)")
    return value


def render(topology: Topology, host: str, run_dir: Path,
           captions: CaptionsProgram | None = None, owner: int | None = None) -> str:
    """The supervisord config text for the actors placed on `host` (and the captions page).

    `owner`: the pid of the command whose run this is (`interpret`, `bench`): when it is gone,
    however it ended (SIGKILL too), the event listener shuts supervisord and the actors down.

    configparser writes it; every value from outside (the host's name, the environment, paths)
    is quoted and escaped, or refused with SupervisorError: none can end its line, open a
    section or be expanded by supervisord.
    """
    actors = topology.actors_on(host)
    python = _arg(sys.executable)
    topology_args = f"--topology %(here)s/topology.toml --host {_arg(host)}"
    project_root = _literal(str(Path(__file__).resolve().parent.parent))
    sections: dict[str, dict[str, object]] = {
        "unix_http_server": {"file": "%(here)s/supervisor.sock", "chmod": "0700"},
        "supervisord": {"logfile": "%(here)s/supervisord.log",
                        "pidfile": "%(here)s/supervisord.pid",
                        "childlogdir": "%(here)s/logs", "logfile_maxbytes": "10MB"},
        "rpcinterface:supervisor": {
            "supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"},
        "supervisorctl": {"serverurl": "unix://%(here)s/supervisor.sock"},
        f"group:{GROUP}": {"programs": ",".join(actors)},
    }
    for name in actors:
        threads = topology.actors[name].threads
        env = {
            # Thread pools sized by the topology: oversubscribed cores made models ~100x slower.
            "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": 1,
        }
        passthrough = ("VOXWEFT_FAULT", "VOXWEFT_MODELS", "VOXWEFT_MODELS_CATALOGUE",
                       "PULSE_SERVER", "PULSE_RUNTIME_PATH", "HOME", "XDG_RUNTIME_DIR")
        env.update({k: os.environ[k] for k in passthrough if k in os.environ})
        env.update(engine_env(name, topology.actors[name]))
        sections[f"program:{name}"] = {
            # --host: the actor validates only this host's engines (imports no other's).
            "command": f"{python} -m voxweft.actors {topology_args} --actor {name}",
            "directory": project_root,
            "autostart": "true",
            # Restart after a crash (kill -9, segfault); not after a clean stop or a config
            # error (exit 78), which would only crash-loop.
            "autorestart": "unexpected",
            "exitcodes": f"0,{EXIT_CONFIG}",
            "startsecs": START_SECS,
            "startretries": START_RETRIES,
            "stopsignal": "TERM",
            "stopwaitsecs": STOP_WAIT_SECS,
            "stopasgroup": "true",
            "killasgroup": "true",
            "redirect_stderr": "true",
            "stdout_logfile": f"%(here)s/logs/{name}.log",
            "stdout_logfile_maxbytes": "10MB",
            "stdout_logfile_backups": 2,
            "environment": _environment(env),
        }
    # Each actor's process state onto the bus: `status`, `watch` and `interpret` say which
    # actor is down and why (deploy.events). Not in the group: it is no actor.
    sections["eventlistener:events"] = {
        "command": f"{python} -m voxweft.deploy.events {topology_args}" +
                   (f" --owner {int(owner)}" if owner else ""),
        "directory": project_root,
        "events": "PROCESS_STATE",
        "buffer_size": 100,
        "autorestart": "true",
        "stopsignal": "TERM",
        "stderr_logfile": "%(here)s/logs/events.log",
        "stdout_logfile": "NONE",   # the protocol channel with supervisord, not a log
        "environment": _environment({"PYTHONUNBUFFERED": 1}),
    }
    if captions is not None:   # no actor either: restarted whatever its exit, not in the group
        token = {"VOXWEFT_CAPTIONS_TOKEN": captions.token} if captions.token else {}
        sections["program:captions"] = {
            "command": f"{python} -m {_literal(shlex.join(captions.command))} {topology_args} "
                       f"--bind {_arg(captions.bind)} --port {_arg(captions.port)}",
            "directory": project_root,
            "autorestart": "true",
            "stopsignal": "TERM",
            "redirect_stderr": "true",
            "stdout_logfile": "%(here)s/logs/captions.log",
            "environment": _environment({"PYTHONUNBUFFERED": 1, **token}),
        }
    config = configparser.ConfigParser(interpolation=None)
    config.read_dict({section: {key: _line(section, key, str(value))
                                for key, value in values.items()}
                      for section, values in sections.items()})
    text = io.StringIO()
    text.write("; generated by `voxweft up`; edit the topology instead\n")
    config.write(text, space_around_delimiters=False)
    return text.getvalue()


@dataclass
class Supervisor:
    """A supervisord instance for one run directory."""

    run_dir: Path

    @property
    def conf(self) -> Path:
        """The rendered config."""
        return self.run_dir / "supervisord.conf"

    @property
    def socket(self) -> Path:
        """The private control socket."""
        return self.run_dir / "supervisor.sock"

    def ctl_command(self) -> str:
        """The plain supervisorctl command line for this instance."""
        ctl = Path(sys.executable).with_name("supervisorctl")
        return f"{shlex.quote(str(ctl))} -c {shlex.quote(str(self.conf))}"

    def rpc(self):
        """An XML-RPC proxy over the unix socket."""
        from supervisor.xmlrpc import SupervisorTransport

        transport = SupervisorTransport(None, None, f"unix://{self.socket}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def running(self) -> bool:
        """True when supervisord answers on the socket."""
        if not self.socket.exists():
            return False
        try:
            return self.rpc().supervisor.getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Fault, xmlrpc.client.ProtocolError):
            return False

    def write(self, topology: Topology, host: str,
              captions: CaptionsProgram | None = None, owner: int | None = None) -> None:
        """Freeze the topology and render the config into the run directory (see `render`)."""
        if len(str(self.socket)) > 100:
            raise SupervisorError(f"run directory {self.run_dir} is too long for a unix socket "
                                  "path; choose a shorter --run-dir")
        # supervisord puts it, unquoted and then %-expanded, into the config's paths and commands
        if "%" in str(self.run_dir) or shlex.quote(str(self.run_dir)) != str(self.run_dir):
            raise SupervisorError(f"run directory {str(self.run_dir)!r} holds a space, a quote, "
                                  "'%' or another character supervisord cannot take in a path; "
                                  "choose another --run-dir")
        conf = render(topology, host, self.run_dir, captions, owner)
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_own(self.run_dir)
        os.chmod(self.run_dir, 0o700)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        check_own(self.run_dir / "logs")
        (self.run_dir / "topology.toml").write_text(topology.dumps(), encoding="utf-8")
        self.conf.write_text(conf, encoding="utf-8")
        os.chmod(self.conf, 0o600)   # it may hold the captions page's access token

    def start(self) -> None:
        """Start supervisord (it daemonizes) and wait for its socket."""
        if self.running():
            raise SupervisorError(f"voxweft is already running from {self.run_dir}; run "
                                  "`voxweft down` first")
        proc = subprocess.run([sys.executable, "-m", "supervisor.supervisord", "-c",
                               str(self.conf)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SupervisorError(f"supervisord failed to start: {proc.stderr.strip()}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.running():
                return
            time.sleep(0.1)
        raise SupervisorError(f"supervisord did not answer on {self.socket}; see "
                              f"{self.run_dir / 'supervisord.log'}")

    def processes(self) -> dict[str, dict]:
        """Supervisord's view of each actor: statename, pid, exitstatus...

        SupervisorError, one line, when supervisord does not answer: it stopped or was
        killed, and its actors with it (`interpret` ended in a FileNotFoundError traceback
        on its socket, issue 48).
        """
        try:
            info = self.rpc().supervisor.getAllProcessInfo()
        except (OSError, xmlrpc.client.ProtocolError) as exc:
            raise SupervisorError(f"supervisord is gone ({type(exc).__name__}: {exc}); the "
                                  f"actors stopped with it: see {self.run_dir}/supervisord.log"
                                  ) from None
        return {p["name"]: p for p in info if p["group"] == GROUP}

    def log_tail(self, actor: str, lines: int = 5) -> str:
        """The last lines of an actor's log."""
        path = self.run_dir / "logs" / f"{actor}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def last_error(self, actor: str, fallback: bool = True) -> str:
        """The actor's last ERROR line since it last started, else its last line (or '')."""
        text = self.log_tail(actor, 200).splitlines()
        starts = [i for i, line in enumerate(text) if f"{actor}: starting (pid" in line]
        text = text[starts[-1]:] if starts else text
        errors = [line for line in text if " ERROR " in line]
        if not fallback:
            return errors[-1] if errors else ""
        return (errors or text or ["(no log)"])[-1]

    def last_exit(self, actor: str) -> int | None:
        """The exit status supervisord logged for the actor's last exit (-1: a signal).

        Its process info forgets the status as soon as the actor is started again, which
        after a crash is at once; the log line stays.
        """
        path = self.run_dir / "supervisord.log"
        if not path.exists():
            return None
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 65536))
            tail = f.read().decode(errors="replace")
        found = re.findall(rf"exited: {re.escape(actor)} \((exit status (\d+)|terminated)", tail)
        if not found:
            return None
        return int(found[-1][1]) if found[-1][1] else -1

    def restart(self, actor: str) -> None:
        """Stop and start one actor."""
        rpc = self.rpc()
        try:
            rpc.supervisor.stopProcess(f"{GROUP}:{actor}", True)
        except xmlrpc.client.Fault as exc:
            if "NOT_RUNNING" not in exc.faultString:
                raise
        rpc.supervisor.startProcess(f"{GROUP}:{actor}", False)

    def shutdown(self, timeout_s: float = 20.0) -> None:
        """Stop every actor and supervisord; wait until its process is gone."""
        pid_file = self.run_dir / "supervisord.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        try:
            self.rpc().supervisor.shutdown()
        except (OSError, xmlrpc.client.Fault, xmlrpc.client.ProtocolError):
            pass
        deadline = time.monotonic() + timeout_s
        while pid and time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        if pid:
            raise SupervisorError(f"supervisord (pid {pid}) did not stop in {timeout_s:.0f} s")


class BusWatcher:
    """Subscribes to every actor's status heartbeat (PUB only: it can never slow anyone)."""

    def __init__(self, topology: Topology, actors: list[str] | None = None,
                 curve=None) -> None:
        self.actors = actors or list(topology.actors)
        self.bus = BusClient([topology.pub_connect(a) for a in self.actors],
                             wire.watched("up"), curve)
        self.latest: dict[str, Status] = {}

    def poll(self, timeout_s: float) -> None:
        """Collect status messages for up to `timeout_s`."""
        for msg in self.bus.messages(timeout_s):
            if isinstance(msg, Status):
                self.latest[msg.src] = msg

    def close(self) -> None:
        """Close the socket and the context."""
        self.bus.close()


def wait_ready(sup: Supervisor, topology: Topology, actors: list[str],
               timeout_s: float = 300.0, progress=None, curve=None) -> dict[str, Status]:
    """Wait until every actor reports ready on the bus; raise naming the one that failed.

    Returns their last heartbeats (their measured budgets among them).
    """
    watcher = BusWatcher(topology, actors, curve)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            watcher.poll(0.5)
            procs = sup.processes()
            for name in actors:
                info = procs.get(name, {})
                if down_for_good(info.get("statename", ""), info.get("exitstatus", 0)):
                    raise SupervisorError(f"actor {name} failed ({info['statename']}, exit "
                                          f"{info.get('exitstatus')}): {sup.last_error(name)}")
            ready = [a for a in actors if a in watcher.latest and
                     watcher.latest[a].state in ("ready", "degraded")]
            if progress:
                progress(ready)
            if len(ready) == len(actors):
                return watcher.latest
            if time.monotonic() > deadline:
                missing = [a for a in actors if a not in ready]
                raise SupervisorError(f"not ready after {timeout_s:.0f} s: "
                                      f"{', '.join(missing)}; see `voxweft logs ACTOR`")
    finally:
        watcher.close()
