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
    PLAN_INVALID = 30
    NO_SUCH_GPU = 31
    LAYOUT_OVERFLOW = 32
    INTERNAL = 254
    PANIC = 255


class Error(Exception):
    """A call into skrull failed.

    Attributes: ``status`` (the status name, e.g. ``"SEQUENCE_TOO_LONG"``), ``code`` (its number
    in the C ABI), ``message`` (the library's ``skrull_status_str``), ``detail`` (what the
    binding adds), and, when known, ``index`` (the offending sequence), ``value`` and ``limit``.
    """

    def __init__(self, code: int, detail: str = "", *, index: int | None = None,
                 value: int | None = None, limit: int | None = None) -> None:
        self.code = int(code)
        try:
            self.status = Status(self.code).name
        except ValueError:
            self.status = f"UNKNOWN_{self.code}"
        self.message = status_message(self.code)
        self.detail, self.index, self.value, self.limit = detail, index, value, limit
        text = f"{self.status} ({self.code}): {self.message}"
        super().__init__(f"{text}: {detail}" if detail else text)

    def __reduce__(self) -> tuple:
        """Pickles (for multiprocessing) by status and details, not by the message."""
        where = {"index": self.index, "value": self.value, "limit": self.limit}
        return (_rebuild, (type(self), self.code, self.detail, where))


def _rebuild(cls: type[Error], code: int, detail: str, where: dict) -> Error:
    return cls(code, detail, **where)


class ConfigError(Error, ValueError):
    """The configuration is rejected: DP, CP, BucketSize, model shape or an option (10-13, 3)."""


class BatchError(Error, ValueError):
    """The batch is rejected: too many, empty, too long sequences, micro-batch limit (14-19)."""


class LayoutError(Error, ValueError):
    """A layout request is rejected: no such GPU, plan mismatch, int32 overflow (30-39)."""


class ArgumentError(Error, TypeError):
    """An argument of the wrong type, e.g. a non-integer length (``INVALID_ARG``, 4)."""


class InternalError(Error, RuntimeError):
    """A malformed call or a library fault: a bug in skrull or in this binding (1-6, 254-255)."""


_CONFIG = {Status.INVALID_ENUM, Status.INVALID_DP, Status.INVALID_CP, Status.INVALID_BUCKET,
           Status.INVALID_MODEL}


def error_class(code: int) -> type[Error]:
    """The exception class for a status number."""
    if code in _CONFIG:
        return ConfigError
    if code == Status.INVALID_ARG:
        return ArgumentError
    if 14 <= code <= 29:
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
