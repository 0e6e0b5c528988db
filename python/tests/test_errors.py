"""Bad input through Python raises the status C returns for the same input, never crashes."""

from __future__ import annotations

import ctypes
import pickle

import numpy as np
import pytest

import skrull
from skrull import _ffi


BASE = dict(dp=4, cp=8, bucket_tokens=26624)


def _raw_c_call(sched: skrull.Scheduler,
                lengths_u32: np.ndarray) -> tuple[int, _ffi.skrull_error_info]:
    """``skrull_schedule`` called directly, with buffers sized by ``skrull_plan_sizes``:
    (status, the skrull_error_info it wrote)."""
    n, cfg = len(lengths_u32), sched._c_config
    sizes, info = _ffi.skrull_sizes(), _ffi.skrull_error_info(status=0, index=-7)
    # Sized for at most 65536 sequences: past that skrull_schedule must refuse the batch.
    status = _ffi.lib.skrull_plan_sizes(min(n, skrull.MAX_SEQUENCES), cfg.dp, cfg.cp,
                                        ctypes.byref(sizes))
    if status:
        return status, info
    bufs = [np.zeros(max(1, sizes.placements), skrull.PLACEMENT_DTYPE),
            np.zeros(max(1, sizes.micro_batches), skrull.MICRO_BATCH_DTYPE)] + \
        [np.zeros(max(1, k), np.uint32) for k in (sizes.members, sizes.rank_tokens,
                                                  sizes.micro_batches_per_dp)]
    bufs.append(np.zeros(max(1, sizes.placements), skrull.CP_GROUP_DTYPE))  # subgroups is on
    ws, summary = np.zeros(sizes.workspace_bytes, np.uint8), _ffi.skrull_summary()
    p = [_ffi.address(b) for b in bufs]
    out = _ffi.skrull_plan_buffers(ctypes.sizeof(_ffi.skrull_plan_buffers), 0,
                                   p[0], sizes.placements, p[1], sizes.micro_batches,
                                   p[2], sizes.members, p[3], sizes.rank_tokens,
                                   p[4], sizes.micro_batches_per_dp, ctypes.addressof(summary),
                                   ctypes.addressof(info), p[5], sizes.placements)
    status = _ffi.lib.skrull_schedule(ctypes.byref(cfg), _ffi.address(lengths_u32), n,
                                      _ffi.address(ws), ws.nbytes, ctypes.byref(out))
    return status, info


def _raw_c_status(sched: skrull.Scheduler, lengths_u32: np.ndarray) -> int:
    return _raw_c_call(sched, lengths_u32)[0]


# (lengths, status, offending index, limit); the C side gets the same bits as uint32_t.
BAD_BATCHES = [
    ([5, 0, 7], "EMPTY_SEQUENCE", 1, None),
    ([5, 2**31, 7], "LENGTH_OUT_OF_RANGE", 1, 2**31 - 1),
    ([5, 33, 7], "SEQUENCE_TOO_LONG", 1, 9),  # ceil(33 / 4) = 9 > 8: needs BucketSize 9
    ([5, 0, -1], "EMPTY_SEQUENCE", 1, None),  # first offender in input order, whatever its kind
    ([5, -1, 0], "LENGTH_OUT_OF_RANGE", 1, 2**31 - 1),  # -1 is 2^32 - 1 as uint32_t
    ([40, 0], "SEQUENCE_TOO_LONG", 0, 10),
]


@pytest.mark.parametrize("lengths,status,index,limit", BAD_BATCHES)
def test_bad_batches_raise_the_status_and_details_c_returns(lengths, status, index, limit):
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=8, policy="skrull")
    with pytest.raises(skrull.BatchError) as err:
        s.plan(lengths)
    e = err.value
    assert (e.status, e.index, e.value, e.limit) == (status, index, lengths[index], limit)
    assert e.field is None and e.field_name is None
    c_bits = np.array(lengths, np.int64).astype(np.uint32)
    code, info = _raw_c_call(s, c_bits)
    assert code == info.status == e.code == skrull.Status[status]
    # The exception carries the library's details (the caller's value where C saw 2^32 - 1).
    assert (info.index, info.limit) == (index, limit or 0)
    assert info.value == int(c_bits[index])


