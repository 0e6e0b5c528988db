"""``torch.ops.skrull.schedule``: the scheduler as a torch C++ operator, linked to ``libskrull.a``.

Importing this module builds the operator on first use, the way DeepSpeed builds its ops:
``torch.utils.cpp_extension.load`` compiles ``csrc/`` against ``skrull.get_include()`` and links
``skrull.get_lib()/libskrull.a`` (both ship in the wheel), caching the result under
``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``); later imports load the cached
library. It needs a C++20 compiler and ``ninja`` (``pip install 'skrull[torch]'`` brings
ninja). Then::

    import torch, skrull, skrull.ops
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096)
    out = skrull.ops.schedule(torch.tensor([1000, 900, 12000]), s)   # a PlanTensors
    out.placements                       # int32 [n, 4]: dp_rank, micro_batch, cp_rank, tokens
    config, cost = skrull.ops.config_tensors(s)       # the scheduler's C structs, as bytes
    torch.ops.skrull.schedule(lengths, config, cost)  # the raw op

The op returns exactly the arrays of ``s.plan(lengths)`` (``PlanTensors`` lists them), raises
the message the ctypes binding raises when the library refuses the batch or configuration
(both word it with ``skrull_error_describe``: ``ValueError``; ``TypeError`` for lengths that
are not one-dimensional integers), keeps no state between calls, and works in TorchScript,
from C++ (``c10::Dispatcher``) and under ``torch.compile`` (a fake implementation gives the
shapes; dp, cp and the micro-batch count are dynamic sizes). docs/cpp.md has the details.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, NamedTuple, Union

import torch

import skrull
from skrull import _config, _ffi

__all__ = ["PlanTensors", "config_tensors", "library_path", "schedule"]

_CSRC = Path(__file__).resolve().parent / "csrc"
_SOURCES = ("schedule_op.cpp",)


class PlanTensors(NamedTuple):
    """What ``torch.ops.skrull.schedule`` returns: the arrays of ``skrull.Plan``, as CPU tensors.

    ``placements`` (int32 ``[n, 4]``: dp_rank, micro_batch, cp_rank, tokens_per_gpu),
    ``micro_batch_table`` (int32 ``[k, 4]``: dp_rank, index, first, count), ``members``
    (int64 ``[n]``), ``rank_tokens`` (int32 ``[k, cp]``), ``micro_batches_per_dp`` (int64
    ``[dp]``), ``cp_groups`` (int32 ``[n, 2]``: first, size) and ``summary`` (int64 ``[7]``:
    total_tokens, sequences, micro_batches, sharded, rollbacks, peak_rank_tokens, chunked),
    where ``k`` is the plan's micro-batch count.

    Example
    -------
    >>> import torch, skrull, skrull.ops
    >>> s = skrull.Scheduler(dp=1, cp=4, bucket_tokens=4096, policy="skrull")
    >>> out = skrull.ops.schedule(torch.tensor([1000, 900, 800, 12000]), s)
    >>> out.placements[:, 2].tolist()      # cp_rank: -1 = sharded
    [2, 1, 0, -1]
    """

    placements: torch.Tensor
    micro_batch_table: torch.Tensor
    members: torch.Tensor
    rank_tokens: torch.Tensor
    micro_batches_per_dp: torch.Tensor
    cp_groups: torch.Tensor
    summary: torch.Tensor


def _stamp() -> str:
    """What the built library depends on besides its sources: libskrull.a (size and time) and
    the header, so that a new library rebuilds the op."""
    lib = Path(skrull.get_lib()) / "libskrull.a"
    header = Path(skrull.get_include()) / "skrull.h"
    st = lib.stat()
    h = hashlib.sha256(f"{lib}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(header.read_bytes())
    return h.hexdigest()[:16]


def _ninja_on_path() -> None:
    """``cpp_extension`` runs ``ninja`` from ``PATH``; a venv that is not activated has the pip
    package's binary off ``PATH``, so add its folder."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    os.environ["PATH"] = str(ninja.BIN_DIR) + os.pathsep + os.environ.get("PATH", "")


