"""Shared pieces of the DeepSpeed tests (test_deepspeed*.py): the engine config, the raw
loop through ``skrull.deepspeed``, plain DeepSpeed on the same batches (every sequence on its
own micro-batch, every rank a DP rank), ``SkrullTrainer`` with ``deepspeed=``, and the entry
point of one spawned rank, which runs a list of jobs in one process group.

Models, data and the float64 reference are ``_hf_worker``'s (tiny random Llama, float64). The
optimizer is SGD (lr 1): ZeRO keeps float32 master weights and gradients even for a float64
model, so DeepSpeed runs agree with the float64 reference to float32 rounding (about 1e-7),
and AdamW would amplify that (docs/hf.md).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import torch

import _hf_worker as hf

LR = 1.0
#: The data of every run: 48 sequences of 1-88 tokens, 12 per step, 3 steps; BucketSize 128
#: without CP, 64 with it (sequences above 64 tokens must be sharded).
N, BATCH, STEPS = 48, 12, 3
BUCKET_DP, BUCKET_CP = 128, 64
#: float32 master weights: about 1e-7 measured after 3 SGD steps.
WEIGHTS_TOLERANCE = 1e-6
#: The first step's loss, before any update (float64 throughout).
FIRST_LOSS_TOLERANCE = 1e-13


def lengths() -> list[int]:
    """Token counts of the dataset."""
    return np.random.default_rng(3).integers(1, 89, N).tolist()


def batches() -> list[list[int]]:
    """Dataset indices of each step, as the Trainer and ``SkrullDeepSpeed`` draw them."""
    return hf.global_batches(N, BATCH, STEPS)


def sgd_reference(steps: list[list[int]]) -> dict[str, Any]:
    """The float64 per-sequence reference with SGD (lr 1): per-step losses, final weights."""
    data = hf.dataset(lengths())
    with hf.one_thread():
        model = hf.tiny_model("llama", "sdpa")
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        losses = []
        for idx in steps:
            labels = sum(len(data[i]["input_ids"]) - 1 for i in idx)
            opt.zero_grad()
            total = 0.0
            for i in idx:
                ids = torch.tensor(data[i]["input_ids"])[None]
                out = model(input_ids=ids, labels=ids, num_items_in_batch=labels,
                            use_cache=False)
                out.loss.backward()
                total += float(out.loss.detach())
            opt.step()
            losses.append(total)
    return {"losses": losses, "weights": {k: v.detach() for k, v in model.state_dict().items()}}


def job_spec(**kw: Any) -> dict[str, Any]:
    """A job's settings: the data above, ZeRO-2, and ``kw``."""
    return {"lengths": lengths(), "batch": BATCH, "steps": STEPS, "stage": 2, **kw}


def check(got: dict[str, Any], ref: dict[str, Any], plain: dict[str, Any], label: str) -> None:
    """A run against the float64 reference (first loss exact, weights to float32 rounding)
    and against plain DeepSpeed (weights to float32 rounding)."""
    first = abs(got["losses"][0] - ref["losses"][0]) / ref["losses"][0]
    vs_ref = hf.max_rel_diff(got["weights"], ref["weights"])
    vs_plain = hf.max_rel_diff(got["weights"], plain["weights"])
    print(f"\n{label}: first loss {first:.1e}, weights vs float64 reference {vs_ref:.1e}, "
          f"vs plain DeepSpeed {vs_plain:.1e}")
    assert first < FIRST_LOSS_TOLERANCE, (got["losses"], ref["losses"])
    assert vs_ref < WEIGHTS_TOLERANCE and vs_plain < WEIGHTS_TOLERANCE
    later = max(abs(a - b) / b for a, b in zip(got["losses"], ref["losses"]))
    assert later < 1e-8  # later steps start from weights that differ by float32 rounding


def ds_config(stage: int, managed: bool = True, **extra: Any) -> dict[str, Any]:
    """The engine config of every run: ZeRO ``stage``, no overlap (gloo), the torch optimizer
    allowed, nothing printed."""
    config: dict[str, Any] = {"zero_optimization": {"stage": stage, "overlap_comm": False},
                              "zero_allow_untested_optimizer": True,
                              "steps_per_print": 1 << 30, "wall_clock_breakdown": False}
    if not managed:
        config["managed_gradient_accumulation"] = False
    config.update(extra)
    return config


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _all_sum(values: list[float]) -> list[float]:
    import torch.distributed as dist
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def _reset_groups() -> None:
    """DeepSpeed keeps the last engine's mpu in a module global (``groups.mpu``); an engine
    built without one would inherit it."""
    from deepspeed.utils import groups
    groups.mpu = None


