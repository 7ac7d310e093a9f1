"""An interactive attention explorer (ipywidgets), driven by the student's own function.

The explorer does not compute attention itself: it calls the ``attention(Q, K, V, mask)``
the student wrote, so it shows *their* implementation. Until that function is written it
says so instead of drawing. Convention: a mask is True where attention is allowed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["attention_explorer"]

AttentionFn = Callable[..., tuple]


def _presets(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    identical_keys = np.repeat(K[:1], len(K), axis=0)  # (T, d_k): every key equals key 0
    return {
        "lesson": (Q, K, V),
        "large scores (queries x 8)": (8.0 * Q, K, V),
        "identical keys": (Q, identical_keys, V),
    }


def attention_explorer(
    attention_fn: AttentionFn,
    tokens: Sequence[str],
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    limit: float = 10.0,
):
    """Build the explorer widget.

    Args:
        attention_fn: the student's ``attention(Q, K, V, mask=None) -> (out, weights)``, which
            divides by sqrt(d_k). The "scale" toggle is off by feeding it Q * sqrt(d_k).
        tokens: T token labels for both axes.
        Q: (T, d_k) queries, K: (T, d_k) keys, V: (T, d_v) values: the starting entries.
        limit: range of each entry's slider.

    Returns:
        An ipywidgets VBox; display it as the last expression of a cell.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .plotting import attention_heatmap

    T = len(tokens)
    mats = {"Q": np.array(Q, float), "K": np.array(K, float), "V": np.array(V, float)}
    sliders: dict[str, list[list[widgets.FloatSlider]]] = {}
    for name, m in mats.items():
        sliders[name] = [
            [
                widgets.FloatSlider(value=float(m[i, j]), min=-limit, max=limit, step=0.1,
                                    description=f"{name}[{tokens[i]}][{j}]",
                                    continuous_update=False, layout=widgets.Layout(width="340px"),
                                    style={"description_width": "100px"})
                for j in range(m.shape[1])
            ]
            for i in range(T)
        ]
    scale = widgets.Checkbox(value=True, description="divide by sqrt(d_k)")
    causal = widgets.Checkbox(value=False, description="causal mask")
    preset = widgets.Dropdown(options=list(_presets(*mats.values())), description="preset")
    out = widgets.Output()

    def current(name: str) -> np.ndarray:
        return np.array([[s.value for s in row] for row in sliders[name]])  # (T, d)

    def redraw(*_):
        q, k, v = current("Q"), current("K"), current("V")
        d_k = q.shape[1]
        q_in = q if scale.value else q * np.sqrt(d_k)  # (T, d_k): undo the student's scale
        mask = np.tril(np.ones((T, T), dtype=bool)) if causal.value else None  # (T, T) True = allowed
        with out:
            out.clear_output(wait=True)
            try:
                _, weights = attention_fn(q_in, k, v, mask=mask)
            except NotImplementedError:
                print("Implement attention(Q, K, V, mask) above, run its cell, then come back here.")
                return
            fig, ax = plt.subplots(figsize=(4.6, 3.6))
            title = ("scaled" if scale.value else "unscaled") + (", causal" if causal.value else "")
            attention_heatmap(weights, tokens, ax=ax, title=title)
            plt.show()

    def apply_preset(change):
        q, k, v = _presets(*mats.values())[change["new"]]
        for name, m in zip("QKV", (q, k, v)):
            for i, row in enumerate(sliders[name]):
                for j, s in enumerate(row):
                    s.unobserve(redraw, "value")
                    s.value = float(np.clip(m[i, j], -limit, limit))
                    s.observe(redraw, "value")
        redraw()

    for rows in sliders.values():
        for row in rows:
            for s in row:
                s.observe(redraw, "value")
    scale.observe(redraw, "value")
    causal.observe(redraw, "value")
    preset.observe(apply_preset, "value")

    # One tab per matrix, one row of sliders per token: a row is d sliders wide, so it fits a
    # notebook column at the default width (three matrices side by side did not).
    tabs = widgets.Tab(children=[widgets.VBox([widgets.HBox(row) for row in sliders[name]]) for name in "QKV"])
    for i, title in enumerate(("Q (queries)", "K (keys)", "V (values)")):
        tabs.set_title(i, title)
    box = widgets.VBox([widgets.HBox([preset, scale, causal]), tabs, out])
    redraw()
    display(box)
    return None
