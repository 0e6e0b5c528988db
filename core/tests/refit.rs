//! The online refit (`skrull_core::model::refit`): its features reproduce the evaluator, it
//! recovers a truth model from exact and noisy measurements, and every bad-measurement case
//! of the online refit is a named regression test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is a test failure

use skrull_core::config::cost::Overlap;
use skrull_core::model::refit::features::Subset;
use skrull_core::model::refit::solve::predict;
use skrull_core::model::refit::{
    COEFFICIENTS, Coef, RefitError, RefitParams, RefitState, Row, Verdict,
};
use skrull_core::{Config, CostModel, ModelShape, Placement, Policy};
use skrull_kit::refit::{perturb, rank_times};
use skrull_kit::sample::{Dataset, Rng};
use skrull_kit::{OwnedBuffers, OwnedEval};

const K: u32 = 1024;

/// 7B, DP 2, CP 16 on 8-GPU nodes (rings cross nodes), or 0.5B DP 2 CP 8 (inside a node).
fn config(cross: bool) -> Config {
    let cfg = if cross {
        Config::new(2, 16, 13 * K, ModelShape::QWEN2_5_7B)
    } else {
        Config::new(2, 8, 26 * K, ModelShape::QWEN2_5_0_5B)
    };
    cfg.with_policy(Policy::Balanced)
}

fn batch(cfg: &Config, seed: u64, n: usize) -> Vec<u32> {
    Dataset::by_name("chatqa2")
        .unwrap()
        .batch(seed, n, cfg.cp * cfg.bucket)
}

/// The slower truth of the issue: GEMM efficiency 0.6... of the prior's 0.41 (faster GEMMs),
/// attention 1.3x slower, both bandwidths 4x lower, overlap of all attention.
fn truth(prior: &CostModel) -> CostModel {
    let mut t = *prior;
    t.gemm_efficiency = 0.6;
    t.attention = t.attention.slowed(1.3);
    t.intra_node_bandwidth /= 4.0;
    t.inter_node_bandwidth /= 4.0;
    t.overlap = Overlap::AllAttention;
    t
}

struct Run {
    cfg: Config,
    state: RefitState,
    rows: Vec<Row>,
    plans: OwnedBuffers,
    eval: OwnedEval,
}

impl Run {
    fn new(cfg: Config, params: RefitParams) -> Run {
        let state = RefitState::new(params, &cfg).unwrap();
        Run {
            cfg,
            state,
            rows: vec![Row::default(); params.rows_needed()],
            plans: OwnedBuffers::for_batch(0, &cfg),
            eval: OwnedEval::default(),
        }
    }

    /// Plans `lengths` with `model`, returns its placements and the times under `truth`.
    fn step(&mut self, model: &CostModel, truth: &CostModel, lengths: &[u32]) -> Step {
        let plan = self
            .plans
            .schedule(&self.cfg.with_cost(*model), lengths)
            .unwrap();
        let placements = plan.placements().to_vec();
        let (times, n_mb) = rank_times(
            &mut self.eval,
            &self.cfg.with_cost(*truth),
            lengths,
            &placements,
        )
        .unwrap();
        Step {
            placements,
            times,
            n_mb,
        }
    }

    fn observe(&mut self, lengths: &[u32], s: &Step) -> Result<u32, RefitError> {
        self.state
            .observe(&mut self.rows, lengths, &s.placements, s.n_mb, &s.times)
    }

    /// Iteration time of `model`'s plan of `lengths` under `truth`.
    fn true_time(&mut self, model: &CostModel, truth: &CostModel, lengths: &[u32]) -> f64 {
        let plan = self
            .plans
            .schedule(&self.cfg.with_cost(*model), lengths)
            .unwrap();
        let placements = plan.placements().to_vec();
        self.eval
            .evaluate(&self.cfg.with_cost(*truth), lengths, &placements)
            .unwrap()
            .report
            .iteration_time
    }
}

struct Step {
    placements: Vec<Placement>,
    times: Vec<f64>,
    n_mb: u32,
}

