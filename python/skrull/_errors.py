"""Exceptions: one base class, a subclass per group of ``skrull_status`` numbers."""

from __future__ import annotations

import enum

from . import _ffi


class Status(enum.IntEnum):
    """``skrull_status``: the stable status numbers of the C ABI (0 = OK)."""

    OK = 0
    NULL_ARG = 1
    BAD_STRUCT_SIZE = 2
    INVALID_ENUM = 3
    INVALID_ARG = 4
    WORKSPACE_TOO_SMALL = 5
    OUTPUT_TOO_SMALL = 6
    INVALID_DP = 10
    INVALID_CP = 11
    INVALID_BUCKET = 12
    INVALID_MODEL = 13
    TOO_MANY_SEQUENCES = 14
    EMPTY_SEQUENCE = 15
    LENGTH_OUT_OF_RANGE = 16
    SEQUENCE_TOO_LONG = 17
    MICRO_BATCH_LIMIT = 18
    DACP_FAILED = 19
    INVALID_PAD_MULTIPLE = 20
    INVALID_COST_MODEL = 21
    UNSUPPORTED_OPTION = 22
    MICRO_BATCH_COUNT = 23
    PLAN_INVALID = 30
    NO_SUCH_GPU = 31
    LAYOUT_OVERFLOW = 32
    INTERNAL = 254
    PANIC = 255


class Error(Exception):
    """A call into skrull failed.

    Attributes: ``status`` (the status name, e.g. ``"SEQUENCE_TOO_LONG"``), ``code`` (its number
    in the C ABI), ``message`` (the library's ``skrull_status_str``), ``detail`` (what the
    binding adds), and the ``skrull_error_info`` fields the status fills (``None`` otherwise;
    table in docs/python.md): ``index`` (the sequence, DP rank or CP rank it is about),
    ``value`` (the offending value), ``limit`` (the bound it broke), ``field`` (the model-shape,
    cost-model or option field, as its C number) and ``field_name`` (that field's name).
    """

    def __init__(self, code: int, detail: str = "", *, index: int | None = None,
                 value: int | None = None, limit: int | None = None, field: int | None = None,
                 field_name: str | None = None) -> None:
        self.code = int(code)
        try:
            self.status = Status(self.code).name
        except ValueError:
            self.status = f"UNKNOWN_{self.code}"
        self.message = status_message(self.code)
        self.detail, self.index, self.value, self.limit = detail, index, value, limit
        self.field, self.field_name = field, field_name
        text = f"{self.status} ({self.code}): {self.message}"
        super().__init__(f"{text}: {detail}" if detail else text)

    def __reduce__(self) -> tuple:
        """Pickles (for multiprocessing) by status and details, not by the message."""
        where = {"index": self.index, "value": self.value, "limit": self.limit,
                 "field": self.field, "field_name": self.field_name}
        return (_rebuild, (type(self), self.code, self.detail, where))


def _rebuild(cls: type[Error], code: int, detail: str, where: dict) -> Error:
    return cls(code, detail, **where)


class ConfigError(Error, ValueError):
    """The configuration is rejected: DP, CP, BucketSize, model shape, pad multiple, cost model,
    an option, or an option the policy does not apply (10-13, 20-22, 3)."""


class BatchError(Error, ValueError):
    """The batch is rejected: too many, empty, too long sequences, micro-batch limit or fixed
    count (14-19, 23)."""


class LayoutError(Error, ValueError):
    """A layout request is rejected: no such GPU, plan mismatch, int32 overflow (30-39)."""


class ArgumentError(Error, TypeError):
    """An argument of the wrong type, e.g. a non-integer length (``INVALID_ARG``, 4)."""


class InternalError(Error, RuntimeError):
    """A malformed call or a library fault: a bug in skrull or in this binding (1-6, 254-255)."""


_CONFIG = {Status.INVALID_ENUM, Status.INVALID_DP, Status.INVALID_CP, Status.INVALID_BUCKET,
           Status.INVALID_MODEL, Status.INVALID_PAD_MULTIPLE, Status.INVALID_COST_MODEL,
           Status.UNSUPPORTED_OPTION}


def error_class(code: int) -> type[Error]:
    """The exception class for a status number."""
    if code in _CONFIG:
        return ConfigError
    if code == Status.INVALID_ARG:
        return ArgumentError
    if 14 <= code <= 19 or code == Status.MICRO_BATCH_COUNT:
        return BatchError
    if 30 <= code <= 39:
        return LayoutError
    return InternalError


def status_message(code: int) -> str:
    """The library's message for a status number (any number)."""
    return _ffi.lib.skrull_status_str(code).decode()


