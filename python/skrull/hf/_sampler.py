"""``SkrullBatchSampler``: transformers' ``BatchRebalanceSampler`` with a skrull plan."""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator, Sequence

import numpy as np
from transformers.trainer_pt_utils import BatchRebalanceSampler

from .._errors import BatchError
from .._plan import Plan
from .._scheduler import Scheduler
from .._window import Window


class PlannedMicroBatch(list[int]):
    """One micro-batch of one DP rank: its dataset indices (a plain ``list`` to the
    ``DataLoader``), with the global batch's plan. ``SkrullBatchSampler`` makes them.

    Parameters
    ----------
    iterable : iterable of int, optional
        The dataset indices, as for ``list``.

    Attributes
    ----------
    plan : Plan
        The global batch's plan.
    batch_indices : numpy.ndarray
        Dataset index of every plan sequence.
    dp_rank, micro_batch : int
        Which DP rank and which of its micro-batches.
    sequences : list of int
        The plan indices of this micro-batch's sequences.

    Example
    -------
    >>> from skrull.hf import SkrullBatchSampler
    >>> sampler = SkrullBatchSampler([5, 3, 4, 6, 2, 7], effective_batch_size=3,
    ...                              bucket_tokens=16, grad_accum=2, dp_size=1, rank=0,
    ...                              shuffle=False)
    >>> mb = next(iter(sampler))
    >>> list(mb), mb.dp_rank, mb.micro_batch, mb.sequences, mb.batch_indices.tolist()
    ([1, 2], 0, 0, [1, 2], [0, 1, 2])
    """

    plan: Plan
    batch_indices: np.ndarray
    dp_rank: int
    micro_batch: int
    sequences: list[int]


def scheduler_for_steps(dp: int, cp: int, bucket_tokens: int, micro_batches: int,
                        **kwargs: Any) -> Scheduler:
    """A ``Scheduler`` whose plans give every DP rank exactly ``micro_batches``
    micro-batches (``Scheduler(micro_batches=G)``: empty slots are filled by splitting the
    rank's multi-sequence micro-batches, sharded sequences first).

    Parameters
    ----------
    dp, cp, bucket_tokens : int
        As ``skrull.Scheduler``.
    micro_batches : int
        ``G``: micro-batches per DP rank (``gradient_accumulation_steps``).
    **kwargs
        Further ``skrull.Scheduler`` settings (``policy``, ``model``...).

    Returns
    -------
    Scheduler

    Raises
    ------
    ConfigError, ArgumentError
        As ``skrull.Scheduler``.

    Example
    -------
    >>> from skrull.hf import scheduler_for_steps
    >>> scheduler = scheduler_for_steps(dp=2, cp=1, bucket_tokens=64, micro_batches=2)
    >>> scheduler.plan([10, 20, 30]).micro_batches_per_dp.tolist()
    [2, 2]
    """
    return Scheduler(dp, cp, bucket_tokens, micro_batches=micro_batches, **kwargs)


def plan_for_steps(scheduler: Scheduler, lengths: Sequence[int] | np.ndarray,
                   micro_batches: int) -> Plan:
    """Plans one global batch, with an error that names the ``gradient_accumulation_steps``
    that fits.

    Parameters
    ----------
    scheduler : Scheduler
        Made by ``scheduler_for_steps``.
    lengths : sequence of int or numpy.ndarray
        Tokens of each sequence, in batch order.
    micro_batches : int
        The scheduler's ``micro_batches`` (for the message).

    Returns
    -------
    Plan

    Raises
    ------
    ValueError
        A batch that needs more than ``micro_batches`` micro-batches on some DP rank (the
        library's ``MICRO_BATCH_COUNT``); the message names the smallest
        ``gradient_accumulation_steps`` that fits.
    BatchError
        Any other error of ``Scheduler.plan``.

    Example
    -------
    >>> from skrull.hf import plan_for_steps, scheduler_for_steps
    >>> scheduler = scheduler_for_steps(dp=1, cp=1, bucket_tokens=16, micro_batches=1)
    >>> plan_for_steps(scheduler, [10, 10, 10], micro_batches=1)
    Traceback (most recent call last):
    ...
    ValueError: this global batch needs 3 micro-batches on some DP rank, ...
    """
    try:
        plan = scheduler.plan(lengths)
    except BatchError as exc:
        if exc.status == "MICRO_BATCH_COUNT":
            raise ValueError(
                f"this global batch needs {exc.value} micro-batches on some DP rank, more than "
                f"gradient_accumulation_steps = {micro_batches}: raise "
                f"gradient_accumulation_steps to at least {exc.value}, raise bucket_tokens, or "
                "lower the global batch size") from exc
        raise
    return plan


