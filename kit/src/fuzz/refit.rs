//! The `refit` fuzz target: the online refit through the C ABI
//! (`skrull_refit_init/observe/solve`) from fuzz bytes. A configuration (DP, CP, model,
//! sub-groups) and refit parameters (any values, valid or not) are decoded; each step plans a
//! batch with `skrull_schedule()` on the current refitted model, then observes times decoded
//! from the bytes (NaN, infinities, zeros, negatives, huge, tiny, 100x stragglers) with at
//! most one malformation (a wrong count, too few micro-batches, a corrupted placement), and
//! solves. Two states fed the same calls must return byte-identical models; a refused call
//! must leave its outputs untouched; an accepted solve must return a model the library
//! accepts back (`skrull_cost_model` -> core) with finite coefficients; no call may panic.

use core::ffi::c_void;
use core::ptr::null_mut;

use skrull::{
    skrull_config, skrull_cost_model, skrull_refit_init, skrull_refit_observe,
    skrull_refit_observe_step_time, skrull_refit_params, skrull_refit_params_default,
    skrull_refit_report, skrull_refit_size, skrull_refit_solve, skrull_status,
};
use skrull_core::{Config, ModelShape, Policy};

use super::decode::Reader;
use crate::c_plan::OwnedCPlan;

/// The most steps one input runs.
const MAX_STEPS: usize = 4;
/// The most sequences of one step.
const MAX_N: usize = 24;

/// A time from one selector byte.
fn time(r: &mut Reader<'_>) -> f64 {
    match r.u8() {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => 0.0,
        4 => -1e-3,
        5 => 1e300,
        6 => 1e-300,
        7 => f64::from_bits(u64::from(r.u32()) << 32 | u64::from(r.u32())),
        b => 0.01 * (1.0 + f64::from(b) / 16.0) * if b > 250 { 100.0 } else { 1.0 },
    }
}

fn params(r: &mut Reader<'_>) -> skrull_refit_params {
    let mut p = skrull_refit_params {
        struct_size: 0,
        window_steps: 0,
        max_rows_per_step: 0,
        flags: 0,
        forgetting: 0.0,
        ridge: 0.0,
        outlier: 0.0,
        trust: 0.0,
        max_error: 0.0,
        holdout: 0,
        _reserved: 0,
    };
    // SAFETY: `p` is live and aligned.
    let st = unsafe { skrull_refit_params_default(&mut p, size_of::<skrull_refit_params>()) };
    assert_eq!(st, skrull_status::Ok);
    let sel = r.u8();
    if sel & 1 != 0 {
        p.window_steps = u32::from(r.u8() % 70);
    }
    if sel & 2 != 0 {
        p.max_rows_per_step = u32::from(r.u16() % 1024);
    }
    if sel & 4 != 0 {
        p.flags = u32::from(r.u8() % 3);
    }
    if sel & 8 != 0 {
        p.forgetting = [0.0, 0.5, 1.0, 1.5, f64::NAN][r.u8() as usize % 5];
    }
    if sel & 16 != 0 {
        p.ridge = [0.0, 1e-9, 1.0, -1.0, f64::INFINITY][r.u8() as usize % 5];
    }
    if sel & 32 != 0 {
        p.outlier = [1e-6, 0.1, 0.5, 100.0, 0.0][r.u8() as usize % 5];
    }
    if sel & 64 != 0 {
        p.trust = [0.5, 1.0, 1.5, f64::INFINITY, f64::NAN][r.u8() as usize % 5];
        p.holdout = [0, 1, 2, 3, 2000][r.u8() as usize % 5];
    }
    if sel & 128 != 0 {
        p.max_error = [0.0, 1e-3, 0.25, f64::INFINITY, -1.0][r.u8() as usize % 5];
    }
    p
}

