"""One GPU's execution layout (``skrull_layout_sizes`` + ``skrull_layout_fill``).

``fill`` is the one place that builds ``skrull_layout_buffers``: a new output array of the C ABI
is one more row of ``_ARRAYS`` and one more argument of ``Layout``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from . import _ffi
from ._errors import Status, from_info


class Plan(Protocol):
    """What the layout calls read of a plan (``skrull.Plan``): the C arguments of the layout
    functions, the details struct they write, and the arrays that bound one GPU's buffers.
    The layout is built from these arrays; this module never imports the plan's."""

    _c_error: _ffi.skrull_error_info
    rank_tokens: np.ndarray

    @property
    def _c_args(self) -> tuple[Any, int, int, Any]: ...

    @property
    def cp_first(self) -> np.ndarray: ...

    @property
    def cp_size(self) -> np.ndarray: ...

    @property
    def cp_rank(self) -> np.ndarray: ...

    def _table_index(self, dp_rank: int, micro_batch: int) -> int | None: ...

    def members_of(self, dp_rank: int, micro_batch: int) -> np.ndarray: ...

#: numpy dtype of ``skrull_span``: seq, chunk (-1 = whole local sequence; in the chunked group
#: -2 = a whole chunk on one GPU, else the zigzag piece of the chunk), offset, start, len, pad.
SPAN_DTYPE = np.dtype(_ffi.skrull_span)
#: numpy dtype of ``skrull_chunk_pass``: seq, index (the chunk, ``0 .. count``), count, first,
#: size (the CP ranks that run it), start, len, padded (the chunk in its sequence), span, spans
#: (this GPU's spans of it), offset, tokens (its buffer tokens on this GPU).
CHUNK_PASS_DTYPE = np.dtype(_ffi.skrull_chunk_pass)
#: numpy dtype of ``skrull_layout_ring``: first, size (its CP ranks), offset, seqs (its block of
#: the sharded group).
RING_DTYPE = np.dtype(_ffi.skrull_layout_ring)

# The output arrays of skrull_layout_buffers: (field, dtype, skrull_layout_capacity field).
# A new array of the C ABI is one more row here and one more Layout attribute.
_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)
_ARRAYS = (("spans", SPAN_DTYPE, "spans"), ("local_cu_seqlens", _I32, "local_cu_seqlens"),
           ("sharded_cu_seqlens", _I32, "sharded_cu_seqlens"),
           ("sharded_cu_seqlens_padded", _I32, "sharded_cu_seqlens"),
           ("rank_cu_seqlens", _I32, "sharded_cu_seqlens"), ("positions", _I32, "positions"),
           ("gather_index", _I64, "positions"),
           ("local_cu_seqlens_padded", _I32, "local_cu_seqlens"))
_LAYOUT_BUFFERS_SIZE = ctypes.sizeof(_ffi.skrull_layout_buffers)
_COUNTS = ("micro_batch_global", "local_seqs", "sharded_seqs", "local_tokens", "sharded_tokens",
           "tokens", "pad_tokens", "charged_tokens", "local_max_seqlen", "sharded_max_seqlen",
           "sharded_max_seqlen_padded", "rank_max_seqlen", "loss_tokens", "micro_batch_tokens",
           "global_tokens")


@dataclass(frozen=True)
class Ring:
    """One CP attention call of a GPU's sharded group: the sequences sharded over CP ranks
    ``first .. first + size`` (the whole group, or an aligned sub-group), which occupy buffer
    tokens ``[start, stop)``. The ``cu_seqlens`` arrays are this ring's slices of the layout's,
    rebased to start at 0, as a varlen CP kernel over the ring's process group takes them;
    ``spans`` are the ring's ``2 * seqs`` spans. ``repr`` shows the scalars only.

    Example
    -------
    >>> import skrull
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 100])
    >>> plan.layout(0, 0, 0).ring_views()
    [Ring(first=0, size=2, seqs=1, start=0, stop=50, max_seqlen=100)]
    """

    first: int
    size: int
    seqs: int
    start: int
    stop: int
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    rank_cu_seqlens: np.ndarray
    max_seqlen: int
    max_seqlen_padded: int
    rank_max_seqlen: int
    spans: np.ndarray

    def __repr__(self) -> str:
        return (f"Ring(first={self.first}, size={self.size}, seqs={self.seqs}, "
                f"start={self.start}, stop={self.stop}, max_seqlen={self.max_seqlen})")


