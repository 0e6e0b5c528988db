"""The bench's outlier-delay runs (``--outlier-delay W``): the steps
``SkrullBatchSampler(outlier_delay=W)`` trains, and each run's step-time mean and p95."""

from __future__ import annotations

import math
from typing import Any


def delayed_steps(batches: list[list[int]], per_epoch: int, lengths: list[int],
                  scheduler: Any, delay: int) -> list[list[int]]:
    """Dataset indices per step as the sampler yields them with ``outlier_delay=delay``: each
    epoch's global batches (``batches``, ``per_epoch`` of them per epoch, whole epochs)
    through a ``skrull.Window`` of ``scheduler``."""
    import skrull
    out: list[list[int]] = []
    for first in range(0, len(batches), per_epoch):
        epoch = batches[first:first + per_epoch]
        flat = [i for b in epoch for i in b]
        window = skrull.Window(scheduler, delay, max(len(b) for b in epoch))
        pushed = 0
        for t in range(len(epoch)):
            while pushed < len(epoch) and pushed <= t + delay:
                window.push([lengths[i] for i in epoch[pushed]])
                pushed += 1
            out.append([flat[p] for p in window.step().positions.tolist()])
    return out


def whole_epochs(steps: int, per_epoch: int) -> int:
    """The steps of the whole epochs that hold ``steps`` steps."""
    return math.ceil(steps / max(per_epoch, 1)) * per_epoch


def mean_p95(times: list[float]) -> tuple[float, float]:
    """The mean and the 95th percentile (nearest rank) of step times."""
    if not times:
        return 0.0, 0.0
    ordered = sorted(times)
    return sum(times) / len(times), ordered[max(math.ceil(0.95 * len(times)) - 1, 0)]


def label(row: dict[str, Any]) -> str:
    """A row's policy, with its delay when it has one."""
    w = row.get("outlier_delay", 0)
    return f"{row['policy']} +delay {w}" if w else str(row["policy"])
