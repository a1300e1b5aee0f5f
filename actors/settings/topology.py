"""The topology model: hosts, actors, engines, languages and endpoints, validated.

Every error names the file, the key and what is allowed. This layer checks the tables and
the engine names (the manifest); constructing an engine to check its settings and languages
is the engines layer's part, passed in as `check_engine` (deploy.topology wires the two:
the topology files and their loader live there).
"""

from __future__ import annotations

import copy
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import (
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from voxweft.actors.glossary import Glossary, GlossaryError
from voxweft.actors.settings import manifest
from voxweft.actors.settings.actors import ACTOR_NAMES, CONFIG_TYPES, ActorConfig, EngineConfig
from voxweft.actors.settings.base import Settings
from voxweft.actors.settings.errors import FileErrors
from voxweft.protocol import security

#: check_engine(stage, config, where, here): construct (not load) the actor's engine when it
#: runs `here` and raise TopologyError when its settings or languages do not fit.
EngineCheck = Callable[[str, EngineConfig, str, bool], object]
#: The live listener never hears a translation start later than this after its speech
#: ended (actors.lag); 0: no bound (file interpretation keeps every utterance).
DEFAULT_MAX_LAG_S = 8.0
#: Where a host's supervisord event listener publishes actor process states (deploy.events).
DEFAULT_EVENTS_PORT = 27600
#: The longest `ipc` folder: its sockets' paths ("/segmenter" more) stay within the 103
#: bytes a unix socket path may have on macOS (107 on Linux).
IPC_FOLDER_MAX = 90
#: A host's or a client's name: it names files (a run directory, key files) and is an argument
#: on supervisord's command lines, so it is one plain word (no path, space, quote or `%`).
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")
#: Line breaks and other control characters: no name, address or path in a topology has one,
#: and in one they could end a line of a file it is written into (supervisord.conf, a log).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def name_error(name: str) -> str:
    """Why `name` cannot name a host or a client; "" when it can."""
    if NAME.fullmatch(name):
        return ""
    return (f"name {name!r:.60} must be 1 to 63 letters, digits, '_' or '-', not starting "
            "with '-': it names files and is a command's argument")


class PipelineTable(Settings):
    """`[pipeline]`: the language pair and the lag bound."""

    src_lang: str = "en"
    tgt_lang: str = "pt"
    max_lag_s: float = DEFAULT_MAX_LAG_S
    # Names and terms with their translations (actors.glossary: the file's format); a path,
    # relative to the topology file. "" = none.
    glossary: str = ""

    @field_validator("src_lang", "tgt_lang")
    @classmethod
    def _iso_code(cls, code: str, info) -> str:
        if not (len(code) == 2 and code.isalpha() and code.islower()):
            raise ValueError(f"{info.field_name} = {code!r} must be a two-letter ISO 639-1 code "
                             "such as 'en' or 'pt'")
        return code

    @field_validator("max_lag_s")
    @classmethod
    def _lag_bound(cls, value: float) -> float:
        if not (value == 0 or 2 <= value <= 600):
            raise ValueError(f"max_lag_s = {value!r} must be 0 (no bound: keep every "
                             "utterance) or seconds in 2..600")
        return value


class HostTable(Settings):
    """`[hosts.NAME]`: how peers reach it, the interface its actors bind, its events port.

    Beyond loopback its bus is CURVE (protocol.security): `public_key` is its key (from
    `voxweft keys --host NAME`), `secret_key` the file of its secret (default: the keys
    folder's NAME.key_secret), `allow` the only source addresses its sockets admit ([] = any).
    """

    address: str = "127.0.0.1"
    bind: str = ""               # "" = its address
    events_port: int = Field(DEFAULT_EVENTS_PORT, ge=1, le=65535)
    public_key: str = ""
    secret_key: str = ""
    allow: list[str] = []
    # A session's recorder (interpret, bench): an endpoint on this machine that every actor's
    # PUB dials as well, so that it hears a restarted actor from its first message. Set by the
    # session runner, not by hand. "" = none.
    recorder: str = ""
    # A folder on this machine: the host's sockets (its actors', the segments', the event
    # listener's) are ipc:// endpoints in it, not TCP ports. For a session on one host
    # (`interpret`, `bench`: their private 0700 run directory): no port to find free, none to
    # lose to another run, and no other local user on the bus. Set by the session runner.
    ipc: str = ""

    @field_validator("ipc")
    @classmethod
    def _folder(cls, folder: str) -> str:
        if folder and not (os.path.isabs(folder) and len(folder) <= IPC_FOLDER_MAX):
            raise ValueError(f"ipc = {folder!r:.60} must be an absolute folder of at most "
                             f"{IPC_FOLDER_MAX} characters (a unix socket's path is short)")
        return folder

    @field_validator("recorder")
    @classmethod
    def _local(cls, endpoint: str) -> str:
        local = endpoint.startswith("ipc://") or \
            re.fullmatch(r"tcp://(127\.\d+\.\d+\.\d+|localhost|\[::1\]):\d+", endpoint)
        if endpoint and not local:
            raise ValueError(f"recorder = {endpoint!r:.60} must be an endpoint on this machine "
                             "(tcp://127.0.0.1:PORT or ipc://PATH), or \"\"")
        return endpoint

    @field_validator("public_key")
    @classmethod
    def _z85(cls, key: str) -> str:
        if key and not security.valid_public_key(key):
            raise ValueError(f"public_key = {key!r} is not a CURVE public key (40 Z85 "
                             "characters, as `voxweft keys` prints)")
        return key

    @field_validator("allow")
    @classmethod
    def _addresses(cls, addresses: list[str]) -> list[str]:
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"allow: {address!r} is not an IP address") from None
        return addresses


