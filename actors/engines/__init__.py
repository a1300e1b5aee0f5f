"""The engines: which exist for each stage, what each needs installed, which languages it does.

Every engine of a stage lives in its own file under `actors/engines/<stage>/`, behind that
stage's interface (`AsrEngine`, `MtEngine`, `TtsEngine` in the stage package). The manifest
(`actors.settings.manifest`) is the one place that names them; this registry builds them.
Engine modules keep heavy imports inside `load()`, and the registry imports a module only
when its engine is asked for, so constructing an engine (which validates its settings) is
cheap and an engine whose packages are missing costs nothing until a topology uses it.

`offers()` / `languages_report()` / `check_pair()` answer "which source -> target pairs can this
installation interpret, and with which engines", without loading any model (well under a
second): a Python package is looked up with importlib (not imported), a program on PATH.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import shutil
from collections.abc import Iterable, Iterator
from typing import Any

from voxweft.actors import budget
from voxweft.actors.settings.actors import EngineConfig
from voxweft.actors.settings.base import StartupError
from voxweft.actors.settings.manifest import CANDIDATES, ENGINES, INSTALL, STAGES, names
from voxweft.actors.settings.topology import TopologyError

__all__ = ["CANDIDATES", "ENGINES", "STAGES", "names"]   # the manifest, re-exported


def engine_class(stage: str, name: str) -> type:
    """The class of engine `name` of `stage`; KeyError naming the choices if there is none."""
    if name not in ENGINES.get(stage, {}):
        raise KeyError(f"{stage} engine {name!r} is not one of: {', '.join(ENGINES[stage])}")
    module, cls = ENGINES[stage][name].split(":")
    return getattr(importlib.import_module(module), cls)


def build(stage: str, name: str, settings: dict[str, Any]):
    """Construct (never load) an engine: validates its name and settings (KeyError/ValueError)."""
    return engine_class(stage, name)(**settings)


def installed(packages: Iterable[str], programs: Iterable[str]) -> bool:
    """Whether these Python packages and programs are all installed (nothing is imported)."""
    try:
        have = all(importlib.util.find_spec(p) is not None for p in packages)
    except (ImportError, ValueError):
        return False
    return have and all(shutil.which(p) for p in programs)


@contextlib.contextmanager
def importing(stage: str, engine: str, backend: int = 0) -> Iterator[None]:
    """Run an engine's imports; one that fails is a StartupError saying what to install.

    The command comes from the manifest (`INSTALL`, one per backend as in `ENGINE_NEEDS`), so
    the manifest is the one place that knows it and every engine says it the same way. A
    context rather than a function taking a module's name: engines import names from
    submodules, and VoxCPM2 its model through its own loader (`voxcpm2_model_class`).
    """
    try:
        yield
    except ImportError as exc:   # ModuleNotFoundError too
        raise StartupError(f"{engine} is not installed ({exc}); install it: "
                           f"{INSTALL[(stage, engine)][backend]}") from None


def label(engine: str, settings: dict) -> str:
    """`engine (model)` for an engine with a model setting, else the engine's name."""
    model = settings.get("model") or settings.get("model_path")
    return f"{engine} ({model})" if model else engine


def construct(stage: str, name: str, settings: dict):
    """Construct (never load) an engine; None if it does not exist or does not fit here."""
    try:
        return build(stage, name, settings)
    except (KeyError, ValueError, TypeError):
        return None


def serves(stage: str, engine, src: str, tgt: str) -> bool:
    """Whether a constructed engine can do its stage's part of src->tgt."""
    if stage == "mt":
        return (src, tgt) in engine.installed_pairs()
    return (src if stage == "asr" else tgt) in engine.languages()


def offers(topology=None) -> dict[str, list[tuple[str, frozenset]]]:
    """Per stage, (label, what it offers): languages for asr/tts, pairs for mt.

    The installed CANDIDATES, plus the engines of `topology` (a Topology or its mapping of
    actor configs), such as a custom Whisper folder or a CTranslate2 model.
    """
    found: dict[str, list[tuple[str, frozenset]]] = {stage: [] for stage in STAGES}
    seen: set[tuple[str, str]] = set()
    entries = [(s, e, dict(cfg)) for s, e, cfg, pk, pr in CANDIDATES if installed(pk, pr)]
    if topology is not None:
        for stage in STAGES:
            config = getattr(topology, "actors", topology).get(stage)
            if config is not None and getattr(config, "engine", ""):
                entries.append((stage, config.engine, dict(config.settings)))
    for stage, name, settings in entries:
        key = (stage, label(name, settings))
        if key in seen:
            continue
        engine = construct(stage, name, settings)
        if engine is None:
            continue
        seen.add(key)
        if stage == "mt":
            # installed_pairs(), not pairs(): apertium's pairs() is every pair when the
            # program is missing; its installed_pairs() asks the files.
            found[stage].append((key[1], frozenset(engine.installed_pairs())))
        else:
            found[stage].append((key[1], frozenset(engine.languages())))
    return found


