"""Per-call cost of the Python layer over the bare C call.

    python python/benchmarks/overhead.py

For 256 and 65,536 LMsys-like sequences (DP 4, CP 8, BucketSize 26K) it times
``Scheduler.plan`` against a raw ctypes ``skrull_schedule`` on pre-built buffers, and
``Plan.layout`` against raw ``skrull_layout_sizes`` + ``skrull_layout_fill`` (every output
array, the gather index included). The Python layer's
own time is measured inside each call (total minus the time spent in the C functions it calls),
so load on a shared machine affects both parts of one call alike. Every number is the best of
many calls (interleaved rounds for the raw and total times): the least disturbed one.
"""

from __future__ import annotations

import ctypes
import time
from typing import Callable

import numpy as np

import skrull
from skrull import _ffi


class _Timed:
    """Wraps a ctypes function, adding the time spent in it to ``spent``."""

    def __init__(self, fn: Callable) -> None:
        self.fn, self.spent = fn, 0.0

    def __call__(self, *args):
        t0 = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.spent += time.perf_counter() - t0


def python_layer_us(call: Callable[[], object], names: list[str], calls: int) -> float:
    """Best over ``calls`` of (wall time of ``call`` - time inside the named C functions)."""
    timed = {name: _Timed(getattr(_ffi.lib, name)) for name in names}
    originals = {name: getattr(_ffi.lib, name) for name in names}
    samples = []
    try:
        for name, t in timed.items():
            setattr(_ffi.lib, name, t)
        for _ in range(calls):
            for t in timed.values():
                t.spent = 0.0
            t0 = time.perf_counter()
            call()
            total = time.perf_counter() - t0
            samples.append((total - sum(t.spent for t in timed.values())) * 1e6)
    finally:
        for name, fn in originals.items():
            setattr(_ffi.lib, name, fn)
    return min(samples)


def best_us(*fns: Callable[[], object], rounds: int) -> list[float]:
    """Per function, its best time per call (µs) over interleaved rounds."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], (time.perf_counter() - t0) * 1e6)
    return best


def lengths_for(n: int) -> np.ndarray:
    rng = np.random.default_rng(20250526)
    return np.exp(rng.uniform(np.log(16), np.log(100_000), n)).astype(np.int64)


def main() -> None:
    print("| sequences | policy | raw `skrull_schedule` | `Scheduler.plan` | Python layer "
          "(numpy int64 / list input) | raw layout | `Plan.layout` | Python layer |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in (256, 65536):
        for policy in ("skrull", "balanced"):
            print(_row(n, policy))


def _row(n: int, policy: str) -> str:
    lengths = lengths_for(n)
    as_list = lengths.tolist()
    s = skrull.Scheduler(4, 8, 26624, policy=policy, max_sequences=n)
    plan = s.plan(lengths)
    u32 = lengths.astype(np.uint32)
    args = (ctypes.byref(s._c_config), _ffi.address(u32), n, s._ws_addr, s._ws_len,
            ctypes.byref(s._out))
    call = _ffi.lib.skrull_schedule
    assert call(*args) == 0
    rounds = 300 if n == 256 else 15
    raw, wrapped = best_us(lambda: call(*args), lambda: s.plan(lengths), rounds=rounds)
    # Scheduler.plan calls skrull_schedule_prepared (its setup made once, at construction).
    py_np = python_layer_us(lambda: s.plan(lengths), ["skrull_schedule_prepared"], rounds)
    py_list = python_layer_us(lambda: s.plan(as_list), ["skrull_schedule_prepared"], rounds)
    lay_raw, lay = best_us(_raw_layout(s, plan), lambda: plan.layout(0, 0, 0), rounds=rounds)
    py_lay = python_layer_us(lambda: plan.layout(0, 0, 0),
                             ["skrull_layout_sizes", "skrull_layout_fill"], rounds)
    return (f"| {n:,} | {policy} | {raw:,.1f} µs | {wrapped:,.1f} µs | {py_np:,.1f} / "
            f"{py_list:,.1f} µs | {lay_raw:,.1f} µs | {lay:,.1f} µs | {py_lay:,.1f} µs |")


def _raw_layout(s: skrull.Scheduler, plan: skrull.Plan) -> Callable[[], None]:
    """A raw sizes + fill call pair for GPU (0, 0, 0) on buffers allocated once."""
    s._fill_layout(plan, 0, 0, 0)  # sizes the layout workspace
    cfg, lengths_addr, n, cplan = plan._c_args
    gpu, (ws_addr, ws_len) = _ffi.skrull_gpu(0, 0, 0), s._layout_ws_args
    args = (cfg, lengths_addr, n, cplan, gpu, ws_addr, ws_len)
    cap = _ffi.skrull_layout_capacity()
    assert _ffi.lib.skrull_layout_sizes(*args, ctypes.byref(cap)) == 0
    arrays = [np.empty(cap.spans, skrull.SPAN_DTYPE)] + [
        np.empty(k, np.int32) for k in (cap.local_cu_seqlens, cap.sharded_cu_seqlens,
                                        cap.sharded_cu_seqlens, cap.sharded_cu_seqlens,
                                        cap.positions)] + [
        np.empty(cap.positions, np.int64), np.empty(cap.local_cu_seqlens, np.int32)]
    rec = _ffi.skrull_layout()
    p = [_ffi.address(a) for a in arrays]
    out = _ffi.skrull_layout_buffers(
        ctypes.sizeof(_ffi.skrull_layout_buffers), 0, p[0], cap.spans,
        p[1], cap.local_cu_seqlens, p[2], cap.sharded_cu_seqlens, p[3], cap.sharded_cu_seqlens,
        p[4], cap.sharded_cu_seqlens, p[5], cap.positions, ctypes.addressof(rec),
        p[6], cap.positions, p[7], cap.local_cu_seqlens)  # gather index, local padded
    sizes, fill = _ffi.lib.skrull_layout_sizes, _ffi.lib.skrull_layout_fill

    def run() -> None:
        assert arrays and rec  # the C call writes into them: keep them alive with `run`
        sizes(*args, ctypes.byref(cap))
        fill(*args, ctypes.byref(out))
    return run


if __name__ == "__main__":
    main()