class TopologyError(ValueError):
    """A topology that cannot be used, with the key at fault."""


@dataclass(frozen=True)
class Host:
    """A machine: `address` is how peers reach it, `bind` the interface its actors bind.

    `events_port`: where its supervisord's event listener says which actor is down and why.
    """

    name: str
    address: str
    bind: str
    events_port: int = DEFAULT_EVENTS_PORT
    public_key: str = ""
    secret_key: str = ""          # "" = the keys folder's NAME.key_secret
    allow: tuple[str, ...] = ()
    recorder: str = ""            # a session's recorder, dialled by its actors' PUBs
    ipc: str = ""                 # a folder: its sockets are ipc:// endpoints in it

    def endpoint(self, name: str, port: int, side: str) -> str:
        """The endpoint of its socket `name` (on `port` over TCP); `side`: bind or connect."""
        if self.ipc:
            return f"ipc://{self.ipc}/{name}"
        return f"tcp://{self.bind if side == 'bind' else self.address}:{port}"

    @property
    def curve(self) -> bool:
        """Whether its bus is CURVE: it binds beyond loopback."""
        return not security.loopback(self.bind)

    def secret_key_file(self) -> Path:
        """The file with its secret key."""
        return (Path(self.secret_key).expanduser() if self.secret_key
                else security.keys_dir() / f"{self.name}.key_secret")


@dataclass(frozen=True)
class Commits:
    """How the segmenter commits an utterance's words before it ends (the ASR follows it)."""

    at_pauses: bool      # a draft at each pause inside the utterance, its words committed
    by_agreement: bool   # drafts every so often; the words two agree on are committed


