"""``Scheduler``: a configuration plus reusable buffers; ``plan()`` runs ``skrull_schedule``."""

from __future__ import annotations

import ctypes
import operator
import threading
from typing import Any, Iterable

import numpy as np

from . import _config, _ffi, _layout
from ._errors import Status, check, from_info, make_error
from ._plan import CP_GROUP_DTYPE, MICRO_BATCH_DTYPE, PLACEMENT_DTYPE, Plan

#: The most sequences one batch may hold (``MAX_SEQS``).
MAX_SEQUENCES = 65536
_OUT_OF_RANGE = 2**32 - 1  # stands for any length that does not fit uint32_t


class Scheduler:
    """Plans global batches for one configuration, reusing its buffers between calls.

    Arguments mirror ``skrull_config``: ``dp``, ``cp`` and ``bucket_tokens`` (BucketSize: the
    most tokens one GPU holds in one micro-batch) default to the ``model`` preset's paper layout;
    ``model`` is a preset name (``"qwen2.5-0.5b"``, ``"qwen2.5-7b"``), a ``ModelShape`` or a dict
    of its fields; ``policy`` is ``"balanced"`` (default), ``"skrull"``, ``"deepspeed"``,
    ``"packed"`` or ``"roundrobin"``; ``victim`` ``"shortest"``/``"longest"``; ``flops``
    ``"paper"``/``"megatron"`` (``balanced`` takes only ``"paper"``); ``shard_padding``
    ``"none"``/``"zigzag"``; ``max_micro_batches`` (0 = no limit); ``pad_multiple`` ``M``
    (0/1: none; else sharded sequences are padded to a multiple of ``lcm(2 cp, M)``, e.g.
    ``M = 2 cp tp`` for Megatron with sequence parallelism) and ``pad_local`` (pad local
    sequences to ``M`` too); ``lockstep`` (every DP rank runs the same number of micro-batches,
    its extra ones empty); ``cost_model`` (what ``balanced`` plans with: ``None`` for the H100
    preset, ``"h100"``/``"h200"`` or a ``CostModel``); ``subgroups`` (default on, as in the
    CLI: ``balanced`` may shard a sequence over an aligned sub-group of the CP ranks where its
    cost model says that is faster, ``Plan.cp_first``/``Plan.cp_size``; the other policies use
    the whole group only); ``fill_empty`` (with ``lockstep``: a DP rank splits its
    multi-sequence micro-batches, sharded sequences first, instead of running an empty one);
    ``micro_batches`` (a fixed count ``G`` per DP rank, 0 = none: every rank runs exactly ``G``,
    filled the same way, empty only where a rank has fewer than ``G`` sequences; a batch that
    needs more raises ``BatchError`` ``MICRO_BATCH_COUNT`` whose ``value`` is the smallest
    ``G`` that fits; Hugging Face's ``gradient_accumulation_steps``). Scheduler and Plan
    pickle (a plan sent to a DataLoader worker keeps working). Buffers are sized for
    ``max_sequences``
    and grow when a larger batch arrives. Invalid settings raise ``ConfigError`` here, with the
    C status and its details.

    One Scheduler may be shared by threads (calls are serialised); plans are independent
    copies, valid after later calls.
    """

    def __init__(self, dp: int | None = None, cp: int | None = None,
                 bucket_tokens: int | None = None, *, model: _config.ModelSpec = "qwen2.5-0.5b",
                 policy: str | int = "balanced", victim: str | int = "shortest",
                 flops: str | int = "paper", shard_padding: str | int = "none",
                 max_micro_batches: int = 0, pad_multiple: int = 1, pad_local: bool = False,
                 lockstep: bool = False, cost_model: _config.CostModel | str | None = None,
                 subgroups: bool = True, fill_empty: bool = False, micro_batches: int = 0,
                 max_sequences: int = 256) -> None:
        # self.config holds the CostModel copy self._c_config points at: both live together.
        self.config, self._c_config = _config.build(
            dp, cp, bucket_tokens, model, policy, victim, flops, shard_padding,
            max_micro_batches, pad_multiple, pad_local, lockstep, cost_model, subgroups,
            fill_empty, micro_batches)
        self._lock = threading.Lock()
        self._capacity = -1
        self._layout_capacity = -1
        first = _config._uint("max_sequences", max_sequences, Status.TOO_MANY_SEQUENCES)
        self._reserve(min(first, MAX_SEQUENCES))

    def __reduce__(self) -> tuple:
        """Pickles by configuration (a DataLoader worker or another process rebuilds the
        same Scheduler; its buffers are made anew)."""
        c = self.config
        kwargs = dict(model=c.model, policy=c.policy, victim=c.victim, flops=c.flops,
                      shard_padding=c.shard_padding, max_micro_batches=c.max_micro_batches,
                      pad_multiple=c.pad_multiple, pad_local=c.pad_local, lockstep=c.lockstep,
                      cost_model=c.cost_model, subgroups=c.subgroups, fill_empty=c.fill_empty,
                      micro_batches=c.micro_batches, max_sequences=max(self._capacity, 1))
        return (_rebuild_scheduler, (c.dp, c.cp, c.bucket_tokens, kwargs))

    def __repr__(self) -> str:
        c = self.config
        extra = "".join(f", {k}={getattr(c, k)!r}" for k in ("pad_multiple", "pad_local",
                                                            "lockstep", "fill_empty",
                                                            "micro_batches", "cost_model")
                        if getattr(c, k))
        return (f"Scheduler(dp={c.dp}, cp={c.cp}, bucket_tokens={c.bucket_tokens}, "
                f"policy={c.policy!r}, shard_padding={c.shard_padding!r}{extra}, "
                f"model={c.model})")

    def _reserve(self, n: int) -> None:
        """Sizes every plan buffer for ``n`` sequences (``skrull_plan_sizes``)."""
        sizes = _ffi.skrull_sizes()
        check(_ffi.lib.skrull_plan_sizes(n, self.config.dp, self.config.cp,
                                         ctypes.byref(sizes)), f"{n} sequences")
        self._ws = np.empty(sizes.workspace_bytes, np.uint8)
        self._placements = np.empty(sizes.placements, PLACEMENT_DTYPE)
        self._table = np.empty(sizes.micro_batches, MICRO_BATCH_DTYPE)
        self._members = np.empty(sizes.members, np.uint32)
        self._rank_tokens = np.empty(sizes.rank_tokens, np.uint32)
        self._per_dp = np.empty(sizes.micro_batches_per_dp, np.uint32)
        self._groups = np.empty(sizes.placements, CP_GROUP_DTYPE)
        self._summary = _ffi.skrull_summary()
        self._error = _ffi.skrull_error_info()
        a = _ffi.address
        self._out = _ffi.skrull_plan_buffers(
            struct_size=ctypes.sizeof(_ffi.skrull_plan_buffers),
            placements=a(self._placements), placements_len=sizes.placements,
            micro_batches=a(self._table), micro_batches_len=sizes.micro_batches,
            members=a(self._members), members_len=sizes.members,
            rank_tokens=a(self._rank_tokens), rank_tokens_len=sizes.rank_tokens,
            micro_batches_per_dp=a(self._per_dp),
            micro_batches_per_dp_len=sizes.micro_batches_per_dp,
            summary=ctypes.addressof(self._summary), error=ctypes.addressof(self._error),
            cp_groups=a(self._groups), cp_groups_len=sizes.placements)
        self._ws_addr, self._ws_len = a(self._ws), self._ws.nbytes
        # The structured tables are copied out as uint32 words (numpy copies those faster).
        self._placement_words = self._placements.view(np.uint32)
        self._table_words = self._table.view(np.uint32)
        self._group_words = self._groups.view(np.uint32)
        self._capacity = n

    def plan(self, lengths: Iterable[int] | np.ndarray) -> Plan:
        """Plans one global batch of sequence lengths (tokens; any integer sequence, numpy or
        torch array). Raises ``BatchError`` (``EMPTY_SEQUENCE``, ``LENGTH_OUT_OF_RANGE``,
        ``SEQUENCE_TOO_LONG``, ``TOO_MANY_SEQUENCES``, ``MICRO_BATCH_LIMIT``, with the
        library's details: ``index``, ``value``, ``limit``) or ``ArgumentError`` for
        non-integer lengths."""
        arr, original = _as_lengths(lengths)
        n = arr.size
        with self._lock:
            if self._capacity < n <= MAX_SEQUENCES:
                self._reserve(max(n, min(2 * self._capacity, MAX_SEQUENCES)))
            # Past MAX_SEQUENCES the library answers TOO_MANY_SEQUENCES (with its details)
            # before it looks at a buffer; the struct states every buffer's true capacity.
            self._error.status = 0  # so that stale details are never reported
            status = _ffi.lib.skrull_schedule(
                ctypes.byref(self._c_config), _ffi.address(arr), n, self._ws_addr,
                self._ws_len, ctypes.byref(self._out))
            if status != Status.OK:
                raise _batch_error(status, self._error, original)
            k = self._summary.micro_batches
            return Plan(self, arr, self._placement_words[:4 * n].copy().view(PLACEMENT_DTYPE),
                        self._table_words[:4 * k].copy().view(MICRO_BATCH_DTYPE),
                        self._members[:n].copy(), self._rank_tokens[:k * self.config.cp].copy(),
                        self._per_dp.copy(),
                        _ffi.skrull_summary.from_buffer_copy(self._summary),
                        self._group_words[:2 * n].copy().view(CP_GROUP_DTYPE))

    def _layout_workspace(self, n: int) -> tuple[int, int]:
        """(address, bytes) of the layout workspace for ``n`` sequences (call under the
        lock)."""
        if n > self._layout_capacity:
            cap = _ffi.skrull_layout_capacity()
            check(_ffi.lib.skrull_layout_sizes_max(ctypes.byref(self._c_config), n,
                                                   ctypes.byref(cap)))
            self._layout_ws = np.empty(cap.workspace_bytes, np.uint8)
            self._layout_ws_args = (_ffi.address(self._layout_ws), self._layout_ws.nbytes)
            self._layout_capacity = n
        return self._layout_ws_args

    def _fill_layout(self, plan: Plan, dp_rank: int, micro_batch: int,
                     cp_rank: int) -> _layout.Layout:
        with self._lock:
            ws = self._layout_workspace(plan.lengths.size)
            return _layout.fill(plan, dp_rank, micro_batch, cp_rank, ws)

    def _fill_rank(self, plan: Plan, dp_rank: int, cp_rank: int,
                   micro_batches: int) -> list[_layout.Layout]:
        with self._lock:
            ws = self._layout_workspace(plan.lengths.size)
            return _layout.fill_rank(plan, dp_rank, cp_rank, micro_batches, ws)


