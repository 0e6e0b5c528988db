"""``Scheduler``: a configuration prepared once (``skrull_setup_init``) plus reusable buffers;
``plan()`` runs ``skrull_schedule_prepared``."""

from __future__ import annotations

import ctypes
import math
import dataclasses
import operator
import threading
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

from . import _config, _ffi, _layout
from ._cost import CostModel
from ._errors import (ArgumentError, Error, LayoutError, Status, check, from_info,
                      make_error, type_error)
from ._plan import CP_GROUP_DTYPE, MICRO_BATCH_DTYPE, PLACEMENT_DTYPE, Plan
from ._refit import Refit, RefitSettings, Window, report_to_refit
from ._setup import Prepared
from ._times import as_times

#: The most sequences one batch may hold (``MAX_SEQS``).
MAX_SEQUENCES = 65536
_OUT_OF_RANGE = 2**32 - 1  # stands for any length that does not fit uint32_t


class Scheduler:
    """Plans global batches for one configuration, prepared once, reusing its buffers
    between calls.

    Every rank builds the same ``Scheduler`` and calls ``plan`` with the same lengths: the
    plans are equal bit for bit (compare ``Plan.digest()`` once), so nothing is broadcast.
    One Scheduler may be shared by threads (calls are serialised); plans are independent
    copies, valid after later calls. Scheduler and Plan pickle.

    Parameters
    ----------
    dp : int
        Data-parallel size, 1 to 65536.
    cp : int
        Context-parallel size (GPUs per DP rank), 1 to 256.
    bucket_tokens : int
        BucketSize: the most tokens one GPU holds in one micro-batch, 1 to 2^31 - 1.
        ``dp``, ``cp`` and ``bucket_tokens`` are required, unless ``model`` names a preset:
        its paper layout (DP 4 x CP 8, BucketSize 26624 or 13312) fills the missing ones.
    model : str, ModelShape, dict or Hugging Face config, optional
        The shape FLOPs and costs are counted for: a preset (``"qwen2.5-0.5b"``, the default
        shape, or ``"qwen2.5-7b"``), a ``ModelShape``, a dict of its fields, or a Hugging
        Face configuration (a dict with ``hidden_size``, ..., a ``config.json`` path or model
        directory, or a ``PretrainedConfig``; see ``ModelShape.from_hf_config``).
    policy : str or int, optional
        ``"balanced"`` (default: the library's recommended preset, as in the CLI),
        ``"skrull"``, ``"deepspeed"``, ``"packed"``, ``"roundrobin"`` or ``"chunkflow"``
        (ChunkFlow's scheme, which needs ``chunk_size``) (``skrull.POLICIES``).
    victim : str or int, optional
        ``"shortest"`` (default) or ``"longest"``: which sequence ``skrull`` shards first.
    flops : str or int, optional
        ``"paper"`` (default) or ``"megatron"``; ``balanced`` takes only ``"paper"``.
    shard_padding : str or int, optional
        ``"none"`` (default) or ``"zigzag"`` (sharded sequences padded to a multiple of
        ``2 cp``).
    max_micro_batches : int, optional
        The most micro-batches a DP rank may run; 0 (default) for no limit.
    pad_multiple : int, optional
        ``M``, 0 to 65536: sharded sequences are padded to a multiple of ``lcm(2 cp, M)``
        (``M = 2 cp tp`` for Megatron with sequence parallelism); 0 or 1 for none.
    pad_local : bool, optional
        Pad local sequences to a multiple of ``pad_multiple`` too.
    lockstep : bool, optional
        Every DP rank runs the same number of micro-batches (the extra ones empty).
    cost_model : None, str or CostModel, optional
        What ``balanced`` plans with: ``None`` (the H100 preset), ``"h100"``, ``"h200"`` or a
        ``CostModel`` (``CostModel.from_json`` for a calibrated one).
    subgroups : bool, optional
        Default True (the recommended preset, as in the CLI): ``balanced`` may shard a sequence over an aligned
        sub-group of the CP ranks where its cost model says that is faster.
    fill_empty : bool, optional
        With ``lockstep``: split multi-sequence micro-batches instead of running empty ones.
    micro_batches : int, optional
        A fixed count ``G`` per DP rank (Hugging Face's ``gradient_accumulation_steps``); 0
        (default) for as many as needed.
    chunk_size : int, optional
        ChunkSize: 0 for no chunking, else the most tokens of one chunk; default (None): off,
        except for ``chunkflow``, which then gets the CLI's default (the largest power of two
        whose chunked peak on one GPU fits ``bucket_tokens`` for the longest sequence the
        layout accepts). With it a
        sequence longer than ``chunk_size`` may run chunked (``Plan.chunked``: its chunks in
        order on one GPU or an aligned group of CP ranks, ``Plan.cp_rank`` -2): ``chunkflow``
        chunks every such sequence over the whole group, ``balanced`` where its cost model
        says that pays. See ``docs/chunking.md``. The ``skrull.torch`` and ``skrull.hf``
        executors run them chunk by chunk (``skrull.torch.attention.MicroBatchPasses``).
    chunk_keep : int, optional
        K: how many chunks of a chunked sequence keep their activations (1 to 64, default 1);
        the others are recomputed in the backward pass.
    chunk_state_permille : int, optional
        BucketSize tokens of K/V state per token of a chunked sequence, in thousandths (0 to
        1000, default 64).
    sync : str or int, optional
        How the trainer that runs the plans makes its GPUs wait for each other:
        ``"cp-group"`` (the default: every micro-batch waits for its slowest CP rank),
        ``"every-gpu"`` (every micro-batch waits for every GPU, as under ZeRO-2/3; every DP
        rank then runs the same micro-batch count) or ``"sharded"`` (CP ranks meet only in
        micro-batches holding a sequence spanning several of them, everyone at the step: DDP
        under ``no_sync``, what ``SkrullTrainer`` runs). ``balanced`` arranges its plans for
        it; see ``docs/cost_model.md``, "Synchronisation".
    max_sequences : int, optional
        The batch size the buffers are first sized for (default 256); they grow as needed.
    refit : RefitSettings or dict, optional
        How ``refit`` fits the times given to ``observe`` (default ``RefitSettings()``).

    Raises
    ------
    ConfigError
        A setting out of range or unknown (``ValueError``); ``status`` names it
        (``INVALID_DP``, ``INVALID_ENUM``, ``INVALID_REFIT_PARAMS``, ...), ``field_name`` the
        argument, ``value`` and ``limit`` the value and its bound.
    ArgumentError
        A setting of the wrong type, or ``dp``/``cp``/``bucket_tokens`` missing without a
        preset (``TypeError``).
    BatchError
        ``micro_batches`` above a nonzero ``max_micro_batches`` (``MICRO_BATCH_LIMIT``).

    Example
    -------
    >>> import skrull
    >>> s = skrull.Scheduler(dp=1, cp=4, bucket_tokens=4096, policy="skrull")
    >>> plan = s.plan([1000, 900, 800, 12000])
    >>> plan.cp_rank.tolist()          # -1: sharded over the 4 CP ranks
    [2, 1, 0, -1]
    """

    def __init__(self, dp: Optional[int] = None, cp: Optional[int] = None,
                 bucket_tokens: Optional[int] = None, *, model: Any = None,
                 policy: Union[str, int] = _config.RECOMMENDED_POLICY,
                 victim: Union[str, int] = "shortest",
                 flops: Union[str, int] = "paper", shard_padding: Union[str, int] = "none",
                 max_micro_batches: int = 0, pad_multiple: int = 1, pad_local: bool = False,
                 lockstep: bool = False, cost_model: Union[CostModel, str, None] = None,
                 subgroups: bool = _config.RECOMMENDED_SUBGROUPS, fill_empty: bool = False,
                 micro_batches: int = 0, chunk_size: Optional[int] = None, chunk_keep: int = 1,
                 chunk_state_permille: int = 64, sync: Union[str, int] = "cp-group",
                 max_sequences: int = 256,
                 refit: Union[RefitSettings, Mapping[str, Any], None] = None) -> None:
        first = _config.setting("max_sequences", max_sequences)
        self._refit_settings = _refit_settings(refit)
        self._window: Optional[Window] = None
        # self.config holds the CostModel copy self._c_config points at: both live together.
        self.config, self._c_config = _config.build(
            dp, cp, bucket_tokens, model, policy, victim, flops, shard_padding,
            max_micro_batches, pad_multiple, pad_local, lockstep, cost_model, subgroups,
            fill_empty, micro_batches, chunk_size, chunk_keep, chunk_state_permille, sync)
        # The configuration prepared once; rebuilt whenever config or its cost model changes.
        self._prepared = Prepared(self._c_config)
        self._lock = threading.Lock()
        self._capacity = -1
        self._layout_capacity = -1
        self._reserve(min(max(first, 1), MAX_SEQUENCES))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by configuration (a DataLoader worker or another process rebuilds the
        same Scheduler; its buffers are made anew), with the model it plans with now and its
        refit state: the settings, the prior and the window (the library's state bytes, valid
        on the same platform)."""
        rebuild, args = config_reduce(self.config, self._capacity, self._refit_settings)
        window = None if self._window is None else self._window.state()
        return (rebuild, args, {"window": window})

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restores the refit window of a pickled scheduler."""
        window = state.get("window")
        if window is not None:
            with self._lock:
                self._window = Window.restore(window, self._c_config)

    def __repr__(self) -> str:
        c = self.config
        extra = "".join(f", {k}={getattr(c, k)!r}" for k in ("pad_multiple", "pad_local",
                                                            "lockstep", "fill_empty",
                                                            "micro_batches", "chunk_size",
                                                            "cost_model")
                        if getattr(c, k))
        if c.chunking:
            extra += f", chunk_keep={c.chunk_keep}"
            if c.chunk_state_permille != 64:
                extra += f", chunk_state_permille={c.chunk_state_permille}"
        if c.sync != "cp-group":
            extra += f", sync={c.sync!r}"
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

    def plan(self, lengths: Union[Iterable[int], np.ndarray, Any]) -> Plan:
        """Plans one global batch.

        Parameters
        ----------
        lengths : sequence of int, numpy or torch array
            Tokens of each sequence, in batch order: a list, tuple, range, iterator, numpy
            integer array or torch integer tensor (a CUDA tensor is copied to the CPU). One
            dimension; each length from 1 to 2^31 - 1.

        Returns
        -------
        Plan
            Where every sequence runs; independent of later calls.

        Raises
        ------
        ArgumentError
            ``lengths`` is not a one-dimensional sequence of integers (``None``, a dict, a
            string, floats, bools, nested lists); ``index`` names the first bad element.
        BatchError
            ``EMPTY_SEQUENCE`` (a 0), ``LENGTH_OUT_OF_RANGE`` (negative, or above 2^31 - 1),
            ``SEQUENCE_TOO_LONG`` (``limit``: the BucketSize it needs),
            ``TOO_MANY_SEQUENCES`` (above 65536), ``MICRO_BATCH_LIMIT`` or
            ``MICRO_BATCH_COUNT`` (``value``: the micro-batches needed); ``index`` is the
            first offending sequence (or DP rank), in input order.

        Example
        -------
        >>> import skrull
        >>> plan = skrull.Scheduler(dp=2, cp=2, bucket_tokens=64).plan([30, 20, 100, 10])
        >>> len(plan), plan.summary.sharded
        (4, 1)
        """
        arr, original = _as_lengths(lengths)
        n = arr.size
        with self._lock:
            if self._capacity < n <= MAX_SEQUENCES:
                self._reserve(max(n, min(2 * self._capacity, MAX_SEQUENCES)))
            # Past MAX_SEQUENCES the library answers TOO_MANY_SEQUENCES (with its details)
            # before it looks at a buffer; the struct states every buffer's true capacity.
            self._error.status = 0  # so that stale details are never reported
            status = _ffi.lib.skrull_schedule_prepared(
                self._prepared.handle, _ffi.address(arr), n, self._ws_addr, self._ws_len,
                ctypes.byref(self._out))
            if status != Status.OK:
                raise _batch_error(status, self._error, original, self._c_config)
            k = self._summary.micro_batches
            return Plan(self, arr, self._placement_words[:4 * n].copy().view(PLACEMENT_DTYPE),
                        self._table_words[:4 * k].copy().view(MICRO_BATCH_DTYPE),
                        self._members[:n].copy(), self._rank_tokens[:k * self.config.cp].copy(),
                        self._per_dp.copy(),
                        _ffi.skrull_summary.from_buffer_copy(self._summary),
                        self._group_words[:2 * n].copy().view(CP_GROUP_DTYPE))

    def _pickled_as(self, config: _config.Config) -> Any:
        """What a plan of ``config`` pickles its scheduler as: a Scheduler of that
        configuration only (one object per configuration, so plans pickled together share
        it)."""
        proxy = getattr(self, "_proxy", None)
        if proxy is None or proxy.config is not config:
            proxy = self._proxy = _SchedulerOf(config, self._capacity)
        return proxy

    @property
    def cost_model(self) -> CostModel:
        """The cost model ``balanced`` plans with now (read-only): the one given, the H100
        preset for ``model`` when none was, or the last ``refit``'s."""
        if self.config.cost_model is not None:
            return self.config.cost_model
        return CostModel("h100", self.config.model)._frozen_copy()

    def observe(self, plan: Plan, times: Any, step_time: Optional[float] = None) -> None:
        """Adds one step's measured micro-batch times to the refit window.

        Every rank that observes the same plans and times (``skrull.torch.gather_times``
        all-gathers them) then refits to the same model bit for bit. Values are the library's
        to judge: NaN (a GPU that did not report), infinite, zero or negative times are
        skipped and counted (``Refit.skipped``); times of a micro-batch slot that holds no
        sequence are ignored; stragglers are dropped by the fit (``RefitSettings.outlier``).

        Parameters
        ----------
        plan : Plan
            The plan the step ran, made by a scheduler of this configuration.
        times : array-like or mapping
            Seconds of forward + backward of each micro-batch on each GPU: a
            ``[plan.num_micro_batches][dp][cp]`` array (numpy, torch or nested lists), or a
            mapping ``{(dp_rank, cp_rank): [seconds per micro-batch]}`` (a global rank
            ``dp_rank * cp + cp_rank`` works as the key too; a GPU left out is missing).
        step_time : float, optional
            Seconds of the whole step on its slowest GPU (forward, backward, the optimizer
            step and everything between): the refit measures the per-step cost from it
            (``Refit.iteration_fixed_s``). None, NaN or a value not above 0: not measured.

        Raises
        ------
        ArgumentError
            ``plan`` is not a Plan, or ``times`` does not hold numbers (``INVALID_ARG``).
        MeasurementError
            ``times`` does not match the plan's shape (``MEASUREMENT_MISMATCH``; ``value``
            and ``limit`` the counts).
        LayoutError
            ``plan`` was made for another configuration (``PLAN_INVALID``).

        Example
        -------
        >>> import skrull
        >>> s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64)
        >>> plan = s.plan([30, 20, 100])
        >>> s.observe(plan, [[[0.012, 0.011]]])        # [micro_batch][dp][cp] seconds
        >>> s.observe(plan, {(0, 0): [0.012], (0, 1): [0.011]})
        >>> s.refit().steps
        2
        """
        if not isinstance(plan, Plan):
            raise make_error(Status.INVALID_ARG, f"plan must be a skrull.Plan, got "
                             f"{_short(plan)} ({type(plan).__name__})", ArgumentError,
                             field_name="plan")
        if _timed_alike(plan.config) != _timed_alike(self.config):
            raise make_error(Status.PLAN_INVALID, "observe: the plan was made for another "
                             "configuration than this scheduler's (dp, cp, bucket_tokens, "
                             "model, padding, sync...); observe each plan on a scheduler of "
                             "the same machine and layout (the policy may differ)",
                             LayoutError, field_name="plan")
        measured = as_times(times, plan)
        wall = math.nan
        if step_time is not None:
            if isinstance(step_time, bool) or not isinstance(step_time, (int, float)):
                raise type_error("step_time", step_time, "a number of seconds")
            wall = float(step_time)
        with self._lock:
            if self._window is None:
                self._window = Window(self._refit_settings, self._c_config,
                                      self.config.cost_model, measured.size)
            self._window.observe(plan, measured, wall)

    def refit(self) -> Refit:
        """Fits the cost model to the observed window and plans with the result from now on.

        Deterministic: the same observations and refits give the same model, bit for bit,
        on every rank and platform. The prior is the model this scheduler planned with before
        its first ``observe``; each fit is pulled toward the previous fit (the prior at
        first), so what the window cannot identify stays where the last fit put it; a fit no
        better than the prior on the window keeps the prior (``Refit.kept_prior``). Plans
        made before are unchanged.

        Returns
        -------
        Refit
            The new model, the previous one, the fitted coefficients and the fit error.

        Example
        -------
        >>> import skrull
        >>> s = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64)
        >>> refit = s.refit()
        >>> refit.model == s.cost_model, refit.changed
        (True, False)
        """
        with self._lock:
            previous = self.cost_model
            if self._window is None:
                self._window = Window(self._refit_settings, self._c_config,
                                      self.config.cost_model)
            prior = self._window.prior
            base = prior if prior is not None else previous
            model, report = self._window.solve(base)
            frozen = model._frozen_copy()
            if frozen != previous:
                self._set_cost_model(frozen)
            return report_to_refit(report, self.cost_model, previous)

    def _set_cost_model(self, frozen: CostModel) -> None:
        """Plans with ``frozen`` (a read-only CostModel) from now on: the configuration, its
        C struct and the prepared setup change together (call under the lock). The new setup
        is prepared before anything is replaced, so a failure leaves the scheduler as it was."""
        config = dataclasses.replace(self.config, cost_model=frozen)
        c_config = _ffi.skrull_config.from_buffer_copy(self._c_config)
        c_config.cost_model = ctypes.addressof(frozen._c)
        prepared = Prepared(c_config)
        self.config, self._c_config, self._prepared = config, c_config, prepared

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


