"""Configuration: option names, the model shape, and the one function that builds a
``skrull_config`` (new C fields are wired in there and in ``Config``)."""

from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass
from typing import Any, Mapping, Union

from . import _ffi
from ._errors import Status, check, make_error

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
    """A validated configuration, as given to every C call (read-only)."""

    dp: int
    cp: int
    bucket_tokens: int
    policy: str
    victim: str
    flops: str
    shard_padding: str
    max_micro_batches: int
    model: ModelShape


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


def _model(spec: ModelSpec) -> tuple[_ffi.skrull_config, ModelShape]:
    """The preset config behind ``spec`` and the model shape it names."""
    if isinstance(spec, str):
        preset, _ = _option("model", spec, PRESETS)
        status, cfg = _ffi.preset_config(preset)
        check(status, f"model preset {spec!r}")
        m = cfg.model
        return cfg, ModelShape(m.hidden, m.kv_hidden, m.ffn, m.layers, m.vocab, bool(m.swiglu))
    try:
        shape = spec if isinstance(spec, ModelShape) else ModelShape(**dict(spec))
    except (TypeError, ValueError) as exc:
        raise make_error(Status.INVALID_ARG, f"model: {exc}") from None
    status, cfg = _ffi.preset_config(PRESETS["qwen2.5-0.5b"])
    check(status)
    return cfg, shape


def build(dp: int | None, cp: int | None, bucket_tokens: int | None, model: ModelSpec,
          policy: str | int, victim: str | int, flops: str | int, shard_padding: str | int,
          max_micro_batches: int) -> tuple[Config, _ffi.skrull_config]:
    """Builds the C struct (``struct_size`` = our ``sizeof``) and its Python description, and
    has the library validate it. ``None`` for dp, cp or bucket_tokens takes the model preset's."""
    c, shape = _model(model)
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
    for field in ("hidden", "kv_hidden", "ffn", "layers", "vocab"):
        setattr(c.model, field, _uint(f"model.{field}", getattr(shape, field),
                                      Status.INVALID_MODEL))
    c.model.swiglu = _uint("model.swiglu", shape.swiglu, Status.INVALID_ENUM) \
        if not isinstance(shape.swiglu, bool) else int(shape.swiglu)
    c.struct_size = ctypes.sizeof(c)
    cap = _ffi.skrull_layout_capacity()
    check(_ffi.lib.skrull_layout_sizes_max(ctypes.byref(c), 0, ctypes.byref(cap)))
    cfg = Config(c.dp, c.cp, c.bucket_tokens, policy, victim, flops, shard_padding,
                 c.max_micro_batches, shape)
    return cfg, c
