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
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w
from pydantic import Field, field_validator

from voxweft.actors.settings import manifest
from voxweft.actors.settings.actors import ACTOR_NAMES, CONFIG_TYPES, ActorConfig, EngineConfig
from voxweft.actors.settings.base import Settings
from voxweft.protocol import security

#: check_engine(stage, config, where, here): construct (not load) the actor's engine when it
#: runs `here` and raise TopologyError when its settings or languages do not fit.
EngineCheck = Callable[[str, EngineConfig, str, bool], object]
TOP_KEYS = ("pipeline", "hosts", "actors", "clients")
#: The live listener never hears a translation start later than this after its speech
#: ended (actors.lag); 0: no bound (file interpretation keeps every utterance).
DEFAULT_MAX_LAG_S = 8.0
#: Where a host's supervisord event listener publishes actor process states (deploy.events).
DEFAULT_EVENTS_PORT = 47600


class PipelineTable(Settings):
    """`[pipeline]`: the language pair and the lag bound."""

    src_lang: str = "en"
    tgt_lang: str = "pt"
    max_lag_s: float = DEFAULT_MAX_LAG_S

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

    @property
    def curve(self) -> bool:
        """Whether its bus is CURVE: it binds beyond loopback."""
        return not security.loopback(self.bind)

    def secret_key_file(self) -> Path:
        """The file with its secret key."""
        return (Path(self.secret_key).expanduser() if self.secret_key
                else security.keys_dir() / f"{self.name}.key_secret")


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
            clients=admitted, addresses=mine.allow if mine is not None else ())

    def host_of(self, actor: str) -> Host:
        """The host an actor runs on."""
        return self.hosts[self.actors[actor].host]

    def pub_bind(self, actor: str) -> str:
        """Endpoint the actor's PUB socket binds."""
        return f"tcp://{self.host_of(actor).bind}:{self.actors[actor].port}"

    def pub_connect(self, actor: str) -> str:
        """Endpoint a subscriber connects to for the actor's PUB socket."""
        return f"tcp://{self.host_of(actor).address}:{self.actors[actor].port}"

    def push_bind(self) -> str:
        """Endpoint the segmenter's PUSH (segments to ASR) binds."""
        return f"tcp://{self.host_of('segmenter').bind}:{self.actors['segmenter'].push_port}"

    def push_connect(self) -> str:
        """Endpoint ASR workers connect their PULL socket to."""
        return f"tcp://{self.host_of('segmenter').address}:{self.actors['segmenter'].push_port}"

    def events_bind(self, host: str) -> str:
        """Endpoint the event listener of `host` binds."""
        return f"tcp://{self.hosts[host].bind}:{self.hosts[host].events_port}"

    def events_connect(self, host: str) -> str:
        """Endpoint a watcher connects to for `host`'s actor process states."""
        return f"tcp://{self.hosts[host].address}:{self.hosts[host].events_port}"

    def hosts_in_use(self) -> list[str]:
        """Hosts that run at least one actor."""
        return [h for h in self.hosts if self.actors_on(h)]

    def actors_on(self, host: str) -> list[str]:
        """Actors placed on `host`, in pipeline order."""
        return [a for a in ACTOR_NAMES if self.actors[a].host == host]

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


def _table(where: str, value) -> dict:
    if not isinstance(value, dict):
        raise TopologyError(f"{where} = {value!r:.40} must be a table")
    return value


def _unknown(where: str, keys, allowed) -> None:
    for key in keys:
        if key not in allowed:
            raise TopologyError(f"{where}: unknown key {key!r}; allowed keys: "
                                f"{', '.join(allowed)}")


def _known(stage: str, engine: str, where: str) -> None:
    """Refuse an engine the manifest does not name (nothing is imported)."""
    if engine not in manifest.names(stage):
        raise TopologyError(f"{where} = {engine!r} is not one of: "
                            f"{', '.join(manifest.names(stage))}")


def _located(where: str, exc: ValueError) -> TopologyError:
    """The settings error `exc` of the table at `where` (file: table), as one line."""
    text = str(exc)
    return TopologyError(f"{where}{': ' if text.startswith('unknown key') else '.'}{text}")


