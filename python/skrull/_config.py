"""Configuration: option names, the model shape, and the one function that builds a
``skrull_config`` (new C fields are wired in there and in ``Config``)."""

from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from . import _ffi
from ._cost import GPUS, CostModel
from ._errors import Status, check, from_info, make_error

#: ``SKRULL_POLICY_*`` by name.
POLICIES = {"skrull": 0, "deepspeed": 1, "packed": 2, "roundrobin": 3, "balanced": 4}
#: ``SKRULL_VICTIM_*`` by name.
VICTIMS = {"shortest": 0, "longest": 1}
#: ``SKRULL_FLOPS_*`` by name.
FLOPS = {"paper": 0, "megatron": 1}
#: ``SKRULL_SHARD_PADDING_*`` by name.
SHARD_PADDINGS = {"none": 0, "zigzag": 1}
#: ``SKRULL_PRESET_*`` by name (the paper's models and layouts).
PRESETS = {"qwen2.5-0.5b": 0, "qwen2.5-7b": 1}

_U32_MAX = 2**32 - 1


@dataclass(frozen=True)
class ModelShape:
    """The transformer shape FLOPs are counted for (``skrull_model_shape``)."""

    hidden: int
    kv_hidden: int
    ffn: int
    layers: int
    vocab: int = 0
    swiglu: bool = True


ModelSpec = Union[str, ModelShape, Mapping[str, Any]]


@dataclass(frozen=True)
class Config:
    """A validated configuration, as given to every C call (read-only). ``cost_model`` is the
    scheduler's read-only ``CostModel``, or ``None`` for the library's default (the H100
    preset for ``model``)."""

    dp: int
    cp: int
    bucket_tokens: int
    policy: str
    victim: str
    flops: str
    shard_padding: str
    max_micro_batches: int
    model: ModelShape
    pad_multiple: int = 1
    pad_local: bool = False
    lockstep: bool = False
    cost_model: Optional[CostModel] = None
    subgroups: bool = True
    fill_empty: bool = False
    micro_batches: int = 0


def _uint(name: str, value: Any, status: Status) -> int:
    """An integer argument that must fit ``uint32_t``; else the status C would return for the
    same bits (a wrapped negative is out of range there too)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise make_error(Status.INVALID_ARG, f"{name} must be an integer, got {value!r}")
    value = operator.index(value)
    if not 0 <= value <= _U32_MAX:
        raise make_error(status, f"{name} = {value} does not fit uint32_t")
    return value


def _option(name: str, value: Any, table: Mapping[str, int]) -> tuple[int, str]:
    """An option given by name (or by its C integer); unknown ones are ``INVALID_ENUM``."""
    if isinstance(value, str):
        if value.lower() not in table:
            raise make_error(Status.INVALID_ENUM,
                             f"unknown {name} {value!r} (known: {', '.join(table)})")
        return table[value.lower()], value.lower()
    code = _uint(name, value, Status.INVALID_ENUM)
    names = [k for k, v in table.items() if v == code]
    return code, names[0] if names else str(code)


def model_shape(spec: ModelSpec) -> ModelShape:
    """The model shape a preset name, a ``ModelShape`` or a dict of its fields names."""
    if isinstance(spec, str):
        preset, _ = _option("model", spec, PRESETS)
        status, cfg = _ffi.preset_config(preset)
        check(status, f"model preset {spec!r}")
        m = cfg.model
        return ModelShape(m.hidden, m.kv_hidden, m.ffn, m.layers, m.vocab, bool(m.swiglu))
    try:
        return spec if isinstance(spec, ModelShape) else ModelShape(**dict(spec))
    except (TypeError, ValueError) as exc:
        raise make_error(Status.INVALID_ARG, f"model: {exc}") from None


def c_model_shape(shape: ModelShape) -> _ffi.skrull_model_shape:
    """The C struct of a shape; a value that does not fit ``uint32_t`` is ``INVALID_MODEL``."""
    c = _ffi.skrull_model_shape()
    for name in ("hidden", "kv_hidden", "ffn", "layers", "vocab"):
        setattr(c, name, _uint(f"model.{name}", getattr(shape, name), Status.INVALID_MODEL))
    c.swiglu = _uint("model.swiglu", shape.swiglu, Status.INVALID_ENUM) \
        if not isinstance(shape.swiglu, bool) else int(shape.swiglu)
    return c


def config_error_info(c: _ffi.skrull_config) -> tuple[int, _ffi.skrull_error_info]:
    """(status, details) of the configuration alone: ``skrull_schedule`` with no sequences
    checks the configuration first and writes ``skrull_error_info`` (``skrull_layout_sizes_max``,
    which the binding validates with, has no details channel)."""
    cap = _ffi.skrull_layout_capacity()
    info = _ffi.skrull_error_info()
    status = _ffi.lib.skrull_layout_sizes_max(ctypes.byref(c), 0, ctypes.byref(cap))
    if status != Status.OK:
        summary = _ffi.skrull_summary()
        out = _ffi.skrull_plan_buffers(struct_size=ctypes.sizeof(_ffi.skrull_plan_buffers),
                                       summary=ctypes.addressof(summary),
                                       error=ctypes.addressof(info))
        again = _ffi.lib.skrull_schedule(ctypes.byref(c), None, 0, None, 0, ctypes.byref(out))
        if again != status:  # not a configuration error after all: no details
            info = _ffi.skrull_error_info(status=0, index=-1)
    return status, info


def check_config(c: _ffi.skrull_config, context: str = "") -> None:
    """Raises the library's verdict on a configuration, with its error details."""
    status, info = config_error_info(c)
    if status != Status.OK:
        raise from_info(info, status, context)