class Layout:
    """What one GPU (DP rank, micro-batch, CP rank) feeds its kernels (``skrull_layout``).

    The GPU buffer holds the local group (``[0, local_tokens)``: whole sequences), the
    sharded group (the two zigzag chunks of every sharded sequence, ``sharded_tokens`` from
    ``local_tokens``), then, with chunking, the chunked group (``chunked_tokens``, up to
    ``tokens``): the chunks of every chunked sequence whose group holds this GPU, listed pass
    by pass in ``chunk_passes`` (``CHUNK_PASS_DTYPE``, in the order the passes run).
    Arrays: ``spans`` (``SPAN_DTYPE``), the int32 ``local_cu_seqlens`` (real lengths),
    ``local_cu_seqlens_padded`` (buffer offsets; equal unless ``pad_local``),
    ``sharded_cu_seqlens``, ``sharded_cu_seqlens_padded``, ``rank_cu_seqlens`` and
    ``positions`` (one per token), and the int64 ``gather_index`` (one per token: its offset in
    the DP rank's sequences concatenated in plan order, ``Plan.dp_sequences``; -1 on padding).
    Counts and maxima are the ``skrull_layout`` fields of the same name; ``token_seq``,
    ``is_real`` and ``loss_weights`` are derived from the spans. ``rings`` (``RING_DTYPE``) lists
    the CP groups the sharded group runs over: the whole group first, then sub-groups, largest
    first; ``ring_views()`` gives each ring's slices. ``chunked_seqs``, ``chunked_tokens`` and
    ``chunk_max_tokens`` count the chunked group. An empty lockstep micro-batch
    has ``micro_batch_global == skrull.NO_MICRO_BATCH`` and no token. See docs/layout.md.

    Example
    -------
    >>> import skrull
    >>> plan = skrull.Scheduler(dp=1, cp=4, bucket_tokens=4096, policy="skrull").plan(
    ...     [1000, 900, 800, 12000])
    >>> lay = plan.layout(0, 0, 0)      # CP rank 0: sequence 2 whole, its share of sequence 3
    >>> lay.local_tokens, lay.sharded_tokens, lay.local_cu_seqlens.tolist()
    (800, 3000, [0, 800])
    """

    dp_rank: int
    micro_batch: int
    cp_rank: int
    micro_batch_global: int
    local_seqs: int
    sharded_seqs: int
    local_tokens: int
    sharded_tokens: int
    tokens: int
    pad_tokens: int
    charged_tokens: int
    local_max_seqlen: int
    sharded_max_seqlen: int
    sharded_max_seqlen_padded: int
    rank_max_seqlen: int
    loss_tokens: int
    micro_batch_tokens: int
    global_tokens: int

    def __init__(self, gpu: tuple[int, int, int], counts: dict[str, int], spans: np.ndarray,
                 local_cu_seqlens: np.ndarray, sharded_cu_seqlens: np.ndarray,
                 sharded_cu_seqlens_padded: np.ndarray, rank_cu_seqlens: np.ndarray,
                 positions: np.ndarray, gather_index: np.ndarray,
                 local_cu_seqlens_padded: np.ndarray, rings: np.ndarray,
                 chunk_passes: np.ndarray | None = None) -> None:
        self.dp_rank, self.micro_batch, self.cp_rank = gpu
        for name in _COUNTS:
            setattr(self, name, int(counts.get(name, 0)))
        self.spans = spans
        self.local_cu_seqlens = local_cu_seqlens
        self.sharded_cu_seqlens = sharded_cu_seqlens
        self.sharded_cu_seqlens_padded = sharded_cu_seqlens_padded
        self.rank_cu_seqlens = rank_cu_seqlens
        self.positions = positions  # read-only arrays: fill makes them so
        self.gather_index = gather_index
        self.local_cu_seqlens_padded = local_cu_seqlens_padded
        self.rings = rings
        if chunk_passes is None:
            chunk_passes = np.zeros(0, CHUNK_PASS_DTYPE)
            chunk_passes.flags.writeable = False
        self.chunk_passes = chunk_passes

    @property
    def chunked_seqs(self) -> int:
        """Chunked sequences whose group holds this GPU (0 without chunking)."""
        return int(np.unique(self.chunk_passes["seq"]).size)

    @property
    def chunked_tokens(self) -> int:
        """Tokens of the chunked group, padding included: buffer offsets from
        ``local_tokens + sharded_tokens`` to ``tokens``."""
        return int(self.chunk_passes["tokens"].sum())

    @property
    def chunk_max_tokens(self) -> int:
        """Most tokens of one chunk pass on this GPU, padding included (0 without one)."""
        return int(self.chunk_passes["tokens"].max(initial=0))

    @property
    def is_empty_micro_batch(self) -> bool:
        """True for an empty lockstep micro-batch: one the DP rank runs only to keep step with
        the others (no token, but it still joins every collective)."""
        return self.micro_batch_global == _ffi.NO_MICRO_BATCH

    #: The name older code used for ``is_empty_micro_batch``.
    is_padding_micro_batch = is_empty_micro_batch

    def ring_views(self) -> list[Ring]:
        """The sharded group ring by ring, in ``rings`` order.

        Returns
        -------
        list of Ring
            One per CP attention call, the whole group first, then sub-groups, largest first
            (every GPU of a ring lists it, in the same order, so their collectives pair up).

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 100])
        >>> [(r.first, r.size, r.seqs) for r in plan.layout(0, 0, 1).ring_views()]
        [(0, 2, 1)]
        """
        out = []
        for first, size, offset, seqs in self.rings.tolist():
            lo, hi = offset, offset + seqs

            def part(a: np.ndarray) -> np.ndarray:
                out: np.ndarray = a[lo:hi + 1] - a[lo]
                return out
            cu, cu_padded, rank_cu = (part(self.sharded_cu_seqlens),
                                      part(self.sharded_cu_seqlens_padded),
                                      part(self.rank_cu_seqlens))
            out.append(Ring(first, size, seqs, self.local_tokens + int(self.rank_cu_seqlens[lo]),
                            self.local_tokens + int(self.rank_cu_seqlens[hi]), cu, cu_padded,
                            rank_cu, int(np.diff(cu).max(initial=0)),
                            int(np.diff(cu_padded).max(initial=0)),
                            int(np.diff(rank_cu).max(initial=0)),
                            self.spans[self.local_seqs + 2 * lo:self.local_seqs + 2 * hi]))
        return out

    @cached_property
    def _span_of_token(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.spans)), self.spans["len"] + self.spans["pad"])

    @cached_property
    def token_seq(self) -> np.ndarray:
        """Per token: the sequence index (into the plan's lengths), -1 on padding."""
        seq: np.ndarray = self.spans["seq"].astype(np.int32)[self._span_of_token]
        seq[~self.is_real] = -1
        return seq

    @cached_property
    def is_real(self) -> np.ndarray:
        """Per token: True for a real token, False for zigzag padding."""
        s = self._span_of_token
        within = np.arange(self.tokens, dtype=np.int64) - self.spans["offset"][s]
        real: np.ndarray = within < self.spans["len"][s]
        return real

    @cached_property
    def loss_weights(self) -> np.ndarray:
        """Per token: ``1 / global_tokens`` on real tokens, 0 on padding (float64)."""
        return np.where(self.is_real, 1.0 / max(self.global_tokens, 1), 0.0)

    def __repr__(self) -> str:
        chunked = (f" + chunked {self.chunked_tokens} ({self.chunk_passes.size} passes)"
                   if self.chunk_passes.size else "")
        return (f"Layout(dp_rank={self.dp_rank}, micro_batch={self.micro_batch}, "
                f"cp_rank={self.cp_rank}, tokens={self.tokens} = local {self.local_tokens} + "
                f"sharded {self.sharded_tokens}{chunked} (padding {self.pad_tokens}), "
                f"local_seqs={self.local_seqs}, sharded_seqs={self.sharded_seqs})")


