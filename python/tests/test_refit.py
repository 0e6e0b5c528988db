"""``Scheduler.observe`` and ``Scheduler.refit``: the shapes times come in, the errors bad ones
raise, the fit moving toward synthetic truth, determinism (same observations, same model bits
and plan digests), planning with the refitted model, and pickling with the refit state."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import skrull
from skrull import _ffi

DP, CP, BUCKET = 2, 4, 4096
# GEMM seconds per token of the H100 preset for Qwen2.5-0.5B (docs/cost_model.md: F_lin
# 2.964 GFLOP per token at 989.4 TFLOP/s x 0.41) and its fixed cost per micro-batch.
GEMM_S_PER_TOKEN = 2.964e9 / (989.4e12 * 0.41)
FIXED_S = 14.4e-3


def _scheduler(**kwargs) -> skrull.Scheduler:
    return skrull.Scheduler(DP, CP, BUCKET, lockstep=True, **kwargs)


def _batch(seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return rng.integers(64, 3 * BUCKET, 40).tolist()


def truth_times(plan: skrull.Plan, fixed: float, per_token: float) -> np.ndarray:
    """Synthetic measurements: ``fixed + per_token * tokens`` on every GPU of every
    micro-batch that holds sequences (NaN elsewhere: empty lockstep slots are ignored)."""
    out = np.full((plan.num_micro_batches, DP, CP), np.nan)
    for g, entry in enumerate(plan.micro_batch_table):
        out[entry["index"], entry["dp_rank"]] = fixed + per_token * plan.rank_tokens[g]
    return out


def _feed(s: skrull.Scheduler, steps: int, fixed: float = 2 * FIXED_S,
          per_token: float = 2 * GEMM_S_PER_TOKEN) -> list[skrull.Plan]:
    plans = []
    for k in range(steps):
        plan = s.plan(_batch(k))
        s.observe(plan, truth_times(plan, fixed, per_token))
        plans.append(plan)
    return plans


# ---- shapes --------------------------------------------------------------------------------

def test_times_as_an_array_a_torch_tensor_lists_or_a_per_gpu_mapping_are_the_same_step():
    torch = pytest.importorskip("torch")
    plan = _scheduler().plan(_batch(0))
    times = truth_times(plan, FIXED_S, GEMM_S_PER_TOKEN)
    per_gpu = {(d, r): times[:, d, r].tolist() for d in range(DP) for r in range(CP)}
    by_rank = {d * CP + r: times[:, d, r] for d in range(DP) for r in range(CP)}
    forms = [times, times.tolist(), torch.from_numpy(times), per_gpu, by_rank,
             times.astype(np.float32).astype(np.float64)]
    models = []
    for form in forms[:5]:
        s = _scheduler()
        s.observe(plan, form)
        models.append(s.refit().model)
    assert all(m == models[0] for m in models)


def test_a_mapping_without_some_gpus_counts_them_as_missing():
    s = _scheduler()
    plan = s.plan(_batch(0))
    times = truth_times(plan, FIXED_S, GEMM_S_PER_TOKEN)
    s.observe(plan, {(0, r): times[:, 0, r] for r in range(CP)})
    report = s.refit()
    assert report.steps == 1
    assert report.rows == int(np.isfinite(times[:, 0, :]).sum())


def test_bad_times_raise_named_errors():
    s = _scheduler()
    plan = s.plan(_batch(0))
    m = plan.num_micro_batches
    cases = [
        (np.ones((m + 1, DP, CP)), skrull.MeasurementError, "MEASUREMENT_MISMATCH"),
        (np.ones((m, DP * CP)), skrull.MeasurementError, "MEASUREMENT_MISMATCH"),
        (np.ones(3), skrull.MeasurementError, "MEASUREMENT_MISMATCH"),
        ({(DP, 0): [1.0] * m}, skrull.MeasurementError, "MEASUREMENT_MISMATCH"),
        ({(0, 0): [1.0] * (m + 1)}, skrull.MeasurementError, "MEASUREMENT_MISMATCH"),
        ({"gpu0": [1.0]}, skrull.ArgumentError, "INVALID_ARG"),
        (None, skrull.ArgumentError, "INVALID_ARG"),
        ("1.0", skrull.ArgumentError, "INVALID_ARG"),
        ([[["a"] * CP] * DP] * m, skrull.ArgumentError, "INVALID_ARG"),
        (np.ones((m, DP, CP), bool), skrull.ArgumentError, "INVALID_ARG"),
        ([[1.0, 2.0], [3.0]], skrull.ArgumentError, "INVALID_ARG"),
    ]
    for times, cls, status in cases:
        with pytest.raises(cls) as err:
            s.observe(plan, times)
        assert err.value.status == status and err.value.field_name == "times", times
    with pytest.raises(skrull.ArgumentError) as err:
        s.observe(plan.to_dict(), np.ones((m, DP, CP)))
    assert err.value.field_name == "plan"
    other = skrull.Scheduler(DP, CP, BUCKET // 2, lockstep=True).plan([100, 200])
    with pytest.raises(skrull.LayoutError) as err:
        s.observe(other, np.ones((other.num_micro_batches, DP, CP)))
    assert err.value.status == "PLAN_INVALID"
    assert s.refit().steps == 0  # nothing bad entered the window


def test_one_refit_pools_every_policys_plans_of_the_same_machine_and_layout():
    # One model per machine: a scheduler observes plans of another policy (and its options)
    # on the same layout, and fits the same model as one of that policy fed the same steps.
    s = _scheduler()
    other = skrull.Scheduler(DP, CP, BUCKET, policy="packed", max_micro_batches=0)
    mirror = skrull.Scheduler(DP, CP, BUCKET, policy="packed")
    for k in range(3):
        plan = other.plan(_batch(k))
        times = np.full((plan.num_micro_batches, DP, CP), 0.01 * (k + 1))
        s.observe(plan, times)
        mirror.observe(plan, times)
    assert s.refit().model == mirror.refit().model
    # What the refit times by still has to match: another padding is refused.
    padded = skrull.Scheduler(DP, CP, BUCKET, shard_padding="zigzag").plan(_batch(0))
    with pytest.raises(skrull.LayoutError):
        s.observe(padded, np.ones((padded.num_micro_batches, DP, CP)))


def test_nan_inf_zero_and_negative_times_are_skipped_and_counted():
    s = _scheduler()
    plan = s.plan(_batch(0))
    times = truth_times(plan, FIXED_S, GEMM_S_PER_TOKEN)
    real = np.argwhere(np.isfinite(times))
    for (m, d, r), bad in zip(real[:4], (np.nan, np.inf, 0.0, -1.0)):
        times[m, d, r] = bad
    s.observe(plan, times)
    report = s.refit()
    assert report.skipped == 4
    assert report.rows == len(real) - 4


def test_refit_settings_are_checked_and_named():
    for field, value in (("window", 0), ("window", _ffi.REFIT_MAX_WINDOW + 1),
                         ("forgetting", 0.0), ("forgetting", 1.5), ("ridge", -1.0),
                         ("ridge", float("inf")), ("outlier", 0.0)):
        with pytest.raises(skrull.ConfigError) as err:
            _scheduler(refit={field: value})
        assert err.value.status == "INVALID_REFIT_PARAMS" and err.value.field_name == field
    with pytest.raises(skrull.ArgumentError):
        _scheduler(refit={"window": 2.0})
    with pytest.raises(skrull.ArgumentError):
        _scheduler(refit=3)


def test_the_settings_defaults_are_the_librarys():
    params = _ffi.skrull_refit_params()
    assert _ffi.lib.skrull_refit_params_default(params, _ffi.ctypes.sizeof(params)) == 0
    ours = skrull.RefitSettings()._c_params(params.max_rows_per_step)
    assert bytes(ours) == bytes(params)


# ---- the fit -------------------------------------------------------------------------------

def test_the_model_moves_toward_the_truth():
    s = _scheduler()
    prior = s.cost_model
    _feed(s, 4)
    refit = s.refit()
    assert refit.changed and not refit.kept_prior
    assert refit.previous == prior and refit.model == s.cost_model != prior
    assert refit.error < refit.prior_error
    assert refit.coefficients["fixed"] > 1.1 and refit.coefficients["gemm"] > 1.1
    assert "fixed" in refit.moved and "gemm" in refit.moved
    assert refit.adopted and refit.verdict == "adopted"
    assert "refitted" in refit.describe() and "fit adopted" in refit.describe()


def test_times_near_the_prior_refit_near_it_and_within_the_trust_region():
    # The prior's fixed and GEMM costs without its attention (which the synthetic times
    # lack): refitted after every step, as a trainer does, every coefficient moves at most
    # `trust` times per refit beyond the window's uniform factor, and the GEMM stays put.
    s = _scheduler(refit={"trust": 1.5})
    before = dict.fromkeys(skrull.COEFFICIENTS, 1.0)
    before["sharded_sequence"] = 0.0
    for k in range(6):
        plan = s.plan(_batch(k))
        s.observe(plan, truth_times(plan, FIXED_S, GEMM_S_PER_TOKEN))
        refit = s.refit()
        for name in ("fixed", "gemm", "attention", "intra_bandwidth"):
            if refit.adopted and name not in refit.raised:
                ratio = refit.coefficients[name] / (before[name] * refit.scale)
                assert 1 / 1.5 - 1e-9 <= ratio <= 1.5 + 1e-9, (k, name, refit)
        before = refit.coefficients
    assert refit.error <= refit.prior_error
    assert abs(refit.coefficients["gemm"] - 1) < 0.2


def test_the_scheduler_plans_with_the_refitted_model():
    s = _scheduler()
    _feed(s, 4, fixed=20 * FIXED_S, per_token=0.2 * GEMM_S_PER_TOKEN)
    refit = s.refit()
    assert refit.changed
    again = _scheduler(cost_model=refit.model)
    for k in range(10, 14):
        assert s.plan(_batch(k)).digest() == again.plan(_batch(k)).digest()


def test_a_plan_made_before_a_refit_still_lays_out():
    s = _scheduler()
    plan = s.plan(_batch(0))
    before = plan.layout(0, 0, 0)
    _feed(s, 3)
    assert s.refit().changed
    fresh = pickle.loads(pickle.dumps(plan))
    for a, b in zip(plan.rank_layouts(1, 3), fresh.rank_layouts(1, 3), strict=True):
        assert np.array_equal(a.gather_index, b.gather_index) and a.tokens == b.tokens
    assert before.tokens == fresh.layout(0, 0, 0).tokens


def test_two_schedulers_fed_the_same_observations_agree_bit_for_bit():
    a, b = _scheduler(), _scheduler()
    for k in range(5):
        plan_a, plan_b = a.plan(_batch(k)), b.plan(_batch(k))
        assert plan_a.digest() == plan_b.digest()
        times = truth_times(plan_a, 3 * FIXED_S, 1.5 * GEMM_S_PER_TOKEN)
        a.observe(plan_a, times)
        b.observe(plan_b, times.copy())
        ra, rb = a.refit(), b.refit()
        assert bytes(ra.model._c) == bytes(rb.model._c)
        assert ra.coefficients == rb.coefficients and ra.error == rb.error


def test_the_window_keeps_the_last_steps_only():
    s = _scheduler(refit={"window": 2})
    _feed(s, 5)
    assert s.refit().steps == 2


def test_a_step_larger_than_the_state_grows_it_and_keeps_the_window():
    s = skrull.Scheduler(1, 8, 64, lockstep=True)
    small = s.plan([60] * 10)  # the state is sized for twice this step's times
    s.observe(small, np.full((small.num_micro_batches, 1, 8), 0.02))
    first = s._window.rows
    big = s.plan([60] * 600)
    assert big.num_micro_batches * 8 > first
    s.observe(big, np.full((big.num_micro_batches, 1, 8), 0.02))
    assert s._window.rows >= big.num_micro_batches * 8 > first
    assert s.refit().steps == 2


# ---- pickling ------------------------------------------------------------------------------

def test_a_scheduler_pickles_with_its_model_and_window():
    s = _scheduler(refit={"window": 3, "forgetting": 0.5})
    _feed(s, 4)
    s.refit()
    back = pickle.loads(pickle.dumps(s))
    assert back.cost_model == s.cost_model
    assert back._refit_settings == s._refit_settings
    ra, rb = s.refit(), back.refit()
    assert ra.model == rb.model and ra.steps == rb.steps == 3 and ra.error == rb.error
    assert s.plan(_batch(20)).digest() == back.plan(_batch(20)).digest()
    for k in (21, 22):  # both go on identically (the last fit, which anchors the next, too)
        pa, pb = s.plan(_batch(k)), back.plan(_batch(k))
        assert pa.digest() == pb.digest()
        times = truth_times(pa, 5 * FIXED_S, 0.5 * GEMM_S_PER_TOKEN)
        s.observe(pa, times)
        back.observe(pb, times)
        assert bytes(s.refit().model._c) == bytes(back.refit().model._c)


def test_a_plan_made_before_a_refit_pickles_with_its_own_model():
    s = _scheduler()
    plan = s.plan(_batch(0))
    _feed(s, 3)
    assert s.refit().changed
    back = pickle.loads(pickle.dumps(plan))
    assert back == plan and back.config.cost_model == plan.config.cost_model
    assert back._scheduler._window is None  # a plan does not carry the scheduler's window


def test_a_100x_straggler_is_dropped_and_barely_moves_the_fit():
    clean, noisy = _scheduler(), _scheduler()
    for k in range(3):
        plan = clean.plan(_batch(k))
        times = truth_times(plan, 2 * FIXED_S, 2 * GEMM_S_PER_TOKEN)
        clean.observe(plan, times)
        slow = times.copy()
        m, d, r = np.argwhere(np.isfinite(slow))[k]
        slow[m, d, r] *= 100
        noisy.observe(noisy.plan(_batch(k)), slow)
    rc, rn = clean.refit(), noisy.refit()
    assert rn.dropped >= 3 and rc.dropped == 0
    for name in ("fixed", "gemm"):
        assert abs(rn.coefficients[name] / rc.coefficients[name] - 1) < 0.05, name


# ---- the adoption rule's settings and report ----------------------------------------------

def test_version_2_settings_are_checked_named_and_reach_the_library():
    for field, value in (("trust", 0.5), ("trust", float("nan")), ("max_error", 0.0),
                         ("max_error", float("inf")), ("holdout", 1), ("holdout", 2000)):
        with pytest.raises(skrull.ConfigError) as err:
            _scheduler(refit={field: value})
        assert err.value.status == "INVALID_REFIT_PARAMS" and err.value.field_name == field
    with pytest.raises(skrull.ArgumentError):
        _scheduler(refit={"holdout": 3.0})
    ours = skrull.RefitSettings(trust=float("inf"), max_error=0.5, holdout=0)._c_params(64)
    assert (ours.trust, ours.max_error, ours.holdout) == (float("inf"), 0.5, 0)
    assert ours.struct_size == _ffi.REFIT_PARAMS_SIZE_V2 == _ffi.ctypes.sizeof(ours)


def test_the_report_round_trips_from_the_library():
    # Uniformly 3x the prior: a scale, reported as one, not adopted.
    s = _scheduler()
    for k in range(3):
        plan = s.plan(_batch(k))
        s.observe(plan, 3 * truth_times(plan, 2 * FIXED_S, 2 * GEMM_S_PER_TOKEN))
    first = s.refit()
    assert first.verdict in ("adopted", "scale-only", "not-better")
    assert first.heldout_rows > 0 and first.step_times == 0
    assert set(first.coefficients) == set(skrull.COEFFICIENTS)
    assert first.coefficients["sharded_sequence"] >= 0.0
    # Garbage: even the best fit stays above max_error; the model in use stays.
    g = _scheduler(refit={"max_error": 0.05})
    rng = np.random.default_rng(1)
    for k in range(3):
        plan = g.plan(_batch(k))
        times = truth_times(plan, FIXED_S, GEMM_S_PER_TOKEN)
        g.observe(plan, np.where(np.isfinite(times), rng.uniform(1e-3, 1.0, times.shape), times))
    r = g.refit()
    assert r.verdict == "high-error" and not r.adopted and not r.changed
    assert r.unlimited_error > 0.05 and "fit high-error" in r.describe()
    # The fields are the library's report, field by field.
    raw = g._window.solve(g.cost_model)[1]
    again = skrull._refit.report_to_refit(raw, g.cost_model, g.cost_model)
    assert again.scale == raw.scale and again.heldout_rows == raw.heldout_rows
    assert again.verdict == _ffi.REFIT_VERDICTS[raw.verdict]


def test_step_times_give_the_per_step_cost():
    s = _scheduler()
    for k in range(4):
        plan = s.plan(_batch(k))
        times = truth_times(plan, 2 * FIXED_S, 2 * GEMM_S_PER_TOKEN)
        # The slowest DP rank's sum of its micro-batches' slowest GPU (empty slots: 0).
        busy = np.where(np.isfinite(times), times, 0.0).max(axis=2).sum(axis=0).max()
        s.observe(plan, times, step_time=busy + 0.02)
    s.observe(s.plan(_batch(9)), truth_times(s.plan(_batch(9)), FIXED_S, GEMM_S_PER_TOKEN),
              step_time=float("nan"))
    r = s.refit()
    assert r.step_times == 4
    assert abs(r.iteration_fixed_s - 0.02) < 1e-9
    assert s.cost_model.iteration_fixed_s == r.iteration_fixed_s
    with pytest.raises(skrull.ArgumentError):
        s.observe(s.plan(_batch(1)), truth_times(s.plan(_batch(1)), FIXED_S, 1e-9),
                  step_time="1s")
    # Pickled and restored, the window replays its step times.
    back = pickle.loads(pickle.dumps(s))
    assert back.refit().iteration_fixed_s == s.refit().iteration_fixed_s
