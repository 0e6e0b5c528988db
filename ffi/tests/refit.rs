//! The refit through the C ABI: the same bits as the Rust API for the same steps, and every
//! status of `skrull_refit_*` with its details.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;
use core::ptr::{null, null_mut};

use skrull::*;
use skrull_core::model::refit::{RefitParams, RefitState, Row};
use skrull_core::{Config, ModelShape, Placement, Policy};

/// DP 2, CP 8, 0.5B, `balanced`, sub-groups on.
fn config() -> Config {
    Config::new(2, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B).with_policy(Policy::Balanced)
}

/// A plan of `lengths` through `skrull_schedule()`: placements, groups, micro-batch count.
fn schedule(
    cfg: &skrull_config,
    lengths: &[u32],
) -> (Vec<skrull_placement>, Vec<skrull_cp_group>, u32) {
    let n = lengths.len();
    let mut s = skrull_sizes::default();
    // SAFETY: `s` is a live, aligned skrull_sizes.
    assert_eq!(
        unsafe { skrull_plan_sizes(n, cfg.dp, cfg.cp, &mut s) },
        skrull_status::Ok
    );
    let mut placements = vec![skrull_placement::default(); s.placements];
    let mut mbs = vec![skrull_micro_batch::default(); s.micro_batches];
    let mut members = vec![0u32; s.members];
    let mut rank_tokens = vec![0u32; s.rank_tokens];
    let mut per_dp = vec![0u32; s.micro_batches_per_dp];
    let mut groups = vec![skrull_cp_group::default(); s.placements];
    let mut summary = skrull_summary::default();
    let out = skrull_plan_buffers {
        placements: placements.as_mut_ptr(),
        placements_len: placements.len(),
        micro_batches: mbs.as_mut_ptr(),
        micro_batches_len: mbs.len(),
        members: members.as_mut_ptr(),
        members_len: members.len(),
        rank_tokens: rank_tokens.as_mut_ptr(),
        rank_tokens_len: rank_tokens.len(),
        micro_batches_per_dp: per_dp.as_mut_ptr(),
        micro_batches_per_dp_len: per_dp.len(),
        summary: &mut summary,
        cp_groups: groups.as_mut_ptr(),
        cp_groups_len: groups.len(),
        ..skrull_plan_buffers::EMPTY
    };
    let mut ws = vec![0u8; s.workspace_bytes];
    // SAFETY: every pointer is a live Vec of the stated length.
    let st = unsafe {
        skrull_schedule(
            cfg,
            lengths.as_ptr(),
            n,
            ws.as_mut_ptr().cast::<c_void>(),
            ws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::Ok);
    let n_mb = per_dp.iter().copied().max().unwrap();
    (placements, groups, n_mb)
}

fn lengths(step: u32) -> Vec<u32> {
    (0..48u32)
        .map(|i| 200 + (i * 7919 + step * 104_729) % 30_000)
        .collect()
}

/// Plausible, varied "measurements".
fn times(n: usize, step: u32) -> Vec<f64> {
    (0..n)
        .map(|i| 0.05 + 0.001 * f64::from((i as u32 * 31 + step) % 17))
        .collect()
}

/// 8-byte aligned state storage.
fn storage(bytes: usize) -> Vec<u64> {
    vec![0u64; bytes.div_ceil(8)]
}

fn params() -> skrull_refit_params {
    let mut p = core::mem::MaybeUninit::<skrull_refit_params>::zeroed();
    // SAFETY: `p` is live, aligned and 40 bytes.
    let st =
        unsafe { skrull_refit_params_default(p.as_mut_ptr(), size_of::<skrull_refit_params>()) };
    assert_eq!(st, skrull_status::Ok);
    // SAFETY: written by the call (all fields plain data).
    let mut p = unsafe { p.assume_init() };
    p.max_rows_per_step = 512;
    p
}

/// `skrull_refit_solve` into a model and a report buffer of the given sizes.
///
/// # Safety
/// As `skrull_refit_solve`: a live state of `bytes`, and buffers valid for their sizes.
unsafe fn solve_sized(
    (state, bytes): (*mut c_void, usize),
    (model, model_size): (*mut skrull_cost_model, usize),
    (report, report_size): (*mut skrull_refit_report, usize),
) -> skrull_status {
    // SAFETY: forwarded caller contract.
    unsafe {
        skrull_refit_solve(
            state,
            bytes,
            model,
            model_size,
            report,
            report_size,
            null_mut(),
        )
    }
}

#[test]
fn c_and_rust_give_the_same_bits() {
    let cfg = config();
    let c_cfg = skrull_config::from_core(&cfg);
    let p = params();
    // SAFETY: `p` is a live params struct.
    let bytes = unsafe { skrull_refit_size(&p) };
    assert!(bytes > 0);
    let mut st = storage(bytes);
    let state = st.as_mut_ptr().cast::<c_void>();
    // SAFETY: live pointers of the stated sizes.
    let s = unsafe { skrull_refit_init(&p, &c_cfg, state, bytes, null_mut()) };
    assert_eq!(s, skrull_status::Ok);
    let rp = RefitParams {
        max_rows_per_step: 512,
        ..RefitParams::default()
    };
    let mut rust = RefitState::new(rp, &cfg).unwrap();
    let mut rows = vec![Row::default(); rp.rows_needed()];
    for step in 0..3 {
        let l = lengths(step);
        let (pl, groups, n_mb) = schedule(&c_cfg, &l);
        let t = times(n_mb as usize * 16, step);
        // SAFETY: live pointers of the stated sizes.
        let s = unsafe {
            skrull_refit_observe(
                state,
                bytes,
                l.as_ptr(),
                l.len(),
                pl.as_ptr(),
                groups.as_ptr(),
                n_mb,
                t.as_ptr(),
                t.len(),
                null_mut(),
            )
        };
        assert_eq!(s, skrull_status::Ok);
        let core_pl: Vec<Placement> = pl
            .iter()
            .zip(&groups)
            .map(|(c, g)| {
                let sub = c.cp_rank == SKRULL_SHARDED && g.size < cfg.cp;
                Placement {
                    dp_rank: c.dp_rank,
                    micro_batch: c.micro_batch,
                    cp_rank: c.cp_rank,
                    cp_first: if sub { g.first as u16 } else { 0 },
                    cp_size: if sub { g.size as u16 } else { 0 },
                }
            })
            .collect();
        rust.observe(&mut rows, &l, &core_pl, n_mb, &t).unwrap();
    }
    let mut model = skrull_cost_model::from_core(&cfg.cost_model());
    let mut report = skrull_refit_report::default();
    // SAFETY: live pointers of the stated sizes.
    let s = unsafe {
        skrull_refit_solve(
            state,
            bytes,
            &mut model,
            size_of::<skrull_cost_model>(),
            &mut report,
            size_of::<skrull_refit_report>(),
            null_mut(),
        )
    };
    assert_eq!(s, skrull_status::Ok);
    let fit = rust.solve(&rows).unwrap();
    let want = skrull_cost_model::from_core(&fit.model);
    assert_eq!(format!("{model:?}"), format!("{want:?}"));
    assert_eq!(report.rows, fit.report.rows);
    assert_eq!(report.steps, 3);
    assert_eq!(report.kept_prior, u32::from(fit.report.kept_prior));
    for (a, b) in report.coefficients.iter().zip(fit.report.coefficients) {
        assert_eq!(a.to_bits(), b.to_bits());
    }
}

#[test]
fn refit_statuses_and_details() {
    let cfg = config();
    let c_cfg = skrull_config::from_core(&cfg);
    let mut p = params();
    let mut info = skrull_error_info::of_status(skrull_status::Ok);
    // Bad params: the field's position in the details; size 0.
    p.forgetting = 2.0;
    // SAFETY: live pointers.
    assert_eq!(unsafe { skrull_refit_size(&p) }, 0);
    let good = params();
    // SAFETY: live pointers.
    let bytes = unsafe { skrull_refit_size(&good) };
    let mut st = storage(bytes);
    let state = st.as_mut_ptr().cast::<c_void>();
    // SAFETY: live pointers of the stated sizes.
    let s = unsafe { skrull_refit_init(&p, &c_cfg, state, bytes, &mut info) };
    assert_eq!((s, info.field), (skrull_status::InvalidRefitParams, 4));
    p = good;
    // SAFETY: as above.
    let s = unsafe { skrull_refit_init(&p, &c_cfg, state, bytes - 1, &mut info) };
    assert_eq!(s, skrull_status::WorkspaceTooSmall);
    // SAFETY: as above.
    let s = unsafe { skrull_refit_init(&p, &c_cfg, null_mut(), bytes, &mut info) };
    assert_eq!(s, skrull_status::NullArg);
    // Not initialised: zeros.
    let mut m = skrull_cost_model::from_core(&cfg.cost_model());
    let ms = size_of::<skrull_cost_model>();
    // SAFETY: as above.
    let s = unsafe { skrull_refit_solve(state, bytes, &mut m, ms, null_mut(), 0, &mut info) };
    assert_eq!(s, skrull_status::RefitStateInvalid);
    // SAFETY: as above.
    assert_eq!(
        unsafe { skrull_refit_init(&p, &c_cfg, state, bytes, &mut info) },
        skrull_status::Ok
    );
    // Empty window: the prior comes back.
    let mut rep = skrull_refit_report::default();
    let rs = size_of::<skrull_refit_report>();
    // SAFETY: as above.
    let s = unsafe { skrull_refit_solve(state, bytes, &mut m, ms, &mut rep, rs, &mut info) };
    assert_eq!((s, rep.kept_prior, rep.rows), (skrull_status::Ok, 1, 0));
    assert_eq!(m.to_core(), Ok(cfg.cost_model()));
    let v1 = skrull::SKRULL_COST_MODEL_SIZE_V1 as usize;
    // SAFETY: as above.
    let s = unsafe { skrull_refit_solve(state, bytes, &mut m, v1 - 8, null_mut(), 0, &mut info) };
    assert_eq!(s, skrull_status::BadStructSize);
    // A mismatch names what was given and what the plan needs.
    let l = lengths(0);
    let (pl, groups, n_mb) = schedule(&c_cfg, &l);
    let t = times(n_mb as usize * 16 + 1, 0);
    // SAFETY: as above.
    let s = unsafe {
        skrull_refit_observe(
            state,
            bytes,
            l.as_ptr(),
            l.len(),
            pl.as_ptr(),
            groups.as_ptr(),
            n_mb,
            t.as_ptr(),
            t.len(),
            &mut info,
        )
    };
    assert_eq!(s, skrull_status::MeasurementMismatch);
    assert_eq!(
        (info.value, info.limit),
        (t.len() as u64, t.len() as u64 - 1)
    );
    // Too few micro-batches for the plan.
    let short = times((n_mb as usize - 1) * 16, 0);
    // SAFETY: as above.
    let s = unsafe {
        skrull_refit_observe(
            state,
            bytes,
            l.as_ptr(),
            l.len(),
            pl.as_ptr(),
            groups.as_ptr(),
            n_mb - 1,
            short.as_ptr(),
            short.len(),
            &mut info,
        )
    };
    assert_eq!(s, skrull_status::MeasurementMismatch);
    // A placement out of range names the sequence.
    let mut bad = pl.clone();
    bad[5].dp_rank = 9;
    let t = times(n_mb as usize * 16, 0);
    // SAFETY: as above.
    let s = unsafe {
        skrull_refit_observe(
            state,
            bytes,
            l.as_ptr(),
            l.len(),
            bad.as_ptr(),
            groups.as_ptr(),
            n_mb,
            t.as_ptr(),
            t.len(),
            &mut info,
        )
    };
    assert_eq!((s, info.index), (skrull_status::PlanInvalid, 5));
    // The state overlapping an input is refused.
    // SAFETY: as above (the times alias the state's storage, readable).
    let s = unsafe {
        skrull_refit_observe(
            state,
            bytes,
            l.as_ptr(),
            l.len(),
            pl.as_ptr(),
            groups.as_ptr(),
            n_mb,
            state.cast::<f64>(),
            t.len(),
            &mut info,
        )
    };
    assert_eq!(s, skrull_status::InvalidArg);
    // Too large a step for the capacity.
    let mut small = params();
    small.max_rows_per_step = 8;
    // SAFETY: as above.
    let sb = unsafe { skrull_refit_size(&small) };
    let mut st2 = storage(sb);
    let state2 = st2.as_mut_ptr().cast::<c_void>();
    // SAFETY: as above.
    assert_eq!(
        unsafe { skrull_refit_init(&small, &c_cfg, state2, sb, null_mut()) },
        skrull_status::Ok
    );
    // SAFETY: as above.
    let s = unsafe {
        skrull_refit_observe(
            state2,
            sb,
            l.as_ptr(),
            l.len(),
            pl.as_ptr(),
            groups.as_ptr(),
            n_mb,
            t.as_ptr(),
            t.len(),
            &mut info,
        )
    };
    assert_eq!((s, info.limit), (skrull_status::RefitStepTooLarge, 8));
    // NULL groups: every sharded sequence spans the whole group (fine for a plan without
    // sub-groups); NULL times with a count are refused.
    // SAFETY: as above.
    let s = unsafe {
        skrull_refit_observe(
            state,
            bytes,
            l.as_ptr(),
            l.len(),
            pl.as_ptr(),
            null(),
            n_mb,
            null(),
            16,
            &mut info,
        )
    };
    assert_eq!(s, skrull_status::NullArg);
}

/// Version 2 of the refit structs through C: the report's appended fields equal the core
/// report's (verdict, adoption, bit sets, errors, the per-step cost from
/// `skrull_refit_observe_step_time()`, the ninth coefficient); a version-1 report buffer gets
/// the first 112 bytes only, a version-1 params struct the version-2 defaults; bad version-2
/// params are named; the step time needs a step first.
#[test]
fn version_2_fields_round_trip_through_c() {
    let cfg = config();
    let c_cfg = skrull_config::from_core(&cfg);
    let p = params();
    assert_eq!(p.struct_size, SKRULL_REFIT_PARAMS_SIZE_V2);
    assert_eq!((p.trust, p.max_error, p.holdout), (2.0, 0.25, 3));
    // A version-1 caller: the fields it lacks take the defaults.
    let mut v1 = p;
    v1.struct_size = SKRULL_REFIT_PARAMS_SIZE_V1;
    v1.trust = 0.0; // beyond its size: never read
    // SAFETY: live params structs.
    let (bytes, bytes_v1) = unsafe { (skrull_refit_size(&p), skrull_refit_size(&v1)) };
    assert_eq!(bytes, bytes_v1);
    let mut info = skrull_error_info::of_status(skrull_status::Ok);
    let mut bad = p;
    bad.trust = 0.5;
    let mut st = storage(bytes);
    let state = st.as_mut_ptr().cast::<c_void>();
    // SAFETY: live pointers of the stated sizes.
    let s = unsafe { skrull_refit_init(&bad, &c_cfg, state, bytes, &mut info) };
    assert_eq!((s, info.field), (skrull_status::InvalidRefitParams, 7));
    bad = p;
    bad.holdout = 1;
    // SAFETY: as above.
    let s = unsafe { skrull_refit_init(&bad, &c_cfg, state, bytes, &mut info) };
    assert_eq!((s, info.field), (skrull_status::InvalidRefitParams, 9));
    // SAFETY: as above.
    let s = unsafe { skrull_refit_init(&p, &c_cfg, state, bytes, null_mut()) };
    assert_eq!(s, skrull_status::Ok);
    // No step yet: the step time is a mismatch, and nothing changes.
    // SAFETY: a live state.
    let s = unsafe { skrull_refit_observe_step_time(state, bytes, 1.0, &mut info) };
    assert_eq!(s, skrull_status::MeasurementMismatch);
    let rp = RefitParams {
        max_rows_per_step: 512,
        ..RefitParams::default()
    };
    let mut rust = RefitState::new(rp, &cfg).unwrap();
    let mut rows = vec![Row::default(); rp.rows_needed()];
    for step in 0..4 {
        let l = lengths(step);
        let (pl, groups, n_mb) = schedule(&c_cfg, &l);
        let t = times(n_mb as usize * 16, step);
        // SAFETY: live pointers of the stated sizes.
        let s = unsafe {
            skrull_refit_observe(
                state,
                bytes,
                l.as_ptr(),
                l.len(),
                pl.as_ptr(),
                groups.as_ptr(),
                n_mb,
                t.as_ptr(),
                t.len(),
                null_mut(),
            )
        };
        assert_eq!(s, skrull_status::Ok);
        let wall = 1.0 + f64::from(step);
        // SAFETY: a live state.
        let s = unsafe { skrull_refit_observe_step_time(state, bytes, wall, null_mut()) };
        assert_eq!(s, skrull_status::Ok);
        let core_pl: Vec<Placement> = pl
            .iter()
            .zip(&groups)
            .map(|(c, g)| {
                let sub = c.cp_rank == SKRULL_SHARDED && g.size < cfg.cp;
                Placement {
                    dp_rank: c.dp_rank,
                    micro_batch: c.micro_batch,
                    cp_rank: c.cp_rank,
                    cp_first: if sub { g.first as u16 } else { 0 },
                    cp_size: if sub { g.size as u16 } else { 0 },
                }
            })
            .collect();
        rust.observe(&mut rows, &l, &core_pl, n_mb, &t).unwrap();
        rust.observe_step_time(wall).unwrap();
    }
    let fit = rust.fit(&rows).unwrap();
    let r = fit.report;
    let mut model = skrull_cost_model::from_core(&cfg.cost_model());
    let mut rep = skrull_refit_report::default();
    // SAFETY: live pointers of the stated sizes.
    let s = unsafe {
        solve_sized(
            (state, bytes),
            (&mut model, size_of::<skrull_cost_model>()),
            (&mut rep, size_of::<skrull_refit_report>()),
        )
    };
    assert_eq!(s, skrull_status::Ok);
    assert_eq!(rep.struct_size, SKRULL_REFIT_REPORT_SIZE_V3);
    assert_eq!(rep.adopted, u32::from(r.adopted));
    assert_eq!(rep.verdict, r.verdict as u32);
    assert_eq!((rep.limited, rep.raised), (r.limited, r.raised));
    assert_eq!((rep.heldout_rows, rep.step_times), (r.heldout_rows, 4));
    assert!(rep.heldout_rows > 0);
    for (a, b) in [
        (rep.scale, r.scale),
        (rep.error_heldout_in_use, r.error_heldout_in_use),
        (rep.error_heldout_fit, r.error_heldout_fit),
        (rep.error_unlimited, r.error_unlimited),
        (rep.iteration_fixed_s, r.iteration_fixed_s),
        (
            rep.coefficient_sharded_sequence,
            r.coefficients[SKRULL_REFIT_SHARDED_SEQUENCE as usize],
        ),
        (
            rep.coefficient_last_micro_batch,
            r.coefficients[SKRULL_REFIT_LAST_MICRO_BATCH as usize],
        ),
        (
            rep.coefficient_local_sequence,
            r.coefficients[SKRULL_REFIT_LOCAL_SEQUENCE as usize],
        ),
    ] {
        assert_eq!(a.to_bits(), b.to_bits());
    }
    assert!(rep.iteration_fixed_s > 0.0);
    assert_eq!(
        model.iteration_fixed_s.to_bits(),
        r.iteration_fixed_s.to_bits()
    );
    assert_eq!(
        model.sharded_sequence_s.to_bits(),
        fit.model.sharded_sequence_s.to_bits()
    );
    // A version-1 report buffer: 112 bytes written, the rest untouched.
    let mut old = skrull_refit_report {
        verdict: 0xDEAD,
        ..skrull_refit_report::default()
    };
    // SAFETY: live pointers; the report is larger than the size given.
    let s = unsafe {
        solve_sized(
            (state, bytes),
            (&mut model, SKRULL_COST_MODEL_SIZE_V1 as usize),
            (&mut old, SKRULL_REFIT_REPORT_SIZE_V1 as usize),
        )
    };
    assert_eq!(s, skrull_status::Ok);
    assert_eq!(old.struct_size, SKRULL_REFIT_REPORT_SIZE_V1);
    assert_eq!(old.verdict, 0xDEAD);
    assert_eq!(model.struct_size, SKRULL_COST_MODEL_SIZE_V1);
    // A version-2 report buffer: 184 bytes written, the appended coefficient untouched.
    let mut v2 = skrull_refit_report {
        coefficient_last_micro_batch: -7.0,
        ..skrull_refit_report::default()
    };
    // SAFETY: live pointers; the report is larger than the size given.
    let s = unsafe {
        solve_sized(
            (state, bytes),
            (&mut model, size_of::<skrull_cost_model>()),
            (&mut v2, SKRULL_REFIT_REPORT_SIZE_V2 as usize),
        )
    };
    assert_eq!(s, skrull_status::Ok);
    assert_eq!(v2.struct_size, SKRULL_REFIT_REPORT_SIZE_V2);
    assert_eq!(v2.coefficient_last_micro_batch, -7.0);
    assert_eq!(v2.step_times, 4);
}