def fill(plan: Plan, dp_rank: int, micro_batch: int, cp_rank: int,
         workspace: tuple[int, int]) -> Layout:
    """Sizes (``skrull_layout_sizes``), allocates exactly that, and fills one GPU's layout.
    ``workspace`` is (address, bytes) of at least ``skrull_layout_sizes_max().workspace_bytes``."""
    args = (*plan._c_args, _ffi.skrull_gpu(dp_rank, micro_batch, cp_rank), *workspace)
    out = _Out(_sizes(plan, dp_rank, micro_batch, cp_rank, workspace))
    status = _ffi.lib.skrull_layout_fill(*args, ctypes.byref(out.buffers))
    if status != Status.OK:
        raise from_info(plan._c_error, status, f"GPU ({dp_rank}, {micro_batch}, {cp_rank})")
    return out.layout((dp_rank, micro_batch, cp_rank))


def fill_rank(plan: Plan, dp_rank: int, cp_rank: int, micro_batches: int,
              workspace: tuple[int, int]) -> list[Layout]:
    """The layouts of micro-batches ``0 .. micro_batches`` of one GPU in one
    ``skrull_layout_fill_many`` call (the plan is validated once, not once per micro-batch).
    Buffers are sized from the plan itself (a GPU holds ``rank_tokens`` tokens and at most
    one span per local and two per sharded sequence of its micro-batch) and trimmed to the
    layout's counts afterwards."""
    outs = [_Out(_bounds(plan, dp_rank, m, cp_rank, workspace)) for m in range(micro_batches)]
    gpus = (_ffi.skrull_gpu * micro_batches)(
        *[_ffi.skrull_gpu(dp_rank, m, cp_rank) for m in range(micro_batches)])
    ptrs = (ctypes.c_void_p * micro_batches)(*[ctypes.addressof(o.buffers) for o in outs])
    plan._c_error.status = 0
    status = _ffi.lib.skrull_layout_fill_many(*plan._c_args, gpus, micro_batches, *workspace,
                                              ptrs)
    if status != Status.OK:
        raise from_info(plan._c_error, status, f"GPU ({dp_rank}, *, {cp_rank})")
    return [o.layout((dp_rank, m, cp_rank)) for m, o in enumerate(outs)]


