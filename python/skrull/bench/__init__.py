"""``python -m skrull.bench``: real training steps of every policy on the machine at hand,
with the cost model's predicted step time beside each measurement.

For every policy (default ``balanced, skrull, packed, deepspeed``) it trains a model with
random weights for ``--warmup`` + ``--steps`` steps on the same global batches through
``skrull.hf.SkrullTrainer`` (the path users run), over ``dp x cp`` processes: CPU processes
with gloo, or one process per GPU with NCCL. Each timed step is measured from the end of
the step before (data, forward, backward, optimizer: the whole step) and the median is
reported. Every step's plan and every micro-batch's measured time (the trainer's
micro-batch timer, gathered over the job) are recorded, and the evaluator
(``skrull evaluate``) predicts each timed step's time under the cost model in use:

- ``--calibrate none``: the preset (H100) model, so predictions are in H100 seconds;
- ``--calibrate profile``: ``python -m skrull.profile`` measures this model on this device
  first, and its fitted model plans and predicts;
- ``--calibrate online``: the trainer refits the model from the warm-up steps' measured
  micro-batch times (``SkrullConfig(calibrate_every=warmup)``), once; the timed steps are
  planned and predicted with the refit.

The table and the JSON carry, per policy: ``measured_step_s``, ``predicted_step_s``,
``predicted_over_measured``, ``measured_compute_s`` (the measured micro-batch times composed
as the evaluator composes its own: per DP rank the sum of the slowest CP rank per
micro-batch, then the slowest DP rank), ``tokens_per_s``, ``speedup_vs_deepspeed``,
``peak_memory_bytes`` (per rank, the largest) and ``micro_batches`` (per DP rank). See
BENCHMARKS.md ("Measured steps") for what it measured and where prediction and measurement
part.

``--engine deepspeed --zero N`` runs the same policies through DeepSpeed's own engine at ZeRO
stage ``N`` (the raw loop of ``skrull.deepspeed``, the paper's engine) instead of the Trainer,
and predicts each step under that engine's synchronisation: under ZeRO-2/3 every
micro-batch waits for every GPU of the job.

Example
-------
Runs processes, so it is not a doctest; ``python/tests/test_bench.py`` runs it.

>>> from skrull.bench import main                     # doctest: +SKIP
>>> main(["--dp", "1", "--cp", "2", "--dataset", "chatqa2", "--calibrate", "online"])
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from ._options import BenchError, check_fits, lengths_and_bucket, parse
from ._engine import predicted_time_s, worker
from ._predict import evaluate, gpu_pairs, measured_compute_s, overhead_s
from ._report import chart, table, to_json

__all__ = ["BenchError", "main", "run"]


def _step_batches(n: int, batch: int, steps: int, seed: int) -> list[list[int]]:
    """Dataset indices per step in the order ``SkrullBatchSampler`` draws them (reshuffled
    per epoch from ``seed + epoch``)."""
    import torch
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
        out += [order[k * batch:(k + 1) * batch].tolist() for k in range(n // batch)]
        epoch += 1
    return out[:steps]


def _grad_accum(opts: Any, policy: str, lengths: list[int], bucket: int,
                cost_model: Any) -> int:
    """Micro-batches per DP rank that every step's batch fits (``gradient_accumulation_steps``
    is fixed for a run, so it is the largest a lockstep plan of any step needs)."""
    import skrull
    sched = skrull.Scheduler(opts.dp, opts.cp, bucket, policy=policy, shard_padding="zigzag",
                             lockstep=True, model=_shape(opts), cost_model=cost_model)
    steps = opts.warmup + opts.steps
    return max(sched.plan([lengths[i] for i in b]).num_micro_batches
               for b in _step_batches(len(lengths), opts.batch, steps, opts.seed))


def _shape(opts: Any) -> dict[str, Any]:
    return {k: v for k, v in opts.model_config.items() if k != "model_type"}


def _profile(opts: Any, cli: str, folder: str) -> str:
    """Runs the offline profiler for the bench's model and device; returns its cost model."""
    c = opts.model_config
    out = os.path.join(folder, "profile.csv")
    args = [sys.executable, "-m", "skrull.profile", "--hidden", str(c["hidden_size"]),
            "--ffn", str(c["intermediate_size"]), "--layers", str(c["num_hidden_layers"]),
            "--heads", str(c["num_attention_heads"]),
            "--kv-heads", str(c.get("num_key_value_heads", c["num_attention_heads"])),
            "--vocab", str(c["vocab_size"]), "--device", opts.device, "--quick",
            "--threads", "1", "--out", out, "--skrull", cli, "--quiet"]
    if opts.device == "cpu":
        args += ["--dtype", "float32" if opts.dtype == "float64" else opts.dtype]
    if opts.cp > 1:
        # The CP ring's all-gathers, measured on a group of its size (gloo or NCCL).
        args += ["--procs", str(opts.cp)]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        raise BenchError(f"python -m skrull.profile failed: {run.stderr.strip()[-2000:]}")
    with open(os.path.join(folder, "profile.json")) as f:
        return f.read()


