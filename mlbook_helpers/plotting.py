"""Attention heat maps shared by every lab.

Convention: a weight matrix is drawn with queries as rows (y axis, top to bottom) and keys
as columns (x axis), the way it is indexed: ``weights[i, j]`` is how much query ``i``
reads from key ``j``. Colours run from 0 to 1 unless the caller says otherwise, so maps
from different cells can be compared by eye.

Drawn with matplotlib alone (seaborn's look, without its pandas import: about 2 s saved in
every notebook that plots, which adds up over a class of graded notebooks).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from .checks import as_array

__all__ = ["attention_heatmap", "heatmap_grid", "curves"]


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
) -> plt.Axes:
    """Draw one attention matrix as a labelled heat map.

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

    Returns:
        The matplotlib axes, for further decoration.
    """
    w = as_array(weights)
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 2:
        raise ValueError(f"attention_heatmap draws one (T_q, T_k) matrix; got shape {w.shape}")
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
    image = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal" if max(t_q, t_k) <= 24 else "auto",
                      interpolation="nearest")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if max(t_q, t_k) <= 24:  # thin white grid between cells, as in seaborn
        ax.set_xticks(np.arange(t_k + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(t_q + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
    step_x, step_y = max(1, t_k // 16), max(1, t_q // 16)
    ax.set_xticks(np.arange(0, t_k, step_x))
    ax.set_yticks(np.arange(0, t_q, step_y))
    ax.set_xticklabels(list(key_labels)[::step_x] if key_labels is not None else np.arange(0, t_k, step_x),
                       rotation=45 if key_labels is not None and max(map(len, map(str, key_labels))) > 4 else 0,
                       ha="right" if key_labels is not None and max(map(len, map(str, key_labels))) > 4 else "center")
    ax.set_yticklabels(list(query_labels)[::step_y] if query_labels is not None else np.arange(0, t_q, step_y))
    if annotate:
        lo = np.nanmin(w) if vmin is None else vmin
        hi = np.nanmax(w) if vmax is None else vmax
        middle = (lo + hi) / 2
        for i in range(t_q):
            for j in range(t_k):
                ax.text(j, i, format(w[i, j], fmt), ha="center", va="center", fontsize=8,
                        color="black" if w[i, j] > middle else "white")
    for spine in ax.spines.values():
        spine.set_visible(False)
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
    """Draw several attention matrices side by side, one titled panel each.

    Args:
        maps: title -> (T_q, T_k) weights, drawn in insertion order.
        query_labels, key_labels: shared tick labels (see ``attention_heatmap``).
        ncols: panels per row; all in one row by default (at most 4).
        **kwargs: passed to ``attention_heatmap`` (``annotate``, ``vmin``, ``vmax`` ...).

    Returns:
        The figure.
    """
    n = len(maps)
    ncols = ncols or min(n, 4)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.6 * nrows), squeeze=False)
    for ax, (title, w) in zip(axes.flat, maps.items()):
        attention_heatmap(w, query_labels, key_labels, ax=ax, title=title, **kwargs)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
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
