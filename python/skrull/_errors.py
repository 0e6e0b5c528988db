"""Exceptions: one base class, a subclass per kind of mistake, and the sentences they carry.

Every message is written for a Python caller: it names the argument, the value given, what is
accepted and what to do. The sentence for a status the library returned is the library's own
(``skrull_error_describe``, which the torch op asks too), so each is written once; the checks
of Python arguments (types, ranges) word their own. The C status stays available as
``status`` and ``code`` (and is appended to the message in brackets, ``[INVALID_DP]``, so a log
line can be searched for it). This module stands on the ctypes binding alone.
"""

from __future__ import annotations

import ctypes
import enum
from typing import Any, Optional

from . import _ffi


class Status(enum.IntEnum):
    """``skrull_status``: the stable status numbers of the C ABI (0 = OK).

    Example
    -------
    >>> import skrull
    >>> skrull.Status.INVALID_DP.value
    10
    """

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
    INVALID_CHUNKING = 24
    CHUNK_OVER_BUDGET = 25
    NO_CHUNK_SIZE = 26
    PLAN_INVALID = 30
    NO_SUCH_GPU = 31
    LAYOUT_OVERFLOW = 32
    INVALID_REFIT_PARAMS = 40
    REFIT_STATE_INVALID = 41
    MEASUREMENT_MISMATCH = 42
    REFIT_STEP_TOO_LARGE = 43
    INVALID_WINDOW_PARAMS = 50
    WINDOW_STATE_INVALID = 51
    WINDOW_FULL = 52
    WINDOW_EMPTY = 53
    WINDOW_BATCH_TOO_LARGE = 54
    INVALID_DEFERRED = 55
    INTERNAL = 254
    PANIC = 255


