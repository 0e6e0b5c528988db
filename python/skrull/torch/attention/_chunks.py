"""The attention of chunk passes (chunking on, ChunkFlow's placement): each chunk of a chunked
sequence attends to the K/V state of the chunks before it and to itself, causally, at its true
positions (docs/chunking.md, "Running a chunked plan").

``ChunkedSequence`` holds one chunked sequence's passes on this GPU and its K/V state: per
layer, this GPU's keys and values of every chunk already run (its rows: the whole chunk on
one GPU, its zigzag pieces on a group). ``ChunkedSequence.attention(i)`` is the attention of
pass ``i``, called by every layer of that pass: it stores the pass's own keys and values in
the state (on the pass's first forward; a recomputation in the backward pass reuses what is
stored), and attends the pass's queries over the state and itself. On a group of ``g > 1``
ranks the rows of every chunk so far are exchanged like a sharded sequence's (``_exchange``),
so each rank stores only its ``1/g`` of the state; on one GPU nothing crosses GPUs. The state
tensors are part of the autograd graph: a later pass's backward carries the gradient of every
earlier chunk's keys and values back to the pass that made them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._exchange import check_group, exchange_rows, padded_rows
from ._kernels import BACKENDS, MERGE_DROPOUT, Pair, pick_backend
from ._merge import PairPlan, PairSpec
from ._schedule import ChunkPassSchedule, ring_fingerprint


class ChunkedSequence:
    """One chunked sequence's passes on this GPU and their K/V state.

    Parameters
    ----------
    passes : sequence of ChunkPassSchedule
        The sequence's passes on this GPU, chunk 0 first (``AttentionSchedule.passes``).
    group : process group or None
        The group's process group (``skrull.torch.cp_ring_groups()[(first, size)]``); None
        on one GPU.
    cp_rank : int
        This GPU's CP rank.
    fingerprint : int or None
        The schedule's fingerprint: the first exchange of each pass is checked against the
        group's (None: not checked).
    backend : str, optional
        A kernel of ``BACKENDS``; default by device and dtype, picked once.

    Raises
    ------
    ValueError
        Passes of several sequences or out of order, or a process group that does not match
        the group (``check_group``).

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch.attention import ChunkedSequence, attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
    ...                         chunk_size=4).plan([6])
    >>> chunked = ChunkedSequence(attention_schedule(plan, 0, 0, 0).passes, None, 0, None)
    >>> q, kv = torch.randn(6, 2, 8), torch.randn(6, 2, 8)
    >>> first = chunked.attention(0)(q[:4], kv[:4], kv[:4])      # chunk 0: itself
    >>> second = chunked.attention(1)(q[4:], kv[4:], kv[4:])     # chunk 1: state + itself
    >>> whole = torch.nn.functional.scaled_dot_product_attention(
    ...     q.transpose(0, 1), kv.transpose(0, 1), kv.transpose(0, 1), is_causal=True)
    >>> torch.allclose(torch.cat([first, second]), whole.transpose(0, 1), atol=1e-6)
    True
    """

    def __init__(self, passes: Any, group: Any, cp_rank: int, fingerprint: int | None, *,
                 backend: str | None = None) -> None:
        self.passes: tuple[ChunkPassSchedule, ...] = tuple(passes)
        if not self.passes:
            raise ValueError("a chunked sequence needs its passes")
        first = self.passes[0]
        if [p.index for p in self.passes] != list(range(first.count)) or \
                any(p.seq != first.seq for p in self.passes):
            raise ValueError(f"sequence {first.seq}: its passes on this GPU are not chunks "
                             f"0 .. {first.count} of one sequence in order")
        self.seq, self.count = first.seq, first.count
        self.group = group
        if first.size > 1:
            check_group(first.ring, group, cp_rank)
        self.fingerprint = fingerprint
        self.backend = None if backend is None else pick_backend(torch.device("cpu"),
                                                                 torch.float32, backend)
        #: ``state[layer][i]``: this GPU's keys and values of chunk ``i`` (``[rows, 2 * kv
        #: heads, dim]``, keys first) at ``layer``, as its pass computed them.
        self.state: list[list[torch.Tensor]] = []
        self._attention = [ChunkAttention(self, p) for p in self.passes]

    def attention(self, index: int) -> ChunkAttention:
        """The attention of pass ``index`` (chunk ``index``).

        Parameters
        ----------
        index : int
            The chunk, ``0 .. count``.

        Returns
        -------
        ChunkAttention
            Called by every layer of that pass.

        Example
        -------
        >>> import skrull
        >>> from skrull.torch.attention import ChunkedSequence, attention_schedule
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4).plan([6])
        >>> chunked = ChunkedSequence(attention_schedule(plan, 0, 0, 0).passes, None, 0, None)
        >>> chunked.attention(1).schedule.start                  # chunk 1: positions 4, 5
        4
        """
        return self._attention[index]

    def _pick(self, q: torch.Tensor) -> str:
        """The backend: the ``backend`` argument, else picked once (first call)."""
        if self.backend is None:
            self.backend = pick_backend(q.device, q.dtype)
        return self.backend


class ChunkAttention:
    """The attention of one chunk pass, called by every layer of that pass in order (or with
    ``layer=``): ``q`` ``[rows, heads, dim]``, ``k``, ``v`` ``[rows, kv heads, dim]`` over the
    pass's rows (``ChunkPassSchedule.tokens``; one padding row when it holds none), output
    shaped like ``q``. Made by ``ChunkedSequence.attention``; ``begin()`` restarts the layer
    count (each forward of the pass, the recomputation included, calls it first).

    Parameters
    ----------
    owner : ChunkedSequence
        The sequence whose K/V state it reads and extends.
    schedule : ChunkPassSchedule
        Its pass.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch.attention import ChunkedSequence, attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
    ...                         chunk_size=4).plan([6])
    >>> chunked = ChunkedSequence(attention_schedule(plan, 0, 0, 0).passes, None, 0, None)
    >>> x = torch.randn(6, 2, 8)
    >>> _ = chunked.attention(0)(x[:4], x[:4], x[:4])     # layer 0 of chunk 0
    >>> chunked.attention(1)(x[4:], x[4:], x[4:]).shape   # chunk 1 over the state
    torch.Size([2, 2, 8])
    >>> len(chunked.state), [t.shape[0] for t in chunked.state[0]]   # one layer, 2 chunks
    (1, [4, 2])
    """

    def __init__(self, owner: ChunkedSequence, schedule: ChunkPassSchedule) -> None:
        self.owner, self.schedule = owner, schedule
        seq = schedule.ring.sequences[0]
        specs: list[PairSpec] = [(c.row, c.rows, 0, 0, c.position + c.rows)
                                 for c in seq.chunks if c.rows]
        self._specs = specs
        self._pairs: PairPlan | None = None
        self._order: dict[tuple[torch.device, int], torch.Tensor] = {}
        self._layer = 0
        # One GPU, no padding: the stored rows of chunks 0 .. index are the prefix's keys in
        # position order already; the kernel reads them part by part (no exchange, no copy).
        ring = schedule.ring
        self._in_order = ring.size == 1 and sum(ring.member_rows) == seq.length and bool(
            (seq.keys == np.arange(seq.length)).all())

    def begin(self) -> None:
        """Restarts the layer count: the next call is layer 0.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch.attention import ChunkedSequence, attention_schedule
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4).plan([6])
        >>> chunked = ChunkedSequence(attention_schedule(plan, 0, 0, 0).passes, None, 0, None)
        >>> attention, x = chunked.attention(0), torch.randn(4, 2, 8)
        >>> _ = attention(x, x, x); _ = attention(x, x, x)          # layers 0 and 1
        >>> attention.begin(); _ = attention(x, x, x)               # layer 0 again
        >>> len(chunked.state)
        2
        """
        self._layer = 0

    def _order_on(self, device: torch.device, block: int) -> torch.Tensor:
        key = (device, block)
        if key not in self._order:
            ring = self.schedule.ring
            self._order[key] = torch.from_numpy(padded_rows(
                ring.sequences[0].keys, ring.member_rows, block)).to(device)
        return self._order[key]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float | None = None, dropout: float = 0.0,
                 layer: int | None = None) -> torch.Tensor:
        """Output ``[rows, heads, dim]``; ``layer``: the layer's index (default: the count of
        calls since ``begin()``). Raises ``ValueError`` on a row count that is not the
        pass's."""
        p = self.schedule
        rows = p.tokens
        if q.shape[0] != rows and not (rows == 0 and q.shape[0] == 1):
            raise ValueError(f"{q.shape[0]} query rows for chunk {p.index} of sequence {p.seq}, "
                             f"which has {rows} rows on this GPU")
        if q.shape[1] % k.shape[1]:
            raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} "
                             "key/value heads")
        if layer is None:
            layer = self._layer
        self._layer = layer + 1
        state = self.owner.state
        while len(state) <= layer:
            state.append([])
        mine = torch.cat([k[:rows], v[:rows]], dim=1)
        stored = state[layer]
        if len(stored) == p.index:        # the pass's first forward: keep its K/V
            stored.append(mine)
        elif len(stored) < p.index:
            raise RuntimeError(f"sequence {p.seq}: chunk {p.index} ran before chunk "
                               f"{len(stored)} at layer {layer} (passes run in order)")
        name = self.owner._pick(q)
        if self._in_order and name == "merge":
            return self._attend(name, q, k, v, (tuple(stored[:p.index]) + (mine,), mine),
                                scale, dropout)
        rows_so_far = torch.cat([*stored[:p.index], mine]) if p.index else mine
        fingerprint = None
        if self.owner.fingerprint is not None and layer == 0:
            # Every forward of the pass tags its first layer's exchange, the recomputation in
            # the backward pass too: its exchanged rows must have the shapes they had.
            fingerprint = ring_fingerprint(self.owner.fingerprint, p.ring, (p.seq, p.index))
        kv, block = exchange_rows(rows_so_far, p.ring, self.owner.group, fingerprint)
        ordered = kv.index_select(0, self._order_on(kv.device, block))
        return self._attend(name, q, k, v, (ordered, kv), scale, dropout)

    def _attend(self, name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                keys: tuple[Any, torch.Tensor], scale: float | None,
                dropout: float) -> torch.Tensor:
        """The pass's pairs over ``keys[0]`` (the prefix's keys and values in position order:
        a tensor, or its parts), tied to ``keys[1]`` (the exchanged rows) when no query of
        the chunk is here."""
        ordered, kv = keys
        if name == "merge":
            if dropout > 0:
                raise NotImplementedError(MERGE_DROPOUT)
            if self._pairs is None:
                self._pairs = PairPlan(self._specs, q.shape[0],
                                       [self.schedule.ring.sequences[0].length])
            out = self._pairs(scale, q, k, v, (ordered,))
        else:
            kvh = k.shape[1]
            pairs: list[Pair] = [(q[r:r + n], ordered[a:b, :kvh], ordered[a:b, kvh:])
                                 for r, n, _, a, b in self._specs]
            results = BACKENDS[name](pairs, scale, dropout)
            out = q.new_zeros(q.shape)
            for (r, n, _, _, _), (o, _) in zip(self._specs, results):
                out[r:r + n] = o.to(q.dtype)
        if not self._specs:
            # No query of the chunk here: zeros, still tied to q, k, v and to the exchanged
            # rows (an exact zero), so that this GPU joins its group's backward.
            out = out + (q.reshape(-1)[:0].sum() + k.reshape(-1)[:0].sum()
                         + v.reshape(-1)[:0].sum() + kv.reshape(-1)[:0].sum()).to(out.dtype)
        return out


def split_passes(passes: tuple[ChunkPassSchedule, ...]) -> list[tuple[ChunkPassSchedule, ...]]:
    """``passes`` sequence by sequence, in the order they run."""
    out: dict[int, list[ChunkPassSchedule]] = {}
    for p in passes:
        out.setdefault(p.seq, []).append(p)
    return [tuple(v) for v in out.values()]
