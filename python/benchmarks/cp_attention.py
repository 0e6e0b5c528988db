"""Time and peak memory of one sharded sequence's attention at CP N, against one process.

    python python/benchmarks/cp_attention.py [--lengths 4096 8192 16384 32768] [--cp 2]
        [--heads 4] [--kv-heads 2] [--dim 32] [--backend merge] [--format table|json]

For each length S it plans one sequence of S tokens with ``deepspeed`` (every sequence sharded
over the whole CP group) and zigzag padding at DP 1 x CP N, then starts N fresh CPU processes
(gloo, one thread each). Every process builds its ``CpAttention`` from the plan (no
collective), and times one forward and backward of the attention over its rows: the K/V
all-gather, the kernels and the gradient all-reduce. Beside it, one fresh process runs
``scaled_dot_product_attention(is_causal=True)`` over the whole sequence, forward and
backward, also on one thread: the time and memory that CP N should divide by N.

Peak memory is the growth of the process's peak resident set (``ru_maxrss``) across the
timed call, after a warm-up call at 512 tokens; the inputs (``q``, ``k``, ``v`` of this
process's rows) are allocated before it and are not counted. ``--flex`` adds the
``torch.nn.attention.flex_attention`` form over the whole sequence (compiled, causal block
mask; the CPU alternative ``docs/attention.md`` weighs against the merge kernel), forward only:
with torch 2.15 its backward raises ``NotImplementedError`` on the CPU, so it cannot train
there. Its time is set beside the merge kernel's forward over the whole sequence.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import skrull
from skrull.torch.attention import CpAttention, attention_schedule


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _inputs(rows: int, args: argparse.Namespace, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(rows, args.heads, args.dim), (rows, args.kv_heads, args.dim),
              (rows, args.kv_heads, args.dim)]
    return [torch.randn(*s, generator=g).requires_grad_() for s in shapes]


def _schedule(length: int, cp: int, rank: int):
    plan = skrull.Scheduler(1, cp, -(-length // cp) + 2 * cp, policy="deepspeed",
                            shard_padding="zigzag").plan([length])
    return attention_schedule(plan, 0, 0, rank)


def _sharded_rank(rank: int, length: int, args: argparse.Namespace, rendezvous: str,
                  out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=args.cp)
    group = dist.new_group(list(range(args.cp)))
    rings = {(0, args.cp): group}

    def once(n: int) -> float:
        schedule = _schedule(n, args.cp, rank)
        attention = CpAttention(schedule, rings, backend=args.backend)
        q, k, v = _inputs(schedule.tokens, args, seed=rank)
        dist.barrier()
        t0 = time.perf_counter()
        attention(q, k, v).square().sum().backward()
        dist.barrier()
        return time.perf_counter() - t0

    once(512)
    schedule = _schedule(length, args.cp, rank)
    attention = CpAttention(schedule, rings, backend=args.backend)
    q, k, v = _inputs(schedule.tokens, args, seed=rank)
    before = _peak_mb()
    dist.barrier()
    t0 = time.perf_counter()
    attention(q, k, v).square().sum().backward()
    seconds = time.perf_counter() - t0
    grown = _peak_mb() - before
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"seconds": seconds, "peak_mb": grown, "rows": schedule.tokens}, f)
    dist.barrier()
    dist.destroy_process_group()


def _whole_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    qb, kb, vb = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=True,
                                                           enable_gqa=True)
    out.square().sum().backward()


def _flex_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, flex, mask) -> None:
    """Forward only: torch 2.15's flex_attention refuses the backward on the CPU
    ("FlexAttention does not support backward on CPU")."""
    qb, kb, vb = (x.detach().transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    with torch.no_grad():
        flex(qb, kb, vb, block_mask=mask, enable_gqa=True)


def _merge_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    from skrull.torch.attention import BACKENDS
    with torch.no_grad():
        BACKENDS["merge"]([(q.detach(), k.detach(), v.detach())], None, 0.0)


def _whole_process(length: int, args: argparse.Namespace, out: str, mode: str) -> None:
    """One process over the whole sequence: ``sdpa`` (forward + backward), ``flex`` or
    ``merge`` (forward only)."""
    torch.set_num_threads(1)
    if mode == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        compiled = torch.compile(flex_attention)

        def causal(b, h, qi, ki):
            return ki <= qi

        def step(q, k, v):
            n = q.shape[0]
            _flex_step(q, k, v, compiled, create_block_mask(causal, None, None, n, n,
                                                            device="cpu"))
    else:
        step = {"sdpa": _whole_step, "merge": _merge_forward}[mode]
    # flex compiles per shape: its warm-up runs the timed shape (its peak is not reported).
    step(*_inputs(length if mode == "flex" else 512, args, seed=0))
    q, k, v = _inputs(length, args, seed=0)
    before = _peak_mb()
    t0 = time.perf_counter()
    step(q, k, v)
    seconds = time.perf_counter() - t0
    with open(os.path.join(out, "whole.json"), "w") as f:
        json.dump({"seconds": seconds, "peak_mb": _peak_mb() - before}, f)


def _fresh(target, *targs) -> None:
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=target, args=targs)
    p.start()
    p.join()
    if p.exitcode != 0:
        raise SystemExit(f"benchmark process failed (exit code {p.exitcode})")


def measure(length: int, args: argparse.Namespace) -> dict:
    """One row: the sharded ranks' worst time and peak, and the one-process reference."""
    with tempfile.TemporaryDirectory() as out:
        rendezvous = "file://" + os.path.join(out, "rendezvous")
        mp.start_processes(_sharded_rank, args=(length, args, rendezvous, out), nprocs=args.cp,
                           start_method="spawn")
        ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(args.cp)]
        _fresh(_whole_process, length, args, out, "sdpa")
        whole = json.load(open(os.path.join(out, "whole.json")))
        row = {"length": length, "cp": args.cp, "backend": args.backend or "auto",
               "rank_s": max(r["seconds"] for r in ranks),
               "rank_peak_mb": max(r["peak_mb"] for r in ranks),
               "whole_s": whole["seconds"], "whole_peak_mb": whole["peak_mb"]}
        row["rank_over_ideal"] = row["rank_s"] / (row["whole_s"] / args.cp)
        for mode in ("flex", "merge") if args.flex else ():
            _fresh(_whole_process, length, args, out, mode)
            got = json.load(open(os.path.join(out, "whole.json")))
            row[f"{mode}_forward_s"] = got["seconds"]
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--cp", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--backend", default=None,
                        help="a skrull.torch.attention backend (default: by device)")
    parser.add_argument("--flex", action="store_true",
                        help="also time the forward of compiled flex_attention and of the "
                             "merge kernel over the whole sequence")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)
    if args.cp < 2 or args.cp > (os.cpu_count() or 1):
        raise SystemExit(f"--cp {args.cp}: needs 2 to {os.cpu_count()} (one core per rank)")
    rows = []
    if args.format == "table":
        print(f"DP 1 x CP {args.cp}, {args.heads} heads / {args.kv_heads} KV heads, head dim "
              f"{args.dim}, float32, one forward + backward, one thread per process")
        print("| S | CP rank time | rank peak | one process | its peak | rank / (one/N) |"
              + (" forward, flex | forward, merge |" if args.flex else ""))
        print("|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.flex else ""))
    for length in args.lengths:
        row = measure(length, args)
        rows.append(row)
        if args.format == "table":
            extra = (f" {row['flex_forward_s']:.2f} s | {row['merge_forward_s']:.2f} s |"
                     if args.flex else "")
            print(f"| {length:,} | {row['rank_s']:.2f} s | +{row['rank_peak_mb']:.0f} MB | "
                  f"{row['whole_s']:.2f} s | +{row['whole_peak_mb']:.0f} MB | "
                  f"{row['rank_over_ideal']:.2f} |{extra}", flush=True)
    if args.format == "json":
        json.dump({"rows": rows}, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