def languages_report(topology=None) -> list[dict]:
    """Every possible (src, tgt) with the engines able to do each stage, sorted by pair.

    Each item: {"src", "tgt", "asr": [labels], "mt": [labels], "tts": [labels]}; a label is
    the engine name, with its model when it has one ("faster-whisper (tiny.en)").
    """
    found = offers(topology)
    rows = []
    for src, tgt in sorted({p for _label, ps in found["mt"] for p in ps}):
        row = {"src": src, "tgt": tgt,
               "asr": [lab for lab, langs in found["asr"] if src in langs],
               "mt": [lab for lab, ps in found["mt"] if (src, tgt) in ps],
               "tts": [lab for lab, langs in found["tts"] if tgt in langs]}
        if row["asr"] and row["tts"]:
            rows.append(row)
    return rows


def check_pair(src: str, tgt: str, topology=None) -> None:
    """Raise ValueError listing the possible pairs when this installation cannot do src->tgt."""
    rows = languages_report(topology)
    if any(r["src"] == src and r["tgt"] == tgt for r in rows):
        return
    possible = "; ".join(f"{r['src']}->{r['tgt']} (asr {r['asr'][0]}, mt {r['mt'][0]}, "
                         f"tts {r['tts'][0]})" for r in rows) or "none"
    raise ValueError(f"this installation cannot interpret {src}->{tgt}; possible pairs: "
                     f"{possible} (see `voxweft languages`)")


# --- the topology's engines, checked (the topology model calls this back) ---------------

def _built(stage: str, engine: str, settings: dict, where: str, key: str):
    """Construct (not load) an engine of this host; `key` names its settings table."""
    try:
        return build(stage, engine, settings)
    except ImportError as exc:   # ModuleNotFoundError too: a package missing on this machine
        raise TopologyError(f"{where}: engine {engine!r} cannot be imported on this machine "
                            f"({exc}); install its packages here, or if the actor runs on "
                            "another host, pass --host NAME (this machine's) so only this "
                            "host's engines are checked") from None
    except (ValueError, TypeError) as exc:
        raise TopologyError(f"{where}.{key}: {exc}") from None


def check_engine(name: str, config: EngineConfig, where: str, here: bool = True):
    """If the actor runs `here`, construct (not load) its engines: settings and languages checked.

    Construction imports the engine's module and checks its settings and languages; an actor
    placed on another host is checked by name only, so this host needs none of its packages.
    Returns the engine constructed (None when not `here`).
    """
    backlog = getattr(config, "backlog_engine", "")
    if not here:
        return None
    engine = _built(name, config.engine, config.engine_settings(), where, "settings")
    if backlog:
        _built(name, backlog, config.backlog_settings, where, "backlog_settings")
    if name == "mt":
        ok, wanted, offered = ((config.src_lang, config.tgt_lang) in engine.pairs(),
                               f"{config.src_lang}->{config.tgt_lang}",
                               sorted(f"{s}->{t}" for s, t in engine.pairs()))
    else:
        lang = config.src_lang if name == "asr" else config.tgt_lang
        ok, wanted, offered = lang in engine.languages(), lang, sorted(engine.languages())
    if not ok:
        msg = f"{where}: engine {config.engine!r} cannot do {wanted}; it offers: " \
              f"{', '.join(offered)}"
        # Add what this installation can do instead (never an error on its own: on a
        # two-host topology the other host's engines need not be installed here).
        try:
            check_pair(config.src_lang, config.tgt_lang)
        except ValueError as exc:
            msg += f"; {exc}"
        raise TopologyError(msg)
    return engine


# --- what the topology's engines need of this host, before anything loads ----------------

def memory_needs(topology, host: str) -> dict[str, int]:
    """MB each engine actor placed on `host` needs once loaded (with its backlog engine)."""
    needs = {}
    for stage in STAGES:
        config = topology.actors[stage]
        if config.host != host:
            continue
        mb = build(stage, config.engine, config.engine_settings()).memory_mb()
        backlog = getattr(config, "backlog_engine", "")
        if backlog:
            mb += build(stage, backlog, config.backlog_settings).memory_mb()
        needs[stage] = mb
    return needs


def memory_check(topology, host: str, label: str = "") -> tuple[bool, str]:
    """(fits, one line): the memory `host`'s actors need against this machine's (budget)."""
    total, available = budget.host_memory_mb()
    return budget.memory_verdict(topology, host, memory_needs(topology, host), total,
                                 available, label)
