"""A reference attention over a skrull micro-batch: dense masks, any device, exact.

It is the semantics a fast kernel must reproduce (varlen FlashAttention for the local group,
ring or all-gather CP attention for the sharded group), written plainly enough to check them.
"""

from __future__ import annotations

from typing import Any

import torch

from ._collate import MicroBatch
from ._dist import all_gather_varlen, gather_sizes, gather_varlen_nograd


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary embedding of ``x`` (``[tokens, heads, head_dim]``, even head_dim) at explicit
    ``positions`` (``[tokens]``): a shard is rotated by its true positions, not 0..n."""
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


class PackedAttention:
    """Causal attention for one micro-batch on one GPU, built once and called per layer.

    Local group (``[0, local_tokens)``): each sequence attends to itself, no communication.
    Sharded group: keys and values of every CP rank's sharded tokens are all-gathered over
    ``group`` (differentiably); a query attends to the keys of its own sequence at earlier or
    equal positions, padding excluded. Every CP rank of the DP rank must construct and call it
    for every micro-batch, empty ones included (the all-gathers are collective).
    """

    def __init__(self, mb: MicroBatch, group: Any = None) -> None:
        self.local, self.group = mb.local_tokens, group
        seq, pos = mb.seq_ids, mb.position_ids
        ls, lp = seq[:self.local], pos[:self.local]
        self.local_mask = _causal_same_sequence(ls, lp, ls, lp)
        ss, sp = seq[self.local:], pos[self.local:]
        self.sizes = gather_sizes(len(ss), group) if group is not None else [len(ss)]
        meta = gather_varlen_nograd(torch.stack([ss, sp], dim=1), self.sizes, group)
        self.sharded_mask = _causal_same_sequence(ss, sp, meta[:, 0], meta[:, 1])

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``q``, ``k``, ``v``: ``[tokens, heads, head_dim]`` over this GPU's buffer."""
        n = self.local
        local = _masked_attention(q[:n], k[:n], v[:n], self.local_mask)
        heads = k.shape[1]
        kv = all_gather_varlen(torch.cat([k[n:], v[n:]], dim=1), self.sizes, self.group)
        sharded = _masked_attention(q[n:], kv[:, :heads], kv[:, heads:], self.sharded_mask)
        return torch.cat([local, sharded])
