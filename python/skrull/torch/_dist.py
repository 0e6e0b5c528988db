"""Collectives for context parallelism with correct gradients on every backend (gloo too)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def cp_group(dp: int, cp: int) -> Any:
    """This rank's CP group, for ranks laid out as ``dp_rank * cp + cp_rank``. Every rank
    must call it (it creates all ``dp`` groups, in the same order everywhere).

    Parameters
    ----------
    dp, cp : int
        Data- and context-parallel sizes; the world size is ``dp * cp``.

    Returns
    -------
    process group
        The group of ranks ``d * cp .. (d + 1) * cp`` holding this rank (``d = rank // cp``).

    Example
    -------
    The example needs an initialised ``torch.distributed`` process group of ``dp * cp``
    ranks (e.g. under ``torchrun``), so it is not run as a doctest.

    >>> import torch.distributed as dist
    >>> from skrull.torch import cp_group
    >>> dist.init_process_group("gloo")                    # doctest: +SKIP
    >>> group = cp_group(dp=2, cp=2)                       # doctest: +SKIP
    >>> dist.get_world_size(group)                         # doctest: +SKIP
    2
    """
    mine = None
    for d in range(dp):
        group = dist.new_group(list(range(d * cp, (d + 1) * cp)))
        if d == dist.get_rank() // cp:
            mine = group
    return mine


def cp_ring_groups(dp: int, cp: int, whole: Any = None) -> dict[tuple[int, int], Any]:
    """This rank's process group for every CP group a plan may shard over, keyed by the
    ``(first, size)`` of ``Layout.rings``. Ranks are laid out as ``dp_rank * cp + cp_rank``;
    every rank must call it (it creates every DP rank's sub-groups, in the same order
    everywhere).

    Parameters
    ----------
    dp, cp : int
        Data- and context-parallel sizes; the world size is ``dp * cp``.
    whole : process group, optional
        This rank's whole CP group; None (default) makes one with ``cp_group``.

    Returns
    -------
    dict
        ``(first, size)`` -> process group: ``(0, cp)`` for the whole CP group and every
        aligned power-of-two sub-group (sizes ``2 .. cp / 2``) that contains this rank.

    Example
    -------
    The example needs an initialised ``torch.distributed`` process group of ``dp * cp``
    ranks (e.g. under ``torchrun``), so it is not run as a doctest.

    >>> import torch.distributed as dist
    >>> from skrull.torch import cp_ring_groups
    >>> dist.init_process_group("gloo")                    # doctest: +SKIP
    >>> sorted(cp_ring_groups(dp=1, cp=4))                 # doctest: +SKIP
    [(0, 2), (0, 4)]
    """
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


def collective_device(group: Any) -> torch.device:
    """Where a tensor must live for a collective over ``group``: the current CUDA device
    under NCCL (which refuses CPU tensors), else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_sizes(n: int, group: Any) -> list[int]:
    """Every CP rank's ``n``, in group-rank order (one all-gather).

    Parameters
    ----------
    n : int
        This rank's count (rows it will gather with ``all_gather_varlen``).
    group : process group
        The group to gather over.

    Returns
    -------
    list of int
        ``n`` of every rank of ``group``.

    Example
    -------
    The example needs an initialised ``torch.distributed`` process group of two
    ranks (e.g. under ``torchrun``), so it is not run as a doctest.

    >>> import torch.distributed as dist
    >>> from skrull.torch import gather_sizes
    >>> dist.init_process_group("gloo")                    # doctest: +SKIP
    >>> gather_sizes(3 + dist.get_rank(), dist.group.WORLD)  # doctest: +SKIP
    [3, 4]
    """
    t = torch.tensor([n], dtype=torch.int64, device=collective_device(group))
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, t, group=group)
    return [int(x) for x in out]


