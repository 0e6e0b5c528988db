"""``TinyTransformer``: the smallest model that exercises a skrull layout end to end."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._attention import PackedAttention, apply_rope
from ._collate import MicroBatch

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class TinyTransformer(nn.Module):
    """Embedding, ``layers`` x (RMS-normed causal self-attention with RoPE, then a SiLU MLP),
    and an LM head, all with residuals. ``forward_packed`` runs one skrull micro-batch (with
    ``PackedAttention``); ``forward_sequence`` runs one whole sequence with plain causal
    attention, the unpacked reference."""

    def __init__(self, vocab: int = 64, hidden: int = 32, heads: int = 2, ffn: int = 64,
                 layers: int = 1) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "qkv": nn.Linear(hidden, 3 * hidden), "out": nn.Linear(hidden, hidden),
            "up": nn.Linear(hidden, ffn), "down": nn.Linear(ffn, hidden)})
            for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, attend: Attention) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            b: nn.ModuleDict = block  # type: ignore[assignment]
            h = F.rms_norm(x, x.shape[-1:])
            q, k, v = b["qkv"](h).view(len(ids), 3 * self.heads, self.head_dim).chunk(3, dim=1)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
            x = x + b["out"](attend(q, k, v).reshape(len(ids), self.heads * self.head_dim))
            x = x + b["down"](F.silu(b["up"](F.rms_norm(x, x.shape[-1:]))))
        logits: torch.Tensor = self.head(x)
        return logits

    def forward_packed(self, mb: MicroBatch, group: Any = None,
                       ring_groups: Any = None) -> torch.Tensor:
        """Logits ``[tokens, vocab]`` of this GPU's buffer; collective over ``group`` (CP), or
        ring by ring over ``ring_groups`` (see ``PackedAttention``)."""
        return self._run(mb.input_ids, mb.position_ids, PackedAttention(mb, group, ring_groups))

    def forward_sequence(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[len, vocab]`` of one whole sequence at positions ``0 .. len``."""
        def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                               v.transpose(0, 1), is_causal=True)
            return o.transpose(0, 1)
        return self._run(ids, torch.arange(len(ids), device=ids.device), causal)


def packed_loss(logits: torch.Tensor, mb: MicroBatch, ignore_index: int = -100) -> torch.Tensor:
    """Sum over the buffer of cross-entropy x ``loss_weights``: summed over every GPU of the
    global batch, the mean over its labelled tokens."""
    ce = F.cross_entropy(logits, mb.labels, ignore_index=ignore_index, reduction="none")
    return (ce * mb.loss_weights.to(ce.dtype)).sum()
