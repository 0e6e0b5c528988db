"""A plan: the copied-out ``skrull_plan_buffers`` of one ``skrull_schedule`` call."""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from functools import cached_property
import json
import operator
from typing import Any, Optional, Protocol, Sequence

import numpy as np

from . import _ffi, _layout
from ._config import Config
from ._errors import (GPU_FIELDS, BatchError, Error, LayoutError, Status, make_error,
                      type_error)
from ._shape import PRESETS, ModelShape, model_shape


class PlanSource(Protocol):
    """What a plan reads of the scheduler that made it (``Scheduler``): its configuration and
    C struct, its layout calls (its workspace, under its lock), and what the plan pickles it
    as. A plan never imports the scheduler's module."""

    config: Config
    _c_config: _ffi.skrull_config

    def _fill_rank(self, plan: Plan, dp_rank: int, cp_rank: int,
                   micro_batches: int) -> list[_layout.Layout]: ...

    def _pickled_as(self, config: Config) -> Any: ...

#: numpy dtype of ``skrull_placement``: dp_rank, micro_batch, cp_rank (-1 = sharded, -2 =
#: chunked), tokens_per_gpu.
PLACEMENT_DTYPE = np.dtype(_ffi.skrull_placement)
#: numpy dtype of ``skrull_micro_batch``: dp_rank, index, first, count.
MICRO_BATCH_DTYPE = np.dtype(_ffi.skrull_micro_batch)
#: numpy dtype of ``skrull_cp_group``: first, size (the CP ranks ``first .. first + size``).
CP_GROUP_DTYPE = np.dtype(_ffi.skrull_cp_group)


@dataclass(frozen=True)
class Summary:
    """``skrull_summary``: counts over the whole plan (``Plan.summary``).

    Example
    -------
    >>> import skrull
    >>> skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 100]).summary.total_tokens
    130
    """

    total_tokens: int
    sequences: int
    micro_batches: int
    sharded: int
    rollbacks: int
    peak_rank_tokens: int
    #: Sequences run chunked (``Plan.chunked``; not counted in ``sharded``).
    chunked: int = 0