@dataclass
class Topology:
    """A validated topology."""

    source: str
    src_lang: str
    tgt_lang: str
    hosts: dict[str, Host]
    actors: dict[str, ActorConfig]
    raw: dict
    max_lag_s: float = DEFAULT_MAX_LAG_S
    clients: dict[str, str] = field(default_factory=dict)   # name -> public key
    #: The host it was validated for: only its actors' engines were constructed (None: all).
    for_host: str | None = None
    #: What checked its engines (kept so that with_overrides checks them again).
    check_engine: EngineCheck | None = field(default=None, repr=False, compare=False)
    #: [pipeline] glossary, read (None: none).
    glossary: Glossary | None = field(default=None, repr=False, compare=False)

    def curve(self, host: str | None = None, key_file: Path | None = None
              ) -> security.Curve | None:
        """The CURVE of a process on `host` (its keys), or of a client with `key_file`.

        None when every host binds loopback (no keys needed). ValueError with one line
        saying what to do when keys are needed and missing.
        """
        secured = [h for h in self.hosts.values() if h.curve]
        if not secured:
            return None
        for h in secured:
            if not h.public_key:
                raise ValueError(
                    f"host {h.name} binds {h.bind} (beyond loopback), so its bus needs keys: run "
                    f"`voxweft keys --host {h.name}` there and put the public key it prints in "
                    f"[hosts.{h.name}] public_key of this topology, on every host")
        if key_file is None:
            if host is None:
                raise ValueError("this topology's bus is CURVE: give --host NAME (this "
                                 "machine's keys) or --key FILE (a client's, listed in "
                                 "[clients])")
            key_file = self.hosts[host].secret_key_file()
        public, secret = security.load_keys(key_file)
        admitted = {h.public_key.encode(): f"host {h.name}" for h in self.hosts.values()
                    if h.public_key}
        admitted.update({k.encode(): f"client {n}" for n, k in self.clients.items()})
        if public not in admitted:
            raise ValueError(f"the key in {key_file} is not listed in this topology (not a "
                             "[hosts.NAME] public_key, not in [clients])")
        mine = self.hosts[host] if host else None
        return security.Curve(
            public=public, secret=secret,
            servers={h.address: h.public_key.encode() for h in secured},
            clients=admitted, addresses=mine.allow if mine is not None else (),
            workers=frozenset(h.public_key.encode() for h in self.hosts.values()
                              if h.public_key))

    def host_of(self, actor: str) -> Host:
        """The host an actor runs on."""
        return self.hosts[self.actors[actor].host]

    def pub_bind(self, actor: str) -> str:
        """Endpoint the actor's PUB socket binds."""
        return self.host_of(actor).endpoint(actor, self.actors[actor].port, "bind")

    def pub_connect(self, actor: str) -> str:
        """Endpoint a subscriber connects to for the actor's PUB socket."""
        return self.host_of(actor).endpoint(actor, self.actors[actor].port, "connect")

    def recorder_connect(self, actor: str) -> str:
        """Endpoint of a session's recorder the actor's PUB dials as well ("" = none)."""
        return self.host_of(actor).recorder

    def push_bind(self) -> str:
        """Endpoint the segmenter's PUSH (segments to ASR) binds."""
        return self.host_of("segmenter").endpoint(
            "segments", self.actors["segmenter"].push_port, "bind")

    def push_connect(self) -> str:
        """Endpoint ASR workers connect their PULL socket to."""
        return self.host_of("segmenter").endpoint(
            "segments", self.actors["segmenter"].push_port, "connect")

    def events_bind(self, host: str) -> str:
        """Endpoint the event listener of `host` binds."""
        return self.hosts[host].endpoint("events", self.hosts[host].events_port, "bind")

    def events_connect(self, host: str) -> str:
        """Endpoint a watcher connects to for `host`'s actor process states."""
        return self.hosts[host].endpoint("events", self.hosts[host].events_port, "connect")

    def ports_bound_on(self, host: str) -> list[tuple[str, int]]:
        """(key, port) of every TCP port `host` binds: its event listener's and its actors'.

        None when its sockets are ipc:// endpoints.
        """
        if self.hosts[host].ipc:
            return []
        bound = [(f"hosts.{host}.events_port", self.hosts[host].events_port)]
        for name in self.actors_on(host):
            bound.append((f"actors.{name}.port", self.actors[name].port))
            if name == "segmenter":
                bound.append((f"actors.{name}.push_port", self.actors[name].push_port))
        return bound

    def hosts_in_use(self) -> list[str]:
        """Hosts that run at least one actor."""
        return [h for h in self.hosts if self.actors_on(h)]

    def actors_on(self, host: str) -> list[str]:
        """Actors placed on `host`, in pipeline order."""
        return [a for a in ACTOR_NAMES if self.actors[a].host == host]

    # -- what one actor needs to know of another, derived here once: no actor reads
    #    another's table (issue 35) --------------------------------------------------------
    @property
    def echo_path(self) -> bool:
        """Whether the microphone can hear the loudspeaker (capture's source, player's sink)."""
        return (self.actors["capture"].source == "microphone"
                and self.actors["player"].sink == "device")

    @property
    def echo_handling(self) -> str:
        """What is done about the echo: "cancel", "gate", "off", or "" (no echo path).

        Cancelling needs capture and player on one host (one clock for the reference's and
        the microphone's stamps); elsewhere "cancel" gates.
        """
        if not self.echo_path:
            return ""
        mode = self.actors["segmenter"].echo_mode
        if mode == "cancel" and not self.same_host("capture", "player"):
            return "gate"
        return mode

    @property
    def playout_buffer_s(self) -> float:
        """How long the player holds audio before it is heard (its jitter buffer)."""
        return self.actors["player"].jitter_ms / 1000

    @property
    def commits(self) -> Commits:
        """How the segmenter commits words before an utterance ends."""
        seg = self.actors["segmenter"]
        return Commits(at_pauses=bool(seg.commit_prefixes and seg.speculate_ms),
                       by_agreement=bool(seg.commit_prefixes and seg.agree_every_ms))

    def same_host(self, a: str, b: str) -> bool:
        """Whether two actors run on one host (and so read one clock)."""
        return self.actors[a].host == self.actors[b].host

    def dumps(self) -> str:
        """The topology as TOML (what `up` freezes into the run directory)."""
        return tomli_w.dumps(self.raw)

    def with_overrides(self, overrides: dict) -> Topology:
        """A new validated topology with `overrides` merged into the raw tables."""
        raw = copy.deepcopy(self.raw)
        _merge(raw, overrides)
        return parse(raw, self.source, self.for_host, self.check_engine)


