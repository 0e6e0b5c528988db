"""Per-micro-batch timing on each GPU, and the all-gather that gives every rank the job's
``[micro_batch][dp][cp]`` array of measured times."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Union

import numpy as np
import torch
import torch.distributed as dist

from .._plan import Plan
from ._dist import collective_device

DeviceLike = Union[torch.device, str, None]


class MicroBatchTimer:
    """Times the forward + backward of each micro-batch this GPU runs, in order.

    On a CUDA device every micro-batch is bracketed by two CUDA events recorded on the
    current stream (``torch.cuda.Event(enable_timing=True)``): timing adds no
    synchronisation to the step; ``collect`` waits for the last event and reads the elapsed
    times. Elsewhere it reads the monotonic clock (``time.perf_counter_ns``) around the
    micro-batch, which on the CPU is the time its work took.

    Parameters
    ----------
    device : torch.device or str, optional
        Where the micro-batches run: a CUDA device times with CUDA events, anything else
        (default: the CPU) with the monotonic clock.

    Example
    -------
    >>> import torch
    >>> from skrull.torch import MicroBatchTimer
    >>> timer = MicroBatchTimer()
    >>> for n in (8, 16):
    ...     with timer.time():
    ...         x = torch.ones(n, requires_grad=True)
    ...         (x * x).sum().backward()
    >>> seconds = timer.collect()
    >>> seconds.shape, seconds.dtype, bool((seconds > 0).all()), len(timer)
    ((2,), dtype('float64'), True, 0)
    """

    def __init__(self, device: DeviceLike = None) -> None:
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.device = dev
        self.cuda = dev.type == "cuda"
        self._events: list[tuple[Any, Any]] = []
        self._seconds: list[float] = []
        self._open: Optional[Any] = None

    def __len__(self) -> int:
        """Micro-batches timed since the last ``collect``."""
        return len(self._events) if self.cuda else len(self._seconds)

    def start(self) -> None:
        """Starts timing one micro-batch (``time()`` is the context-manager form).

        Raises
        ------
        RuntimeError
            A micro-batch is already being timed.

        Example
        -------
        >>> from skrull.torch import MicroBatchTimer
        >>> timer = MicroBatchTimer()
        >>> timer.start(); timer.stop()
        >>> len(timer)
        1
        """
        if self._open is not None:
            raise RuntimeError("MicroBatchTimer.start: the previous micro-batch was not "
                               "stopped (call stop() after its backward)")
        if self.cuda:
            with torch.cuda.device(self.device):
                event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                event.record()
            self._open = event
        else:
            self._open = time.perf_counter_ns()

    def stop(self) -> None:
        """Stops timing the current micro-batch.

        Raises
        ------
        RuntimeError
            No micro-batch is being timed.

        Example
        -------
        >>> from skrull.torch import MicroBatchTimer
        >>> timer = MicroBatchTimer()
        >>> timer.stop()
        Traceback (most recent call last):
        ...
        RuntimeError: MicroBatchTimer.stop: no micro-batch is being timed (call start() first)
        """
        if self._open is None:
            raise RuntimeError("MicroBatchTimer.stop: no micro-batch is being timed (call "
                               "start() first)")
        if self.cuda:
            with torch.cuda.device(self.device):
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end.record()
            self._events.append((self._open, end))
        else:
            self._seconds.append((time.perf_counter_ns() - self._open) * 1e-9)
        self._open = None

    @contextmanager
    def time(self) -> Iterator[None]:
        """Times the block as one micro-batch (its forward and backward).

        Yields
        ------
        None
            Run the micro-batch inside the ``with`` block. A block that raises is not
            counted.

        Example
        -------
        >>> from skrull.torch import MicroBatchTimer
        >>> timer = MicroBatchTimer()
        >>> with timer.time():
        ...     pass
        >>> len(timer)
        1
        """
        self.start()
        try:
            yield
        except BaseException:
            self._open = None
            raise
        self.stop()

    def collect(self) -> np.ndarray:
        """The times of the micro-batches timed since the last call, and a fresh start.

        Returns
        -------
        numpy.ndarray
            float64 seconds, one per micro-batch, in the order they ran. On CUDA this waits
            for the last micro-batch's end event.

        Raises
        ------
        RuntimeError
            A micro-batch is still being timed.

        Example
        -------
        >>> from skrull.torch import MicroBatchTimer
        >>> MicroBatchTimer().collect().tolist()
        []
        """
        if self._open is not None:
            raise RuntimeError("MicroBatchTimer.collect: a micro-batch is still being timed "
                               "(call stop() first)")
        if self.cuda:
            if self._events:
                self._events[-1][1].synchronize()
            # elapsed_time is in milliseconds.
            out = np.array([s.elapsed_time(e) * 1e-3 for s, e in self._events], np.float64)
            self._events = []
        else:
            out = np.array(self._seconds, np.float64)
            self._seconds = []
        return out


def gather_times(local: Any, plan: Plan, group: Any = None) -> np.ndarray:
    """Every GPU's micro-batch times, on every rank: one all-gather over ``group``.

    Ranks are laid out ``dp_rank * cp + cp_rank`` over ``group`` (the whole job by
    default), as ``cp_group`` assumes. Every rank of ``group`` must call it, with the same
    plan. Each rank sends its count of times with them, so a rank with the wrong count makes
    every rank raise the same error (none is left waiting in a collective). Without a process
    group (one GPU: DP 1 x CP 1) it only reshapes ``local``.

    Parameters
    ----------
    local : sequence of float or numpy.ndarray
        This GPU's seconds, one per micro-batch its DP rank runs
        (``plan.micro_batches_per_dp[dp_rank]``; ``MicroBatchTimer.collect``).
    plan : Plan
        The step's plan (every rank's own copy: the plans are identical).
    group : process group, optional
        ``dp * cp`` ranks; default: the whole job.

    Returns
    -------
    numpy.ndarray
        float64 ``[plan.num_micro_batches][dp][cp]``, identical on every rank; NaN where a
        DP rank runs fewer micro-batches than the longest (plans without ``lockstep``).

    Raises
    ------
    ValueError
        ``group`` does not hold ``dp * cp`` ranks, or some rank gave a number of times other
        than its DP rank's micro-batch count (the message names the first such rank).

    Example
    -------
    The example needs an initialised ``torch.distributed`` process group of ``dp * cp``
    ranks (e.g. under ``torchrun``), so it is not run as a doctest.

    >>> import skrull, torch.distributed as dist
    >>> from skrull.torch import MicroBatchTimer, gather_times
    >>> dist.init_process_group("gloo")                    # doctest: +SKIP
    >>> plan = skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, lockstep=True).plan(
    ...     [30, 20, 100, 10])                             # doctest: +SKIP
    >>> times = gather_times(timer.collect(), plan)        # doctest: +SKIP
    >>> times.shape                                        # doctest: +SKIP
    (1, 2, 2)
    """
    return gather_step(local, plan, group)[0]


def gather_step(local: Any, plan: Plan, group: Any = None,
                step_time: float = float("nan")) -> tuple[np.ndarray, float]:
    """``gather_times`` and the step's wall time on its slowest rank, in the same all-gather.

    Parameters
    ----------
    local, plan, group
        As ``gather_times``.
    step_time : float, optional
        This rank's seconds for the whole step (NaN or a value not above 0: not measured).

    Returns
    -------
    tuple of numpy.ndarray and float
        The times as ``gather_times`` returns them, and the largest ``step_time`` any rank
        measured: NaN when a rank did not measure it (the same on every rank).

    Raises
    ------
    ValueError
        As ``gather_times``.

    Example
    -------
    Without a process group (one GPU) it only reshapes and passes the wall time through.

    >>> import skrull
    >>> from skrull.torch import gather_step
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([30, 20])
    >>> times, wall = gather_step([0.01], plan, step_time=0.02)
    >>> times.shape, wall
    ((1, 1, 1), 0.02)
    """
    wall = float(step_time) if step_time is not None and step_time > 0 else math.nan
    dp, cp = plan.config.dp, plan.config.cp
    if not (dist.is_available() and dist.is_initialized()):
        mine = np.asarray(local, dtype=np.float64).reshape(-1)
        if dp * cp != 1 or mine.size != plan.num_micro_batches:
            raise ValueError(f"gather_times: no process group, and the plan has dp * cp = "
                             f"{dp * cp} GPUs and {plan.num_micro_batches} micro-batches for "
                             f"{mine.size} times: initialise torch.distributed")
        return mine.reshape(-1, 1, 1).copy(), wall
    world = dist.get_world_size(group)
    if world != dp * cp:
        raise ValueError(f"gather_times: the process group has {world} ranks, the plan "
                         f"dp * cp = {dp} * {cp} = {dp * cp} GPUs; pass the group of the "
                         "plan's GPUs (ranks dp_rank * cp + cp_rank)")
    rank = dist.get_rank(group)
    per_dp = plan.micro_batches_per_dp.tolist()
    rows = plan.num_micro_batches
    mine = np.asarray(local, dtype=np.float64).reshape(-1)
    send = np.full(rows + 2, np.nan)
    send[0] = mine.size
    send[1] = wall
    send[2:2 + min(mine.size, rows)] = mine[:rows]
    device = collective_device(group)
    t = torch.from_numpy(send).to(device)
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t, group=group)
    got = torch.stack(parts).cpu().numpy()  # [rank][2 + rows]
    for r in range(world):
        want = per_dp[r // cp]
        if got[r, 0] != want:
            raise ValueError(f"gather_times: rank {r} (DP rank {r // cp}, CP rank {r % cp}) "
                             f"gave {int(got[r, 0])} micro-batch times, its DP rank runs "
                             f"{want} in this plan (rank {rank} saw this too)")
    walls = got[:, 1]
    slowest = float(walls.max()) if bool(np.all(walls > 0)) else math.nan
    out = got[:, 2:].reshape(dp, cp, rows).transpose(2, 0, 1)
    return np.ascontiguousarray(out), slowest
