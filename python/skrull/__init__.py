"""skrull: a data scheduler for long-context training, from Python.

A thin binding (ctypes) over the C ABI of ``libskrull`` (``include/skrull.h``), which ships
inside this package. For every global batch, every rank calls ``Scheduler.plan`` with the same
lengths and gets the same plan, bit for bit, so no broadcast is needed::

    import skrull
    s = skrull.Scheduler(dp=4, cp=8, bucket_tokens=26624, model="qwen2.5-0.5b",
                         policy="balanced")
    plan = s.plan(lengths)                  # any integer sequence or numpy array
    plan.dp_rank, plan.micro_batch, plan.cp_rank   # per sequence; cp_rank -1 = sharded
    plan.micro_batches_per_dp               # per DP rank
    lay = plan.layout(dp_rank, micro_batch, cp_rank)   # one GPU: spans, cu_seqlens, ...
    plan.to_megatron_groups()               # sample_id_groups[micro_batch][dp * cp + cp_rank]

How it maps to C (docs/python.md has the whole guide):

- ``Scheduler(...)`` builds one ``skrull_config`` (``skrull_config_preset_init`` + your
  fields: pad multiple, lockstep, a ``CostModel`` for ``balanced`` ...), validated at once,
  and sizes its buffers with ``skrull_plan_sizes``; they grow when a larger batch arrives.
- ``Scheduler.plan`` is ``skrull_schedule``; the ``Plan`` holds copies of the
  ``skrull_plan_buffers`` as numpy arrays, plus ``summary`` and ``digest()``.
- ``Plan.layout`` is ``skrull_layout_sizes`` + ``skrull_layout_fill``, into arrays of exactly
  the size the library asked for (gather index included).
- A non-zero ``skrull_status`` raises a ``skrull.Error`` subclass (``ConfigError``,
  ``BatchError``, ``LayoutError``, ``ArgumentError``, ``InternalError``) whose ``status`` is the
  status name (``"SEQUENCE_TOO_LONG"``), ``code`` its number, ``message`` the library's text,
  and ``index``/``value``/``limit``/``field`` the library's ``skrull_error_info``.

``skrull.torch`` (install ``skrull[torch]``) turns plans into per-rank tensors.
"""

from __future__ import annotations

from . import _ffi
from ._config import (FLOPS, POLICIES, PRESETS, SHARD_PADDINGS, VICTIMS, Config, ModelShape)
from ._cost import GPUS, OVERLAPS, CostModel
from ._errors import (ArgumentError, BatchError, ConfigError, Error, InternalError, LayoutError,
                      Status)
from ._layout import RING_DTYPE, SPAN_DTYPE, Layout, Ring
from ._plan import CP_GROUP_DTYPE, MICRO_BATCH_DTYPE, PLACEMENT_DTYPE, Plan, Summary
from ._scheduler import MAX_SEQUENCES, Scheduler

__version__ = "0.1.0"
#: The C ABI version this package was written for (``SKRULL_ABI_VERSION``).
ABI_VERSION = _ffi.ABI_VERSION
#: ``cp_rank`` of a sequence sharded over its CP group.
SHARDED = _ffi.SHARDED
#: ``Layout.micro_batch_global`` of an empty lockstep micro-batch.
NO_MICRO_BATCH = _ffi.NO_MICRO_BATCH
MAX_RINGS = _ffi.MAX_RINGS
#: The largest ``pad_multiple``.
MAX_PAD_MULTIPLE = _ffi.MAX_PAD_MULTIPLE


def library_version() -> str:
    """The loaded library's version (``skrull_version()``)."""
    return _ffi.lib.skrull_version().decode()


def library_path() -> str:
    """The path of the loaded ``libskrull``."""
    return str(_ffi.library_path())


for _cls in (ArgumentError, BatchError, Config, ConfigError, CostModel, Error, InternalError,
             Layout, LayoutError, ModelShape, Plan, Scheduler, Status, Summary):
    _cls.__module__ = __name__  # tracebacks and help() say skrull.BatchError, not skrull._errors

__all__ = [
    "ABI_VERSION", "MAX_PAD_MULTIPLE", "MAX_RINGS", "MAX_SEQUENCES", "NO_MICRO_BATCH", "SHARDED",
    "FLOPS", "CP_GROUP_DTYPE", "RING_DTYPE",
    "GPUS", "OVERLAPS", "POLICIES", "PRESETS", "SHARD_PADDINGS", "VICTIMS", "MICRO_BATCH_DTYPE",
    "PLACEMENT_DTYPE", "SPAN_DTYPE", "ArgumentError", "BatchError", "Config", "ConfigError",
    "CostModel", "Error", "InternalError", "Layout", "LayoutError", "ModelShape", "Plan", "Ring",
    "Scheduler", "Status", "Summary", "library_path", "library_version",
]
