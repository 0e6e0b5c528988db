"""``OnlineCalibration``: time every micro-batch, all-gather the times, refit the cost model
every ``every`` steps, identically on every rank."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any, Callable, ContextManager, Optional

import numpy as np

from .._plan import Plan
from .._refit import Refit
from .._scheduler import Scheduler
from ._timing import DeviceLike, MicroBatchTimer, gather_step

#: The logger ``OnlineCalibration`` writes to by default.
LOGGER = logging.getLogger("skrull.calibration")


class OnlineCalibration:
    """The automatic mode: the cost model refits itself from the job's measured times.

    Each step, every rank times its micro-batches (``time()``), then calls ``step(plan)``:
    the times are all-gathered over the job (``gather_times``, so every rank holds the same
    ``[micro_batch][dp][cp]`` array) with the step's wall time on its slowest rank (from the
    end of the previous ``step`` call, so the optimizer step, data loading and the loop are
    in it; the first step after a start has none), handed to ``scheduler.observe``, which
    measures the per-step cost from the wall time, and every ``every``
    steps ``scheduler.refit()`` fits a new model that the scheduler plans with from then on.
    Every rank feeds the same numbers to the same deterministic fit, so every rank gets the
    same model bit for bit and keeps planning identically, without a broadcast. When the
    model changes it logs one line (the fitted coefficients and the fit error) and calls
    ``callback(refit)``.

    Turn it off with ``enabled=False`` or ``disable()`` on every rank at the same step: it
    then times nothing, gathers nothing and leaves the scheduler's model where it is.

    Parameters
    ----------
    scheduler : Scheduler
        The scheduler that plans the steps (every rank's own, built identically).
    every : int, optional
        Refit every ``every`` observed steps (default 10), at least 1.
    callback : callable, optional
        Called with the ``Refit`` whenever the model changes.
    logger : logging.Logger, optional
        Where the line goes (default: ``logging.getLogger("skrull.calibration")``, level
        INFO).
    group : process group, optional
        The ``dp * cp`` ranks of the plans (ranks ``dp_rank * cp + cp_rank``); default: the
        whole job.
    device : torch.device or str, optional
        Where the micro-batches run: CUDA events time a CUDA device, the monotonic clock
        anything else (default: the CPU).
    enabled : bool, optional
        Start on (default) or off.

    Raises
    ------
    ValueError
        ``every`` below 1.

    Example
    -------
    The example trains under ``torchrun`` (``step`` is a collective), so it is not run as a
    doctest; ``python/tests/test_online_calibration.py`` runs it on four gloo processes.

    >>> import skrull
    >>> from skrull.torch import OnlineCalibration, collate
    >>> scheduler = skrull.Scheduler(dp=2, cp=2, bucket_tokens=4096, lockstep=True)
    >>> online = OnlineCalibration(scheduler, every=5)
    >>> for lengths, samples in batches:                    # doctest: +SKIP
    ...     plan = scheduler.plan(lengths)
    ...     for mb in collate(plan, samples, dp_rank, cp_rank):
    ...         with online.time():
    ...             loss = packed_loss(model.forward_packed(mb, group), mb)
    ...             loss.backward()
    ...     optimizer.step()
    ...     online.step(plan)
    """

    def __init__(self, scheduler: Scheduler, every: int = 10, *,
                 callback: Optional[Callable[[Refit], Any]] = None,
                 logger: Optional[logging.Logger] = None, group: Any = None,
                 device: DeviceLike = None, enabled: bool = True) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"OnlineCalibration: every={every!r} must be an integer of at "
                             "least 1 (refit every that many steps)")
        self.scheduler, self.every, self.callback = scheduler, every, callback
        self.logger = logger if logger is not None else LOGGER
        self.group = group
        self.timer = MicroBatchTimer(device)
        self.enabled = bool(enabled)
        #: Steps ended so far (each observed).
        self.steps = 0
        #: The last refit (None before the first).
        self.last_refit: Optional[Refit] = None
        #: The last step's gathered times (None before the first step).
        self.last_times: Optional[np.ndarray] = None
        #: Steps whose plan ran chunked sequences: observed, their chunked GPUs' micro-batches
        #: part of the step's time but not fitted (the refit does not model chunked passes).
        self.chunked_steps = 0
        #: The last step's wall time on its slowest rank (NaN when not measured).
        self.last_step_time = math.nan
        self._last_end: Optional[float] = None

    def disable(self) -> None:
        """Stops timing, gathering and refitting (call it on every rank at the same step).

        Example
        -------
        >>> import skrull
        >>> from skrull.torch import OnlineCalibration
        >>> online = OnlineCalibration(skrull.Scheduler(dp=1, cp=1, bucket_tokens=64))
        >>> online.disable(); online.enabled
        False
        """
        self.enabled = False
        self.timer.collect()
        self._last_end = None

    def enable(self) -> None:
        """Starts again after ``disable`` (on every rank at the same step).

        Example
        -------
        >>> import skrull
        >>> from skrull.torch import OnlineCalibration
        >>> online = OnlineCalibration(skrull.Scheduler(dp=1, cp=1, bucket_tokens=64),
        ...                            enabled=False)
        >>> online.enable(); online.enabled
        True
        """
        self.enabled = True
        self._last_end = None

    def time(self) -> ContextManager[None]:
        """Times one micro-batch: wrap its forward and backward.

        Returns
        -------
        context manager
            ``MicroBatchTimer.time()``, or a no-op when disabled.

        Example
        -------
        >>> import skrull
        >>> from skrull.torch import OnlineCalibration
        >>> online = OnlineCalibration(skrull.Scheduler(dp=1, cp=1, bucket_tokens=64))
        >>> with online.time():
        ...     pass
        >>> len(online.timer)
        1
        """
        if not self.enabled:
            return contextlib.nullcontext()
        return self.timer.time()

    def step(self, plan: Plan, step_time: Optional[float] = None) -> Optional[Refit]:
        """Ends a step: gathers its times, observes them, and refits every ``every`` steps.

        A collective over ``group``: every rank calls it after the step's last micro-batch,
        with the step's plan.

        Parameters
        ----------
        plan : Plan
            The plan this step ran (made by ``scheduler``).
        step_time : float, optional
            This rank's seconds for the whole step, when the caller times it; default: the
            time since the previous ``step`` call returned (none on the first step after a
            start or ``enable``). The slowest rank's is observed.

        Returns
        -------
        Refit or None
            The refit when this step made one, else None (and None when disabled). In a
            step whose plan runs chunked sequences, the micro-batches of the GPUs that run
            them count in the step's time but are not fitted (the refit does not model
            chunked passes yet; ``chunked_steps`` counts such steps, the refit's ``skipped``
            their times).

        Raises
        ------
        ValueError
            A rank timed a number of micro-batches other than its DP rank runs
            (``gather_times``; raised on every rank).
        skrull.Error
            As ``Scheduler.observe`` and ``Scheduler.refit``.

        Example
        -------
        One process (a group of one rank, DP 1 x CP 1); the times are too few to move the
        model.

        >>> import os, tempfile, torch, torch.distributed as dist, skrull
        >>> from skrull.torch import OnlineCalibration
        >>> path = os.path.join(tempfile.mkdtemp(), "rendezvous")
        >>> dist.init_process_group("gloo", init_method=f"file://{path}", rank=0,
        ...                         world_size=1)
        >>> scheduler = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64)
        >>> online = OnlineCalibration(scheduler, every=1)
        >>> plan = scheduler.plan([30, 20])
        >>> for _ in range(plan.num_micro_batches):
        ...     with online.time():
        ...         pass
        >>> refit = online.step(plan)
        >>> online.steps, online.last_times.shape
        (1, (1, 1, 1))
        >>> dist.destroy_process_group()
        """
        if not self.enabled:
            return None
        local = self.timer.collect()  # on a GPU: waits for the last micro-batch's event
        if step_time is None:
            end = time.perf_counter()
            step_time = end - self._last_end if self._last_end is not None else math.nan
        times, wall = gather_step(local, plan, self.group, step_time)
        self.last_times, self.last_step_time = times, wall
        if plan.summary.chunked:
            self.chunked_steps += 1
        self.scheduler.observe(plan, times, step_time=wall)
        self.steps += 1
        if self.steps % self.every:
            self._last_end = time.perf_counter()
            return None
        refit = self.scheduler.refit()
        self.last_refit = refit
        if refit.changed:
            self.logger.info("skrull: %s", refit.describe())
            if self.callback is not None:
                self.callback(refit)
        self._last_end = time.perf_counter()
        return refit
