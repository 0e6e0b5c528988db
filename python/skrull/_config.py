"""Configuration: option names, the model shape, argument checks, and the one function that
builds a ``skrull_config`` (new C fields are wired in there and in ``Config``)."""

from __future__ import annotations

import ctypes
import json
import math
import operator
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from . import _ffi
from ._cost import GPUS, CostModel
from ._errors import (ArgumentError, ConfigError, Status, from_info, make_error, range_error,
                      type_error)

#: ``SKRULL_POLICY_*`` by name.
POLICIES = {"skrull": 0, "deepspeed": 1, "packed": 2, "roundrobin": 3, "balanced": 4,
            "chunkflow": 5}
#: ``SKRULL_VICTIM_*`` by name.
VICTIMS = {"shortest": 0, "longest": 1}
#: ``SKRULL_FLOPS_*`` by name.
FLOPS = {"paper": 0, "megatron": 1}
#: ``SKRULL_SHARD_PADDING_*`` by name.
SHARD_PADDINGS = {"none": 0, "zigzag": 1}
#: ``SKRULL_PRESET_*`` by name (the paper's models and layouts).
PRESETS = {"qwen2.5-0.5b": 0, "qwen2.5-7b": 1}

_U32_MAX = 2**32 - 1
#: Integer settings: (smallest, largest, status out of range, what it is).
LIMITS: dict[str, tuple[int, int, Status, str]] = {
    "dp": (1, 65536, Status.INVALID_DP, "the data-parallel size"),
    "cp": (1, 256, Status.INVALID_CP, "the context-parallel size: GPUs per DP rank"),
    "bucket_tokens": (1, 2**31 - 1, Status.INVALID_BUCKET,
                      "BucketSize: the most tokens one GPU holds in one micro-batch"),
    "pad_multiple": (0, _ffi.MAX_PAD_MULTIPLE, Status.INVALID_PAD_MULTIPLE,
                     "0 or 1 for no padding"),
    "max_micro_batches": (0, _U32_MAX, Status.INVALID_ARG, "0 for no limit"),
    "micro_batches": (0, _U32_MAX, Status.INVALID_ARG, "0 for as many as the batch needs"),
    "max_sequences": (0, _U32_MAX, Status.INVALID_ARG, "the batch size to size buffers for"),
    "chunk_size": (0, _U32_MAX, Status.INVALID_CHUNKING,
                   "0 for no chunking, else the most tokens of one chunk"),
    "chunk_keep": (1, 64, Status.INVALID_CHUNKING,
                   "chunks whose activations are kept (the others are recomputed)"),
    "chunk_state_permille": (0, 1000, Status.INVALID_CHUNKING,
                             "thousandths of a token of K/V state per token"),
}


@dataclass(frozen=True)
class ModelShape:
    """The transformer shape FLOPs are counted for (``skrull_model_shape``).

    Parameters
    ----------
    hidden : int
        Model width.
    kv_hidden : int
        Width of K (or V): KV heads x head dim (``hidden`` without grouped-query attention).
    ffn : int
        Width of the feed-forward layer.
    layers : int
        Decoder layers.
    vocab : int, optional
        Vocabulary size (the LM head's width); 0 leaves the head out.
    swiglu : bool, optional
        A gated (SwiGLU) feed-forward layer: three matrices instead of two.

    Example
    -------
    >>> import skrull
    >>> skrull.ModelShape(hidden=896, kv_hidden=128, ffn=4864, layers=24, vocab=151936)
    ModelShape(hidden=896, kv_hidden=128, ffn=4864, layers=24, vocab=151936, swiglu=True)
    """

    hidden: int
    kv_hidden: int
    ffn: int
    layers: int
    vocab: int = 0
    swiglu: bool = True

    @classmethod
    def from_hf_config(cls, config: Union[str, os.PathLike[str], Mapping[str, Any], Any]
                       ) -> ModelShape:
        """The shape of a Hugging Face model configuration.

        Parameters
        ----------
        config : str, path, dict or transformers.PretrainedConfig
            A ``config.json`` file, a model directory holding one, its parsed dict, or a
            configuration object (anything with ``to_dict()``). Read: ``hidden_size``,
            ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
            ``num_key_value_heads`` (default: the attention heads), ``head_dim`` (default:
            ``hidden_size / num_attention_heads``), ``vocab_size``; a multimodal
            configuration's ``text_config`` is used when the top level has no
            ``hidden_size``.

        Returns
        -------
        ModelShape
            ``kv_hidden`` = KV heads x head dim; ``swiglu`` True (Llama, Qwen, Mistral and
            their kin gate their MLP).

        Raises
        ------
        ArgumentError
            ``config`` is not a path, a dict or a configuration object, or a key is missing
            or not a whole number (the message names it).

        Example
        -------
        >>> import skrull
        >>> skrull.ModelShape.from_hf_config({
        ...     "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        ...     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936})
        ModelShape(hidden=896, kv_hidden=128, ffn=4864, layers=24, vocab=151936, swiglu=True)
        """
        return _from_hf(_hf_dict(config))


