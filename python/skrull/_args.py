"""Checks of the arguments every front module takes: whole numbers, ``uint32_t`` values,
option names, True/False flags, and the library's verdict on a configuration. Stands on the
binding and the errors alone."""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Mapping

from . import _ffi
from ._errors import ConfigError, Status, from_info, make_error, range_error, type_error

U32_MAX = 2**32 - 1


def whole(name: str, value: Any) -> int:
    """An integer argument (a Python or numpy integer, not a bool); else ``ArgumentError``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise type_error(name, value)
    return operator.index(value)


def u32(name: str, value: Any, status: Status) -> int:
    """An integer that must fit ``uint32_t`` (model fields): never wrapped."""
    v = whole(name, value)
    if not 0 <= v <= U32_MAX:
        raise range_error(name, v, 1, U32_MAX, status, "", ConfigError)
    return v


def option(name: str, value: Any, table: Mapping[str, int]) -> tuple[int, str]:
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


def flag(name: str, value: Any) -> int:
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


def check_status(code: int) -> None:
    """Raises for a failed preset call (no details)."""
    if code != Status.OK:
        raise make_error(code)


def config_error_info(c: _ffi.skrull_config) -> tuple[int, _ffi.skrull_error_info]:
    """(status, details) of the configuration alone (``skrull_config_check``: the first
    problem ``skrull_schedule`` would report for it, with its ``skrull_error_info``)."""
    info = _ffi.skrull_error_info()
    status: int = _ffi.lib.skrull_config_check(ctypes.byref(c), ctypes.byref(info))
    if status != Status.OK and info.status != status:  # details not written: none known
        info = _ffi.skrull_error_info(status=0, index=-1)
    return status, info


def check_config(c: _ffi.skrull_config, context: str = "") -> None:
    """Raises the library's verdict on a configuration, with its error details."""
    status, info = config_error_info(c)
    if status != Status.OK:
        raise from_info(info, status, context, c)
