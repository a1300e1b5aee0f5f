"""`voxweft languages`: which source -> target pairs this installation can interpret.

The registry (`actors.engines`) knows the engines and what each needs installed; this module
prints its report and fits a topology's engines to a pair (`fit_engines`, for `interpret`).
"""

from __future__ import annotations

import argparse
import json
import sys

from voxweft.actors.engines import CANDIDATES, construct, installed, label, languages_report, serves


def format_report(rows: list[dict]) -> str:
    """One line per pair: `en->pt  asr: ...  mt: ...  tts: ...`."""
    if not rows:
        return "no language pair is fully installed (need an ASR, an MT and a TTS engine)"
    return "\n".join(f"{r['src']}->{r['tgt']}  asr: {', '.join(r['asr'])}  "
                     f"mt: {', '.join(r['mt'])}  tts: {', '.join(r['tts'])}" for r in rows)


def fit_engines(raw: dict, src: str, tgt: str) -> list[str]:
    """Swap each stage engine of a raw topology that cannot do src->tgt.

    The replacement is the first installed engine that can (in the order of CANDIDATES);
    return what was swapped.
    """
    swapped = []
    for stage in ("asr", "mt", "tts"):
        table = raw["actors"][stage]
        settings = {k: v for k, v in table.get("settings", {}).items()}
        current = construct(stage, table.get("engine", ""), settings)
        if current is not None and serves(stage, current, src, tgt):
            continue
        for cand_stage, name, cand, packages, programs in CANDIDATES:
            if cand_stage != stage or not installed(packages, programs):
                continue
            engine = construct(stage, name, dict(cand))
            if engine is not None and serves(stage, engine, src, tgt):
                table["engine"], table["settings"] = name, dict(cand)
                swapped.append(f"{stage}: {label(name, cand)}")
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
        from voxweft.deploy.topology import TopologyError, load

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
