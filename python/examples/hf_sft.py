"""Fine-tune a tiny random model with Hugging Face's Trainer on skrull plans, DP x CP ranks.

Spawns ``dp * cp`` CPU processes (gloo), as torchrun would, and trains a randomly initialised
2-layer Llama in float64 with ``skrull.hf.SkrullTrainer``: the batch sampler places every
sequence on a DP rank and micro-batch, and with ``--cp`` > 1 the "skrull" attention function
runs local sequences on their own GPU and sharded ones over their CP ring (SGD by default,
``--optim adamw`` for AdamW; see docs/hf.md on AdamW and long sequences). Each step prints
its loss, the plan's micro-batches per DP rank and how many sequences it sharded; at the end
the weights are compared with an unpacked single-process run on the same global batches::

    pip install './python[hf]'
    python python/examples/hf_sft.py --dp 2 --cp 2 --policy balanced --lengths lengths.txt
    python python/examples/hf_sft.py --dp 2 --cp 2 --policy chunkflow --chunk-size 64

With chunking (``--policy chunkflow``, or ``--chunk-size`` with ``balanced``) sequences longer
than ChunkSize may run chunk by chunk, each chunk attending to the K/V state of the ones before
it and the first ``count - K`` recomputed in the backward pass (``--chunk-keep`` K); each step
also prints how many it chunked.

``--lengths FILE`` holds one sequence length per line (token ids are synthetic); without it,
48 random lengths are drawn. The last line reads
``max relative weight difference vs unpacked: <x>``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

import numpy as np
import torch

VOCAB = 128


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", help="file with one sequence length per line")
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--cp", type=int, default=2)
    p.add_argument("--policy", default="balanced",
                   choices=["balanced", "skrull", "packed", "deepspeed", "roundrobin",
                            "chunkflow"])
    p.add_argument("--chunk-size", type=int, default=0,
                   help="ChunkSize: chunking on (balanced may chunk, chunkflow chunks every "
                        "longer sequence); default 0: off (chunkflow: its default size)")
    p.add_argument("--chunk-keep", type=int, default=1,
                   help="K: chunks that keep their activations; the others are recomputed")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=16, help="sequences per step")
    p.add_argument("--bucket", type=int, default=128, help="tokens per GPU and micro-batch")
    p.add_argument("--optim", choices=["sgd", "adamw"], default="sgd",
                   help="sgd (default) or adamw: AdamW divides each update by sqrt(v) + eps, "
                        "so where a gradient is about eps its rounding differences grow")
    p.add_argument("--lr", type=float, default=None, help="default: 1.0 (sgd), 1e-2 (adamw)")
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args(argv)


def read_lengths(opts: argparse.Namespace) -> list[int]:
    """The lengths file, or 48 random lengths that fit one CP group's budget."""
    if opts.lengths:
        with open(opts.lengths) as f:
            return [int(line) for line in f if line.strip()]
    rng = np.random.default_rng(0)
    return rng.integers(1, opts.bucket * opts.cp + 1, 48).tolist()


def samples(lengths: list[int]) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(1)
    return [{"input_ids": rng.integers(0, VOCAB, n).tolist()} for n in lengths]


def build_model(attention: str) -> torch.nn.Module:
    """A seeded random 2-layer Llama (hidden 64, 4 heads, 2 KV heads) in float64."""
    import transformers
    import skrull.hf
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=65536,
                                      use_cache=False)
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float64)
    model.loss_function = skrull.hf.exact_causal_lm_loss
    return model


