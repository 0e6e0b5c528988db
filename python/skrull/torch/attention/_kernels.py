"""Attention kernels behind one interface: a list of ``(q, k, v)`` pairs in, one
``(output, log-sum-exp)`` per pair out.

A pair is a query chunk ``q`` (``[rows, heads, dim]``) over keys and values
``[keys, kv heads, dim]`` with ``keys >= rows``, causal at the bottom right: query ``i`` sees
keys ``0 .. keys - rows + i``. A local sequence is the pair with ``keys == rows``; a chunk of
a sharded sequence at true positions ``[p0, p1)`` is the pair of its rows over keys
``[0, p1)``. Heads are grouped: ``heads`` is a multiple of ``kv heads``.

Backends (``BACKENDS``; ``pick_backend`` chooses one per device and dtype):

- ``"merge"``: the CPU default. Mask-free calls of torch's CPU flash kernel, prefix and
  causal square merged by log-sum-exp (``_merge``): memory linear in the rows.
- ``"flash"``: ``flash_attn_varlen_func`` on CUDA in half precision, every pair of a call in
  one varlen launch (flash-attn aligns causal masks at the bottom right).
- ``"sdpa"``: torch's fused CUDA kernels, one ``scaled_dot_product_attention`` per pair with
  ``causal_lower_right`` (which the fused kernels take without building a mask); no
  log-sum-exp (``None``).
- ``"dense"``: the reference: an explicit ``rows x keys`` mask and softmax, any device. It is
  the test oracle, quadratic in memory; choose it only by name.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from ._merge import chunk_attention

Pair = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Result = tuple[torch.Tensor, Optional[torch.Tensor]]
Kernel = Callable[[Sequence[Pair], Optional[float], float], list[Result]]

#: The environment variable that overrides the automatic choice of backend.
BACKEND_ENV = "SKRULL_ATTENTION_BACKEND"


def _repeat(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return x.repeat_interleave(n_rep, dim=1) if n_rep > 1 else x


def dense(pairs: Sequence[Pair], scale: float | None, dropout: float) -> list[Result]:
    """The oracle: softmax over an explicit bottom-right causal mask (quadratic memory)."""
    out: list[Result] = []
    for q, k, v in pairs:
        rows, keys = q.shape[0], k.shape[0]
        n_rep = q.shape[1] // k.shape[1]
        k, v = _repeat(k, n_rep), _repeat(v, n_rep)
        s = (1.0 / math.sqrt(q.shape[-1])) if scale is None else scale
        scores = torch.einsum("qhd,khd->hqk", q, k) * s
        allowed = (torch.arange(keys, device=q.device)[None, :]
                   <= (keys - rows) + torch.arange(rows, device=q.device)[:, None])
        scores = scores.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        probs = torch.softmax(scores, dim=-1)
        if dropout > 0:
            probs = F.dropout(probs, p=dropout)
        out.append((torch.einsum("hqk,khd->qhd", probs, v), lse.detach()))
    return out


#: Why ``"merge"`` refuses attention dropout.
MERGE_DROPOUT = ("skrull attention backend 'merge' runs without attention dropout; train with "
                 "attention_dropout=0 or choose backend 'dense' (quadratic memory)")


def merge(pairs: Sequence[Pair], scale: float | None, dropout: float) -> list[Result]:
    """The CPU kernel: mask-free flash calls merged by log-sum-exp (``_merge``)."""
    if dropout > 0:
        raise NotImplementedError(MERGE_DROPOUT)
    return [chunk_attention(q, k, v, scale) for q, k, v in pairs]


def _flash_varlen() -> Any:
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def flash(pairs: Sequence[Pair], scale: float | None, dropout: float) -> list[Result]:
    """flash-attn varlen on CUDA: every pair in one launch."""
    func = _flash_varlen()
    if func is None:
        raise RuntimeError("skrull attention backend 'flash' needs flash-attn "
                           "(pip install flash-attn)")
    if not pairs:
        return []
    device = pairs[0][0].device
    q_rows = [q.shape[0] for q, _, _ in pairs]
    k_rows = [k.shape[0] for _, k, _ in pairs]

    def cu(rows: list[int]) -> torch.Tensor:
        edges = [0]
        for n in rows:
            edges.append(edges[-1] + n)
        return torch.tensor(edges, dtype=torch.int32, device=device)
    q = torch.cat([p[0] for p in pairs])
    k = torch.cat([p[1] for p in pairs])
    v = torch.cat([p[2] for p in pairs])
    out, lse, _ = func(q, k, v, cu(q_rows), cu(k_rows), max(q_rows), max(k_rows),
                       dropout_p=dropout, softmax_scale=scale, causal=True,
                       return_attn_probs=True)
    outs = out.split(q_rows)
    lses = lse.split(q_rows, dim=-1) if lse.dim() == 2 else [None] * len(pairs)
    return list(zip(outs, lses))


def sdpa(pairs: Sequence[Pair], scale: float | None, dropout: float) -> list[Result]:
    """torch's fused kernels: one SDPA call per pair, bottom-right causal without a mask."""
    from torch.nn.attention.bias import causal_lower_right

    out: list[Result] = []
    for q, k, v in pairs:
        rows, keys = q.shape[0], k.shape[0]
        n_rep = q.shape[1] // k.shape[1]
        qb, kb, vb = (x.transpose(0, 1).unsqueeze(0) for x in (q, _repeat(k, n_rep),
                                                               _repeat(v, n_rep)))
        if keys == rows:
            o = F.scaled_dot_product_attention(qb, kb, vb, dropout_p=dropout, is_causal=True,
                                               scale=scale)
        else:
            o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=causal_lower_right(
                rows, keys), dropout_p=dropout, scale=scale)
        out.append((o.squeeze(0).transpose(0, 1), None))
    return out


#: Every backend by name.
BACKENDS: dict[str, Kernel] = {"merge": merge, "flash": flash, "sdpa": sdpa, "dense": dense}


def pick_backend(device: torch.device, dtype: torch.dtype, name: str | None = None) -> str:
    """The backend for tensors on ``device`` of ``dtype``: ``name`` when given, else
    ``$SKRULL_ATTENTION_BACKEND`` when set, else ``"flash"`` on CUDA in half precision with
    flash-attn installed, ``"sdpa"`` on other CUDA tensors and ``"merge"`` elsewhere.

    Parameters
    ----------
    device : torch.device
        Where the attention runs.
    dtype : torch.dtype
        The dtype of the queries.
    name : str, optional
        A backend of ``BACKENDS`` (overrides everything else).

    Returns
    -------
    str
        A key of ``BACKENDS``.

    Raises
    ------
    ValueError
        An unknown backend name.

    Example
    -------
    >>> import torch
    >>> from skrull.torch.attention import pick_backend
    >>> pick_backend(torch.device("cpu"), torch.float64)
    'merge'
    >>> pick_backend(torch.device("cpu"), torch.float64, "dense")
    'dense'
    """
    chosen = name or os.environ.get(BACKEND_ENV) or None
    if chosen is None:
        if device.type == "cuda":
            half = dtype in (torch.float16, torch.bfloat16)
            chosen = "flash" if half and _flash_varlen() is not None else "sdpa"
        else:
            chosen = "merge"
    if chosen not in BACKENDS:
        raise ValueError(f"unknown skrull attention backend {chosen!r} (from "
                         f"{'the argument' if name else BACKEND_ENV}); choose one of "
                         f"{', '.join(sorted(BACKENDS))}")
    return chosen
