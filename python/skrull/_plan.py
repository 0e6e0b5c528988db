"""A plan: the copied-out ``skrull_plan_buffers`` of one ``skrull_schedule`` call."""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from . import _ffi, _layout
from ._config import Config
from ._errors import Status, make_error

if TYPE_CHECKING:
    from ._scheduler import Scheduler

#: numpy dtype of ``skrull_placement``: dp_rank, micro_batch, cp_rank (-1 = sharded),
#: tokens_per_gpu.
PLACEMENT_DTYPE = np.dtype(_ffi.skrull_placement)
#: numpy dtype of ``skrull_micro_batch``: dp_rank, index, first, count.
MICRO_BATCH_DTYPE = np.dtype(_ffi.skrull_micro_batch)
#: numpy dtype of ``skrull_cp_group``: first, size (the CP ranks ``first .. first + size``).
CP_GROUP_DTYPE = np.dtype(_ffi.skrull_cp_group)


@dataclass(frozen=True)
class Summary:
    """``skrull_summary``: counts over the whole plan."""

    total_tokens: int
    sequences: int
    micro_batches: int
    sharded: int
    rollbacks: int
    peak_rank_tokens: int


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _gpu_index(name: str, value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise make_error(Status.INVALID_ARG, f"{name} must be an integer, got {value!r}")
    value = int(value)
    if not 0 <= value < 2**32:
        raise make_error(Status.NO_SUCH_GPU, f"{name} = {value}")
    return value


class Plan:
    """Where every sequence of one global batch runs; read-only, independent of later calls.

    Per input sequence (numpy, input order): ``dp_rank``, ``micro_batch``, ``cp_rank`` (-1 =
    sharded), ``cp_first`` and ``cp_size`` (its CP group: size 1 local, ``cp`` sharded over
    the whole group, else an aligned sub-group) and ``tokens_per_gpu``. Per DP rank:
    ``micro_batches_per_dp``
    (all equal under lockstep, where a rank's extra micro-batches are empty and not in the
    table). The C tables are there too: ``placements``, ``micro_batch_table`` (sorted by DP
    rank, then index), ``members``, ``rank_tokens`` (one row of CP loads per table entry) and
    ``cp_groups`` (``CP_GROUP_DTYPE``, per sequence).
    """

    def __init__(self, scheduler: Scheduler, lengths: np.ndarray, placements: np.ndarray,
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

    def __reduce__(self) -> tuple:
        """Pickles the plan's arrays and its Scheduler (by configuration), so a plan can be
        sent to a DataLoader worker or another process and laid out there."""
        s = self._c_summary
        summary = (s.total_tokens, s.sequences, s.micro_batches, s.sharded, s.rollbacks,
                   s.peak_rank_tokens)
        return (_rebuild_plan, (self._scheduler, np.array(self.lengths), np.array(self.placements),
                                np.array(self.micro_batch_table), np.array(self._members_c),
                                np.array(self.rank_tokens).reshape(-1),
                                np.array(self.micro_batches_per_dp), summary,
                                np.array(self.cp_groups)))

    @cached_property
    def summary(self) -> Summary:
        """Counts over the whole plan (``skrull_summary``)."""
        s = self._c_summary
        return Summary(s.total_tokens, s.sequences, s.micro_batches, s.sharded, s.rollbacks,
                       s.peak_rank_tokens)

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
        """Per sequence: the CP rank holding it whole, or -1 when sharded (int32)."""
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
        return int(((self.cp_size > 1) & (self.cp_size < self.config.cp)).sum())

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

    def members_of(self, dp_rank: int, micro_batch: int) -> np.ndarray:
        """Sequence indices of one micro-batch, in plan order (int64; empty for an empty
        lockstep micro-batch and past a rank's count)."""
        g = self._table_index(dp_rank, micro_batch)
        if g is None:
            return _frozen(np.empty(0, np.int64))
        entry = self.micro_batch_table[g]
        return self.members[entry["first"]:entry["first"] + entry["count"]]

    def dp_sequences(self, dp_rank: int) -> np.ndarray:
        """The DP rank's sequences in plan order (int64; micro-batch 0's members in table order,
        then micro-batch 1's, ...): the token stream ``Layout.gather_index`` indexes. Concatenate
        the rank's samples in this order and gather each GPU buffer from it."""
        d = _gpu_index("dp_rank", dp_rank)
        if d >= self.config.dp:
            raise make_error(Status.NO_SUCH_GPU, f"DP rank {d} of {self.config.dp}", index=d)
        first, stop = self._table_rows[d], self._table_rows[d + 1]
        parts = [self.members[e["first"]:e["first"] + e["count"]]
                 for e in self.micro_batch_table[first:stop]]
        return _frozen(np.concatenate(parts)) if parts else _frozen(np.empty(0, np.int64))

    def dp_stream_offsets(self, dp_rank: int) -> np.ndarray:
        """Offsets of ``dp_sequences(dp_rank)`` in the DP rank's token stream (int64, one more
        than sequences: the last is the stream's length)."""
        seqs = self.dp_sequences(dp_rank)
        out = np.zeros(len(seqs) + 1, np.int64)
        np.cumsum(self.lengths[seqs], out=out[1:])
        return out

    def layout(self, dp_rank: int, micro_batch: int, cp_rank: int) -> _layout.Layout:
        """One GPU's layout (from ``rank_layouts``, so the plan is validated once per GPU,
        not once per micro-batch). A micro-batch index at or past
        ``micro_batches_per_dp[dp_rank]`` raises ``NO_SUCH_GPU``; under lockstep one past the
        rank's own count is a valid empty layout (``Layout.is_empty_micro_batch``)."""
        d = _gpu_index("dp_rank", dp_rank)
        m = _gpu_index("micro_batch", micro_batch)
        r = _gpu_index("cp_rank", cp_rank)
        if d < self.config.dp and r < self.config.cp and m < self.micro_batches_per_dp[d]:
            return self.rank_layouts(d, r)[m]
        return self._scheduler._fill_layout(self, d, m, r)  # raises NO_SUCH_GPU

    def rank_layouts(self, dp_rank: int, cp_rank: int) -> list[_layout.Layout]:
        """This GPU's layouts, one per micro-batch its DP rank runs
        (``micro_batches_per_dp[dp_rank]``; with lockstep the same count on every rank, the
        extra ones empty), made by one ``skrull_layout_fill_many`` call that validates the
        plan once, and kept: ``layout`` serves this GPU's micro-batches from them."""
        d, r = _gpu_index("dp_rank", dp_rank), _gpu_index("cp_rank", cp_rank)
        if d >= self.config.dp or r >= self.config.cp:
            raise make_error(Status.NO_SUCH_GPU, f"DP rank {d}, CP rank {r}")
        cached = self._rank_cache.get((d, r))
        if cached is None:
            count = int(self.micro_batches_per_dp[d])
            cached = tuple(self._scheduler._fill_rank(self, d, r, count))
            self._rank_cache[(d, r)] = cached
        return list(cached)

    def to_megatron_groups(self, sample_ids: Sequence[Any] | None = None) -> list[list[list]]:
        """``sample_id_groups[micro_batch][dp_rank * cp + cp_rank]`` -> sample ids, the shape of
        Megatron's ``BasePackingScheduler.get_groups_and_subsamples``: a local sequence on its CP
        rank, a sharded one on every CP rank of its DP rank; ``num_micro_batches`` entries (the
        lockstep count), with empty lists for a DP rank's empty micro-batches (or, without
        lockstep, where it has fewer). A sequence sharded over a sub-group is on the CP ranks of
        that group only. ``sample_ids[i]`` names sequence ``i`` (default: ``i``)."""
        dp, cp = self.config.dp, self.config.cp
        ids = list(range(len(self.lengths))) if sample_ids is None else list(sample_ids)
        if len(ids) != len(self.lengths):
            raise make_error(Status.INVALID_ARG,
                             f"{len(ids)} sample ids for {len(self.lengths)} sequences")
        groups: list[list[list]] = [[[] for _ in range(dp * cp)]
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
        """sha256 (hex) of the plan, equal on every rank that planned the same batch with the
        same configuration: the little-endian uint32 words of ``len(lengths), dp, cp``, then
        ``placements`` (4 words each), ``members``, ``micro_batches_per_dp``, and, when any
        sequence is sharded over a sub-group, ``cp_groups`` (2 words each)."""
        h = hashlib.sha256()
        head = np.array([len(self.lengths), self.config.dp, self.config.cp], "<u4")
        parts = [head, self.placements.view(np.uint32).reshape(-1), self.members,
                 self.micro_batches_per_dp]
        if self.subgroup_sharded:
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

    def __repr__(self) -> str:
        s = self.summary
        return (f"Plan({s.sequences} sequences, {s.total_tokens} tokens, {s.micro_batches} "
                f"micro-batches (per DP: {self.micro_batches_per_dp.tolist()}), {s.sharded} "
                f"sharded ({self.subgroup_sharded} over sub-groups), {s.rollbacks} rollbacks, "
                f"peak {s.peak_rank_tokens} tokens/GPU)")


def _rebuild_plan(scheduler: Scheduler, lengths: np.ndarray, placements: np.ndarray,
                  table: np.ndarray, members: np.ndarray, rank_tokens: np.ndarray,
                  per_dp: np.ndarray, summary: tuple, cp_groups: np.ndarray) -> Plan:
    c = _ffi.skrull_summary(total_tokens=summary[0], sequences=summary[1],
                            micro_batches=summary[2], sharded=summary[3], rollbacks=summary[4],
                            peak_rank_tokens=summary[5])
    return Plan(scheduler, lengths, placements, table, members, rank_tokens, per_dp, c,
                cp_groups)
