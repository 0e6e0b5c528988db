"""Per-call cost of the Python layer over the bare C call.

    python python/benchmarks/overhead.py

Times ``Scheduler.plan`` (input conversion, the call, copying the plan out) against a raw
ctypes ``skrull_schedule`` on pre-built buffers, for 256 and 65,536 sequences (DP 4, CP 8,
BucketSize 26K), and ``Plan.layout`` against raw ``skrull_layout_sizes`` +
``skrull_layout_fill``. Prints the best of 7 repeats.
"""

from __future__ import annotations

import ctypes
import timeit

import numpy as np

import skrull
from skrull import _ffi


def best_us(fn, number: int) -> float:
    """Best of 7 repeats: on a shared machine the minimum is the least disturbed."""
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6


def lengths_for(n: int) -> np.ndarray:
    rng = np.random.default_rng(20250526)
    return np.exp(rng.uniform(np.log(16), np.log(100_000), n)).astype(np.int64)


def main() -> None:
    print("| sequences | policy | raw C call | Scheduler.plan (numpy int64) | overhead | "
          "Scheduler.plan (list) | Plan.layout vs raw |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in (256, 65536):
        for policy in ("skrull", "balanced"):
            lengths = lengths_for(n)
            as_list = lengths.tolist()
            s = skrull.Scheduler(4, 8, 26624, policy=policy, max_sequences=n)
            plan = s.plan(lengths)
            u32 = lengths.astype(np.uint32)
            args = (ctypes.byref(s._c_config), _ffi.address(u32), n, s._ws_addr, s._ws_len,
                    ctypes.byref(s._out))
            call = _ffi.lib.skrull_schedule
            assert call(*args) == 0
            number = 200 if n == 256 else 3
            raw = best_us(lambda: call(*args), number)
            wrapped = best_us(lambda: s.plan(lengths), number)
            listed = best_us(lambda: s.plan(as_list), number)
            lay_py = best_us(lambda: plan.layout(0, 0, 0), number)
            lay_raw = best_us(_raw_layout(s, plan), number)
            print(f"| {n:,} | {policy} | {raw:,.1f} µs | {wrapped:,.1f} µs | "
                  f"{wrapped - raw:+,.1f} µs ({wrapped / raw:.2f}x) | {listed:,.1f} µs | "
                  f"{lay_py:,.1f} vs {lay_raw:,.1f} µs |")


def _raw_layout(s: skrull.Scheduler, plan: skrull.Plan):
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
                                        cap.positions)]
    rec = _ffi.skrull_layout()
    p = [_ffi.address(a) for a in arrays]
    out = _ffi.skrull_layout_buffers(
        ctypes.sizeof(_ffi.skrull_layout_buffers), 0, p[0], cap.spans,
        p[1], cap.local_cu_seqlens, p[2], cap.sharded_cu_seqlens, p[3], cap.sharded_cu_seqlens,
        p[4], cap.sharded_cu_seqlens, p[5], cap.positions, ctypes.addressof(rec))
    sizes, fill = _ffi.lib.skrull_layout_sizes, _ffi.lib.skrull_layout_fill

    def run() -> None:
        assert arrays and rec  # the C call writes into them: keep them alive with `run`
        sizes(*args, ctypes.byref(cap))
        fill(*args, ctypes.byref(out))
    return run


if __name__ == "__main__":
    main()
