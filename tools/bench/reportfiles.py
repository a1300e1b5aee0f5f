"""A bench report's files: written at the end of a run, read back to compare two runs.

`report.json` is the report itself; `report.md`, `timeline.png` and `soak.png` are rendered
from it (`report`, `reportplots`). BenchError lives here, the lowest bench module that raises
it (a report that cannot be read), so that `voxweft bench` catches one error for every step.
"""

from __future__ import annotations

import json
from pathlib import Path

from voxweft.tools.bench import report as benchreport
from voxweft.tools.bench.reportplots import plot_soak, plot_timeline


class BenchError(Exception):
    """The bench cannot run as asked; the message says what to do. `code`: exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def write(report: dict, out: Path) -> None:
    """report.json, report.md, timeline.png and (soak) soak.png."""
    # A numpy scalar that slipped into the figures must not cost the run its report.
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False,
                                                default=_plain))
    (out / "report.md").write_text(benchreport.markdown(report), encoding="utf-8")
    plot_timeline(report, out / "timeline.png")
    if report.get("soak"):
        plot_soak(report, out / "soak.png")


def _plain(value):
    """JSON for a numpy scalar (or, failing that, its text)."""
    return value.item() if hasattr(value, "item") else str(value)


def load_report(path: Path) -> dict:
    """A report written by an earlier run."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read bench report {path}: {exc}") from exc
    if not isinstance(report, dict) or "schema" not in report:
        raise BenchError(f"{path} is not a voxweft bench report (no 'schema' key)")
    return report
