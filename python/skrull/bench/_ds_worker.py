"""One rank of one policy's run on DeepSpeed's own engine (``--engine deepspeed``): the raw
loop through ``skrull.deepspeed`` for warm-up plus timed steps, recording what ``_worker``
records for ``SkrullTrainer`` (rank 0 writes it)."""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from typing import Any

import numpy as np
import torch

from ._worker import NEVER, _model, _peak_bytes, _samples


def rank_main(rank: int, world: int, port: int, spec: dict[str, Any], out: str) -> None:
    """Entry point of one spawned rank."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    cuda = spec["device"] == "cuda"
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if cuda else "cpu")
    # DeepSpeed JIT-builds its CPU communication op with ninja, found on PATH.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    torch.set_num_threads(1)
    log = os.open(os.path.join(out, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    if cuda:
        torch.cuda.set_device(rank)
    import deepspeed  # type: ignore[import-untyped]
    import torch.distributed as dist

    import skrull
    from skrull.deepspeed import SkrullDeepSpeed

    deepspeed.init_distributed("nccl" if cuda else "gloo")
    model = _model(spec)
    if cuda:
        model = model.cuda()
        torch.cuda.reset_peak_memory_stats()
    base = _peak_bytes(spec["device"]) if not cuda else 0
    steps = spec["warmup"] + spec["steps"]
    every = spec["warmup"] if "online" in spec["calibrate"] else NEVER
    scheduler: dict[str, Any] = {"policy": spec["policy"], "shard_padding": "zigzag",
                                 "model": {k: v for k, v in spec["model_config"].items()
                                           if k != "model_type"}}
    if spec["cost_model"] is not None:
        scheduler["cost_model"] = skrull.CostModel.from_json(spec["cost_model"])
    config: dict[str, Any] = {"zero_optimization": {"stage": spec["zero"],
                                                    "overlap_comm": False},
                              "zero_allow_untested_optimizer": True,
                              "steps_per_print": 1 << 30, "wall_clock_breakdown": False}
    if spec["dtype"] == "bfloat16":
        config["bf16"] = {"enabled": True}
    sk = SkrullDeepSpeed(config, spec["lengths"], spec["batch"], spec["bucket"], cp=spec["cp"],
                         micro_batches=spec["grad_accum"], epochs=steps, max_steps=steps,
                         seed=spec["seed"], scheduler=scheduler, calibrate_every=every,
                         device=torch.device("cuda", rank) if cuda else None)
    online = sk.calibration
    records: list[dict[str, Any]] = []
    plans: list[Any] = []
    inner = online.step

    def record(plan: Any) -> Any:
        refit = inner(plan)
        plans.append(plan)
        records.append({"plan": plan.to_json(), "times": online.last_times.tolist()})
        if online.steps == spec["warmup"] and "online" in spec["calibrate"]:
            online.every = NEVER  # one refit, after `warmup` steps
        return refit
    online.step = record
    engine, *_ = deepspeed.initialize(model=model, config=sk.config, mpu=sk.mpu,
                                      optimizer=torch.optim.SGD(model.parameters(), lr=1e-4))
    data = _samples(spec["lengths"], spec["model_config"]["vocab_size"], spec["seed"])
    ends: list[float] = []
    for step in sk.steps(data):
        sk.train_step(engine, step)
        if cuda:
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
    step_s = np.diff(np.array(ends)).tolist()
    peak = _peak_bytes(spec["device"]) - base
    timing = torch.tensor(step_s + [float(peak)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(timing, op=dist.ReduceOp.MAX)
    if rank == 0:
        result = {"all_step_s": timing[:-1].tolist(), "peak_memory_bytes": int(timing[-1]),
                  "micro_batches": spec["grad_accum"], "records": records,
                  "cost_model": sk.scheduler.cost_model.to_json(),
                  "refit": online.last_refit.describe() if online.last_refit else None}
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(result, f)
        with open(os.path.join(out, "plans.pkl"), "wb") as raw:
            pickle.dump(plans, raw)
