"""The cost model's prediction of a plan: the evaluator, through ``skrull evaluate`` (the
one evaluator the CLI and the simulator use; ``docs/cost_model.md``)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any

import numpy as np


def evaluate(cli: str, plan_json: str, cost_model_json: str,
             sync: str | None = None) -> dict[str, Any]:
    """``skrull evaluate --format json`` of one plan under one cost model, composed as the
    plan's configuration says (``sync``: another synchronisation instead)."""
    with tempfile.TemporaryDirectory() as d:
        plan, model = os.path.join(d, "plan.json"), os.path.join(d, "model.json")
        with open(plan, "w") as f:
            f.write(plan_json)
        with open(model, "w") as f:
            f.write(cost_model_json)
        args = [cli, "evaluate", "--plan", plan, "--cost-model", model, "--format", "json"]
        if sync is not None:
            args += ["--sync", sync]
        run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"skrull evaluate: {run.stderr.strip()}")
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def measured_compute_s(times: Any) -> float:
    """The step's micro-batch time from measured ``[micro_batch][dp][cp]`` times: the
    slowest rank's sum over its micro-batches. Each rank's timer runs from the start to the
    end of its own micro-batch, waits for its CP ring included, and every rank meets the
    others at the step's gradient all-reduce, so this is the wall time of the micro-batches
    (the ranks' sums agree to within the timer's resolution)."""
    t = np.asarray(times, dtype=np.float64)
    return float(t.sum(axis=0).max())


def overhead_s(step_s: Any, times: Any) -> float:
    """A step's time outside the timed micro-batches (optimizer step, data loading and
    collation, the trainer's loop): its wall time minus ``measured_compute_s``."""
    return float(step_s) - measured_compute_s(times)


def gpu_pairs(report: dict[str, Any], times: Any) -> dict[str, list[tuple[float, float]]]:
    """(predicted, measured) per (micro-batch, GPU), split by kind: ``"local"``
    (micro-batches of whole sequences only: the measured time is that GPU's own work) and
    ``"sharded"`` (micro-batches holding a sharded sequence: the measured time includes
    waiting for the ring, so it is set against the slowest GPU's prediction)."""
    t = np.asarray(times, dtype=np.float64)
    out: dict[str, list[tuple[float, float]]] = {"local": [], "sharded": []}
    for m in report["micro_batches"]:
        pred = [float(x) for x in m["rank_times_s"]]
        got = t[m["index"], m["dp"]]
        if m["sharded"] > 0 or m.get("group_chunked", 0) > 0:
            out["sharded"] += [(max(pred), float(x)) for x in got]
        else:
            out["local"] += [(p, float(x)) for p, x in zip(pred, got) if p > 0]
    return out
