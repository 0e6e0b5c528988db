"""Configuration: option names, the model shape, argument checks, and the one function that
builds a ``skrull_config`` (new C fields are wired in there and in ``Config``)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional

from . import _ffi
from ._args import U32_MAX, check_config, check_status, flag, option, whole
from ._cost import GPUS, CostModel
from ._errors import (ArgumentError, ConfigError, Status, from_info, make_error, range_error,
                      type_error)
from ._shape import PRESETS, ModelShape, ModelSpec, c_model_shape, model_shape

#: ``SKRULL_POLICY_*`` by name.
POLICIES = {"skrull": 0, "deepspeed": 1, "packed": 2, "roundrobin": 3, "balanced": 4,
            "chunkflow": 5}
#: ``SKRULL_VICTIM_*`` by name.
VICTIMS = {"shortest": 0, "longest": 1}
#: ``SKRULL_FLOPS_*`` by name.
FLOPS = {"paper": 0, "megatron": 1}
#: ``SKRULL_SHARD_PADDING_*`` by name.
SHARD_PADDINGS = {"none": 0, "zigzag": 1}
#: ``SKRULL_SYNC_*`` by name: how the trainer makes GPUs wait for each other.
SYNCS = {"cp-group": 0, "every-gpu": 1, "sharded": 2}

#: Integer settings: (smallest, largest, status out of range, what it is).
LIMITS: dict[str, tuple[int, int, Status, str]] = {
    "dp": (1, 65536, Status.INVALID_DP, "the data-parallel size"),
    "cp": (1, 256, Status.INVALID_CP, "the context-parallel size: GPUs per DP rank"),
    "bucket_tokens": (1, 2**31 - 1, Status.INVALID_BUCKET,
                      "BucketSize: the most tokens one GPU holds in one micro-batch"),
    "pad_multiple": (0, _ffi.MAX_PAD_MULTIPLE, Status.INVALID_PAD_MULTIPLE,
                     "0 or 1 for no padding"),
    "max_micro_batches": (0, U32_MAX, Status.INVALID_ARG, "0 for no limit"),
    "micro_batches": (0, U32_MAX, Status.INVALID_ARG, "0 for as many as the batch needs"),
    "max_sequences": (0, U32_MAX, Status.INVALID_ARG, "the batch size to size buffers for"),
    "chunk_size": (0, U32_MAX, Status.INVALID_CHUNKING,
                   "0 for no chunking, else the most tokens of one chunk"),
    "chunk_keep": (1, 64, Status.INVALID_CHUNKING,
                   "chunks whose activations are kept (the others are recomputed)"),
    "chunk_state_permille": (0, 1000, Status.INVALID_CHUNKING,
                             "thousandths of a token of K/V state per token"),
}


@dataclass(frozen=True)
class Config:
    """A validated configuration, as given to every C call (read-only).

    The fields are the ``Scheduler`` arguments of the same names, after checking: option names
    in lower case, ``model`` a ``ModelShape``, ``cost_model`` the scheduler's read-only
    ``CostModel`` (``None``: the library's H100 preset for ``model``).

    Example
    -------
    >>> import skrull
    >>> skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096).config.policy
    'balanced'
    """

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
    chunk_size: int = 0
    chunk_keep: int = 1
    chunk_state_permille: int = 64
    sync: str = "cp-group"

    @property
    def chunking(self) -> bool:
        """Whether chunking is on (``chunk_size`` above 0)."""
        return self.chunk_size > 0


def setting(name: str, value: Any) -> int:
    """An integer setting of ``LIMITS``, checked against its range in Python: ``ArgumentError``
    for a non-integer, ``ConfigError`` with the value and the limit out of range."""
    v = whole(name, value)
    lo, hi, status, what = LIMITS[name]
    if not lo <= v <= hi:
        raise range_error(name, v, lo, hi, status, what, ConfigError)
    return v


def build(dp: Optional[int], cp: Optional[int], bucket_tokens: Optional[int], model: Any,
          policy: Any, victim: Any, flops: Any, shard_padding: Any, max_micro_batches: Any,
          pad_multiple: Any = 1, pad_local: Any = False, lockstep: Any = False,
          cost_model: Any = None, subgroups: Any = None, fill_empty: Any = False,
          micro_batches: Any = 0, chunk_size: Any = None, chunk_keep: Any = 1,
          chunk_state_permille: Any = 64, sync: Any = "cp-group"
          ) -> tuple[Config, _ffi.skrull_config]:
    """Builds the C struct (``struct_size`` = our ``sizeof``) and its Python description, and
    has the library validate it.

    ``dp``, ``cp`` and ``bucket_tokens`` are required unless ``model`` names a preset, whose
    paper layout then fills the missing ones. ``cost_model`` is ``None`` (the library's H100
    preset for the model), a GPU preset name (``"h100"``, ``"h200"``: that preset for this
    model) or a ``CostModel``; the returned ``Config`` holds a read-only copy whose C struct
    the returned config points at, so it lives as long as the ``Config``. It starts from the
    library's recommended preset (``skrull_config_recommended_init``): ``subgroups=None``
    keeps its setting."""
    preset = model.lower() if isinstance(model, str) and model.lower() in PRESETS else None
    missing = [n for n, v in (("dp", dp), ("cp", cp), ("bucket_tokens", bucket_tokens))
               if v is None]
    if missing and preset is None:
        raise make_error(Status.INVALID_ARG, f"Scheduler() needs {', '.join(missing)}: give "
                         "dp, cp and bucket_tokens (e.g. Scheduler(dp=4, cp=8, "
                         "bucket_tokens=26624)), or name a model preset (model='qwen2.5-0.5b' "
                         "or 'qwen2.5-7b') to take its paper layout", ArgumentError,
                         field_name=missing[0])
    shape = model_shape("qwen2.5-0.5b" if model is None else model)
    status, c = _ffi.recommended_config(PRESETS[preset or "qwen2.5-0.5b"])
    check_status(status)
    if dp is not None:
        c.dp = setting("dp", dp)
    if cp is not None:
        c.cp = setting("cp", cp)
    if bucket_tokens is not None:
        c.bucket_tokens = setting("bucket_tokens", bucket_tokens)
    c.policy, policy = option("policy", policy, POLICIES)
    c.victim, victim = option("victim", victim, VICTIMS)
    c.flops, flops = option("flops", flops, FLOPS)
    c.shard_padding, shard_padding = option("shard_padding", shard_padding, SHARD_PADDINGS)
    c.max_micro_batches = setting("max_micro_batches", max_micro_batches)
    c.model = c_model_shape(shape)
    c.pad_multiple = setting("pad_multiple", pad_multiple)
    c.pad_local = flag("pad_local", pad_local)
    c.lockstep = flag("lockstep", lockstep)
    if subgroups is not None:
        c.subgroups = flag("subgroups", subgroups)
    c.fill_empty = flag("fill_empty", fill_empty)
    c.micro_batches = setting("micro_batches", micro_batches)
    c.chunk_keep = setting("chunk_keep", chunk_keep)
    c.chunk_state_permille = setting("chunk_state_permille", chunk_state_permille)
    c.sync, sync = option("sync", sync, SYNCS)
    if chunk_size is None:  # off, except chunkflow's default, as the CLI's
        c.chunk_size = default_chunk_size(c) if policy == "chunkflow" else 0
    else:
        c.chunk_size = setting("chunk_size", chunk_size)
    if c.max_micro_batches and c.micro_batches > c.max_micro_batches:
        raise make_error(Status.MICRO_BATCH_LIMIT, f"micro_batches={c.micro_batches} is more "
                         f"than max_micro_batches={c.max_micro_batches}: lower micro_batches or "
                         "raise max_micro_batches (0 = no limit)", value=c.micro_batches,
                         limit=c.max_micro_batches, field_name="micro_batches")
    if cost_model is None:
        cost = None
    elif isinstance(cost_model, CostModel):
        cost = cost_model._frozen_copy()
    elif isinstance(cost_model, str) and cost_model.lower() in GPUS:
        cost = CostModel(cost_model.lower(), shape)._frozen_copy()
    else:
        wanted = (f"None, a GPU preset ({', '.join(map(repr, GPUS))}) or a skrull.CostModel "
                  "(skrull.CostModel.from_json(path) for a calibrated one)")
        if isinstance(cost_model, str):
            raise make_error(Status.INVALID_ENUM, f"cost_model={cost_model!r} is not a GPU "
                             f"preset: use {wanted}", ConfigError, field_name="cost_model")
        raise type_error("cost_model", cost_model, wanted)
    if cost is not None:
        cost._check_overlap()
    c.cost_model = None if cost is None else ctypes.addressof(cost._c)
    c.struct_size = ctypes.sizeof(c)
    cfg = Config(c.dp, c.cp, c.bucket_tokens, policy, victim, flops, shard_padding,
                 c.max_micro_batches, shape, c.pad_multiple, bool(c.pad_local),
                 bool(c.lockstep), cost, bool(c.subgroups), bool(c.fill_empty),
                 c.micro_batches, c.chunk_size, c.chunk_keep, c.chunk_state_permille, sync)
    check_config(c)
    return cfg, c


def default_chunk_size(c: _ffi.skrull_config) -> int:
    """The library's chunk size for ``chunkflow`` given none (``skrull_chunk_size_default``:
    the largest power of two within ``bucket_tokens`` whose chunked peak on the CP group, for
    the longest sequence the layout accepts sharded, fits ``bucket_tokens``); ``ConfigError``
    (``NO_CHUNK_SIZE``) with the numbers when none does."""
    size = ctypes.c_uint32()
    info = _ffi.skrull_error_info()
    status: int = _ffi.lib.skrull_chunk_size_default(ctypes.byref(c), 0, ctypes.byref(size),
                                                     ctypes.byref(info))
    if status != Status.OK:
        raise from_info(info, status, "policy='chunkflow' without chunk_size", c)
    return size.value


def _recommended() -> tuple[str, bool]:
    """The policy name and sub-group setting of the library's recommended preset."""
    status, c = _ffi.recommended_config(PRESETS["qwen2.5-0.5b"])
    check_status(status)
    return next(n for n, v in POLICIES.items() if v == c.policy), bool(c.subgroups)


#: The library's recommended policy and sub-group setting (``skrull_config_recommended_init``,
#: the core's ``Config::recommended``): the ``Scheduler`` defaults, as the CLI's.
RECOMMENDED_POLICY, RECOMMENDED_SUBGROUPS = _recommended()
