"""Attention heat maps shared by every lab, drawn with seaborn.

Convention: a weight matrix is drawn with queries as rows (y axis, top to bottom) and keys
as columns (x axis), the way it is indexed: ``weights[i, j]`` is how much query ``i``
reads from key ``j``. Colours run from 0 to 1 unless the caller says otherwise, so maps
from different cells can be compared by eye; the panels of one ``heatmap_grid`` always share
one colour scale and one colour bar.

Cells are drawn by ``seaborn.heatmap``: cell ``(i, j)`` covers ``[j, j + 1] x [i, i + 1]`` in
data coordinates, so a line at ``x = c`` falls exactly between key ``c - 1`` and key ``c``
(lab 6 draws its tile edges that way). seaborn (with pandas) takes about 2 s to import on a
cold interpreter; graded kernels are forks of a server that imported it once
(``mlbook_kernel.forkserver``), so grading does not pay it per notebook.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from .checks import as_array

__all__ = ["attention_heatmap", "heatmap_grid", "curves"]

_FULL_LABELS = 20  # up to this many rows (columns) every one is labelled; beyond, every n-th
_CELL_LINES = 24  # up to this many rows and columns, thin white lines separate the cells


def _matrix(weights: Any) -> np.ndarray:
    """(T_q, T_k) float array; leading axes of size 1 squeezed away."""
    w = as_array(weights)
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim == 1:
        raise ValueError(f"attention_heatmap draws one (T_q, T_k) matrix; got shape {w.shape} "
                         "(a single row is w[None, :])")
    if w.ndim != 2:
        raise ValueError(f"attention_heatmap draws one (T_q, T_k) matrix; got shape {w.shape}")
    return np.asarray(w, dtype=float)


def _labels(n: int, labels: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """Tick positions (cell centres) and their labels: all of them up to 20, else every n-th."""
    step = -(-n // _FULL_LABELS)
    where = np.arange(0, n, step)
    names = [str(labels[i]) for i in where] if labels is not None else [str(i) for i in where]
    return where + 0.5, names


def attention_heatmap(
    weights: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap: str = "viridis",
    colorbar: bool = True,
    fmt: str = ".3f",
    cbar_ax: plt.Axes | None = None,
) -> plt.Axes:
    """Draw one attention matrix as a labelled heat map (``seaborn.heatmap``).

    Args:
        weights: (T_q, T_k) weights (NumPy, torch or nested lists). A leading axis of size 1
            is squeezed away, so a (1, 1, T_q, T_k) tensor from a batched model also works.
        query_labels: T_q tick labels for the rows; positions 0..T_q-1 when omitted.
        key_labels: T_k tick labels for the columns; ``query_labels`` when omitted and T_q == T_k.
        ax: the axes to draw on; a new figure when omitted.
        title: the axes title.
        annotate: write each value in its cell; by default only for maps up to 10 x 10.
        vmin, vmax: colour range; ``None`` lets the data decide (for scores rather than weights).
        cmap: a matplotlib colour map name.
        colorbar: draw the colour bar.
        fmt: format of the annotations.
        cbar_ax: draw the colour bar into these axes (``heatmap_grid`` shares one this way).

    Returns:
        The matplotlib axes, for further decoration. Cell (i, j) spans x in [j, j + 1] and
        y in [i, i + 1] (row 0 at the top).
    """
    w = _matrix(weights)
    t_q, t_k = w.shape
    if key_labels is None and query_labels is not None and t_q == t_k:
        key_labels = query_labels
    for labels, n, axis in ((query_labels, t_q, "query_labels"), (key_labels, t_k, "key_labels")):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{axis} has {len(labels)} labels for {n} {'rows' if axis[0] == 'q' else 'columns'}")
    if annotate is None:
        annotate = max(t_q, t_k) <= 10
    own_figure = ax is None
    if own_figure:
        size = min(1.6 + 0.55 * t_k, 9.0), min(0.8 + 0.5 * t_q, 8.0)
        _, ax = plt.subplots(figsize=(max(size[0], 3.6), max(size[1], 2.6)))
    small = max(t_q, t_k) <= _CELL_LINES
    sns.heatmap(
        w, ax=ax, vmin=vmin, vmax=vmax, cmap=cmap, square=small,
        annot=bool(annotate), fmt=fmt, annot_kws={"fontsize": 8},
        linewidths=0.5 if small else 0.0, linecolor="white",
        cbar=colorbar, cbar_ax=cbar_ax if colorbar else None,
        cbar_kws={} if cbar_ax is not None else {"fraction": 0.046, "pad": 0.04},
        xticklabels=False, yticklabels=False,
    )
    x_at, x_names = _labels(t_k, key_labels)
    y_at, y_names = _labels(t_q, query_labels)
    long_keys = max(map(len, x_names), default=0) > 4
    ax.set_xticks(x_at, x_names, rotation=45 if long_keys else 0, ha="right" if long_keys else "center",
                  rotation_mode="anchor" if long_keys else "default", fontsize=7 if len(x_names) > 12 else None)
    ax.set_yticks(y_at, y_names, rotation=0, va="center", fontsize=7 if len(y_names) > 12 else None)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    if own_figure:
        ax.figure.tight_layout()
    return ax


def heatmap_grid(
    maps: Mapping[str, Any],
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ncols: int | None = None,
    **kwargs: Any,
) -> plt.Figure:
    """Draw several attention matrices side by side, one titled panel each, on one colour scale.

    Every panel uses the same colour range (0 to 1 by default; with ``vmin=None`` or
    ``vmax=None``, the smallest or largest value over all the maps) and the grid has a single
    colour bar, so equal colours mean equal numbers in every panel.

    Args:
        maps: title -> (T_q, T_k) weights, drawn in insertion order.
        query_labels, key_labels: shared tick labels (see ``attention_heatmap``).
        ncols: panels per row; all in one row by default (at most 4).
        **kwargs: passed to ``attention_heatmap`` (``annotate``, ``vmin``, ``vmax``,
            ``colorbar``, ...).

    Returns:
        The figure.
    """
    matrices = {title: _matrix(w) for title, w in maps.items()}
    n = len(matrices)
    ncols = ncols or min(n, 4)
    nrows = -(-n // ncols)
    vmin, vmax = kwargs.pop("vmin", 0.0), kwargs.pop("vmax", 1.0)
    finite = [m[np.isfinite(m)] for m in matrices.values()]
    finite = np.concatenate(finite) if finite else np.zeros(0)
    if vmin is None:
        vmin = float(finite.min()) if finite.size else 0.0
    if vmax is None:
        vmax = float(finite.max()) if finite.size else 1.0
    colorbar = kwargs.pop("colorbar", True)
    rows_high = max((m.shape[0] for m in matrices.values()), default=1)
    cols_wide = max((m.shape[1] for m in matrices.values()), default=1)
    panel_height = min(3.6, 1.5 + 0.4 * rows_high)  # a one-row map gets a short panel
    panel_width = min(4.2, 2.2 + 0.5 * cols_wide)  # and a three-key map a narrow one
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_width * ncols + (0.6 if colorbar else 0.0), panel_height * nrows),
                             squeeze=False)
    panels = list(axes.flat)
    # seaborn.heatmap draws the whole figure once per call (to see whether tick labels overlap).
    # Drawn naively, panel k pays for the k - 1 before it, each laid out again: a 4-panel grid
    # took 1.08 s of CPU instead of 0.81 s with matplotlib alone. So while one panel is drawn the
    # others are hidden, and the layout is solved once, at the end.
    for ax, (title, w) in zip(panels, matrices.items()):
        for other in panels:
            other.set_visible(other is ax)
        attention_heatmap(w, query_labels, key_labels, ax=ax, title=title, vmin=vmin, vmax=vmax,
                          colorbar=False, **kwargs)
    for i, ax in enumerate(panels):
        ax.set_visible(i < n)
    fig.set_layout_engine("constrained")
    if colorbar and n:
        fig.colorbar(panels[0].collections[0], ax=panels[:n] if nrows > 1 else panels[:ncols],
                     shrink=0.9 if nrows > 1 else 1.0, aspect=25 * nrows, pad=0.02)
    return fig


def curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    ax: plt.Axes | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> plt.Axes:
    """Plot named y-series against a shared x, with markers and a legend."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, y in series.items():
        ax.plot(x, as_array(y), marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax
