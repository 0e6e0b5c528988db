"""One GPU's execution layout (``skrull_layout_sizes`` + ``skrull_layout_fill``).

``fill`` is the one place that builds ``skrull_layout_buffers``: a new output array of the C ABI
is one more row of ``_ARRAYS`` and one more argument of ``Layout``.
"""

from __future__ import annotations

import ctypes
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from . import _ffi
from ._errors import check

if TYPE_CHECKING:
    from ._plan import Plan

#: numpy dtype of ``skrull_span``: seq, chunk (-1 = whole local sequence), offset, start, len, pad.
SPAN_DTYPE = np.dtype(_ffi.skrull_span)

# The output arrays of skrull_layout_buffers: (field, dtype, skrull_layout_capacity field).
# A new array of the C ABI is one more row here and one more Layout attribute.
_ARRAYS = (("spans", SPAN_DTYPE, "spans"), ("local_cu_seqlens", np.int32, "local_cu_seqlens"),
           ("sharded_cu_seqlens", np.int32, "sharded_cu_seqlens"),
           ("sharded_cu_seqlens_padded", np.int32, "sharded_cu_seqlens"),
           ("rank_cu_seqlens", np.int32, "sharded_cu_seqlens"),
           ("positions", np.int32, "positions"))
_COUNTS = ("micro_batch_global", "local_seqs", "sharded_seqs", "local_tokens", "sharded_tokens",
           "tokens", "pad_tokens", "charged_tokens", "local_max_seqlen", "sharded_max_seqlen",
           "sharded_max_seqlen_padded", "rank_max_seqlen", "loss_tokens", "micro_batch_tokens",
           "global_tokens")


class Layout:
    """What one GPU (DP rank, micro-batch, CP rank) feeds its kernels (``skrull_layout``).

    The GPU buffer holds the local group (``[0, local_tokens)``: whole sequences) then the
    sharded group (``[local_tokens, tokens)``: the two zigzag chunks of every sharded sequence).
    Arrays: ``spans`` (``SPAN_DTYPE``), the int32 ``local_cu_seqlens``, ``sharded_cu_seqlens``,
    ``sharded_cu_seqlens_padded``, ``rank_cu_seqlens`` and ``positions`` (one per token). Counts
    and maxima are the ``skrull_layout`` fields of the same name; ``token_seq``, ``is_real`` and
    ``loss_weights`` are derived from the spans. See docs/layout.md.
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
                 positions: np.ndarray) -> None:
        self.dp_rank, self.micro_batch, self.cp_rank = gpu
        for name in _COUNTS:
            setattr(self, name, int(counts.get(name, 0)))
        self.spans = spans
        self.local_cu_seqlens = local_cu_seqlens
        self.sharded_cu_seqlens = sharded_cu_seqlens
        self.sharded_cu_seqlens_padded = sharded_cu_seqlens_padded
        self.rank_cu_seqlens = rank_cu_seqlens
        self.positions = positions
        for a in (spans, local_cu_seqlens, sharded_cu_seqlens, sharded_cu_seqlens_padded,
                  rank_cu_seqlens, positions):
            a.flags.writeable = False

    @classmethod
    def empty(cls, dp_rank: int, micro_batch: int, cp_rank: int, global_tokens: int) -> Layout:
        """The layout of a micro-batch a DP rank runs only to keep step with the others: no
        tokens, but it still joins every collective."""
        zero = np.zeros(1, np.int32)
        return cls((dp_rank, micro_batch, cp_rank), {"global_tokens": global_tokens,
                   "micro_batch_global": -1}, np.empty(0, SPAN_DTYPE), zero, zero.copy(),
                   zero.copy(), zero.copy(), np.empty(0, np.int32))

    @property
    def is_padding_micro_batch(self) -> bool:
        """True for a micro-batch added only to equalise micro-batch counts over DP."""
        return self.micro_batch_global < 0

    @cached_property
    def _span_of_token(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.spans)), self.spans["len"] + self.spans["pad"])

    @cached_property
    def token_seq(self) -> np.ndarray:
        """Per token: the sequence index (into the plan's lengths), -1 on padding."""
        seq = self.spans["seq"].astype(np.int32)[self._span_of_token]
        seq[~self.is_real] = -1
        return seq

    @cached_property
    def is_real(self) -> np.ndarray:
        """Per token: True for a real token, False for zigzag padding."""
        s = self._span_of_token
        within = np.arange(self.tokens, dtype=np.int64) - self.spans["offset"][s]
        return within < self.spans["len"][s]

    @cached_property
    def loss_weights(self) -> np.ndarray:
        """Per token: ``1 / global_tokens`` on real tokens, 0 on padding (float64)."""
        return np.where(self.is_real, 1.0 / max(self.global_tokens, 1), 0.0)

    def __repr__(self) -> str:
        return (f"Layout(dp_rank={self.dp_rank}, micro_batch={self.micro_batch}, "
                f"cp_rank={self.cp_rank}, tokens={self.tokens} = local {self.local_tokens} + "
                f"sharded {self.sharded_tokens} (padding {self.pad_tokens}), "
                f"local_seqs={self.local_seqs}, sharded_seqs={self.sharded_seqs})")


def fill(plan: Plan, dp_rank: int, micro_batch: int, cp_rank: int,
         workspace: np.ndarray) -> Layout:
    """Sizes (``skrull_layout_sizes``), allocates exactly that, and fills one GPU's layout."""
    gpu = _ffi.skrull_gpu(dp_rank, micro_batch, cp_rank)
    cfg, cplan, lengths = plan._c_args()
    args = (cfg, _ffi.address(lengths), lengths.size, cplan, gpu, _ffi.address(workspace),
            workspace.nbytes)
    cap = _ffi.skrull_layout_capacity()
    check(_ffi.lib.skrull_layout_sizes(*args, ctypes.byref(cap)),
          f"GPU ({dp_rank}, {micro_batch}, {cp_rank})")
    # One allocation holds every array, each at an 8-byte-aligned offset.
    sizes = [(name, np.dtype(t), getattr(cap, c)) for name, t, c in _ARRAYS]
    offsets = np.cumsum([0] + [-(-t.itemsize * k // 8) * 8 for _, t, k in sizes]).tolist()
    block = np.empty(offsets[-1], np.uint8)
    base = _ffi.address(block)
    rec = _ffi.skrull_layout()
    out = _ffi.skrull_layout_buffers(struct_size=ctypes.sizeof(_ffi.skrull_layout_buffers),
                                     layout=ctypes.addressof(rec))
    for (name, _, k), o in zip(sizes, offsets):
        setattr(out, name, base + o)
        setattr(out, name + "_len", k)
    check(_ffi.lib.skrull_layout_fill(*args, ctypes.byref(out)))
    # skrull_layout_sizes gave exact sizes: every array is full.
    arrays = {name: np.frombuffer(block, t, k, o) for (name, t, k), o in zip(sizes, offsets)}
    values = {name: getattr(rec, name) for name in _COUNTS}
    return Layout((dp_rank, micro_batch, cp_rank), values, **arrays)