fn params() -> RefitParams {
    RefitParams {
        max_rows_per_step: 2048,
        ..RefitParams::default()
    }
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn features_reproduce_the_evaluator() {
    for cross in [false, true] {
        for overlap in [Overlap::LocalAttention, Overlap::AllAttention] {
            let mut cfg = config(cross);
            let mut prior = cfg.cost_model();
            prior.overlap = overlap;
            cfg = cfg.with_cost(prior);
            let mut run = Run::new(cfg, params());
            let lengths = batch(&cfg, 7, 48);
            let s = run.step(&prior, &prior, &lengths);
            assert_eq!(run.observe(&lengths, &s), Ok(0));
            let mut c = [1.0; COEFFICIENTS];
            c[Coef::ShardedSequence as usize] = 0.0;
            c[Coef::LastMicroBatch as usize] = 0.0;
            c[Coef::LocalSequence as usize] = 0.0;
            c[Coef::Overlap as usize] = if overlap == Overlap::AllAttention {
                1.0
            } else {
                0.0
            };
            assert_eq!(c, run.state.prior_coefs());
            let mut seen = 0;
            for (row, t) in run.rows.iter().zip(&s.times) {
                if row.used == 1 {
                    let (pred, _) = predict(&c, row);
                    assert!((pred / t - 1.0).abs() < 1e-9, "{pred} vs {t}");
                    seen += 1;
                }
            }
            assert_eq!(seen, s.times.iter().filter(|t| t.is_finite()).count());
            let r = run.state.solve(&run.rows).unwrap();
            assert!(r.report.error_prior < 1e-9, "{:?}", r.report);
            assert_eq!(r.report.rows, seen as u32);
        }
    }
}

/// Exact truth times: after a few steps (the first cannot be judged on held-out
/// micro-batches, and the trust region lets each coefficient move at most 2x per step) the
/// refitted model's error is that of exact data and its plan takes the truth's time within
/// 1 %.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn recovers_a_truth_model_from_exact_times() {
    let cfg = config(true);
    let prior = cfg.cost_model();
    let truth = truth(&prior);
    // A weak ridge: exact data, nothing to smooth (the default's pull toward the model in
    // use slows the steps down).
    let p = RefitParams {
        ridge: 1e-6,
        ..params()
    };
    let mut run = Run::new(cfg, p);
    let mut model = prior;
    let mut last = None;
    for step in 0..8 {
        let lengths = batch(&cfg, 100 + step, 40);
        let s = run.step(&model, &truth, &lengths);
        run.observe(&lengths, &s).unwrap();
        let r = run.state.solve(&run.rows).unwrap();
        model = r.model;
        last = Some(r.report);
    }
    let rep = last.unwrap();
    assert!(!rep.kept_prior && rep.error_fit < 0.01, "{rep:?}");
    assert_eq!(model.overlap, Overlap::AllAttention);
    let lengths = batch(&cfg, 999, 40);
    let ours = run.true_time(&model, &truth, &lengths);
    let oracle = run.true_time(&truth, &truth, &lengths);
    assert!(ours <= oracle * 1.01, "{ours} vs oracle {oracle}");
}

/// Same history, same bits: two states fed the same steps return identical models.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn the_refit_is_deterministic() {
    let cfg = config(false);
    let prior = cfg.cost_model();
    let truth = truth(&prior);
    let mut a = Run::new(cfg, params());
    let mut b = Run::new(cfg, params());
    let mut rng = Rng::new(5);
    for step in 0..3 {
        let lengths = batch(&cfg, step, 32);
        let mut s = a.step(&prior, &truth, &lengths);
        perturb(&mut s.times, cfg.cp as usize, &mut rng, 0.05, 50, 100.0);
        a.observe(&lengths, &s).unwrap();
        b.observe(&lengths, &s).unwrap();
    }
    let (ra, rb) = (
        a.state.solve(&a.rows).unwrap(),
        b.state.solve(&b.rows).unwrap(),
    );
    assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
    assert_eq!(
        ra.model.gemm_efficiency.to_bits(),
        rb.model.gemm_efficiency.to_bits()
    );
}

/// Feeds one step whose times `spoil` edits, then returns the report.
fn spoiled(spoil: impl Fn(&mut Vec<f64>)) -> (Result<u32, RefitError>, RefitState, Vec<Row>) {
    let cfg = config(false);
    let prior = cfg.cost_model();
    let mut run = Run::new(cfg, params());
    let lengths = batch(&cfg, 3, 160);
    let mut s = run.step(&prior, &truth(&prior), &lengths);
    spoil(&mut s.times);
    let r = run.observe(&lengths, &s);
    (r, run.state, run.rows)
}

