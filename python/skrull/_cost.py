"""``CostModel``: the cost model ``balanced`` plans with (``skrull_cost_model``), its GPU presets
and the JSON file format that ``skrull calibrate`` prints and ``--cost-model FILE`` reads."""

from __future__ import annotations

import ctypes
import json
import math
import operator
import os
from functools import lru_cache
from typing import Any, Iterator, Mapping

from . import _ffi
from ._args import check_config, option
from ._errors import ArgumentError, ConfigError, Error, Status, check, make_error, type_error
from ._shape import c_model_shape, model_shape

#: ``SKRULL_GPU_*`` by name.
GPUS = {"h100": _ffi.GPU_H100, "h200": _ffi.GPU_H200}
#: ``SKRULL_OVERLAP_*`` by name (the names of the cost-model file).
OVERLAPS = {"local-attention": _ffi.OVERLAP_LOCAL_ATTENTION,
            "all-attention": _ffi.OVERLAP_ALL_ATTENTION}

#: Every field after ``struct_size``, in ``skrull_cost_model`` order.
FIELDS = tuple(field[0] for field in _ffi.skrull_cost_model._fields_[1:])
_TABLES = {"attention_seqlen": "seqlen", "attention_fwd_flops": "fwd_flops",
           "attention_bwd_flops": "bwd_flops"}
_WHOLE = {"attention_tile", "gpus_per_node"}  # uint32_t; every other scalar is a double
_U32_MAX = 2**32 - 1
# The order `skrull calibrate` writes a file in (cli/src/calibrate.rs, cost_model_json).
_FILE_ORDER = ("peak_flops", "gemm_efficiency", "hbm_bandwidth", "weight_bytes", "weight_passes",
               "attention", "attention_tile", "attention_bwd_ratio", "kv_element_bytes",
               "comm_passes", "ring_step_latency_s", "inter_node_ring_step_latency_s",
               "intra_node_bandwidth", "inter_node_bandwidth", "gpus_per_node", "overlap",
               "kernels_per_layer", "kernel_launch_s", "micro_batch_extra_s",
               "iteration_fixed_s", "sharded_sequence_s", "local_sequence_s")


def _bad(field: str, why: str) -> Error:
    return make_error(Status.INVALID_COST_MODEL, f"cost model: {field!r} {why}", ConfigError,
                      field_name=field)


