"""The report's figures, drawn with matplotlib and returned as inline SVG text.

Conventions:
- Every figure is a function of ``LabData`` only, returns SVG text (or None when there is
  nothing to draw), and uses matplotlib's object API (no pyplot state, any backend).
- SVG text stays text (``svg.fonttype: none``); the SVG is stripped of its XML prolog, its
  metadata and its namespace declarations, so the page holds no URL at all (an HTML parser
  needs none of them for inline SVG). Heat maps are vector quads, never embedded images.
- Colour: viridis for fractions (0 = dark purple, 1 = yellow), grey for "no score" (an
  errored or ungraded submission).
- Labs are labelled by their number (``lab01``) to keep axes short.
"""

from __future__ import annotations

import io
import math
import re

import numpy as np
from matplotlib import rc_context
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from mlbook.grading.status import ERROR, GRADED
from mlbook.outputs.report.data import LabData

CMAP = "viridis"
NO_SCORE = "#d0d0d0"
_RC = {"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 9, "figure.dpi": 72}
_STRIP = [
    (re.compile(r"<\?xml[^>]*\?>\s*"), ""),
    (re.compile(r"<!DOCTYPE[^>]*>\s*", re.DOTALL), ""),
    (re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL), ""),
    (re.compile(r'\s+xmlns(:\w+)?="[^"]*"'), ""),
]


def short(lab: str) -> str:
    return lab.split("_", 1)[0]


def to_svg(fig: Figure, name: str, title: str) -> str:
    """Serialise ``fig`` as URL-free inline SVG; ids are salted with ``name`` so figures never collide."""
    buffer = io.StringIO()
    with rc_context({**_RC, "svg.hashsalt": name}):
        fig.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    for pattern, replacement in _STRIP:
        svg = pattern.sub(replacement, svg)
    return svg.replace("<svg ", f'<svg role="img" aria-label="{title}" class="figure" ', 1)


def _figure(width: float, height: float) -> Figure:
    with rc_context(_RC):
        return Figure(figsize=(width, height), layout="constrained")


def score_distribution(labs: list[LabData]) -> str | None:
    """Histogram of graded scores (points, as in the gradebook), one panel per lab."""
    labs = [d for d in labs if d.graded]
    if not labs:
        return None
    cols = min(3, len(labs))
    rows = math.ceil(len(labs) / cols)
    fig = _figure(4.2 * cols, 2.4 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, data in zip(axes, labs):
        scores = [r.score for r in data.graded]
        top = data.max_score or max(scores) or 1.0
        bins = np.linspace(0, top, int(min(top, 10)) + 1)
        ax.hist(scores, bins=bins, color="#3b528b", edgecolor="white")
        median = float(np.median(scores))
        ax.axvline(median, color="#c0392b", lw=1.2)
        ax.annotate(f"median {median:g}", (median, 1), xycoords=("data", "axes fraction"), xytext=(0, 3),
                    textcoords="offset points", ha="center", color="#c0392b", fontsize=8)
        note = f", {len(data.errors)} error(s)" if data.errors else ""
        ax.set_title(f"{short(data.lab)}: {len(scores)} graded{note} (max {top:g})", pad=14)
        ax.set_xlabel("points")
        ax.set_ylabel("students")
        ax.set_xlim(0, top)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(labs):]:
        ax.set_visible(False)
    return to_svg(fig, "scores", "Score distribution per lab")


def pass_rate(data: LabData, cell: str) -> tuple[int, int]:
    """(submissions that earned the cell's full points, graded submissions with that cell)."""
    scored = [r.cells[cell] for r in data.graded if cell in r.cells]
    return sum(c.passed for c in scored), len(scored)


def no_score_cmap():
    """viridis with grey for masked values (no score)."""
    from matplotlib import colormaps

    return colormaps[CMAP].with_extremes(bad=NO_SCORE)


def _colorbar(fig: Figure, mesh, axes, label: str, shrink: float = 0.8) -> None:
    """A colour bar drawn as vector quads (matplotlib rasterizes long ones to an embedded PNG)."""
    bar = fig.colorbar(mesh, ax=axes, label=label, shrink=shrink, aspect=12)
    bar.solids.set_rasterized(False)


def _annotate(ax, values: np.ndarray, labels: list[list[str]]) -> None:
    for (row, col), value in np.ndenumerate(values):
        text = labels[row][col]
        if text:  # viridis is dark below 0.6
            ax.text(col + 0.5, row + 0.5, text, ha="center", va="center", fontsize=8,
                    color="white" if value < 0.6 else "black")