fn first_measured(times: &[f64]) -> usize {
    times.iter().position(|t| t.is_finite()).unwrap()
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn nan_time_is_skipped_and_counted() {
    let (r, mut state, rows) = spoiled(|t| {
        let i = first_measured(t);
        t[i] = f64::NAN;
    });
    assert_eq!(r, Ok(1));
    let rep = state.solve(&rows).unwrap().report;
    assert_eq!(rep.skipped, 1);
    assert!(!rep.kept_prior && rep.error_fit.is_finite());
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn infinite_times_are_skipped_and_counted() {
    let (r, mut state, rows) = spoiled(|t| {
        let i = first_measured(t);
        t[i] = f64::INFINITY;
        t[i + 1] = f64::NEG_INFINITY;
    });
    assert_eq!(r, Ok(2));
    let fit = state.solve(&rows).unwrap();
    assert_eq!(fit.report.skipped, 2);
    assert_eq!(fit.model.validate(), Ok(()));
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn zero_and_negative_times_are_skipped() {
    let (r, mut state, rows) = spoiled(|t| {
        let i = first_measured(t);
        t[i] = 0.0;
        t[i + 1] = -1e-3;
        t[i + 2] = -0.0;
    });
    assert_eq!(r, Ok(3));
    assert_eq!(state.solve(&rows).unwrap().report.skipped, 3);
}

/// Every time invalid: nothing to fit, the prior comes back.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn all_times_invalid_keeps_the_prior() {
    let (r, mut state, rows) = spoiled(|t| t.iter_mut().for_each(|v| *v = f64::NAN));
    assert!(r.unwrap() > 0);
    let fit = state.solve(&rows).unwrap();
    assert!(fit.report.kept_prior);
    assert_eq!(fit.report.rows, 0);
    assert_eq!(fit.model, *state.prior());
}

/// A GPU that did not report (NaN for all its micro-batches) is a missing GPU: skipped.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn a_missing_gpu_is_skipped() {
    let cfg = config(false);
    let cp = cfg.cp as usize;
    let (r, mut state, rows) = spoiled(|t| {
        for (i, v) in t.iter_mut().enumerate() {
            if i % cp == 3 && v.is_finite() {
                *v = f64::NAN;
            }
        }
    });
    assert!(r.unwrap() > 0);
    let fit = state.solve(&rows).unwrap();
    assert!(!fit.report.kept_prior);
    assert!(fit.report.error_fit < 0.01, "{:?}", fit.report);
}

/// The window's best fit from the (rescaled) model in use, its error and what it drops.
fn robust_fit(state: &RefitState, rows: &[Row]) -> ([f64; COEFFICIENTS], f64, u32) {
    let (anchor, unit) = state.rescaled(rows, state.anchor());
    state.best_fit(rows, &anchor, unit, Subset::All)
}

/// A 100x straggler is dropped: the fit equals the fit without it to a percent.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn a_100x_straggler_is_dropped() {
    let clean = spoiled(|_| {});
    let slow = spoiled(|t| {
        let i = first_measured(t);
        t[i] *= 100.0;
    });
    let a = robust_fit(&clean.1, &clean.2);
    let b = robust_fit(&slow.1, &slow.2);
    assert_eq!(b.2, 1, "{b:?}");
    for (x, y) in a.0.iter().zip(&b.0) {
        assert!((x - y).abs() <= 1e-2 * x.abs().max(1e-2), "{a:?} vs {b:?}");
    }
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn times_of_the_wrong_count_are_a_mismatch() {
    let (r, _, _) = spoiled(|t| {
        t.pop();
    });
    assert!(matches!(r, Err(RefitError::Mismatch { .. })), "{r:?}");
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn a_plan_beyond_the_measured_micro_batches_is_a_mismatch() {
    let cfg = config(false);
    let prior = cfg.cost_model();
    let mut run = Run::new(cfg, params());
    let lengths = batch(&cfg, 3, 32);
    let s = run.step(&prior, &prior, &lengths);
    let per_mb = (cfg.dp * cfg.cp) as usize;
    let short = &s.times[..s.times.len() - per_mb];
    let r = run
        .state
        .observe(&mut run.rows, &lengths, &s.placements, s.n_mb - 1, short);
    assert!(matches!(r, Err(RefitError::Mismatch { .. })), "{r:?}");
    let r = run.state.observe(
        &mut run.rows,
        &lengths[1..],
        &s.placements,
        s.n_mb,
        &s.times,
    );
    assert!(matches!(r, Err(RefitError::Mismatch { .. })), "{r:?}");
    let mut bad = s.placements.clone();
    bad[0].dp_rank = cfg.dp;
    let r = run
        .state
        .observe(&mut run.rows, &lengths, &bad, s.n_mb, &s.times);
    assert_eq!(r, Err(RefitError::Plan { seq: 0 }));
    assert_eq!(run.state.steps(), 0, "a refused step changes nothing");
}

#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn a_step_larger_than_its_capacity_is_named() {
    let cfg = config(false);
    let prior = cfg.cost_model();
    let p = RefitParams {
        max_rows_per_step: 8,
        ..params()
    };
    let mut run = Run::new(cfg, p);
    let lengths = batch(&cfg, 3, 32);
    let s = run.step(&prior, &prior, &lengths);
    let r = run.observe(&lengths, &s);
    assert!(
        matches!(r, Err(RefitError::StepTooLarge { limit: 8, .. })),
        "{r:?}"
    );
    let small = vec![Row::default(); 3];
    assert!(matches!(
        run.state.solve(&small),
        Err(RefitError::Storage { .. })
    ));
}

#[test]
fn bad_parameters_are_named() {
    let cfg = config(false);
    for (p, field) in [
        (
            RefitParams {
                window_steps: 0,
                ..params()
            },
            "window_steps",
        ),
        (
            RefitParams {
                window_steps: 65,
                ..params()
            },
            "window_steps",
        ),
        (
            RefitParams {
                max_rows_per_step: 0,
                ..params()
            },
            "max_rows_per_step",
        ),
        (
            RefitParams {
                forgetting: 0.0,
                ..params()
            },
            "forgetting",
        ),
        (
            RefitParams {
                forgetting: f64::NAN,
                ..params()
            },
            "forgetting",
        ),
        (
            RefitParams {
                ridge: -1.0,
                ..params()
            },
            "ridge",
        ),
        (
            RefitParams {
                outlier: 0.0,
                ..params()
            },
            "outlier",
        ),
    ] {
        assert_eq!(RefitState::new(p, &cfg), Err(RefitError::Params { field }));
    }
}

/// Garbage times (uniform noise unrelated to the plan): the returned model is never worse
/// than the prior on the window, and always valid.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn never_worse_than_the_prior_on_garbage() {
    for seed in 0..4 {
        let (_, mut state, rows) = spoiled(|t| {
            let mut rng = Rng::new(seed);
            for v in t.iter_mut().filter(|v| v.is_finite()) {
                *v = 1e-3 + rng.unit() * 10.0;
            }
        });
        let fit = state.solve(&rows).unwrap();
        assert!(
            fit.report.error_fit <= fit.report.error_prior,
            "{:?}",
            fit.report
        );
        assert_eq!(fit.model.validate(), Ok(()));
        assert!(fit.report.coefficients.iter().all(|c| c.is_finite()));
    }
}

