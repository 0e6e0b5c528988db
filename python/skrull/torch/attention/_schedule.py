"""The attention schedule of one GPU's micro-batch, built from the plan alone.

Every CP rank of a ring computes the same plan, so it can compute its ring peers' layouts too
(``Plan.layout``): how many rows each peer contributes to the K/V exchange, and where in the
exchanged rows each position of each sharded sequence lies. No process group is needed and
no collective is run to learn it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..._layout import Layout
from ..._plan import Plan


@dataclass(frozen=True)
class LocalSlot:
    """One local sequence: buffer rows ``[start, stop)`` (its padding included), attended
    causally on this GPU alone; ``real`` of them are tokens.

    Parameters
    ----------
    start, stop : int
        Its buffer rows.
    real : int
        Its tokens (the first ``real`` rows); the rest are padding, whose output is zero.

    Example
    -------
    >>> from skrull.torch.attention import LocalSlot
    >>> LocalSlot(0, 8, 5)
    LocalSlot(start=0, stop=8, real=5)
    """

    start: int
    stop: int
    real: int


@dataclass(frozen=True)
class QueryChunk:
    """One contiguous run of this GPU's rows of a sharded sequence: buffer rows
    ``[row, row + rows)`` hold true positions ``[position, position + rows)``, so they attend
    to the sequence's keys ``[0, position + rows)``, causally aligned at the bottom right.
    The ``pad`` rows after them are padding: their output is zero.

    Parameters
    ----------
    row, rows : int
        First buffer row and number of real rows.
    position : int
        True position of the first row in its sequence.
    pad : int
        Padding rows after them.

    Example
    -------
    >>> from skrull.torch.attention import QueryChunk
    >>> c = QueryChunk(row=2, rows=2, position=6, pad=0)
    >>> c.position + c.rows   # the keys it attends to: positions 0 .. 7
    8
    """

    row: int
    rows: int
    position: int
    pad: int


@dataclass(frozen=True)
class RingSequence:
    """One sequence of a K/V exchange: ``keys[p]`` is the exchanged row that holds position
    ``p`` (``0 <= p < length``); ``chunks`` are this GPU's query rows of it.

    Parameters
    ----------
    seq : int
        The sequence's index in the batch.
    length : int
        Its tokens.
    keys : numpy.ndarray
        int64 ``[length]``: the exchanged row of each position.
    chunks : tuple of QueryChunk
        This GPU's query chunks of it.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch.attention import attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=16, policy="packed").plan([6])
    >>> s = attention_schedule(plan, 0, 0, 1).rings[0].sequences[0]
    >>> s.seq, s.length, s.keys.tolist()
    (0, 6, [0, 1, 3, 4, 5, 2])
    """

    seq: int
    length: int
    keys: np.ndarray
    chunks: tuple[QueryChunk, ...]


@dataclass(frozen=True)
class RingSchedule:
    """One K/V exchange over CP ranks ``first .. first + size``: CP rank ``first + j`` sends
    its buffer rows ``[member_starts[j], member_starts[j] + member_rows[j])``, concatenated in
    rank order (this GPU's are ``[start, stop)``). ``sequences`` attend over them.

    Parameters
    ----------
    first, size : int
        The ring's CP ranks.
    start, stop : int
        This GPU's rows in the exchange.
    member_starts, member_rows : tuple of int
        Each member's first buffer row and row count in the exchange.
    sequences : tuple of RingSequence
        The sequences this GPU attends over the exchange.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch.attention import attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=16, policy="packed").plan([6])
    >>> r = attention_schedule(plan, 0, 0, 0).rings[0]
    >>> (r.first, r.size), r.member_rows, r.exchanged_rows
    ((0, 2), (3, 3), 6)
    """

    first: int
    size: int
    start: int
    stop: int
    member_starts: tuple[int, ...]
    member_rows: tuple[int, ...]
    sequences: tuple[RingSequence, ...]

    @property
    def exchanged_rows(self) -> int:
        """Rows of the exchanged K/V: every member's block."""
        return sum(self.member_rows)

    def gathered_metadata(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, position) of every exchanged row, -1 on padding.

        Returns
        -------
        tuple of numpy.ndarray
            int64 ``[exchanged_rows]`` each: the sequence and the position of every row.

        Example
        -------
        >>> import skrull
        >>> from skrull.torch.attention import attention_schedule
        >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=16, policy="packed").plan([3])
        >>> seq, pos = attention_schedule(plan, 0, 0, 0).rings[0].gathered_metadata()
        >>> seq.tolist(), pos.tolist()
        ([0, 0, 0], [0, 2, 1])
        """
        seq = np.full(self.exchanged_rows, -1, np.int64)
        pos = np.full(self.exchanged_rows, -1, np.int64)
        for s in self.sequences:
            seq[s.keys] = s.seq
            pos[s.keys] = np.arange(s.length)
        return seq, pos


@dataclass(frozen=True)
class ChunkPassSchedule:
    """One pass of a chunked sequence on this GPU: chunk ``index`` of ``count``, run over the
    group of CP ranks ``first .. first + size`` after the rest of the micro-batch, attending
    to the K/V state of the chunks before it and to itself.

    ``offset``, ``tokens``: this GPU's rows of the chunk in the micro-batch buffer (its zigzag
    pieces on a group, the whole chunk on one GPU; ``tokens`` may be 0). ``ring`` is the pass's
    K/V exchange: member ``j`` sends its rows of chunks ``0 .. index`` (each chunk's rows of
    the member, padding included, in chunk order: ``member_rows[j]`` in all), and its one
    ``RingSequence`` is the prefix up to the chunk's end, ``keys[p]`` the exchanged row of
    position ``p``, ``chunks`` this GPU's query pieces (rows from the pass's first row).
    ``state_rows``: this GPU's rows of each chunk ``0 .. index``. ``recompute``: whether the
    pass is one of the first ``count - K`` (``chunk_keep``), whose activations are dropped
    after its forward and recomputed in the backward pass.

    Parameters
    ----------
    seq, index, count : int
        The sequence, the chunk and the sequence's chunk count.
    first, size : int
        The group's CP ranks.
    start, length : int
        The chunk's first position and tokens.
    offset, tokens : int
        This GPU's rows of the chunk in the micro-batch buffer.
    ring : RingSchedule
        The pass's exchange (one sequence: the prefix ``[0, start + length)``).
    state_rows : tuple of int
        This GPU's rows of chunks ``0 .. index``.
    recompute : bool
        Whether its activations are recomputed in the backward pass.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch.attention import attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
    ...                         chunk_size=4).plan([10])
    >>> p = attention_schedule(plan, 0, 0, 0).passes[2]     # chunk 2 of 3: positions 8, 9
    >>> (p.index, p.count, p.start, p.length, p.offset, p.tokens, p.state_rows, p.recompute)
    (2, 3, 8, 2, 8, 2, (4, 4, 2), False)
    >>> prefix = p.ring.sequences[0]                        # attends to positions 0 .. 9
    >>> prefix.length, [(c.row, c.rows, c.position) for c in prefix.chunks]
    (10, [(0, 2, 8)])
    """

    seq: int
    index: int
    count: int
    first: int
    size: int
    start: int
    length: int
    offset: int
    tokens: int
    ring: RingSchedule
    state_rows: tuple[int, ...]
    recompute: bool


@dataclass(frozen=True)
class AttentionSchedule:
    """What one GPU runs for one micro-batch: its local slots and its K/V exchanges.

    Made by ``attention_schedule``: small, picklable, and identical on every rank that made it
    from the same plan. ``fingerprint`` names the plan, the DP rank and the micro-batch (the
    same on every CP rank of that micro-batch); ring peers compare it, mixed with the ring's
    own shape (``ring_fingerprint``), on their first exchange, so K/V from another plan or
    micro-batch is refused.
    ``tokens`` is the row count of the buffer's local and sharded groups, which one
    ``CpAttention`` runs (``Layout.tokens`` without chunks, or 1 for the one padding row that
    ``skrull.hf`` gives a GPU without such tokens); ``passes`` are the chunk passes of the
    chunked group that follows them (``ChunkPassSchedule``), in the order they run.

    Parameters
    ----------
    dp_rank, micro_batch, cp_rank : int
        The GPU and micro-batch.
    tokens : int
        Rows of the buffer.
    local : tuple of LocalSlot
        The local sequences.
    rings : tuple of RingSchedule
        The K/V exchanges, in the order every member runs them.
    fingerprint : int
        Names the plan, the DP rank and the micro-batch.
    passes : tuple of ChunkPassSchedule, optional
        The chunk passes (chunking on), after the local and sharded groups.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch.attention import attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=16, policy="packed",
    ...                         shard_padding="zigzag").plan([8])
    >>> s = attention_schedule(plan, 0, 0, 0)
    >>> s.tokens, [(c.row, c.rows, c.position) for c in s.rings[0].sequences[0].chunks]
    (4, [(0, 2, 0), (2, 2, 6)])
    >>> s.rings[0].member_rows, s.rings[0].sequences[0].keys.tolist()
    ((4, 4), [0, 1, 4, 5, 6, 7, 2, 3])
    """

    dp_rank: int
    micro_batch: int
    cp_rank: int
    tokens: int
    local: tuple[LocalSlot, ...]
    rings: tuple[RingSchedule, ...]
    fingerprint: int
    passes: tuple[ChunkPassSchedule, ...] = ()

    @property
    def main_needed(self) -> bool:
        """Whether the local and sharded groups run (a pass of their own, before the chunk
        passes): they hold a row, a ring, or there is no chunk pass at all."""
        return bool(self.tokens or self.rings or not self.passes)


def attention_schedule(plan: Plan, dp_rank: int, micro_batch: int, cp_rank: int, *,
                       whole_group: bool = False, empty_row: bool = False) -> AttentionSchedule:
    """The attention schedule of GPU ``(dp_rank, micro_batch, cp_rank)``, from the plan alone.

    Parameters
    ----------
    plan : Plan
        The global batch's plan (the same on every rank).
    dp_rank, micro_batch, cp_rank : int
        The GPU and micro-batch (as ``Plan.layout``).
    whole_group : bool, optional
        False (default): one exchange per ring (``Layout.rings``: the whole CP group's and
        each sub-group's), over that ring's process group. True: one exchange of every
        sharded row over the whole CP group, which every CP rank then joins for every
        micro-batch.
    empty_row : bool, optional
        True when a GPU without local or sharded tokens runs one padding row in front of its
        buffer (``skrull.hf``'s buffers): that row becomes a local slot and the rings and
        chunk passes start after it.

    Returns
    -------
    AttentionSchedule
        This GPU's slots and exchanges.

    Raises
    ------
    ValueError
        A ring (or a chunk pass's group) whose members' rows do not hold every position of a
        sequence exactly once, a chunk that reaches past its sequence's end, or ring members
        that list different sequences.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch.attention import attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=16, policy="skrull").plan([2, 20])
    >>> s = attention_schedule(plan, 0, 0, 1)
    >>> s.tokens, [(r.first, r.size, r.member_rows) for r in s.rings]
    (10, [(0, 2, (10, 10))])
    """
    builder = _Builder(plan, dp_rank, micro_batch)
    mine = builder.layout(cp_rank)
    main = mine.local_tokens + mine.sharded_tokens
    shift = 1 if empty_row and main == 0 else 0
    if shift:
        local: tuple[LocalSlot, ...] = (LocalSlot(0, 1, 0),)
    else:
        cu, cu_pad = mine.local_cu_seqlens.tolist(), mine.local_cu_seqlens_padded.tolist()
        local = tuple(LocalSlot(a, b, r1 - r0) for a, b, r0, r1
                      in zip(cu_pad[:-1], cu_pad[1:], cu[:-1], cu[1:]) if b > a)
    if whole_group:
        rings = builder.whole_group(cp_rank, shift)
    else:
        rings = tuple(builder.ring(cp_rank, first, size, shift)
                      for first, size, _, _ in mine.rings.tolist())
    h = hashlib.blake2b(plan.digest().encode(), digest_size=8)
    h.update(np.asarray([dp_rank, micro_batch, int(whole_group)], np.int64).tobytes())
    return AttentionSchedule(dp_rank, micro_batch, cp_rank, main + shift, local, rings,
                             int.from_bytes(h.digest(), "little", signed=True),
                             builder.passes(cp_rank, shift))


def ring_fingerprint(fingerprint: int, ring: RingSchedule, extra: tuple[int, ...] = ()) -> int:
    """``fingerprint`` mixed with ``ring``'s CP ranks and rows per member (and ``extra``: a
    chunk pass's sequence and chunk): what every member of the ring tags its first exchange
    with."""
    h = hashlib.blake2b(int(fingerprint).to_bytes(8, "little", signed=True), digest_size=8)
    h.update(np.asarray([ring.first, ring.size, *ring.member_rows, *extra],
                        np.int64).tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


class _Builder:
    """Peer layouts of one micro-batch (each filled once) and the exchanges built on them."""

    def __init__(self, plan: Plan, dp_rank: int, micro_batch: int) -> None:
        self.plan, self.dp_rank, self.micro_batch = plan, dp_rank, micro_batch
        self.lengths = plan.lengths
        self.cache: dict[int, Layout] = {}

    def layout(self, cp_rank: int) -> Layout:
        if cp_rank not in self.cache:
            self.cache[cp_rank] = self.plan.layout(self.dp_rank, self.micro_batch, cp_rank)
        return self.cache[cp_rank]

    def _blocks(self, first: int, size: int) -> list[tuple[int, np.ndarray]]:
        """Each member's (block start in its buffer, spans) of the ring ``(first, size)``."""
        out = []
        for rank in range(first, first + size):
            ring = [r for r in self.layout(rank).ring_views()
                    if (r.first, r.size) == (first, size)]
            if len(ring) != 1:
                raise ValueError(f"CP rank {rank} does not list ring ({first}, {size}) of "
                                 f"micro-batch {self.micro_batch} exactly once")
            out.append((ring[0].start, ring[0].spans))
        return out

    def ring(self, cp_rank: int, first: int, size: int, shift: int) -> RingSchedule:
        blocks = self._blocks(first, size)
        rows = [int(s["len"].sum() + s["pad"].sum()) for _, s in blocks]
        return self._exchange(cp_rank, first, size, blocks, rows, shift, same_sequences=True)

    def whole_group(self, cp_rank: int, shift: int) -> tuple[RingSchedule, ...]:
        cp = self.plan.config.cp
        if not any(len(self.layout(r).rings) for r in range(cp)):
            return ()
        blocks = []
        for r in range(cp):
            lay = self.layout(r)
            sharded = lay.spans[lay.local_seqs:lay.local_seqs + 2 * lay.sharded_seqs]
            blocks.append((lay.local_tokens, sharded))
        rows = [self.layout(r).sharded_tokens for r in range(cp)]
        return (self._exchange(cp_rank, 0, cp, blocks, rows, shift, same_sequences=False),)

    def _exchange(self, cp_rank: int, first: int, size: int,
                  blocks: list[tuple[int, np.ndarray]], rows: list[int], shift: int,
                  same_sequences: bool) -> RingSchedule:
        """The exchange of ``blocks`` (each member's block start and spans); with
        ``same_sequences`` every member must list the same sequences in the same order (a
        ring), else each sequence is collected from whichever members hold it."""
        base = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        keys: dict[int, np.ndarray] = {}
        for j, (start, spans) in enumerate(blocks):
            for seq, _chunk, offset, pos, length, _pad in spans.tolist():
                if seq not in keys:
                    keys[seq] = np.full(int(self.lengths[seq]), -1, np.int64)
                k = keys[seq]
                if length and pos + length > len(k):
                    raise ValueError(
                        f"sequence {seq} ({len(k)} tokens): CP rank {first + j} holds "
                        f"positions {pos}..{pos + length}, past the sequence's end (a "
                        "sharded chunk that crosses a sequence boundary)")
                if (k[pos:pos + length] >= 0).any():
                    raise ValueError(f"sequence {seq}: positions {pos}..{pos + length} are "
                                     "held twice in its ring")
                k[pos:pos + length] = base[j] + offset - start + np.arange(length)
        order = [int(s) for s in dict.fromkeys(blocks[cp_rank - first][1]["seq"].tolist())]
        for j, (_, spans) in enumerate(blocks if same_sequences else ()):
            if list(dict.fromkeys(spans["seq"].tolist())) != order:
                raise ValueError(f"CP rank {first + j} lists other sequences in ring "
                                 f"({first}, {size}) than CP rank {cp_rank}")
        sequences = []
        my_spans = blocks[cp_rank - first][1]
        for seq in order:
            k = keys[seq]
            if (k < 0).any():
                missing = int(np.flatnonzero(k < 0)[0])
                raise ValueError(f"sequence {seq}: position {missing} is held by no CP rank "
                                 f"of ring ({first}, {size})")
            chunks = tuple(QueryChunk(offset + shift, length, pos, pad)
                           for s, _c, offset, pos, length, pad in my_spans.tolist()
                           if s == seq and length + pad > 0)
            sequences.append(RingSequence(seq, len(k), k, chunks))
        starts = tuple(start + shift * (first + j == cp_rank) for j, (start, _) in
                       enumerate(blocks))
        me = cp_rank - first
        return RingSchedule(first, size, starts[me], starts[me] + rows[me], starts,
                            tuple(rows), tuple(sequences))

    def passes(self, cp_rank: int, shift: int) -> tuple[ChunkPassSchedule, ...]:
        """This GPU's chunk passes, each with the exchange of its group: every member's rows
        of the chunks up to it (from the members' own layouts)."""
        out = []
        mine = self.layout(cp_rank)
        for p in mine.chunk_passes.tolist():
            seq, index, count, first, size, start, length = p[:7]
            span, spans, offset, tokens = p[8:12]
            ends = start + length
            members = [_member_passes(self.layout(r), seq) for r in range(first, first + size)]
            for j, passes in enumerate(members):
                if passes["index"].tolist() != list(range(count)):
                    raise ValueError(f"sequence {seq}: CP rank {first + j} lists chunks "
                                     f"{passes['index'].tolist()} of its {count}")
            rows = [int(m["tokens"][:index + 1].sum()) for m in members]
            base = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
            keys = np.full(ends, -1, np.int64)
            for j, passes in enumerate(members):
                lay = self.layout(first + j)
                at = base[j]
                for q in passes[:index + 1].tolist():
                    for _s, _c, off, pos, n, _pad in lay.spans[q[8]:q[8] + q[9]].tolist():
                        if n and pos + n > ends:
                            raise ValueError(
                                f"sequence {seq}: CP rank {first + j} holds positions "
                                f"{pos}..{pos + n} in chunk {q[1]}, past the chunk's end "
                                f"{ends}")
                        if (keys[pos:pos + n] >= 0).any():
                            raise ValueError(f"sequence {seq}: positions {pos}..{pos + n} are "
                                             f"held twice in the group of chunk {index}")
                        keys[pos:pos + n] = at + off - q[10] + np.arange(n)
                    at += q[11]
            if (keys < 0).any():
                missing = int(np.flatnonzero(keys < 0)[0])
                raise ValueError(f"sequence {seq}: position {missing} is held by no CP rank of "
                                 f"the group of chunk {index} (CP ranks {first}.."
                                 f"{first + size})")
            chunks = tuple(QueryChunk(off - offset, n, pos, pad) for _s, _c, off, pos, n, pad
                           in mine.spans[span:span + spans].tolist() if n + pad > 0)
            ring = RingSchedule(first, size, 0, tokens, (0,) * size, tuple(rows),
                                (RingSequence(seq, ends, keys, chunks),))
            state = tuple(int(t) for t in _member_passes(mine, seq)["tokens"][:index + 1])
            out.append(ChunkPassSchedule(seq, index, count, first, size, start, length,
                                         offset + shift, tokens, ring, state,
                                         index < count - self.plan.config.chunk_keep))
        return tuple(out)


def _member_passes(lay: Layout, seq: int) -> np.ndarray:
    out: np.ndarray = lay.chunk_passes[lay.chunk_passes["seq"] == seq]
    return out


def local_schedule(slots: tuple[tuple[int, int], ...], tokens: int,
                   gpu: tuple[int, int, int] = (0, 0, 0)) -> AttentionSchedule:
    """The schedule of a buffer without sharded sequences: each ``(start, stop)`` slot
    attends causally within itself. Needs no plan.

    Parameters
    ----------
    slots : tuple of (int, int)
        Buffer rows of each sequence, in order, tiling ``[0, tokens)``.
    tokens : int
        Rows in the buffer.
    gpu : tuple of int, optional
        ``(dp_rank, micro_batch, cp_rank)``, for messages.

    Returns
    -------
    AttentionSchedule
        No rings; ``fingerprint`` 0.

    Example
    -------
    >>> from skrull.torch.attention import local_schedule
    >>> [(s.start, s.stop) for s in local_schedule(((0, 3), (3, 5)), 5).local]
    [(0, 3), (3, 5)]
    """
    local = tuple(LocalSlot(a, b, b - a) for a, b in slots if b > a)
    return AttentionSchedule(*gpu, tokens, local, (), 0)