def _sizes(plan: Plan, dp_rank: int, micro_batch: int, cp_rank: int,
           workspace: tuple[int, int]) -> _ffi.skrull_layout_capacity:
    """The exact capacities of one GPU's layout (``skrull_layout_sizes``)."""
    cap = _ffi.skrull_layout_capacity()
    plan._c_error.status = 0  # so that stale details are never reported
    status = _ffi.lib.skrull_layout_sizes(
        *plan._c_args, _ffi.skrull_gpu(dp_rank, micro_batch, cp_rank), *workspace,
        ctypes.byref(cap))
    if status != Status.OK:
        raise from_info(plan._c_error, status, f"GPU ({dp_rank}, {micro_batch}, {cp_rank})")
    return cap


def _bounds(plan: Plan, dp_rank: int, micro_batch: int, cp_rank: int,
            workspace: tuple[int, int]) -> _ffi.skrull_layout_capacity:
    """Capacities that hold one GPU's layout, from the plan: its tokens (``rank_tokens``,
    padding included), one span per local and two per sharded sequence that it holds. A GPU
    that runs a chunked sequence holds more than the peak ``rank_tokens`` charges (every chunk,
    not only the ones alive at once): its capacities come from ``skrull_layout_sizes``."""
    g = plan._table_index(dp_rank, micro_batch)
    if g is None:  # an empty micro-batch (or none): no span, every cu_seqlens array {0}
        return _ffi.skrull_layout_capacity(0, 1, 1, 0, 0)
    seqs = plan.members_of(dp_rank, micro_batch)
    first, size, rank = plan.cp_first[seqs], plan.cp_size[seqs], plan.cp_rank[seqs]
    here = (first <= cp_rank) & (cp_rank < first + size)
    if (here & (rank == _ffi.CHUNKED)).any():
        return _sizes(plan, dp_rank, micro_batch, cp_rank, workspace)
    local = int((rank == cp_rank).sum())
    sharded = int((here & (rank == _ffi.SHARDED)).sum())
    return _ffi.skrull_layout_capacity(local + 2 * sharded, local + 1, sharded + 1,
                                       int(plan.rank_tokens[g, cp_rank]), 0)


