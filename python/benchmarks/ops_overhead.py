"""Per-call cost of the torch op (``torch.ops.skrull.schedule``) against the ctypes binding.

    python python/benchmarks/ops_overhead.py

For 256 log-uniform sequences on DP 4 x CP 8 and 4,096 on DP 64 x CP 8 (BucketSize 26K), per
policy, it times ``Scheduler.plan`` (the ctypes binding: the configuration prepared once, at
construction), the raw op on the Scheduler's configuration tensors (which it copies and
prepares on every call, as it keeps no state) and ``skrull.ops.schedule`` with the Scheduler
(which makes the two tensors from the Scheduler's structs on every call). The op's fixed cost, the same calls on an empty
batch, is listed too. Every number is the best, then the median, over interleaved rounds, so
load on a shared machine hits the ways alike; the overhead is op minus binding, from the
medians.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np
import torch

import skrull
import skrull.ops


def times_us(*fns: Callable[[], object], rounds: int) -> list[tuple[float, float]]:
    """Per function, (best, median) time per call in µs over interleaved rounds."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            samples[i].append((time.perf_counter() - t0) * 1e6)
    return [(min(s), statistics.median(s)) for s in samples]


def lengths_for(n: int) -> np.ndarray:
    rng = np.random.default_rng(20250526)
    return np.exp(rng.uniform(np.log(16), np.log(100_000), n)).astype(np.int64)


def _cell(t: tuple[float, float]) -> str:
    return f"{t[0]:,.1f} / {t[1]:,.1f}"


def row(n: int, dp: int, policy: str, cost_model: skrull.CostModel | None) -> str:
    s = skrull.Scheduler(dp, 8, 26624, policy=policy, cost_model=cost_model, max_sequences=n)
    lengths = lengths_for(n)
    tensor = torch.from_numpy(lengths)
    config, cost = skrull.ops.config_tensors(s)
    empty, empty_t = np.empty(0, np.int64), torch.empty(0, dtype=torch.int64)
    op = torch.ops.skrull.schedule
    out = skrull.ops.schedule(tensor, s)
    assert np.array_equal(out.members.numpy(), s.plan(lengths).members)
    rounds = 400 if n == 256 else 60
    binding, raw, wrapped, binding0, raw0 = times_us(
        lambda: s.plan(lengths), lambda: op(tensor, config, cost), lambda: skrull.ops.schedule(tensor, s),
        lambda: s.plan(empty), lambda: op(empty_t, config, cost), rounds=rounds)
    model = "calibrated" if cost_model is not None else "preset"
    size = config.numel() + cost.numel()
    return (f"| {n:,} | DP {dp} x CP 8 | {policy} | {model} ({size} bytes) | "
            f"{_cell(binding)} | {_cell(raw)} | {_cell(wrapped)} | "
            f"{raw[1] - binding[1]:+,.1f} | {_cell(binding0)} | {_cell(raw0)} |")


def main() -> None:
    torch.set_num_threads(1)
    calibrated = skrull.CostModel("h100", gemm_efficiency=0.61, kernel_launch_s=4.1e-6,
                                  gpus_per_node=8)
    print("| sequences | layout | policy | cost model (config tensors) | `Scheduler.plan` (ctypes) "
          "| `torch.ops.skrull.schedule` | `skrull.ops.schedule` | op - ctypes (median) | "
          "empty batch: ctypes | empty batch: op |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|")
    for n, dp in ((256, 4), (4096, 64)):
        for policy, cost in (("skrull", None), ("balanced", None), ("balanced", calibrated)):
            print(row(n, dp, policy, cost), flush=True)
    print("\n(µs per call, best / median)")


if __name__ == "__main__":
    main()