def test_lengths_beyond_uint32_are_out_of_range_not_wrapped():
    # 2^32 + 5 would wrap to a valid 5 if truncated to uint32_t.
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64)
    for value in (2**32 + 5, 2**64 + 5, -(2**32) + 5):
        with pytest.raises(skrull.BatchError) as err:
            s.plan([3, value])
        assert (err.value.status, err.value.index) == ("LENGTH_OUT_OF_RANGE", 1)
    with pytest.raises(skrull.BatchError, match="LENGTH_OUT_OF_RANGE"):
        s.plan(np.array([3, 2**32 + 5], np.uint64))


@pytest.mark.parametrize("kwargs,length,needed", [
    (dict(shard_padding="zigzag"), 33, 10),  # 2 * ceil(33 / 8) = 10 > 9
    (dict(shard_padding="zigzag"), 32, None),  # 2 * ceil(32 / 8) = 8 <= 9
    (dict(pad_multiple=16), 33, 12),  # padded to lcm(8, 16) = 16: 48 / 4 = 12 > 9
    (dict(pad_multiple=16), 32, None),
    (dict(pad_multiple=3), 28, 12),  # lcm(8, 3) = 24: 48 / 4
    (dict(pad_multiple=3), 24, None),  # 24 / 4 = 6
    (dict(), 37, 10),  # ceil(37 / 4)
    (dict(), 36, None),
])
def test_sequence_too_long_names_the_bucket_its_padded_share_needs(kwargs, length, needed):
    s = skrull.Scheduler(dp=1, cp=4, bucket_tokens=9, policy="skrull", **kwargs)
    if needed is None:
        assert s.plan([3, length]).summary.sequences == 2
        return
    with pytest.raises(skrull.BatchError) as err:
        s.plan([3, length])
    e = err.value
    assert (e.status, e.index, e.value, e.limit) == ("SEQUENCE_TOO_LONG", 1, length, needed)
    assert f"sequence 1 has {length} tokens" in str(e) and f"BucketSize of {needed}" in str(e)
    assert "bucket_tokens=9" in str(e)


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
    e = err.value
    assert (e.status, e.index, e.value, e.limit) == ("TOO_MANY_SEQUENCES", None, 65537, 65536)
    assert _raw_c_status(s, np.ones(skrull.MAX_SEQUENCES + 1, np.uint32)) == err.value.code


def test_c_reports_the_batch_size_of_too_many_sequences():
    s = skrull.Scheduler(dp=1, cp=1, bucket_tokens=8, max_sequences=8)
    code, info = _raw_c_call(s, np.ones(skrull.MAX_SEQUENCES + 1, np.uint32))
    assert code == info.status == skrull.Status.TOO_MANY_SEQUENCES
    assert (info.value, info.limit) == (65537, 65536)


@pytest.mark.parametrize("lockstep", [False, True])
def test_micro_batch_limit_names_the_dp_rank_and_what_it_needs(lockstep):
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=8, max_micro_batches=2, policy="deepspeed",
                         lockstep=lockstep)
    s.plan([8, 8, 8, 8])  # two micro-batches per DP rank
    with pytest.raises(skrull.BatchError) as err:
        s.plan([8, 8, 8, 8, 8])
    e = err.value
    assert (e.status, e.value, e.limit) == ("MICRO_BATCH_LIMIT", 3, 2)
    assert e.index in (0, 1)
    with_limit_3 = skrull.Scheduler(dp=2, cp=2, bucket_tokens=8, max_micro_batches=3,
                                    policy="deepspeed", lockstep=lockstep).plan([8] * 5)
    assert with_limit_3.micro_batches_per_dp[e.index] == 3  # the rank the error named


@pytest.mark.parametrize("kwargs,status,value,limit", [
    (dict(dp=0), "INVALID_DP", 0, 65536), (dict(dp=65537), "INVALID_DP", 65537, 65536),
    (dict(cp=257), "INVALID_CP", 257, 256), (dict(bucket_tokens=2**31), "INVALID_BUCKET",
                                            2**31, 2**31 - 1),
    (dict(pad_multiple=65537), "INVALID_PAD_MULTIPLE", 65537, 65536),
    (dict(model=dict(hidden=64, kv_hidden=64, ffn=0, layers=1)), "INVALID_MODEL", 0, None),
])
def test_config_errors_carry_the_library_details(kwargs, status, value, limit):
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(**{**BASE, **kwargs})
    e = err.value
    assert (e.status, e.index, e.value, e.limit) == (status, None, value, limit)
    if status == "INVALID_MODEL":
        assert (e.field, e.field_name) == (3, "ffn") and "model.ffn=0" in str(e)
    else:
        assert e.field is None and e.field_name == next(iter(kwargs))
        assert f"{e.field_name}={value} is out of range" in str(e) and str(limit) in str(e)