class _Out:
    """One allocation holding every output array of one layout (each at an 8-byte-aligned
    offset), the ``skrull_layout_buffers`` that points into it, and the record, rings and
    chunk passes (at most one per span)."""

    def __init__(self, cap: _ffi.skrull_layout_capacity) -> None:
        self.sizes = [(name, t, getattr(cap, c)) for name, t, c in _ARRAYS]
        self.offsets, end = [], 0
        for _, t, k in self.sizes:
            self.offsets.append(end)
            end += -(-t.itemsize * k // 8) * 8
        self.block = np.empty(end, np.uint8)
        base = _ffi.address(self.block)
        self.rec = _ffi.skrull_layout()
        self.rings = np.zeros(_ffi.MAX_RINGS, RING_DTYPE)
        self.count = ctypes.c_uint32(0)
        self.passes = np.zeros(max(cap.spans, 1), CHUNK_PASS_DTYPE)
        self.pass_count = ctypes.c_uint32(0)
        fields = {"struct_size": _LAYOUT_BUFFERS_SIZE, "layout": ctypes.addressof(self.rec),
                  "rings": _ffi.address(self.rings), "rings_len": len(self.rings),
                  "rings_count": ctypes.addressof(self.count),
                  "chunk_passes": _ffi.address(self.passes), "chunk_passes_len": cap.spans,
                  "chunk_passes_count": ctypes.addressof(self.pass_count)}
        for (name, _, k), o in zip(self.sizes, self.offsets):
            fields[name], fields[name + "_len"] = base + o, k
        self.buffers = _ffi.skrull_layout_buffers(**fields)

    def layout(self, gpu: tuple[int, int, int]) -> Layout:
        """The filled layout, its arrays trimmed to the record's counts (read-only views)."""
        r = self.rec
        exact = {"spans": r.spans, "local_cu_seqlens": r.local_seqs + 1,
                 "sharded_cu_seqlens": r.sharded_seqs + 1, "positions": r.tokens}
        self.block.flags.writeable = False  # so are the views
        arrays = {name: np.frombuffer(self.block, t, min(exact[c], k), o)
                  for ((name, t, k), o), (_, _, c) in zip(zip(self.sizes, self.offsets),
                                                          _ARRAYS)}
        arrays["rings"] = self.rings[:self.count.value].copy()
        arrays["rings"].flags.writeable = False
        arrays["chunk_passes"] = self.passes[:self.pass_count.value].copy()
        arrays["chunk_passes"].flags.writeable = False
        return Layout(gpu, {n: getattr(r, n) for n in _COUNTS}, **arrays)
