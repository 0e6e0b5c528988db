"""The Scheduler's prepared setup (``skrull_setup_init`` once, ``skrull_schedule_prepared`` per
batch): its plans are ``skrull_schedule``'s bit for bit, a refit prepares the new model, the
setup is owned by the Scheduler and never pickled, and configurations are validated by
``skrull_config_check`` with their details."""

from __future__ import annotations

import copy
import ctypes
import gc
import pickle

import numpy as np
import pytest

import skrull
from skrull import _ffi
from skrull._plan import Plan
from skrull._setup import Prepared

from test_refit import FIXED_S, GEMM_S_PER_TOKEN, _batch, _feed, _scheduler

# Several configurations, every policy among them (dp, cp, bucket_tokens, options).
CONFIGS = [
    (4, 8, 26624, dict(policy="balanced")),
    (4, 8, 26624, dict(policy="balanced", cost_model="h200", subgroups=False)),
    (2, 4, 8192, dict(policy="balanced", lockstep=True, fill_empty=True, pad_multiple=16)),
    (3, 2, 4096, dict(policy="balanced", micro_batches=96, model="qwen2.5-7b")),
    (4, 8, 26624, dict(policy="skrull")),
    (2, 4, 8192, dict(policy="skrull", victim="longest", shard_padding="zigzag",
                      lockstep=True)),
    (4, 2, 8192, dict(policy="deepspeed")),
    (4, 2, 8192, dict(policy="packed", pad_multiple=8, pad_local=True)),
    (4, 2, 8192, dict(policy="roundrobin", flops="megatron")),
]


def _lengths(n: int, longest: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(16), np.log(longest), n)).astype(np.int64)


def _plain_schedule(s: skrull.Scheduler, lengths: np.ndarray) -> Plan:
    """The plan ``skrull_schedule`` (the unprepared call) writes for ``s``'s configuration,
    into buffers of its own."""
    n, cfg = len(lengths), s._c_config
    sizes = _ffi.skrull_sizes()
    assert _ffi.lib.skrull_plan_sizes(n, cfg.dp, cfg.cp, ctypes.byref(sizes)) == 0
    placements = np.zeros(sizes.placements, skrull.PLACEMENT_DTYPE)
    table = np.zeros(sizes.micro_batches, skrull.MICRO_BATCH_DTYPE)
    members, rank_tokens, per_dp = (np.zeros(k, np.uint32) for k in (
        sizes.members, sizes.rank_tokens, sizes.micro_batches_per_dp))
    groups = np.zeros(sizes.placements, skrull.CP_GROUP_DTYPE)
    ws, summary = np.zeros(sizes.workspace_bytes, np.uint8), _ffi.skrull_summary()
    a = _ffi.address
    out = _ffi.skrull_plan_buffers(
        struct_size=ctypes.sizeof(_ffi.skrull_plan_buffers),
        placements=a(placements), placements_len=placements.size,
        micro_batches=a(table), micro_batches_len=table.size, members=a(members),
        members_len=members.size, rank_tokens=a(rank_tokens), rank_tokens_len=rank_tokens.size,
        micro_batches_per_dp=a(per_dp), micro_batches_per_dp_len=per_dp.size,
        summary=ctypes.addressof(summary), cp_groups=a(groups), cp_groups_len=groups.size)
    u32 = lengths.astype(np.uint32)
    assert _ffi.lib.skrull_schedule(ctypes.byref(cfg), a(u32), n, a(ws), ws.nbytes,
                                    ctypes.byref(out)) == 0
    k = summary.micro_batches
    return Plan(s, u32, placements[:n], table[:k], members[:n], rank_tokens[:k * cfg.cp],
                per_dp, summary, groups[:n])


@pytest.mark.parametrize("dp, cp, bucket, options", CONFIGS)
def test_plans_equal_the_unprepared_skrull_schedule(dp, cp, bucket, options):
    s = skrull.Scheduler(dp, cp, bucket, **options)
    for seed, n in enumerate((1, 7, 256, 1000)):
        lengths = _lengths(n, cp * bucket, seed)
        plan, plain = s.plan(lengths), _plain_schedule(s, lengths)
        assert plan == plain and plan.digest() == plain.digest(), (seed, n)


