"""Which engine runs the bench's steps (``--engine``): ``SkrullTrainer`` (DDP with gradient
accumulation) or DeepSpeed's own (``--zero N``), and the synchronisation each runs, which the
plans are made for and the evaluator composes predictions with (``docs/cost_model.md``,
section 8)."""

from __future__ import annotations

from typing import Any


def sync_of(opts: Any) -> str:
    """The synchronisation of ``opts.engine``: every micro-batch waits for every GPU under
    DeepSpeed ZeRO-2/3 (their backward reduces gradients over the job), CP ranks meet only in
    micro-batches holding a sharded sequence under DDP and ZeRO-0/1 (nothing is reduced
    before the step's boundary)."""
    if getattr(opts, "engine", "trainer") == "deepspeed" and opts.zero >= 2:
        return "every-gpu"
    return "sharded"


def worker(opts: Any) -> Any:
    """The entry point of one rank for ``opts.engine``."""
    if getattr(opts, "engine", "trainer") == "deepspeed":
        from ._ds_worker import rank_main as ds_main
        return ds_main
    from ._worker import rank_main
    return rank_main
