"""skrull: a data scheduler for long-context training, from Python.

A thin binding (ctypes) over the C ABI of ``libskrull`` (``include/skrull.h``), which ships
inside this package together with the ``skrull`` command. For every global batch, every rank
calls ``Scheduler.plan`` with the same lengths and gets the same plan, bit for bit, so no
broadcast is needed::

    import skrull
    s = skrull.Scheduler(dp=1, cp=4, bucket_tokens=4096, policy="skrull")
    plan = s.plan([1000, 900, 800, 12000])  # any integer sequence, numpy or torch array
    plan.cp_rank                            # [2, 1, 0, -1]: three whole, one sharded
    plan.micro_batches_per_dp               # per DP rank
    lay = plan.layout(0, 0, 3)              # one GPU: spans, cu_seqlens, gather index, ...
    plan.to_megatron_groups()               # sample_id_groups[micro_batch][dp * cp + cp_rank]
    plan.to_json()                          # what `skrull plan --format json` prints

How it maps to C (docs/python.md has the whole guide, docs/api the reference):

- ``Scheduler(...)`` builds one ``skrull_config`` (``skrull_config_preset_init`` + your
  fields), checked in Python and by the library at once (``skrull_config_check``), prepares
  it once (``skrull_setup_init``) and sizes its buffers with ``skrull_plan_sizes``; they
  grow when a larger batch arrives.
- ``Scheduler.plan`` is ``skrull_schedule_prepared``; the ``Plan`` holds copies of the
  ``skrull_plan_buffers`` as numpy arrays, plus ``summary`` and ``digest()``.
- ``Plan.layout`` comes from ``skrull_layout_fill_many``, into arrays of exactly the size the
  library needs (gather index included).
- Mistakes raise a ``skrull.Error`` subclass: ``ArgumentError`` (a ``TypeError``),
  ``ConfigError``, ``BatchError``, ``LayoutError``, ``MeasurementError`` (each a
  ``ValueError``) or ``InternalError``,
  whose message names the argument, the value, what is accepted and what to do, and whose
  ``status``, ``index``, ``value``, ``limit`` and ``field_name`` carry the details.

``Scheduler.observe`` / ``Scheduler.refit`` refit the cost model from measured micro-batch
times (``skrull_refit_*``). ``skrull.torch`` (install ``skrull[torch]``) turns plans into
per-rank tensors and times them (``OnlineCalibration``);
``python -m skrull.profile`` measures a machine and fits the cost model.
"""

from __future__ import annotations

from . import _ffi
from ._config import (FLOPS, POLICIES, PRESETS, SHARD_PADDINGS, VICTIMS, Config, ModelShape)
from ._cost import GPUS, OVERLAPS, CostModel
from ._errors import (ArgumentError, BatchError, ConfigError, Error, InternalError, LayoutError,
                      MeasurementError, Status)
from ._layout import CHUNK_PASS_DTYPE, RING_DTYPE, SPAN_DTYPE, Layout, Ring
from ._plan import CP_GROUP_DTYPE, MICRO_BATCH_DTYPE, PLACEMENT_DTYPE, Plan, Summary
from ._refit import COEFFICIENTS, Refit, RefitSettings
from ._scheduler import MAX_SEQUENCES, Scheduler

__version__ = "0.1.0"
#: The C ABI version this package was written for (``SKRULL_ABI_VERSION``).
ABI_VERSION = _ffi.ABI_VERSION
#: ``cp_rank`` of a sequence sharded over its CP group.
SHARDED = _ffi.SHARDED
#: ``cp_rank`` of a sequence run chunked (``Plan.chunked``).
CHUNKED = _ffi.CHUNKED
#: ``chunk`` of a span holding a whole chunk of a chunked sequence on one GPU
#: (``Layout.chunk_passes``).
WHOLE_CHUNK = _ffi.WHOLE_CHUNK
#: ``Layout.micro_batch_global`` of an empty lockstep micro-batch.
NO_MICRO_BATCH = _ffi.NO_MICRO_BATCH
MAX_RINGS = _ffi.MAX_RINGS
#: The largest ``pad_multiple``.
MAX_PAD_MULTIPLE = _ffi.MAX_PAD_MULTIPLE


def library_version() -> str:
    """The loaded library's version.

    Returns
    -------
    str
        ``skrull_version()``, e.g. ``"0.1.0"``.

    Example
    -------
    >>> import skrull
    >>> skrull.library_version() == skrull.__version__
    True
    """
    version: bytes = _ffi.lib.skrull_version()
    return version.decode()


def library_path() -> str:
    """The path of the loaded ``libskrull``.

    Returns
    -------
    str
        The shared library next to the package, or ``$SKRULL_LIBRARY``.

    Example
    -------
    >>> import skrull
    >>> "skrull" in skrull.library_path()
    True
    """
    return str(_ffi.library_path())


for _cls in (ArgumentError, BatchError, Config, ConfigError, CostModel, Error, InternalError,
             Layout, LayoutError, MeasurementError, ModelShape, Plan, Refit, RefitSettings,
             Scheduler, Status, Summary):
    _cls.__module__ = __name__  # tracebacks and help() say skrull.BatchError, not skrull._errors

del annotations, _cls  # keep dir(skrull) to the API

__all__ = [
    "ABI_VERSION", "MAX_PAD_MULTIPLE", "MAX_RINGS", "MAX_SEQUENCES", "NO_MICRO_BATCH", "SHARDED",
    "CHUNKED", "CHUNK_PASS_DTYPE", "WHOLE_CHUNK",
    "FLOPS", "CP_GROUP_DTYPE", "RING_DTYPE",
    "GPUS", "OVERLAPS", "POLICIES", "PRESETS", "SHARD_PADDINGS", "VICTIMS", "MICRO_BATCH_DTYPE",
    "PLACEMENT_DTYPE", "SPAN_DTYPE", "ArgumentError", "BatchError", "Config", "ConfigError",
    "CostModel", "Error", "InternalError", "Layout", "LayoutError", "ModelShape", "Plan", "Ring",
    "Scheduler", "Status", "Summary", "library_path", "library_version", "COEFFICIENTS",
    "MeasurementError", "Refit", "RefitSettings",
]
