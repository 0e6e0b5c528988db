"""The decoder shape the profiler builds: presets, command-line fields and Hugging Face
``config.json`` files, its parameter count and the ``--model`` string ``skrull calibrate``
reads."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Union


@dataclass(frozen=True)
class ProfileShape:
    """A Qwen2/Llama-style decoder: ``layers`` x (RMSNorm, QKV with grouped-query attention,
    rotary embedding, causal attention, O projection, RMSNorm, SwiGLU FFN), then a final
    RMSNorm and the LM head.

    Parameters
    ----------
    hidden, ffn, layers, heads, kv_heads, vocab : int
        The widths and counts (``vocab`` 0: no LM head).
    head_dim : int, optional
        Per-head width; 0 (default) for ``hidden // heads``.
    qkv_bias : bool, optional
        Q, K, V with biases (Qwen2).
    tie_embeddings : bool, optional
        The LM head shares the embedding.
    name : str, optional
        A label for the reports.

    Raises
    ------
    ValueError
        A field is not positive, the heads are not a multiple of the KV heads, or the head
        dim is odd.

    Example
    -------
    >>> from skrull.profile import PRESETS
    >>> PRESETS["qwen2.5-0.5b"].kv_hidden, PRESETS["qwen2.5-0.5b"].model_arg()
    (128, 'qwen2.5-0.5b')
    """

    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int = 0
    qkv_bias: bool = True
    tie_embeddings: bool = False
    name: str = "custom"

    def __post_init__(self) -> None:
        if self.head_dim == 0 and self.heads > 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        for field in ("hidden", "ffn", "layers", "heads", "kv_heads", "head_dim"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model shape: {field} must be positive, got "
                                 f"{getattr(self, field)}")
        if self.vocab < 0:
            raise ValueError(f"model shape: vocab must not be negative, got {self.vocab}")
        if self.heads % self.kv_heads:
            raise ValueError(f"model shape: {self.heads} query heads are not a multiple of "
                             f"{self.kv_heads} KV heads")
        if self.head_dim % 2:
            raise ValueError(f"model shape: head dim {self.head_dim} must be even (rotary "
                             "embedding)")

    @property
    def kv_hidden(self) -> int:
        """K (or V) width: KV heads x head dim."""
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Parameters of one decoder layer (two norms, Q/K/V with their biases, O, SwiGLU)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_hidden
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return 2 * h + h * q + 2 * h * kv + bias + q * h + 3 * h * self.ffn

    def params(self) -> int:
        """Parameters of the whole model: layers, final norm, embedding and (untied) head."""
        head = 0 if self.tie_embeddings else self.vocab * self.hidden
        return self.layers * self.layer_params() + self.hidden + self.vocab * self.hidden + head

    def model_arg(self) -> str:
        """The ``--model`` value of ``skrull calibrate`` and ``skrull plan`` for this shape:
        the name of the preset with the same fields, else ``custom:...`` (the core counts
        attention FLOPs with ``hidden``)."""
        for name, preset in PRESETS.items():
            if replace(preset, name=self.name) == self:
                return name
        return (f"custom:hidden={self.hidden},kv_hidden={self.kv_hidden},ffn={self.ffn},"
                f"layers={self.layers},vocab={self.vocab},swiglu=true")

    def model_fields(self) -> dict[str, Any]:
        """The fields of ``skrull.ModelShape`` (the library's FLOPs shape) for this model."""
        return dict(hidden=self.hidden, kv_hidden=self.kv_hidden, ffn=self.ffn,
                    layers=self.layers, vocab=self.vocab, swiglu=True)

    def describe(self) -> str:
        """One line: every field."""
        return (f"{self.name}: hidden {self.hidden}, ffn {self.ffn}, {self.layers} layers, "
                f"{self.heads} query / {self.kv_heads} KV heads of {self.head_dim}, vocab "
                f"{self.vocab}, QKV bias {self.qkv_bias}, tied embeddings "
                f"{self.tie_embeddings}, {self.params() / 1e6:.1f} M parameters")


#: The shapes of the library's model presets, with the head layout the profiler needs.
PRESETS: dict[str, ProfileShape] = {
    "qwen2.5-0.5b": ProfileShape(hidden=896, ffn=4864, layers=24, heads=14, kv_heads=2,
                                 vocab=151_936, head_dim=64, qkv_bias=True,
                                 tie_embeddings=True, name="qwen2.5-0.5b"),
    "qwen2.5-7b": ProfileShape(hidden=3584, ffn=18_944, layers=28, heads=28, kv_heads=4,
                               vocab=152_064, head_dim=128, qkv_bias=True,
                               tie_embeddings=False, name="qwen2.5-7b"),
}


def from_hf_config(config: Union[str, os.PathLike[str], Mapping[str, Any]],
                   overrides: Optional[Mapping[str, Any]] = None) -> ProfileShape:
    """The shape of a Hugging Face model configuration.

    Parameters
    ----------
    config : str, path or dict
        A ``config.json`` file, the model directory holding it, or its parsed dict. Read:
        ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
        ``num_attention_heads``, ``num_key_value_heads``, ``vocab_size``, optional
        ``head_dim``, ``attention_bias`` and ``tie_word_embeddings`` (Qwen2 configs have QKV
        biases without saying so).
    overrides : mapping, optional
        Fields of ``ProfileShape`` that replace what the file says (``None`` values ignored).

    Returns
    -------
    ProfileShape
        The decoder the profiler builds; ``skrull.ModelShape(**shape.model_fields())`` is
        the library's FLOPs shape (``skrull.ModelShape.from_hf_config`` gives it directly).

    Raises
    ------
    ValueError
        A required key is missing, or the shape is inconsistent.
    OSError
        The file cannot be read.

    Example
    -------
    >>> from skrull.profile import from_hf_config
    >>> from_hf_config({"hidden_size": 896, "intermediate_size": 4864,
    ...                 "num_hidden_layers": 24, "num_attention_heads": 14,
    ...                 "num_key_value_heads": 2, "vocab_size": 151936}).kv_hidden
    128
    """
    if isinstance(config, Mapping):
        cfg, name = dict(config), "hf"
    else:
        path = os.fspath(config)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        name = os.path.basename(os.path.dirname(os.path.abspath(path))) or "hf"
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = dict(cfg["text_config"])
    try:
        heads = int(cfg["num_attention_heads"])
        fields = dict(hidden=int(cfg["hidden_size"]), ffn=int(cfg["intermediate_size"]),
                      layers=int(cfg["num_hidden_layers"]), heads=heads,
                      kv_heads=int(cfg.get("num_key_value_heads") or heads),
                      vocab=int(cfg["vocab_size"]),
                      head_dim=int(cfg.get("head_dim") or 0),
                      qkv_bias=bool(cfg.get("attention_bias",
                                            cfg.get("model_type") == "qwen2")),
                      tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                      name=name)
    except KeyError as exc:
        where = "the config" if isinstance(config, Mapping) else os.fspath(config)
        raise ValueError(f"{where}: missing {exc.args[0]}") from None
    fields.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return ProfileShape(**fields)  # type: ignore[arg-type]
