//! Properties of the cost model and evaluator over random batches, configurations and plans:
//! the evaluated time is never below the lower bound, whether the plan comes from a policy or
//! is drawn at random within the budget; a longer sequence never makes a plan cheaper; every
//! plan over BucketSize is flagged.

use std::collections::BTreeMap;

use quickcheck::{QuickCheck, TestResult};
use skrull_core::CostModel;
use skrull_core::config::cost::Overlap;
use skrull_core::plan::SHARDED;
use skrull_core::{Config, Placement};
use skrull_kit::cases::{Case, POLICIES, cases, with_policy};
use skrull_kit::sample::Rng;
use skrull_kit::{OwnedBuffers, OwnedEval};

/// Whether every sequence passes the core's up-front check, its shard within BucketSize (the
/// generator can draw a few that do not, e.g. zigzag padding with BucketSize 1, where a
/// one-token shard is padded to two; those cases are discarded).
fn feasible(case: &Case) -> bool {
    let c = case.cfg.bucket;
    case.lengths.iter().all(|&s| case.cfg.shard_tokens(s) <= c)
}

fn costs(cfg: &Config) -> [CostModel; 4] {
    let h100 = CostModel::h100(&cfg.model);
    let mut all = h100;
    all.overlap = Overlap::AllAttention;
    let mut odd = CostModel::h200(&cfg.model);
    odd.iteration_fixed_s = 0.01;
    odd.micro_batch_extra_s = 0.002;
    odd.gpus_per_node = 2;
    [h100, all, odd, per_sequence(cfg)]
}

/// The H100 preset with a fixed cost per sharded sequence (5 ms, what the CPU executor paid)
/// and per step.
fn per_sequence(cfg: &Config) -> CostModel {
    let mut c = CostModel::h100(&cfg.model);
    c.sharded_sequence_s = 0.005;
    c.iteration_fixed_s = 0.02;
    c
}

/// A random plan that respects the budget: each sequence, in a random order, goes to a random
/// DP rank and a random open micro-batch there (or a new one), local on a random CP rank if it
/// fits, else sharded if it fits, else into a new micro-batch.
fn random_plan(cfg: &Config, lengths: &[u32], seed: u64) -> Vec<Placement> {
    let mut rng = Rng::new(seed);
    let (dp, cp, c) = (cfg.dp as u64, cfg.cp as usize, u64::from(cfg.bucket));
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut mbs: BTreeMap<u32, Vec<Vec<u64>>> = BTreeMap::new();
    let mut out = vec![Placement::default(); lengths.len()];
    for s in order {
        let len = u64::from(cfg.local_tokens(lengths[s]));
        let share = u64::from(cfg.shard_tokens(lengths[s]));
        let d = rng.below(dp) as u32;
        let list = mbs.entry(d).or_default();
        let pick = rng.below(list.len() as u64 + 1) as usize;
        let r = rng.below(cp as u64) as usize;
        let prefer_sharded = rng.below(3) == 0;
        // Local on r or sharded, in the preferred order, whichever fits first.
        let place = |tokens: &mut Vec<u64>| -> Option<i32> {
            for sharded in [prefer_sharded, !prefer_sharded] {
                if sharded && tokens.iter().all(|&t| t + share <= c) {
                    tokens.iter_mut().for_each(|t| *t += share);
                    return Some(SHARDED);
                }
                if !sharded && tokens[r] + len <= c {
                    tokens[r] += len;
                    return Some(r as i32);
                }
            }
            None
        };
        let chosen = list
            .get_mut(pick)
            .and_then(|tokens| place(tokens).map(|p| (pick, p)));
        let (mb, cp_rank) = match chosen {
            Some(x) => x,
            None => {
                // Every sequence fits alone, local or sharded (the Case guarantees it).
                let mut tokens = vec![0u64; cp];
                let p = place(&mut tokens).unwrap_or(SHARDED);
                list.push(tokens);
                (list.len() - 1, p)
            }
        };
        out[s] = Placement {
            dp_rank: d,
            micro_batch: mb as u32,
            cp_rank,
            ..Placement::default()
        };
    }
    out
}

