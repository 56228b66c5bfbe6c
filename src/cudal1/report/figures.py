"""The report's figures, drawn with matplotlib into PNG bytes (base64 for an HTML page).

Needs the ``report`` extra (``pip install 'cudal1[report]'``). Figures are built on
``matplotlib.figure.Figure`` directly, never through pyplot, so no global backend or figure
registry is touched. Every figure states what it shows when there is nothing to plot (a CPU run
has no speed-of-light numbers; a verify report has no baselines).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cudal1.report.paper import BASELINES, Entry, baselines_seen, gpus, levels


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _empty(ax: Axes, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _speedup_axis(ax: Axes, values: Sequence[float]) -> None:
    """A dashed line at 1.0x; a log scale only where the speedups span more than 10x."""
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    if values and max(values) / min(values) > 10:
        ax.set_yscale("log")


def speedup_distribution(entries: Sequence[Entry]) -> str:
    """Histogram of kept speedups over eager (log scale), one series per GPU."""
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    series = {g: [e.speedup for e in entries if e.gpu == g and e.speedup] for g in gpus(entries)}
    values = [x for xs in series.values() for x in xs]
    if not values:
        _empty(ax, "no correct task")
    else:
        lo, hi = min(values + [1.0]) * 0.9, max(values + [1.0]) * 1.1
        ax.hist(list(series.values()), bins=20, range=(lo, hi), label=list(series), stacked=False)
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("speedup over eager (x)")
        ax.set_ylabel("tasks")
        ax.legend(fontsize="small")
    ax.set_title("speedup distribution")
    return _png(fig)


def level_boxplot(entries: Sequence[Entry]) -> str:
    """Kept speedup per level, one box per level and GPU."""
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    groups = [
        (f"L{lvl}" + (f"\n{g}" if len(gpus(entries)) > 1 else ""), xs)
        for lvl in levels(entries)
        for g in gpus(entries)
        if (xs := [e.speedup for e in entries if e.level == lvl and e.gpu == g and e.speedup])
    ]
    if not groups:
        _empty(ax, "no correct task")
    else:
        ax.boxplot([xs for _, xs in groups], tick_labels=[name for name, _ in groups])
        _speedup_axis(ax, [x for _, xs in groups for x in xs])
        ax.set_ylabel("speedup over eager (x)")
    ax.set_title("speedup per level")
    return _png(fig)


def baseline_boxplot(entries: Sequence[Entry]) -> str:
    """The kept kernel's speedup over eager and over each baseline measured beside it."""
    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    groups: list[tuple[str, list[float]]] = [("eager", [e.speedup for e in entries if e.speedup])]
    for label in baselines_seen(entries):
        xs = [x for e in entries if (x := e.over(label)) is not None]
        if xs:
            groups.append((BASELINES[label].replace(" (", "\n("), xs))
    if not groups[0][1]:
        _empty(ax, "no correct task")
    else:
        ax.boxplot([xs for _, xs in groups], tick_labels=[name for name, _ in groups])
        ax.tick_params(axis="x", labelsize="small")
        _speedup_axis(ax, [x for _, xs in groups for x in xs])
        ax.set_ylabel("kept kernel speedup (x)")
        if len(groups) == 1:
            ax.set_xlabel("no baselines in these results (verify reports have none)")
    ax.set_title("speedup over each baseline")
    return _png(fig)


def sol_scatter(entries: Sequence[Entry]) -> str:
    """Reference against kept kernel, as percent of the device's speed of light."""
    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    points = [
        (e.ref_sol_percent, e.sol_percent, e.gpu) for e in entries if e.sol_percent and e.ref_sol_percent
    ]
    if not points:
        _empty(ax, "no speed-of-light numbers\n(measured on GPUs only)")
    else:
        for g in sorted({p[2] for p in points}):
            ax.scatter([p[0] for p in points if p[2] == g], [p[1] for p in points if p[2] == g], label=g)
        top = max(max(p[0], p[1]) for p in points) * 1.1
        ax.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("reference, % of speed of light")
        ax.set_ylabel("kept kernel, % of speed of light")
        ax.legend(fontsize="small")
    ax.set_title("speed of light")
    return _png(fig)


def report_figures(entries: Sequence[Entry]) -> list[tuple[str, str]]:
    """(caption, base64 PNG) of every figure, in reading order."""
    return [
        ("Distribution of kept speedups over eager", speedup_distribution(entries)),
        ("Kept speedup per level", level_boxplot(entries)),
        ("Kept kernel against each baseline measured in the same run", baseline_boxplot(entries)),
        ("Speed of light: reference against kept kernel", sol_scatter(entries)),
    ]