def refuse_chunked(plan: Plan, consumer: str) -> None:
    """Raises ``NotImplementedError`` when ``plan`` runs a sequence chunked: ``consumer``
    (an executor) cannot run chunks yet, and must not run such a plan as if it were sharded."""
    if plan.summary.chunked:
        first = int(np.flatnonzero(plan.chunked)[0])
        raise NotImplementedError(
            f"{consumer} cannot run chunked sequences yet (chunking, ChunkFlow's placement): "
            f"this plan runs {plan.summary.chunked} sequence(s) chunked, the first sequence "
            f"{first} ({int(plan.lengths[first])} tokens); plan without chunking "
            "(chunk_size=0 and a policy other than 'chunkflow')")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _index(name: str, value: Any) -> int:
    """A GPU index argument: an integer (not a bool), else ``ArgumentError``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise type_error(name, value)
    return operator.index(value)


#: ``Error.field`` of NO_SUCH_GPU by coordinate name (the C library's numbers).
GPU_FIELDS_BY_NAME = {name: number for number, name in GPU_FIELDS.items()}


def _no_such(name: str, value: int, count: int, where: str, index: Optional[int] = None
             ) -> Error:
    """``LayoutError`` ``NO_SUCH_GPU`` for an index outside ``[0, count)``: ``value`` the
    index, ``limit`` the count."""
    valid = f"valid: 0 to {count - 1}" if count > 0 else "none is valid"
    return make_error(Status.NO_SUCH_GPU, f"{name}={value} is out of range: {where} ({valid})",
                      LayoutError, index=index, value=value, limit=count,
                      field=GPU_FIELDS_BY_NAME.get(name), field_name=name)


class Plan:
    """Where every sequence of one global batch runs; read-only, independent of later calls.

    Made by ``Scheduler.plan``. Per input sequence (numpy, input order): ``dp_rank``,
    ``micro_batch``, ``cp_rank`` (-1 = sharded, -2 = chunked), ``cp_first`` and ``cp_size``
    (its CP group: size 1 local, ``cp`` sharded over the whole group, else an aligned
    sub-group; for a chunked sequence the GPU or group that runs its chunks), ``chunked`` and
    ``tokens_per_gpu``. Per DP rank: ``micro_batches_per_dp`` (all equal under lockstep, where
    a rank's extra micro-batches are empty and not in the table). The C tables are there too:
    ``placements``, ``micro_batch_table`` (sorted by DP rank, then index), ``members``,
    ``rank_tokens`` (one row of CP loads per table entry) and ``cp_groups``
    (``CP_GROUP_DTYPE``, per sequence). ``len(plan)`` is the number of sequences; plans
    compare with ``==`` (configuration, lengths and every table), hash by ``digest()``,
    pickle, and export as the CLI's JSON (``to_dict``, ``to_json``).

    Example
    -------
    >>> import skrull
    >>> plan = skrull.Scheduler(dp=1, cp=4, bucket_tokens=4096, policy="skrull").plan(
    ...     [1000, 900, 800, 12000])
    >>> plan.cp_rank.tolist()
    [2, 1, 0, -1]
    >>> len(plan), plan.summary.sharded
    (4, 1)
    """

    def __init__(self, scheduler: PlanSource, lengths: np.ndarray, placements: np.ndarray,
                 micro_batch_table: np.ndarray, members: np.ndarray, rank_tokens: np.ndarray,
                 micro_batches_per_dp: np.ndarray, summary: _ffi.skrull_summary,
                 cp_groups: np.ndarray) -> None:
        self._scheduler = scheduler
        self.config: Config = scheduler.config
        self.lengths = _frozen(lengths)
        self.placements = _frozen(placements)
        self.micro_batch_table = _frozen(micro_batch_table)
        self._members_c = _frozen(members)  # uint32, as the C functions read it
        #: Sequence indices grouped by micro-batch (int64, so torch can index with them).
        self.members = _frozen(members.astype(np.int64))
        self.rank_tokens = _frozen(rank_tokens.reshape(-1, self.config.cp))
        self.micro_batches_per_dp = _frozen(micro_batches_per_dp)
        self.cp_groups = _frozen(cp_groups)
        self._c_summary = summary
        self._c_error = _ffi.skrull_error_info()  # the layout calls' details (under the lock)
        self._rank_cache: dict[tuple[int, int], tuple[_layout.Layout, ...]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles the plan's arrays and a Scheduler of its configuration (the plan's own
        cost model, without the scheduler's refit window), so a plan can be sent to a
        DataLoader worker or another process and laid out there."""
        s = self._c_summary
        summary = (s.total_tokens, s.sequences, s.micro_batches, s.sharded, s.rollbacks,
                   s.peak_rank_tokens)
        scheduler = self._scheduler._pickled_as(self.config)
        return (_rebuild_plan, (scheduler, np.array(self.lengths), np.array(self.placements),
                                np.array(self.micro_batch_table), np.array(self._members_c),
                                np.array(self.rank_tokens).reshape(-1),
                                np.array(self.micro_batches_per_dp), summary,
                                np.array(self.cp_groups)))

    @cached_property
    def summary(self) -> Summary:
        """Counts over the whole plan (``skrull_summary``)."""
        s = self._c_summary
        return Summary(s.total_tokens, s.sequences, s.micro_batches, s.sharded, s.rollbacks,
                       s.peak_rank_tokens, int(self.chunked.sum()))

    @cached_property
    def chunked(self) -> np.ndarray:
        """Per sequence: whether it runs chunked (bool; ``cp_rank`` -2): its chunks of
        ``config.chunk_size`` tokens in order on every GPU of its group (``cp_first``,
        ``cp_size``), the last ``config.chunk_keep`` kept, the others recomputed."""
        return _frozen(self.placements["cp_rank"] == _ffi.CHUNKED)

    @cached_property
    def kind(self) -> np.ndarray:
        """Per sequence: ``"local"``, ``"sharded"`` or ``"chunked"`` (numpy str array).

        Example
        -------
        >>> import skrull
        >>> s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64, policy="chunkflow",
        ...                      chunk_size=32)
        >>> s.plan([10, 100]).kind.tolist()
        ['sharded', 'chunked']
        """
        r = self.placements["cp_rank"]
        out = np.where(r == _ffi.CHUNKED, "chunked",
                       np.where(r == _ffi.SHARDED, "sharded", "local"))
        return _frozen(out)

    @cached_property
    def dp_rank(self) -> np.ndarray:
        """Per sequence: its DP rank (int32)."""
        return _frozen(self.placements["dp_rank"].astype(np.int32))

    @cached_property
    def micro_batch(self) -> np.ndarray:
        """Per sequence: its micro-batch index on its DP rank (int32)."""
        return _frozen(self.placements["micro_batch"].astype(np.int32))

    @cached_property
    def cp_rank(self) -> np.ndarray:
        """Per sequence: the CP rank holding it whole, -1 when sharded, -2 when chunked
        (int32)."""
        return _frozen(self.placements["cp_rank"].astype(np.int32))

    @cached_property
    def cp_first(self) -> np.ndarray:
        """Per sequence: the first CP rank of its group (int32; ``cp_rank`` when local, 0 when
        sharded over the whole CP group)."""
        return _frozen(self.cp_groups["first"].astype(np.int32))

    @cached_property
    def cp_size(self) -> np.ndarray:
        """Per sequence: how many CP ranks hold it (int32): 1 local, ``cp`` sharded over the
        whole CP group, ``2 <= size < cp`` over an aligned sub-group (``subgroups``)."""
        return _frozen(self.cp_groups["size"].astype(np.int32))

    @property
    def subgroup_sharded(self) -> int:
        """Sequences sharded over a sub-group of the CP ranks (not the whole group)."""
        sharded = self.placements["cp_rank"] == _ffi.SHARDED
        return int((sharded & (self.cp_size > 1) & (self.cp_size < self.config.cp)).sum())

    @cached_property
    def tokens_per_gpu(self) -> np.ndarray:
        """Per sequence: tokens it costs each GPU that holds it (int64)."""
        return _frozen(self.placements["tokens_per_gpu"].astype(np.int64))

    @property
    def num_micro_batches(self) -> int:
        """The most micro-batches any DP rank runs (with lockstep, the count every rank runs)."""
        return int(self.micro_batches_per_dp.max(initial=0))

    @cached_property
    def _table_rows(self) -> np.ndarray:
        """Per DP rank: [first, stop) of its entries in ``micro_batch_table``. Not a prefix sum
        of ``micro_batches_per_dp``: with lockstep that counts empty micro-batches too."""
        ranks = self.micro_batch_table["dp_rank"]
        d = np.arange(self.config.dp + 1)
        return np.searchsorted(ranks, d, side="left")

    def _table_index(self, dp_rank: int, micro_batch: int) -> int | None:
        """The table position of a micro-batch; None for an empty one (or none at all)."""
        if not 0 <= dp_rank < self.config.dp:
            return None
        first, stop = self._table_rows[dp_rank], self._table_rows[dp_rank + 1]
        if not 0 <= micro_batch < stop - first:
            return None
        return int(first + micro_batch)

    def _check_dp(self, dp_rank: Any) -> int:
        d = _index("dp_rank", dp_rank)
        if not 0 <= d < self.config.dp:
            raise _no_such("dp_rank", d, self.config.dp,
                           f"the plan has {self.config.dp} DP ranks (dp={self.config.dp})")
        return d

    def _check_cp(self, cp_rank: Any, d: Optional[int] = None) -> int:
        r = _index("cp_rank", cp_rank)
        if not 0 <= r < self.config.cp:
            raise _no_such("cp_rank", r, self.config.cp,
                           f"the plan has {self.config.cp} CP ranks (cp={self.config.cp})", d)
        return r

    def _check_micro_batch(self, d: int, micro_batch: Any) -> int:
        m = _index("micro_batch", micro_batch)
        count = int(self.micro_batches_per_dp[d])
        if not 0 <= m < count:
            raise _no_such("micro_batch", m, count, f"DP rank {d} runs {count} micro-batch"
                           f"{'' if count == 1 else 'es'} in this plan", d)
        return m

    def members_of(self, dp_rank: int, micro_batch: int) -> np.ndarray:
        """The sequences of one micro-batch.

        Parameters
        ----------
        dp_rank : int
            ``0 <= dp_rank < dp``.
        micro_batch : int
            ``0 <= micro_batch < micro_batches_per_dp[dp_rank]``.

        Returns
        -------
        numpy.ndarray
            Sequence indices in plan order (int64, read-only); empty for an empty lockstep
            micro-batch.

        Raises
        ------
        LayoutError
            ``NO_SUCH_GPU`` for an index out of range, exactly where ``layout`` raises it
            (``field_name`` names the index, ``value`` and ``limit`` give it and the count).
        ArgumentError
            A non-integer index.

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 20, 10])
        >>> sorted(plan.members_of(0, 0).tolist())
        [0, 1, 2]
        """
        d = self._check_dp(dp_rank)
        m = self._check_micro_batch(d, micro_batch)
        g = self._table_index(d, m)
        if g is None:
            return _frozen(np.empty(0, np.int64))
        entry = self.micro_batch_table[g]
        return self.members[entry["first"]:entry["first"] + entry["count"]]

    def dp_sequences(self, dp_rank: int) -> np.ndarray:
        """The DP rank's sequences in plan order: the token stream ``Layout.gather_index``
        indexes.

        Parameters
        ----------
        dp_rank : int
            ``0 <= dp_rank < dp``.

        Returns
        -------
        numpy.ndarray
            int64: micro-batch 0's members in table order, then micro-batch 1's, ...
            Concatenate the rank's samples in this order and gather each GPU buffer from it.

        Raises
        ------
        LayoutError
            ``NO_SUCH_GPU`` for a DP rank out of range.

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=2, cp=1, bucket_tokens=64).plan([30, 20, 10, 5])
        >>> sorted(plan.dp_sequences(0).tolist() + plan.dp_sequences(1).tolist())
        [0, 1, 2, 3]
        """
        d = self._check_dp(dp_rank)
        first, stop = self._table_rows[d], self._table_rows[d + 1]
        parts = [self.members[e["first"]:e["first"] + e["count"]]
                 for e in self.micro_batch_table[first:stop]]
        return _frozen(np.concatenate(parts)) if parts else _frozen(np.empty(0, np.int64))

    def dp_stream_offsets(self, dp_rank: int) -> np.ndarray:
        """Offsets of ``dp_sequences(dp_rank)`` in the DP rank's token stream.

        Parameters
        ----------
        dp_rank : int
            ``0 <= dp_rank < dp``.

        Returns
        -------
        numpy.ndarray
            int64, one more than sequences: the last is the stream's length.

        Raises
        ------
        LayoutError
            ``NO_SUCH_GPU`` for a DP rank out of range.

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([30, 20])
        >>> int(plan.dp_stream_offsets(0)[-1])
        50
        """
        seqs = self.dp_sequences(dp_rank)
        out = np.zeros(len(seqs) + 1, np.int64)
        np.cumsum(self.lengths[seqs], out=out[1:])
        return out

    def layout(self, dp_rank: int, micro_batch: int, cp_rank: int) -> _layout.Layout:
        """One GPU's layout: what it feeds its kernels for one micro-batch.

        Parameters
        ----------
        dp_rank : int
            ``0 <= dp_rank < dp``.
        micro_batch : int
            ``0 <= micro_batch < micro_batches_per_dp[dp_rank]``; under lockstep one past the
            rank's own count is a valid empty layout (``Layout.is_empty_micro_batch``).
        cp_rank : int
            ``0 <= cp_rank < cp``.

        Returns
        -------
        Layout
            Served from ``rank_layouts`` (the plan is validated once per GPU).

        Raises
        ------
        LayoutError
            ``NO_SUCH_GPU`` naming the index out of range (``field_name``), its ``value``
            and the count (``limit``).
        ArgumentError
            A non-integer index.

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 20, 100])
        >>> plan.layout(0, 0, 1).tokens
        50
        """
        d = self._check_dp(dp_rank)
        r = self._check_cp(cp_rank, d)
        m = self._check_micro_batch(d, micro_batch)
        return self.rank_layouts(d, r)[m]

    def rank_layouts(self, dp_rank: int, cp_rank: int) -> list[_layout.Layout]:
        """This GPU's layouts, one per micro-batch its DP rank runs.

        Made by one ``skrull_layout_fill_many`` call that validates the plan once, and kept:
        ``layout`` serves this GPU's micro-batches from them.

        Parameters
        ----------
        dp_rank : int
            ``0 <= dp_rank < dp``.
        cp_rank : int
            ``0 <= cp_rank < cp``.

        Returns
        -------
        list of Layout
            ``micro_batches_per_dp[dp_rank]`` layouts (with lockstep the same count on every
            rank, the extra ones empty).

        Raises
        ------
        LayoutError
            ``NO_SUCH_GPU`` for an index out of range; ``LAYOUT_OVERFLOW`` when a buffer
            offset passes int32.

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 20, 100])
        >>> [lay.tokens for lay in plan.rank_layouts(0, 0)]
        [80]
        """
        d = self._check_dp(dp_rank)
        r = self._check_cp(cp_rank, d)
        cached = self._rank_cache.get((d, r))
        if cached is None:
            count = int(self.micro_batches_per_dp[d])
            cached = tuple(self._scheduler._fill_rank(self, d, r, count))
            self._rank_cache[(d, r)] = cached
        return list(cached)

    def to_megatron_groups(self, sample_ids: Sequence[Any] | None = None) -> list[list[list[Any]]]:
        """The plan in the shape of Megatron's ``get_groups_and_subsamples``.

        Parameters
        ----------
        sample_ids : sequence, optional
            ``sample_ids[i]`` names sequence ``i`` (default: ``i``).

        Returns
        -------
        list
            ``groups[micro_batch][dp_rank * cp + cp_rank]``: the sample ids that GPU holds; a
            local sequence on its CP rank, a sharded one on every CP rank of its group;
            ``num_micro_batches`` rows, empty lists for a DP rank's empty micro-batches.

        Raises
        ------
        BatchError
            ``sample_ids`` does not hold one id per sequence.
        NotImplementedError
            The plan runs a sequence chunked (Megatron's groups have no chunks).

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64, policy="skrull").plan(
        ...     [30, 20, 100])
        >>> plan.to_megatron_groups(["a", "b", "c"])   # 2 micro-batches x 2 CP ranks
        [[['b', 'c'], ['b', 'c']], [['a'], []]]
        """
        refuse_chunked(self, "to_megatron_groups (Megatron)")
        dp, cp = self.config.dp, self.config.cp
        ids = list(range(len(self.lengths))) if sample_ids is None else list(sample_ids)
        if len(ids) != len(self.lengths):
            raise make_error(Status.INVALID_ARG, f"sample_ids has {len(ids)} ids for "
                             f"{len(self.lengths)} sequences: give one id per sequence, in "
                             "batch order", BatchError, value=len(ids),
                             limit=len(self.lengths), field_name="sample_ids")
        groups: list[list[list[Any]]] = [[[] for _ in range(dp * cp)]
                                    for _ in range(self.num_micro_batches)]
        group_first, group_size = self.cp_first.tolist(), self.cp_size.tolist()
        for entry in self.micro_batch_table.tolist():
            d, m, first, count = entry
            row = groups[m]
            for s in self.members[first:first + count].tolist():
                for r in range(group_first[s], group_first[s] + group_size[s]):
                    row[d * cp + r].append(ids[s])
        return groups

    def digest(self) -> str:
        """A fingerprint of the plan, equal on every rank that planned the same batch.

        Returns
        -------
        str
            sha256 (hex) of the little-endian uint32 words of ``len(lengths), dp, cp``, then
            ``placements`` (4 words each), ``members``, ``micro_batches_per_dp``, and, when
            any sequence is sharded over a sub-group or chunked, ``cp_groups`` (2 words
            each). A C
            trainer computes the same value from its own buffers.

        Example
        -------
        >>> import skrull
        >>> s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=64)
        >>> s.plan([30, 20, 100]).digest() == s.plan([30, 20, 100]).digest()
        True
        """
        h = hashlib.sha256()
        head = np.array([len(self.lengths), self.config.dp, self.config.cp], "<u4")
        parts = [head, self.placements.view(np.uint32).reshape(-1), self.members,
                 self.micro_batches_per_dp]
        if self.subgroup_sharded or self.summary.chunked:
            parts.append(self.cp_groups.view(np.uint32).reshape(-1))
        for words in parts:
            h.update(np.ascontiguousarray(words, dtype="<u4").tobytes())
        return h.hexdigest()

    @cached_property
    def _c_args(self) -> tuple[Any, int, int, Any]:
        """(config, lengths address, n, plan buffers): the layout functions' first arguments."""
        return (ctypes.byref(self._scheduler._c_config), _ffi.address(self.lengths),
                len(self.lengths), ctypes.byref(self._c_plan))

    @cached_property
    def _c_plan(self) -> _ffi.skrull_plan_buffers:
        a = _ffi.address
        return _ffi.skrull_plan_buffers(
            struct_size=ctypes.sizeof(_ffi.skrull_plan_buffers),
            placements=a(self.placements), placements_len=len(self.placements),
            micro_batches=a(self.micro_batch_table),
            micro_batches_len=len(self.micro_batch_table),
            members=a(self._members_c), members_len=len(self._members_c),
            rank_tokens=a(self.rank_tokens), rank_tokens_len=self.rank_tokens.size,
            micro_batches_per_dp=a(self.micro_batches_per_dp),
            micro_batches_per_dp_len=len(self.micro_batches_per_dp),
            summary=ctypes.addressof(self._c_summary), error=ctypes.addressof(self._c_error),
            cp_groups=a(self.cp_groups), cp_groups_len=len(self.cp_groups))

    # ---- comparison, size, export ------------------------------------------------------------

    def __len__(self) -> int:
        """The number of sequences planned (``len(plan.lengths)``)."""
        return len(self.lengths)

    def __eq__(self, other: object) -> bool:
        """Plans are equal when their configurations, lengths and every output table are
        (what ``digest()`` covers, plus the configuration and the summary)."""
        if not isinstance(other, Plan):
            return NotImplemented
        if self is other:
            return True
        pairs = ((self.lengths, other.lengths), (self.placements, other.placements),
                 (self.micro_batch_table, other.micro_batch_table),
                 (self._members_c, other._members_c),
                 (self.micro_batches_per_dp, other.micro_batches_per_dp),
                 (self.rank_tokens, other.rank_tokens), (self.cp_groups, other.cp_groups))
        return (self.config == other.config and self.summary == other.summary
                and all(a.shape == b.shape and bool(np.array_equal(a, b)) for a, b in pairs))

    def __hash__(self) -> int:
        return hash(self.digest())

    def to_dict(self) -> dict[str, Any]:
        """The plan as the CLI's ``skrull plan --format json`` prints it.

        Returns
        -------
        dict
            ``config`` (dp, cp, bucket_tokens, policy, victim, model, flops,
            max_micro_batches, shard_padding, pad_multiple, pad_local, lockstep, subgroups,
            fill_empty, micro_batches, and chunk_size, chunk_keep, chunk_state_permille
            unless chunking is at its defaults, sync unless it is ``"cp-group"``), ``summary`` (with ``chunked`` when chunking
            is on), ``placements`` (per sequence: seq, len, dp, micro_batch, cp (-1 sharded,
            -2 chunked), cp_first, cp_size; a chunked one also ``kind`` "chunked" and
            ``chunks``), ``micro_batches_per_dp``
            and ``rank_tokens[dp][micro_batch]`` (tokens per CP rank; zeros for an empty
            lockstep micro-batch).

        Example
        -------
        >>> import skrull
        >>> d = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 100]).to_dict()
        >>> d["placements"][1]["cp"], d["rank_tokens"]
        (-1, [[[80, 50]]])
        """
        c, s = self.config, self.summary
        config = {"dp": c.dp, "cp": c.cp, "bucket_tokens": c.bucket_tokens,
                  "policy": c.policy, "victim": c.victim, "model": _model_name(c.model),
                  "flops": c.flops, "max_micro_batches": c.max_micro_batches,
                  "shard_padding": c.shard_padding, "pad_multiple": c.pad_multiple,
                  "pad_local": c.pad_local, "lockstep": c.lockstep, "subgroups": c.subgroups,
                  "fill_empty": c.fill_empty, "micro_batches": c.micro_batches}
        # As the CLI: the chunking keys only when chunking is not at its defaults (off, K 1,
        # 64 permille), the chunked count and the chunk fields only with chunking on.
        if (c.chunk_size, c.chunk_keep, c.chunk_state_permille) != (0, 1, 64):
            config.update(chunk_size=c.chunk_size, chunk_keep=c.chunk_keep,
                          chunk_state_permille=c.chunk_state_permille)
        if c.sync != "cp-group":  # as the CLI: only away from the default
            config["sync"] = c.sync
        summary = {"sequences": len(self), "total_tokens": s.total_tokens,
                   "micro_batches": s.micro_batches, "sharded": s.sharded}
        if c.chunking:
            summary["chunked"] = s.chunked
        summary.update(rollbacks=s.rollbacks, peak_rank_tokens=s.peak_rank_tokens)
        placements: list[dict[str, Any]] = [
            {"seq": i, "len": n, "dp": d, "micro_batch": m, "cp": r, "cp_first": f,
             "cp_size": z}
            for i, (n, d, m, r, f, z) in enumerate(zip(
                self.lengths.tolist(), self.dp_rank.tolist(), self.micro_batch.tolist(),
                self.cp_rank.tolist(), self.cp_first.tolist(), self.cp_size.tolist()))]
        for i in np.flatnonzero(self.chunked).tolist():
            placements[i].update(kind="chunked",
                                 chunks=-(-int(self.lengths[i]) // c.chunk_size))
        zeros = [0] * c.cp
        rank_tokens = []
        for d, count in enumerate(self.micro_batches_per_dp.tolist()):
            rows = []
            for m in range(count):
                g = self._table_index(d, m)
                rows.append(zeros if g is None else self.rank_tokens[g].tolist())
            rank_tokens.append(rows)
        return {"config": config, "summary": summary, "placements": placements,
                "micro_batches_per_dp": self.micro_batches_per_dp.tolist(),
                "rank_tokens": rank_tokens}

    def to_json(self) -> str:
        """The plan as JSON, byte for byte what ``skrull plan --format json`` prints for the
        same lengths and settings (``to_dict`` lists the keys).

        Returns
        -------
        str
            The JSON text, ending with a newline.

        Example
        -------
        >>> import json, skrull
        >>> text = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 100]).to_json()
        >>> json.loads(text)["summary"]["sharded"]
        1
        """
        d = self.to_dict()

        def dump(x: Any) -> str:
            return json.dumps(x, separators=(", ", ": "))

        places = ",\n   ".join(dump(p) for p in d["placements"])
        ranks = ",\n   ".join(dump(r) for r in d["rank_tokens"])
        return (f'{{"config": {dump(d["config"])},\n "summary": {dump(d["summary"])},\n'
                f' "placements": [{places}],\n'
                f' "micro_batches_per_dp": {dump(d["micro_batches_per_dp"])},\n'
                f' "rank_tokens": [{ranks}]}}\n')

    def __repr__(self) -> str:
        s = self.summary
        chunked = f", {s.chunked} chunked" if s.chunked else ""
        return (f"Plan({s.sequences} sequences, {s.total_tokens} tokens, dp={self.config.dp}, "
                f"cp={self.config.cp}, micro-batches per DP rank "
                f"{self.micro_batches_per_dp.tolist()}, {s.sharded} sharded{chunked})")


def _model_name(shape: ModelShape) -> str:
    """The CLI's name for a shape: a preset's name, else ``custom:...``."""
    for name in PRESETS:
        if model_shape(name) == shape:
            return name
    return (f"custom:hidden={shape.hidden},kv_hidden={shape.kv_hidden},ffn={shape.ffn},"
            f"layers={shape.layers},vocab={shape.vocab},swiglu={str(bool(shape.swiglu)).lower()}")


def _rebuild_plan(scheduler: PlanSource, lengths: np.ndarray, placements: np.ndarray,
                  table: np.ndarray, members: np.ndarray, rank_tokens: np.ndarray,
                  per_dp: np.ndarray, summary: tuple[int, ...], cp_groups: np.ndarray) -> Plan:
    c = _ffi.skrull_summary(total_tokens=summary[0], sequences=summary[1],
                            micro_batches=summary[2], sharded=summary[3], rollbacks=summary[4],
                            peak_rank_tokens=summary[5])
    return Plan(scheduler, lengths, placements, table, members, rank_tokens, per_dp, c,
                cp_groups)
