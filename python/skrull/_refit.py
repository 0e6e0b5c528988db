"""The online refit over the C ABI (``skrull_refit_*``): its settings, its window of measured
steps in a buffer this package owns, and the ``Refit`` result."""

from __future__ import annotations

import ctypes
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from . import _ffi
from ._cost import CostModel, _from_bytes
from ._errors import ConfigError, Status, from_info, make_error, type_error

if TYPE_CHECKING:
    from ._plan import Plan

#: The coefficient names of ``Refit.coefficients``, in the library's order (bit ``i`` of the
#: report's bit sets is ``COEFFICIENTS[i]``).
COEFFICIENTS = _ffi.REFIT_COEFFICIENTS + (_ffi.REFIT_SHARDED_SEQUENCE,
                                         _ffi.REFIT_LAST_MICRO_BATCH, _ffi.REFIT_LOCAL_SEQUENCE)
_MIN_ROWS = 64  # the smallest state: rows (micro-batch x GPU times) per step it holds


@dataclass(frozen=True)
class RefitSettings:
    """How ``Scheduler.refit`` fits measured times (``skrull_refit_params``).

    Parameters
    ----------
    window : int, optional
        Steps kept, 1 to 64 (default 32); older ones are dropped.
    forgetting : float, optional
        Weight of a step ``k`` steps old: ``forgetting ** k``, in (0, 1] (default 0.95).
    ridge : float, optional
        Pull of every coefficient toward the last fit (the prior at first), at least 0
        (default 1e-3): what the window does not identify stays where it was.
    outlier : float, optional
        A time off the fitted prediction by more than this fraction is dropped as a
        straggler, above 0 (default 0.5).
    keep_overlap : bool, optional
        Never change the overlap rule (default False).
    trust : float, optional
        The trust region: per refit each coefficient moves at most this factor either way from
        the model in use (after the window's uniform factor), at least 1, ``math.inf`` for no
        limit (default 2).
    max_error : float, optional
        A fit whose error on the window stays above this (relative, rms) is not adopted: the
        model cannot describe the times (default 0.25).
    holdout : int, optional
        One micro-batch in ``holdout`` is held out of the fit and judges it; 0 judges the fit
        on the data it was fitted to (default 3; 0 or 2 to 1024).

    Raises
    ------
    ConfigError
        A value out of range (``INVALID_REFIT_PARAMS``, ``field_name`` the setting).
    ArgumentError
        A value of the wrong type.

    Example
    -------
    >>> import skrull
    >>> skrull.RefitSettings(window=4).forgetting
    0.95
    >>> skrull.RefitSettings(window=0)
    Traceback (most recent call last):
    ...
    skrull.ConfigError: refit setting window=0 is out of range: ... [INVALID_REFIT_PARAMS]
    """

    window: int = 32
    forgetting: float = 0.95
    ridge: float = 1e-3
    outlier: float = 0.5
    keep_overlap: bool = False
    trust: float = 2.0
    max_error: float = 0.25
    holdout: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, int):
            raise type_error("window", self.window)
        if isinstance(self.holdout, bool) or not isinstance(self.holdout, int):
            raise type_error("holdout", self.holdout)
        for name in ("forgetting", "ridge", "outlier", "trust", "max_error"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise type_error(name, value, "a number")
        if not isinstance(self.keep_overlap, bool):
            raise type_error("keep_overlap", self.keep_overlap, "True or False")
        checks = (("window", 1 <= self.window <= _ffi.REFIT_MAX_WINDOW,
                   f"an integer from 1 to {_ffi.REFIT_MAX_WINDOW}"),
                  ("forgetting", 0 < self.forgetting <= 1, "in (0, 1]"),
                  ("ridge", math.isfinite(self.ridge) and self.ridge >= 0, "finite and >= 0"),
                  ("outlier", math.isfinite(self.outlier) and self.outlier > 0,
                   "finite and > 0"),
                  ("trust", self.trust >= 1, ">= 1 (math.inf: no trust region)"),
                  ("max_error", math.isfinite(self.max_error) and self.max_error > 0,
                   "finite and > 0"),
                  ("holdout", self.holdout == 0 or 2 <= self.holdout <= 1024,
                   "0 or an integer from 2 to 1024"))
        for name, ok, wanted in checks:
            if not ok:
                raise make_error(Status.INVALID_REFIT_PARAMS, f"refit setting {name}="
                                 f"{getattr(self, name)!r} is out of range: it must be {wanted}",
                                 ConfigError, field_name=name)

    def _c_params(self, rows: int) -> _ffi.skrull_refit_params:
        return _ffi.skrull_refit_params(
            struct_size=ctypes.sizeof(_ffi.skrull_refit_params), window_steps=self.window,
            max_rows_per_step=rows, flags=_ffi.REFIT_KEEP_OVERLAP if self.keep_overlap else 0,
            forgetting=float(self.forgetting), ridge=float(self.ridge),
            outlier=float(self.outlier), trust=float(self.trust),
            max_error=float(self.max_error), holdout=self.holdout)


@dataclass(frozen=True)
class Refit:
    """What one ``Scheduler.refit`` did (``skrull_refit_report``).

    Attributes
    ----------
    model : CostModel
        The model the scheduler plans with from now on (read-only).
    previous : CostModel
        The one it planned with before.
    changed : bool
        ``model`` differs from ``previous``.
    kept_prior : bool
        ``model`` is the prior (nothing adopted yet, or no data).
    steps, rows : int
        Steps in the window and valid (micro-batch, GPU) times in them.
    dropped : int
        Of those, dropped as stragglers.
    skipped : int
        Times skipped in the window: NaN, infinite, zero or negative, or a GPU's micro-batch
        holding a chunked sequence (timed, part of the step, but not fitted: the refit does
        not model chunked passes yet).
    error, prior_error : float
        Weighted rms relative error of ``model`` and of the prior on the window.
    coefficients : dict
        Each coefficient of ``model`` relative to the prior (1.0 = unchanged; ``overlap`` is 0
        for ``"local-attention"``, 1 for ``"all-attention"``; ``sharded_sequence`` in units of
        the prior's per-sequence cost, or of 1 ms when it is 0; ``last_micro_batch`` the
        per-step cost paid inside each DP rank's last micro-batch, in ms, which the model's
        ``iteration_fixed_s`` includes, fitted under ``sync="sharded"`` only;
        ``local_sequence`` the cost per whole sequence, in units of the prior's, left at 0
        when the prior has none), by name (``COEFFICIENTS``).
    moved : tuple of str
        The coefficients that moved by more than 1 %.
    adopted : bool
        The fit was adopted (``model`` is new).
    verdict : str
        Why it was or was not: ``"adopted"``, ``"no-data"``, ``"not-better"`` (it does not
        explain the window better than the model in use, or explains the held-out micro-batches
        worse), ``"scale-only"`` (it explains them no better than the model in use times one
        uniform factor, ``scale``: a scale, not a model), ``"high-error"`` (even the best fit
        stays above ``max_error``: the model cannot describe these times) or
        ``"unvalidated"`` (no held-out micro-batch yet).
    scale : float
        The window's median of measured over predicted time under the model in use before
        this refit: the uniform factor it is off by.
    limited, raised : tuple of str
        Coefficients the trust region held back; raised to the most the window allows (ring
        costs hidden on every measurement).
    heldout_error, heldout_error_in_use : float
        Error of the fit and of the model in use on the held-out micro-batches.
    unlimited_error : float
        Error on the window of the best fit without the trust region.
    heldout_rows : int
        Held-out times in the window.
    step_times : int
        Steps in the window with a measured step time (``Scheduler.observe(step_time=)``).
    iteration_fixed_s : float
        ``model.iteration_fixed_s``: the per-step cost measured from them outside the
        micro-batches plus ``coefficients["last_micro_batch"]`` ms.

    Example
    -------
    >>> import skrull
    >>> s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64)
    >>> r = s.refit()                  # nothing observed yet: the prior stays
    >>> r.kept_prior, r.changed, r.steps, r.coefficients["gemm"]
    (True, False, 0, 1.0)
    """

    model: CostModel
    previous: CostModel
    changed: bool
    kept_prior: bool
    steps: int
    rows: int
    dropped: int
    skipped: int
    error: float
    prior_error: float
    coefficients: dict[str, float]
    moved: tuple[str, ...]
    adopted: bool = False
    verdict: str = "no-data"
    scale: float = 1.0
    limited: tuple[str, ...] = ()
    raised: tuple[str, ...] = ()
    heldout_error: float = 0.0
    heldout_error_in_use: float = 0.0
    unlimited_error: float = 0.0
    heldout_rows: int = 0
    step_times: int = 0
    iteration_fixed_s: float = 0.0

    def describe(self) -> str:
        """The one line ``OnlineCalibration`` logs.

        Returns
        -------
        str
            The coefficients, the fit error against the prior's, and the window's counts.

        Example
        -------
        >>> import skrull
        >>> skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).refit().describe()
        'cost model kept (prior): fit error 0.00 % (prior 0.00 %) over 0 steps, 0 times ...'
        """
        what = "kept (prior)" if self.kept_prior else "refitted"
        coefs = ", ".join(f"{k}={v:.4g}" for k, v in self.coefficients.items())
        moved = f"; moved: {', '.join(self.moved)}" if self.moved else ""
        return (f"cost model {what}: fit error {100 * self.error:.2f} % (prior "
                f"{100 * self.prior_error:.2f} %) over {self.steps} steps, {self.rows} times "
                f"({self.dropped} stragglers dropped, {self.skipped} skipped); coefficients "
                f"relative to the prior: {coefs}{moved}; fit {self.verdict}, scale "
                f"{self.scale:.4g}")


def _error_info() -> _ffi.skrull_error_info:
    return _ffi.skrull_error_info()


class Window:
    """The refit state: a ``skrull_refit_init`` buffer, and a copy of each observed step so
    that a larger step or an unpickled scheduler can rebuild it (replaying gives the same
    bits)."""

    def __init__(self, settings: RefitSettings, config: _ffi.skrull_config,
                 prior: Optional[CostModel], rows: int = _MIN_ROWS) -> None:
        self.settings = settings
        self.prior = prior  # keeps the struct config.cost_model points at alive
        self._config = _ffi.skrull_config.from_buffer_copy(config)
        self._config.cost_model = None if prior is None else ctypes.addressof(prior._c)
        self.steps: deque[tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, float]] = \
            deque(maxlen=settings.window)
        # Sized for twice the first step (a power of two); a larger step grows it.
        self._init(max(_MIN_ROWS, 1 << (2 * rows - 1).bit_length()))

    def _init(self, rows: int) -> None:
        params = self.settings._c_params(rows)
        size = _ffi.lib.skrull_refit_size(ctypes.byref(params))
        if size == 0:
            raise make_error(Status.INVALID_REFIT_PARAMS, "refit settings refused by the "
                             "library", ConfigError)
        self._state = np.zeros((size + 7) // 8, np.uint64)  # 8-byte aligned
        self._addr, self._size = _ffi.address(self._state), self._state.nbytes
        err = _error_info()
        status = _ffi.lib.skrull_refit_init(ctypes.byref(params), ctypes.byref(self._config),
                                            self._addr, self._size, ctypes.byref(err))
        if status != Status.OK:
            raise from_info(err, status, "refit")
        self.rows = rows

    def observe(self, plan: Plan, times: np.ndarray, step_time: float = math.nan) -> None:
        """Adds one step (``times``: ``as_times`` of it; ``step_time``: its wall time, NaN
        when unknown) to the window."""
        self.add((np.ascontiguousarray(plan.lengths, np.uint32), np.array(plan.placements),
                  np.array(plan.cp_groups), plan.num_micro_batches, times, float(step_time)))

    def add(self, step: tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, float]
            ) -> None:
        """Adds one step as (lengths, placements, cp_groups, micro-batches, times, step
        time)."""
        rows = step[4].size
        # A step larger than the state holds: a larger state gets the window's steps again
        # (the last fit, which anchors the next one, is not carried over: the next fit is
        # anchored at the prior, the same on every rank).
        if rows > self.rows:
            self._init(max(rows, 2 * self.rows))
            for old in self.steps:
                self._observe(*old)
        self._observe(*step)
        self.steps.append(step)

    def _observe(self, lengths: np.ndarray, placements: np.ndarray, groups: np.ndarray,
                 micro_batches: int, times: np.ndarray, step_time: float = math.nan) -> None:
        a = _ffi.address
        err = _error_info()
        status = _ffi.lib.skrull_refit_observe(
            self._addr, self._size, a(lengths), lengths.size, a(placements), a(groups),
            micro_batches, a(times), times.size, ctypes.byref(err))
        if status != Status.OK:
            raise from_info(err, status, "observe")
        if not math.isnan(step_time):
            status = _ffi.lib.skrull_refit_observe_step_time(self._addr, self._size,
                                                             step_time, ctypes.byref(err))
            if status != Status.OK:
                raise from_info(err, status, "observe")

    def solve(self, base: CostModel) -> tuple[CostModel, _ffi.skrull_refit_report]:
        """The refitted model (a mutable ``CostModel`` named as ``base``) and the report."""
        out, report, err = _ffi.skrull_cost_model(), _ffi.skrull_refit_report(), _error_info()
        status = _ffi.lib.skrull_refit_solve(
            self._addr, self._size, ctypes.byref(out), ctypes.sizeof(out), ctypes.byref(report),
            ctypes.sizeof(report), ctypes.byref(err))
        if status != Status.OK:
            raise from_info(err, status, "refit")
        return _from_bytes(base.gpu, base.model, bytes(out)), report

    def state(self) -> dict[str, Any]:
        """What pickling keeps: the settings, the prior, the library's state bytes (plain
        memory without addresses: a copy works in another buffer of this platform) and the
        observed steps (to rebuild a larger state)."""
        return {"settings": self.settings, "prior": self.prior, "rows": self.rows,
                "state": self._state.tobytes(),
                "steps": [(a.copy(), b.copy(), c.copy(), m, t.copy(), w)
                          for a, b, c, m, t, w in self.steps]}

    @classmethod
    def restore(cls, state: dict[str, Any], config: _ffi.skrull_config) -> Window:
        """The window ``state()`` describes, for a scheduler of ``config``."""
        w = cls.__new__(cls)
        w.settings, w.prior, w.rows = state["settings"], state["prior"], state["rows"]
        w._config = _ffi.skrull_config.from_buffer_copy(config)
        w._config.cost_model = None if w.prior is None else ctypes.addressof(w.prior._c)
        raw = np.frombuffer(state["state"], np.uint8)
        w._state = np.empty(raw.size // 8, np.uint64)  # 8-byte aligned, as the library needs
        w._state.view(np.uint8)[:] = raw
        w._addr, w._size = _ffi.address(w._state), w._state.nbytes
        # Steps pickled before step times existed have five fields.
        w.steps = deque((tuple(x) + (math.nan,))[:6] for x in state["steps"])
        w.steps = deque(w.steps, maxlen=w.settings.window)
        return w


def report_to_refit(report: _ffi.skrull_refit_report, model: CostModel,
                    previous: CostModel) -> Refit:
    """The Python ``Refit`` of a ``skrull_refit_report``."""
    coefficients = {name: float(report.coefficients[i])
                    for i, name in enumerate(_ffi.REFIT_COEFFICIENTS)}
    coefficients[_ffi.REFIT_SHARDED_SEQUENCE] = float(report.coefficient_sharded_sequence)
    coefficients[_ffi.REFIT_LAST_MICRO_BATCH] = float(report.coefficient_last_micro_batch)
    coefficients[_ffi.REFIT_LOCAL_SEQUENCE] = float(report.coefficient_local_sequence)

    def names(bits: int) -> tuple[str, ...]:
        return tuple(name for i, name in enumerate(COEFFICIENTS) if bits >> i & 1)

    verdicts = _ffi.REFIT_VERDICTS
    verdict = verdicts[report.verdict] if report.verdict < len(verdicts) else str(report.verdict)
    return Refit(model=model, previous=previous, changed=model != previous,
                 kept_prior=bool(report.kept_prior), steps=int(report.steps),
                 rows=int(report.rows), dropped=int(report.dropped), skipped=int(report.skipped),
                 error=float(report.error_fit), prior_error=float(report.error_prior),
                 coefficients=coefficients, moved=names(report.moved),
                 adopted=bool(report.adopted), verdict=verdict, scale=float(report.scale),
                 limited=names(report.limited), raised=names(report.raised), heldout_error=float(report.error_heldout_fit),
                 heldout_error_in_use=float(report.error_heldout_in_use),
                 unlimited_error=float(report.error_unlimited),
                 heldout_rows=int(report.heldout_rows), step_times=int(report.step_times),
                 iteration_fixed_s=float(report.iteration_fixed_s))