def _number(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and \
            not hasattr(value, "__float__"):
        raise type_error(f"cost model field {field}", value, "a number", field)
    return float(value)


def _whole(field: str, value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise type_error(f"cost model field {field}", value, field=field)
    value = operator.index(value)
    if not 0 <= value <= _U32_MAX:  # ctypes would wrap it into a valid-looking uint32_t
        raise _bad(field, f"= {value} is out of range: it must be a whole number from 0 to "
                   f"{_U32_MAX}")
    return int(value)


class CostModel:
    """Every coefficient of the time model ``balanced`` plans with (``skrull_cost_model``;
    docs/cost_model.md): hardware, kernels and topology.

    ``CostModel("h100")`` / ``CostModel("h200", model="qwen2.5-7b")`` is the library's GPU preset
    for a model shape (the shape picks the attention table); keyword arguments then change
    fields, and so does plain assignment (``m.gpus_per_node = 4``). The scalar fields have the C
    names; ``attention_seqlen``, ``attention_fwd_flops`` and ``attention_bwd_flops`` are tuples of
    6; ``overlap`` is ``"local-attention"`` or ``"all-attention"``. The library checks the
    values when a ``Scheduler`` is built (or ``validate()`` is called): a bad one raises
    ``ConfigError`` ``INVALID_COST_MODEL`` naming the field.

    ``from_json(path)`` reads the file ``skrull calibrate`` prints (every field optional: a
    missing one keeps the preset's value); ``to_json()`` writes it. A ``Scheduler`` keeps a
    read-only copy (``scheduler.config.cost_model``): changing this object later does not
    change that scheduler's plans.

    Parameters
    ----------
    gpu : str or int, optional
        ``"h100"`` (default) or ``"h200"`` (``skrull.GPUS``).
    model : str, ModelShape or dict, optional
        The model shape (as ``Scheduler(model=...)``; default ``"qwen2.5-0.5b"``).
    **fields
        Fields to change, by their C names (``gpus_per_node=16``).

    Raises
    ------
    ConfigError
        An unknown GPU (``INVALID_ENUM``), a whole-number field out of range
        (``INVALID_COST_MODEL``, ``field_name`` the field).
    ArgumentError
        A value of the wrong type.
    AttributeError
        An unknown field name.

    Example
    -------
    >>> import skrull
    >>> m = skrull.CostModel("h100", gpus_per_node=4)
    >>> m
    CostModel('h100', gpus_per_node=4)
    >>> m.gpus_per_node, m.overlap
    (4, 'local-attention')
    """

    __slots__ = ("_c", "_frozen", "gpu", "model")

    def __init__(self, gpu: str | int = "h100", model: Any = "qwen2.5-0.5b",
                 **fields: Any) -> None:
        code, name = option("gpu", gpu, GPUS)
        shape = model_shape(model)
        status, c = _ffi.preset_cost_model(code, c_model_shape(shape))
        check(status, f"cost model preset gpu={gpu!r}")
        object.__setattr__(self, "_c", c)
        object.__setattr__(self, "_frozen", False)
        object.__setattr__(self, "gpu", name)  # the preset it started from, and its shape
        object.__setattr__(self, "model", shape)
        for key, value in fields.items():
            setattr(self, key, value)

    # ---- fields -------------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not set yet (copy, unpickling): no field lookup
            raise AttributeError(name)
        if name in _TABLES:
            return tuple(getattr(self._c, name))
        if name == "overlap":
            code = self._c.overlap
            return next((k for k, v in OVERLAPS.items() if v == code), code)
        if name in FIELDS:
            return getattr(self._c, name)
        raise AttributeError(f"CostModel has no field {name!r} (fields: {', '.join(FIELDS)})")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in FIELDS:
            raise AttributeError(f"CostModel has no field {name!r} (fields: {', '.join(FIELDS)})")
        if self._frozen:
            raise AttributeError("this CostModel belongs to a Scheduler and is read-only; "
                                 "copy() it to change it")
        if name in _TABLES:
            items = list(value) if hasattr(value, "__iter__") else None
            if items is None or len(items) != _ffi.ATTENTION_POINTS:
                raise make_error(Status.INVALID_ARG, f"cost model: {name} must hold "
                                 f"{_ffi.ATTENTION_POINTS} values, got {value!r}",
                                 field_name=name)
            conv = _whole if name == "attention_seqlen" else _number
            getattr(self._c, name)[:] = [conv(name, v) for v in items]
        elif name == "overlap":
            if isinstance(value, str):
                if value not in OVERLAPS:
                    raise _bad("overlap", f"must be one of {', '.join(OVERLAPS)}, got {value!r}")
                value = OVERLAPS[value]
            self._c.overlap = _whole(name, value)  # an unknown number is INVALID_ENUM in C
        elif name in _WHOLE:
            setattr(self._c, name, _whole(name, value))
        else:
            setattr(self._c, name, _number(name, value))

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        """(field, value) pairs in ``skrull_cost_model`` order."""
        return ((name, getattr(self, name)) for name in FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CostModel):
            return NotImplemented
        return bytes(self._c) == bytes(other._c)

    def __hash__(self) -> int:
        if not self._frozen:
            raise TypeError("unhashable: a CostModel is mutable (a Scheduler's copy is not)")
        return hash(bytes(self._c))

    def __repr__(self) -> str:
        base = _preset(self.gpu, self.model)
        changed = [f"{k}={v!r}" for k, v in self if v != getattr(base, k)]
        return f"CostModel({self.gpu!r}{''.join(', ' + c for c in changed)})"

    def copy(self) -> CostModel:
        """A mutable copy (of a ``Scheduler``'s read-only one, too).

        Returns
        -------
        CostModel
            Equal to this one, not frozen.

        Example
        -------
        >>> import skrull
        >>> m = skrull.CostModel("h200")
        >>> m.copy() == m
        True
        """
        other = object.__new__(CostModel)
        object.__setattr__(other, "_c", _ffi.skrull_cost_model.from_buffer_copy(self._c))
        object.__setattr__(other, "_frozen", False)
        object.__setattr__(other, "gpu", self.gpu)
        object.__setattr__(other, "model", self.model)
        return other

    def slowed(self, factor: float) -> CostModel:
        """The same machine ``factor`` times slower (``skrull_cost_model_slowed``).

        Every time the model predicts (GEMMs, attention, ring latency and traffic, launches,
        the fixed costs per micro-batch, step and sharded sequence) times ``factor``; the
        overlap rule and every plan stay the same. It is the model a refit describes when it
        finds only one uniform factor (``Refit.verdict == "scale-only"``, ``Refit.scale``).

        Parameters
        ----------
        factor : float
            Finite and above 0 (2.0: every prediction twice as long).

        Returns
        -------
        CostModel
            A new, mutable model of the same preset and shape.

        Raises
        ------
        ArgumentError
            ``factor`` not a finite number above 0 (``INVALID_ARG``).
        ConfigError
            A value of this model out of range (``INVALID_COST_MODEL``).

        Example
        -------
        >>> import skrull
        >>> m = skrull.CostModel("h100")
        >>> slow = m.slowed(2.0)
        >>> slow.kernel_launch_s / m.kernel_launch_s, m.peak_flops / slow.peak_flops
        (2.0, 2.0)
        """
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not math.isfinite(factor) or factor <= 0:
            raise make_error(Status.INVALID_ARG, f"CostModel.slowed: factor={factor!r} must be "
                             "a finite number above 0", ArgumentError, field_name="factor")
        self._check_overlap()
        other = self.copy()
        check(_ffi.lib.skrull_cost_model_slowed(ctypes.byref(self._c), float(factor),
                                                ctypes.byref(other._c),
                                                ctypes.sizeof(other._c)))
        return other

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles (for multiprocessing) as the preset name, the shape and the struct's bytes;
        the copy is mutable."""
        return (_from_bytes, (self.gpu, self.model, bytes(self._c)))

    def _frozen_copy(self) -> CostModel:
        other = self.copy()
        object.__setattr__(other, "_frozen", True)
        return other

    # ---- checks -------------------------------------------------------------------------------

    def validate(self) -> None:
        """Has the library check every value.

        Raises
        ------
        ConfigError
            ``INVALID_COST_MODEL`` with ``field`` and ``field_name``, or ``INVALID_ENUM`` for
            an unknown ``overlap``.

        Example
        -------
        >>> import skrull
        >>> m = skrull.CostModel("h100")
        >>> m.gemm_efficiency = 1.5
        >>> m.validate()
        Traceback (most recent call last):
        ...
        skrull.ConfigError: cost model: gemm_efficiency is out of range (docs/cost_model.md lists each field's valid values); fix it, or start again from skrull.CostModel('h100') [INVALID_COST_MODEL]
        """
        self._check_overlap()
        status, cfg = _ffi.preset_config(0)
        check(status)
        cfg.cost_model = ctypes.addressof(self._c)
        check_config(cfg, "cost model")

    def _check_overlap(self) -> None:
        """``overlap`` must be one of ``OVERLAPS`` (a number set directly may not be)."""
        code = self._c.overlap
        if code not in OVERLAPS.values():
            raise make_error(Status.INVALID_ENUM, f"cost_model.overlap={code} is not an overlap "
                             f"mode: use one of {', '.join(map(repr, OVERLAPS))}", ConfigError,
                             value=code, limit=max(OVERLAPS.values()), field_name="overlap")

    # ---- the file format ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The cost-model file's fields.

        Returns
        -------
        dict
            ``skrull calibrate``'s keys, in its order (the attention table as one
            ``attention`` object).

        Example
        -------
        >>> import skrull
        >>> list(skrull.CostModel("h100").to_dict())[:3]
        ['peak_flops', 'gemm_efficiency', 'hbm_bandwidth']
        """
        out: dict[str, Any] = {}
        for key in _FILE_ORDER:
            if key == "attention":
                out[key] = {short: list(getattr(self, name)) for name, short in _TABLES.items()}
            else:
                out[key] = getattr(self, key)
        return out

    def to_json(self, path: str | os.PathLike[str] | None = None, comment: str = "") -> str:
        """The cost-model file text.

        Parameters
        ----------
        path : str or path, optional
            Where to write it too.
        comment : str, optional
            The file's ``_comment``.

        Returns
        -------
        str
            The JSON text. Floats are written with Python's shortest round-trip repr, so
            ``from_json`` reads back the same bits.

        Example
        -------
        >>> import json, skrull
        >>> json.loads(skrull.CostModel("h100").to_json())["gpus_per_node"]
        8
        """
        text = json.dumps({"_comment": comment, **self.to_dict()}, indent=2) + "\n"
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any], gpu: str | int = "h100",
                  model: Any = "qwen2.5-0.5b") -> CostModel:
        """A model from a cost-model file's fields over the ``gpu`` preset for ``model`` (as
        ``skrull --cost-model FILE --gpu GPU --model MODEL``): keys starting with ``_`` are
        comments, an unknown key or a value of the wrong type is ``INVALID_COST_MODEL`` naming
        it, and the result is validated by the library.

        Parameters
        ----------
        fields : mapping
            The file's object (``json.load`` of it).
        gpu : str or int, optional
            The preset the missing fields come from.
        model : str, ModelShape or dict, optional
            The model shape.

        Returns
        -------
        CostModel
            Validated.

        Raises
        ------
        ConfigError
            ``INVALID_COST_MODEL`` naming the key (unknown, wrongly typed, or a value the
            library refuses).

        Example
        -------
        >>> import skrull
        >>> skrull.CostModel.from_dict({"gpus_per_node": 4}).gpus_per_node
        4
        """
        if not isinstance(fields, Mapping):
            raise _bad("(file)", "must be a JSON object")
        m = cls(gpu, model)
        for key, value in fields.items():
            if key.startswith("_"):
                continue
            if key == "attention":
                if not isinstance(value, Mapping):
                    raise _bad("attention", "must be an object")
                for short, table in value.items():
                    name = next((n for n, s in _TABLES.items() if s == short), None)
                    if name is None:
                        raise _bad(f"attention.{short}", "is not a field")
                    _set_from_file(m, name, table, f"attention.{short}")
            elif key in _FILE_ORDER:
                _set_from_file(m, key, value, key)
            else:
                raise _bad(key, "is not a field")
        m.validate()
        return m

    @classmethod
    def from_json(cls, path: str | os.PathLike[str], gpu: str | int = "h100",
                  model: Any = "qwen2.5-0.5b") -> CostModel:
        """Reads a cost-model file (the JSON ``skrull calibrate`` prints).

        Parameters
        ----------
        path : str or path
            The file.
        gpu : str or int, optional
            The preset the missing fields come from (``--gpu`` of the CLI).
        model : str, ModelShape or dict, optional
            The model shape (``--model`` of the CLI).

        Returns
        -------
        CostModel
            Validated by the library.

        Raises
        ------
        ConfigError
            ``INVALID_COST_MODEL``: not JSON, or a key as in ``from_dict``.
        OSError
            The file cannot be read.

        Example
        -------
        >>> import os, tempfile, skrull
        >>> path = os.path.join(tempfile.mkdtemp(), "model.json")
        >>> _ = skrull.CostModel("h100", gpus_per_node=16).to_json(path)
        >>> skrull.CostModel.from_json(path).gpus_per_node
        16
        """
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            fields = json.loads(text)
        except ValueError as exc:
            raise make_error(Status.INVALID_COST_MODEL, f"cost model {os.fspath(path)}: "
                             f"{exc}") from None
        return cls.from_dict(fields, gpu, model)


def _set_from_file(m: CostModel, name: str, value: Any, key: str) -> None:
    """One field from a file, with the file's type rules (JSON numbers; whole numbers where C
    has ``uint32_t``; overlap by name)."""
    def number(x: Any) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise _bad(key, "must be a number")
        return float(x)

    def whole(x: Any) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= _U32_MAX:
            raise _bad(key, "must be a whole number")
        return x

    if name in _TABLES:
        if not isinstance(value, list) or len(value) != _ffi.ATTENTION_POINTS:
            raise _bad(key, f"must be an array of {_ffi.ATTENTION_POINTS} numbers")
        values = [number(x) for x in value]
        if name == "attention_seqlen":
            if not all(1 <= x <= _U32_MAX and math.floor(x) == x for x in values):
                raise _bad(key, "must hold token counts")
            values = [int(x) for x in values]
        setattr(m, name, values)
    elif name == "overlap":
        if value not in OVERLAPS:
            raise _bad(key, f"must be one of {', '.join(map(repr, OVERLAPS))}")
        m.overlap = value
    elif name in _WHOLE:
        setattr(m, name, whole(value))
    else:
        setattr(m, name, number(value))


def _from_bytes(gpu: str, model: Any, raw: bytes) -> CostModel:
    m = CostModel(gpu, model)
    ctypes.memmove(ctypes.addressof(m._c), raw, min(len(raw), ctypes.sizeof(m._c)))
    return m


@lru_cache(maxsize=None)
def _preset(gpu: str, model: Any) -> CostModel:
    return CostModel(gpu, model)
