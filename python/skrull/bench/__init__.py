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
- ``--calibrate online``: one calibration before the policies gives one model of the
  machine, and every policy is then planned and predicted with it: a calibration run of
  ``balanced`` and one of ``deepspeed`` (the fewest, largest micro-batches and the most,
  smallest ones, so that fixed and per-token costs are told apart), ``--calibration-steps``
  steps each on batches shuffled with another seed (no step a figure predicts is fitted),
  the first step of each dropped; one refit (``Scheduler.observe`` of every step, then
  ``Scheduler.refit``) pools them, and the per-step cost it measures (the time outside the
  micro-batches, and what each rank pays inside its last one: DDP's gradient all-reduce)
  becomes ``iteration_fixed_s``. A refit that finds only a uniform factor predicts with the prior
  slowed by it (``CostModel.slowed``); one that stays above ``max_error`` keeps the prior,
  and the report says so;
- ``--cost-model FILE`` (with ``--calibrate none``): a model an earlier run saved with
  ``--save-cost-model``, so a model calibrated on one length file predicts another's steps.

Predictions compose the evaluator's per-(micro-batch, GPU) times the way ``SkrullTrainer``
runs them: DDP under ``no_sync``, ``sync="sharded"`` (``docs/cost_model.md``, section 8).
Each figure is the median of the timed steps, with their noise: the spread ((max - min) /
median) of each step's measured over predicted time (the steps train different batches, so
the raw step times spread with their content; ``step_spread`` in the JSON); a policy whose
noise is above ``--max-spread`` is run again once, and marked ``noisy`` when it stays above.

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

from ._delay import delayed_steps, label, mean_p95, whole_epochs
from ._engine import sync_of, worker
from ._options import BenchError, check_fits, chunking, lengths_and_bucket, parse
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
                cost_model: Any, delay: int = 0) -> int:
    """Micro-batches per DP rank that every step's batch fits (``gradient_accumulation_steps``
    is fixed for a run, so it is the largest a lockstep plan of any step needs); with
    ``delay``, of the steps the outlier-delay window makes."""
    import skrull
    sched = skrull.Scheduler(opts.dp, opts.cp, bucket, policy=policy, shard_padding="zigzag",
                             lockstep=True, model=_shape(opts), cost_model=cost_model,
                             **chunking(opts, policy))
    steps = opts.warmup + opts.steps
    batches = _step_batches(len(lengths), opts.batch, steps, opts.seed)
    if delay:
        per_epoch = len(lengths) // opts.batch
        whole = _step_batches(len(lengths), opts.batch, whole_epochs(steps, per_epoch),
                              opts.seed)
        batches = delayed_steps(whole, per_epoch, lengths, sched, delay)[:steps]
    return max(sched.plan([lengths[i] for i in b]).num_micro_batches for b in batches)


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
                cost_model_path: str | None, folder: str,
                calibrate: str = "none", delay: int = 0,
                calibration: tuple[int, int] | None = None) -> dict[str, Any]:
    """One run of ``policy`` over ``dp x cp`` processes; with ``calibration = (steps, seed)``
    a calibration run instead: ``steps + 1`` steps of batches shuffled by ``seed`` (the
    caller drops the first, which pays one-time costs)."""
    import torch.multiprocessing as mp

    rank_main = worker(opts)
    out = os.path.join(folder, policy + (f"-delay{delay}" if delay else ""))
    os.makedirs(out, exist_ok=True)
    spec = {"policy": policy, "outlier_delay": delay, "dp": opts.dp, "cp": opts.cp,
            "bucket": bucket,
            "batch": opts.batch, "warmup": opts.warmup, "steps": opts.steps,
            "lengths": lengths, "longest": max(lengths), "grad_accum": grad_accum,
            "model_config": opts.model_config, "dtype": opts.dtype, "device": opts.device,
            "calibrate": calibrate, "cost_model": cost_model_path, "seed": opts.seed,
            "zero": opts.zero, "chunking": chunking(opts, policy)}
    if calibration is not None:
        spec["warmup"], spec["steps"], spec["seed"] = calibration[0], 1, calibration[1]
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