def _hf_dict(config: Any) -> dict[str, Any]:
    """The dict of a Hugging Face configuration given as a path, a dict or an object."""
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise make_error(Status.INVALID_ARG, f"model: cannot read the Hugging Face "
                             f"config {path!r}: {exc}", ArgumentError,
                             field_name="model") from None
    elif isinstance(config, Mapping):
        data = dict(config)
    elif hasattr(config, "to_dict"):
        data = config.to_dict()
    else:
        raise type_error("config", config, "a config.json path, a dict or a configuration "
                         "object")
    if not isinstance(data, dict):
        raise type_error("config", data, "a JSON object")
    if "hidden_size" not in data and isinstance(data.get("text_config"), Mapping):
        data = dict(data["text_config"])
    return data


def _from_hf(cfg: Mapping[str, Any]) -> ModelShape:
    def whole(key: str, default: Any = None) -> int:
        value = cfg.get(key, default)
        if value is None:
            raise make_error(Status.INVALID_ARG, f"model: the Hugging Face config has no "
                             f"{key!r} (needed: hidden_size, intermediate_size, "
                             "num_hidden_layers, num_attention_heads, vocab_size)",
                             ArgumentError, field_name=key)
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise type_error(f"model[{key!r}]", value)
        return operator.index(value)

    hidden, heads = whole("hidden_size"), whole("num_attention_heads")
    kv_heads = whole("num_key_value_heads", cfg.get("num_key_value_heads") or heads)
    head_dim = whole("head_dim", cfg.get("head_dim") or (hidden // heads if heads else 0))
    return ModelShape(hidden=hidden, kv_hidden=kv_heads * head_dim,
                      ffn=whole("intermediate_size"), layers=whole("num_hidden_layers"),
                      vocab=whole("vocab_size", 0), swiglu=True)


ModelSpec = Union[str, ModelShape, Mapping[str, Any]]
_SHAPE_FIELDS = ("hidden", "kv_hidden", "ffn", "layers", "vocab", "swiglu")


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

    @property
    def chunking(self) -> bool:
        """Whether chunking is on (``chunk_size`` above 0)."""
        return self.chunk_size > 0


def whole(name: str, value: Any) -> int:
    """An integer argument (a Python or numpy integer, not a bool); else ``ArgumentError``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise type_error(name, value)
    return operator.index(value)


def setting(name: str, value: Any) -> int:
    """An integer setting of ``LIMITS``, checked against its range in Python: ``ArgumentError``
    for a non-integer, ``ConfigError`` with the value and the limit out of range."""
    v = whole(name, value)
    lo, hi, status, what = LIMITS[name]
    if not lo <= v <= hi:
        raise range_error(name, v, lo, hi, status, what, ConfigError)
    return v


def _u32(name: str, value: Any, status: Status) -> int:
    """An integer that must fit ``uint32_t`` (model fields): never wrapped."""
    v = whole(name, value)
    if not 0 <= v <= _U32_MAX:
        raise range_error(name, v, 1, _U32_MAX, status, "", ConfigError)
    return v


def _option(name: str, value: Any, table: Mapping[str, int]) -> tuple[int, str]:
    """An option by name (any case) or by its C integer; unknown ones are ``INVALID_ENUM``."""
    names = ", ".join(repr(k) for k in table)
    if isinstance(value, str):
        if value.lower() not in table:
            raise make_error(Status.INVALID_ENUM, f"{name}={value!r} is not a known {name}: use "
                             f"one of {names}", ConfigError, field_name=name)
        return table[value.lower()], value.lower()
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise type_error(name, value, f"one of {names}")
    code = operator.index(value)
    top = max(table.values())
    by_code = [k for k, v in table.items() if v == code]
    if not by_code:
        raise make_error(Status.INVALID_ENUM, f"{name}={code} is not a {name} number: use one "
                         f"of {names} (or its number, 0 to {top})", ConfigError, value=code,
                         limit=top, field_name=name)
    return code, by_code[0]


def _flag(name: str, value: Any) -> int:
    """A True/False option (1 and 0 are accepted too)."""
    if isinstance(value, bool):
        return int(value)
    if not hasattr(value, "__index__"):
        raise type_error(name, value, "True or False")
    v = operator.index(value)
    if v not in (0, 1):
        raise make_error(Status.INVALID_ENUM, f"{name}={v} is not a flag: {name} must be True "
                         "or False (or 1/0)", ConfigError, value=v, limit=1, field_name=name)
    return v


def model_shape(spec: Any) -> ModelShape:
    """The model shape a preset name, a ``ModelShape``, a dict of its fields, a Hugging Face
    configuration (a dict with ``hidden_size``, a ``config.json`` path or a configuration
    object) names."""
    if isinstance(spec, ModelShape):
        return spec
    if isinstance(spec, str) and spec.lower() in PRESETS:
        status, cfg = _ffi.preset_config(PRESETS[spec.lower()])
        check_status(status)
        m = cfg.model
        return ModelShape(m.hidden, m.kv_hidden, m.ffn, m.layers, m.vocab, bool(m.swiglu))
    if isinstance(spec, (str, os.PathLike)):
        if os.path.exists(os.fspath(spec)):
            return ModelShape.from_hf_config(spec)
        raise make_error(Status.INVALID_ENUM, f"model={spec!r} is not a preset or a file: use "
                         f"one of {', '.join(map(repr, PRESETS))}, a skrull.ModelShape, a dict "
                         "of its fields, or a Hugging Face config (dict, config.json path or "
                         "model directory)", ConfigError, field_name="model")
    if isinstance(spec, Mapping):
        if "hidden_size" in spec or "text_config" in spec:
            return ModelShape.from_hf_config(spec)
        unknown = [k for k in spec if k not in _SHAPE_FIELDS]
        missing = [k for k in _SHAPE_FIELDS[:4] if k not in spec]
        if unknown or missing:
            what = (f"unknown key {unknown[0]!r}" if unknown else
                    f"missing {', '.join(map(repr, missing))}")
            raise make_error(Status.INVALID_ARG, f"model: {what}; a model dict has the fields "
                             "of skrull.ModelShape (hidden, kv_hidden, ffn, layers, vocab, "
                             "swiglu) or Hugging Face config keys (hidden_size, "
                             "intermediate_size, num_hidden_layers, num_attention_heads, ...)",
                             ArgumentError, field_name="model")
        return ModelShape(**dict(spec))
    if hasattr(spec, "to_dict"):
        return ModelShape.from_hf_config(spec)
    raise type_error("model", spec, "a preset name, a skrull.ModelShape, a dict or a Hugging "
                     "Face config")


def check_status(code: int) -> None:
    """Raises for a failed preset call (no details)."""
    if code != Status.OK:
        raise make_error(code)


def c_model_shape(shape: ModelShape) -> _ffi.skrull_model_shape:
    """The C struct of a shape: a value that does not fit ``uint32_t`` is ``INVALID_MODEL``,
    a ``swiglu`` other than True/False ``INVALID_ENUM``."""
    c = _ffi.skrull_model_shape()
    for name in _SHAPE_FIELDS[:5]:
        setattr(c, name, _u32(f"model.{name}", getattr(shape, name), Status.INVALID_MODEL))
    c.swiglu = _flag("model.swiglu", shape.swiglu)
    return c


def config_error_info(c: _ffi.skrull_config) -> tuple[int, _ffi.skrull_error_info]:
    """(status, details) of the configuration alone (``skrull_config_check``: the first
    problem ``skrull_schedule`` would report for it, with its ``skrull_error_info``)."""
    info = _ffi.skrull_error_info()
    status: int = _ffi.lib.skrull_config_check(ctypes.byref(c), ctypes.byref(info))
    if status != Status.OK and info.status != status:  # details not written: none known
        info = _ffi.skrull_error_info(status=0, index=-1)
    return status, info


def check_config(c: _ffi.skrull_config, context: str = "",
                 config: Optional[Config] = None) -> None:
    """Raises the library's verdict on a configuration, with its error details."""
    status, info = config_error_info(c)
    if status != Status.OK:
        raise from_info(info, status, context, config)


def build(dp: Optional[int], cp: Optional[int], bucket_tokens: Optional[int], model: Any,
          policy: Any, victim: Any, flops: Any, shard_padding: Any, max_micro_batches: Any,
          pad_multiple: Any = 1, pad_local: Any = False, lockstep: Any = False,
          cost_model: Any = None, subgroups: Any = None, fill_empty: Any = False,
          micro_batches: Any = 0, chunk_size: Any = None, chunk_keep: Any = 1,
          chunk_state_permille: Any = 64) -> tuple[Config, _ffi.skrull_config]:
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
    c.policy, policy = _option("policy", policy, POLICIES)
    c.victim, victim = _option("victim", victim, VICTIMS)
    c.flops, flops = _option("flops", flops, FLOPS)
    c.shard_padding, shard_padding = _option("shard_padding", shard_padding, SHARD_PADDINGS)
    c.max_micro_batches = setting("max_micro_batches", max_micro_batches)
    c.model = c_model_shape(shape)
    c.pad_multiple = setting("pad_multiple", pad_multiple)
    c.pad_local = _flag("pad_local", pad_local)
    c.lockstep = _flag("lockstep", lockstep)
    if subgroups is not None:
        c.subgroups = _flag("subgroups", subgroups)
    c.fill_empty = _flag("fill_empty", fill_empty)
    c.micro_batches = setting("micro_batches", micro_batches)
    c.chunk_keep = setting("chunk_keep", chunk_keep)
    c.chunk_state_permille = setting("chunk_state_permille", chunk_state_permille)
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
                 c.micro_batches, c.chunk_size, c.chunk_keep, c.chunk_state_permille)
    check_config(c, config=cfg)
    return cfg, c


def default_chunk_size(c: _ffi.skrull_config) -> int:
    """The CLI's chunk size for ``chunkflow`` given none: the largest power of two (at most
    2^30) below the longest sequence the layout accepts (``L = u floor(cp C / u)`` for the
    shard unit ``u``) whose chunked peak on one GPU (the kept chunks, or one recomputed
    chunk, each at its local charge, plus ``L``'s K/V state) fits ``bucket_tokens``; 0 (then
    refused as ``INVALID_CHUNKING``) when none does."""
    cp, bucket, m = max(int(c.cp), 1), int(c.bucket_tokens), max(int(c.pad_multiple), 1)
    unit = m
    if cp > 1 and (c.shard_padding == SHARD_PADDINGS["zigzag"] or m > 1):
        unit = 2 * cp // math.gcd(2 * cp, m) * m
    longest = min(cp * bucket // unit * unit, 2**31 - 1)
    local_unit = m if c.pad_local else 1

    def local(t: int) -> int:
        return -(-t // local_unit) * local_unit

    def peak(size: int) -> int:
        n = -(-longest // size)
        k = min(max(int(c.chunk_keep), 1), n)
        kept = sum(local(min(size, longest - i * size)) for i in range(n - k, n))
        live = max(kept, local(size)) if n > k else kept
        return live + -(-longest * int(c.chunk_state_permille) // 1000)

    for k in range(30, -1, -1):
        if (1 << k) < longest and peak(1 << k) <= bucket:
            return 1 << k
    return 0


def _recommended() -> tuple[str, bool]:
    """The policy name and sub-group setting of the library's recommended preset."""
    status, c = _ffi.recommended_config(PRESETS["qwen2.5-0.5b"])
    check_status(status)
    return next(n for n, v in POLICIES.items() if v == c.policy), bool(c.subgroups)


#: The library's recommended policy and sub-group setting (``skrull_config_recommended_init``,
#: the core's ``Config::recommended``): the ``Scheduler`` defaults, as the CLI's.
RECOMMENDED_POLICY, RECOMMENDED_SUBGROUPS = _recommended()