def _build() -> str:
    """Builds (or loads from the cache) the op library into this process; returns its path."""
    from torch.utils import cpp_extension

    _ninja_on_path()
    lib = os.path.join(skrull.get_lib(), "libskrull.a")
    cpp_extension.load(
        name="skrull_ops",
        sources=[str(_CSRC / s) for s in _SOURCES],
        extra_include_paths=[skrull.get_include()],
        extra_cflags=["-O2", "-Wall", "-Wextra", f"-DSKRULL_OPS_STAMP={_stamp()}"],
        extra_ldflags=[lib, "-lpthread", "-ldl", "-lm"],
        is_python_module=False,
        verbose=os.environ.get("SKRULL_OPS_VERBOSE") == "1",
    )
    found = [p for p in torch.ops.loaded_libraries if "skrull_ops" in os.path.basename(p)]
    return found[-1] if found else ""


_LIBRARY = _build()


def library_path() -> str:
    """The path of the op library this process loaded.

    Returns
    -------
    str
        The shared library ``torch.utils.cpp_extension`` built (under
        ``$TORCH_EXTENSIONS_DIR``); C++ and TorchScript programs load it to call the op.

    Example
    -------
    >>> import skrull.ops
    >>> "skrull_ops" in skrull.ops.library_path()
    True
    """
    return _LIBRARY


def _struct_bytes(c_config: _ffi.skrull_config) -> tuple[bytes, bytes]:
    """The bytes of a ``skrull_config`` (``struct_size`` of them) and of the cost model its
    pointer names (none: ``b""``), exactly what the library reads."""
    config = bytes(c_config)[:c_config.struct_size]
    address = c_config.cost_model
    if not address:
        return config, b""
    size = ctypes.c_uint32.from_address(address).value
    return config, ctypes.string_at(address, size)


@functools.lru_cache(maxsize=64)
def _config_bytes(config: skrull.Config) -> tuple[bytes, bytes]:
    c = config
    # The same struct a Scheduler of this configuration plans with (``held`` keeps its cost
    # model copy alive while the bytes are read).
    held, c_config = _config.build(
        c.dp, c.cp, c.bucket_tokens, c.model, c.policy, c.victim, c.flops, c.shard_padding,
        c.max_micro_batches, c.pad_multiple, c.pad_local, c.lockstep, c.cost_model,
        c.subgroups, c.fill_empty, c.micro_batches, c.chunk_size, c.chunk_keep,
        c.chunk_state_permille)
    out = _struct_bytes(c_config)
    del held
    return out


def _tensor(raw: bytes) -> torch.Tensor:
    if not raw:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def config_tensors(config: Union[skrull.Scheduler, skrull.Config]) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """The op's configuration arguments for a scheduler: its C structs as bytes.

    Parameters
    ----------
    config : skrull.Scheduler or skrull.Config
        The configuration to plan with (a scheduler's current one, its cost model included:
        after a refit, the refitted model).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        ``config``: the scheduler's ``skrull_config`` (uint8, ``struct_size`` bytes; its
        ``cost_model`` pointer is ignored by the op); ``cost_model``: its ``skrull_cost_model``
        (uint8), empty for the library's preset. Both are new CPU tensors, safe to keep (e.g.
        as a module's buffers); the op plans with them exactly what the scheduler plans.

    Raises
    ------
    TypeError
        ``config`` is neither a Scheduler nor a Config.

    Example
    -------
    >>> import skrull, skrull.ops
    >>> config, cost = skrull.ops.config_tensors(skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096))
    >>> config.dtype, config.numel() == int(config[:4].view(torch.int32)), cost.numel()
    (torch.uint8, True, 0)
    """
    if isinstance(config, skrull.Scheduler):
        with config._lock:  # a refit swaps the struct and its cost model under this lock
            raw = _struct_bytes(config._c_config)
    elif isinstance(config, skrull.Config):
        raw = _config_bytes(config)
    else:
        raise TypeError(f"config must be a skrull.Scheduler or skrull.Config, got "
                        f"{type(config).__name__}")
    return _tensor(raw[0]), _tensor(raw[1])