def step_batches(n: int, batch: int, steps: int, seed: int) -> list[list[int]]:
    """Dataset indices per step, as the batch sampler draws them (reshuffled per epoch)."""
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
        out += [order[k * batch:(k + 1) * batch].tolist() for k in range(n // batch)]
        epoch += 1
    return out[:steps]


def scheduler_kwargs(opts: argparse.Namespace) -> dict[str, Any]:
    """The Scheduler's settings besides DP, CP and BucketSize: the policy, zigzag padding and,
    with ``--chunk-size`` or ``chunkflow``, chunking."""
    kwargs: dict[str, Any] = {"policy": opts.policy, "shard_padding": "zigzag"}
    if opts.chunk_size or opts.policy == "chunkflow":
        kwargs["chunk_keep"] = opts.chunk_keep
    if opts.chunk_size:
        kwargs["chunk_size"] = opts.chunk_size
    return kwargs


def plan_steps(opts: argparse.Namespace, lengths: list[int]) -> tuple[int, list[Any]]:
    """Every step's plan and the micro-batch count they need (gradient_accumulation_steps)."""
    import skrull  # not skrull.hf: this process never imports transformers
    batches = [[lengths[i] for i in idx]
               for idx in step_batches(len(lengths), opts.global_batch, opts.steps, opts.seed)]
    kwargs = scheduler_kwargs(opts)
    lockstep = skrull.Scheduler(opts.dp, opts.cp, opts.bucket, lockstep=True, **kwargs)
    grad_accum = max(lockstep.plan(b).num_micro_batches for b in batches)
    fixed = skrull.Scheduler(opts.dp, opts.cp, opts.bucket, micro_batches=grad_accum, **kwargs)
    return grad_accum, [fixed.plan(b) for b in batches]


def unpacked_reference(data: list[dict], opts: argparse.Namespace) -> dict[str, torch.Tensor]:
    """The same steps with every sequence run on its own, the loss over the global batch's
    label tokens, torch's SGD or AdamW (as the Trainer's ``sgd`` / ``adamw_torch``)."""
    model = build_model("sdpa")
    if opts.optim == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=opts.lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=0.0)
    for idx in step_batches(len(data), opts.global_batch, opts.steps, opts.seed):
        labels = sum(len(data[i]["input_ids"]) - 1 for i in idx)
        opt.zero_grad()
        for i in idx:
            ids = torch.tensor(data[i]["input_ids"])[None]
            model(input_ids=ids, labels=ids, num_items_in_batch=labels).loss.backward()
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def rank_main(rank: int, world: int, port: int, opts: argparse.Namespace, lengths: list[int],
              grad_accum: int, summaries: list[str]) -> None:
    """One spawned rank: train with SkrullTrainer; rank 0 reports and compares."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    import torch.distributed as dist
    from tqdm.auto import tqdm
    from transformers import TrainerCallback, TrainingArguments
    from skrull.hf import SkrullConfig, SkrullTrainer

    class Trainer(SkrullTrainer):
        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.__dict__.setdefault("step_loss", []).append(float(loss))
            return loss

    class Progress(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.bar = tqdm(total=opts.steps, desc="steps", disable=rank != 0, file=sys.stdout)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            loss = torch.tensor(sum(trainer.step_loss), dtype=torch.float64)
            trainer.step_loss.clear()
            if world > 1:
                dist.all_reduce(loss)
            if rank == 0:
                self.bar.write(f"step {state.global_step}: loss {float(loss) / world:.6f}, "
                               f"{summaries[state.global_step - 1]}")
                self.bar.update(1)

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.bar.close()

    # CP buffers and chunk passes need skrull's attention (zigzag shards, the K/V state).
    chunking = "chunk_keep" in scheduler_kwargs(opts)
    attention = "skrull" if opts.cp > 1 or chunking else "sdpa"
    model = build_model(attention)
    args = TrainingArguments(
        output_dir=os.path.join(os.environ.get("TMPDIR", "/tmp"), "skrull-hf-sft"),
        use_cpu=True, max_steps=opts.steps, per_device_train_batch_size=1,
        gradient_accumulation_steps=grad_accum, learning_rate=opts.lr,
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0,
        optim="sgd" if opts.optim == "sgd" else "adamw_torch",
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        seed=opts.seed, ddp_backend="gloo" if world > 1 else None,
        ddp_find_unused_parameters=False)
    data = samples(lengths)
    cfg = SkrullConfig(bucket_tokens=opts.bucket, cp=opts.cp, global_batch_size=opts.global_batch,
                       exact=True, scheduler=scheduler_kwargs(opts))
    trainer = Trainer(model=model, args=args, train_dataset=data, skrull=cfg,
                      callbacks=[Progress()])
    trainer.train()
    if rank == 0:
        ref = unpacked_reference(data, opts)
        got = model.state_dict()
        worst = max(float((got[k] - ref[k]).abs().max() / ref[k].abs().max()) for k in ref)
        print(f"max relative weight difference vs unpacked: {worst:.3e}", flush=True)


def main(argv: list[str] | None = None) -> None:
    import torch.multiprocessing as mp
    opts = parse_args(argv)
    if opts.lr is None:
        opts.lr = 1.0 if opts.optim == "sgd" else 1e-2
    lengths = read_lengths(opts)
    if len(lengths) < opts.global_batch:
        raise SystemExit(f"{len(lengths)} lengths, fewer than --global-batch {opts.global_batch}")
    t0 = time.perf_counter()
    grad_accum, plans = plan_steps(opts, lengths)
    summaries = [f"{p.summary.micro_batches} micro-batches ({grad_accum} per DP rank), "
                 f"sharded {p.summary.sharded} of {p.summary.sequences}"
                 + (f", chunked {p.summary.chunked}" if p.summary.chunked else "")
                 for p in plans]
    chunks = (f", ChunkSize {plans[0].config.chunk_size} K {opts.chunk_keep}"
              if plans[0].config.chunking else "")
    print(f"{len(lengths)} sequences ({sum(lengths)} tokens), DP {opts.dp} x CP {opts.cp}, "
          f"policy {opts.policy}{chunks}, BucketSize {opts.bucket}, {opts.global_batch} per step, "
          f"gradient_accumulation_steps {grad_accum}, {opts.optim} lr {opts.lr}", flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The ranks fork from one server process that imported torch and transformers once.
    mp.set_forkserver_preload(["torch", "transformers", "skrull.hf"])
    mp.start_processes(rank_main, args=(opts.dp * opts.cp, port, opts, lengths, grad_accum,
                                        summaries), nprocs=opts.dp * opts.cp,
                       start_method="forkserver")
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