def _run_policy(opts: Any, policy: str, lengths: list[int], bucket: int, grad_accum: int,
                cost_model_path: str | None, folder: str) -> dict[str, Any]:
    import torch.multiprocessing as mp

    rank_main = worker(opts)
    out = os.path.join(folder, policy)
    os.makedirs(out, exist_ok=True)
    spec = {"policy": policy, "dp": opts.dp, "cp": opts.cp, "bucket": bucket,
            "batch": opts.batch, "warmup": opts.warmup, "steps": opts.steps,
            "lengths": lengths, "longest": max(lengths), "grad_accum": grad_accum,
            "model_config": opts.model_config, "dtype": opts.dtype, "device": opts.device,
            "calibrate": opts.calibrate, "cost_model": cost_model_path, "seed": opts.seed,
            "zero": opts.zero}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = opts.dp * opts.cp
    mp.set_forkserver_preload(["torch", "transformers", "skrull.hf"])
    start: Any = getattr(mp, "start_processes")
    start(rank_main, args=(world, port, spec, out), nprocs=world, start_method="forkserver")
    with open(os.path.join(out, "result.json")) as f:
        got: dict[str, Any] = json.load(f)
    return got


def _summarise(opts: Any, policy: str, got: dict[str, Any], cli: str) -> dict[str, Any]:
    w, n = opts.warmup, opts.steps
    # all_step_s[k] is the wall time of step k + 1.
    walls = got["all_step_s"]
    timed_walls = walls[w - 1:w - 1 + n]
    records = got["records"]
    timed = records[w:w + n]
    # The time outside the timed micro-batches (optimizer, data, the loop), measured on the
    # warm-up steps that have a wall time (steps 1 .. warmup-1); only --calibrate online
    # uses it: the refit sees micro-batch times only, and the preset and the profile have
    # no such term (iteration_fixed_s is 0).
    overheads = [overhead_s(walls[k - 1], records[k]["times"]) for k in range(1, w)]
    overhead = statistics.median(overheads) if overheads and "online" in opts.calibrate \
        else 0.0
    reports = [evaluate(cli, r["plan"], got["cost_model"]) for r in timed]
    predicted = [predicted_time_s(opts, rep) + overhead for rep in reports]
    barrier = [rep["iteration_time_s"] + overhead for rep in reports]
    compute = [measured_compute_s(r["times"]) for r in timed]
    kinds = [gpu_pairs(rep, r["times"]) for rep, r in zip(reports, timed)]

    def ratio(kind: str) -> float | None:
        got = [p / m for k in kinds for p, m in k[kind] if m > 0]
        return statistics.median(got) if got else None

    tokens = statistics.mean(rep["total_tokens"] for rep in reports)
    measured = statistics.median(timed_walls)
    pred, comp = statistics.median(predicted), statistics.median(compute)
    return {"policy": policy, "measured_step_s": measured, "predicted_step_s": pred,
            "predicted_over_measured": pred / measured,
            "predicted_barrier_step_s": statistics.median(barrier),
            "measured_compute_s": comp,
            "predicted_compute_s": statistics.median(p - overhead for p in predicted),
            "overhead_s": overhead, "measured_overhead_s": overheads,
            "tokens_per_s": tokens / measured, "speedup_vs_deepspeed": None,
            "peak_memory_bytes": got["peak_memory_bytes"],
            "micro_batches": got["micro_batches"], "measured_steps_s": timed_walls,
            "predicted_steps_s": predicted, "compute_steps_s": compute,
            "gpu_predicted_over_measured": {"local": ratio("local"),
                                            "sharded": ratio("sharded")},
            "refit": got["refit"]}