/// The window keeps `window_steps` steps: the oldest is evicted.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn the_window_evicts_the_oldest_step() {
    let cfg = config(false);
    let prior = cfg.cost_model();
    let p = RefitParams {
        window_steps: 2,
        ..params()
    };
    let mut run = Run::new(cfg, p);
    for step in 0..5 {
        let lengths = batch(&cfg, step, 32);
        let s = run.step(&prior, &prior, &lengths);
        run.observe(&lengths, &s).unwrap();
        let rep = run.state.solve(&run.rows).unwrap().report;
        assert_eq!(u64::from(rep.steps), (step + 1).min(2));
    }
}

/// The prior's coefficients with the given ones multiplied by `scale`.
fn scaled_coefs(state: &RefitState, scale: f64, which: &[Coef]) -> [f64; COEFFICIENTS] {
    let mut c = *state.anchor();
    for k in which {
        c[*k as usize] *= scale;
    }
    c
}

/// Replaces the times of the rows of window slot `slot` (`n` measurements) by `truth`'s
/// prediction with 5 % log-normal noise and one 100x straggler per 50 micro-batches.
fn synthetic_times(
    run: &mut Run,
    slot: usize,
    n: usize,
    truth: &[f64; COEFFICIENTS],
    rng: &mut Rng,
) {
    let cap = run.state.params().max_rows_per_step as usize;
    let block = &mut run.rows[slot * cap..slot * cap + n];
    let mut t: Vec<f64> = block
        .iter()
        .map(|r| {
            if r.used == 1 {
                predict(truth, r).0
            } else {
                f64::NAN
            }
        })
        .collect();
    perturb(&mut t, run.cfg.cp as usize, rng, 0.05, 50, 100.0);
    for (r, v) in block.iter_mut().zip(&t) {
        if r.used == 1 {
            r.time = *v;
        }
    }
}