/// One refit run from fuzz bytes; panics on a broken promise.
pub fn refit(data: &[u8]) {
    let mut r = Reader::new(data);
    let dp = 1 + u32::from(r.u8() % 3);
    let cp = [1, 2, 4, 8, 16][r.u8() as usize % 5];
    let model = if r.u8() & 1 == 0 {
        ModelShape::QWEN2_5_0_5B
    } else {
        ModelShape::QWEN2_5_7B
    };
    let mut core = Config::new(dp, cp, 4096, model).with_policy(Policy::Balanced);
    core.subgroups = r.u8() & 1 == 1;
    let cfg = skrull_config::from_core(&core);
    let p = params(&mut r);
    // SAFETY: `p` is a live params struct.
    let bytes = unsafe { skrull_refit_size(&p) };
    let states: Vec<Vec<u64>> = (0..2)
        .map(|_| vec![0u64; bytes.div_ceil(8).max(1)])
        .collect();
    let mut states = states;
    for s in &mut states {
        // SAFETY: live storage of `bytes` bytes (8-byte aligned), live params and config.
        let st = unsafe {
            skrull_refit_init(&p, &cfg, s.as_mut_ptr().cast::<c_void>(), bytes, null_mut())
        };
        if bytes == 0 {
            assert_ne!(st, skrull_status::Ok, "init with size 0 accepted");
            return;
        }
        assert_eq!(st, skrull_status::Ok, "init refused valid params: {p:?}");
    }
    let mut plan = OwnedCPlan::new(MAX_N, &core, 0);
    let mut current: Option<skrull_cost_model> = None;
    for _ in 0..MAX_STEPS {
        if r.remaining() == 0 {
            break;
        }
        let n = 1 + r.u8() as usize % MAX_N;
        let lengths: Vec<u32> = (0..n).map(|_| 1 + u32::from(r.u16()) % 12_000).collect();
        let mut c = cfg;
        c.cost_model = current
            .as_ref()
            .map_or(core::ptr::null(), |m| m as *const _);
        if plan.schedule(&c, &lengths) != skrull_status::Ok {
            continue;
        }
        let held = plan.plan();
        let mut placements = held.placements[..n].to_vec();
        let groups = held.cp_groups.map(|g| g[..n].to_vec());
        let mut n_mb = held.per_dp.iter().copied().max().unwrap_or(0);
        let mut count = n_mb as usize * (dp * cp) as usize;
        match r.u8() % 8 {
            0 => count += 1,
            1 => n_mb = n_mb.saturating_sub(1),
            2 => placements[0].dp_rank = dp,
            3 => placements[0].cp_rank = -2,
            _ => {}
        }
        let times: Vec<f64> = (0..count).map(|_| time(&mut r)).collect();
        let gp = groups.as_ref().map_or(core::ptr::null(), |g| g.as_ptr());
        let mut got = Vec::new();
        for s in &mut states {
            // SAFETY: every pointer is live for the count given.
            got.push(unsafe {
                skrull_refit_observe(
                    s.as_mut_ptr().cast::<c_void>(),
                    bytes,
                    lengths.as_ptr(),
                    n,
                    placements.as_ptr(),
                    gp,
                    n_mb,
                    times.as_ptr(),
                    times.len(),
                    null_mut(),
                )
            });
        }
        assert_eq!(got[0], got[1]);
        assert!(
            !matches!(got[0], skrull_status::Panic | skrull_status::Internal),
            "{got:?}"
        );
        // The step's wall time, sometimes: any value, before or after a first step.
        if r.u8().is_multiple_of(2) {
            let wall = time(&mut r);
            let mut st = Vec::new();
            for s in &mut states {
                // SAFETY: a live state of `bytes` bytes.
                st.push(unsafe {
                    skrull_refit_observe_step_time(
                        s.as_mut_ptr().cast::<c_void>(),
                        bytes,
                        wall,
                        null_mut(),
                    )
                });
            }
            assert_eq!(st[0], st[1]);
            assert!(
                matches!(
                    st[0],
                    skrull_status::Ok | skrull_status::MeasurementMismatch
                ),
                "{st:?}"
            );
        }
        current = Some(solve_both(&mut states, bytes));
    }
}

/// Solves both states; they must agree to the byte, and the model must read back.
fn solve_both(states: &mut [Vec<u64>], bytes: usize) -> skrull_cost_model {
    let mut out = Vec::new();
    for s in states.iter_mut() {
        let mut m = skrull_cost_model::from_core(&skrull_core::CostModel::H100_QWEN2_5_7B);
        m.struct_size = 0xAB;
        let mut rep = skrull_refit_report {
            struct_size: 0xCD,
            ..skrull_refit_report::default()
        };
        // SAFETY: live state and outputs of the sizes given.
        let st = unsafe {
            skrull_refit_solve(
                s.as_mut_ptr().cast::<c_void>(),
                bytes,
                &mut m,
                size_of::<skrull_cost_model>(),
                &mut rep,
                size_of::<skrull_refit_report>(),
                null_mut(),
            )
        };
        assert_eq!(st, skrull_status::Ok, "solve refused an initialised state");
        assert!(
            m.to_core().is_ok(),
            "refitted model does not read back: {m:?}"
        );
        assert!(rep.coefficients.iter().all(|c| c.is_finite()), "{rep:?}");
        assert!(
            rep.error_fit <= rep.error_prior || rep.kept_prior == 1,
            "{rep:?}"
        );
        out.push((m, rep));
    }
    assert_eq!(format!("{:?}", out[0]), format!("{:?}", out[1]));
    out[0].0
}