def _sum_own_block(grad: torch.Tensor, group: Any) -> torch.Tensor:
    """This rank's block of the sum over ``group`` of ``grad`` (``[size * block, ...]``, one
    block per rank in group-rank order): a reduce-scatter. Each rank receives only its own
    block's share from every peer, ``(size - 1) / size`` of the tensor, where an all-reduce
    moves twice that. NCCL (and every backend but gloo) runs ``reduce_scatter_tensor``;
    gloo's is slower than its all-reduce (BENCHMARKS.md, "Sharded sequences: the executor's
    fixed cost"), so there the blocks are exchanged with ``all_to_all_single`` and summed
    here, in rank order: the same sum, exact."""
    size = dist.get_world_size(group)
    block = grad.shape[0] // size
    grad = grad.contiguous()
    if dist.get_backend(group) != "gloo":
        out = grad.new_empty((block, *grad.shape[1:]))
        dist.reduce_scatter_tensor(out, grad, group=group)
        return out
    received = torch.empty_like(grad)
    dist.all_to_all_single(received, grad, group=group)
    return received.view(size, block, *grad.shape[1:]).sum(dim=0)


class GatherBlocks(torch.autograd.Function):
    """Forward: every rank's ``x`` (``[rows, ...]``, ``rows <= block``) padded to ``block``
    rows, concatenated in group-rank order (``[size * block, ...]``; one
    ``all_gather_into_tensor``). Backward: the gradient of this rank's rows is the sum over
    all ranks of the gradient at its block (``_sum_own_block``, a reduce-scatter)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, block: int, group: Any) -> torch.Tensor:
        ctx.group, ctx.rows = group, x.shape[0]
        padded = x if x.shape[0] == block else torch.cat(
            [x, x.new_zeros((block - x.shape[0], *x.shape[1:]))])
        out = x.new_empty((dist.get_world_size(group) * block, *x.shape[1:]))
        dist.all_gather_into_tensor(out, padded.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _sum_own_block(grad, ctx.group)[:ctx.rows], None, None


def block_rows(sizes: list[int]) -> torch.Tensor:
    """Rows of the ``GatherBlocks`` output that hold real rows (``sizes[r]`` of rank ``r``'s
    block of ``max(sizes)``), in order: an int64 index."""
    block = max(sizes)
    return torch.cat([torch.arange(r * block, r * block + n) for r, n in enumerate(sizes)])


def all_gather_varlen(x: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
    """Concatenation over the CP group of every rank's ``x`` (``sizes[r]`` rows on rank r),
    differentiable: the gradient of a rank's rows is the sum over all ranks of the gradient
    of the concatenation at those rows, which the backward hands each rank alone (a
    reduce-scatter, not an all-reduce of the whole concatenation; ``GatherBlocks``).
    (``torch.distributed.nn.functional.all_gather`` is no substitute here: with torch 2.15
    on gloo its backward fails on a CP subgroup, "Global rank 0 is not part of group".)

    Parameters
    ----------
    x : torch.Tensor
        This rank's rows, ``[sizes[rank], ...]``.
    sizes : list of int
        Rows of every rank of ``group`` (``gather_sizes``).
    group : process group or None
        The group to gather over; None, or a group of one rank, returns ``x`` itself.

    Returns
    -------
    torch.Tensor
        ``[sum(sizes), ...]``: every rank's rows in group-rank order.

    Example
    -------
    The example needs an initialised ``torch.distributed`` process group of two
    ranks (e.g. under ``torchrun``), so it is not run as a doctest.

    >>> import torch, torch.distributed as dist
    >>> from skrull.torch import all_gather_varlen, gather_sizes
    >>> dist.init_process_group("gloo")                    # doctest: +SKIP
    >>> rank, world = dist.get_rank(), dist.group.WORLD    # doctest: +SKIP
    >>> x = torch.full((1 + rank, 2), float(rank), requires_grad=True)  # doctest: +SKIP
    >>> out = all_gather_varlen(x, gather_sizes(len(x), world), world)  # doctest: +SKIP
    >>> out[:, 0].tolist()                                 # doctest: +SKIP
    [0.0, 1.0, 1.0]
    """
    if group is None or dist.get_world_size(group) == 1:
        return x
    out: torch.Tensor = GatherBlocks.apply(x, max(sizes), group)
    if len(set(sizes)) == 1:
        return out
    return out.index_select(0, block_rows(sizes).to(out.device))
