"""Collectives for context parallelism with correct gradients on every backend (gloo too)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def cp_group(dp: int, cp: int) -> Any:
    """This rank's CP group, for ranks laid out as ``dp_rank * cp + cp_rank``. Every rank
    must call it (it creates all ``dp`` groups, in the same order everywhere)."""
    mine = None
    for d in range(dp):
        group = dist.new_group(list(range(d * cp, (d + 1) * cp)))
        if d == dist.get_rank() // cp:
            mine = group
    return mine


def cp_ring_groups(dp: int, cp: int, whole: Any = None) -> dict[tuple[int, int], Any]:
    """This rank's process group for every CP group a plan may shard over, keyed by the
    ``(first, size)`` of ``Layout.rings``: the whole CP group (``whole``, or a new one from
    ``cp_group`` when None) and every aligned power-of-two sub-group (sizes ``2 .. cp / 2``)
    that contains this rank. Ranks are laid out as ``dp_rank * cp + cp_rank``; every rank must
    call it (it creates every DP rank's sub-groups, in the same order everywhere)."""
    rank = dist.get_rank()
    mine = {(0, cp): whole if whole is not None else cp_group(dp, cp)}
    size = 2
    while size < cp:
        if cp % size == 0:
            for d in range(dp):
                for first in range(0, cp, size):
                    ranks = list(range(d * cp + first, d * cp + first + size))
                    group = dist.new_group(ranks)
                    if rank in ranks:
                        mine[(first, size)] = group
        size *= 2
    return mine


def gather_sizes(n: int, group: Any) -> list[int]:
    """Every CP rank's ``n``, in group-rank order."""
    t = torch.tensor([n], dtype=torch.int64)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, t, group=group)
    return [int(x) for x in out]


def _gather_padded(x: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
    longest = max(sizes)
    padded = x.new_zeros((longest, *x.shape[1:]))
    padded[:x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded.contiguous(), group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes)])


class _AllGatherVarlen(torch.autograd.Function):
    """Forward: concatenate every CP rank's rows. Backward: the gradient of this rank's rows
    is the sum over all ranks of the gradient of the concatenation, restricted to them."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
        rank = dist.get_rank(group)
        ctx.group, ctx.start, ctx.stop = group, sum(sizes[:rank]), sum(sizes[:rank + 1])
        return _gather_padded(x, sizes, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.start:ctx.stop], None, None


def all_gather_varlen(x: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
    """Concatenation over the CP group of every rank's ``x`` (``sizes[r]`` rows on rank r),
    differentiable. (``torch.distributed.nn.functional.all_gather`` is no substitute here: with
    torch 2.15 on gloo its backward fails on a CP subgroup, "Global rank 0 is not part of
    group".)"""
    if group is None or dist.get_world_size(group) == 1:
        return x
    out: torch.Tensor = _AllGatherVarlen.apply(x, sizes, group)
    return out


def gather_varlen_nograd(x: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
    """As ``all_gather_varlen``, for tensors without gradients (ids, positions)."""
    if group is None or dist.get_world_size(group) == 1:
        return x
    return _gather_padded(x, sizes, group)
