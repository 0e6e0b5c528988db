"""Which engine runs the bench's steps (``--engine``): ``SkrullTrainer`` (DDP with gradient
accumulation) or DeepSpeed's own (``--zero N``), and how each composes micro-batch times into
a step: the prediction must use the synchronisation of the engine that runs the plan."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._predict import executor_time_s


def every_gpu_time_s(report: dict[str, Any]) -> float:
    """The evaluator's per-(micro-batch, CP rank) times composed as ZeRO-2/3 run them: every
    backward reduces gradients over the whole job, so every micro-batch ends when the slowest
    GPU of any DP rank does (the step is the sum over micro-batch index of the slowest GPU;
    DP ranks run equal counts)."""
    slowest: dict[int, float] = {}
    for m in report["micro_batches"]:
        t = float(np.max(np.asarray(m["rank_times_s"], dtype=np.float64), initial=0.0))
        slowest[m["index"]] = max(slowest.get(m["index"], 0.0), t)
    return float(sum(slowest.values()))


def predicted_time_s(opts: Any, report: dict[str, Any]) -> float:
    """A step's predicted time under the synchronisation of ``opts.engine``: every micro-batch
    waits for every GPU under DeepSpeed ZeRO-2/3 (``every_gpu_time_s``); CP ranks meet only in
    micro-batches holding a sharded sequence under DDP and ZeRO-0/1, whose backward reduces
    nothing before the step's boundary (``executor_time_s``)."""
    if getattr(opts, "engine", "trainer") == "deepspeed" and opts.zero >= 2:
        return every_gpu_time_s(report)
    return executor_time_s(report, opts.dp, opts.cp)


def worker(opts: Any) -> Any:
    """The entry point of one rank for ``opts.engine``."""
    if getattr(opts, "engine", "trainer") == "deepspeed":
        from ._ds_worker import rank_main as ds_main
        return ds_main
    from ._worker import rank_main
    return rank_main
