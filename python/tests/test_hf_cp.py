"""Context parallelism inside transformers' Trainer (``SkrullTrainer`` with ``cp > 1``): on
DP 2 x CP 2 (Llama) and DP 1 x CP 4 (Qwen2) gloo processes, float64, policies ``balanced``,
``skrull`` and ``packed`` with zigzag padding, the weights after 3 AdamW steps equal those of
unpacked training to 1e-10 relative, and every step's loss equals the reference's. At CP 4,
``balanced`` plans with a cost model whose CP ring crosses nodes, so sequences are sharded
over sub-groups of 2 CP ranks next to ones over all 4 (checked on the plans). Both layouts
have 4 processes: one launch runs all six trainings, and at DP 2 x CP 2 two chunked ones
(ChunkFlow's schedule in the Trainer: ``chunkflow`` over the group, ``balanced`` chunking on one
GPU beside local and sharded sequences on slow links); a 2-process launch trains chunked at
DP 2 x CP 1."""

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


#: Chunked runs (name -> policy and chunking) of the DP 2 x CP 2 layout.
CHUNKED = {"chunkflow": dict(policy="chunkflow", chunking=dict(chunk_size=24, chunk_keep=1)),
           "balanced-chunked": dict(policy="balanced", chunking=dict(
               chunk_size=16, chunk_keep=2, bandwidth=1e4))}


def _plans(case: dict, policy: str, chunking: dict | None = None) -> list[skrull.Plan]:
    lengths = _lengths(case)
    sched = skrull.Scheduler(case["dp"], case["cp"], case["bucket"], lockstep=True,
                             **worker.scheduler_kwargs(policy, case["cp"], chunking))
    return [sched.plan([lengths[i] for i in idx])
            for idx in worker.global_batches(case["n"], case["batch"], STEPS)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One 4-process launch: every layout x policy; plus each layout's plans."""
    plans = {name: {p: _plans(case, p) for p in POLICIES} for name, case in LAYOUTS.items()}
    for run, spec in CHUNKED.items():
        plans["dp2xcp2"][run] = _plans(LAYOUTS["dp2xcp2"], spec["policy"], spec["chunking"])
    layouts = {}
    for name, case in LAYOUTS.items():
        runs = {p: {"policy": p, "grad_accum": max(pl.num_micro_batches for pl in plans[name][p])}
                for p in POLICIES}
        if name == "dp2xcp2":
            runs.update({r: dict(spec, grad_accum=max(pl.num_micro_batches
                                                      for pl in plans[name][r]))
                         for r, spec in CHUNKED.items()})
        layouts[name] = dict(lengths=_lengths(case), seed=0, kind=case["kind"],
                             bucket=case["bucket"], cp=case["cp"], batch=case["batch"],
                             steps=STEPS, runs=runs)
    t0 = time.perf_counter()
    result = worker.launch(4, "cp", {"layouts": layouts}, str(tmp_path_factory.mktemp("cp")))
    print(f"\nlaunch of 4 processes, 8 trainings: {time.perf_counter() - t0:.1f} s")
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


def test_chunked_runs_in_the_cp_trainer_equal_unpacked_training(trained):
    plans, layouts, result = trained
    name, case = "dp2xcp2", LAYOUTS["dp2xcp2"]
    groups = {r: {int(g) for pl in plans[name][r] for g in pl.cp_size[pl.chunked]}
              for r in CHUNKED}
    assert groups == {"chunkflow": {2}, "balanced-chunked": {1}}
    kinds = [set(pl.kind[(pl.dp_rank == d) & (pl.micro_batch == m)].tolist())
             for pl in plans[name]["balanced-chunked"] for d in range(case["dp"])
             for m in range(pl.num_micro_batches)]
    # Chunks beside local sequences in one micro-batch (beside sharded ones too: the float64
    # gradient check, test_gradcheck.py).
    assert {"chunked", "local"} in kinds, kinds
    ref = worker.reference(case["kind"], worker.dataset(_lengths(case), 0),
                           worker.global_batches(case["n"], case["batch"], STEPS))
    report = []
    for r in CHUNKED:
        got = result[(name, r)]
        loss_err = max(abs(a - b) / b for a, b in zip(got["losses"], ref["losses"]))
        weight_err = worker.max_rel_diff(got["weights"], ref["weights"])
        chunked = sum(pl.summary.chunked for pl in plans[name][r])
        report.append(f"{r}: chunked {chunked}, loss {loss_err:.1e}, weights {weight_err:.1e}")
        assert chunked and loss_err < LOSS_TOLERANCE and weight_err < WEIGHTS_TOLERANCE, r
    print("\n" + "; ".join(report))


def test_chunked_trainer_at_dp2_without_cp_equals_unpacked_training(tmp_path):
    # CP 1: SkrullTrainer takes the per-GPU buffers (not its collator) to run chunk passes.
    case = dict(LAYOUTS["dp2xcp2"], cp=1, bucket=128)
    lengths = _lengths(case)
    chunking = dict(chunk_size=32, chunk_keep=1)
    sched = skrull.Scheduler(2, 1, case["bucket"], lockstep=True,
                             **worker.scheduler_kwargs("chunkflow", 1, chunking))
    plans = [sched.plan([lengths[i] for i in idx])
             for idx in worker.global_batches(case["n"], case["batch"], STEPS)]
    assert sum(pl.summary.chunked for pl in plans) and all(
        (pl.cp_size[pl.chunked] == 1).all() for pl in plans)
    grad_accum = max(pl.num_micro_batches for pl in plans)
    layouts = {"dp2": dict(lengths=lengths, seed=0, kind=case["kind"], bucket=case["bucket"],
                           cp=1, batch=case["batch"], steps=STEPS,
                           runs={"chunkflow": dict(policy="chunkflow", chunking=chunking,
                                                   grad_accum=grad_accum)})}
    got = worker.launch(2, "cp", {"layouts": layouts}, str(tmp_path))[("dp2", "chunkflow")]
    ref = worker.reference(case["kind"], worker.dataset(lengths, 0),
                           worker.global_batches(case["n"], case["batch"], STEPS))
    loss_err = max(abs(a - b) / b for a, b in zip(got["losses"], ref["losses"]))
    weight_err = worker.max_rel_diff(got["weights"], ref["weights"])
    print(f"\nDP 2 x CP 1 chunkflow: loss {loss_err:.1e}, weights {weight_err:.1e}")
    assert loss_err < LOSS_TOLERANCE and weight_err < WEIGHTS_TOLERANCE
