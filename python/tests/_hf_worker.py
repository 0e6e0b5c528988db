"""Shared pieces of the Hugging Face tests (test_hf_*.py): tiny random models, datasets, the
unpacked reference, a Trainer run, and the entry point of one spawned rank.

Every model is built from a config (nothing downloaded): 2 layers, hidden 64, 4 heads, 2
key/value heads (GQA), vocabulary 128, float64. The reference trains the same weights on
the same global batches with every sequence run on its own (no packing), the loss summed
over sequences and divided by the label tokens of the global batch, and torch's AdamW.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator

import numpy as np
import torch

VOCAB = 128
LR = 1e-2


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread inside the block: these models are tiny, and on a loaded 2-core
    machine two threads made a forward and backward 25x slower (16 ms against 416 ms)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tiny_model(kind: str, attention: str = "sdpa") -> torch.nn.Module:
    """A seeded random ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` in float64."""
    import transformers
    import skrull.hf  # registers the "skrull" attention function
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  use_cache=False, tie_word_embeddings=False)
    if kind == "llama":
        config = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    else:
        config = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    config._attn_implementation = attention
    torch.manual_seed(7)
    model = cls(config).to(torch.float64)
    # transformers' own loss casts float64 logits to float32; both sides use this one.
    model.loss_function = skrull.hf.exact_causal_lm_loss
    return model


def dataset(lengths: list[int], seed: int = 0) -> list[dict[str, list[int]]]:
    """Samples of random token ids (labels are the ids, as HF datasets hold them)."""
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(0, VOCAB, n).tolist()} for n in lengths]


def global_batches(n: int, batch: int, steps: int, seed: int = 42) -> list[list[int]]:
    """The dataset indices of each step, as ``BatchRebalanceSampler`` draws them (epoch 0)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return [order[s * batch:(s + 1) * batch] for s in range(steps)]


@one_thread()
def reference(kind: str, data: list[dict], batches: list[list[int]]) -> dict[str, Any]:
    """Unpacked training: per-step losses and the final weights."""
    model = tiny_model(kind, "sdpa")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    losses = []
    for idx in batches:
        labels = sum(len(data[i]["input_ids"]) - 1 for i in idx)
        opt.zero_grad()
        total = 0.0
        for i in idx:
            ids = torch.tensor(data[i]["input_ids"])[None]
            out = model(input_ids=ids, labels=ids, num_items_in_batch=labels, use_cache=False)
            out.loss.backward()
            total += float(out.loss.detach())
        opt.step()
        losses.append(total)
    return {"losses": losses, "weights": {k: v.detach().clone()
                                          for k, v in model.state_dict().items()}}


def max_rel_diff(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    """max over tensors of max|got - want| / max|want|."""
    assert got.keys() == want.keys()
    return max(float((got[k] - want[k]).abs().max() / want[k].abs().max()) for k in want)


def training_args(out_dir: str, steps: int, grad_accum: int, **extra: Any) -> Any:
    """TrainingArguments of every run: CPU, AdamW (torch), constant LR, no clipping."""
    from transformers import TrainingArguments
    kwargs = dict(output_dir=out_dir, use_cpu=True, max_steps=steps,
                  per_device_train_batch_size=1, gradient_accumulation_steps=grad_accum,
                  learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
                  weight_decay=0.0, max_grad_norm=0.0, optim="adamw_torch", report_to=[],
                  save_strategy="no", logging_strategy="no", disable_tqdm=True,
                  dataloader_num_workers=0, seed=42, ddp_find_unused_parameters=False)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        kwargs["ddp_backend"] = "gloo"
    kwargs.update(extra)
    return TrainingArguments(**kwargs)


def recording(base: type) -> type:
    """``base`` with every micro-batch's loss recorded (``micro_losses``)."""
    class Recording(base):  # type: ignore[misc, valid-type]
        micro_losses: list

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.__dict__.setdefault("micro_losses", []).append(float(loss))
            return loss
    return Recording


def step_losses(trainer: Any, grad_accum: int) -> list[float]:
    """Per-step loss summed over micro-batches and ranks, over the world size (each rank's
    micro-batch loss is its share of the global mean times the world size)."""
    import torch.distributed as dist
    per = torch.tensor(trainer.micro_losses, dtype=torch.float64).view(-1, grad_accum).sum(1)
    world = 1
    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        dist.all_reduce(per)
    return (per / world).tolist()


@one_thread()
def run_skrull_trainer(kind: str, attention: str, data: list[dict], steps: int,
                       grad_accum: int, skrull_config: Any, out_dir: str,
                       **args: Any) -> dict[str, Any]:
    """Trains with ``SkrullTrainer``; returns per-step losses, final weights and what ran."""
    from skrull.hf import SkrullTrainer
    model = tiny_model(kind, attention)
    trainer = recording(SkrullTrainer)(model=model, args=training_args(out_dir, steps,
                                                                        grad_accum, **args),
                                       train_dataset=data, skrull=skrull_config)
    trainer.train()
    return {"losses": step_losses(trainer, grad_accum),
            "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "micro_batches": len(trainer.micro_losses)}


def set_dist_env(rank: int, world: int, port: int) -> None:
    """What torchrun would set, before any Trainer is built."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")


def spawned(rank: int, world: int, port: int, out_dir: str, job: str, spec: dict) -> None:
    """Entry point of one rank (``torch.multiprocessing.start_processes``): runs ``job`` and
    has rank 0 save its result to ``out_dir/result.pt``."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    set_dist_env(rank, world, port)
    result = JOBS[job](spec, out_dir)
    result["seconds"] = time.perf_counter() - t0
    if rank == 0:
        torch.save(result, os.path.join(out_dir, "result.pt"))


def job_dp(spec: dict, out_dir: str) -> dict[str, Any]:
    """Trainer + SkrullBatchSampler on this world (no CP)."""
    from skrull.hf import SkrullConfig
    data = dataset(spec["lengths"], spec["seed"])
    cfg = SkrullConfig(bucket_tokens=spec["bucket"], global_batch_size=spec["batch"],
                       scheduler={"policy": spec.get("policy", "balanced")})
    return run_skrull_trainer(spec["kind"], spec["attention"], data, spec["steps"],
                              spec["grad_accum"], cfg, out_dir)


def job_cp(spec: dict, out_dir: str) -> dict[str, Any]:
    """SkrullTrainer with CP on this world: per layout of ``spec["layouts"]`` (name -> its
    data, model, ``cp`` and ``runs``: run name -> ``policy`` and ``grad_accum``), every run's
    losses and weights, keyed ``(layout, run)``."""
    from skrull.hf import SkrullConfig
    import torch.distributed as dist
    out = {}
    for layout, case in spec["layouts"].items():
        data = dataset(case["lengths"], case["seed"])
        for name, run in case["runs"].items():
            cfg = SkrullConfig(bucket_tokens=case["bucket"], cp=case["cp"],
                               global_batch_size=case["batch"],
                               scheduler=scheduler_kwargs(run["policy"], case["cp"],
                                                          run.get("chunking")),
                               exact=True)
            out[(layout, name)] = run_skrull_trainer(case["kind"], "skrull", data,
                                                     case["steps"], run["grad_accum"], cfg,
                                                     out_dir)
            dist.barrier()
    return out


def scheduler_kwargs(policy: str, cp: int, chunking: dict | None = None) -> dict[str, Any]:
    """Scheduler arguments of the CP runs: zigzag padding; ``balanced`` at CP 4 and more plans
    with ``subgroup_cost_model`` (a CP ring across nodes), so that sub-groups pay off. With
    ``chunking`` (``chunk_size``, ``chunk_keep``, and for ``balanced`` the links'
    ``bandwidth``, slow enough that it chunks): chunked placements."""
    kwargs: dict[str, Any] = {"policy": policy, "shard_padding": "zigzag"}
    if chunking:
        kwargs.update(chunk_size=chunking["chunk_size"], chunk_keep=chunking["chunk_keep"])
        if "bandwidth" in chunking:
            from _gradcheck_worker import chunk_cost_model
            kwargs["cost_model"] = chunk_cost_model(chunking["bandwidth"])
    elif policy == "balanced" and cp >= 4:
        from _gradcheck_worker import subgroup_cost_model
        kwargs["cost_model"] = subgroup_cost_model(cp)
    return kwargs


JOBS = {"dp": job_dp, "cp": job_cp}


def free_port() -> int:
    """A TCP port nothing listens on now (for MASTER_PORT)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, job: str, spec: dict, out_dir: str) -> dict[str, Any]:
    """Runs ``job`` on ``world`` spawned gloo ranks; returns rank 0's result."""
    import multiprocessing
    import torch.multiprocessing as tmp
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["torch", "transformers", "skrull.hf", "_hf_worker"])
    tmp.start_processes(spawned, args=(world, free_port(), out_dir, job, spec), nprocs=world,
                        start_method="forkserver")
    return torch.load(os.path.join(out_dir, "result.pt"), weights_only=False)