fn check(cfg: &Config, lengths: &[u32], placements: &[Placement], who: &str) -> Result<(), String> {
    let mut ev = OwnedEval::default();
    for cost in costs(cfg) {
        let e = ev
            .evaluate(&cfg.with_cost(cost), lengths, placements)
            .map_err(|e| format!("{who}: {e}"))?;
        let r = e.report;
        if !r.within_budget() {
            return Err(format!(
                "{who}: a budget-respecting plan was flagged: {r:?}"
            ));
        }
        let (t, lb) = (r.iteration_time, r.lower_bound.value);
        if t.is_nan() || lb.is_nan() || t < lb {
            return Err(format!(
                "{who}: time {} below the lower bound {:?} ({:?})",
                r.iteration_time, r.lower_bound, cost.overlap
            ));
        }
        let slowest = e.dp_times.iter().copied().fold(0.0, f64::max);
        if (slowest + cost.iteration_fixed_s - r.iteration_time).abs() > 1e-12 * r.iteration_time {
            return Err(format!("{who}: iteration time is not the slowest DP rank"));
        }
    }
    Ok(())
}

#[test]
fn evaluated_time_is_never_below_the_lower_bound_for_any_policy() {
    fn prop(case: Case) -> TestResult {
        if !feasible(&case) {
            return TestResult::discard();
        }
        // Planned on the configuration's model, and on one that prices sharded sequences.
        let planned = [case.cfg, case.cfg.with_cost(per_sequence(&case.cfg))];
        for policy in POLICIES {
            for base in &planned {
                let cfg = with_policy(base, policy);
                let mut bufs = OwnedBuffers::for_batch(case.lengths.len(), &cfg);
                let plan = match bufs.schedule(&cfg, &case.lengths) {
                    Ok(p) => p,
                    Err(e) => return TestResult::error(format!("{policy:?}: {e}")),
                };
                if let Err(e) = check(&cfg, &case.lengths, plan.placements(), policy.name()) {
                    return TestResult::error(e);
                }
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(cases() / 4)
        .quickcheck(prop as fn(Case) -> TestResult);
}

#[test]
fn evaluated_time_is_never_below_the_lower_bound_for_random_plans() {
    fn prop(case: Case, seed: u64) -> TestResult {
        if !feasible(&case) {
            return TestResult::discard();
        }
        let placements = random_plan(&case.cfg, &case.lengths, seed);
        match check(&case.cfg, &case.lengths, &placements, "random plan") {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(e),
        }
    }
    QuickCheck::new()
        .tests(cases() / 4)
        .quickcheck(prop as fn(Case, u64) -> TestResult);
}

#[test]
fn a_longer_sequence_never_makes_a_plan_cheaper() {
    fn prop(case: Case, seed: u64, pick: usize, extra: u16) -> TestResult {
        if case.lengths.is_empty() || !feasible(&case) {
            return TestResult::discard();
        }
        let placements = random_plan(&case.cfg, &case.lengths, seed);
        let mut longer = case.lengths.clone();
        let s = pick % longer.len();
        longer[s] = longer[s].saturating_add(u32::from(extra) + 1).min(1 << 30);
        let mut ev = OwnedEval::default();
        for cost in costs(&case.cfg) {
            let a = ev
                .evaluate(&case.cfg.with_cost(cost), &case.lengths, &placements)
                .map(|e| e.report.iteration_time);
            let b = ev
                .evaluate(&case.cfg.with_cost(cost), &longer, &placements)
                .map(|e| e.report.iteration_time);
            match (a, b) {
                (Ok(a), Ok(b)) if b >= a => {}
                (a, b) => return TestResult::error(format!("{a:?} then {b:?} for seq {s}")),
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(cases() / 4)
        .quickcheck(prop as fn(Case, u64, usize, u16) -> TestResult);
}

#[test]
fn every_plan_over_budget_is_flagged() {
    fn prop(case: Case, seed: u64, pick: usize) -> TestResult {
        if case.lengths.is_empty() || !feasible(&case) {
            return TestResult::discard();
        }
        // Put one sequence whole on CP rank 0 beside a copy of the budget's worth: over C.
        let mut placements = random_plan(&case.cfg, &case.lengths, seed);
        let s = pick % case.lengths.len();
        let mut lengths = case.lengths.clone();
        lengths.push(case.cfg.bucket);
        let p = Placement {
            cp_rank: 0,
            ..placements[s]
        };
        placements[s] = p;
        placements.push(p);
        let mut ev = OwnedEval::default();
        match ev.evaluate(&case.cfg, &lengths, &placements) {
            Ok(e) if !e.report.within_budget() && e.report.first_over_budget.is_some() => {
                TestResult::passed()
            }
            other => TestResult::error(format!("not flagged: {other:?}")),
        }
    }
    QuickCheck::new()
        .tests(cases() / 10)
        .quickcheck(prop as fn(Case, u64, usize) -> TestResult);
}
