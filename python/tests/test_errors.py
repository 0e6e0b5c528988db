"""Bad input through Python raises the status C returns for the same input, never crashes."""

from __future__ import annotations

import ctypes
import pickle

import numpy as np
import pytest

import skrull
from skrull import _ffi


def _raw_c_status(sched: skrull.Scheduler, lengths_u32: np.ndarray) -> int:
    """``skrull_schedule`` called directly, with buffers sized by ``skrull_plan_sizes``."""
    n, cfg = len(lengths_u32), sched._c_config
    sizes = _ffi.skrull_sizes()
    status = _ffi.lib.skrull_plan_sizes(n, cfg.dp, cfg.cp, ctypes.byref(sizes))
    if status:
        return status
    bufs = [np.zeros(max(1, sizes.placements), skrull.PLACEMENT_DTYPE),
            np.zeros(max(1, sizes.micro_batches), skrull.MICRO_BATCH_DTYPE)] + \
        [np.zeros(max(1, k), np.uint32) for k in (sizes.members, sizes.rank_tokens,
                                                  sizes.micro_batches_per_dp)]
    ws, summary = np.zeros(sizes.workspace_bytes, np.uint8), _ffi.skrull_summary()
    p = [_ffi.address(b) for b in bufs]
    out = _ffi.skrull_plan_buffers(ctypes.sizeof(_ffi.skrull_plan_buffers), 0,
                                   p[0], sizes.placements, p[1], sizes.micro_batches,
                                   p[2], sizes.members, p[3], sizes.rank_tokens,
                                   p[4], sizes.micro_batches_per_dp, ctypes.addressof(summary))
    return _ffi.lib.skrull_schedule(ctypes.byref(cfg), _ffi.address(lengths_u32), n,
                                    _ffi.address(ws), ws.nbytes, ctypes.byref(out))


# (lengths, status, offending index); the C side gets the same bits as uint32_t.
BAD_BATCHES = [
    ([5, 0, 7], "EMPTY_SEQUENCE", 1),
    ([5, 2**31, 7], "LENGTH_OUT_OF_RANGE", 1),
    ([5, 33, 7], "SEQUENCE_TOO_LONG", 1),  # ceil(33 / 4) = 9 > 8
    ([5, 0, -1], "EMPTY_SEQUENCE", 1),  # first offender in input order, whatever its kind
    ([5, -1, 0], "LENGTH_OUT_OF_RANGE", 1),  # -1 is 2^32 - 1 as uint32_t
    ([40, 0], "SEQUENCE_TOO_LONG", 0),
]


@pytest.mark.parametrize("lengths,status,index", BAD_BATCHES)
def test_bad_batches_raise_the_status_c_returns(lengths, status, index):
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=8, policy="skrull")
    with pytest.raises(skrull.BatchError) as err:
        s.plan(lengths)
    assert (err.value.status, err.value.index, err.value.value) == (status, index, lengths[index])
    c_bits = np.array(lengths, np.int64).astype(np.uint32)
    assert _raw_c_status(s, c_bits) == err.value.code == skrull.Status[status]


def test_lengths_beyond_uint32_are_out_of_range_not_wrapped():
    # 2^32 + 5 would wrap to a valid 5 if truncated to uint32_t.
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64)
    for value in (2**32 + 5, 2**64 + 5, -(2**32) + 5):
        with pytest.raises(skrull.BatchError) as err:
            s.plan([3, value])
        assert (err.value.status, err.value.index) == ("LENGTH_OUT_OF_RANGE", 1)
    with pytest.raises(skrull.BatchError, match="LENGTH_OUT_OF_RANGE"):
        s.plan(np.array([3, 2**32 + 5], np.uint64))


def test_zigzag_too_long_names_the_zigzag_limit():
    s = skrull.Scheduler(dp=1, cp=4, bucket_tokens=9, shard_padding="zigzag")
    s.plan([32])  # 2 * ceil(32 / 8) = 8 <= 9
    with pytest.raises(skrull.BatchError) as err:
        s.plan([33])  # 2 * ceil(33 / 8) = 10 > 9
    assert (err.value.status, err.value.limit) == ("SEQUENCE_TOO_LONG", 32)


@pytest.mark.parametrize("bad", [[1.5], [1, 2.0], ["7"], [None], [[1, 2], [3]],
                                 np.array([True, False]),
                                 np.array([1.0, 2.0]), np.array([[1, 2], [3, 4]]), 5])
def test_non_integer_lengths_are_argument_errors(bad):
    with pytest.raises(skrull.ArgumentError) as err:
        skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan(bad)
    assert err.value.status == "INVALID_ARG" and isinstance(err.value, TypeError)