def make_error(code: int, detail: str = "", **where: int | None) -> Error:
    """The exception for a non-zero status."""
    return error_class(code)(code, detail, **where)


def check(code: int, detail: str = "", **where: int | None) -> None:
    """Raises the exception for ``code`` unless it is OK."""
    if code != Status.OK:
        raise make_error(code, detail, **where)


# The skrull_error_info fields each status fills besides ``index`` (-1 when none) and ``field``
# (0 when none): docs/c_api.md, "Error details". EMPTY_SEQUENCE's value is the length, 0.
_VALUE_LIMIT = {
    Status.INVALID_DP: "vl", Status.INVALID_CP: "vl", Status.INVALID_BUCKET: "vl",
    Status.INVALID_PAD_MULTIPLE: "vl", Status.INVALID_MODEL: "v", Status.TOO_MANY_SEQUENCES: "vl",
    Status.EMPTY_SEQUENCE: "v", Status.LENGTH_OUT_OF_RANGE: "vl", Status.SEQUENCE_TOO_LONG: "vl",
    Status.MICRO_BATCH_LIMIT: "vl", Status.MICRO_BATCH_COUNT: "vl", Status.NO_SUCH_GPU: "vl", Status.LAYOUT_OVERFLOW: "vl",
}
#: ``skrull_error_info.field`` of INVALID_MODEL and UNSUPPORTED_OPTION, by number.
MODEL_FIELDS = {1: "hidden", 2: "kv_hidden", 3: "ffn", 4: "layers", 5: "vocab"}
OPTION_FIELDS = {1: "flops"}
#: ``skrull_error_info.field`` of NO_SUCH_GPU: the coordinate at fault.
GPU_FIELDS = {1: "dp_rank", 2: "micro_batch", 3: "cp_rank"}


def _describe(status: int, d: dict) -> str:
    """A sentence for the details, in the words of docs/c_api.md."""
    i, v, lim, name = d.get("index"), d.get("value"), d.get("limit"), d.get("field_name")
    if status == Status.SEQUENCE_TOO_LONG:
        return (f"sequence {i} has {v} tokens; its per-GPU share needs BucketSize {lim}")
    if status == Status.LENGTH_OUT_OF_RANGE:
        return f"sequence {i} has {v} tokens (limit {lim})"
    if status == Status.EMPTY_SEQUENCE:
        return f"sequence {i} has 0 tokens"
    if status == Status.MICRO_BATCH_LIMIT:
        return f"DP rank {i} needs {v} micro-batches; the limit is {lim}"
    if status == Status.MICRO_BATCH_COUNT:
        return (f"DP rank {i} needs {v} micro-batches, more than the fixed count {lim}: "
                f"micro_batches={v} or more fits this batch")
    if status == Status.NO_SUCH_GPU:
        return f"DP rank {i} runs {lim} micro-batches; micro-batch {v} was asked for"
    if status == Status.DACP_FAILED:
        return f"CP rank {i}"
    if status in (Status.INVALID_COST_MODEL, Status.UNSUPPORTED_OPTION):
        return f"field {name}" if name else ""
    if status == Status.INVALID_MODEL:
        return f"model.{name} = {v}" if name else ""
    if "value" in d:
        return f"{v} (limit {lim})" if "limit" in d else f"{v}"
    return ""


def from_info(info: "_ffi.skrull_error_info", code: int, context: str = "",
              **override: int | None) -> Error:
    """The exception for a failed call that wrote ``info`` (a ``skrull_error_info``); when the
    library did not write it (``info.status != code``) only the status is known. ``override``
    replaces a field (e.g. the caller's own value of a length that does not fit uint32)."""
    d: dict = {}
    if info.status == code:
        if info.index != -1:
            d["index"] = int(info.index)
        which = _VALUE_LIMIT.get(code, "")
        if "v" in which:
            d["value"] = int(info.value)
        if "l" in which:
            d["limit"] = int(info.limit)
        if info.field:
            d["field"] = int(info.field)
            d["field_name"] = field_name(code, int(info.field))
    d.update({k: v for k, v in override.items()})
    text = _describe(code, d)
    detail = f"{context}: {text}" if context and text else context or text
    return make_error(code, detail, **d)


def field_name(code: int, number: int) -> str | None:
    """The name of ``skrull_error_info.field`` for a status."""
    if code == Status.INVALID_MODEL:
        return MODEL_FIELDS.get(number)
    if code == Status.UNSUPPORTED_OPTION:
        return OPTION_FIELDS.get(number)
    if code == Status.NO_SUCH_GPU:
        return GPU_FIELDS.get(number)
    if code == Status.INVALID_COST_MODEL:
        from ._cost import cost_field_name
        return cost_field_name(number)
    return None
