"""``Window``: the outlier-delay window across global batches (``skrull_window_*``,
docs/outlier_delay.md)."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, NoReturn

import numpy as np

from . import _ffi
from ._args import whole
from ._errors import ConfigError, Status, from_info, make_error, range_error
from ._scheduler import Scheduler, _as_lengths, _batch_error

_U64_MAX = 2**64 - 1


class WindowDeferred(NamedTuple):
    """A deferred sample (``skrull_window_deferred``): its position in push order, its length
    and the step of the batch it was pushed in (``Window.queue``, ``Window.requeue``).

    Example
    -------
    >>> import skrull
    >>> skrull.WindowDeferred(position=0, length=4000, origin=0).length
    4000
    """

    position: int
    length: int
    origin: int


@dataclass(frozen=True)
class WindowStep:
    """One step of a ``Window``: the samples to train now.

    Attributes
    ----------
    index : int
        The step's index.
    positions : numpy.ndarray
        ``uint64``: each sample's position in push order (the current batch's kept samples
        in batch order, then the released ones in position order).
    lengths : numpy.ndarray
        ``uint32``: their lengths (plan these: ``Scheduler.plan(step.lengths)``).
    released : int
        How many of them, the last ones, were deferred from earlier steps.
    deferred : int
        Outliers of the current batch sent to a later step.
    delay_sum : int
        The released samples' delays summed, in steps.
    queued : int
        Samples in the queue after this step.

    Example
    -------
    >>> import skrull
    >>> w = skrull.Window(skrull.Scheduler(dp=2, cp=1, bucket_tokens=64), 1, 4)
    >>> w.push([10, 20])
    >>> step = w.step()
    >>> step.index, step.positions.tolist(), step.released, step.queued
    (0, [0, 1], 0, 0)
    """

    index: int
    positions: np.ndarray
    lengths: np.ndarray
    released: int
    deferred: int
    delay_sum: int
    queued: int


class Window:
    """The outlier-delay window: across global batches, a sequence that alone outlasts its
    batch's fair share per DP rank may run up to ``max_delay`` steps later, beside other such
    sequences, so that no DP rank waits on one batch's giant (docs/outlier_delay.md). Every
    pushed sample comes back exactly once, at most ``max_delay`` steps after its batch; every
    rank that pushes the same batches gets the same steps.

    Push global batches in sample order, keeping ``max_delay`` of them ahead of the step you
    take (the window defers only to batches it holds), then ``step()``. The step after the
    last pushed batch returns the whole queue (the epoch's end). The window estimates with
    the scheduler's configuration and cost model as it is now (a later ``Scheduler.refit``
    does not reach it).

    Parameters
    ----------
    scheduler : Scheduler
        The configuration whose cost model decides (plan the steps with it).
    max_delay : int
        The most steps a sample may be delayed, 0 to 64 (0: never).
    batch_capacity : int
        The most sequences one pushed batch may hold, 1 to 65536.
    first_step, first_position : int, optional
        Where the window starts (resuming mid-epoch: the saved step and the position of the
        first sample of its batch); default 0.
    queue : iterable of WindowDeferred, optional
        Deferred samples to put back (``queue()`` of the window being resumed).

    Raises
    ------
    ConfigError
        ``INVALID_WINDOW_PARAMS``: ``max_delay`` or ``batch_capacity`` out of range.
    ArgumentError
        A non-integer setting.
    BatchError
        ``INVALID_DEFERRED``: a queued sample that does not fit the window.

    Example
    -------
    >>> import skrull
    >>> s = skrull.Scheduler(dp=2, cp=1, bucket_tokens=4096)
    >>> w = skrull.Window(s, max_delay=1, batch_capacity=4)
    >>> w.push([4000, 10, 10, 10])        # a giant, nothing to pair it with yet
    >>> w.push([4000, 10, 10, 10])
    >>> first = w.step()
    >>> first.positions.tolist(), first.deferred
    ([1, 2, 3], 1)
    >>> w.step().positions.tolist()       # the two giants together, one per DP rank
    [4, 5, 6, 7, 0]
    >>> s.plan(first.lengths).micro_batches_per_dp.tolist()
    [1, 1]
    """

    def __init__(self, scheduler: Scheduler, max_delay: int, batch_capacity: int, *,
                 first_step: int = 0, first_position: int = 0,
                 queue: Iterable[tuple[int, int, int]] = ()) -> None:
        if not isinstance(scheduler, Scheduler):
            raise make_error(Status.INVALID_ARG, f"scheduler must be a skrull.Scheduler, got "
                             f"{type(scheduler).__name__}", field_name="scheduler")
        self.max_delay = _bounded("max_delay", max_delay, 0, _ffi.WINDOW_MAX_DELAY)
        self.batch_capacity = _bounded("batch_capacity", batch_capacity, 1, 65536)
        self.next_step = _bounded("first_step", first_step, 0, _U64_MAX, Status.INVALID_ARG)
        start = _bounded("first_position", first_position, 0, _U64_MAX, Status.INVALID_ARG)
        self.pending = 0
        self._c_config = _ffi.skrull_config.from_buffer_copy(scheduler._c_config)
        params = _ffi.skrull_window_params(
            struct_size=ctypes.sizeof(_ffi.skrull_window_params), max_delay=self.max_delay,
            batch_capacity=self.batch_capacity, first_step=self.next_step,
            first_position=start)
        cap = _ffi.skrull_window_capacity()
        err = _ffi.skrull_error_info()
        status = _ffi.lib.skrull_window_sizes(ctypes.byref(params), ctypes.byref(cap))
        if status != Status.OK:
            raise from_info(err, status, "window")
        #: The most samples one step returns.
        self.step_capacity = int(cap.step_capacity)
        self._state = np.zeros(cap.state_bytes // 8, np.uint64)   # 8-byte aligned
        self._addr, self._size = _ffi.address(self._state), self._state.nbytes
        self._positions = np.empty(cap.step_capacity, np.uint64)
        self._lengths = np.empty(cap.step_capacity, np.uint32)
        self._queue = np.empty(cap.queue_capacity, _DEFERRED)
        self._error = _ffi.skrull_error_info()
        self._lock = threading.Lock()
        status = _ffi.lib.skrull_window_init(ctypes.byref(params), scheduler._prepared.handle,
                                             self._addr, self._size, ctypes.byref(err))
        if status != Status.OK:
            raise from_info(err, status, "window")
        entries = list(queue)
        if entries:
            self.requeue(entries)

    def __repr__(self) -> str:
        return (f"Window(max_delay={self.max_delay}, batch_capacity={self.batch_capacity}, "
                f"next_step={self.next_step}, pending={self.pending})")

    def __reduce__(self) -> NoReturn:
        raise TypeError("a skrull.Window is valid only at its own address and is not pickled: "
                        "save its next_step and queue(), and rebuild it with first_step, "
                        "first_position and queue")

    def push(self, lengths: Any) -> None:
        """Appends the next global batch, in sample order.

        Parameters
        ----------
        lengths : sequence of int, numpy or torch array
            Tokens of each sequence (as ``Scheduler.plan`` takes them).

        Raises
        ------
        BatchError
            ``WINDOW_FULL`` (``max_delay + 1`` batches held: take a step first),
            ``WINDOW_BATCH_TOO_LARGE``, or a length the budget refuses
            (``EMPTY_SEQUENCE``, ``LENGTH_OUT_OF_RANGE``, ``SEQUENCE_TOO_LONG``).
        ArgumentError
            ``lengths`` is not a one-dimensional sequence of integers.

        Example
        -------
        >>> import skrull
        >>> w = skrull.Window(skrull.Scheduler(dp=2, cp=1, bucket_tokens=64), 1, 4)
        >>> w.push([10, 20])
        >>> w.pending
        1
        """
        arr, original = _as_lengths(lengths)
        with self._lock:
            self._error.status = 0
            status = _ffi.lib.skrull_window_push(self._addr, self._size, _ffi.address(arr),
                                                 arr.size, ctypes.byref(self._error))
            if status != Status.OK:
                raise _batch_error(status, self._error, original, self._c_config)
            self.pending += 1

    def step(self) -> WindowStep:
        """Takes the next step.

        Returns
        -------
        WindowStep
            The samples to train now (copies, valid after later calls).

        Raises
        ------
        BatchError
            ``WINDOW_EMPTY``: no batch is pushed.

        Example
        -------
        >>> import skrull
        >>> w = skrull.Window(skrull.Scheduler(dp=2, cp=1, bucket_tokens=64), 1, 4)
        >>> w.push([10, 20])
        >>> w.step().lengths.tolist()
        [10, 20]
        """
        info = _ffi.skrull_window_step_info()
        with self._lock:
            self._error.status = 0
            status = _ffi.lib.skrull_window_step(
                self._addr, self._size, _ffi.address(self._positions),
                _ffi.address(self._lengths), self.step_capacity, ctypes.byref(info),
                ctypes.byref(self._error))
            if status != Status.OK:
                raise from_info(self._error, status, "window step")
            self.pending -= 1
            self.next_step = int(info.index) + 1
            k = int(info.samples)
            return WindowStep(int(info.index), self._positions[:k].copy(),
                              self._lengths[:k].copy(), int(info.released), int(info.deferred),
                              int(info.delay_sum), int(info.queued))

    def queue(self) -> list[WindowDeferred]:
        """The deferred samples not yet returned, in position order.

        Returns
        -------
        list of WindowDeferred
            With ``next_step``, what resuming needs (``Window(..., queue=...)``).

        Raises
        ------
        InternalError
            The library refused its own state (a bug; please report it).

        Example
        -------
        >>> import skrull
        >>> w = skrull.Window(skrull.Scheduler(dp=2, cp=1, bucket_tokens=4096), 1, 4)
        >>> w.push([4000, 10, 10, 10]); w.push([4000, 10, 10, 10])
        >>> _ = w.step()
        >>> w.queue()
        [WindowDeferred(position=0, length=4000, origin=0)]
        """
        count = ctypes.c_size_t()
        with self._lock:
            self._error.status = 0
            status = _ffi.lib.skrull_window_queue(
                self._addr, self._size, _ffi.address(self._queue), self._queue.size,
                ctypes.byref(count), ctypes.byref(self._error))
            if status != Status.OK:
                raise from_info(self._error, status, "window queue")
            rows = self._queue[:count.value]
            return [WindowDeferred(int(r["position"]), int(r["length"]), int(r["origin"]))
                    for r in rows]

    def requeue(self, deferred: Iterable[tuple[int, int, int]]) -> None:
        """Puts deferred samples back (into a window with no batch pushed yet): resuming a
        window saved mid-epoch.

        Parameters
        ----------
        deferred : iterable of WindowDeferred or (position, length, origin)
            As ``queue()`` listed them.

        Raises
        ------
        BatchError
            ``INVALID_DEFERRED`` (``index``: the first refused), or a length the budget
            refuses; nothing is queued then.
        ArgumentError
            An entry that is not three integers.

        Example
        -------
        >>> import skrull
        >>> s = skrull.Scheduler(dp=2, cp=1, bucket_tokens=4096)
        >>> w = skrull.Window(s, 1, 4, first_step=1, first_position=4)
        >>> w.requeue([(0, 4000, 0)])
        >>> w.push([4000, 10, 10, 10])
        >>> w.step().positions.tolist()
        [4, 5, 6, 7, 0]
        """
        rows = []
        for i, d in enumerate(deferred):
            try:
                position, length, origin = d
            except (TypeError, ValueError):
                raise make_error(Status.INVALID_ARG, f"deferred[{i}] must be (position, length, "
                                 f"origin), got {d!r}", index=i, field_name="deferred") from None
            rows.append((whole("position", position), whole("length", length),
                         whole("origin", origin)))
        arr = np.zeros(len(rows), _DEFERRED)
        for i, (p, n, o) in enumerate(rows):
            if not (0 <= p <= _U64_MAX and 0 <= o <= _U64_MAX and 0 <= n < 2**32):
                raise make_error(Status.INVALID_DEFERRED, f"deferred[{i}] = {rows[i]} does not "
                                 "fit the window's integers", index=i, field_name="deferred")
            arr[i] = (p, o, n, 0)
        with self._lock:
            self._error.status = 0
            status = _ffi.lib.skrull_window_requeue(self._addr, self._size, _ffi.address(arr),
                                                    arr.size, ctypes.byref(self._error))
            if status != Status.OK:
                raise from_info(self._error, status, "window requeue")


#: ``skrull_window_deferred`` as a numpy record.
_DEFERRED = np.dtype([("position", np.uint64), ("origin", np.uint64), ("length", np.uint32),
                      ("_reserved", np.uint32)])


def _bounded(name: str, value: Any, lo: int, hi: int,
             status: Status = Status.INVALID_WINDOW_PARAMS) -> int:
    """An integer setting within ``[lo, hi]``: ``ArgumentError`` for a non-integer,
    ``ConfigError`` out of range."""
    v = whole(name, value)
    if not lo <= v <= hi:
        raise range_error(name, v, lo, hi, status, "", ConfigError)
    return v