def _spread(xs: list[float]) -> float:
    """(max - min) / median of a list (0 for none)."""
    return (max(xs) - min(xs)) / statistics.median(xs) if xs else 0.0


def _noise(walls: list[float], predicted: list[float]) -> float:
    """The spread of a run's timed steps that their content does not explain: of each step's
    measured over predicted time (the global batches differ, so the raw step times spread
    with their content); the raw spread when nothing is predicted."""
    ratios = [m / p for m, p in zip(walls, predicted) if p > 0]
    return _spread(ratios) if len(ratios) == len(walls) else _spread(walls)


def _summarise(opts: Any, policy: str, got: dict[str, Any], cli: str) -> dict[str, Any]:
    w, n = opts.warmup, opts.steps
    # all_step_s[k] is the wall time of step k + 1.
    walls = got["all_step_s"]
    timed_walls = walls[w - 1:w - 1 + n]
    records = got["records"]
    timed = records[w:w + n]
    # What the cost model does not see (optimizer, data, the loop), measured on this run's
    # untimed steps, is reported; the prediction carries the model's own per-step term.
    overheads = [overhead_s(walls[k - 1], records[k]["times"]) for k in range(1, w)]
    sync = sync_of(opts)
    reports = [evaluate(cli, r["plan"], got["cost_model"], sync=sync) for r in timed]
    barrier = [evaluate(cli, r["plan"], got["cost_model"], sync="cp-group")["iteration_time_s"]
               for r in timed]
    predicted = [rep["iteration_time_s"] for rep in reports]
    compute = [measured_compute_s(r["times"]) for r in timed]
    kinds = [gpu_pairs(rep, r["times"]) for rep, r in zip(reports, timed)]

    def ratio(kind: str) -> float | None:
        got = [p / m for k in kinds for p, m in k[kind] if m > 0]
        return statistics.median(got) if got else None

    tokens = statistics.mean(rep["total_tokens"] for rep in reports)
    measured = statistics.median(timed_walls)
    step_mean, step_p95 = mean_p95(timed_walls)
    pred, comp = statistics.median(predicted), statistics.median(compute)
    fixed = json.loads(got["cost_model"]).get("iteration_fixed_s", 0.0)
    return {"policy": policy, "measured_step_s": measured, "predicted_step_s": pred,
            "predicted_over_measured": pred / measured,
            "measured_spread": _noise(timed_walls, predicted),
            "step_spread": _spread(timed_walls), "noisy": False,
            "measured_mean_s": step_mean, "measured_p95_s": step_p95,
            "predicted_barrier_step_s": statistics.median(barrier),
            "measured_compute_s": comp,
            "predicted_compute_s": statistics.median(p - fixed for p in predicted),
            "measured_overhead_s": overheads,
            "tokens_per_s": tokens / measured, "speedup_vs_deepspeed": None,
            "peak_memory_bytes": got["peak_memory_bytes"],
            "micro_batches": got["micro_batches"], "measured_steps_s": timed_walls,
            "measured_mean_s": step_mean, "measured_p95_s": step_p95,
            "predicted_steps_s": predicted, "compute_steps_s": compute,
            "gpu_predicted_over_measured": {"local": ratio("local"),
                                            "sharded": ratio("sharded")},
            "chunked_per_step": statistics.mean(rep.get("chunked_sequences", 0)
                                                for rep in reports)}


#: The policies whose calibration runs the one refit pools: the fewest, largest micro-batches
#: and the most, smallest ones, so that the fixed costs and the per-token costs are told apart.
CALIBRATION_POLICIES = ("balanced", "deepspeed")


