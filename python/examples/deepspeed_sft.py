"""Fine-tune a tiny random model with DeepSpeed's own engine on skrull plans, DP x CP ranks.

The raw ``deepspeed.initialize`` loop with ``skrull.deepspeed.SkrullDeepSpeed``: the plans
place every sequence on a DP rank and micro-batch (and with ``--cp`` > 1 keep some whole on
one CP rank and shard others over the CP group), the engine runs ZeRO stage ``--zero``
(equal micro-batch counts per DP rank under ZeRO-2/3). Each step prints its loss, the plan's
micro-batches per DP rank and how many sequences it sharded. Then the same global batches
run through plain DeepSpeed (every rank a DP rank, one sequence per micro-batch) and the
weights are compared. Launch with torchrun, one process per (DP, CP) rank, on CPUs (gloo)::

    DS_ACCELERATOR=cpu torchrun --nproc_per_node 4 python/examples/deepspeed_sft.py \\
        --dp 2 --cp 2 --zero 2 --policy balanced --lengths lengths.txt

``--lengths FILE`` holds one sequence length per line (token ids are synthetic); without
it, 48 random lengths are drawn. The model is a 2-layer Llama built from a config, float64;
ZeRO keeps float32 master weights, so the last line,
``max relative weight difference vs plain deepspeed: <x>``, reads about 1e-7 after a few
SGD steps (``--optim adamw`` amplifies it: docs/hf.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np
import torch

VOCAB = 128


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", help="file with one sequence length per line")
    p.add_argument("--dp", type=int, default=None, help="default: world size // --cp")
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--zero", type=int, default=2, choices=[0, 1, 2, 3], help="ZeRO stage")
    p.add_argument("--unmanaged", action="store_true",
                   help='"managed_gradient_accumulation": false (ZeRO-0/1 only): DP ranks '
                        "then run as many micro-batches as their sequences need")
    p.add_argument("--policy", default="balanced",
                   choices=["balanced", "skrull", "packed", "deepspeed", "roundrobin"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=16, help="sequences per step")
    p.add_argument("--bucket", type=int, default=128, help="tokens per GPU and micro-batch")
    p.add_argument("--optim", choices=["sgd", "adamw"], default="sgd")
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
    import skrull.hf  # registers attn_implementation="skrull"
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=65536,
                                      use_cache=False, attn_implementation=attention)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float64)
    model.loss_function = skrull.hf.exact_causal_lm_loss  # float64 stays float64
    return model


def optimizer(model: torch.nn.Module, opts: argparse.Namespace) -> torch.optim.Optimizer:
    if opts.optim == "sgd":
        return torch.optim.SGD(model.parameters(), lr=opts.lr)
    return torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=0.0)


def ds_config(opts: argparse.Namespace, plain: bool = False) -> dict[str, Any]:
    config: dict[str, Any] = {"zero_optimization": {"stage": opts.zero, "overlap_comm": False},
                              "zero_allow_untested_optimizer": True, "steps_per_print": 1 << 30}
    if opts.unmanaged and not plain:
        config["managed_gradient_accumulation"] = False
    return config


def train_skrull(opts: argparse.Namespace, data: list[dict], lengths: list[int]
                 ) -> tuple[torch.nn.Module, list[list[int]]]:
    """The skrull loop: what a DeepSpeed user writes. Returns the model and each step's
    global batch."""
    import deepspeed
    import torch.distributed as dist
    from skrull.deepspeed import SkrullDeepSpeed

    model = build_model("skrull" if opts.cp > 1 else "sdpa")
    sk = SkrullDeepSpeed(ds_config(opts), lengths, opts.global_batch, opts.bucket,
                         cp=opts.cp, max_steps=opts.steps, epochs=opts.steps, seed=opts.seed,
                         scheduler={"policy": opts.policy})
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer(model, opts),
                                      config=sk.config, mpu=sk.mpu)
    batches = []
    for step in sk.steps(data):
        loss = sum(float(sk.backward(engine, engine(**mb).loss, mb)) for mb in step)
        batches.append(step.indices.tolist())
        total = torch.tensor(loss, dtype=torch.float64)
        dist.all_reduce(total)
        if dist.get_rank() == 0:
            p = step.plan
            print(f"step {len(batches)}: loss {float(total):.6f}, {p.summary.micro_batches} "
                  f"micro-batches ({p.micro_batches_per_dp.tolist()} per DP rank), "
                  f"sharded {p.summary.sharded} of {p.summary.sequences}", flush=True)
    return model, batches


def train_plain(opts: argparse.Namespace, data: list[dict],
                batches: list[list[int]]) -> torch.nn.Module:
    """Plain DeepSpeed on the same global batches: every rank a DP rank, one sequence per
    micro-batch (rank ``r`` takes sequences ``r, r + world, ...``; a rank with one fewer runs
    a zero-loss padding token), the loss over the global batch's label tokens."""
    import deepspeed
    import torch.distributed as dist
    from deepspeed.utils import groups
    from skrull.hf import padding_batch
    groups.mpu = None  # the skrull engine's sequence-parallel groups are not this one's
    world, rank = dist.get_world_size(), dist.get_rank()
    per_rank = -(-opts.global_batch // world)
    model = build_model("sdpa")
    config = ds_config(opts, plain=True) | {"train_micro_batch_size_per_gpu": 1,
                                            "gradient_accumulation_steps": per_rank,
                                            "train_batch_size": per_rank * world}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer(model, opts),
                                      config=config)
    for idx in batches:
        labels = sum(len(data[i]["input_ids"]) - 1 for i in idx)
        mine = idx[rank::world]
        for k in range(per_rank):
            if k < len(mine):
                ids = torch.tensor(data[mine[k]]["input_ids"])[None]
                batch: dict[str, Any] = {"input_ids": ids, "labels": ids}
            else:
                batch = padding_batch()
            loss = engine(**batch, num_items_in_batch=labels, use_cache=False).loss
            engine.backward(loss * world, scale_wrt_gas=False)  # DeepSpeed averages ranks
            engine.step()
    return model


