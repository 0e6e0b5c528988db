//! Properties of every policy over random batches and configurations, checked by an
//! independent checker that trusts only the placements.

use quickcheck::{QuickCheck, TestResult};
use skrull_core::{Placement, Policy, plan};
use skrull_kit::OwnedBuffers;
use skrull_kit::cases::{Case, POLICIES, cases, with_policy};
use skrull_kit::check::independent_check;

fn plan_of(case: &Case, policy: Policy) -> Result<(Vec<Placement>, Vec<u32>), String> {
    let cfg = with_policy(&case.cfg, policy);
    let mut bufs = OwnedBuffers::for_batch(case.lengths.len(), &cfg);
    let plan = bufs
        .schedule(&cfg, &case.lengths)
        .map_err(|e| format!("{policy:?}: {e}"))?;
    independent_check(&cfg, &case.lengths, &plan).map_err(|e| format!("{policy:?}: {e}"))?;
    plan::check(&skrull_kit::setup_of(&cfg), &case.lengths, &plan)
        .map_err(|e| format!("{policy:?}: core check {e:?}"))?;
    Ok((
        plan.placements().to_vec(),
        plan.micro_batches_per_dp().to_vec(),
    ))
}

#[test]
fn every_policy_gives_a_valid_plan_for_every_valid_batch() {
    fn prop(case: Case) -> TestResult {
        for policy in POLICIES {
            if let Err(e) = plan_of(&case, policy) {
                return TestResult::error(e);
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(cases())
        .max_tests(cases() * 2)
        .quickcheck(prop as fn(Case) -> TestResult);
}

#[test]
fn same_input_same_plan() {
    fn prop(case: Case) -> TestResult {
        for policy in POLICIES {
            let a = plan_of(&case, policy);
            let b = plan_of(&case, policy);
            if a != b {
                return TestResult::error(format!("{policy:?} differs between calls"));
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(cases() / 4)
        .quickcheck(prop as fn(Case) -> TestResult);
}

/// With distinct lengths every Skrull decision depends only on the sorted order, so permuting
/// the input permutes the plan.
#[test]
fn skrull_plan_follows_a_permutation_of_distinct_lengths() {
    fn prop(case: Case, seed: u64) -> TestResult {
        let mut lengths = case.lengths.clone();
        lengths.sort_unstable();
        lengths.dedup();
        if lengths.len() < 2 {
            return TestResult::discard();
        }
        // A seeded shuffle (Fisher-Yates with SplitMix).
        let mut rng = skrull_kit::sample::Rng::new(seed);
        let mut perm: Vec<usize> = (0..lengths.len()).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let shuffled: Vec<u32> = perm.iter().map(|&i| lengths[i]).collect();
        let a = plan_of(
            &Case {
                cfg: case.cfg,
                lengths: lengths.clone(),
            },
            Policy::Skrull,
        );
        let b = plan_of(
            &Case {
                cfg: case.cfg,
                lengths: shuffled,
            },
            Policy::Skrull,
        );
        match (a, b) {
            (Ok((pa, ca)), Ok((pb, cb))) => {
                let unpermuted: Vec<Placement> = {
                    let mut v = vec![Placement::default(); pa.len()];
                    for (k, &i) in perm.iter().enumerate() {
                        v[i] = pb[k];
                    }
                    v
                };
                TestResult::from_bool(pa == unpermuted && ca == cb)
            }
            (a, b) => TestResult::error(format!("{a:?} / {b:?}")),
        }
    }
    QuickCheck::new()
        .tests(cases() / 4)
        .quickcheck(prop as fn(Case, u64) -> TestResult);
}

/// GDS never uses fewer micro-batches than the token total allows, and never more than the
/// rank's sequence count.
#[test]
fn skrull_micro_batch_counts_are_bounded() {
    fn prop(case: Case) -> TestResult {
        let cfg = case.cfg;
        let mut bufs = OwnedBuffers::for_batch(case.lengths.len(), &cfg);
        let Ok(plan) = bufs.schedule(&cfg, &case.lengths) else {
            return TestResult::failed();
        };
        let cap = u64::from(cfg.bucket) * u64::from(cfg.cp);
        for d in 0..cfg.dp {
            let mine: Vec<u32> = plan
                .placements()
                .iter()
                .zip(&case.lengths)
                .filter(|(p, _)| p.dp_rank == d)
                .map(|(_, &l)| l)
                .collect();
            // The micro-batches the rank's sequences use (with lockstep it may declare more,
            // empty ones; the independent checker covers that).
            let m = plan
                .placements()
                .iter()
                .filter(|p| p.dp_rank == d)
                .map(|p| u64::from(p.micro_batch) + 1)
                .max()
                .unwrap_or(0);
            let total: u64 = mine.iter().map(|&l| u64::from(l)).sum();
            if m < total.div_ceil(cap) || m > mine.len() as u64 {
                return TestResult::failed();
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(cases() / 4)
        .quickcheck(prop as fn(Case) -> TestResult);
}
