"""Bottom-right causal attention of a query chunk over a longer key prefix on the CPU, in
memory linear in the rows.

A chunk at true positions ``[p0, p1)`` attends to keys ``[0, p1)``: the unmasked prefix
``[0, p0)`` and the causal square ``[p0, p1)``. Each is one mask-free call of torch's CPU
flash kernel (``_scaled_dot_product_flash_attention_for_cpu``), which returns the output and
its log-sum-exp; the two are merged exactly by their log-sum-exp. The backward runs the
kernel's backward on each block from the merged output and log-sum-exp, as ring attention
does, so no ``rows x keys`` tensor exists in either direction.
"""

from __future__ import annotations

from typing import Any

import torch

_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _bhld(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[rows, heads, dim]`` to the kernel's ``[1, heads, rows, dim]`` (a view), each key or
    value head repeated ``n_rep`` times for grouped-query attention."""
    if n_rep > 1:
        x = x.repeat_interleave(n_rep, dim=1)
    return x.transpose(0, 1).unsqueeze(0)


def _unrepeat(grad: torch.Tensor, n_rep: int) -> torch.Tensor:
    """The gradient of a repeated ``[1, heads, rows, dim]`` back on ``[rows, kv heads, dim]``:
    each key/value head gets the sum over its query heads."""
    g = grad.squeeze(0).transpose(0, 1)  # [rows, heads, dim]
    if n_rep > 1:
        g = g.reshape(g.shape[0], g.shape[1] // n_rep, n_rep, g.shape[2]).sum(dim=2)
    return g


class ChunkAttention(torch.autograd.Function):
    """``(out, lse)`` of a query chunk ``q`` (``[rows, heads, dim]``) over keys and values
    ``[0, prefix + rows)`` (``[keys, kv heads, dim]``), causal at the bottom right; ``lse`` is
    ``[heads, rows]`` and carries no gradient."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        rows, keys = q.shape[0], k.shape[0]
        prefix = keys - rows
        n_rep = q.shape[1] // k.shape[1]
        qb, kb, vb = _bhld(q, 1), _bhld(k, n_rep), _bhld(v, n_rep)
        out, lse = _FORWARD(qb, kb[:, :, prefix:], vb[:, :, prefix:], 0.0, True, scale=scale)
        if prefix > 0:
            o1, l1 = _FORWARD(qb, kb[:, :, :prefix], vb[:, :, :prefix], 0.0, False,
                              scale=scale)
            merged = torch.logaddexp(l1, lse)
            out = (o1 * (l1 - merged).exp().unsqueeze(-1).to(o1.dtype)
                   + out * (lse - merged).exp().unsqueeze(-1).to(out.dtype))
            lse = merged
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.prefix, ctx.n_rep = scale, prefix, n_rep
        ctx.mark_non_differentiable(lse)
        return out.squeeze(0).transpose(0, 1), lse.squeeze(0)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor,
                 _grad_lse: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor,
                                                          torch.Tensor, None]:
        q, k, v, out, lse = ctx.saved_tensors
        prefix, n_rep, scale = ctx.prefix, ctx.n_rep, ctx.scale
        qb, kb, vb = _bhld(q, 1), _bhld(k, n_rep), _bhld(v, n_rep)
        go = _bhld(grad_out, 1).contiguous()
        dq, dk2, dv2 = _BACKWARD(go, qb, kb[:, :, prefix:], vb[:, :, prefix:], out, lse, 0.0,
                                 True, scale=scale)
        if prefix > 0:
            dq1, dk1, dv1 = _BACKWARD(go, qb, kb[:, :, :prefix], vb[:, :, :prefix], out, lse,
                                      0.0, False, scale=scale)
            dq = dq + dq1
            dk2, dv2 = torch.cat([dk1, dk2], dim=2), torch.cat([dv1, dv2], dim=2)
        return (dq.squeeze(0).transpose(0, 1), _unrepeat(dk2, n_rep), _unrepeat(dv2, n_rep),
                None)


def chunk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``ChunkAttention.apply``: ``(out [rows, heads, dim], lse [heads, rows])``."""
    out, lse = ChunkAttention.apply(q, k, v, scale)
    return out, lse
