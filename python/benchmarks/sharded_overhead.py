"""The executor's fixed cost per sharded sequence per micro-batch, per ring and per micro-batch
(CPU, gloo, DP 1 x CP 2), fitted from micro-batches of 1 to 16 short sequences.

    python python/benchmarks/sharded_overhead.py [--counts 1 2 4 8 16] [--length 64]
        [--layers 4] [--hidden 64] [--reps 15] [--format table|json]
        [--versions NAME=PYTHONPATH:LIBRARY ... --rounds 5]
    python python/benchmarks/sharded_overhead.py --collectives    # gloo's reduce-scatters

Two CPU processes (gloo, one thread each) train ``TinyTransformer`` (float32) on micro-batches
of ``m`` sequences of ``--length / 2 .. 3 --length / 2`` tokens (drawn, a fixed seed per ``m``), for
every ``m`` of ``--counts``:

- *sharded*: the ``m`` sequences, every one sharded over the two ranks (policy ``packed``,
  zigzag padding): about ``m x length / 2`` tokens on each rank, one ring;
- *local*: each of them cut in two, ``2m`` sequences whole, about ``m`` on each rank (policy
  ``skrull``): the same tokens, no ring.

Each timed micro-batch is what a training loop pays for it: ``PackedAttention`` built from the
plan (the attention schedule, no collective), the forward, the loss and the backward, with a
barrier before and after (the time is rank 0's, from the first barrier to the second). The
configurations are interleaved round by round (``--reps`` rounds); each point is the least
time over the rounds (the least disturbed on a shared machine; the median and spread are
reported beside it). Least squares over ``m`` give ``time = intercept + slope x m`` for each
kind:

- per sharded sequence: the sharded slope minus the local slope (what a sharded sequence
  costs beyond the same tokens held whole);
- per ring: the sharded intercept minus the local intercept;
- per micro-batch: the local intercept.

The script runs against whichever ``skrull`` is importable. With ``--versions`` it times
several versions instead, A/B interleaved: ``--rounds`` rounds, each starting this script once
per version (``PYTHONPATH`` and ``SKRULL_LIBRARY`` of each), and reports per version the median
and range over rounds of each fixed cost.

``--collectives`` instead times, on two gloo processes, the ways to hand each rank its own
block of a summed gradient (per message size, median of 30 calls between barriers):
``all_reduce`` of the whole tensor (the old backward), ``reduce_scatter_tensor``, and
``all_to_all_single`` followed by a local sum (what the backward runs on gloo).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import skrull
import skrull.torch as st


def _plans(m: int, length: int) -> dict[str, skrull.Plan]:
    """``m`` sequences of ``length / 2 .. 3 length / 2`` tokens sharded, and the same tokens
    as ``2m`` local sequences (each sharded one cut in two)."""
    lengths = np.random.default_rng(m).integers(length // 2, 3 * length // 2 + 1, m).tolist()
    bucket = 4 * sum(lengths) + 64
    sharded = skrull.Scheduler(1, 2, bucket, policy="packed", shard_padding="zigzag",
                               lockstep=True).plan(lengths)
    local = skrull.Scheduler(1, 2, bucket, policy="skrull", lockstep=True).plan(
        [n for s in lengths for n in (s - s // 2, s // 2)])
    assert sharded.num_micro_batches == 1 and sharded.summary.sharded == m
    assert local.num_micro_batches == 1 and local.summary.sharded == 0
    return {"sharded": sharded, "local": local}


def _rank(rank: int, args: argparse.Namespace, rendezvous: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=2)
    rings = st.cp_ring_groups(1, 2)
    torch.manual_seed(0)
    model = st.TinyTransformer(vocab=64, hidden=args.hidden, heads=4, ffn=2 * args.hidden,
                               layers=args.layers)
    cases = []
    for m in args.counts:
        for kind, plan in _plans(m, args.length).items():
            g = torch.Generator().manual_seed(m)
            samples = [torch.randint(0, 64, (n,), generator=g) for n in plan.lengths.tolist()]
            mb = st.collate(plan, samples, 0, rank)[0]
            cases.append((kind, m, mb))

    def once(mb: st.MicroBatch) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        logits = model.forward_packed(mb, ring_groups=rings)
        st.packed_loss(logits, mb).backward()
        dist.barrier()
        return time.perf_counter() - t0

    for _, _, mb in cases:  # warm-up
        once(mb)
    times: dict[str, list[float]] = {f"{k}/{m}": [] for k, m, _ in cases}
    for _ in range(args.reps):
        for kind, m, mb in cases:
            times[f"{kind}/{m}"].append(once(mb))
    if rank == 0:
        with open(os.path.join(out, "times.json"), "w") as f:
            json.dump(times, f)
    dist.barrier()
    dist.destroy_process_group()


def _fit(counts: list[int], seconds: list[float]) -> tuple[float, float]:
    slope, intercept = np.polyfit(np.asarray(counts, float), np.asarray(seconds, float), 1)
    return float(intercept), float(slope)


def measure(args: argparse.Namespace) -> dict:
    """Medians per point, the two fits and the three fixed costs (milliseconds)."""
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank, args=(args, "file://" + os.path.join(out, "rdv"), out),
                           nprocs=2, start_method="spawn")
        times = json.load(open(os.path.join(out, "times.json")))
    points = {k: {"least_ms": 1e3 * min(v), "median_ms": 1e3 * statistics.median(v),
                  "spread_ms": 1e3 * (max(v) - min(v))}
              for k, v in times.items()}
    fits = {}
    for kind in ("sharded", "local"):
        med = [points[f"{kind}/{m}"]["least_ms"] for m in args.counts]
        fits[kind] = dict(zip(("intercept_ms", "slope_ms"), _fit(args.counts, med)))
    return {"version": getattr(skrull, "__version__", "?"), "points": points, "fits": fits,
            "per_sharded_sequence_ms": fits["sharded"]["slope_ms"] - fits["local"]["slope_ms"],
            "per_ring_ms": fits["sharded"]["intercept_ms"] - fits["local"]["intercept_ms"],
            "per_micro_batch_ms": fits["local"]["intercept_ms"],
            "config": {"counts": args.counts, "length": args.length, "layers": args.layers,
                       "hidden": args.hidden, "reps": args.reps}}


def _collectives_rank(rank: int, rendezvous: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=2)
    got = {}
    for rows in (128, 1024, 8192):
        full = torch.randn(2 * rows, 8, 16)
        mine = torch.empty(rows, 8, 16)
        received = torch.empty_like(full)

        def a2a() -> None:
            dist.all_to_all_single(received, full)
            received.view(2, rows, 8, 16).sum(0)
        ways = {"all_reduce": lambda: dist.all_reduce(full.clone()),
                "reduce_scatter": lambda: dist.reduce_scatter_tensor(mine, full),
                "all_to_all + sum": a2a}
        for name, call in ways.items():
            for _ in range(3):
                call()
            times = []
            for _ in range(30):
                dist.barrier()
                t0 = time.perf_counter()
                call()
                dist.barrier()
                times.append(time.perf_counter() - t0)
            got[f"{rows * 8 * 16 * 4 // 1024} KB/{name}"] = 1e3 * statistics.median(times)
    if rank == 0:
        with open(os.path.join(out, "collectives.json"), "w") as f:
            json.dump(got, f)
    dist.destroy_process_group()


def collectives() -> dict[str, float]:
    """Milliseconds per call of each way, keyed ``"<KB per rank>/<way>"``."""
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_collectives_rank, args=("file://" + os.path.join(out, "rdv"), out),
                           nprocs=2, start_method="spawn")
        got: dict[str, float] = json.load(open(os.path.join(out, "collectives.json")))
    return got


COSTS = ("per_sharded_sequence_ms", "per_ring_ms", "per_micro_batch_ms")


def compare(args: argparse.Namespace) -> dict:
    """``--versions``: rounds of one run per version, interleaved; per version and cost the
    median and range over rounds."""
    versions = dict(v.split("=", 1) for v in args.versions)
    own = ["--counts", *map(str, args.counts), "--length", str(args.length), "--layers",
           str(args.layers), "--hidden", str(args.hidden), "--reps", str(args.reps)]
    runs: dict[str, list[dict]] = {name: [] for name in versions}
    for _ in range(args.rounds):
        for name, where in versions.items():
            path, library = where.split(":", 1)
            env = dict(os.environ, PYTHONPATH=path, SKRULL_LIBRARY=library)
            for attempt in range(3):  # a run may time out on a loaded machine: start it again
                got = subprocess.run([sys.executable, __file__, *own, "--format", "json"],
                                     env=env, capture_output=True, text=True)
                if got.returncode == 0:
                    break
                print(f"{name}: run failed, attempt {attempt + 1}:\n{got.stderr[-2000:]}",
                      file=sys.stderr)
            else:
                raise SystemExit(f"{name}: three runs failed")
            runs[name].append(json.loads(got.stdout))
    return {name: {c: {"median": statistics.median(r[c] for r in rs),
                       "low": min(r[c] for r in rs), "high": max(r[c] for r in rs)}
                   for c in COSTS} for name, rs in runs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument("--versions", nargs="+", default=None,
                        help="NAME=PYTHONPATH:LIBRARY of each version to time, interleaved")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--collectives", action="store_true",
                        help="time gloo's ways to reduce-scatter instead")
    args = parser.parse_args(argv)
    if args.collectives:
        got = collectives()
        print("| message per rank | way | median per call |")
        print("|---:|---|---:|")
        for key, ms in got.items():
            size, way = key.split("/")
            print(f"| {size} | {way} | {ms:.2f} ms |")
        return
    if args.versions:
        got = compare(args)
        if args.format == "json":
            json.dump(got, sys.stdout)
            print()
            return
        print(f"DP 1 x CP 2 (gloo), TinyTransformer {args.layers} layers, hidden {args.hidden}, "
              f"sequences of {args.length} tokens; median [range] over {args.rounds} rounds")
        print("| version | per sharded sequence | per ring | per micro-batch |")
        print("|---|---:|---:|---:|")
        for name, costs in got.items():
            cells = [f"{c['median']:.2f} ms [{c['low']:.2f}, {c['high']:.2f}]"
                     for c in costs.values()]
            print(f"| {name} | " + " | ".join(cells) + " |")
        return
    row = measure(args)
    if args.format == "json":
        json.dump(row, sys.stdout)
        print()
        return
    print(f"DP 1 x CP 2 (gloo), TinyTransformer {args.layers} layers, hidden {args.hidden}, "
          f"sequences of {args.length} tokens, median of {args.reps}")
    print("| m | sharded: least, median (spread) | local: least, median (spread) |")
    print("|---:|---:|---:|")
    for m in args.counts:
        cells = [row["points"][f"{kind}/{m}"] for kind in ("sharded", "local")]
        print(f"| {m} | " + " | ".join(f"{c['least_ms']:.2f}, {c['median_ms']:.2f} ms "
                                       f"({c['spread_ms']:.2f})" for c in cells) + " |")
    print(f"per sharded sequence {row['per_sharded_sequence_ms']:.3f} ms, per ring "
          f"{row['per_ring_ms']:.3f} ms, per micro-batch {row['per_micro_batch_ms']:.3f} ms")


if __name__ == "__main__":
    main()
