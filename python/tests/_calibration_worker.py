"""One process of the multi-process online-calibration test (see test_online_calibration.py).

DP 2 x CP 2 gloo processes train ``TinyTransformer`` for a few steps on skrull plans
(``balanced``, lockstep), from a prior whose fixed cost is a warm-up step's median.
Every rank times its micro-batches on the CPU
(``OnlineCalibration.time``), all-gathers the times and refits every step
(``OnlineCalibration.step``), then plans the next batch with the refitted model. After every
step the ranks compare what they hold: the gathered times, the cost model's bytes and the next
plan's digest must be identical everywhere. Rank 0 writes what it saw to ``result.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist

import skrull
import skrull.torch as st

DP, CP = 2, 2
BUCKET = 64
VOCAB = 29
STEPS = 5


def batch(step: int) -> list[int]:
    """The lengths of one global batch: the same on every rank (seeded by the step)."""
    rng = np.random.default_rng(100 + step)
    return rng.integers(1, 2 * BUCKET + 1, 14).tolist()


def _samples(lengths: list[int], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g) for n in lengths]


def _model_hash(scheduler: skrull.Scheduler) -> str:
    return hashlib.sha256(scheduler.cost_model.to_json().encode()).hexdigest()


def _same_everywhere(value: object) -> list:
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, value)
    assert all(v == got[0] for v in got), got
    return got


def _cpu_prior(model: st.TinyTransformer, rings: dict, dp_rank: int,
               cp_rank: int) -> skrull.CostModel:
    """The H100 preset with the median of one gathered warm-up step as its fixed cost per
    micro-batch (the same array, so the same prior, on every rank): the preset alone is so far
    from a tiny CPU model that the refit drops every time as a straggler and keeps it."""
    warm = skrull.Scheduler(DP, CP, BUCKET, lockstep=True)
    plan = warm.plan(batch(-1))
    timer = st.MicroBatchTimer()
    for mb in st.collate(plan, _samples(batch(-1), 99), dp_rank, cp_rank):
        with timer.time():
            st.packed_loss(model.forward_packed(mb, ring_groups=rings), mb).backward()
    model.zero_grad()
    times = st.gather_times(timer.collect(), plan)
    return skrull.CostModel("h100", kernel_launch_s=0.0,
                            micro_batch_extra_s=float(np.nanmedian(times)))


def run(rank: int, rendezvous: str, out_dir: str) -> None:
    """Entry point of one rank (``torch.multiprocessing.start_processes``)."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=DP * CP)
    rings = st.cp_ring_groups(DP, CP)
    dp_rank, cp_rank = divmod(rank, CP)
    torch.manual_seed(1234)
    model = st.TinyTransformer(vocab=VOCAB, hidden=16, heads=2, ffn=32, layers=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    scheduler = skrull.Scheduler(DP, CP, BUCKET, lockstep=True,
                                 cost_model=_cpu_prior(model, rings, dp_rank, cp_rank))
    logged: list[str] = []
    online = st.OnlineCalibration(scheduler, every=1, callback=lambda r: logged.append(
        r.describe()))
    steps = []
    for step in range(STEPS):
        lengths = batch(step)
        plan = scheduler.plan(lengths)
        for mb in st.collate(plan, _samples(lengths, step), dp_rank, cp_rank):
            with online.time():
                loss = st.packed_loss(model.forward_packed(mb, ring_groups=rings), mb)
                loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        refit = online.step(plan)
        assert refit is not None
        times = online.last_times
        assert times is not None and times.shape == (plan.num_micro_batches, DP, CP)
        assert np.isfinite(times).all() and (times > 0).all()
        next_plan = scheduler.plan(batch(step + 1))
        record = {"plan": plan.digest(), "times": hashlib.sha256(times.tobytes()).hexdigest(),
                  "model": _model_hash(scheduler), "next_plan": next_plan.digest(),
                  "changed": bool(refit.changed), "error": refit.error,
                  "prior_error": refit.prior_error, "step_time": (None if math.isnan(online.last_step_time)
                                                      else online.last_step_time),
                  "step_times": refit.step_times}
        _same_everywhere(record)
        steps.append(record)
    _same_everywhere(logged)
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"steps": steps, "logged": logged,
                       "final_model": scheduler.cost_model.to_dict(),
                       "seconds": time.perf_counter() - t0}, f)
    dist.destroy_process_group()
