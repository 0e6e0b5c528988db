"""skrull inside Hugging Face ``Trainer`` and TRL ``SFTTrainer`` (install ``skrull[hf]``).

- ``SkrullBatchSampler``: transformers' ``BatchRebalanceSampler`` whose DP-rank and
  micro-batch assignment is a skrull plan (exactly ``gradient_accumulation_steps``
  micro-batches per DP rank);
- ``SkrullCollator``: padding-free ``[1, T]`` batches with per-sequence ``position_ids``,
  boundary-safe ``labels`` / ``shift_labels`` and flash-attention varlen arguments;
- ``SkrullTrainer`` / ``SkrullTrainerMixin`` with ``SkrullConfig``: the sampler, and with
  ``cp > 1`` or chunking on per-(DP, CP)-rank buffers and the micro-batch's
  ``SkrullAttention`` (chunk passes run pass by pass, each with a ``PassAttention``);
- the ``"skrull"`` attention function (``attn_implementation="skrull"``), registered on
  import: per-sequence attention, sharded sequences over their CP ring.

See docs/hf.md.
"""

from __future__ import annotations

try:
    import transformers as _transformers  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("skrull.hf needs transformers: pip install './python[hf]'") from exc

from ._attention import (ATTENTION_NAME, PassAttention, SkrullAttention, register,
                         skrull_attention_forward)
from ._collator import IGNORE_INDEX, GpuLayout, SkrullCollator, collate_gpu_buffer, padding_batch
from ._loss import exact_causal_lm_loss
from ._sampler import PlannedMicroBatch, SkrullBatchSampler, plan_for_steps, scheduler_for_steps
from ._trainer import (SkrullConfig, SkrullTrainer, SkrullTrainerMixin, check_training_setup,
                       infer_lengths)

register()

__all__ = ["ATTENTION_NAME", "IGNORE_INDEX", "GpuLayout", "PassAttention", "PlannedMicroBatch",
           "SkrullAttention", "SkrullBatchSampler", "SkrullCollator", "SkrullConfig",
           "SkrullTrainer", "SkrullTrainerMixin", "check_training_setup", "collate_gpu_buffer",
           "exact_causal_lm_loss", "infer_lengths",
           "padding_batch", "plan_for_steps", "register", "scheduler_for_steps",
           "skrull_attention_forward"]
