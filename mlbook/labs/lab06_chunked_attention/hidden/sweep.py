"""memory_sweep, the student's sweep for their own table, on probe functions the grader lends.

``memory_sweep`` measures in the kernel with the kernel's ``peak_memory``, by design: that is
the lab's experiment. Its hidden check lends it probe functions built HERE (``kit.lend``: the
kernel gets a stand-in, calls run in the grader), records which inputs each call received, and
compares the sweep's numbers with the kernel's own ``peak_memory`` of the same probe on inputs
made before the call. What stays trusted to the kernel is therefore that cell's measurement
only, and its verdict is about the sweep's own logic (inputs of the right shape, dtype and order
made outside the measured call, one number per T). It can earn nothing for chunked_attention:
the memory points of chunked_attention come from ``memory.check_chunked_memory`` alone, and the
visible ``test_memory_growth``, which reads the kernel's table, counts only when that check
passes too (``COVERED_BY`` in the lab's ``__init__``).
"""

from __future__ import annotations

import numpy as np

from ...kit import ask_array, call_student, data_array, diagnose, fail, fresh_rng, helper, lend, number
from ._common import f32

__all__ = ["PEAK_RTOL", "PEAK_SLACK", "check_memory_sweep"]

# A sweep's peak is the kernel's measurement of the same probe on other inputs of the same shapes: it may differ
# from it by the Python objects made during the call (a few hundred bytes, up to PEAK_SLACK) and by PEAK_RTOL of
# it. The lab's text says so; probes.py's TOLERANCES quotes these constants for mlbook mutate.
PEAK_RTOL = 0.01
PEAK_SLACK = 16_384  # bytes


class _SweepProbe:
    """An attention function lent to the student's memory_sweep; it runs here, in the grader.

    It records the inputs of every call, (shape, dtype) of q, k and v, and answers a (T, T) float64
    array (``square``) or None: what the kernel then allocates for it is decoding that answer.
    """

    def __init__(self, square: bool, largest_T: int):
        self.square, self.largest_T = square, largest_T
        self.calls: list[tuple] = []

    def __call__(self, q=None, k=None, v=None, *extra, **kwargs):
        seen = []
        for x in (q, k, v):
            arr = data_array(x)
            seen.append(None if arr is None else (tuple(arr.shape), str(arr.dtype)))
        self.calls.append((tuple(seen), bool(extra or kwargs)))
        T = seen[0][0][0] if seen[0] is not None and len(seen[0][0]) == 2 else 0
        if self.square and 0 < T <= self.largest_T:  # never answer more than the sweep asked for
            return np.zeros((T, T))
        return None


def _check_probe_calls(probe: _SweepProbe, Ts: list[int], d: int, what: str) -> None:
    """The sweep called attention_fn(q, k, v) with float32 (T, d) inputs, for each T in order."""
    order = []
    for seen, extra in probe.calls:
        if extra:
            fail(what, "attention_fn was called with more than (q, k, v)", "Call attention_fn(q, k, v) only.")
        shapes = [s[0] if s else None for s in seen]
        if any(s is None for s in seen) or len(set(shapes)) != 1 or len(shapes[0]) != 2 or shapes[0][1] != d:
            fail(what, f"attention_fn got q, k, v of shapes {shapes}",
                 "Draw q, k and v of shape (T, d) each, with the d you were given.")
        if {s[1] for s in seen} != {"float32"}:
            fail(what, f"attention_fn got q, k, v of dtypes {[s[1] for s in seen]}", "Draw q, k, v in float32.")
        if not order or order[-1] != shapes[0][0]:
            order.append(shapes[0][0])
    if order != list(Ts):
        fail(what, f"attention_fn was called for T = {order}", "Measure one call for each T of T_values, in order.")


def check_memory_sweep(fn) -> None:
    rng = fresh_rng()
    Ts = sorted(int(t) for t in rng.choice(np.arange(150, 500), size=3, replace=False))
    d = int(rng.integers(24, 65))
    # Probes are built and run here; the kernel's own peak_memory of the same probe, on inputs made
    # before the call, is what a right sweep reports (the kernel's measurement: see the module's docstring).
    kernel_peak = helper("mlbook_helpers.measure:peak_memory")
    slack = PEAK_SLACK  # Python objects made during the call are counted too (a few KiB)
    for label, square in (("a function that returns nothing", False), ("a function that returns a T x T array", True)):
        probe = _SweepProbe(square, max(Ts))
        lent = lend(probe)
        expected = {}
        for T in [Ts[0], *Ts]:  # the first measurement warms the path up and is not used
            q, k, v = (f32(rng, T, d) for _ in range(3))
            expected[T] = number(call_student(kernel_peak, lent, q, k, v, what="peak_memory").bytes,
                                 "the kernel's peak_memory of a probe")
        probe.calls.clear()
        what = f"memory_sweep({label}, T_values={Ts}, d={d})"
        got = ask_array(fn, lent, Ts, d, what=what, shape=(len(Ts),), kind="iuf",
                        hint="Return a list of ints: one measured peak (peak_memory(...).bytes) per T, in order.")
        _check_probe_calls(probe, Ts, d, what)
        for T, b in zip(Ts, got):
            want = expected[T]
            if not (b >= 0 and abs(b - want) <= slack + PEAK_RTOL * want):
                cause = diagnose(b, {"The inputs were allocated inside the measured call: create q, k, v first.":
                                     want + 3 * 4 * T * d}, atol=slack, rtol=PEAK_RTOL)
                fail(f"memory_sweep({label}) at T={T}, d={d}", f"gave {b:,.0f} bytes",
                     cause or "Call peak_memory(attention_fn, q, k, v) on float32 (T, d) inputs made before the "
                              "call, and return its .bytes for each T.")
