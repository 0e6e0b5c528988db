"""Train a tiny language model on DP x CP gloo processes with skrull plans, next to an
unpacked single-process baseline: the two losses agree at every step.

    python python/examples/train_tiny.py [--dp 2] [--cp 2] [--steps 4] [--policy balanced]

Every rank draws the same global batches, plans them itself (no broadcast), fills each
micro-batch buffer with one gather through the layout's gather index, runs its micro-batches
(local sequences whole, sharded ones zigzagged over its CP group and padded to a multiple of
2 x CP x TP as with Megatron's sequence parallelism, TP = 2 here), and the gradients are summed
over all DP x CP ranks. Lockstep plans give every DP rank the same number of micro-batches. Rank 0 also trains the baseline, which runs every
sequence on its own with plain causal attention, and prints both losses.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import skrull
import skrull.torch as st

VOCAB, SAMPLES, GLOBAL_BATCH, BUCKET = 64, 96, 24, 32


def dataset() -> tuple[list[torch.Tensor], np.ndarray]:
    """Learnable sequences (each token is 5 x the previous + 1, mod VOCAB, from a random
    start) with long-tailed lengths, 1 .. 60 tokens."""
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.uniform(0, np.log(61), SAMPLES)).astype(np.int64)
    seqs = []
    for n in lengths:
        tokens = [int(rng.integers(VOCAB))]
        for _ in range(n - 1):
            tokens.append((5 * tokens[-1] + 1) % VOCAB)
        seqs.append(torch.tensor(tokens))
    return seqs, lengths


def model() -> st.TinyTransformer:
    torch.manual_seed(0)
    return st.TinyTransformer(vocab=VOCAB, hidden=32, heads=4, ffn=64, layers=2)


def baseline_step(net: st.TinyTransformer, opt: torch.optim.Optimizer,
                  samples: list[torch.Tensor]) -> float:
    """One step on unpacked sequences: mean next-token loss over the global batch."""
    labelled = sum(len(s) - 1 for s in samples)
    opt.zero_grad()
    loss = sum(F.cross_entropy(net.forward_sequence(s)[:-1], s[1:], reduction="sum")
               for s in samples) / labelled
    loss.backward()
    opt.step()
    return loss.item()


def worker(rank: int, args: argparse.Namespace, rendezvous: str) -> None:
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank,
                            world_size=args.dp * args.cp)
    group = st.cp_group(args.dp, args.cp)
    data, lengths = dataset()
    # lockstep: every DP rank runs the same number of micro-batches (some may be empty);
    # pad_multiple: shard padding as Megatron with sequence parallelism (tp = 2) needs it.
    sched = skrull.Scheduler(args.dp, args.cp, BUCKET, policy=args.policy,
                             shard_padding="zigzag", pad_multiple=2 * args.cp * 2,
                             lockstep=True)
    loader = st.SkrullLoader(data, lengths, sched, rank // args.cp, rank % args.cp,
                             GLOBAL_BATCH, shuffle=True, seed=1, weight_dtype=torch.float64)
    net, ref = model(), model()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=3e-2)
    worst = 0.0
    for step in range(args.steps):
        if step % len(loader) == 0:
            loader.set_epoch(step // len(loader))
            batches = iter(loader)
        batch = next(batches)
        opt.zero_grad()
        loss = torch.zeros(())
        for mb in batch.micro_batches:  # the same count on every rank; some may be empty
            step_loss = st.packed_loss(net.forward_packed(mb, group), mb)
            step_loss.backward()
            loss += step_loss.detach()
        grads = torch.cat([p.grad.flatten() for p in net.parameters()])
        dist.all_reduce(grads)  # the sum over DP x CP is the full-batch gradient
        for p, g in zip(net.parameters(), grads.split([p.numel() for p in net.parameters()])):
            p.grad.copy_(g.view_as(p))
        opt.step()
        dist.all_reduce(loss)
        if rank == 0:
            want = baseline_step(ref, ref_opt, [data[i] for i in batch.indices])
            worst = max(worst, abs(float(loss) - want) / want)
            s = batch.plan.summary
            print(f"step {step}: skrull loss {float(loss):.12f} | unpacked {want:.12f} | "
                  f"{s.micro_batches} micro-batches, {s.sharded} of {s.sequences} sharded")
    if rank == 0:
        print(f"largest relative difference: {worst:.1e}")
        if worst > 1e-9:
            sys.exit("the skrull losses do not match the unpacked baseline")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--cp", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--policy", default="balanced", choices=list(skrull.POLICIES))
    args = parser.parse_args()
    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "skrull.torch"])
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(worker, args=(args, f"file://{tmp}/rendezvous"),
                           nprocs=args.dp * args.cp, start_method="forkserver")


if __name__ == "__main__":
    main()
