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

import numpy as np
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


#: One pair of a ``PackedPairs`` call: query rows ``[row, row + rows)`` of ``q`` over keys
#: ``[k0, k1)`` of source ``src`` (-1: the buffer's own ``k`` and ``v``; ``i >= 0``:
#: ``sources[i]``, keys and values stacked along the head axis), bottom-right causal.
PairSpec = tuple[int, int, int, int, int]


def _kv(src: int, k: torch.Tensor, v: torch.Tensor, sources: tuple[torch.Tensor, ...]
        ) -> tuple[torch.Tensor, torch.Tensor]:
    if src < 0:
        return k, v
    kvh = sources[src].shape[1] // 2
    return sources[src][:, :kvh], sources[src][:, kvh:]


def _fold(x: torch.Tensor, kvh: int) -> torch.Tensor:
    """``[1, heads, rows, ...]`` to ``[1, kvh, heads / kvh * rows, ...]``: each key/value head's
    query heads stacked along the rows, for a block without a mask (the prefix), which then
    reads its keys once instead of repeated per query head."""
    return x.reshape(1, kvh, -1, *x.shape[3:])


def _unfold(x: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of ``_fold``."""
    return x.reshape(1, heads, -1, *x.shape[3:])


def _sources(parts: tuple[torch.Tensor, ...], segments: tuple[int, ...]
             ) -> list[torch.Tensor]:
    """Each source: its ``segments[i]`` parts concatenated along the rows (a copy only when
    there are several)."""
    out, at = [], 0
    for n in segments:
        out.append(parts[at] if n == 1 else torch.cat(parts[at:at + n]))
        at += n
    return out


class PackedPairs(torch.autograd.Function):
    """Every pair of one attention call in one autograd node: the output ``[tokens, heads,
    dim]`` of ``q`` (zeros on rows no pair covers), each pair computed as ``ChunkAttention``
    computes it (the same kernel calls and merge), written in place; the backward writes each
    pair's gradients into ``q``'s, ``k``'s, ``v``'s and the sources' gradients. One node per
    call instead of one per pair: no slice of ``q`` or of the keys enters the autograd graph,
    so no full-size gradient is made per pair.

    A source may come in parts (``segments[i]`` of the ``parts``, concatenated along the rows:
    a chunk pass's K/V state, chunk by chunk): the node keeps the parts and concatenates them
    while it runs, so no second copy of a long prefix outlives the call. Grouped-query heads
    are repeated for the causal square only; the prefix block folds each key/value head's query
    heads into its rows instead, so a long prefix is never repeated."""

    @staticmethod
    def forward(ctx: Any, specs: tuple[PairSpec, ...], scale: float | None,
                segments: tuple[int, ...], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                *parts: torch.Tensor) -> torch.Tensor:
        heads, kvh = q.shape[1], k.shape[1]
        n_rep = heads // kvh
        sources = _sources(parts, segments)
        out = q.new_zeros(q.shape)
        lses = []
        for row, rows, src, k0, k1 in specs:
            ks, vs = _kv(src, k, v, tuple(sources))
            prefix = k1 - k0 - rows
            qb = _bhld(q[row:row + rows], 1)
            o, lse = _FORWARD(qb, _bhld(ks[k0 + prefix:k1], n_rep),
                              _bhld(vs[k0 + prefix:k1], n_rep), 0.0, True, scale=scale)
            if prefix > 0:
                o1, l1 = _FORWARD(_fold(qb, kvh), _bhld(ks[k0:k0 + prefix], 1),
                                  _bhld(vs[k0:k0 + prefix], 1), 0.0, False, scale=scale)
                o1, l1 = _unfold(o1, heads), _unfold(l1, heads)
                merged = torch.logaddexp(l1, lse)
                o = (o1 * (l1 - merged).exp().unsqueeze(-1).to(o1.dtype)
                     + o * (lse - merged).exp().unsqueeze(-1).to(o.dtype))
                lse = merged
            out[row:row + rows] = o.squeeze(0).transpose(0, 1)
            lses.append(lse)
        ctx.save_for_backward(q, k, v, out, *parts)
        ctx.specs, ctx.scale, ctx.segments, ctx.lses = specs, scale, segments, lses
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, out, *parts = ctx.saved_tensors
        scale = ctx.scale
        heads, kvh = q.shape[1], k.shape[1]
        n_rep = heads // kvh
        sources = tuple(_sources(tuple(parts), ctx.segments))
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dsources = tuple(torch.zeros_like(s) for s in sources)
        for (row, rows, src, k0, k1), lse in zip(ctx.specs, ctx.lses):
            ks, vs = _kv(src, k, v, sources)
            gk, gv = _kv(src, dk, dv, dsources)
            prefix = k1 - k0 - rows
            qb = _bhld(q[row:row + rows], 1)
            ob = _bhld(out[row:row + rows], 1)
            go = _bhld(grad_out[row:row + rows], 1).contiguous()
            dqb, dk2, dv2 = _BACKWARD(go, qb, _bhld(ks[k0 + prefix:k1], n_rep),
                                      _bhld(vs[k0 + prefix:k1], n_rep), ob, lse, 0.0, True,
                                      scale=scale)
            gk[k0 + prefix:k1] += _unrepeat(dk2, n_rep)
            gv[k0 + prefix:k1] += _unrepeat(dv2, n_rep)
            if prefix > 0:
                dq1, dk1, dv1 = _BACKWARD(_fold(go, kvh), _fold(qb, kvh),
                                          _bhld(ks[k0:k0 + prefix], 1),
                                          _bhld(vs[k0:k0 + prefix], 1), _fold(ob, kvh),
                                          _fold(lse, kvh), 0.0, False, scale=scale)
                dqb = dqb + _unfold(dq1, heads)
                gk[k0:k0 + prefix] += _unrepeat(dk1, 1)
                gv[k0:k0 + prefix] += _unrepeat(dv1, 1)
            dq[row:row + rows] = dqb.squeeze(0).transpose(0, 1)
        dparts: list[torch.Tensor] = []
        for d, n, at in zip(dsources, ctx.segments, _starts(ctx.segments)):
            dparts += list(torch.split(d, [p.shape[0] for p in parts[at:at + n]])) \
                if n > 1 else [d]
        return (None, None, None, dq, dk, dv, *dparts)


def _starts(segments: tuple[int, ...]) -> list[int]:
    out, at = [], 0
    for n in segments:
        out.append(at)
        at += n
    return out


def packed_pairs(specs: tuple[PairSpec, ...], scale: float | None, q: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor, sources: tuple[Any, ...]) -> torch.Tensor:
    """``PackedPairs.apply``: the output ``[tokens, heads, dim]`` of every pair of ``specs``
    (zeros elsewhere); a source is a tensor or a tuple of parts (its rows in order)."""
    segments = tuple(len(s) if isinstance(s, tuple) else 1 for s in sources)
    parts = [p for s in sources for p in (s if isinstance(s, tuple) else (s,))]
    out: torch.Tensor = PackedPairs.apply(specs, scale, segments, q, k, v, *parts)
    return out


#: Pairs over at most this many keys run batched (``PairPlan``): one causal kernel call per
#: power-of-two size class instead of one to three calls per pair. Above it the work the
#: batched form adds (the prefix computed as padding queries, quadratic in the keys) costs
#: more than the calls it saves (BENCHMARKS.md, "Sharded sequences: the executor's fixed
#: cost").
BATCH_KEYS = 128


def _whole(source: Any) -> torch.Tensor:
    out: torch.Tensor = torch.cat(source) if isinstance(source, tuple) else source
    return out


class PairPlan:
    """How the ``"merge"`` kernel runs one schedule's pairs, fixed when the attention is built:
    short pairs (at most ``BATCH_KEYS`` keys) in batches, the others one by one
    (``PackedPairs``).

    A batch holds the pairs of one size class ``kmax`` (a power of two, at least 16): pair
    ``b`` of ``keys = prefix + rows`` keys is slot ``b``, its keys at ``[0, keys)`` and its
    queries at ``[prefix, keys)`` of the slot, zeros elsewhere, and one top-left causal call of
    the CPU flash kernel runs every slot (query ``j`` of a slot sees keys ``0 .. j``: exactly
    the pair's bottom-right causal mask for its real queries; the padding queries' output is
    dropped and their zero gradient adds nothing). Every row moves through one
    ``index_select`` per batch, built here from integers: no Python work per pair or
    sequence when the attention runs.

    Parameters
    ----------
    specs : sequence of PairSpec
        The pairs.
    tokens : int
        Rows of the buffer (``q``).
    source_rows : sequence of int
        Rows of each source (``sources[i]``).
    """

    def __init__(self, specs: list[PairSpec], tokens: int, source_rows: list[int]) -> None:
        short = [sp for sp in specs if sp[4] - sp[3] <= BATCH_KEYS]
        self.long = tuple(sp for sp in specs if sp[4] - sp[3] > BATCH_KEYS)
        # The key table: the buffer's (k | v) where a short pair reads it, then every source
        # a short pair reads, then one zero row.
        self.table = sorted({sp[2] for sp in short})
        offset, at = {}, 0
        for src in self.table:
            offset[src] = at
            at += tokens if src < 0 else source_rows[src]
        zero_key = at
        classes: dict[int, list[PairSpec]] = {}
        for sp in short:
            classes.setdefault(max(16, 1 << (sp[4] - sp[3] - 1).bit_length()), []).append(sp)
        self.batches: list[tuple[int, np.ndarray, np.ndarray]] = []
        out_index = np.full(tokens, -1, np.int64)
        base = 0
        for kmax, members in sorted(classes.items()):
            qi = np.full((len(members), kmax), tokens, np.int64)
            ki = np.full((len(members), kmax), zero_key, np.int64)
            for b, (row, rows, src, k0, k1) in enumerate(members):
                prefix = k1 - k0 - rows
                qi[b, prefix:k1 - k0] = np.arange(row, row + rows)
                ki[b, :k1 - k0] = offset[src] + np.arange(k0, k1)
                out_index[row:row + rows] = base + b * kmax + prefix + np.arange(rows)
            self.batches.append((kmax, qi.reshape(-1), ki.reshape(-1)))
            base += len(members) * kmax
        out_index[out_index < 0] = base
        self.out_index = out_index
        self._on: dict[torch.device, list[torch.Tensor]] = {}

    def _indices(self, device: torch.device) -> list[torch.Tensor]:
        if device not in self._on:
            arrays = [a for _, qi, ki in self.batches for a in (qi, ki)] + [self.out_index]
            self._on[device] = [torch.from_numpy(a).to(device) for a in arrays]
        return self._on[device]

    def __call__(self, scale: float | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 sources: tuple[Any, ...]) -> torch.Tensor:
        """The output ``[tokens, heads, dim]`` of every pair (zeros on rows of none); a
        source is a tensor or a tuple of parts (``packed_pairs``)."""
        out = packed_pairs(self.long, scale, q, k, v, sources) if self.long else None
        if not self.batches:
            return out if out is not None else q.new_zeros(q.shape)
        index = self._indices(q.device)
        heads, kvh, dim = q.shape[1], k.shape[1], q.shape[2]
        n_rep = heads // kvh
        q_table = torch.cat([q, q.new_zeros((1, heads, dim))])
        parts = [torch.cat([k, v], dim=1) if src < 0 else _whole(sources[src])
                 for src in self.table]
        kv_table = torch.cat([*parts, k.new_zeros((1, 2 * kvh, dim))])
        outs = []
        for j, (kmax, _, _) in enumerate(self.batches):
            qb = q_table.index_select(0, index[2 * j]).view(-1, kmax, heads, dim)
            kv = kv_table.index_select(0, index[2 * j + 1]).view(-1, kmax, 2 * kvh, dim)
            kb, vb = kv[:, :, :kvh], kv[:, :, kvh:]
            if n_rep > 1:
                kb, vb = kb.repeat_interleave(n_rep, dim=2), vb.repeat_interleave(n_rep, dim=2)
            o = _FORWARD(qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2), 0.0, True,
                         scale=scale)[0]
            outs.append(o.transpose(1, 2).reshape(-1, heads, dim))
        outs.append(q.new_zeros((1, heads, dim)))
        batched = torch.cat(outs).index_select(0, index[-1])
        return batched if out is None else out + batched


def chunk_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``ChunkAttention.apply``: ``(out [rows, heads, dim], lse [heads, rows])``."""
    out, lse = ChunkAttention.apply(q, k, v, scale)
    return out, lse
