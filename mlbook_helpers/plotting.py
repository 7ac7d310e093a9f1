"""Attention heat maps shared by every lab.

Convention: a weight matrix is drawn with queries as rows (y axis, top to bottom) and keys
as columns (x axis), the way it is indexed: ``weights[i, j]`` is how much query ``i``
reads from key ``j``. Colours run from 0 to 1 unless the caller says otherwise, so maps
from different cells can be compared by eye.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import seaborn as sns

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
    if annotate is None:
        annotate = max(t_q, t_k) <= 10
    if ax is None:
        size = min(1.0 + 0.55 * t_k, 9.0), min(0.8 + 0.5 * t_q, 8.0)
        _, ax = plt.subplots(figsize=(max(size[0], 3.2), max(size[1], 2.6)))
    sns.heatmap(
        w,
        ax=ax,
        vmin=vmin,
        vmax=vmax,
        cmap=cmap,
        annot=annotate,
        fmt=fmt,
        cbar=colorbar,
        square=t_q <= 24 and t_k <= 24,
        xticklabels=list(key_labels) if key_labels is not None else "auto",
        yticklabels=list(query_labels) if query_labels is not None else "auto",
        linewidths=0.5 if max(t_q, t_k) <= 24 else 0.0,
        linecolor="white",
    )
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.tick_params(axis="y", rotation=0)
    if title:
        ax.set_title(title)
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
