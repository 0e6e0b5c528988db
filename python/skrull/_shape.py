"""The model shape: ``ModelShape``, the presets it can be named by, Hugging Face
configurations, and its C struct."""

from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass
from typing import Any, Mapping, Union

from . import _ffi
from ._args import check_status, flag, u32
from ._errors import ArgumentError, ConfigError, Status, make_error, type_error

#: ``SKRULL_PRESET_*`` by name (the paper's models and layouts).
PRESETS = {"qwen2.5-0.5b": 0, "qwen2.5-7b": 1}


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


def c_model_shape(shape: ModelShape) -> _ffi.skrull_model_shape:
    """The C struct of a shape: a value that does not fit ``uint32_t`` is ``INVALID_MODEL``,
    a ``swiglu`` other than True/False ``INVALID_ENUM``."""
    c = _ffi.skrull_model_shape()
    for name in _SHAPE_FIELDS[:5]:
        setattr(c, name, u32(f"model.{name}", getattr(shape, name), Status.INVALID_MODEL))
    c.swiglu = flag("model.swiglu", shape.swiglu)
    return c
