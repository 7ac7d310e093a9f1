"""This machine's roofline (lab 6): how fast it computes, how fast it moves bytes, and a plot.

Conventions (stated once, relied on by lab 6's sections on memory traffic):
- Rates are measured on this machine, never looked up. A compute rate is FLOP/s from timing a
  square float32 matrix product (2 n^3 FLOPs: one multiply and one add per multiply-add). A
  bandwidth is bytes/s from timing a copy of a float32 buffer, which reads every byte once and
  writes it once: 2 x the buffer's size moved.
- Each rate is the best of several runs (``measure.best_time``): the run least disturbed by
  other work on the machine. The threads are whatever torch is set to (lab 6 uses one).
- Arithmetic intensity is FLOPs per byte moved to and from memory. On a roofline a computation
  of intensity I can run at most at min(peak, I x bandwidth) FLOP/s; the ridge point,
  peak / bandwidth, separates memory-bound computations (left of it) from compute-bound ones.

This module measures and draws; it computes no attention.
"""

from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
import torch

from mlbook_helpers.measure import best_time

__all__ = ["matmul_rate", "copy_rate", "attainable", "roofline_plot"]


def matmul_rate(n: int = 512, repeat: int = 5) -> float:
    """Measured FLOP/s of an (n, n) @ (n, n) float32 matrix product.

    Args:
        n: matrix size; the product costs 2 n^3 FLOPs.
        repeat: timed runs (the fastest counts), after one warm-up.

    Returns:
        FLOP/s, a float.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)  # (n, n) each
    return 2.0 * n**3 / best_time(torch.mm, a, b, repeat=repeat)


def copy_rate(n_bytes: int, repeat: int = 5) -> float:
    """Measured bytes/s of copying a float32 buffer of ``n_bytes`` into another one.

    Args:
        n_bytes: size of the buffer; the copy moves 2 x n_bytes (read once, written once).
            A buffer that fits in the CPU's caches measures the caches, a much larger one the
            main memory.
        repeat: timed runs (the fastest counts), after one warm-up.

    Returns:
        bytes/s, a float.
    """
    source = torch.ones(max(int(n_bytes) // 4, 1))  # (n_bytes / 4,) float32, touched once
    target = torch.zeros_like(source)  # (n_bytes / 4,)
    return 2.0 * source.numel() * 4 / best_time(target.copy_, source, repeat=repeat)


def attainable(intensity: float, peak: float, bandwidth: float) -> float:
    """The roofline: the most FLOP/s a computation of ``intensity`` FLOPs/byte can reach."""
    return min(peak, intensity * bandwidth)


def roofline_plot(peak: float, bandwidths: Mapping[str, float], points: Mapping[str, float],
                  title: str = "roofline of this machine") -> plt.Axes:
    """Draw one roof per bandwidth and mark each computation on the lowest roof.

    Args:
        peak: FLOP/s, the flat part of every roof.
        bandwidths: name -> bytes/s, one sloped roof each; the smallest is the one points sit on.
        points: name -> arithmetic intensity (FLOPs per byte).
        title: the axes' title.

    Returns:
        The matplotlib Axes (GFLOP/s against FLOPs per byte, both logarithmic).
    """
    lowest = min(bandwidths.values())
    spread = list(points.values()) + [peak / bw for bw in bandwidths.values()]
    x = np.logspace(np.log10(min(spread) / 4), np.log10(max(spread) * 4), 200)  # (200,) FLOPs/byte
    _, ax = plt.subplots(figsize=(6, 4))
    for name, bw in bandwidths.items():
        ax.plot(x, np.minimum(peak, x * bw) / 1e9, label=f"{name}: {bw / 1e9:.0f} GB/s")
    for name, intensity in points.items():
        y = attainable(intensity, peak, lowest) / 1e9
        ax.plot([intensity], [y], "o")
        ax.annotate(name, (intensity, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