def _merge(base: dict, extra: dict) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


class _ActorTables(Settings):
    """`[actors]`: the six actors' tables (each typed by CONFIG_TYPES), their engines named."""

    @model_validator(mode="after")
    def _engines_in_the_manifest(self) -> _ActorTables:
        # Names only: nothing is imported (constructing an engine is check_engine's part).
        for name in ACTOR_NAMES:
            config = getattr(self, name)
            if not isinstance(config, EngineConfig):
                continue
            for key in ("engine", "backlog_engine"):
                engine = getattr(config, key, "")
                if (key == "engine" or engine) and engine not in manifest.names(name):
                    raise ValueError(f"{name}.{key} = {engine!r} is not one of: "
                                     f"{', '.join(manifest.names(name))}")
        return self


ActorTables = create_model("ActorTables", __base__=_ActorTables, __module__=__name__,
                           **{name: (CONFIG_TYPES[name], ...) for name in ACTOR_NAMES})


def _control_character(value: Any, where: str = "") -> str:
    """Where the first key or text in `value` with a control character is, as one line.

    At any depth ("" when none has one): names, addresses and paths are all text.
    """
    problem = "holds a control character (a line break, NUL...), as no name, address or path may"
    if isinstance(value, str):
        return f"{where} = {value!r:.60} {problem}" if CONTROL.search(value) else ""
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        if isinstance(key, str) and CONTROL.search(key):
            return f"{where + ': ' if where else ''}name {key!r:.60} {problem}"
        if error := _control_character(item, f"{where}.{key}" if where else str(key)):
            return error
    return ""


class TopologyFile(Settings):
    """A whole topology file: its tables typed, and the rules between them.

    Validated with context {"host": NAME or None}: the host the topology is read for.
    """

    pipeline: PipelineTable = Field(default_factory=PipelineTable)
    hosts: dict[str, HostTable] = Field(default_factory=dict, validate_default=True)
    # A missing [actors] reads as an empty one: each absent table is named.
    actors: ActorTables = Field(default_factory=dict, validate_default=True)
    # name -> CURVE public key; Any, so that a non-text key gets the same line, with its name.
    clients: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _no_control_characters(cls, raw: Any) -> Any:
        if error := _control_character(raw):
            raise ValueError(error)
        return raw

    @field_validator("hosts")
    @classmethod
    def _some_and_this_one(cls, hosts: dict[str, HostTable], info) -> dict[str, HostTable]:
        if not hosts:
            raise ValueError("no [hosts.NAME] table; add one, e.g. [hosts.local]")
        for name in hosts:
            if error := name_error(name):
                raise ValueError(f"hosts: {error}")
        host = (info.context or {}).get("host")
        if host is not None and host not in hosts:
            raise ValueError(f"--host {host!r} is not one of: {', '.join(hosts)}")
        return hosts

    @field_validator("clients")
    @classmethod
    def _curve_keys(cls, clients: dict[str, Any]) -> dict[str, Any]:
        for name, key in clients.items():
            if error := name_error(name):
                raise ValueError(f"clients: {error}")
            if not isinstance(key, str) or not security.valid_public_key(key):
                raise ValueError(f"clients.{name} = {key!r} is not a CURVE public key (40 Z85 "
                                 f"characters: `voxweft keys --client {name}` prints it)")
        return clients

    @model_validator(mode="after")
    def _placed(self) -> TopologyFile:
        for name in ACTOR_NAMES:
            config = getattr(self.actors, name)
            if config.host not in self.hosts:
                raise ValueError(f"actors.{name}.host = {config.host!r} is not one of: "
                                 f"{', '.join(self.hosts)}")
        return self

    @model_validator(mode="after")
    def _ipc_alone(self) -> TopologyFile:
        for name, entry in self.hosts.items():
            away = [a for a in ACTOR_NAMES if getattr(self.actors, a).host != name]
            if entry.ipc and away:
                raise ValueError(f"hosts.{name}.ipc: ipc:// endpoints reach no other machine, "
                                 f"but {', '.join(away)} run elsewhere; put every actor on "
                                 f"{name} or drop ipc")
        return self

    @model_validator(mode="after")
    def _ports_apart(self) -> TopologyFile:
        actors = {name: getattr(self.actors, name) for name in ACTOR_NAMES}
        ports: dict[tuple[str, int], str] = {}
        for name, entry in self.hosts.items():
            if not any(config.host == name for config in actors.values()):
                continue   # runs no actor, so no event listener either
            if (entry.address, entry.events_port) in ports:
                raise ValueError(f"hosts.{name}.events_port = {entry.events_port} is already "
                                 f"used by {ports[(entry.address, entry.events_port)]} at the "
                                 "same address; give each host its own")
            ports[(entry.address, entry.events_port)] = f"hosts.{name}.events_port"
        for name, config in actors.items():
            used = [("port", config.port)]
            if name == "segmenter":
                used.append(("push_port", config.push_port))
            address = self.hosts[config.host].address
            for key, port in used:
                if (address, port) in ports:
                    raise ValueError(f"actors.{name}.{key} = {port} is already used by "
                                     f"{ports[(address, port)]} on host {config.host}")
                ports[(address, port)] = f"actors.{name}"
        return self