def test_balanced_refuses_another_flops_formula_as_unsupported_option():
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, policy="balanced", flops="megatron")
    e = err.value
    assert (e.status, e.code, e.field, e.field_name) == ("UNSUPPORTED_OPTION", 22, 1, "flops")
    assert isinstance(e, ValueError) and "flops='megatron' does not apply" in str(e)
    for policy in ("skrull", "deepspeed", "packed", "roundrobin"):  # they apply it
        skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, policy=policy, flops="megatron")


@pytest.mark.parametrize("kwargs,status", [
    (dict(pad_multiple=-1), "INVALID_PAD_MULTIPLE"),
    (dict(pad_multiple=2**32 + 16), "INVALID_PAD_MULTIPLE"),  # never wrapped to 16
    (dict(lockstep=2), "INVALID_ENUM"), (dict(pad_local=2), "INVALID_ENUM"),
    (dict(lockstep=-1), "INVALID_ENUM"), (dict(cost_model="a100"), "INVALID_ENUM"),
])
def test_bad_new_options_are_config_errors(kwargs, status):
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, **kwargs)
    assert err.value.status == status


@pytest.mark.parametrize("kwargs", [dict(pad_multiple=2.0), dict(lockstep="yes"),
                                    dict(cost_model=object()), dict(pad_local=None),
                                    dict(cost_model=3)])
def test_non_integer_new_options_are_argument_errors(kwargs):
    with pytest.raises(skrull.ArgumentError):
        skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, **kwargs)


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
        skrull.Scheduler(**{**BASE, **kwargs})
    assert err.value.status == status and err.value.code == skrull.Status[status]
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("kwargs", [dict(dp=2.0), dict(cp="8"), dict(bucket_tokens=26.5),
                                    dict(model=dict(hidden=1, width=3)), dict(dp=True)])
def test_non_integer_settings_are_argument_errors(kwargs):
    with pytest.raises(skrull.ArgumentError):
        skrull.Scheduler(**{**BASE, **kwargs})


def test_no_such_gpu_carries_the_library_details():
    plan = skrull.Scheduler(dp=2, cp=2, bucket_tokens=16, policy="packed").plan([3, 4, 5])
    (count,) = set(plan.micro_batches_per_dp[:1].tolist())
    with pytest.raises(skrull.LayoutError) as err:
        plan.layout(0, count + 4, 1)
    e = err.value
    assert (e.status, e.index, e.value, e.limit) == ("NO_SUCH_GPU", 0, count + 4, count)
    assert f"micro_batch={count + 4} is out of range" in str(e)
    assert e.field_name == "micro_batch"


def test_layout_overflow_names_the_value_and_int32_max():
    # Two sequences of 2^31 - 1 tokens sharded over CP 256 in one micro-batch: the sharded
    # cu_seqlens reach 2^32 - 2, which int32 cannot hold (checked before anything is sized).
    plan = skrull.Scheduler(dp=1, cp=256, bucket_tokens=2**24, policy="packed").plan(
        [2**31 - 1, 2**31 - 1])
    assert plan.summary.micro_batches == 1
    with pytest.raises(skrull.LayoutError) as err:
        plan.layout(0, 0, 0)
    e = err.value
    assert (e.status, e.value, e.limit) == ("LAYOUT_OVERFLOW", 2**32 - 2, 2**31 - 1)


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
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(**BASE, policy="balanced", flops="megatron")
    back = pickle.loads(pickle.dumps(err.value))
    assert (back.status, back.field, back.field_name) == ("UNSUPPORTED_OPTION", 1, "flops")


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
    with pytest.raises(skrull.ConfigError, match="max_sequences=-1 is out of range"):
        skrull.Scheduler(dp=1, cp=1, bucket_tokens=8, max_sequences=-1)
