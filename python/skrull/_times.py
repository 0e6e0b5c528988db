"""Measured micro-batch times: the ``[micro_batch][dp][cp]`` array ``Scheduler.observe``
takes, from an array or a per-GPU mapping, checked against the plan they were measured on."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ._errors import ArgumentError, Error, MeasurementError, Status, make_error

if TYPE_CHECKING:
    from ._plan import Plan

_WHAT = ("a [micro_batch][dp][cp] array of seconds (numpy, torch or nested lists) or a "
         "mapping {(dp_rank, cp_rank): [seconds per micro-batch]}")


def _bad(detail: str, **where: Any) -> Error:
    return make_error(Status.INVALID_ARG, detail, ArgumentError, field_name="times", **where)


def _mismatch(detail: str, **where: Any) -> Error:
    return make_error(Status.MEASUREMENT_MISMATCH, detail, MeasurementError, field_name="times",
                      **where)


def _float_array(values: Any, what: str) -> np.ndarray:
    """``values`` as float64, refusing strings, bools, objects and ragged lists."""
    if hasattr(values, "detach") and hasattr(values, "cpu"):  # a torch tensor, any device
        values = values.detach().cpu().numpy()
    if isinstance(values, (str, bytes)) or values is None:
        raise _bad(f"{what} must be {_WHAT}, got {values!r} ({type(values).__name__})")
    try:
        a = np.asarray(values)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise _bad(f"{what} is not a rectangular array of numbers ({exc})") from None
    if a.dtype == bool or a.dtype.kind not in "iuf":
        raise _bad(f"{what} must hold numbers (seconds), got dtype {a.dtype}")
    return a.astype(np.float64)


def _from_mapping(times: Mapping[Any, Any], plan: Plan) -> np.ndarray:
    dp, cp = plan.config.dp, plan.config.cp
    per_dp = plan.micro_batches_per_dp.tolist()
    out = np.full((plan.num_micro_batches, dp, cp), np.nan)
    for key, values in times.items():
        if isinstance(key, tuple) and len(key) == 2 and all(
                hasattr(k, "__index__") and not isinstance(k, bool) for k in key):
            d, r = operator.index(key[0]), operator.index(key[1])
        elif hasattr(key, "__index__") and not isinstance(key, bool):
            d, r = divmod(operator.index(key), cp)
        else:
            raise _bad(f"times: the key {key!r} names no GPU: use (dp_rank, cp_rank) or the "
                       "global rank dp_rank * cp + cp_rank")
        if not (0 <= d < dp and 0 <= r < cp):
            raise _mismatch(f"times: the key {key!r} names no GPU of the plan (dp={dp}, "
                            f"cp={cp})", value=d * cp + r, limit=dp * cp)
        row = _float_array(values, f"times[{key!r}]").reshape(-1) \
            if not isinstance(values, (int, float)) else np.array([float(values)])
        if row.size != per_dp[d]:
            runs = f"{per_dp[d]} micro-batch{'' if per_dp[d] == 1 else 'es'}"
            raise _mismatch(f"times[{key!r}] has {row.size} times, DP rank {d} runs {runs} in "
                            "this plan", index=d, value=row.size, limit=per_dp[d])
        out[:row.size, d, r] = row
    return out


def as_times(times: Any, plan: Plan) -> np.ndarray:
    """The measured seconds of ``plan`` as a C-contiguous float64 ``[micro_batch][dp][cp]``
    array (a copy).

    A mapping gives each GPU's times by ``(dp_rank, cp_rank)`` (or global rank); a GPU it
    leaves out is NaN (missing). A micro-batch a DP rank does not run (a plan without
    ``lockstep``) is NaN too. Values are not judged here: NaN, infinities, zeros, negative
    times and stragglers are the library's to weigh or refuse.

    Parameters
    ----------
    times : array-like or mapping
        ``[plan.num_micro_batches][dp][cp]`` seconds, or ``{(dp_rank, cp_rank): seconds}``
        with ``plan.micro_batches_per_dp[dp_rank]`` seconds per GPU.
    plan : Plan
        The plan the times were measured on.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(plan.num_micro_batches, dp, cp)``.

    Raises
    ------
    ArgumentError
        Not numbers (``INVALID_ARG``, ``field_name="times"``).
    MeasurementError
        The wrong shape, or a key that names no GPU (``MEASUREMENT_MISMATCH``).

    Example
    -------
    >>> import skrull
    >>> from skrull._times import as_times
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 20, 100])
    >>> as_times({(0, 0): [0.5], (0, 1): [0.25]}, plan).tolist()
    [[[0.5, 0.25]]]
    """
    if isinstance(times, Mapping):
        return _from_mapping(times, plan)
    a = _float_array(times, "times")
    want = (plan.num_micro_batches, plan.config.dp, plan.config.cp)
    if a.shape != want:
        raise _mismatch(f"times has shape {a.shape}; this plan needs {want}: "
                        f"[micro_batch][dp][cp] with micro_batch up to plan.num_micro_batches "
                        f"= {want[0]}", value=a.size, limit=int(np.prod(want)))
    return np.ascontiguousarray(a)