def main(argv: list[str] | None = None) -> None:
    """Every rank (under torchrun); a process group already set up is used and kept."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not torch.cuda.is_available() else "cuda")
    opts = parse_args(argv)
    if opts.lr is None:
        opts.lr = 1.0 if opts.optim == "sgd" else 1e-2
    import deepspeed
    import torch.distributed as dist
    torch.set_num_threads(1)
    ours = not dist.is_initialized()
    if ours:
        deepspeed.init_distributed("gloo" if os.environ["DS_ACCELERATOR"] == "cpu" else "nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    opts.dp = opts.dp or world // opts.cp
    if opts.dp * opts.cp != world:
        raise SystemExit(f"--dp {opts.dp} x --cp {opts.cp} is not the world size {world}")
    lengths = read_lengths(opts)
    data = samples(lengths)
    if rank == 0:
        print(f"{len(lengths)} sequences ({sum(lengths)} tokens), DP {opts.dp} x CP {opts.cp}, "
              f"ZeRO-{opts.zero}, policy {opts.policy}, BucketSize {opts.bucket}, "
              f"{opts.global_batch} per step, {opts.optim} lr {opts.lr}", flush=True)
    t0 = time.perf_counter()
    model, batches = train_skrull(opts, data, lengths)
    plain = train_plain(opts, data, batches)
    if rank == 0:
        got, want = model.state_dict(), plain.state_dict()
        worst = max(float((got[k] - want[k]).abs().max() / want[k].abs().max()) for k in want)
        print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
        print(f"max relative weight difference vs plain deepspeed: {worst:.3e}", flush=True)
    dist.barrier()
    if ours:
        dist.destroy_process_group()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
