"""Per-step CPU overhead of skrull.hf on one GPU: sampler, layouts, collation.

    python python/benchmarks/hf_overhead.py [--sequences 4096 65536] [--repeat 3]

For a global batch of N sequences (log-uniform lengths from 16 to 16,384 tokens, as in SFT
data), DP 8 x CP 4, BucketSize 16,384, policy ``balanced``, zigzag padding, with
``gradient_accumulation_steps`` set to the count the batch needs, it times what one GPU's
process does per optimizer step:

- ``sampler``: ``SkrullBatchSampler._assign`` (the plan, identical on every rank, plus the
  micro-batch lists of every DP rank);
- ``layouts``: ``Plan.layout`` for each of this GPU's micro-batches (DP rank 0, CP rank 0);
- ``collate``: ``collate_gpu_buffer`` for each of them (samples already in memory as tensors);
- ``collate (no CP)``: with CP 1 instead, ``SkrullCollator`` over DP rank 0's micro-batches.

Every number is the best of ``--repeat`` runs, in milliseconds per step.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from skrull import Scheduler
from skrull.hf import SkrullBatchSampler, SkrullCollator, collate_gpu_buffer

DP, CP, BUCKET = 8, 4, 16384


def lengths_for(n: int) -> list[int]:
    rng = np.random.default_rng(20261204)
    return np.exp(rng.uniform(np.log(16), np.log(16384), n)).astype(np.int64).tolist()


def best_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def row(n: int, repeat: int) -> str:
    lengths = lengths_for(n)
    g = Scheduler(DP, CP, BUCKET, shard_padding="zigzag", lockstep=True).plan(
        lengths).num_micro_batches
    sampler = SkrullBatchSampler(lengths, n, BUCKET, g, dp_size=DP, rank=0, cp=CP,
                                 shuffle=False, shard_padding="zigzag")
    indices = list(range(n))
    sampler_times, layout_times = [], []
    for _ in range(repeat):  # a new plan each time: nothing cached from an earlier round
        t0 = time.perf_counter()
        sampler._assign(indices, lengths)
        t1 = time.perf_counter()
        plan = sampler.last_plan
        layouts = [plan.layout(0, m, 0) for m in range(int(plan.micro_batches_per_dp[0]))]
        t2 = time.perf_counter()
        sampler_times.append(t1 - t0)
        layout_times.append(t2 - t1)
    sampler_ms, layouts_ms = min(sampler_times) * 1e3, min(layout_times) * 1e3
    gen = torch.Generator().manual_seed(0)
    needed = {int(s) for lay in layouts for s in lay.spans["seq"].tolist()}
    samples = {s: {"input_ids": torch.randint(0, 32000, (lengths[s],), generator=gen)}
               for s in needed}
    collate_ms = best_ms(lambda: [collate_gpu_buffer(lay, samples) for lay in layouts], repeat)
    tokens = sum(lay.tokens for lay in layouts)
    dp_sampler = SkrullBatchSampler(lengths, n, BUCKET * CP, g, dp_size=DP, rank=0,
                                    shuffle=False)
    slots = dp_sampler._assign(indices, lengths)[0]
    flat = {i: {"input_ids": torch.randint(0, 32000, (lengths[i],), generator=gen)}
            for mb in slots for i in mb}
    collator = SkrullCollator()
    dp_ms = best_ms(lambda: [collator([flat[i] for i in mb]) for mb in slots], repeat)
    return (f"| {n:,} | {g} | {sampler_ms:.1f} | {layouts_ms:.1f} | {collate_ms:.1f} "
            f"({tokens:,} tokens) | {sampler_ms + layouts_ms + collate_ms:.1f} | {dp_ms:.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sequences", type=int, nargs="+", default=[4096, 65536])
    p.add_argument("--repeat", type=int, default=3)
    opts = p.parse_args()
    print(f"DP {DP} x CP {CP}, BucketSize {BUCKET}, balanced, zigzag; one GPU, ms per step")
    print("| sequences | G | sampler | layouts | collate | total | collate (no CP) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in opts.sequences:
        print(row(n, opts.repeat), flush=True)


if __name__ == "__main__":
    main()
