"""Multi-process checks of ``skrull.torch.attention`` (gloo, CPU, one thread per rank).

Each check runs in fresh processes started by ``test_attention.py``; rank 0 writes what it saw
to ``out_dir/<check>.json``. Every collective has a short timeout, so a mismatch fails fast.
"""

from __future__ import annotations

import datetime
import json
import os
import resource

import torch
import torch.distributed as dist

import skrull
from skrull.torch.attention import CpAttention, attention_schedule


def _init(rank: int, world: int, rendezvous: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))


def _qkv(rows: int, seed: int, heads: int = 2, kv: int = 1, dim: int = 8,
         dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, h, dim, generator=g, dtype=dtype).requires_grad_()
            for h in (heads, kv, kv)]


def _result(rank: int, out_dir: str, name: str, value: dict) -> None:
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    if rank == 0:
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(gathered, f)


def different_plan(rank: int, out_dir: str, ring: dict) -> None:
    """Rank 1 plans another batch of the same shape: both ranks refuse the exchange."""
    lengths = [40, 24] if rank == 0 else [40, 25]
    plan = skrull.Scheduler(1, 2, 32, policy="deepspeed", shard_padding="zigzag").plan(lengths)
    s = attention_schedule(plan, 0, 0, rank)
    attention = CpAttention(s, ring)
    q, k, v = _qkv(s.tokens, rank)
    try:
        attention(q, k, v)
        got = "ran"
    except ValueError as e:
        got = str(e)
    _result(rank, out_dir, "different_plan", {"error": got})


def wrong_group(rank: int, out_dir: str, ring: dict) -> None:
    """A ring of CP 2 handed a one-rank process group, or none."""
    plan = skrull.Scheduler(1, 2, 32, policy="deepspeed").plan([40])
    s = attention_schedule(plan, 0, 0, rank)
    errors = []
    singles = [dist.new_group([r]) for r in range(2)]
    for groups in ({(0, 2): singles[rank]}, {}):
        try:
            CpAttention(s, groups)
            errors.append("built")
        except ValueError as e:
            errors.append(str(e))
    _result(rank, out_dir, "wrong_group", {"errors": errors})


def idle_rank(rank: int, out_dir: str, ring: dict) -> None:
    """A sequence of one token sharded at CP 2: rank 1 holds no query of it, yet its backward
    must join the all-reduce of the exchange (it hung before the fix)."""
    plan = skrull.Scheduler(1, 2, 16, policy="deepspeed").plan([1])
    s = attention_schedule(plan, 0, 0, rank)
    q, k, v = _qkv(s.tokens, 7)
    out = CpAttention(s, ring)(q, k, v)
    out.sum().backward()
    grads = [None if x.grad is None else x.grad.shape[0] for x in (q, k, v)]
    _result(rank, out_dir, "idle_rank", {"rows": s.tokens, "grads": grads,
                                         "out": out.detach().flatten().tolist()})


def long_sequence(rank: int, out_dir: str, ring: dict) -> None:
    """One 32K-token sequence sharded (zigzag) at CP 2: forward and backward; the growth of the
    peak resident set across the call, after a warm-up at 2K tokens."""
    length = 32768

    def once(n: int) -> tuple[float, int]:
        plan = skrull.Scheduler(1, 2, n // 2 + 4, policy="deepspeed",
                                shard_padding="zigzag").plan([n])
        s = attention_schedule(plan, 0, 0, rank)
        q, k, v = _qkv(s.tokens, rank, heads=2, kv=1, dim=8, dtype=torch.float32)
        attention = CpAttention(s, ring)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        attention(q, k, v).sum().backward()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        return grown / 1024.0, s.tokens

    once(2048)
    grown, rows = once(length)
    _result(rank, out_dir, "long_sequence", {"peak_growth_mb": grown, "rows": rows})


def no_all_reduce(rank: int, out_dir: str, ring: dict) -> None:
    """Forward and backward of a CP 2 ring (uneven rows, three sequences, one micro-batch) with
    ``torch.distributed.all_reduce`` counted: the exchange's backward must not call it. Output
    and ``q``, ``k``, ``v`` gradients of this rank's rows must equal the dense oracle's over
    each whole sequence on one process (the same inputs and output weights on both ranks)."""
    from skrull.torch.attention import BACKENDS
    calls = []
    real = dist.all_reduce

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]
    lengths = [37, 300, 5]   # pairs batched (<= 128 keys) and one by one (up to 300)
    plan = skrull.Scheduler(1, 2, 256, policy="packed").plan(lengths)
    s = attention_schedule(plan, 0, 0, rank)
    whole = [_qkv(n, 100 + i, heads=4, kv=2) for i, n in enumerate(lengths)]
    g = torch.Generator().manual_seed(3)
    weights = [torch.randn(n, 4, 8, generator=g, dtype=torch.float64) for n in lengths]
    lay = plan.layout(0, 0, rank)
    rows = lay.is_real.nonzero()[0].tolist()
    at = list(zip(lay.token_seq[rows].tolist(), lay.positions[rows].tolist()))

    def mine(tensors: list[torch.Tensor]) -> torch.Tensor:
        x = torch.zeros(s.tokens, *tensors[0].shape[1:], dtype=torch.float64)
        for r, (i, p) in zip(rows, at):
            x[r] = tensors[i][p].detach()
        return x
    q, k, v = (mine([w[t] for w in whole]).requires_grad_() for t in range(3))
    dist.all_reduce = counted  # type: ignore[assignment]
    try:
        out = CpAttention(s, ring)(q, k, v)
        (out * mine(weights)).sum().backward()
    finally:
        dist.all_reduce = real
    outs, grads = [], [[], [], []]
    for (wq, wk, wv), w in zip(whole, weights):
        (o, _), = BACKENDS["dense"]([(wq, wk, wv)], None, 0.0)
        (o * w).sum().backward()
        outs.append(o.detach())
        for t, x in enumerate((wq, wk, wv)):
            grads[t].append(x.grad)
    err = float((out.detach() - mine(outs)).abs().max())
    for t, x in enumerate((q, k, v)):
        err = max(err, float((x.grad - mine(grads[t])).abs().max()))
    _result(rank, out_dir, "no_all_reduce", {"all_reduce_calls": len(calls), "max_err": err})


CHECKS = {"different_plan": different_plan, "wrong_group": wrong_group,
          "idle_rank": idle_rank, "long_sequence": long_sequence,
          "no_all_reduce": no_all_reduce}


def run(rank: int, check: str, rendezvous: str, out_dir: str) -> None:
    """Entry point of one rank (``torch.multiprocessing.start_processes``)."""
    _init(rank, 2, rendezvous)
    ring = {(0, 2): dist.new_group([0, 1])}
    CHECKS[check](rank, out_dir, ring)
    dist.destroy_process_group()