def build(dp: int | None, cp: int | None, bucket_tokens: int | None, model: ModelSpec,
          policy: str | int, victim: str | int, flops: str | int, shard_padding: str | int,
          max_micro_batches: int, pad_multiple: int = 1, pad_local: bool | int = False,
          lockstep: bool | int = False,
          cost_model: CostModel | str | None = None,
          subgroups: bool | int = True, fill_empty: bool | int = False,
          micro_batches: int = 0) -> tuple[Config, _ffi.skrull_config]:
    """Builds the C struct (``struct_size`` = our ``sizeof``) and its Python description, and
    has the library validate it. ``None`` for dp, cp or bucket_tokens takes the model preset's.

    ``cost_model`` is ``None`` (the library's H100 preset for the model), a GPU preset name
    (``"h100"``, ``"h200"``: that preset for this model) or a ``CostModel``; the returned
    ``Config`` holds a read-only copy whose C struct the returned config points at, so it
    lives as long as the ``Config``."""
    shape = model_shape(model)
    if isinstance(model, str):
        status, c = _ffi.preset_config(PRESETS[model.lower()])
    else:
        status, c = _ffi.preset_config(PRESETS["qwen2.5-0.5b"])
    check(status)
    if dp is not None:
        c.dp = _uint("dp", dp, Status.INVALID_DP)
    if cp is not None:
        c.cp = _uint("cp", cp, Status.INVALID_CP)
    if bucket_tokens is not None:
        c.bucket_tokens = _uint("bucket_tokens", bucket_tokens, Status.INVALID_BUCKET)
    c.policy, policy = _option("policy", policy, POLICIES)
    c.victim, victim = _option("victim", victim, VICTIMS)
    c.flops, flops = _option("flops", flops, FLOPS)
    c.shard_padding, shard_padding = _option("shard_padding", shard_padding, SHARD_PADDINGS)
    c.max_micro_batches = _uint("max_micro_batches", max_micro_batches, Status.INVALID_ARG)
    c.model = c_model_shape(shape)
    c.pad_multiple = _uint("pad_multiple", pad_multiple, Status.INVALID_PAD_MULTIPLE)
    c.pad_local = _flag("pad_local", pad_local)
    c.lockstep = _flag("lockstep", lockstep)
    c.subgroups = _flag("subgroups", subgroups)
    c.fill_empty = _flag("fill_empty", fill_empty)
    c.micro_batches = _uint("micro_batches", micro_batches, Status.INVALID_ARG)
    if cost_model is None:
        cost = None
    elif isinstance(cost_model, CostModel):
        cost = cost_model._frozen_copy()
    elif isinstance(cost_model, str) and cost_model.lower() in GPUS:
        cost = CostModel(cost_model.lower(), shape)._frozen_copy()
    else:
        raise make_error(Status.INVALID_ENUM if isinstance(cost_model, (str, int)) else
                         Status.INVALID_ARG, f"cost_model must be None, a GPU preset "
                         f"({', '.join(GPUS)}) or a skrull.CostModel, got {cost_model!r}")
    c.cost_model = None if cost is None else ctypes.addressof(cost._c)
    c.struct_size = ctypes.sizeof(c)
    check_config(c)
    cfg = Config(c.dp, c.cp, c.bucket_tokens, policy, victim, flops, shard_padding,
                 c.max_micro_batches, shape, c.pad_multiple, bool(c.pad_local),
                 bool(c.lockstep), cost, bool(c.subgroups), bool(c.fill_empty),
                 c.micro_batches)
    return cfg, c


def _flag(name: str, value: Any) -> int:
    """A 0/1 option; other integers go to C, which rejects them as ``INVALID_ENUM``."""
    if isinstance(value, bool):
        return int(value)
    return _uint(name, value, Status.INVALID_ENUM)