def test_too_many_sequences():
    s = skrull.Scheduler(dp=4, cp=8, bucket_tokens=64, max_sequences=8)
    assert s.plan(np.ones(skrull.MAX_SEQUENCES, np.int32)).summary.sequences == 65536
    with pytest.raises(skrull.BatchError) as err:
        s.plan(np.ones(skrull.MAX_SEQUENCES + 1, np.int32))
    assert err.value.status == "TOO_MANY_SEQUENCES"
    assert _raw_c_status(s, np.ones(skrull.MAX_SEQUENCES + 1, np.uint32)) == err.value.code


def test_micro_batch_limit():
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=8, max_micro_batches=1, policy="deepspeed")
    with pytest.raises(skrull.BatchError) as err:
        s.plan([8, 8, 8])
    assert (err.value.status, err.value.limit) == ("MICRO_BATCH_LIMIT", 1)


@pytest.mark.parametrize("kwargs,status", [
    (dict(dp=0), "INVALID_DP"), (dict(dp=65537), "INVALID_DP"), (dict(dp=-1), "INVALID_DP"),
    (dict(dp=2**32 + 2), "INVALID_DP"), (dict(cp=0), "INVALID_CP"), (dict(cp=257), "INVALID_CP"),
    (dict(bucket_tokens=0), "INVALID_BUCKET"), (dict(bucket_tokens=2**31), "INVALID_BUCKET"),
    (dict(policy="fastest"), "INVALID_ENUM"), (dict(policy=99), "INVALID_ENUM"),
    (dict(victim="middle"), "INVALID_ENUM"), (dict(flops=7), "INVALID_ENUM"),
    (dict(shard_padding="ring"), "INVALID_ENUM"), (dict(model="llama-70b"), "INVALID_ENUM"),
    (dict(model=dict(hidden=0, kv_hidden=0, ffn=1, layers=1)), "INVALID_MODEL"),
    (dict(model=dict(hidden=64, kv_hidden=128, ffn=1, layers=1)), "INVALID_MODEL"),
    (dict(model=dict(hidden=64, kv_hidden=64, ffn=1, layers=1, swiglu=2)), "INVALID_ENUM"),
])
def test_bad_configurations_raise_config_errors(kwargs, status):
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(**kwargs)
    assert err.value.status == status and err.value.code == skrull.Status[status]
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("kwargs", [dict(dp=2.0), dict(cp="8"), dict(bucket_tokens=26.5),
                                    dict(model=dict(hidden=1, width=3)), dict(dp=True)])
def test_non_integer_settings_are_argument_errors(kwargs):
    with pytest.raises(skrull.ArgumentError):
        skrull.Scheduler(**kwargs)


def test_bad_gpu_indices_are_no_such_gpu():
    plan = skrull.Scheduler(dp=2, cp=2, bucket_tokens=16).plan([3, 4, 5])
    for gpu in [(2, 0, 0), (0, 0, 2), (0, 5, 0), (-1, 0, 0), (0, 0, -1), (2**32, 0, 0),
                (0, 2**32, 0), (0, 0, 2**32)]:  # 2^32 would alias GPU 0 if truncated
        with pytest.raises(skrull.LayoutError) as err:
            plan.layout(*gpu)
        assert err.value.status == "NO_SUCH_GPU", gpu
    with pytest.raises(skrull.ArgumentError):
        plan.layout(0.0, 0, 0)
    with pytest.raises(skrull.LayoutError):
        plan.rank_layouts(0, 2)


def test_errors_survive_pickling_for_multiprocessing():
    with pytest.raises(skrull.BatchError) as err:
        skrull.Scheduler(dp=1, cp=2, bucket_tokens=8).plan([5, 0])
    back = pickle.loads(pickle.dumps(err.value))
    assert type(back) is skrull.BatchError and str(back) == str(err.value)
    assert (back.status, back.code, back.index, back.value) == ("EMPTY_SEQUENCE", 15, 1, 0)


def test_error_carries_status_code_and_library_message():
    err = skrull.Error(17)
    assert (err.status, err.code) == ("SEQUENCE_TOO_LONG", 17)
    assert err.message == _ffi.lib.skrull_status_str(17).decode() and err.message in str(err)
    unknown = skrull.Error(300)
    assert unknown.status == "UNKNOWN_300" and unknown.message == "unknown status"


def test_max_sequences_must_be_a_count():
    assert skrull.Scheduler(dp=1, cp=1, bucket_tokens=8, max_sequences=10**6)._capacity == 65536
    with pytest.raises(skrull.ArgumentError):
        skrull.Scheduler(dp=1, cp=1, bucket_tokens=8, max_sequences=2.5)
    with pytest.raises(skrull.BatchError, match="TOO_MANY_SEQUENCES"):
        skrull.Scheduler(dp=1, cp=1, bucket_tokens=8, max_sequences=-1)
