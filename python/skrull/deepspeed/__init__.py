"""skrull plans in a raw DeepSpeed loop (``deepspeed.initialize`` and your own steps).

- ``SkrullDeepSpeed``: the DeepSpeed config with the micro-batch count the plans need, CP
  ranks declared to DeepSpeed (``mpu``), this GPU's steps and micro-batches with the global
  batch's label tokens, ``backward`` with the right loss scale and accumulation boundaries,
  and checkpoint state beside the engine's;
- ``Engine`` and ``scheduling_settings``: what the engine's ZeRO stage lets plans do (equal
  micro-batch counts under ZeRO-2/3, unequal ones under ZeRO-0/1 with unmanaged
  accumulation);
- ``SequenceParallelGroups``: the ``mpu`` declaring CP groups as DeepSpeed's
  sequence-parallel dimension.

``SkrullTrainer`` with ``TrainingArguments(deepspeed=...)`` needs none of this. See
docs/deepspeed.md.
"""

from __future__ import annotations

from ._groups import SequenceParallelGroups
from ._loader import MicroBatch, Step, collate_hf, epoch_order, label_count
from ._run import BATCH_KEYS, SkrullDeepSpeed
from ._settings import (MICRO_BATCH_MODES, OWNED_SETTINGS, Engine, check_cp_support,
                        check_scheduler_settings, scheduling_settings)

__all__ = ["BATCH_KEYS", "MICRO_BATCH_MODES", "OWNED_SETTINGS", "Engine", "MicroBatch",
           "SequenceParallelGroups", "SkrullDeepSpeed", "Step", "check_cp_support",
           "check_scheduler_settings",
           "collate_hf", "epoch_order", "label_count", "scheduling_settings"]
