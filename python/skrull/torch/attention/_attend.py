"""``CpAttention``: one GPU's attention for one micro-batch, from its schedule."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ._exchange import check_group, exchange, padded_rows
from ._kernels import BACKENDS, MERGE_DROPOUT, Pair, pick_backend
from ._merge import PairPlan, PairSpec
from ._schedule import AttentionSchedule


class CpAttention:
    """Causal attention over one GPU's buffer for one micro-batch, built once (no collective)
    and called by every layer.

    Local sequences attend within themselves on this GPU. For each ring, keys and values are
    exchanged once per call (``_exchange``); then every query chunk of a sharded sequence at
    true positions ``[p0, p1)`` attends to its sequence's keys ``[0, p1)``, causal at the
    bottom right. Every pair runs in one kernel call (``_kernels``): no tensor of
    ``rows x sequence`` is built except by the ``"dense"`` oracle. Padding rows of sharded
    sequences get zeros.

    Parameters
    ----------
    schedule : AttentionSchedule
        This GPU's schedule (``attention_schedule``).
    ring_groups : mapping, optional
        ``(first, size)`` -> process group of each ring (``skrull.torch.cp_ring_groups``);
        needed when the schedule has rings. Every member of a ring must call the attention
        for the same micro-batch and layer.
    backend : str, optional
        A key of ``BACKENDS``; default: ``pick_backend`` on the first call's device and dtype
        (``$SKRULL_ATTENTION_BACKEND`` overrides it).
    verify : bool, optional
        Compare the ring members' schedule fingerprints on the first exchange (default True).

    Raises
    ------
    ValueError
        Slots and rings that do not tile the buffer, a ring without a process group, or a
        process group whose size or rank does not match the plan's ring.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch.attention import CpAttention, attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([3, 2])
    >>> attention = CpAttention(attention_schedule(plan, 0, 0, 0))   # CP 1: no ring
    >>> q, kv = torch.randn(5, 4, 8), torch.randn(5, 2, 8)             # GQA: 4 heads, 2 kv
    >>> attention(q, kv, kv).shape
    torch.Size([5, 4, 8])
    """

    def __init__(self, schedule: AttentionSchedule,
                 ring_groups: Mapping[tuple[int, int], Any] | None = None, *,
                 backend: str | None = None, verify: bool = True) -> None:
        self.schedule = schedule
        self.backend = None if backend is None else pick_backend(torch.device("cpu"),
                                                                 torch.float32, backend)
        edges = [(s.start, s.stop) for s in schedule.local]
        edges += [(r.start, r.stop) for r in schedule.rings if r.stop > r.start]
        covered = 0
        for a, b in sorted(edges):
            if a != covered:
                raise ValueError(f"buffer rows {covered}..{a} belong to no sequence")
            covered = b
        if covered != schedule.tokens:
            raise ValueError(f"slots and rings cover {covered} of {schedule.tokens} rows")
        self.groups = []
        for ring in schedule.rings:
            group = None
            if ring.size > 1:
                group = None if ring_groups is None else ring_groups.get((ring.first,
                                                                          ring.size))
                check_group(ring, group, schedule.cp_rank)
            self.groups.append(group)
        self._verified = not verify
        self._backend: dict[tuple[torch.device, torch.dtype], str] = {}
        # Per ring: the sequences this GPU attends (index into ring.sequences); the pairs of
        # every call, local first, then ring by ring over the rings' position-ordered keys
        # (the ring's source: ``sources[i]`` is the i-th ring with pairs).
        self._wanted: list[list[int]] = []
        specs: list[PairSpec] = [(a.start, a.real, -1, a.start, a.start + a.real)
                                 for a in schedule.local if a.real]
        source_rows: list[int] = []
        for ring in schedule.rings:
            wanted, at = [], 0
            for j, seq in enumerate(ring.sequences):
                chunks = [c for c in seq.chunks if c.rows]
                if not chunks:
                    continue
                wanted.append(j)
                specs += [(c.row, c.rows, len(source_rows), at, at + c.position + c.rows)
                          for c in chunks]
                at += seq.length
            self._wanted.append(wanted)
            if wanted:
                source_rows.append(at)
        self._specs = specs
        self._pairs: PairPlan | None = None
        self._source_rows = source_rows
        self._order: dict[tuple[torch.device, int, int], torch.Tensor] = {}

    def _order_on(self, device: torch.device, ring: int, block: int) -> torch.Tensor:
        """The exchanged rows (in ``exchange``'s blocks of ``block`` rows) of every position
        of the ring's attended sequences, sequence after sequence: one index per ring."""
        key = (device, ring, block)
        if key not in self._order:
            r = self.schedule.rings[ring]
            keys = [r.sequences[j].keys for j in self._wanted[ring]]
            flat = np.concatenate(keys) if keys else np.zeros(0, np.int64)
            self._order[key] = torch.from_numpy(padded_rows(flat, r.member_rows,
                                                            block)).to(device)
        return self._order[key]

    def _pick(self, q: torch.Tensor) -> str:
        """The backend: the ``backend`` argument, else picked once per device and dtype."""
        if self.backend is not None:
            return self.backend
        key = (q.device, q.dtype)
        if key not in self._backend:
            self._backend[key] = pick_backend(q.device, q.dtype)
        return self._backend[key]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float | None = None, dropout: float = 0.0) -> torch.Tensor:
        """``q``: ``[tokens, heads, dim]``, ``k``/``v``: ``[tokens, kv heads, dim]`` over this
        GPU's buffer; returns ``[tokens, heads, dim]``. ``scale``: the softmax scale (default
        ``1 / sqrt(dim)``); ``dropout``: attention dropout (not with ``"merge"``). Raises
        ``ValueError`` when ``tokens`` is not the schedule's row count."""
        s = self.schedule
        if q.shape[0] != s.tokens or k.shape[0] != s.tokens or v.shape[0] != s.tokens:
            raise ValueError(f"{q.shape[0]} query / {k.shape[0]} key rows for a schedule of "
                             f"{s.tokens} rows (GPU {s.dp_rank, s.micro_batch, s.cp_rank})")
        if q.shape[1] % k.shape[1]:
            raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} "
                             "key/value heads")
        name = self._pick(q)
        sources: list[torch.Tensor] = []
        fingerprint = None if self._verified else s.fingerprint
        unused = []
        for i, (ring, group) in enumerate(zip(s.rings, self.groups)):
            kv, block = exchange(k, v, ring, group, fingerprint)
            if self._wanted[i]:
                sources.append(kv.index_select(0, self._order_on(kv.device, i, block)))
            elif ring.size > 1:
                unused.append(kv)
        self._verified = True
        specs = self._specs
        if name == "merge":
            if dropout > 0:
                raise NotImplementedError(MERGE_DROPOUT)
            if self._pairs is None:
                self._pairs = PairPlan(specs, s.tokens, self._source_rows)
            out = self._pairs(scale, q, k, v, tuple(sources))
        else:
            out = self._by_pairs(name, specs, sources, q, k, v, scale, dropout)
        if not specs:
            # No query on this GPU (padding or no rows): the output is zeros, still a function
            # of q, k and v so that their weights get (zero) gradients as in unpacked training.
            out = out + (q.reshape(-1)[:0].sum() + k.reshape(-1)[:0].sum()
                         + v.reshape(-1)[:0].sum()).to(out.dtype)
        for kv in unused:
            # This GPU holds no query of the ring, but its backward must still join the
            # exchange's reduce-scatter that its peers run: tie the exchanged rows to the
            # output by an exact zero (regression: test_gpu_without_queries_joins_the_backward).
            out = out + kv.reshape(-1)[:0].sum().to(out.dtype)
        return out

    @staticmethod
    def _by_pairs(name: str, specs: list[PairSpec], sources: list[torch.Tensor],
                  q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None,
                  dropout: float) -> torch.Tensor:
        """A backend of ``BACKENDS`` over the pairs as views, outputs assembled by row."""
        kvh = k.shape[1]
        pairs: list[Pair] = []
        for row, rows, src, k0, k1 in specs:
            if src < 0:
                pairs.append((q[row:row + rows], k[k0:k1], v[k0:k1]))
            else:
                kv = sources[src][k0:k1]
                pairs.append((q[row:row + rows], kv[:, :kvh], kv[:, kvh:]))
        results = BACKENDS[name](pairs, scale, dropout)
        return _assemble(q, [sp[0] for sp in specs], [o for o, _ in results], q.shape[0])


def _assemble(q: torch.Tensor, rows: list[int], outs: list[torch.Tensor],
              tokens: int) -> torch.Tensor:
    """The outputs at their buffer rows, zeros between them (padding rows)."""
    parts, at = [], 0
    for row, out in sorted(zip(rows, outs), key=lambda p: p[0]):
        if row > at:
            parts.append(q.new_zeros((row - at, *q.shape[1:])))
        parts.append(out.to(q.dtype))
        at = row + out.shape[0]
    if at < tokens:
        parts.append(q.new_zeros((tokens - at, *q.shape[1:])))
    if not parts:
        return q.new_zeros((0, *q.shape[1:]))
    return torch.cat(parts)
