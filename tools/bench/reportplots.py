"""The PNG plots of a ``voxweft bench`` report: the stage timeline and the soak (matplotlib).

matplotlib (Agg backend) and numpy are imported when a plot is drawn, not before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voxweft.tools.bench.reportformat import as_dict, drift, fmt, get


def _stage_names(utterances: list[dict]) -> list[str]:
    names: list[str] = []
    for u in utterances:
        for name in as_dict(get(u, "stages_s")):
            if name not in names:
                names.append(name)
    return names


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(report: dict, path: str | Path) -> None:
    """PNG: one row per utterance, its stages as consecutive bars from its speech end (x = 0)."""
    plt = _pyplot()
    utterances = [u for u in as_dict(report).get("utterances") or [] if isinstance(u, dict)]
    names = _stage_names(utterances)
    cmap = plt.get_cmap("tab20")
    colours = {name: cmap(i % 20) for i, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(11, min(2 + 0.3 * len(utterances), 40)))
    try:
        labelled: set[str] = set()
        for row, u in enumerate(utterances):
            x = 0.0
            for name, seconds in as_dict(u.get("stages_s")).items():
                if not isinstance(seconds, (int, float)) or seconds <= 0:
                    continue
                ax.barh(row, seconds, left=x, height=0.7, color=colours[name],
                        label=None if name in labelled else name)
                labelled.add(name)
                x += seconds
            total = u.get("speech_end_to_first_audio_s")
            if isinstance(total, (int, float)):
                ax.plot([total], [row], marker="|", color="black", markersize=12)
        ax.set_yticks(range(len(utterances)))
        ax.set_yticklabels([str(u.get("utt", i)) for i, u in enumerate(utterances)],
                           fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("seconds after the end of speech")
        ax.set_ylabel("utterance")
        ax.set_title("Per-utterance stage timeline (| = first audio)")
        if not utterances:
            ax.text(0.5, 0.5, "no utterances", ha="center", va="center",
                    transform=ax.transAxes)
        if labelled:
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
        ax.grid(axis="x", alpha=0.3)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def _xy(points: Any) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in points or []:
        if (isinstance(p, (list, tuple)) and len(p) == 2
                and all(isinstance(v, (int, float)) for v in p)):
            xs.append(p[0] / 60)
            ys.append(p[1])
    return xs, ys


def plot_soak(report: dict, path: str | Path) -> None:
    """PNG: latency over the soak (scatter and least-squares line) above RSS per actor."""
    import numpy as np

    plt = _pyplot()
    soak = as_dict(as_dict(report).get("soak"))
    series = as_dict(soak.get("series"))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    try:
        xs, ys = _xy(series.get("latency"))
        ax1.scatter(xs, ys, s=8, alpha=0.6, label="speech end -> first audio")
        if len(xs) >= 2 and max(xs) > min(xs):
            b, a = np.polyfit(xs, ys, 1)
            line = np.array([min(xs), max(xs)])
            ax1.plot(line, a + b * line, color="red",
                     label=f"fit: {drift(soak.get('latency_slope'), 's')}")
        ax1.set_ylabel("latency (s)")
        ax1.set_title(f"Soak ({fmt(soak.get('minutes'), 1)} min)")
        if xs:
            ax1.legend(fontsize=8)
        else:
            ax1.text(0.5, 0.5, "no latency series", ha="center", va="center",
                     transform=ax1.transAxes)
        ax1.grid(alpha=0.3)
        plotted = False
        for actor, points in as_dict(series.get("rss_mb")).items():
            xs, ys = _xy(points)
            if xs:
                ax2.plot(xs, ys, label=str(actor))
                plotted = True
        if plotted:
            ax2.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        else:
            ax2.text(0.5, 0.5, "no RSS series", ha="center", va="center",
                     transform=ax2.transAxes)
        ax2.set_ylabel("RSS (MB)")
        ax2.set_xlabel("minutes since start")
        ax2.grid(alpha=0.3)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