class Error(Exception):
    """A call into skrull failed.

    ``str(error)`` is a sentence for the caller (what was given, what is accepted, what to
    do) followed by the status name in brackets.

    Parameters
    ----------
    code : int
        The ``skrull_status`` number.
    detail : str, optional
        The sentence; empty for the library's own text.
    index, value, limit, field : int, optional
        The error details (``skrull_error_info``) where they apply: ``index`` the sequence
        or DP rank, ``value`` the offending value, ``limit`` the bound it broke, ``field`` the
        model-shape, cost-model or option field as its C number.
    field_name : str, optional
        The argument or field the error is about (``"dp"``, ``"ffn"``, ``"gemm_efficiency"``).

    Attributes
    ----------
    status : str
        The status name, e.g. ``"SEQUENCE_TOO_LONG"``.
    code : int
        Its number in the C ABI.
    message : str
        The library's text for the status (``skrull_status_str``).
    detail : str
        The sentence of ``str(error)``, without the status.

    Example
    -------
    >>> import skrull
    >>> try:
    ...     skrull.Scheduler(dp=0, cp=8, bucket_tokens=4096)
    ... except skrull.ConfigError as e:
    ...     print(e.status, e.field_name, e.value, e.limit)
    INVALID_DP dp 0 65536
    """

    def __init__(self, code: int, detail: str = "", *, index: Optional[int] = None,
                 value: Optional[int] = None, limit: Optional[int] = None,
                 field: Optional[int] = None, field_name: Optional[str] = None) -> None:
        self.code = int(code)
        try:
            self.status = Status(self.code).name
        except ValueError:
            self.status = f"UNKNOWN_{self.code}"
        self.message = status_message(self.code)
        self.detail = detail
        self.index, self.value, self.limit = index, value, limit
        self.field, self.field_name = field, field_name
        super().__init__(f"{detail or self.message} [{self.status}]")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles (for multiprocessing) by status and details."""
        where = {"index": self.index, "value": self.value, "limit": self.limit,
                 "field": self.field, "field_name": self.field_name}
        return (_rebuild, (type(self), self.code, self.detail, where))


def _rebuild(cls: type[Error], code: int, detail: str, where: dict[str, Any]) -> Error:
    return cls(code, detail, **where)


class ConfigError(Error, ValueError):
    """A setting is out of range or unknown: DP, CP, BucketSize, model shape, pad multiple,
    cost model, an option name or number, an option the policy does not apply."""


class BatchError(Error, ValueError):
    """The batch is refused: too many, empty, negative or too long sequences, or more
    micro-batches than allowed."""


class LayoutError(Error, ValueError):
    """A layout or member request is refused: no such GPU (DP rank, micro-batch or CP rank out
    of range), a plan that does not match, or offsets past int32."""


class ArgumentError(Error, TypeError):
    """An argument of the wrong type: a non-integer where an integer is needed (a float,
    a string, ``None``, a bool), lengths that are not a one-dimensional sequence."""


class MeasurementError(Error, ValueError):
    """Measured times that do not fit their plan (``Scheduler.observe``): the wrong shape
    (``MEASUREMENT_MISMATCH``), a mapping key that names no GPU, or a step larger than a
    refit window can hold (``REFIT_STEP_TOO_LARGE``)."""


class InternalError(Error, RuntimeError):
    """A malformed call or a library fault: a bug in skrull or in this binding."""


_CONFIG = {Status.INVALID_ENUM, Status.INVALID_DP, Status.INVALID_CP, Status.INVALID_BUCKET,
           Status.INVALID_MODEL, Status.INVALID_PAD_MULTIPLE, Status.INVALID_COST_MODEL,
           Status.UNSUPPORTED_OPTION, Status.INVALID_REFIT_PARAMS, Status.INVALID_CHUNKING,
           Status.NO_CHUNK_SIZE, Status.INVALID_WINDOW_PARAMS}
#: The window's refusals of a batch or a call order (``skrull.Window``): ``BatchError``.
_WINDOW_BATCH = {Status.WINDOW_FULL, Status.WINDOW_EMPTY, Status.WINDOW_BATCH_TOO_LARGE,
                 Status.INVALID_DEFERRED}
_MEASUREMENT = {Status.MEASUREMENT_MISMATCH, Status.REFIT_STEP_TOO_LARGE}


def error_class(code: int) -> type[Error]:
    """The exception class for a status number.

    Parameters
    ----------
    code : int
        A ``skrull_status`` number.

    Returns
    -------
    type
        ``ConfigError``, ``BatchError``, ``LayoutError``, ``MeasurementError``,
        ``ArgumentError`` or ``InternalError``.
    """
    if code in _CONFIG:
        return ConfigError
    if code in _MEASUREMENT:
        return MeasurementError
    if code == Status.INVALID_ARG:
        return ArgumentError
    if 14 <= code <= 19 or code in (Status.MICRO_BATCH_COUNT, Status.CHUNK_OVER_BUDGET) \
            or code in _WINDOW_BATCH:
        return BatchError
    if 30 <= code <= 39:
        return LayoutError
    return InternalError


def status_message(code: int) -> str:
    """The library's text for a status number (any number)."""
    text: bytes = _ffi.lib.skrull_status_str(code)
    return text.decode()


def make_error(code: int, detail: str = "", cls: Optional[type[Error]] = None,
               **where: Any) -> Error:
    """The exception for a non-zero status (of class ``cls`` when given, else by status)."""
    return (cls or error_class(code))(code, detail, **where)


def check(code: int, detail: str = "", **where: Any) -> None:
    """Raises the exception for ``code`` unless it is OK."""
    if code != Status.OK:
        raise make_error(code, detail or describe(code), **where)


def type_error(name: str, value: Any, wanted: str = "an integer",
               field: Optional[str] = None) -> Error:
    """``ArgumentError`` for an argument of the wrong type: names it, its value and type."""
    kind = type(value).__name__
    hint = ""
    if isinstance(value, bool):
        hint = "; a bool is not a count"
    elif isinstance(value, float) and value.is_integer():
        hint = f"; pass {name}={int(value)}"
    return make_error(Status.INVALID_ARG, f"{name} must be {wanted}, got {value!r} ({kind})"
                      f"{hint}", ArgumentError, field_name=field or name)