def _rebuild_scheduler(dp: int, cp: int, bucket_tokens: int, kwargs: dict[str, Any]) -> Scheduler:
    return Scheduler(dp, cp, bucket_tokens, **kwargs)


class _SchedulerOf:
    """Pickles as a Scheduler of one configuration, nothing else (a plan's scheduler)."""

    def __init__(self, config: _config.Config, capacity: int) -> None:
        self.config, self.capacity = config, capacity

    def __reduce__(self) -> tuple[Any, ...]:
        return config_reduce(self.config, self.capacity)


def config_reduce(c: _config.Config, capacity: int,
                  refit: Optional[RefitSettings] = None) -> tuple[Any, tuple[Any, ...]]:
    """(rebuild, args) of a Scheduler of configuration ``c`` (its buffers made anew)."""
    kwargs = dict(model=c.model, policy=c.policy, victim=c.victim, flops=c.flops,
                  shard_padding=c.shard_padding, max_micro_batches=c.max_micro_batches,
                  pad_multiple=c.pad_multiple, pad_local=c.pad_local, lockstep=c.lockstep,
                  cost_model=c.cost_model, subgroups=c.subgroups, fill_empty=c.fill_empty,
                  micro_batches=c.micro_batches, chunk_size=c.chunk_size,
                  chunk_keep=c.chunk_keep, chunk_state_permille=c.chunk_state_permille,
                  sync=c.sync,
                  max_sequences=max(capacity, 1))
    if refit is not None and refit != RefitSettings():
        kwargs["refit"] = refit
    return (_rebuild_scheduler, (c.dp, c.cp, c.bucket_tokens, kwargs))