def _calibrate_online(opts: Any, lengths: list[int], bucket: int, prior: str | None,
                      cli: str, folder: str) -> tuple[str, dict[str, Any]]:
    """The one calibration of the run, before any policy. A calibration run per policy of
    ``CALIBRATION_POLICIES`` (``--calibration-steps`` steps each, on batches shuffled with
    another seed than the timed runs', so no step a figure predicts is fitted; each run's
    first step, which pays one-time costs, not observed), planned with ``prior`` (else the
    preset); one refit pools every run's micro-batch and step times. A refit that finds only
    a uniform factor predicts with the prior slowed by it (``CostModel.slowed``). The model's
    ``iteration_fixed_s`` is the refit's per-step cost: the steps' median time outside their
    micro-batches plus what each rank pays inside its last micro-batch (DDP's gradient
    all-reduce). Returns the model's file and what the refit reported."""
    import pickle

    import skrull

    from .._scheduler import config_reduce
    prior_model = skrull.CostModel.from_json(prior) if prior else None
    steps = opts.calibration_steps
    runs = []
    for policy in CALIBRATION_POLICIES:
        accum = _grad_accum(opts, policy, lengths, bucket, prior_model)
        got = _run_policy(opts, policy, lengths, bucket, accum, prior,
                          os.path.join(folder, "calibration"),
                          calibration=(steps, opts.seed + 1000))
        with open(os.path.join(folder, "calibration", policy, "plans.pkl"), "rb") as f:
            runs.append((got, pickle.load(f)))
    first = runs[0][1][0]
    rebuild, args = config_reduce(first.config, max(len(lengths), 1))
    pooled = rebuild(*args)
    overheads: list[float] = []
    for got, plans in runs:
        walls, records = got["all_step_s"], got["records"]
        # Step 0 pays one-time costs (allocation, connections, caches): not observed.
        for k in range(1, min(len(records), len(plans), len(walls) + 1)):
            pooled.observe(plans[k], records[k]["times"], step_time=walls[k - 1])
            overheads.append(overhead_s(walls[k - 1], records[k]["times"]))
    refit = pooled.refit()
    model = refit.model.copy()
    slowed = 1.0
    if refit.verdict == "scale-only":
        # The window told a uniform factor and nothing more: plans stay the prior's, and the
        # predictions are the prior's times that factor, said as such (the per-step cost
        # was measured, not scaled).
        slowed = float(refit.scale)
        model = model.slowed(slowed)
        model.iteration_fixed_s = refit.model.iteration_fixed_s
    path = os.path.join(folder, "cost_model.calibrated.json")
    how = (f"the prior slowed x{slowed:.4g} (the refit found a uniform factor only)"
           if slowed != 1.0 else "one refit pooling calibration runs of "
           + " and ".join(CALIBRATION_POLICIES))
    model.to_json(path, comment=f"python -m skrull.bench --calibrate online: one model of "
                                f"this machine, {how}")
    return path, {"refit": refit.describe(), "verdict": refit.verdict,
                  "policies": list(CALIBRATION_POLICIES), "overhead_s": overheads,
                  "iteration_fixed_s": model.iteration_fixed_s,
                  "last_micro_batch_s": refit.coefficients.get("last_micro_batch", 0.0) * 1e-3,
                  "slowed": slowed}


def _policy_row(opts: Any, policy: str, lengths: list[int], bucket: int,
                cost_path: str | None, cost_model: Any, cli: str,
                folder: str, delay: int = 0) -> dict[str, Any]:
    """One policy's row (with ``delay``: through the outlier-delay window), run again once
    when its steps spread more than ``--max-spread`` (the run with the smaller spread is
    kept; still above it, the row is marked noisy)."""
    accum = _grad_accum(opts, policy, lengths, bucket, cost_model, delay)
    best: dict[str, Any] | None = None
    for attempt in range(2):
        got = _run_policy(opts, policy, lengths, bucket, accum, cost_path,
                          os.path.join(folder, f"run{attempt}"), delay=delay)
        row = _summarise(opts, policy, got, cli)
        row["runs"] = attempt + 1
        if best is None or row["measured_spread"] < best["measured_spread"]:
            best = row
        if best["measured_spread"] <= opts.max_spread:
            break
    assert best is not None
    best["noisy"] = best["measured_spread"] > opts.max_spread
    return best


