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
    torch.ops.skrull.schedule(lengths, skrull.ops.config_text(s))     # the raw op

The op returns exactly the arrays of ``s.plan(lengths)`` (``PlanTensors`` lists them), raises
the message the ctypes binding raises when the library refuses the batch or configuration
(``ValueError``; ``TypeError`` for lengths that are not one-dimensional integers), keeps no
state between calls, and works in TorchScript, from C++ (``c10::Dispatcher``) and under
``torch.compile`` (a fake implementation gives the shapes; the micro-batch count is a dynamic
size). docs/cpp.md has the details.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, NamedTuple, Union

import torch

import skrull

__all__ = ["PlanTensors", "config_text", "library_path", "schedule"]

_CSRC = Path(__file__).resolve().parent / "csrc"
_SOURCES = ("schedule_op.cpp", "config_text.cpp", "status_text.cpp")
_HEADERS = ("config_text.hpp", "status_text.hpp")


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
        extra_include_paths=[skrull.get_include(), str(_CSRC)],
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


def _number(value: Any) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


@functools.lru_cache(maxsize=64)
def _text_of(config: skrull.Config) -> str:
    items = [f"dp={config.dp}", f"cp={config.cp}", f"bucket_tokens={config.bucket_tokens}",
             f"policy={config.policy}", f"victim={config.victim}", f"flops={config.flops}",
             f"shard_padding={config.shard_padding}",
             f"max_micro_batches={config.max_micro_batches}",
             f"pad_multiple={config.pad_multiple}", f"pad_local={int(config.pad_local)}",
             f"lockstep={int(config.lockstep)}", f"subgroups={int(config.subgroups)}",
             f"fill_empty={int(config.fill_empty)}", f"micro_batches={config.micro_batches}",
             f"chunk_size={config.chunk_size}", f"chunk_keep={config.chunk_keep}",
             f"chunk_state_permille={config.chunk_state_permille}"]
    m = config.model
    items += [f"model.hidden={m.hidden}", f"model.kv_hidden={m.kv_hidden}",
              f"model.ffn={m.ffn}", f"model.layers={m.layers}", f"model.vocab={m.vocab}",
              f"model.swiglu={int(m.swiglu)}"]
    cost = config.cost_model
    if cost is not None:
        items.append(f"cost_model={cost.gpu}")
        for name, value in cost:
            if isinstance(value, tuple):
                text = ":".join(_number(v) for v in value)
            else:
                text = str(value) if isinstance(value, str) else _number(value)
            items.append(f"cost_model.{name}={text}")
    return " ".join(items)


def config_text(config: Union[skrull.Scheduler, skrull.Config]) -> str:
    """The op's configuration text for a scheduler (every setting written out).

    Parameters
    ----------
    config : skrull.Scheduler or skrull.Config
        The configuration to plan with (a scheduler's current one, its cost model included).

    Returns
    -------
    str
        ``key=value`` items (docs/cpp.md lists the keys); the op plans with it exactly what
        the scheduler plans.

    Raises
    ------
    TypeError
        ``config`` is neither a Scheduler nor a Config.

    Example
    -------
    >>> import skrull, skrull.ops
    >>> skrull.ops.config_text(skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096)).split()[:4]
    ['dp=2', 'cp=4', 'bucket_tokens=4096', 'policy=balanced']
    """
    if isinstance(config, skrull.Scheduler):
        config = config.config
    if not isinstance(config, skrull.Config):
        raise TypeError(f"config must be a skrull.Scheduler or skrull.Config, got "
                        f"{type(config).__name__}")
    return _text_of(config)


def schedule(lengths: Any, config: Union[str, skrull.Scheduler, skrull.Config]) -> PlanTensors:
    """Plans one global batch with the torch op (``torch.ops.skrull.schedule``).

    Parameters
    ----------
    lengths : torch.Tensor or sequence of int
        Tokens of each sequence (a one-dimensional integer tensor, on any device; a list is
        turned into an int64 tensor).
    config : str, skrull.Scheduler or skrull.Config
        The configuration text (docs/cpp.md), or a scheduler whose configuration to use.

    Returns
    -------
    PlanTensors
        The plan's arrays, equal to those of ``skrull.Scheduler(...).plan(lengths)``.

    Raises
    ------
    ValueError
        The library refused the batch or the configuration: the message is the one
        ``Scheduler.plan`` (or ``Scheduler(...)``) raises, its status name in brackets.
    TypeError
        ``lengths`` is not a one-dimensional integer tensor.

    Example
    -------
    >>> import torch, skrull, skrull.ops
    >>> out = skrull.ops.schedule(torch.tensor([30, 20, 100, 10]), "dp=2 cp=2 bucket_tokens=64")
    >>> out.micro_batches_per_dp.tolist(), int(out.summary[3])     # per DP rank; sharded
    ([1, 1], 1)
    """
    text = config if isinstance(config, str) else config_text(config)
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths, dtype=torch.int64)
    return PlanTensors(*torch.ops.skrull.schedule(lengths, text))


@functools.lru_cache(maxsize=None)
def _preset_layout(model: str) -> tuple[int, int]:
    c = skrull.Scheduler(model=model).config
    return c.dp, c.cp


def _layout_of(text: str) -> tuple[int, int]:
    """dp and cp of a configuration text (as the op reads them), for the fake implementation."""
    items = dict(item.split("=", 1) for item in text.replace(",", " ").split() if "=" in item)
    model = items.get("model", "qwen2.5-0.5b").lower()
    by_number = {str(number): name for name, number in skrull.PRESETS.items()}
    model = by_number.get(model, model)
    dp, cp = _preset_layout(model if model in skrull.PRESETS else "qwen2.5-0.5b")
    return int(items.get("dp", dp)), int(items.get("cp", cp))


def _schedule_fake(lengths: torch.Tensor, config: str) -> tuple[torch.Tensor, ...]:
    """Shapes for torch.compile: n from ``lengths``, dp and cp from the text, the micro-batch
    count ``k`` unknown until the op runs (a dynamic size)."""
    torch._check(lengths.dim() == 1, lambda: "lengths must be one-dimensional")
    n = lengths.shape[0]
    dp, cp = _layout_of(config)
    k = torch.library.get_ctx().new_dynamic_size()
    cpu = torch.device("cpu")
    i32, i64 = torch.int32, torch.int64
    return (torch.empty((n, 4), dtype=i32, device=cpu), torch.empty((k, 4), dtype=i32, device=cpu),
            torch.empty((n,), dtype=i64, device=cpu), torch.empty((k, cp), dtype=i32, device=cpu),
            torch.empty((dp,), dtype=i64, device=cpu), torch.empty((n, 2), dtype=i32, device=cpu),
            torch.empty((7,), dtype=i64, device=cpu))


# The fake (meta) implementation torch.compile traces with (torch.library's decorator is
# untyped, so it is applied as a call).
torch.library.register_fake("skrull::schedule")(_schedule_fake)
