"""Exceptions: one base class, a subclass per kind of mistake, and the sentences they carry.

Every message is written for a Python caller: it names the argument, the value given, what is
accepted and what to do. The C status stays available as ``status`` and ``code`` (and is
appended to the message in brackets, ``[INVALID_DP]``, so a log line can be searched for it).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Optional

from . import _ffi

if TYPE_CHECKING:
    from ._config import Config


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
           Status.INVALID_WINDOW_PARAMS}
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
        raise make_error(code, detail or _describe(code, {}), **where)


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


# The skrull_error_info fields each status fills besides ``index`` (-1 when none) and ``field``
# (0 when none): docs/c_api.md, "Error details". EMPTY_SEQUENCE's value is the length, 0.
_VALUE_LIMIT = {
    Status.INVALID_DP: "vl", Status.INVALID_CP: "vl", Status.INVALID_BUCKET: "vl",
    Status.INVALID_PAD_MULTIPLE: "vl", Status.INVALID_MODEL: "v", Status.TOO_MANY_SEQUENCES: "vl",
    Status.EMPTY_SEQUENCE: "v", Status.LENGTH_OUT_OF_RANGE: "vl", Status.SEQUENCE_TOO_LONG: "vl",
    Status.MICRO_BATCH_LIMIT: "vl", Status.MICRO_BATCH_COUNT: "vl", Status.NO_SUCH_GPU: "vl",
    Status.LAYOUT_OVERFLOW: "vl", Status.MEASUREMENT_MISMATCH: "vl",
    Status.REFIT_STEP_TOO_LARGE: "vl", Status.INVALID_CHUNKING: "vl",
    Status.CHUNK_OVER_BUDGET: "vl", Status.INVALID_WINDOW_PARAMS: "vl",
    Status.WINDOW_BATCH_TOO_LARGE: "vl",
}
#: ``skrull_error_info.field`` of INVALID_MODEL and UNSUPPORTED_OPTION, by number.
MODEL_FIELDS = {1: "hidden", 2: "kv_hidden", 3: "ffn", 4: "layers", 5: "vocab"}
OPTION_FIELDS = {1: "flops"}
#: ``skrull_error_info.field`` of INVALID_CHUNKING: the ``skrull_config`` chunking field.
CHUNKING_FIELDS = {1: "chunk_size", 2: "chunk_keep", 3: "chunk_state_permille"}
#: ``skrull_error_info.field`` of INVALID_REFIT_PARAMS: the ``skrull_refit_params`` field.
REFIT_PARAM_FIELDS = {1: "window_steps", 2: "max_rows_per_step", 3: "flags", 4: "forgetting",
                      5: "ridge", 6: "outlier"}
_SETTINGS = {Status.INVALID_DP: ("dp", "the data-parallel size"),
             Status.INVALID_CP: ("cp", "the context-parallel size"),
             Status.INVALID_BUCKET: ("bucket_tokens", "BucketSize: the most tokens one GPU holds "
                                     "in one micro-batch"),
             Status.INVALID_PAD_MULTIPLE: ("pad_multiple", "0 or 1 for none")}
#: ``skrull_error_info.field`` of INVALID_WINDOW_PARAMS: the ``skrull_window_params`` field.
WINDOW_PARAM_FIELDS = {1: "max_delay", 2: "batch_capacity"}
#: ``skrull_error_info.field`` of NO_SUCH_GPU: the coordinate at fault.
GPU_FIELDS = {1: "dp_rank", 2: "micro_batch", 3: "cp_rank"}


def _describe(status: int, d: dict[str, Any], config: Optional[Config] = None) -> str:
    """The sentence for a status the library returned, from its details (``d``)."""
    i, v, lim, name = d.get("index"), d.get("value"), d.get("limit"), d.get("field_name")
    bucket = f"bucket_tokens={config.bucket_tokens}" if config else "bucket_tokens"
    if status == Status.SEQUENCE_TOO_LONG:
        return (f"sequence {i} has {v} tokens, too many for {bucket}: its share of each GPU "
                f"(padding included) needs a BucketSize of {lim}; raise bucket_tokens to at "
                f"least {lim}, plan with a larger cp, or truncate the sequence")
    if status == Status.LENGTH_OUT_OF_RANGE:
        if v is not None and v < 0:
            return (f"sequence {i} has a negative length ({v}): a length is a token count "
                    f"from 1 to {lim}")
        return (f"sequence {i} has {v} tokens, more than the {lim} tokens (2^31 - 1) one "
                "sequence may have")
    if status == Status.EMPTY_SEQUENCE:
        return (f"sequence {i} has 0 tokens: every sequence needs at least 1 token; drop "
                "empty samples before planning")
    if status == Status.TOO_MANY_SEQUENCES:
        return (f"the batch has {v} sequences, more than the {lim} one plan may hold: split "
                "it into smaller global batches")
    if status == Status.MICRO_BATCH_LIMIT:
        if i is None:
            return (f"micro_batches={v} is more than max_micro_batches={lim}: raise "
                    "max_micro_batches (0 = no limit) or lower micro_batches")
        return (f"DP rank {i} needs {v} micro-batches, more than max_micro_batches={lim}: "
                "raise max_micro_batches (0 = no limit) or bucket_tokens, or plan fewer "
                "tokens per global batch")
    if status == Status.MICRO_BATCH_COUNT:
        return (f"DP rank {i} needs {v} micro-batches, more than the fixed count "
                f"micro_batches={lim}: micro_batches={v} or more fits this batch (or raise "
                "bucket_tokens, or plan fewer tokens per global batch)")
    if status == Status.INVALID_CHUNKING:
        if name == "chunk_size":
            return ("policy='chunkflow' needs chunking on: give chunk_size (the most tokens "
                    "of one chunk, e.g. bucket_tokens)")
        if name == "chunk_keep":
            return (f"chunk_keep={v} is out of range: chunk_keep (chunks whose activations are "
                    f"kept) must be an integer from 1 to {lim}")
        return (f"chunk_state_permille={v} is out of range: it must be an integer from 0 to "
                f"{lim} (thousandths of a token per token of K/V state)")
    if status == Status.CHUNK_OVER_BUDGET:
        return (f"sequence {i} has {v} tokens: run chunked it holds {lim} tokens on a GPU, "
                f"more than {bucket}; lower chunk_size or chunk_keep, or raise bucket_tokens")
    if status == Status.NO_SUCH_GPU:
        return (f"DP rank {i} runs {lim} micro-batches (0 to {(lim or 0) - 1}); micro-batch "
                f"{v} was asked for")
    if status == Status.PLAN_INVALID:
        return ("the plan does not match its configuration and lengths (its arrays were "
                "changed, or it was made by another scheduler)")
    if status == Status.LAYOUT_OVERFLOW:
        return (f"this GPU's layout needs offsets up to {v}, more than an int32 holds "
                f"({lim}): lower bucket_tokens or plan fewer tokens per micro-batch")
    if status == Status.MEASUREMENT_MISMATCH:
        return (f"times holds {v} values where the plan needs {lim} ([micro_batch][dp][cp]): "
                "pass one time per micro-batch and GPU of the plan the times were measured on")
    if status == Status.REFIT_STEP_TOO_LARGE:
        return (f"this step has {v} (micro-batch, GPU) times, more than the {lim} the refit "
                "window was sized for")
    if status == Status.INVALID_REFIT_PARAMS:
        return (f"refit setting {name or 'a field'} is out of range: window from 1 to "
                f"{_ffi.REFIT_MAX_WINDOW} steps, forgetting in (0, 1], ridge >= 0, outlier > 0")
    if status == Status.INVALID_WINDOW_PARAMS:
        return (f"{name or 'a window setting'}={v} is out of range: max_delay from 0 to "
                f"{_ffi.WINDOW_MAX_DELAY}, batch_capacity from 1 to 65536 (at most {lim})")
    if status == Status.WINDOW_BATCH_TOO_LARGE:
        return (f"the batch has {v} sequences, more than the window's batch_capacity={lim}: "
                "make the window with a larger batch_capacity")
    if status == Status.WINDOW_FULL:
        return ("the window already holds max_delay + 1 batches: take a step before pushing "
                "another")
    if status == Status.WINDOW_EMPTY:
        return "the window holds no batch: push one before taking a step"
    if status == Status.INVALID_DEFERRED:
        return (f"deferred sample {i} does not fit the window: requeue only into a fresh window "
                "(no batch pushed), samples from earlier steps whose deadline has not passed, "
                "in position order, before first_position")
    if status == Status.WINDOW_STATE_INVALID:
        return ("the window state was not made by this binding (or is too small): a bug in "
                "skrull or its binding; please report it")
    if status == Status.REFIT_STATE_INVALID:
        return ("the refit state was not made by this binding's refit (or is too small): a "
                "bug in skrull or its binding; please report it")
    if status == Status.DACP_FAILED:
        return f"the placement of CP rank {i} could not be completed"
    if status == Status.INVALID_COST_MODEL:
        field = name or "a field"
        return (f"cost model: {field} is out of range (docs/cost_model.md lists each field's "
                "valid values); fix it, or start again from skrull.CostModel('h100')")
    if status == Status.UNSUPPORTED_OPTION:
        flops = f"flops={config.flops!r}" if config else "flops"
        return (f"{flops} does not apply to policy='balanced', which plans on time from its "
                "cost model: leave flops='paper' (the default) or choose another policy")
    if status == Status.INVALID_MODEL:
        field = f"model.{name}={v}" if name else "the model shape"
        return (f"{field} is out of range: hidden, kv_hidden, ffn and layers must be at least 1 "
                "and within the library's limits, and kv_hidden at most hidden")
    if status in _SETTINGS:
        arg, what = _SETTINGS[Status(status)]
        return (f"{arg}={v} is out of range: {arg} ({what}) must be an integer from "
                f"{1 if status != Status.INVALID_PAD_MULTIPLE else 0} to {lim}")
    if status == Status.INVALID_ENUM:
        return ("an option has an unknown value (policy, victim, flops, shard_padding, a "
                "preset, model.swiglu, a True/False flag or cost_model.overlap)")
    if status in (Status.NULL_ARG, Status.BAD_STRUCT_SIZE, Status.WORKSPACE_TOO_SMALL,
                  Status.OUTPUT_TOO_SMALL, Status.INVALID_ARG, Status.INTERNAL, Status.PANIC):
        return (f"internal error in skrull or its binding ({status_message(status)}); please "
                "report it with the lengths and settings that caused it")
    return ""


def from_info(info: _ffi.skrull_error_info, code: int, context: str = "",
              config: Optional[Config] = None, **override: Any) -> Error:
    """The exception for a failed call that wrote ``info`` (a ``skrull_error_info``); when the
    library did not write it (``info.status != code``) only the status is known. ``override``
    replaces a field (e.g. the caller's own value of a length that does not fit uint32)."""
    d: dict[str, Any] = {}
    if info.status == code:
        if info.index != -1:
            d["index"] = int(info.index)
        which = _VALUE_LIMIT.get(Status(code), "") if code in Status._value2member_map_ else ""
        if "v" in which:
            d["value"] = int(info.value)
        if "l" in which:
            d["limit"] = int(info.limit)
        if info.field:
            d["field"] = int(info.field)
            d["field_name"] = field_name(code, int(info.field))
    if code in _SETTINGS and "field_name" not in d:
        d["field_name"] = _SETTINGS[Status(code)][0]
    if code == Status.UNSUPPORTED_OPTION and "field_name" not in d:
        d["field_name"] = "flops"
    d.update(override)
    text = _describe(code, d, config)
    detail = f"{context}: {text}" if context and text else context or text
    return make_error(code, detail, **d)


def field_name(code: int, number: int) -> Optional[str]:
    """The name of ``skrull_error_info.field`` for a status."""
    if code == Status.INVALID_MODEL:
        return MODEL_FIELDS.get(number)
    if code == Status.UNSUPPORTED_OPTION:
        return OPTION_FIELDS.get(number)
    if code == Status.NO_SUCH_GPU:
        return GPU_FIELDS.get(number)
    if code == Status.INVALID_REFIT_PARAMS:
        return REFIT_PARAM_FIELDS.get(number)
    if code == Status.INVALID_CHUNKING:
        return CHUNKING_FIELDS.get(number)
    if code == Status.INVALID_WINDOW_PARAMS:
        return WINDOW_PARAM_FIELDS.get(number)
    if code == Status.INVALID_COST_MODEL:
        from ._cost import cost_field_name
        return cost_field_name(number)
    return None