def job_raw(spec: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """The raw loop through ``skrull.deepspeed``: per-step losses (summed over ranks), final
    weights, every step's batch and micro-batch counts per DP rank; with ``resume_after``,
    trained that many steps, checkpointed, rebuilt from scratch and resumed."""
    import deepspeed
    from skrull.deepspeed import SkrullDeepSpeed
    data = hf.dataset(spec["lengths"], spec.get("data_seed", 0))
    attention = "skrull" if spec["cp"] > 1 else "sdpa"

    def build() -> tuple[Any, Any, Any]:
        _reset_groups()
        model = hf.tiny_model("llama", attention).to(getattr(torch, spec.get("dtype",
                                                                                  "float64")))
        sk = SkrullDeepSpeed(ds_config(spec["stage"], spec.get("managed", True)),
                             spec["lengths"], spec["batch"], spec["bucket"], cp=spec["cp"],
                             micro_batches=spec.get("micro_batches", "auto"),
                             max_steps=spec["steps"], epochs=spec.get("epochs", 1),
                             scheduler={"policy": spec.get("policy", "balanced")})
        engine, *_ = deepspeed.initialize(model=model, config=sk.config, mpu=sk.mpu,
                                          optimizer=torch.optim.SGD(model.parameters(), lr=LR))
        return model, sk, engine

    model, sk, engine = build()
    losses, batches, counts = [], [], []
    resume = spec.get("resume_after")
    for step in sk.steps(data):
        batches.append(step.indices.tolist())
        counts.append(step.plan.micro_batches_per_dp.tolist())
        losses.append(sum(float(sk.backward(engine, engine(**mb).loss, mb)) for mb in step))
        if resume is not None and sk.steps_done == resume:
            sk.save_checkpoint(engine, os.path.join(out_dir, "ckpt"), tag="mid")
            break
    before = len(batches)
    if resume is not None:
        model, sk, engine = build()
        sk.load_checkpoint(engine, os.path.join(out_dir, "ckpt"), tag="mid")
        for step in sk.steps(data):
            batches.append(step.indices.tolist())
            counts.append(step.plan.micro_batches_per_dp.tolist())
            losses.append(sum(float(sk.backward(engine, engine(**mb).loss, mb)) for mb in step))
    return {"losses": _all_sum(losses), "weights": _weights(model), "batches": batches,
            "counts": counts, "resumed_at": before if resume is not None else None,
            "micro_batches": sk.micro_batches, "gas": engine.gradient_accumulation_steps(),
            "train_batch_size": engine.train_batch_size(),
            "sp": int(getattr(engine, "sequence_parallel_size", 1))}


def job_plain(spec: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """Plain DeepSpeed on the same global batches: every rank a DP rank, one sequence per
    micro-batch (rank ``r`` takes sequences ``r, r + world, ...``), the engine's own
    accumulation counter, the loss over the global batch's label tokens times the world size
    (DeepSpeed averages over ranks) and ``scale_wrt_gas=False``."""
    import deepspeed
    import torch.distributed as dist
    _reset_groups()
    world, rank = dist.get_world_size(), dist.get_rank()
    data = hf.dataset(spec["lengths"], spec.get("data_seed", 0))
    per_rank = spec["batch"] // world
    model = hf.tiny_model("llama", "sdpa")
    config = ds_config(spec["stage"], train_micro_batch_size_per_gpu=1,
                       gradient_accumulation_steps=per_rank, train_batch_size=spec["batch"])
    engine, *_ = deepspeed.initialize(model=model, config=config,
                                      optimizer=torch.optim.SGD(model.parameters(), lr=LR))
    losses = []
    for idx in spec["batches"]:
        labels = sum(len(data[i]["input_ids"]) - 1 for i in idx)
        total = 0.0
        for i in idx[rank::world]:
            ids = torch.tensor(data[i]["input_ids"])[None]
            loss = engine(input_ids=ids, labels=ids, num_items_in_batch=labels,
                          use_cache=False).loss
            engine.backward(loss * world, scale_wrt_gas=False)
            engine.step()
            total += float(loss.detach())
        losses.append(total)
    return {"losses": _all_sum(losses), "weights": _weights(model)}


def job_trainer(spec: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """``SkrullTrainer`` with ``TrainingArguments(deepspeed=...)``, ``use_cpu`` as the spec
    says (False: the CPU start-up repair of ``SkrullTrainerMixin`` must run)."""
    from skrull.hf import SkrullConfig, SkrullTrainer
    _reset_groups()
    data = hf.dataset(spec["lengths"], spec.get("data_seed", 0))
    cp = spec["cp"]
    model = hf.tiny_model("llama", "skrull" if cp > 1 else "sdpa").to(
        getattr(torch, spec.get("dtype", "float64")))
    config = ds_config(spec["stage"], train_micro_batch_size_per_gpu="auto",
                       gradient_accumulation_steps="auto", train_batch_size="auto")
    args = hf.training_args(os.path.join(out_dir, "trainer"), spec["steps"],
                            spec["grad_accum"], deepspeed=config, optim="sgd",
                            learning_rate=LR, max_grad_norm=1e9, use_cpu=spec["use_cpu"],
                            ddp_backend="gloo")
    scheduler: dict[str, Any] = {"policy": spec.get("policy", "balanced")}
    if cp > 1:
        scheduler["shard_padding"] = "zigzag"
    trainer = hf.recording(SkrullTrainer)(
        model=model, args=args, train_dataset=data,
        skrull=SkrullConfig(bucket_tokens=spec["bucket"], cp=cp,
                            global_batch_size=spec["batch"], exact=True, scheduler=scheduler))
    trainer.train()
    engine = trainer.model_wrapped
    return {"losses": hf.step_losses(trainer, spec["grad_accum"]), "weights": _weights(model),
            "engine": type(engine).__name__, "world_size": args.world_size,
            "micro_batches": len(trainer.micro_losses)}


def job_refused(spec: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """``SkrullDeepSpeed`` asked for unequal micro-batch counts on a ZeRO stage that cannot
    run them: the error every rank raised (all-gathered), raised before any engine exists."""
    import torch.distributed as dist
    from skrull.deepspeed import SkrullDeepSpeed
    message = ""
    try:
        SkrullDeepSpeed(ds_config(spec["stage"]), spec["lengths"], spec["batch"],
                        spec["bucket"], micro_batches="unequal")
    except ValueError as e:
        message = str(e)
    messages: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(messages, message)
    return {"messages": messages}


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "examples", "deepspeed_sft.py")


def job_example(spec: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """``examples/deepspeed_sft.py``'s ``main(argv)`` on this process group, as torchrun
    would run it (it keeps a group it did not make): what rank 0 printed."""
    import contextlib
    import importlib.util
    import io
    lengths = os.path.join(out_dir, "lengths.txt")
    with open(lengths, "w") as f:
        f.write("\n".join(str(n) for n in spec["lengths"]))
    loader = importlib.util.spec_from_file_location("deepspeed_sft", EXAMPLE)
    assert loader is not None and loader.loader is not None
    example = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(example)
    _reset_groups()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        example.main(spec["argv"] + ["--lengths", lengths])
    return {"stdout": out.getvalue()}


def job_bench(spec: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """One rank of ``python -m skrull.bench --engine deepspeed`` (``skrull.bench._ds_worker``)
    on this process group, with the spec the bench builds; its ``result.json``. Run it last:
    the bench's rank sends its stdout to a log file."""
    import json
    import torch.distributed as dist
    from skrull.bench._ds_worker import rank_main
    _reset_groups()
    rank_main(dist.get_rank(), dist.get_world_size(), int(os.environ["MASTER_PORT"]), spec,
              out_dir)
    dist.barrier()
    with open(os.path.join(out_dir, "result.json")) as f:
        return {"result": json.load(f)}


JOBS = {"raw": job_raw, "plain": job_plain, "trainer": job_trainer, "refused": job_refused,
        "example": job_example, "bench": job_bench}


def spawned(rank: int, world: int, port: int, out_dir: str, jobs: list) -> None:
    """Entry point of one rank: DeepSpeed on the CPU (gloo), then every ``(name, job,
    spec)`` in order; rank 0 saves ``{name: result}`` to ``out_dir/result.pt``."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    hf.set_dist_env(rank, world, port)
    os.environ["DS_ACCELERATOR"] = "cpu"
    # DeepSpeed JIT-builds its shared-memory op with ninja from PATH; a venv that is not
    # activated has it next to python only.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    import deepspeed
    import torch.distributed as dist
    deepspeed.init_distributed("gloo")
    results: dict[str, Any] = {"seconds": {}}
    for name, job, spec in jobs:
        t = time.perf_counter()
        results[name] = JOBS[job](spec, os.path.join(out_dir, name))
        results["seconds"][name] = time.perf_counter() - t
        dist.barrier()
    results["seconds"]["total"] = time.perf_counter() - t0
    if rank == 0:
        torch.save(results, os.path.join(out_dir, "result.pt"))


#: What the launcher imports once before forking the ranks. DeepSpeed imports torch's
#: compiler on its first engine (``muon_optimizer``): about 7 s per process otherwise.
PRELOAD = ["torch", "transformers", "deepspeed", "deepspeed.runtime.zero.muon.muon_optimizer",
           "transformers.models.llama.modeling_llama", "transformers.trainer", "skrull.hf",
           "skrull.deepspeed", "skrull.bench._ds_worker"]


def _fork_ranks(world: int, port: int, out_dir: str, jobs: list) -> None:
    """The launcher: a fresh interpreter that imports ``PRELOAD`` once and forks the ranks
    (the session's own fork server may already run without DeepSpeed loaded)."""
    import importlib
    import torch.multiprocessing as tmp
    for name in PRELOAD:
        importlib.import_module(name)
    tmp.start_processes(spawned, args=(world, port, out_dir, jobs), nprocs=world,
                        start_method="fork")


def launch(world: int, jobs: list, out_dir: str) -> dict[str, Any]:
    """Runs ``jobs`` on ``world`` gloo ranks; returns rank 0's results."""
    import multiprocessing
    for name, _, _ in jobs:
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
    os.environ["DS_ACCELERATOR"] = "cpu"  # before the launcher imports deepspeed
    launcher = multiprocessing.get_context("spawn").Process(
        target=_fork_ranks, args=(world, hf.free_port(), out_dir, jobs))
    launcher.start()
    launcher.join()
    if launcher.exitcode != 0:
        raise RuntimeError(f"a rank failed (launcher exit code {launcher.exitcode}); its "
                           "traceback is above")
    return torch.load(os.path.join(out_dir, "result.pt"), weights_only=False)