def test_planning_and_validation_never_call_skrull_schedule(monkeypatch):
    # Regression: configurations were validated by a zero-sequence
    # skrull_schedule, and every batch re-derived its setup through skrull_schedule.
    def refused(*args):
        raise AssertionError("skrull_schedule called")
    monkeypatch.setattr(_ffi.lib, "skrull_schedule", refused)
    s = skrull.Scheduler(2, 4, 4096, cost_model="h200")
    assert len(s.plan([100, 5000, 9000, 30])) == 4
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(dp=0, cp=4, bucket_tokens=4096)
    assert (err.value.status, err.value.field_name) == ("INVALID_DP", "dp")
    bad = skrull.CostModel("h100")
    bad.gemm_efficiency = 1.5
    with pytest.raises(skrull.ConfigError) as err:
        bad.validate()
    assert (err.value.status, err.value.field_name) == ("INVALID_COST_MODEL", "gemm_efficiency")


def test_a_refit_prepares_the_refitted_model():
    s = _scheduler()
    before = _scheduler()
    prepared = s._prepared
    _feed(s, 4, fixed=20 * FIXED_S, per_token=0.2 * GEMM_S_PER_TOKEN)
    refit = s.refit()
    assert refit.changed and s._prepared is not prepared
    fresh = _scheduler(cost_model=refit.model)
    moved = 0
    for k in range(10, 20):
        digest = s.plan(_batch(k)).digest()
        assert digest == fresh.plan(_batch(k)).digest(), k
        moved += digest != before.plan(_batch(k)).digest()
    assert moved  # the new model plans differently: a stale setup would not


def test_a_refit_that_keeps_the_model_keeps_the_setup():
    s = _scheduler()
    prepared = s._prepared
    assert not s.refit().changed and s._prepared is prepared


def test_a_failed_rebuild_leaves_the_scheduler_as_it_was():
    s = _scheduler()
    config, c_config, prepared = s.config, s._c_config, s._prepared
    bad = skrull.CostModel("h100")
    bad._c.gemm_efficiency = 1.5  # past the setter's checks: only the library refuses it
    with pytest.raises(skrull.ConfigError) as err:
        s._set_cost_model(bad._frozen_copy())
    assert err.value.status == "INVALID_COST_MODEL"
    assert (s.config, s._c_config, s._prepared) == (config, c_config, prepared)
    assert s.plan(_batch(1)).digest() == _scheduler().plan(_batch(1)).digest()


def test_the_setup_lives_in_the_schedulers_own_buffer():
    s = skrull.Scheduler(4, 8, 26624)
    buf, handle = s._prepared.buffer, s._prepared.handle
    start = ctypes.addressof(buf)
    assert len(buf) == _ffi.lib.skrull_setup_size()
    assert start <= ctypes.cast(handle, ctypes.c_void_p).value < start + len(buf)
    lengths = _lengths(256, 8 * 26624, 3)
    first = s.plan(lengths).digest()
    gc.collect()
    assert s.plan(lengths).digest() == first


def test_the_setup_is_never_pickled_and_an_unpickled_scheduler_prepares_its_own():
    s = skrull.Scheduler(2, 4, 8192, lockstep=True, cost_model="h200")
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(s._prepared)
    data = pickle.dumps(s)
    assert bytes(s._prepared.buffer) not in data
    back = pickle.loads(data)
    assert ctypes.addressof(back._prepared.buffer) != ctypes.addressof(s._prepared.buffer)
    lengths = _lengths(300, 4 * 8192, 5)
    for other in (back, copy.copy(s), copy.deepcopy(s)):
        assert other._prepared is not s._prepared
        assert other.plan(lengths).digest() == s.plan(lengths).digest()


def test_skrull_setup_init_reports_config_errors_with_details():
    # What a Scheduler relies on when it prepares: the same status and details as
    # skrull_config_check (and skrull_schedule) give for the configuration.
    s = skrull.Scheduler(2, 4, 4096)
    cfg = _ffi.skrull_config.from_buffer_copy(s._c_config)
    cfg.cp = 300
    with pytest.raises(skrull.ConfigError) as err:
        Prepared(cfg)
    assert (err.value.status, err.value.value, err.value.limit) == ("INVALID_CP", 300, 256)
