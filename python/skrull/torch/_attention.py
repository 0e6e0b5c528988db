"""A reference attention over a skrull micro-batch: dense masks, any device, exact.

It is the semantics a fast kernel must reproduce (varlen FlashAttention for the local group,
ring or all-gather CP attention for the sharded group), written plainly enough to check them.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ._collate import MicroBatch
from ._dist import all_gather_varlen, gather_sizes, gather_varlen_nograd


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary embedding of ``x`` at explicit positions: a shard is rotated by its true
    positions, not 0..n.

    Parameters
    ----------
    x : torch.Tensor
        ``[tokens, heads, head_dim]``, ``head_dim`` even; its first half is rotated against
        its second half.
    positions : torch.Tensor
        ``[tokens]``: the position of each token (``MicroBatch.position_ids``).
    base : float, optional
        The RoPE base (default 10000); angles are computed in float64.

    Returns
    -------
    torch.Tensor
        The rotated ``x``: same shape, dtype and device.

    Example
    -------
    >>> import torch
    >>> from skrull.torch import apply_rope
    >>> x = torch.ones(2, 1, 4)
    >>> apply_rope(x, torch.tensor([0, 1]))[0].tolist()   # position 0: unchanged
    [[1.0, 1.0, 1.0, 1.0]]
    >>> apply_rope(x, torch.tensor([0, 1])).shape
    torch.Size([2, 1, 4])
    """
    half = x.shape[-1] // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    angle = positions.to(torch.float64)[:, None] * inv[None, :]
    cos, sin = angle.cos().to(x.dtype)[:, None, :], angle.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def _masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      allowed: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v per head over the ``allowed`` [queries, keys] pairs; a query
    with no allowed key (padding) gets zeros."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    any_key = allowed.any(dim=1)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~any_key[:, None], 0.0)
    probs = torch.softmax(scores, dim=-1) * allowed
    return torch.einsum("hqk,khd->qhd", probs, v)


def _causal_same_sequence(seq_q: torch.Tensor, pos_q: torch.Tensor, seq_k: torch.Tensor,
                          pos_k: torch.Tensor) -> torch.Tensor:
    return ((seq_q[:, None] == seq_k[None, :]) & (pos_k[None, :] <= pos_q[:, None])
            & (seq_k[None, :] >= 0))


class _Block:
    """One all-gather of sharded tokens: buffer rows ``[start, stop)`` over ``group``."""

    def __init__(self, mb: MicroBatch, start: int, stop: int, group: Any) -> None:
        self.start, self.stop, self.group = start, stop, group
        ss, sp = mb.seq_ids[start:stop], mb.position_ids[start:stop]
        self.sizes = gather_sizes(len(ss), group) if group is not None else [len(ss)]
        meta = gather_varlen_nograd(torch.stack([ss, sp], dim=1), self.sizes, group)
        self.mask = _causal_same_sequence(ss, sp, meta[:, 0], meta[:, 1])

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        a, b, heads = self.start, self.stop, k.shape[1]
        kv = all_gather_varlen(torch.cat([k[a:b], v[a:b]], dim=1), self.sizes, self.group)
        return _masked_attention(q[a:b], kv[:, :heads], kv[:, heads:], self.mask)


class PackedAttention:
    """Causal attention for one micro-batch on one GPU, built once and called per layer.

    Local group (``[0, local_tokens)``): each sequence attends to itself, no communication.
    Sharded group: keys and values of sharded tokens are all-gathered (differentiably); a query
    attends to the keys of its own sequence at earlier or equal positions, padding excluded.
    Calling it with ``q``, ``k``, ``v`` (``[tokens, heads, head_dim]`` over this GPU's buffer)
    returns the attention output of the same shape; a padding query gets zeros.

    Parameters
    ----------
    mb : MicroBatch
        This GPU's micro-batch (``collate``).
    group : process group, optional
        The whole CP group (``cp_group``); None (default) at CP 1. Without ``ring_groups``,
        all sharded tokens are gathered over it in one call, which every CP rank of the DP rank
        must make for every micro-batch, empty ones included. Building the attention already
        all-gathers the sharded tokens' sequence ids and positions over it.
    ring_groups : dict, optional
        ``(first, size)`` -> process group (``cp_ring_groups``): the sharded group then runs
        ring by ring (``MicroBatch.rings``), each gathered over its own CP group, the whole
        group's or a sub-group's, as a production CP kernel runs one call per ring; every GPU
        of a ring calls it, and GPUs without sharded tokens call nothing.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import PackedAttention, collate
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
    >>> mb = collate(plan, [torch.arange(5), torch.arange(3)], dp_rank=0, cp_rank=0)[0]
    >>> attention = PackedAttention(mb)              # CP 1: no group
    >>> q = k = v = torch.randn(mb.num_tokens, 2, 8)
    >>> attention(q, k, v).shape
    torch.Size([8, 2, 8])
    """

    def __init__(self, mb: MicroBatch, group: Any = None,
                 ring_groups: Mapping[tuple[int, int], Any] | None = None) -> None:
        self.local = mb.local_tokens
        seq, pos = mb.seq_ids, mb.position_ids
        ls, lp = seq[:self.local], pos[:self.local]
        self.local_mask = _causal_same_sequence(ls, lp, ls, lp)
        if ring_groups is None:
            self.blocks = [_Block(mb, self.local, mb.num_tokens, group)]
        else:
            self.blocks = [_Block(mb, r.start, r.stop, ring_groups[(r.first, r.size)])
                           for r in mb.rings]
            covered = sum(b.stop - b.start for b in self.blocks)
            assert covered == mb.num_tokens - self.local, "the rings tile the sharded group"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention output ``[tokens, heads, head_dim]``; ``q``, ``k``, ``v``:
        ``[tokens, heads, head_dim]`` over this GPU's buffer."""
        n = self.local
        local = _masked_attention(q[:n], k[:n], v[:n], self.local_mask)
        return torch.cat([local, *(block(q, k, v) for block in self.blocks)])
