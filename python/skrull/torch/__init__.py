"""Torch helpers for skrull plans (install ``skrull[torch]``).

- ``collate(plan, samples, dp_rank, cp_rank)``: this GPU's ``MicroBatch`` list for one global
  batch (flat ``input_ids``, ``labels``, ``position_ids``, ``loss_weights``, the varlen
  ``cu_seqlens`` of both groups), each buffer filled with one gather through the layout's
  gather index; the same count on every DP rank (plans made with ``lockstep=True``).
- ``SkrullLoader``: a map-style dataset with known lengths, in planned global batches.
- ``cp_group``, ``cp_ring_groups``, ``all_gather_varlen``: CP process groups (the whole group
  and its sub-groups, one per ring) and a differentiable all-gather whose
  gradients are right on every backend.
- ``PackedAttention``, ``apply_rope``, ``TinyTransformer``, ``packed_loss``: a dense reference
  of local + sharded attention and a tiny model, to check an integration against the unpacked
  computation (see python/tests/test_gradcheck.py).
- ``OnlineCalibration``, ``MicroBatchTimer``, ``gather_times``, ``gather_step``: time every
  micro-batch (CUDA events on a GPU, the monotonic clock on the CPU), all-gather the
  ``[micro_batch][dp][cp]`` times (and each step's wall time) over the job and refit the scheduler's cost model every ``every`` steps, identically on
  every rank (``Scheduler.observe``, ``Scheduler.refit``).
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("skrull.torch needs PyTorch: pip install './python[torch]' (or torch)") \
        from exc

from ._calibration import OnlineCalibration
from ._collate import (GlobalBatch, MicroBatch, SkrullLoader, collate, default_label_tokens,
                       require_lockstep)
from ._dist import all_gather_varlen, cp_group, cp_ring_groups, gather_sizes
from ._packed import PackedAttention
from ._rope import apply_rope
from ._timing import MicroBatchTimer, gather_step, gather_times
from ._tiny import TinyTransformer, packed_loss

__all__ = ["GlobalBatch", "MicroBatch", "MicroBatchTimer", "OnlineCalibration", "PackedAttention",
           "SkrullLoader", "TinyTransformer", "gather_step", "gather_times",
           "all_gather_varlen", "apply_rope", "collate", "cp_group", "cp_ring_groups",
           "default_label_tokens",
           "gather_sizes", "packed_loss", "require_lockstep"]