def pass_rates(labs: list[LabData]) -> str | None:
    """Heat map of test cells x labs: the share of graded submissions passing each cell."""
    labs = [d for d in labs if d.graded and d.test_cells]
    if not labs:
        return None
    widest = max(len(d.test_cells) for d in labs)
    fig = _figure(max(6.0, 0.62 * widest + 1.6), 1.7 * len(labs) + 0.4)
    axes = np.atleast_1d(fig.subplots(len(labs), 1, squeeze=False)).ravel()
    norm, mesh = Normalize(0, 1), None
    for ax, data in zip(axes, labs):
        counts = [pass_rate(data, cell) for cell in data.test_cells]
        rates = np.array([[p / n if n else np.nan for p, n in counts]])
        mesh = ax.pcolormesh(np.ma.masked_invalid(rates), cmap=no_score_cmap(), norm=norm, edgecolors="white",
                             linewidth=1)
        _annotate(ax, rates, [[f"{p}/{n}" if n else "" for p, n in counts]])
        ax.set_xticks(np.arange(len(data.test_cells)) + 0.5,
                      [c.removeprefix("test_") for c in data.test_cells], rotation=40, ha="right", fontsize=8)
        ax.set_yticks([0.5], [short(data.lab)])
        ax.set_xlim(0, widest)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
    _colorbar(fig, mesh, list(axes), "pass rate", shrink=1.0)
    return to_svg(fig, "pass-rates", "Pass rate of each test cell, per lab")


def student_cells(data: LabData) -> str | None:
    """Heat map of students x test cells for one lab: the share of each cell's points earned."""
    if not data.results or not data.test_cells:
        return None
    results = sorted(data.results, key=lambda r: r.student)
    values = np.full((len(results), len(data.test_cells)), np.nan)
    labels = []
    for i, r in enumerate(results):
        for j, gid in enumerate(data.test_cells):
            cell = r.cells.get(gid)
            if cell is not None and cell.max_score:
                values[i, j] = (cell.score or 0.0) / cell.max_score
        if r.status == GRADED:
            labels.append(f"{r.student}  {r.score:g}/{r.max_score:g}")
        else:
            labels.append(f"{r.student}  {'ERROR' if r.status == ERROR else 'not graded'}")
    fig = _figure(max(5.0, 0.45 * len(data.test_cells) + 2.5), max(2.0, 0.26 * len(results) + 1.6))
    ax = fig.subplots()
    mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap=no_score_cmap(), norm=Normalize(0, 1),
                         edgecolors="white", linewidth=0.8)
    ax.set_xticks(np.arange(len(data.test_cells)) + 0.5, [c.removeprefix("test_") for c in data.test_cells],
                  rotation=40, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(results)) + 0.5, labels, fontsize=8)
    ax.invert_yaxis()
    ax.tick_params(length=0)
    ax.set_title(f"{data.lab}: share of each test cell's points (grey: no score)")
    _colorbar(fig, mesh, ax, "share of points")
    return to_svg(fig, f"students-{data.lab}", f"{data.lab}: students by test cells")


def grading_times(labs: list[LabData]) -> str | None:
    """Seconds per submission (from the status file), one row of dots per lab; errors as crosses."""
    labs = [d for d in labs if d.graded or d.errors]
    if not labs:
        return None
    fig = _figure(6.5, 0.5 * len(labs) + 1.2)
    ax = fig.subplots()
    rng = np.random.default_rng(0)  # vertical jitter only, fixed so the figure is reproducible
    labelled: set[str] = set()
    for row, data in enumerate(labs):
        for group, marker, colour, label in ((data.graded, "o", "#3b528b", "graded"),
                                             (data.errors, "x", "#c0392b", "error")):
            seconds = [r.seconds for r in group]
            if seconds:
                ax.scatter(seconds, row + rng.uniform(-0.15, 0.15, len(seconds)), marker=marker, color=colour,
                           s=22, label=None if label in labelled else label)
                labelled.add(label)
        if data.graded:
            ax.plot([np.median([r.seconds for r in data.graded])] * 2, [row - 0.3, row + 0.3], color="black", lw=1)
    ax.set_yticks(range(len(labs)), [short(d.lab) for d in labs])
    ax.set_ylim(len(labs) - 0.5, -0.5)
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds per submission (bar: median of graded)")
    fig.legend(loc="outside upper right", ncols=2, fontsize=7, frameon=False)
    return to_svg(fig, "grading-time", "Grading time per submission")