def schedule(lengths: Any, config: Union[skrull.Scheduler, skrull.Config,
                                         tuple[torch.Tensor, torch.Tensor]]) -> PlanTensors:
    """Plans one global batch with the torch op (``torch.ops.skrull.schedule``).

    Parameters
    ----------
    lengths : torch.Tensor or sequence of int
        Tokens of each sequence (a one-dimensional integer tensor, on any device; a list is
        turned into an int64 tensor).
    config : skrull.Scheduler, skrull.Config or (torch.Tensor, torch.Tensor)
        A scheduler whose configuration to use, or the two tensors of ``config_tensors()``.

    Returns
    -------
    PlanTensors
        The plan's arrays, equal to those of ``skrull.Scheduler(...).plan(lengths)``.

    Raises
    ------
    ValueError
        The library refused the batch or the configuration: the message is the one
        ``Scheduler.plan`` raises, its status name in brackets; or a configuration tensor of
        the wrong size or device.
    TypeError
        ``lengths`` is not a one-dimensional integer tensor, or a configuration tensor is not
        uint8.

    Example
    -------
    >>> import torch, skrull, skrull.ops
    >>> s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=64)
    >>> out = skrull.ops.schedule(torch.tensor([30, 20, 100, 10]), s)
    >>> out.micro_batches_per_dp.tolist(), int(out.summary[3])     # per DP rank; sharded
    ([1, 1], 1)
    """
    tensors = config if isinstance(config, tuple) else config_tensors(config)
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths, dtype=torch.int64)
    return PlanTensors(*torch.ops.skrull.schedule(lengths, *tensors))


def _check_bytes(t: torch.Tensor, name: str) -> None:
    """What the op checks of a configuration tensor that its metadata shows."""
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must be a uint8 tensor holding the bytes of a skrull_{name} "
                        f"(skrull.ops.config_tensors() gives it), got dtype {t.dtype}")
    if t.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor (the bytes of a skrull_{name}), got one "
                         f"on {t.device}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional (the bytes of a skrull_{name}), got "
                         f"shape {tuple(t.shape)}")


def _schedule_fake(lengths: torch.Tensor, config: torch.Tensor,
                   cost_model: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Shapes for torch.compile: n from ``lengths``; dp, cp (in the configuration's bytes,
    which a fake tensor does not hold) and the micro-batch count ``k`` (known once the op
    runs) as dynamic sizes."""
    torch._check(lengths.dim() == 1, lambda: "lengths must be one-dimensional")
    _check_bytes(config, "config")
    _check_bytes(cost_model, "cost_model")
    n = lengths.shape[0]
    ctx = torch.library.get_ctx()
    k = ctx.new_dynamic_size()
    dp = ctx.new_dynamic_size(min=1)
    cp = ctx.new_dynamic_size(min=1)
    cpu = torch.device("cpu")
    i32, i64 = torch.int32, torch.int64
    return (torch.empty((n, 4), dtype=i32, device=cpu), torch.empty((k, 4), dtype=i32, device=cpu),
            torch.empty((n,), dtype=i64, device=cpu), torch.empty((k, cp), dtype=i32, device=cpu),
            torch.empty((dp,), dtype=i64, device=cpu), torch.empty((n, 2), dtype=i32, device=cpu),
            torch.empty((7,), dtype=i64, device=cpu))


# The fake (meta) implementation torch.compile traces with (torch.library's decorator is
# untyped, so it is applied as a call).
torch.library.register_fake("skrull::schedule")(_schedule_fake)