/// Issue 23, second report: when every measured time is far from what the prior predicts
/// (0.01x to 100x; the fixed cost and the GEMMs scaled together, or every coefficient), the
/// fit used to drop every time as a straggler and keep the prior at every step. Now, after
/// 12 noisy steps (5 % noise, 100x stragglers): a uniform scale of every coefficient is found
/// and reported as a scale, not adopted as a model (the report's `scale` within 10 % of its
/// logarithm, the model in use kept: a uniform factor changes no plan), or, where a fit beat
/// the scaled model on a step, every coefficient is that scale; a scale of some
/// coefficients is fitted, within the trust region: the fit's error on the window is that
/// of the noise (within 10 %: the trust region is still bringing the unscaled coefficients
/// back from the uniform factor) and every scaled coefficient is nearer the truth than the
/// prior is.
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn a_truth_far_from_the_prior_is_fitted() {
    use Coef::*;
    let all = [
        Fixed,
        Gemm,
        Attention,
        IntraLatency,
        IntraBandwidth,
        InterLatency,
        InterBandwidth,
    ];
    for cross in [false, true] {
        let cfg = config(cross);
        let prior = cfg.cost_model();
        for scale in [0.01, 0.25, 50.0, 100.0] {
            for which in [&[Fixed, Gemm][..], &all[..]] {
                let mut run = Run::new(cfg, params());
                let truth_c = scaled_coefs(&run.state, scale, which);
                let mut rng = Rng::new(23);
                let mut model = prior;
                let mut last = None;
                // 12 steps: the trust region moves a coefficient at most 2x per step beyond
                // the window's uniform factor.
                for step in 0..12 {
                    let lengths = batch(&cfg, 300 + step, 48);
                    let s = run.step(&model, &prior, &lengths);
                    run.observe(&lengths, &s).unwrap();
                    synthetic_times(&mut run, step as usize, s.times.len(), &truth_c, &mut rng);
                    let r = run.state.solve(&run.rows).unwrap();
                    assert_eq!(r.model.validate(), Ok(()));
                    model = r.model;
                    last = Some(r.report);
                }
                let rep = last.unwrap();
                let what = format!("cross {cross} scale {scale} {which:?}: {rep:?}");
                if which.len() == all.len() {
                    // A scale, not a model: either reported as one (the model in use kept)
                    // or, where a fit beat the scaled model by its margin on a step, a model
                    // whose every coefficient is that scale; never a distorted one.
                    let near = |c: f64| (c / scale).ln().abs() < 0.1 * scale.ln().abs();
                    if rep.verdict == Verdict::ScaleOnly {
                        assert!(near(rep.scale), "{what}");
                    } else {
                        assert!(rep.error_fit < 0.07, "{what}");
                        for k in which {
                            assert!(near(rep.coefficients[*k as usize]), "{k:?} {what}");
                        }
                    }
                    continue;
                }
                assert!(!rep.kept_prior, "{what}");
                assert!(rep.error_fit < 0.1, "{what}");
                assert!(rep.dropped < rep.rows / 50, "{what}");
                for k in which {
                    let (c, t) = (rep.coefficients[*k as usize], truth_c[*k as usize]);
                    let (off, far) = ((c / t).ln().abs(), t.ln().abs());
                    assert!(off < far, "{k:?} {c} vs {t}, {what}");
                }
            }
        }
    }
}

/// The straggler test far from the prior: the same times scaled by 0.01 and by
/// 100 (a truth 100x off the prior), one of them 100x slower still: it alone is dropped, and
/// the fit equals the fit of the scaled times without it to a percent (and is deterministic).
#[test]
#[cfg_attr(miri, ignore)] // planning and fitting are slow under miri
fn a_100x_straggler_is_dropped_far_from_the_prior() {
    for scale in [0.01, 100.0] {
        let clean = spoiled(|t| t.iter_mut().for_each(|v| *v *= scale));
        let slow = spoiled(|t| {
            t.iter_mut().for_each(|v| *v *= scale);
            let i = first_measured(t);
            t[i] *= 100.0;
        });
        let a = robust_fit(&clean.1, &clean.2);
        let b = robust_fit(&slow.1, &slow.2);
        assert_eq!(b.2, 1, "{b:?}");
        // Same history, same bits, in the rescaled regime too.
        let again = spoiled(|t| t.iter_mut().for_each(|v| *v *= scale));
        let c = robust_fit(&again.1, &again.2);
        assert_eq!(format!("{a:?}"), format!("{c:?}"));
        // The straggler counts, clipped at `outlier`: 0.5 over the root of 80 rows.
        assert!(b.1 < 0.06, "{b:?}");
        for (k, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
            // The per-step cost's truth is 0 (the evaluator has none): a percent of its unit
            // in the window's scale.
            let floor = if k == Coef::LastMicroBatch as usize {
                scale
            } else {
                1e-2
            };
            assert!((x - y).abs() <= 1e-2 * x.abs().max(floor), "{a:?} vs {b:?}");
        }
    }
}