def _actor_config(name: str, table: dict, src_lang: str, tgt_lang: str, where: str):
    try:
        config = CONFIG_TYPES[name].check(table)
        config.src_lang = config.src_lang or src_lang
        config.tgt_lang = config.tgt_lang or tgt_lang
    except ValueError as exc:
        raise _located(where, exc) from None
    return config




def parse(raw: dict, source: str = "<topology>", host: str | None = None,
          check_engine: EngineCheck | None = None) -> Topology:
    """Validate a topology already read from TOML, for `host` (None: for every host).

    Engine names are checked against the manifest; `check_engine` (if given) constructs the
    engines of actors placed on `host`, and checks the others by name only: this is the one
    place that decides which engines a process imports.
    """
    _unknown(source, raw, TOP_KEYS)
    try:
        pipeline = PipelineTable.check(_table(f"{source}: pipeline", raw.get("pipeline", {})))
    except ValueError as exc:
        raise _located(f"{source}: pipeline", exc) from None
    src_lang, tgt_lang, max_lag_s = pipeline.src_lang, pipeline.tgt_lang, pipeline.max_lag_s
    hosts = {}
    for name, table in _table(f"{source}: hosts", raw.get("hosts", {})).items():
        try:
            entry = HostTable.check(_table(f"{source}: hosts.{name}", table))
        except ValueError as exc:
            raise _located(f"{source}: hosts.{name}", exc) from None
        hosts[name] = Host(name, entry.address, entry.bind or entry.address, entry.events_port,
                           entry.public_key, entry.secret_key, tuple(entry.allow))
    if not hosts:
        raise TopologyError(f"{source}: no [hosts.NAME] table; add one, e.g. [hosts.local]")
    if host is not None and host not in hosts:
        raise TopologyError(f"{source}: --host {host!r} is not one of: {', '.join(hosts)}")
    tables = _table(f"{source}: actors", raw.get("actors", {}))
    _unknown(f"{source}: actors", tables, ACTOR_NAMES)
    actors = {}
    for name in ACTOR_NAMES:
        if name not in tables:
            raise TopologyError(f"{source}: missing table [actors.{name}]")
        where = f"{source}: actors.{name}"
        actors[name] = _actor_config(name, _table(where, tables[name]), src_lang, tgt_lang, where)
        if actors[name].host not in hosts:
            raise TopologyError(f"{where}.host = {actors[name].host!r} is not one of: "
                                f"{', '.join(hosts)}")
        if isinstance(actors[name], EngineConfig):
            config = actors[name]
            _known(name, config.engine, f"{where}.engine")
            if getattr(config, "backlog_engine", ""):
                _known(name, config.backlog_engine, f"{where}.backlog_engine")
            if check_engine is not None:
                check_engine(name, config, where, host in (None, config.host))
    ports: dict[tuple[str, int], str] = {}
    for name, entry in hosts.items():
        if not any(config.host == name for config in actors.values()):
            continue   # runs no actor, so no event listener either
        if (entry.address, entry.events_port) in ports:
            raise TopologyError(f"{source}: hosts.{name}.events_port = {entry.events_port} is "
                                f"already used by {ports[(entry.address, entry.events_port)]} "
                                "at the same address; give each host its own")
        ports[(entry.address, entry.events_port)] = f"hosts.{name}.events_port"
    for name, config in actors.items():
        used = [("port", config.port)]
        if name == "segmenter":
            used.append(("push_port", config.push_port))
        for key, port in used:
            addr = hosts[config.host].address
            if (addr, port) in ports:
                raise TopologyError(f"{source}: actors.{name}.{key} = {port} is already used by "
                                    f"{ports[(addr, port)]} on host {config.host}")
            ports[(addr, port)] = f"actors.{name}"
    clients = _table(f"{source}: clients", raw.get("clients", {}))
    for name, key in clients.items():
        if not isinstance(key, str) or not security.valid_public_key(key):
            raise TopologyError(f"{source}: clients.{name} = {key!r} is not a CURVE public key "
                                f"(40 Z85 characters: `voxweft keys --client {name}` prints "
                                "it)")
    return Topology(source, src_lang, tgt_lang, hosts, actors, raw, float(max_lag_s),
                    dict(clients), host, check_engine)


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
    return parse(raw, str(path), host, check_engine)
