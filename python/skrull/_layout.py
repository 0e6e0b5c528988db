"""One GPU's execution layout (``skrull_layout_sizes`` + ``skrull_layout_fill``).

``fill`` is the one place that builds ``skrull_layout_buffers``: a new output array of the C ABI
is one more ``_array`` line there and one more attribute on ``Layout``.
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


def _array(n: int, dtype: np.dtype | type) -> tuple[np.ndarray, int]:
    a = np.empty(n, dtype)
    return a, a.ctypes.data


def fill(plan: Plan, dp_rank: int, micro_batch: int, cp_rank: int,
         workspace: np.ndarray) -> Layout:
    """Sizes (``skrull_layout_sizes``), allocates exactly that, and fills one GPU's layout."""
    gpu = _ffi.skrull_gpu(dp_rank, micro_batch, cp_rank)
    cfg, cplan, lengths = plan._c_args()
    ws, ws_len = workspace.ctypes.data, workspace.nbytes
    cap = _ffi.skrull_layout_capacity()
    check(_ffi.lib.skrull_layout_sizes(cfg, lengths.ctypes.data, lengths.size, cplan, gpu, ws,
                                       ws_len, ctypes.byref(cap)), f"GPU {tuple(gpu_of(gpu))}")
    spans, p_spans = _array(cap.spans, SPAN_DTYPE)
    local_cu, p_local = _array(cap.local_cu_seqlens, np.int32)
    sh_cu, p_sh = _array(cap.sharded_cu_seqlens, np.int32)
    sh_pad, p_pad = _array(cap.sharded_cu_seqlens, np.int32)
    rank_cu, p_rank = _array(cap.sharded_cu_seqlens, np.int32)
    positions, p_pos = _array(cap.positions, np.int32)
    rec = _ffi.skrull_layout()
    P = ctypes.cast
    out = _ffi.skrull_layout_buffers(
        struct_size=ctypes.sizeof(_ffi.skrull_layout_buffers),
        spans=P(p_spans, ctypes.POINTER(_ffi.skrull_span)), spans_len=cap.spans,
        local_cu_seqlens=P(p_local, ctypes.POINTER(ctypes.c_int32)),
        local_cu_seqlens_len=cap.local_cu_seqlens,
        sharded_cu_seqlens=P(p_sh, ctypes.POINTER(ctypes.c_int32)),
        sharded_cu_seqlens_len=cap.sharded_cu_seqlens,
        sharded_cu_seqlens_padded=P(p_pad, ctypes.POINTER(ctypes.c_int32)),
        sharded_cu_seqlens_padded_len=cap.sharded_cu_seqlens,
        rank_cu_seqlens=P(p_rank, ctypes.POINTER(ctypes.c_int32)),
        rank_cu_seqlens_len=cap.sharded_cu_seqlens,
        positions=P(p_pos, ctypes.POINTER(ctypes.c_int32)), positions_len=cap.positions,
        layout=ctypes.pointer(rec))
    check(_ffi.lib.skrull_layout_fill(cfg, lengths.ctypes.data, lengths.size, cplan, gpu, ws,
                                      ws_len, ctypes.byref(out)))
    counts = {name: getattr(rec, name) for name in _COUNTS}
    return Layout((rec.dp_rank, rec.micro_batch, rec.cp_rank), counts, spans[:rec.spans],
                  local_cu[:rec.local_seqs + 1], sh_cu[:rec.sharded_seqs + 1],
                  sh_pad[:rec.sharded_seqs + 1], rank_cu[:rec.sharded_seqs + 1],
                  positions[:rec.tokens])


def gpu_of(gpu: _ffi.skrull_gpu) -> tuple[int, int, int]:
    """(dp_rank, micro_batch, cp_rank) of a ``skrull_gpu``."""
    return gpu.dp_rank, gpu.micro_batch, gpu.cp_rank
