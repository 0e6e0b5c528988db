"""``SkrullPackingScheduler``: skrull plans behind Megatron-Core's packing-scheduler interface.

Megatron-LM main (not a PyPI release) has ``BasePackingScheduler`` and ``DpBalancedScheduler``
in ``megatron/core/datasets/data_schedule.py``. Its ``run()`` gathers the global batch's
``(sample id, length)`` pairs, asks ``get_groups_and_subsamples`` for
``sample_id_groups[micro_batch][dp_rank * cp + cp_rank]`` (lists of sample ids), checks that
every sample is placed, reroutes the samples and packs each list. This class answers that call
with a skrull plan and, when Megatron is importable, subclasses ``DpBalancedScheduler`` to
reuse its ``run()``; without Megatron it still plans (and is tested) on its own.

What ``run()`` relies on, and this class guarantees: every id in exactly one micro-batch of
one DP rank, on one CP rank, on all of them, or on an aligned sub-group; ``dp * cp`` lists per
row; no empty list where a DP rank holds at least as many sequences as rows (an empty row
crashes Megatron's packing: ``torch.cat(): expected a non-empty list``); a row count that is a
multiple of ``microbatch_group_size_per_vp_stage``. Megatron's fixed-CP path zigzags every
sequence a CP group holds, so it needs a policy that shards everything (``packed``, the
default, or ``deepspeed``); local placements need the two-call attention of docs/layout.md.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

from ._errors import BatchError
from ._plan import Plan
from ._scheduler import Scheduler

try:  # Megatron-LM main; absent from every PyPI release we know of
    from megatron.core.datasets.data_schedule import DpBalancedScheduler as _Base
except ImportError:  # pragma: no cover - depends on the environment
    _Base = object

#: The sample keys ``DpBalancedScheduler.get_required_sample_keys`` returns on Megatron main.
REQUIRED_SAMPLE_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "original_seq_len",
                        "padded_seq_len")


class SkrullPackingScheduler(_Base):  # type: ignore[misc]
    """Megatron packing scheduler whose placement is a skrull plan.

    Parameters
    ----------
    max_seqlen_per_dp_cp_rank : int
        Token budget of one GPU in one micro-batch (skrull's ``bucket_tokens``).
    cp_size, dp_size : int
        Context- and data-parallel sizes.
    microbatch_group_size_per_vp_stage : int, optional
        With virtual pipeline stages, the micro-batch count is a multiple of it (None or 0:
        any count).
    policy : str, optional
        skrull ``Scheduler`` policy (default ``"packed"``: every sequence sharded).
    tp_size : int, optional
        Tensor-parallel size: sharded sequences are padded to a multiple of ``2 * cp * tp``
        (``pad_multiple``; Megatron's THD format with sequence parallelism).
    shard_padding : str, optional
        skrull ``Scheduler`` setting (default ``"zigzag"``).
    allow_local : bool, optional
        With ``cp > 1``, accept plans that place a sequence on fewer than all CP ranks (whole
        on one, or over a sub-group). Megatron's fixed-CP path needs every CP rank of a DP
        rank to hold the same sequences, so this is off: such a plan raises ``ValueError``.
        Turn it on only with attention that runs skrull layouts (or Megatron's hybrid CP).
    scheduler_kwargs : dict, optional
        Further ``skrull.Scheduler`` settings (``model``, ``cost_model``...); the plans are
        always lockstep with empty slots filled.
    **kwargs
        Whatever newer Megatron versions pass to every scheduler (``max_num_seqs`` ...); kept
        in ``self.extra`` and forwarded to ``DpBalancedScheduler`` where it accepts them.

    Raises
    ------
    ConfigError, ArgumentError
        A setting ``skrull.Scheduler`` refuses.

    Example
    -------
    >>> from skrull.megatron import SkrullPackingScheduler
    >>> scheduler = SkrullPackingScheduler(64, cp_size=2, dp_size=2)
    >>> scheduler.get_groups_and_subsamples([("a", 40), ("b", 30), ("c", 20), ("d", 10)])
    [[['a', 'b'], ['a', 'b'], ['c', 'd'], ['c', 'd']]]
    """

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None = None, *,
                 policy: str = "packed", tp_size: int = 1, shard_padding: str = "zigzag",
                 allow_local: bool = False, scheduler_kwargs: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        if _Base is not object:
            accepted = inspect.signature(_Base.__init__).parameters
            passed = {k: v for k, v in kwargs.items() if k in accepted}
            super().__init__(max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                             microbatch_group_size_per_vp_stage, **passed)
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
        self.cp_size, self.dp_size = cp_size, dp_size
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.extra = dict(kwargs)
        self.allow_local = allow_local
        self._settings = dict(policy=policy, shard_padding=shard_padding,
                              pad_multiple=2 * cp_size * tp_size, **(scheduler_kwargs or {}))
        self.scheduler = Scheduler(dp_size, cp_size, max_seqlen_per_dp_cp_rank,
                                   lockstep=True, fill_empty=True, **self._settings)
        self._fixed: dict[int, Scheduler] = {}
        self.last_plan: Plan | None = None

    def get_required_sample_keys(self) -> list[str]:
        """The per-sample keys ``run()`` needs (``DpBalancedScheduler``'s).

        Returns
        -------
        list of str
            Megatron's keys when it is importable, else ``REQUIRED_SAMPLE_KEYS``.

        Example
        -------
        >>> from skrull.megatron import SkrullPackingScheduler
        >>> keys = SkrullPackingScheduler(64, cp_size=1, dp_size=1).get_required_sample_keys()
        >>> "tokens" in keys and "position_ids" in keys
        True
        """
        if _Base is not object:
            keys: list[str] = super().get_required_sample_keys()
            return keys
        return list(REQUIRED_SAMPLE_KEYS)

    def plan(self, lengths: Sequence[int]) -> Plan:
        """The plan of one global batch: lockstep, empty slots filled, its micro-batch count
        rounded up to a multiple of ``microbatch_group_size_per_vp_stage``.

        Parameters
        ----------
        lengths : sequence of int
            Tokens of each sequence, in batch order.

        Returns
        -------
        Plan
            Also kept as ``self.last_plan``.

        Raises
        ------
        BatchError
            As ``skrull.Scheduler.plan`` (a sequence longer than the budget allows...).
        ValueError
            No plan with the rounded-up micro-batch count (not expected).

        Example
        -------
        >>> from skrull.megatron import SkrullPackingScheduler
        >>> scheduler = SkrullPackingScheduler(64, cp_size=1, dp_size=1,
        ...                                    microbatch_group_size_per_vp_stage=4)
        >>> scheduler.plan([40, 30, 20]).num_micro_batches   # 2 needed, rounded up to 4
        4
        """
        plan = self.scheduler.plan(lengths)
        group = self.microbatch_group_size_per_vp_stage or 1
        count = -(-plan.num_micro_batches // group) * group
        if count != plan.num_micro_batches:
            fixed = self._fixed.get(count)
            if fixed is None:
                fixed = Scheduler(self.dp_size, self.cp_size, self.max_seqlen_per_dp_cp_rank,
                                  micro_batches=count, **self._settings)
                self._fixed[count] = fixed
            try:
                plan = fixed.plan(lengths)
            except BatchError as exc:  # pragma: no cover - a larger count always fits
                raise ValueError(f"no plan with {count} micro-batches: {exc}") from exc
        self.last_plan = plan
        return plan

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]
                                  ) -> list[list[list[Any]]]:
        """``sample_id_groups[micro_batch][dp_rank * cp + cp_rank]`` -> sample ids, from
        ``[(sample id, length)]``: the call Megatron's ``run()`` makes.

        Parameters
        ----------
        sample_id_seqlens : sequence of (id, int)
            ``(sample id, length)`` of every sample of the global batch.

        Returns
        -------
        list of list of list
            Per micro-batch, ``dp * cp`` lists of sample ids (a sharded sample is in the
            list of every CP rank that holds it).

        Raises
        ------
        ValueError
            With ``cp > 1``, a plan that places a sequence on fewer than all CP ranks (unless
            ``allow_local``), or that leaves a CP rank without a sequence where Megatron would
            pack an empty list.
        BatchError
            As ``plan``.

        Example
        -------
        >>> from skrull.megatron import SkrullPackingScheduler
        >>> scheduler = SkrullPackingScheduler(64, cp_size=2, dp_size=1)
        >>> scheduler.get_groups_and_subsamples([(7, 100), (8, 20)])   # both sharded
        [[[7, 8], [7, 8]]]
        """
        ids = [i for i, _ in sample_id_seqlens]
        plan = self.plan([int(n) for _, n in sample_id_seqlens])
        if self.cp_size > 1 and not self.allow_local and (plan.cp_size < self.cp_size).any():
            raise ValueError(
                f"policy {self._settings['policy']!r} placed sequences on fewer than all "
                f"{self.cp_size} CP ranks; Megatron's fixed-CP path needs every CP rank of a "
                "DP rank to hold the same sequences: use an all-sharded policy ('packed', "
                "'deepspeed'), or pass allow_local=True with attention that runs skrull "
                "layouts")
        groups = plan.to_megatron_groups(ids)
        for m, row in enumerate(groups):
            for g, held in enumerate(row):
                d = g // self.cp_size
                if not held and len(plan.dp_sequences(d)) >= len(groups):
                    raise ValueError(
                        f"micro-batch {m} leaves CP rank {g % self.cp_size} of DP rank {d} "
                        f"without a sequence (policy {self._settings['policy']!r} placed "
                        "sequences whole on single CP ranks); Megatron packs no empty list: "
                        "use an all-sharded policy ('packed', 'deepspeed')")
        return groups

    if _Base is object:
        def run(self, *args: Any, **kwargs: Any) -> Any:
            """Megatron's ``run()`` comes from ``DpBalancedScheduler`` (Megatron-LM main).

            Without Megatron this stand-in only raises.

            Parameters
            ----------
            *args, **kwargs
                Megatron's ``run()`` arguments; ignored.

            Raises
            ------
            NotImplementedError
                Always: Megatron-LM main is not importable.

            Example
            -------
            >>> from skrull.megatron import SkrullPackingScheduler
            >>> SkrullPackingScheduler(64, cp_size=1, dp_size=1).run()
            Traceback (most recent call last):
            ...
            NotImplementedError: run() needs Megatron-LM main ...
            """
            raise NotImplementedError("run() needs Megatron-LM main (DpBalancedScheduler); "
                                      "get_groups_and_subsamples works without it")