class SkrullBatchSampler(BatchRebalanceSampler):
    """transformers' ``BatchRebalanceSampler`` whose assignment is a skrull plan.

    Each global batch of ``effective_batch_size`` samples (shuffled per ``seed + epoch``, the
    same on every rank, as the base class does) is planned by skrull: the plan chooses each
    sample's DP rank and micro-batch under the ``bucket_tokens`` budget per GPU and
    micro-batch, and every DP rank gets exactly ``grad_accum`` micro-batches. Nothing is
    broadcast: every rank plans the same batch identically.

    ``set_epoch`` reshuffles; ``state_dict`` / ``load_state_dict`` save and restore the epoch
    and seed (the Trainer skips the batches a checkpoint already trained). ``len(sampler)``
    counts this DP rank's micro-batches per epoch.

    With ``outlier_delay=W`` the global batches go through a ``skrull.Window``
    (docs/outlier_delay.md): a sequence that alone outlasts its batch's fair share per DP rank
    may train up to ``W`` steps later, beside other such sequences; every sample still trains
    exactly once per epoch, and the last step drains the queue. ``state_dict`` then also holds
    the step and the queue, and ``load_state_dict`` makes the next ``__iter__`` resume the
    epoch there (the remaining steps are those the original would have yielded). With
    ``SkrullTrainer``, pass it as ``SkrullConfig(scheduler={"outlier_delay": W})``.

    Parameters
    ----------
    lengths : sequence of int
        Token count of every dataset sample.
    effective_batch_size : int
        Samples per optimizer step, over all DP ranks.
    bucket_tokens : int
        The most tokens one GPU holds in one micro-batch.
    grad_accum : int, optional
        Micro-batches per DP rank and step (``gradient_accumulation_steps``, default 1).
    dp_size, rank : int, optional
        DP size and this process's DP rank; default: from ``torch.distributed`` (world size
        // ``cp``, rank // ``cp``), or 1 and 0 without a process group.
    cp : int, optional
        CP ranks per DP rank (ranks are laid out ``dp_rank * cp + cp_rank``; default 1).
    shuffle, seed, drop_last : optional
        As in ``BatchRebalanceSampler`` (defaults True, 42, True).
    outlier_delay : int, optional
        ``W``, 0 (default: off) to 64: the most steps an outlier sequence may be delayed.
    **scheduler_kwargs
        Passed to ``skrull.Scheduler`` (``policy``, ``model``, ``cost_model``,
        ``shard_padding``...).

    Yields
    ------
    PlannedMicroBatch
        This DP rank's micro-batches, ``grad_accum`` per step. One is empty only when its DP
        rank holds fewer samples than ``grad_accum`` (``SkrullCollator`` turns it into one
        zero-loss padding token).

    Raises
    ------
    ValueError
        Without ``dp_size``: a world size that is not a multiple of ``cp``; while iterating:
        a global batch that needs more than ``grad_accum`` micro-batches (``plan_for_steps``).

    Example
    -------
    >>> from skrull.hf import SkrullBatchSampler
    >>> sampler = SkrullBatchSampler([5, 3, 4, 6, 2, 7], effective_batch_size=3,
    ...                              bucket_tokens=16, grad_accum=2, dp_size=1, rank=0,
    ...                              shuffle=False)
    >>> [(list(mb), mb.micro_batch) for mb in sampler]    # 2 steps x 2 micro-batches
    [([1, 2], 0), ([0], 1), ([4, 5], 0), ([3], 1)]
    """

    def __init__(self, lengths: Sequence[int], effective_batch_size: int, bucket_tokens: int,
                 grad_accum: int = 1, *, dp_size: int | None = None, rank: int | None = None,
                 cp: int = 1, shuffle: bool = True, seed: int = 42, drop_last: bool = True,
                 outlier_delay: int = 0, **scheduler_kwargs: Any) -> None:
        world, global_rank = _world()
        if dp_size is None:
            if world % cp:
                raise ValueError(f"world size {world} is not a multiple of cp = {cp}")
            dp_size = world // cp
        if rank is None:
            rank = global_rank // cp
        for name, value in (("effective_batch_size", effective_batch_size),
                            ("grad_accum", grad_accum), ("dp_size", dp_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not 0 <= rank < dp_size:
            raise ValueError(f"rank must be from 0 to dp_size - 1 = {dp_size - 1}, got {rank}")
        # transformers' sampler asserts effective_batch_size >= dp_size * grad_accum (each of
        # its groups needs a sample). A skrull plan gives a DP rank with fewer samples than
        # grad_accum empty micro-batches instead (SkrullCollator runs them), so every size is
        # valid here: the base class is built with sizes it accepts and given the real ones.
        super().__init__(list(lengths), effective_batch_size, 1, 1,
                         shuffle=shuffle, seed=seed, rank=0, drop_last=drop_last)
        self.dp_size, self.grad_accum, self.rank = dp_size, grad_accum, rank
        # DDP with gradient accumulation under no_sync (SkrullTrainer): CP ranks meet only in
        # micro-batches holding a sharded sequence; balanced plans for that.
        scheduler_kwargs.setdefault("sync", "sharded")
        self.cp = cp
        self.bucket_tokens = bucket_tokens
        self.scheduler = scheduler_for_steps(dp_size, cp, bucket_tokens, grad_accum,
                                             **scheduler_kwargs)
        self.last_plan: Plan | None = None
        #: With ``record_plans`` on, every plan made as ``(epoch, global batch of the epoch,
        #: plan)``, oldest first, for the trainer to take when the step that ran it ends
        #: (``SkrullConfig.calibrate_every``).
        self.plans: deque[tuple[int, int, Plan]] = deque()
        self.record_plans = False
        self._batch_in_epoch = 0
        # Checked now (a bad W is a ConfigError here, not at the first step).
        self.outlier_delay = Window(self.scheduler, outlier_delay, 1).max_delay
        #: With ``outlier_delay``: (step, queue) where the epoch resumes: before the step being
        #: yielded, and after it once all its micro-batches are out.
        self._cursor: tuple[int, list[list[int]]] = (0, [])
        self._resume: dict[str, Any] | None = None

    def __iter__(self) -> Any:
        """This DP rank's micro-batches of the epoch (``set_epoch``), as the base class
        draws them (through the outlier-delay window with ``outlier_delay``)."""
        self._batch_in_epoch = 0
        if self.outlier_delay:
            return self._delayed()
        return super().__iter__()  # type: ignore[no-untyped-call]

    def _global_batches(self) -> list[list[int]]:
        """The epoch's global batches of dataset indices, drawn as the base class draws them
        (shuffled per ``seed + epoch``; with ``drop_last=False`` the tail padded by repeating
        the epoch's first samples)."""
        import torch
        n, size = len(self.lengths), self.effective_batch_size
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        batches = []
        for gb in range(self.num_global_batches):
            batch = order[gb * size:(gb + 1) * size]
            k = self.dp_size * self.grad_accum
            if self.has_tail and gb == self.num_global_batches - 1 and len(batch) < k:
                pad = k - len(batch)
                batch = batch + (order * -(-pad // len(order)))[:pad]
            batches.append(batch)
        return batches

    def _delayed(self) -> Iterator[PlannedMicroBatch]:
        """The epoch through the outlier-delay window, from the resumed step if any."""
        batches = self._global_batches()
        flat = [i for b in batches for i in b]   # position in push order -> dataset index
        resume, self._resume = self._resume, None
        start, queue = 0, []
        if resume is not None and resume["epoch"] == self.epoch:
            start, queue = int(resume["step"]), [list(q) for q in resume["queue"]]
        first = sum(len(b) for b in batches[:start])
        window = Window(self.scheduler, self.outlier_delay, max(map(len, batches), default=1),
                        first_step=start, first_position=first,
                        queue=[(p, n, o) for p, n, o in queue])
        pushed = start
        for t in range(start, len(batches)):
            while pushed < len(batches) and pushed <= t + self.outlier_delay:
                window.push([self.lengths[i] for i in batches[pushed]])
                pushed += 1
            self._cursor = (t, queue)
            step = window.step()
            queue = [[d.position, d.length, d.origin] for d in window.queue()]
            self._batch_in_epoch = t
            mbs = self._assign([flat[p] for p in step.positions.tolist()],
                               step.lengths.tolist())[self.rank]
            for ga, mb in enumerate(mbs):
                if ga == len(mbs) - 1:   # the step is out: resume after it
                    self._cursor = (t + 1, queue)
                yield mb
        self._cursor = (len(batches), [])

    def plan(self, lengths: Sequence[int]) -> Plan:
        """The plan of one global batch (``plan_for_steps`` with this sampler's scheduler).

        Parameters
        ----------
        lengths : sequence of int
            Tokens of each sequence, in batch order.

        Returns
        -------
        Plan
            Exactly ``grad_accum`` micro-batches per DP rank.

        Raises
        ------
        ValueError
            The batch needs more than ``grad_accum`` micro-batches on some DP rank.

        Example
        -------
        >>> from skrull.hf import SkrullBatchSampler
        >>> sampler = SkrullBatchSampler([5, 3, 4, 6, 2, 7], effective_batch_size=3,
        ...                              bucket_tokens=16, grad_accum=2, dp_size=1, rank=0,
        ...                              shuffle=False)
        >>> sampler.plan([5, 3, 4]).micro_batches_per_dp.tolist()
        [2]
        """
        return plan_for_steps(self.scheduler, lengths, self.grad_accum)

    def _assign(self, indices: list[int],
                lengths: list[int]) -> list[list[PlannedMicroBatch]]:
        plan = self.plan(lengths)
        self.last_plan = plan
        if self.record_plans:
            self.plans.append((self.epoch, self._batch_in_epoch, plan))
        self._batch_in_epoch += 1
        batch = np.asarray(indices, np.int64)
        out = []
        for d in range(self.dp_size):
            slots = [plan.members_of(d, m).tolist() for m in range(self.grad_accum)]
            ranked = []
            for m, seqs in enumerate(slots):
                mb = PlannedMicroBatch(int(i) for i in batch[seqs])
                mb.plan, mb.batch_indices, mb.dp_rank, mb.micro_batch = plan, batch, d, m
                mb.sequences = [int(s) for s in seqs]
                ranked.append(mb)
            out.append(ranked)
        return out

    def state_dict(self) -> dict[str, Any]:
        """``epoch`` and ``seed``: with the step count, all that the order depends on. With
        ``outlier_delay`` also ``step`` (the next step to yield: one whose micro-batches are
        partly out is yielded again) and ``queue`` (the deferred samples as ``[position,
        length, origin]``).

        Returns
        -------
        dict
            ``{"epoch": ..., "seed": ...}`` (``load_state_dict`` takes it).

        Example
        -------
        >>> from skrull.hf import SkrullBatchSampler
        >>> sampler = SkrullBatchSampler([5, 3, 4, 6], 2, bucket_tokens=16, dp_size=1, rank=0)
        >>> sampler.set_epoch(3)
        >>> sampler.state_dict()
        {'epoch': 3, 'seed': 42}
        """
        if not self.outlier_delay:
            return {"epoch": self.epoch, "seed": self.seed}
        step, queue = self._cursor
        return {"epoch": self.epoch, "seed": self.seed, "outlier_delay": self.outlier_delay,
                "step": step, "queue": [list(q) for q in queue]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()``. With ``step`` and ``queue`` (``outlier_delay``), the next
        ``__iter__`` resumes that epoch at that step with that queue.

        Parameters
        ----------
        state : dict
            ``epoch`` and ``seed`` (and ``step``, ``queue``), as ``state_dict`` returns them.

        Example
        -------
        >>> from skrull.hf import SkrullBatchSampler
        >>> sampler = SkrullBatchSampler([5, 3, 4, 6], 2, bucket_tokens=16, dp_size=1, rank=0)
        >>> sampler.load_state_dict({"epoch": 3, "seed": 7})
        >>> sampler.epoch, sampler.seed
        (3, 7)
        """
        self.epoch, self.seed = int(state["epoch"]), int(state["seed"])
        if "step" in state:
            self._cursor = (int(state["step"]), [list(q) for q in state["queue"]])
            self._resume = {"epoch": self.epoch, "step": self._cursor[0],
                            "queue": self._cursor[1]}


def _world() -> tuple[int, int]:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