def run(opts: Any) -> dict[str, Any]:
    """Runs the bench for parsed options (``parse``); returns the result dict."""
    from ..profile import find_cli
    cli = find_cli(None)
    if cli is None:
        raise BenchError("the skrull command was not found (pip install the package, or set "
                         "SKRULL_CLI)")
    lengths, bucket = lengths_and_bucket(opts, cli)
    check_fits(opts, bucket)
    import skrull
    with tempfile.TemporaryDirectory() as tmp:
        folder = opts.work_dir or tmp
        os.makedirs(folder, exist_ok=True)
        cost_path = None
        if "profile" in opts.calibrate:
            cost_path = os.path.join(folder, "cost_model.json")
            with open(cost_path, "w") as f:
                f.write(_profile(opts, cli, folder))
        cost_model = skrull.CostModel.from_json(cost_path) if cost_path else None
        rows = []
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
        bar = tqdm(opts.policies, desc="policies", disable=opts.quiet, file=sys.stderr)
        for policy in bar:
            bar.set_postfix_str(policy)
            accum = _grad_accum(opts, policy, lengths, bucket, cost_model)
            got = _run_policy(opts, policy, lengths, bucket, accum, cost_path, folder)
            rows.append(_summarise(opts, policy, got, cli))
        bar.close()
    base = next((r for r in rows if r["policy"] == "deepspeed"), None)
    for r in rows:
        if base is not None:
            r["speedup_vs_deepspeed"] = base["measured_step_s"] / r["measured_step_s"]
    by_measured = [r["policy"] for r in sorted(rows, key=lambda r: r["measured_step_s"])]
    by_predicted = [r["policy"] for r in sorted(rows, key=lambda r: r["predicted_step_s"])]
    config = {"dp": opts.dp, "cp": opts.cp, "device": opts.device, "dtype": opts.dtype,
              "model": opts.model, "model_config": opts.model_config, "bucket": bucket,
              "batch": opts.batch, "warmup": opts.warmup, "steps": opts.steps,
              "calibrate": opts.calibrate, "lengths": opts.lengths or None,
              "dataset": None if opts.lengths else (opts.dataset or "lmsys"),
              "max_len": opts.max_len, "sequences": len(lengths), "seed": opts.seed,
              "engine": opts.engine, "zero": opts.zero}
    return {"config": config, "policies": rows,
            "ranked_alike": by_measured == by_predicted,
            "ranking_measured": by_measured, "ranking_predicted": by_predicted}


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (``python -m skrull.bench --help``); bad input exits with status 2
    and one line saying what to change."""
    try:
        opts = parse(argv)
        result = run(opts)
    except BenchError as e:
        print(f"python -m skrull.bench: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    text = to_json(result)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(text)
    if opts.chart:
        with open(opts.chart, "w") as f:
            f.write(chart(result))
    sys.stdout.write(text if opts.format == "json" else table(result))
    if opts.format == "table":
        print(f"ranked alike by prediction and measurement: {result['ranked_alike']} "
              f"(measured {', '.join(result['ranking_measured'])})")


