"""What every view of a ``voxweft bench`` report shares: its schema and its figures' text.

The Markdown (`report`), the plots (`reportplots`) and the comparison (`reportcompare`) read
a report through `get` and `as_dict`, which tolerate missing sections and None values, and
write its figures with `fmt`: a missing figure renders as "-".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

SCHEMA = "voxweft-bench/2"

#: The headline latencies, (report key, label): in the Markdown's table and compared.
HEADLINES = (("speech_end_to_first_voiced_s", "speech end -> first voiced audio"),
             ("speech_end_to_first_audio_s", "speech end -> first audio"),
             ("segment_to_first_audio_s", "segment -> first audio"))


def get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or None as soon as a level is missing or not a dict."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def as_dict(x: Any) -> dict:
    """`x` when it is a dict, else an empty one."""
    return x if isinstance(x, dict) else {}


def fmt(x: Any, nd: int = 3) -> str:
    """A value for a table cell: "-" for None, yes/no for booleans, ``nd`` decimals for floats."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:.{nd}f}"
    if isinstance(x, (list, tuple)):
        return ", ".join(fmt(v, nd) for v in x) or "-"
    return str(x).replace("|", "/").replace("\n", " ") or "-"


def table(headers: list[str], rows: Iterable[list[Any]], nd: int = 3) -> list[str]:
    """A Markdown table of `rows` under `headers`, each cell by `fmt`; none without rows."""
    rows = [[fmt(c, nd) for c in row] for row in rows]
    if not rows:
        return []
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def drift(s: Any, unit: str) -> str:
    """A slope of a soak figure per 10 min, its 95 % interval and whether it drifts."""
    s = as_dict(s)
    if s.get("slope_per_10min") is None:
        return f"- (n={fmt(s.get('n'))})"
    mark = "drifting" if s.get("distinguishable_from_zero") else "flat within noise"
    ci = s.get("ci95_per_10min")
    ci = f"{ci:.4g}" if isinstance(ci, (int, float)) else "-"
    return (f"{s['slope_per_10min']:+.4g} ± {ci} {unit}/10 min "
            f"(n={fmt(s.get('n'))}, {mark})")
