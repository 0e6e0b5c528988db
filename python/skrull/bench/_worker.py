"""One rank of one policy's run: ``SkrullTrainer`` for warm-up plus timed steps, recording
each step's wall time, plan and measured micro-batch times (rank 0 writes them)."""

from __future__ import annotations

import json
import os
import pickle
import resource
import time
from typing import Any

import numpy as np
import torch

#: Refit interval that never comes (times are still gathered each step, so every step's
#: micro-batch times are recorded, but the model does not move).
NEVER = 1 << 30


def _model(spec: dict[str, Any]) -> torch.nn.Module:
    import transformers
    fields = dict(spec["model_config"])
    kind = fields.pop("model_type", "llama")
    config = transformers.AutoConfig.for_model(kind, **fields)
    config.use_cache = False
    config.max_position_embeddings = max(getattr(config, "max_position_embeddings", 0) or 0,
                                         spec["longest"] + 1)
    config._attn_implementation = "skrull"
    torch.manual_seed(spec["seed"])
    model: torch.nn.Module = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
        config)
    return model.to(getattr(torch, spec["dtype"]))


def _samples(lengths: list[int], vocab: int, seed: int) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(seed + 1)
    return [{"input_ids": rng.integers(0, vocab, n).tolist()} for n in lengths]


def _peak_bytes(device: str) -> int:
    if device == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def rank_main(rank: int, world: int, port: int, spec: dict[str, Any], out: str) -> None:
    """Entry point of one spawned rank."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    # The Trainer prints its summary to stdout: keep the bench's own output clean.
    log = os.open(os.path.join(out, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    cuda = spec["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    import torch.distributed as dist
    from transformers import TrainerCallback, TrainingArguments

    import skrull
    from skrull.hf import SkrullConfig, SkrullTrainer

    ends: list[float] = []
    records: list[dict[str, Any]] = []
    plans: list[Any] = []
    state: dict[str, Any] = {}

    class Trainer(SkrullTrainer):
        def get_train_dataloader(self) -> Any:
            loader = super().get_train_dataloader()
            online = self.skrull_calibration
            if online is not None and "wrapped" not in state:
                state["wrapped"] = True
                inner = online.step

                def step(plan: Any) -> Any:
                    refit = inner(plan)
                    plans.append(plan)
                    records.append({"plan": plan.to_json(),
                                    "times": online.last_times.tolist()})
                    if online.steps == spec["warmup"] and "online" in spec["calibrate"]:
                        online.every = NEVER          # one refit, after `warmup` steps
                    return refit
                online.step = step
            return loader

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, st: Any, control: Any,  # type: ignore[override]
                        **kw: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            ends.append(time.perf_counter())

    model = _model(spec)
    if cuda:
        model = model.cuda()
        torch.cuda.reset_peak_memory_stats()
    base = _peak_bytes(spec["device"]) if not cuda else 0
    steps = spec["warmup"] + spec["steps"]
    args = TrainingArguments(
        output_dir=os.path.join(out, "trainer"), use_cpu=not cuda, max_steps=steps,
        per_device_train_batch_size=1, gradient_accumulation_steps=spec["grad_accum"],
        learning_rate=1e-4, lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=0.0, optim="sgd", report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, seed=spec["seed"],
        ddp_backend=("nccl" if cuda else "gloo") if world > 1 else None,
        ddp_find_unused_parameters=False, dataloader_num_workers=0,
        bf16=spec["dtype"] == "bfloat16" and cuda)
    every = spec["warmup"] if "online" in spec["calibrate"] else NEVER
    scheduler = {"policy": spec["policy"], "shard_padding": "zigzag",
                 "model": {k: v for k, v in spec["model_config"].items()
                           if k != "model_type"}, **spec.get("chunking", {})}
    if spec["cost_model"] is not None:
        scheduler["cost_model"] = skrull.CostModel.from_json(spec["cost_model"])
    if spec.get("outlier_delay"):
        scheduler["outlier_delay"] = spec["outlier_delay"]   # SkrullBatchSampler's
    cfg = SkrullConfig(bucket_tokens=spec["bucket"], cp=spec["cp"],
                       lengths=spec["lengths"], global_batch_size=spec["batch"],
                       scheduler=scheduler, calibrate_every=every)
    trainer = Trainer(model=model, args=args,
                      train_dataset=_samples(spec["lengths"], spec["model_config"]["vocab_size"],
                                             spec["seed"]),
                      skrull=cfg, callbacks=[Clock()])
    trainer.train()
    # Wall time of steps 1.. (each from the end of the step before; step 0 has no start).
    step_s = np.diff(np.array(ends)).tolist()
    peak = _peak_bytes(spec["device"]) - base
    timing = torch.tensor(step_s + [float(peak)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(timing, op=dist.ReduceOp.MAX)
    if rank == 0:
        online = trainer.skrull_calibration
        result = {"all_step_s": timing[:-1].tolist(), "peak_memory_bytes": int(timing[-1]),
                  "micro_batches": spec["grad_accum"], "records": records,
                  "cost_model": online.scheduler.cost_model.to_json(),
                  "refit": online.last_refit.describe() if online.last_refit else None}
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(result, f)
        with open(os.path.join(out, "plans.pkl"), "wb") as raw:
            pickle.dump(plans, raw)
