"""The torch modules the profiler times: one decoder layer as Qwen2 and Llama build it, the
LM head with its loss, and varlen causal attention over packed sequences."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._shape import ProfileShape

#: RMSNorm epsilon (Qwen2's).
EPS = 1e-6

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "Packing"], torch.Tensor]


class Packing:
    """Sequences packed into one token buffer: their lengths, FlashAttention's ``cu_seqlens``
    (on the device) and the rotary tables at each token's position in its own sequence."""

    def __init__(self, lengths: Sequence[int], head_dim: int, device: torch.device,
                 dtype: torch.dtype, base: float = 1_000_000.0) -> None:
        self.lengths = [int(n) for n in lengths]
        self.tokens = sum(self.lengths)
        self.max_len = max(self.lengths)
        cu = [0]
        for n in self.lengths:
            cu.append(cu[-1] + n)
        self.bounds = list(zip(cu[:-1], cu[1:]))
        self.cu_seqlens = torch.tensor(cu, dtype=torch.int32, device=device)
        positions = torch.cat([torch.arange(n, device=device) for n in self.lengths])
        half = head_dim // 2
        inv = base ** (-torch.arange(half, dtype=torch.float32, device=device) / half)
        angle = positions.to(torch.float32)[:, None] * inv[None, :]
        angle = torch.cat([angle, angle], dim=-1)
        self.cos = angle.cos().to(dtype)[:, None, :]
        self.sin = angle.sin().to(dtype)[:, None, :]

    def tensors(self) -> list[torch.Tensor]:
        """The tensors every layer shares (built once per micro-batch, not per layer)."""
        return [self.cos, self.sin, self.cu_seqlens]


def apply_rope(x: torch.Tensor, packing: Packing) -> torch.Tensor:
    """Rotary embedding (rotate-half form) of ``x`` ``[tokens, heads, head_dim]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * packing.cos + rotated * packing.sin


def sdpa_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                packing: Packing) -> torch.Tensor:
    """Causal attention of each packed sequence on its own, with PyTorch's
    ``scaled_dot_product_attention`` (grouped-query heads native): ``[tokens, heads, dim]``."""
    out = []
    for start, end in packing.bounds:
        qs, ks, vs = (t[start:end].transpose(0, 1)[None] for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
        out.append(o[0].transpose(0, 1))
    return out[0] if len(out) == 1 else torch.cat(out)


def flash_varlen() -> Optional[Attention]:
    """FlashAttention's ``flash_attn_varlen_func`` as an ``Attention``, if importable."""
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               packing: Packing) -> torch.Tensor:
        cu = packing.cu_seqlens
        out: torch.Tensor = flash_attn_varlen_func(q, k, v, cu, cu, packing.max_len,
                                                   packing.max_len, causal=True)
        return out
    return attend


class DecoderLayer(nn.Module):
    """One decoder layer: ``x + O(attn(rope(Q), rope(K), V))`` over ``RMSNorm(x)``, then
    ``x + down(silu(gate(r)) * up(r))`` over ``r = RMSNorm(x)``; Q, K and V with biases when
    the shape has them, grouped-query attention."""

    def __init__(self, shape: ProfileShape, attention: Attention) -> None:
        super().__init__()
        h, d = shape.hidden, shape.head_dim
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, d
        self.attention = attention
        self.attn_norm = nn.Parameter(torch.ones(h))
        self.q = nn.Linear(h, shape.heads * d, bias=shape.qkv_bias)
        self.k = nn.Linear(h, shape.kv_heads * d, bias=shape.qkv_bias)
        self.v = nn.Linear(h, shape.kv_heads * d, bias=shape.qkv_bias)
        self.o = nn.Linear(shape.heads * d, h, bias=False)
        self.ffn_norm = nn.Parameter(torch.ones(h))
        self.gate = nn.Linear(h, shape.ffn, bias=False)
        self.up = nn.Linear(h, shape.ffn, bias=False)
        self.down = nn.Linear(shape.ffn, h, bias=False)

    def forward(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        """``x``: ``[tokens, hidden]`` of the packed sequences."""
        t = x.shape[0]
        r = F.rms_norm(x, x.shape[-1:], self.attn_norm, EPS)
        q = apply_rope(self.q(r).view(t, self.heads, self.head_dim), packing)
        k = apply_rope(self.k(r).view(t, self.kv_heads, self.head_dim), packing)
        v = self.v(r).view(t, self.kv_heads, self.head_dim)
        a = self.attention(q, k, v, packing)
        x = x + self.o(a.reshape(t, self.heads * self.head_dim))
        r = F.rms_norm(x, x.shape[-1:], self.ffn_norm, EPS)
        out: torch.Tensor = x + self.down(F.silu(self.gate(r)) * self.up(r))
        return out


class LMHead(nn.Module):
    """The final RMSNorm, the vocabulary projection and the token-mean cross-entropy (on
    float32 logits, as trainers compute it)."""

    def __init__(self, shape: ProfileShape) -> None:
        super().__init__()
        self.norm = nn.Parameter(torch.ones(shape.hidden))
        self.proj = nn.Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of ``x`` ``[tokens, hidden]`` against ``labels`` ``[tokens]``."""
        logits = self.proj(F.rms_norm(x, x.shape[-1:], self.norm, EPS))
        return F.cross_entropy(logits.float(), labels)