def _rebuild_scheduler(dp: int, cp: int, bucket_tokens: int, kwargs: dict) -> Scheduler:
    return Scheduler(dp, cp, bucket_tokens, **kwargs)


def _as_lengths(lengths: Any) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 copy for C, the caller's values as int64/object). Values that do not fit
    ``uint32_t`` become ``2^32 - 1``, which C rejects as ``LENGTH_OUT_OF_RANGE`` in the same
    first-offender order as the same bits passed from C."""
    if hasattr(lengths, "__iter__") and not hasattr(lengths, "__len__"):
        lengths = list(lengths)  # an iterator or generator
    try:
        a = np.asarray(lengths)
    except (TypeError, ValueError) as exc:
        raise make_error(Status.INVALID_ARG, f"lengths: {exc}") from None
    if a.size == 0:  # np.asarray([]) is float64: an empty batch has no values to check
        return np.empty(0, np.uint32), np.empty(0, np.int64)
    if a.dtype == object:
        try:
            a = np.array([operator.index(v) for v in a.reshape(-1)], dtype=object)
        except TypeError:
            bad = next(i for i, v in enumerate(a.reshape(-1)) if not hasattr(v, "__index__"))
            raise make_error(Status.INVALID_ARG, f"length {bad} is not an integer: "
                             f"{a.reshape(-1)[bad]!r}", index=bad) from None
    elif a.dtype.kind not in "iu" or a.dtype == np.bool_:
        raise make_error(Status.INVALID_ARG, f"lengths must be integers, got dtype {a.dtype}")
    if a.ndim != 1:
        if a.size == 0:
            a = a.reshape(0)
        else:
            raise make_error(Status.INVALID_ARG, f"lengths must be one-dimensional, got shape "
                             f"{a.shape}")
    if a.dtype != object and (a.dtype.kind == "u" and a.dtype.itemsize <= 4
                              or 0 <= a.min() and a.max() <= _OUT_OF_RANGE):
        return a.astype(np.uint32), a  # astype copies: the plan owns its lengths
    fits = np.array([0 <= v <= _OUT_OF_RANGE for v in a], bool) if a.dtype == object \
        else (a >= 0) & (a <= _OUT_OF_RANGE)
    return np.where(fits, a, _OUT_OF_RANGE).astype(np.uint32), a


def _batch_error(status: int, info: _ffi.skrull_error_info, lengths: np.ndarray) -> Exception:
    """The exception for a failed ``skrull_schedule``, from the library's ``skrull_error_info``.
    A length that does not fit ``uint32_t`` went to C as ``2^32 - 1``; its ``value`` is the
    caller's own number."""
    override = {}
    if (status == Status.LENGTH_OUT_OF_RANGE and info.status == status
            and 0 <= info.index < len(lengths)):
        override["value"] = int(lengths[info.index])
    return from_info(info, status, **override)
