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

``Window`` delays a batch's outlier sequences to a later step (``skrull_window_*``,
docs/outlier_delay.md). ``Scheduler.observe`` / ``Scheduler.refit`` refit the cost model from measured micro-batch
times (``skrull_refit_*``). ``skrull.torch`` (install ``skrull[torch]``) turns plans into
per-rank tensors and times them (``OnlineCalibration``);
``python -m skrull.profile`` measures a machine and fits the cost model.
"""

from __future__ import annotations

import os as _os
import pathlib as _pathlib

from . import _ffi
from ._config import FLOPS, POLICIES, SHARD_PADDINGS, SYNCS, VICTIMS, Config
from ._cost import GPUS, OVERLAPS, CostModel
from ._errors import (ArgumentError, BatchError, ConfigError, Error, InternalError, LayoutError,
                      MeasurementError, Status)
from ._layout import CHUNK_PASS_DTYPE, RING_DTYPE, SPAN_DTYPE, Layout, Ring
from ._plan import CP_GROUP_DTYPE, MICRO_BATCH_DTYPE, PLACEMENT_DTYPE, Plan, Summary
from ._refit import COEFFICIENTS, Refit, RefitSettings
from ._shape import PRESETS, ModelShape
from ._scheduler import MAX_SEQUENCES, Scheduler
from ._window import Window, WindowDeferred, WindowStep

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


def get_include() -> str:
    """The folder holding ``skrull.h``, for C and C++ code built against the library.

    The wheel ships the header in the package (``skrull/include``); from a source checkout
    (``PYTHONPATH=python``) it is the repository's ``include/``. Use it as numpy's and
    pybind11's are used: ``-I$(python -c "import skrull; print(skrull.get_include())")``,
    or ``extra_include_paths=[skrull.get_include()]`` in ``torch.utils.cpp_extension``
    (``skrull.ops`` builds that way; docs/cpp.md).

    Returns
    -------
    str
        An existing folder that contains ``skrull.h``.

    Raises
    ------
    FileNotFoundError
        Neither the package nor a source checkout holds the header.

    Example
    -------
    >>> import os, skrull
    >>> os.path.isfile(os.path.join(skrull.get_include(), "skrull.h"))
    True
    """
    return _bundled("include", "skrull.h", [_SOURCE_ROOT / "include"])


def get_lib() -> str:
    """The folder holding ``libskrull.a``, the static library to link C and C++ code with.

    The wheel ships it in the package (``skrull/lib``, debug info stripped); from a source
    checkout it is cargo's ``release`` folder (``$CARGO_TARGET_DIR/release`` when that is
    set, else ``target/release``), after ``cargo build --release -p skrull-ffi``. Link
    ``<folder>/libskrull.a -lpthread -ldl -lm`` (docs/c_api.md).

    Returns
    -------
    str
        An existing folder that contains ``libskrull.a``.

    Raises
    ------
    FileNotFoundError
        Neither the package nor a source checkout holds the library (build it with cargo).

    Example
    -------
    >>> import os, skrull
    >>> os.path.isfile(os.path.join(skrull.get_lib(), "libskrull.a"))
    True
    """
    target = _os.environ.get("CARGO_TARGET_DIR")
    cargo = _pathlib.Path(target) if target else _SOURCE_ROOT / "target"
    if not cargo.is_absolute():
        cargo = _SOURCE_ROOT / cargo
    return _bundled("lib", "libskrull.a", [cargo / "release"])


_SOURCE_ROOT = _pathlib.Path(__file__).resolve().parents[2]  # a checkout: <root>/python/skrull


def _bundled(folder: str, name: str, fallbacks: list[_pathlib.Path]) -> str:
    """The package's ``folder`` when it holds ``name`` (an installed wheel), else the first
    fallback folder that does (a source checkout)."""
    for where in [_pathlib.Path(__file__).resolve().parent / folder, *fallbacks]:
        if (where / name).is_file():
            return str(where)
    raise FileNotFoundError(
        f"{name} is neither in the installed package ({folder}/) nor in a source checkout "
        f"({', '.join(str(f) for f in fallbacks)}): install the skrull wheel, or build it "
        "with `cargo build --release -p skrull-ffi`")


for _cls in (ArgumentError, BatchError, Config, ConfigError, CostModel, Error, InternalError,
             Layout, LayoutError, MeasurementError, ModelShape, Plan, Refit, RefitSettings,
             Scheduler, Status, Summary, Window, WindowDeferred, WindowStep):
    _cls.__module__ = __name__  # tracebacks and help() say skrull.BatchError, not skrull._errors

del annotations, _cls  # keep dir(skrull) to the API

__all__ = [
    "ABI_VERSION", "MAX_PAD_MULTIPLE", "MAX_RINGS", "MAX_SEQUENCES", "NO_MICRO_BATCH", "SHARDED",
    "CHUNKED", "CHUNK_PASS_DTYPE", "WHOLE_CHUNK",
    "FLOPS", "CP_GROUP_DTYPE", "RING_DTYPE",
    "GPUS", "OVERLAPS", "POLICIES", "PRESETS", "SHARD_PADDINGS", "SYNCS", "VICTIMS",
    "MICRO_BATCH_DTYPE",
    "PLACEMENT_DTYPE", "SPAN_DTYPE", "ArgumentError", "BatchError", "Config", "ConfigError",
    "CostModel", "Error", "InternalError", "Layout", "LayoutError", "ModelShape", "Plan", "Ring",
    "Scheduler", "Status", "Summary", "library_path", "library_version", "COEFFICIENTS",
    "MeasurementError", "Refit", "RefitSettings", "get_include", "get_lib",
    "Window", "WindowDeferred", "WindowStep",
]