def _refit_settings(refit: Any) -> RefitSettings:
    if refit is None:
        return RefitSettings()
    if isinstance(refit, RefitSettings):
        return refit
    if isinstance(refit, Mapping):
        return RefitSettings(**refit)
    raise make_error(Status.INVALID_ARG, f"refit must be a skrull.RefitSettings or a dict of "
                     f"its fields, got {_short(refit)} ({type(refit).__name__})", ArgumentError,
                     field_name="refit")


def _timed_alike(c: _config.Config) -> _config.Config:
    """``c`` without what only decides how plans are made (the policy and its options, the
    cost model): plans of configurations equal here are timed by the same model, so one
    refit may pool them (e.g. every policy's steps on one machine)."""
    return dataclasses.replace(c, cost_model=None, policy="", victim="", max_micro_batches=0,
                               micro_batches=0, lockstep=False, fill_empty=False)


_LENGTHS_TYPES = "a one-dimensional sequence of integers (list, tuple, numpy or torch array)"


def _as_lengths(lengths: Any) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 copy for C, the caller's values as int64/object). Values that do not fit
    ``uint32_t`` become ``2^32 - 1``, which C rejects as ``LENGTH_OUT_OF_RANGE`` in the same
    first-offender order as the same bits passed from C."""
    if lengths is None or isinstance(lengths, (str, bytes, Mapping, set, frozenset)) \
            or isinstance(lengths, (bool, float, int, np.generic)):
        hint = (f"; for one sequence pass [{lengths!r}]"
                if isinstance(lengths, (int, np.integer)) and not isinstance(lengths, bool)
                else "")
        raise make_error(Status.INVALID_ARG, f"lengths must be {_LENGTHS_TYPES}, got "
                         f"{_short(lengths)} ({type(lengths).__name__}){hint}", ArgumentError,
                         field_name="lengths")
    if hasattr(lengths, "detach") and hasattr(lengths, "cpu"):  # a torch tensor, on any device
        lengths = lengths.detach().cpu().numpy()
    elif hasattr(lengths, "__iter__") and not hasattr(lengths, "__len__"):
        lengths = list(lengths)  # an iterator or generator
    try:
        a = np.asarray(lengths)
    except (TypeError, ValueError):
        a = np.empty(len(lengths), dtype=object)
        a[:] = [v for v in lengths]
    if isinstance(lengths, (list, tuple)) and a.dtype.kind in "iu" and a.ndim == 1 \
            and a.size and a.min() <= 1:
        # numpy reads True and False as 1 and 0: look for bools only where those are.
        for i in np.flatnonzero(a <= 1).tolist():
            if isinstance(lengths[i], (bool, np.bool_)):
                raise make_error(Status.INVALID_ARG, f"lengths[{i}] is {lengths[i]!r} (bool): "
                                 "every length must be an integer number of tokens (a bool is "
                                 "not a count)", ArgumentError, index=i, field_name="lengths")
    if a.size == 0 and a.ndim <= 1:  # np.asarray([]) is float64: no value to check
        return np.empty(0, np.uint32), np.empty(0, np.int64)
    if a.ndim != 1 and a.dtype != object:
        raise make_error(Status.INVALID_ARG, f"lengths must be one-dimensional (one length per "
                         f"sequence), got shape {a.shape}", ArgumentError, field_name="lengths")
    if a.dtype == object or a.dtype == np.bool_ or a.dtype.kind not in "iu":
        # The caller's own elements where there are some (numpy turns [100, 1.5] into floats).
        flat = list(lengths) if isinstance(lengths, (list, tuple)) else \
            a.reshape(-1).tolist() if a.dtype != object else list(a.reshape(-1))
        for i, v in enumerate(flat):
            if isinstance(v, (bool, np.bool_)) or not hasattr(v, "__index__"):
                raise make_error(Status.INVALID_ARG, f"lengths[{i}] is {_short(v)} "
                                 f"({type(v).__name__}): every length must be an integer "
                                 f"number of tokens{_hint(v)}", ArgumentError, index=i,
                                 field_name="lengths")
        a = np.array([operator.index(v) for v in flat], dtype=object)
        if all(-(2**63) <= v < 2**63 for v in a):
            a = a.astype(np.int64)
    if a.dtype != object and (a.dtype.kind == "u" and a.dtype.itemsize <= 4
                              or 0 <= a.min() and a.max() <= _OUT_OF_RANGE):
        return a.astype(np.uint32), a  # astype copies: the plan owns its lengths
    fits = np.array([0 <= v <= _OUT_OF_RANGE for v in a], bool) if a.dtype == object \
        else (a >= 0) & (a <= _OUT_OF_RANGE)
    return np.where(fits, a, _OUT_OF_RANGE).astype(np.uint32), a


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _hint(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return " (a bool is not a count)"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return f" (use {int(value)}, or convert with np.asarray(lengths, dtype=np.int64))"
    if isinstance(value, (list, tuple, np.ndarray)):
        return " (lengths is one-dimensional: one integer per sequence)"
    return ""


def _batch_error(status: int, info: _ffi.skrull_error_info, lengths: np.ndarray,
                 c_config: _ffi.skrull_config) -> Error:
    """The exception for a failed ``skrull_schedule``, from the library's ``skrull_error_info``.
    A length that does not fit ``uint32_t`` went to C as ``2^32 - 1``; its ``value`` is the
    caller's own number."""
    override: dict[str, Any] = {}
    if (status == Status.LENGTH_OUT_OF_RANGE and info.status == status
            and 0 <= info.index < len(lengths)):
        override["value"] = int(lengths[info.index])
    return from_info(info, status, c_config=c_config, **override)
