"""Context parallelism inside transformers' Trainer (``SkrullTrainer`` with ``cp > 1``): on
DP 2 x CP 2 (Llama) and DP 1 x CP 4 (Qwen2) gloo processes, float64, policies ``balanced``,
``skrull`` and ``packed`` with zigzag padding, the weights after 3 AdamW steps equal those of
unpacked training to 1e-10 relative, and every step's loss equals the reference's. At CP 4,
``balanced`` plans with a cost model whose CP ring crosses nodes, so sequences are sharded
over sub-groups of 2 CP ranks next to ones over all 4 (checked on the plans). Both layouts
have 4 processes: one launch runs all six trainings."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import skrull  # noqa: E402

import _hf_worker as worker  # noqa: E402

WEIGHTS_TOLERANCE = 1e-10
LOSS_TOLERANCE = 1e-12
STEPS = 3
POLICIES = ("balanced", "skrull", "packed")
LAYOUTS = {
    "dp2xcp2": dict(dp=2, cp=2, kind="llama", n=36, batch=12, bucket=64, max_len=128, seed=3),
    "dp1xcp4": dict(dp=1, cp=4, kind="qwen2", n=24, batch=8, bucket=16, max_len=64, seed=2),
}


def _lengths(case: dict) -> list[int]:
    rng = np.random.default_rng(case["seed"])
    return rng.integers(1, case["max_len"] + 1, case["n"]).tolist()


def _plans(case: dict, policy: str) -> list[skrull.Plan]:
    lengths = _lengths(case)
    sched = skrull.Scheduler(case["dp"], case["cp"], case["bucket"], lockstep=True,
                             **worker.scheduler_kwargs(policy, case["cp"]))
    return [sched.plan([lengths[i] for i in idx])
            for idx in worker.global_batches(case["n"], case["batch"], STEPS)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One 4-process launch: every layout x policy; plus each layout's plans."""
    plans = {name: {p: _plans(case, p) for p in POLICIES} for name, case in LAYOUTS.items()}
    layouts = {}
    for name, case in LAYOUTS.items():
        runs = {p: {"policy": p, "grad_accum": max(pl.num_micro_batches for pl in plans[name][p])}
                for p in POLICIES}
        layouts[name] = dict(lengths=_lengths(case), seed=0, kind=case["kind"],
                             bucket=case["bucket"], cp=case["cp"], batch=case["batch"],
                             steps=STEPS, runs=runs)
    t0 = time.perf_counter()
    result = worker.launch(4, "cp", {"layouts": layouts}, str(tmp_path_factory.mktemp("cp")))
    print(f"\nlaunch of 4 processes, 6 trainings: {time.perf_counter() - t0:.1f} s")
    return plans, layouts, result


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_cp_trainer_equals_unpacked_training(name, trained):
    plans, layouts, result = trained
    case = LAYOUTS[name]
    assert case["dp"] * case["cp"] == 4
    # The runs cover what they claim: local and sharded sequences, sub-groups at CP 4.
    sharded = {p: sum(pl.summary.sharded for pl in plans[name][p]) for p in POLICIES}
    local = {p: sum(pl.summary.sequences - pl.summary.sharded for pl in plans[name][p])
             for p in POLICIES}
    assert all(sharded.values()) and local["skrull"] and local["packed"] == 0
    if case["cp"] >= 4:
        assert sum(pl.subgroup_sharded for pl in plans[name]["balanced"]) > 0
    ref = worker.reference(case["kind"], worker.dataset(_lengths(case), 0),
                           worker.global_batches(case["n"], case["batch"], STEPS))
    report = []
    for p in POLICIES:
        got, g = result[(name, p)], layouts[name]["runs"][p]["grad_accum"]
        assert got["micro_batches"] == STEPS * g
        loss_err = max(abs(a - b) / b for a, b in zip(got["losses"], ref["losses"]))
        weight_err = worker.max_rel_diff(got["weights"], ref["weights"])
        report.append(f"{p}: sharded {sharded[p]}, local {local[p]}, G {g}, loss "
                      f"{loss_err:.1e}, weights {weight_err:.1e}")
        assert loss_err < LOSS_TOLERANCE, (p, got["losses"], ref["losses"])
        assert weight_err < WEIGHTS_TOLERANCE, (p, weight_err)
    print(f"\n{name}: " + "; ".join(report))