def _ranked_alike(rows: list[dict[str, Any]], margin: float = 0.10) -> tuple[bool, int]:
    """Whether every pair of policies whose measured times differ by more than ``margin``
    is ordered alike by prediction; and how many such pairs there are."""
    pairs, alike = 0, True
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            ma, mb = a["measured_step_s"], b["measured_step_s"]
            if abs(ma - mb) <= margin * min(ma, mb):
                continue
            pairs += 1
            alike &= (ma < mb) == (a["predicted_step_s"] < b["predicted_step_s"])
    return alike, pairs


def run(opts: Any) -> dict[str, Any]:
    """Runs the bench for parsed options (``parse``); returns the result dict."""
    from ..profile import find_cli
    cli = find_cli(None)
    if cli is None:
        raise BenchError("the skrull command was not found (pip install the package, or set "
                         "SKRULL_CLI)")
    lengths, bucket = lengths_and_bucket(opts, cli)
    check_fits(opts, bucket)
    import shutil

    import skrull
    calibration: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        folder = opts.work_dir or tmp
        os.makedirs(folder, exist_ok=True)
        cost_path = os.path.abspath(opts.cost_model) if opts.cost_model else None
        if "profile" in opts.calibrate:
            cost_path = os.path.join(folder, "cost_model.json")
            with open(cost_path, "w") as f:
                f.write(_profile(opts, cli, folder))
        if "online" in opts.calibrate:
            cost_path, calibration = _calibrate_online(opts, lengths, bucket, cost_path, cli,
                                                       folder)
        if opts.save_cost_model:
            if cost_path is not None:
                shutil.copyfile(cost_path, opts.save_cost_model)
            else:
                skrull.CostModel("h100", _shape(opts)).to_json(opts.save_cost_model)
        cost_model = skrull.CostModel.from_json(cost_path) if cost_path else None
        rows = []
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
        bar = tqdm(opts.policies, desc="policies", disable=opts.quiet, file=sys.stderr)
        for policy in bar:
            bar.set_postfix_str(policy)
            for delay in [0] + ([opts.outlier_delay] if opts.outlier_delay else []):
                row = _policy_row(opts, policy, lengths, bucket, cost_path, cost_model, cli,
                                  os.path.join(folder, policy), delay)
                row["outlier_delay"] = delay
                rows.append(row)
        bar.close()
    base = next((r for r in rows if r["policy"] == "deepspeed" and not r["outlier_delay"]),
                None)
    for r in rows:
        if base is not None:
            r["speedup_vs_deepspeed"] = base["measured_step_s"] / r["measured_step_s"]
    by_measured = [label(r) for r in sorted(rows, key=lambda r: r["measured_step_s"])]
    by_predicted = [label(r) for r in sorted(rows, key=lambda r: r["predicted_step_s"])]
    alike, pairs = _ranked_alike(rows)
    config = {"dp": opts.dp, "cp": opts.cp, "device": opts.device, "dtype": opts.dtype,
              "model": opts.model, "model_config": opts.model_config, "bucket": bucket,
              "batch": opts.batch, "warmup": opts.warmup, "steps": opts.steps,
              "calibrate": opts.calibrate, "cost_model": opts.cost_model,
              "lengths": opts.lengths or None,
              "dataset": None if opts.lengths else (opts.dataset or "lmsys"),
              "max_len": opts.max_len, "sequences": len(lengths), "seed": opts.seed,
              "sync": sync_of(opts), "max_spread": opts.max_spread,
              "outlier_delay": opts.outlier_delay, "engine": opts.engine, "zero": opts.zero,
              "chunk_size": opts.chunk_size, "chunk_keep": opts.chunk_keep}
    return {"config": config, "calibration": calibration, "policies": rows,
            "ranked_alike": alike, "pairs_compared": pairs,
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