#: Errors of a topology file as one line naming the file and the key.
ERRORS = FileErrors(TopologyFile, (TopologyFile, ActorTables))


def parse(raw: dict, source: str = "<topology>", host: str | None = None,
          check_engine: EngineCheck | None = None) -> Topology:
    """Validate a topology already read from TOML, for `host` (None: for every host).

    Engine names are checked against the manifest; `check_engine` (if given) constructs the
    engines of actors placed on `host`, and checks the others by name only: this is the one
    place that decides which engines a process imports.
    """
    try:
        checked = TopologyFile.model_validate(raw, context={"host": host})
    except ValidationError as exc:
        raise TopologyError(ERRORS.line(source, exc.errors())) from None
    pipeline = checked.pipeline
    actors: dict[str, ActorConfig] = {name: getattr(checked.actors, name) for name in ACTOR_NAMES}
    for name, config in actors.items():
        config.src_lang = config.src_lang or pipeline.src_lang
        config.tgt_lang = config.tgt_lang or pipeline.tgt_lang
        if check_engine is not None and isinstance(config, EngineConfig):
            check_engine(name, config, f"{source}: actors.{name}", host in (None, config.host))
    hosts = {name: Host(name, entry.address, entry.bind or entry.address, entry.events_port,
                        entry.public_key, entry.secret_key, tuple(entry.allow),
                        entry.recorder, entry.ipc)
             for name, entry in checked.hosts.items()}
    glossary = None
    if pipeline.glossary:
        try:
            glossary = Glossary.read(pipeline.glossary)
        except GlossaryError as exc:
            raise TopologyError(f"{source}: pipeline.glossary: {exc}") from None
    return Topology(source, pipeline.src_lang, pipeline.tgt_lang, hosts, actors, raw,
                    float(pipeline.max_lag_s), dict(checked.clients), host, check_engine,
                    glossary)


def load(path: str | os.PathLike, host: str | None = None,
         check_engine: EngineCheck | None = None) -> Topology:
    """Read and validate a topology file for `host`.

    A process that knows its host passes it: the engines of other hosts are not imported.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TopologyError(f"topology file {path} not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TopologyError(f"{path}: not valid TOML ({exc})") from None
    pipeline = raw.get("pipeline")
    if isinstance(pipeline, dict) and isinstance(pipeline.get("glossary"), str) and \
            pipeline["glossary"]:   # beside the topology file, wherever it is read from
        pipeline["glossary"] = str((path.parent / pipeline["glossary"]).resolve())
    return parse(raw, str(path), host, check_engine)