def range_error(name: str, value: int, lo: int, hi: int, status: Status, what: str = "",
                cls: Optional[type[Error]] = None) -> Error:
    """A ``ConfigError`` (or ``cls``) for an integer argument outside ``[lo, hi]``."""
    about = f" ({what})" if what else ""
    return make_error(status, f"{name}={value} is out of range: {name}{about} must be an "
                      f"integer from {lo} to {hi}", cls or ConfigError, value=value, limit=hi,
                      field_name=name)


def field_name(code: int, number: int) -> Optional[str]:
    """The name of ``skrull_error_info.field`` for a status (``skrull_error_field_name``); with
    ``number`` 0, the setting a status is about when its details name none."""
    name: Optional[bytes] = _ffi.lib.skrull_error_field_name(code, number)
    return name.decode() if name else None


def _field_table(code: int, count: int) -> dict[int, str]:
    return {n: name for n in range(1, count + 1) if (name := field_name(code, n))}


#: ``skrull_error_info.field`` of INVALID_MODEL and UNSUPPORTED_OPTION, by number.
MODEL_FIELDS = _field_table(Status.INVALID_MODEL, 5)
OPTION_FIELDS = _field_table(Status.UNSUPPORTED_OPTION, 1)
#: ``skrull_error_info.field`` of INVALID_CHUNKING: the ``skrull_config`` chunking field.
CHUNKING_FIELDS = _field_table(Status.INVALID_CHUNKING, 3)
#: ``skrull_error_info.field`` of INVALID_REFIT_PARAMS: the ``skrull_refit_params`` field.
REFIT_PARAM_FIELDS = _field_table(Status.INVALID_REFIT_PARAMS, 9)
#: ``skrull_error_info.field`` of NO_SUCH_GPU: the coordinate at fault.
GPU_FIELDS = _field_table(Status.NO_SUCH_GPU, 3)
#: ``skrull_error_info.field`` of INVALID_WINDOW_PARAMS: the ``skrull_window_params`` field.
WINDOW_PARAM_FIELDS = _field_table(Status.INVALID_WINDOW_PARAMS, 2)


def describe(status: int, info: Optional[_ffi.skrull_error_info] = None,
             c_config: Optional[_ffi.skrull_config] = None) -> str:
    """The library's sentence for a status (``skrull_error_describe``), from the details a
    failed call wrote (``info``) and the configuration it was given (``c_config``)."""
    i = ctypes.byref(info) if info is not None else None
    c = ctypes.byref(c_config) if c_config is not None else None
    size = 512
    while True:
        buf = ctypes.create_string_buffer(size)
        n: int = _ffi.lib.skrull_error_describe(status, i, c, buf, size)
        if n < size:
            return buf.value.decode()
        size = n + 1


def from_info(info: _ffi.skrull_error_info, code: int, context: str = "",
              c_config: Optional[_ffi.skrull_config] = None, **override: Any) -> Error:
    """The exception for a failed call that wrote ``info`` (a ``skrull_error_info``) given
    ``c_config``; when the library did not write it (``info.status != code``) only the status
    is known. ``override`` replaces a field (e.g. the caller's own value of a length that does
    not fit uint32), in the exception and in the sentence."""
    d: dict[str, Any] = {}
    written = info.status == code
    if written:
        if info.index != -1:
            d["index"] = int(info.index)
        which: int = _ffi.lib.skrull_error_details(code)
        if which & _ffi.DETAIL_VALUE:
            d["value"] = int(info.value)
        if which & _ffi.DETAIL_LIMIT:
            d["limit"] = int(info.limit)
        if info.field:
            d["field"] = int(info.field)
            d["field_name"] = field_name(code, int(info.field))
    if "field_name" not in d and (default := field_name(code, 0)) is not None:
        d["field_name"] = default
    d.update(override)
    shown = info
    if written and "value" in override:
        shown = _ffi.skrull_error_info.from_buffer_copy(info)
        shown.value = int(override["value"]) & (2**64 - 1)
    text = describe(code, shown if written else None, c_config)
    detail = f"{context}: {text}" if context and text else context or text
    return make_error(code, detail, **d)
