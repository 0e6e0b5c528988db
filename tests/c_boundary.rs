//! Properties at the C boundary: random configurations and batches
//! (`skrull_kit::cases::Case`, every policy) go through `skrull_schedule()` the way C calls it.
//! An independent checker validates the C plan from its placements; the plan equals the Rust
//! API's; a second call gives the same bytes; and 8 threads calling at once with separate
//! buffers all get the same bytes.
//!
//! Case counts: `QUICKCHECK_TESTS` (default 10,000) for the checker/equality/two-calls
//! property; the 8-thread property runs `QUICKCHECK_TESTS / 20` cases (500 by default), each
//! with 8 concurrent calls.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use std::sync::Barrier;

use quickcheck::{QuickCheck, TestResult};
use skrull::{skrull_config, skrull_status};
use skrull_core::Config;
use skrull_kit::c_check::check_c_plan;
use skrull_kit::c_plan::OwnedCPlan;
use skrull_kit::cases::{Case, POLICIES, cases, with_policy};
use skrull_kit::fuzz::c_abi::{c_as_rust, rust_plan};

/// The case's configuration under `policy`, with sub-groups as the case has them (on) or off,
/// as the C struct (asserting the translation round-trips, so a policy or option the C ABI
/// cannot name fails here).
fn c_config(case: &Case, policy: skrull_core::Policy, subgroups: bool) -> (Config, skrull_config) {
    let cfg = Config {
        subgroups: case.cfg.subgroups && subgroups,
        ..with_policy(&case.cfg, policy)
    };
    let c = skrull_config::from_core(&cfg);
    assert_eq!(
        c.to_core(),
        Ok(cfg),
        "{policy:?} does not round-trip through skrull_config"
    );
    (cfg, c)
}

/// One C call for `case` under `policy`: valid, equal to the Rust API (the groups included),
/// and a second call (with a differently dirtied workspace) gives identical bytes.
fn c_matches_rust(case: &Case, policy: skrull_core::Policy, subgroups: bool) -> Result<(), String> {
    let (cfg, c) = c_config(case, policy, subgroups);
    let n = case.lengths.len();
    let mut a = OwnedCPlan::new(n, &cfg, 0xA5);
    let st = a.schedule(&c, &case.lengths);
    if st != skrull_status::Ok {
        return Err(format!("{policy:?}: skrull_schedule returned {st:?}"));
    }
    check_c_plan(&cfg, &case.lengths, &a.plan()).map_err(|e| format!("{policy:?}: {e}"))?;
    let rust = rust_plan(&cfg, &case.lengths)
        .map_err(|e| format!("{policy:?}: Rust API failed with {e:?}"))?;
    if rust != c_as_rust(&a.plan(), cfg.cp as usize) {
        return Err(format!("{policy:?}: C plan differs from the Rust API's"));
    }
    let mut b = OwnedCPlan::new(n, &cfg, 0x5A);
    let st = b.schedule(&c, &case.lengths);
    if st != skrull_status::Ok || a.bytes() != b.bytes() {
        return Err(format!("{policy:?}: the second call differs ({st:?})"));
    }
    Ok(())
}

#[test]
#[cfg_attr(miri, ignore)]
fn c_plans_are_valid_equal_to_rust_and_repeatable() {
    fn prop(case: Case, which: u8) -> TestResult {
        // One policy per case keeps 10,000 cases fast; `which` spreads them evenly, and its
        // top bit turns sub-groups off for half of them.
        let policy = POLICIES[usize::from(which) % POLICIES.len()];
        match c_matches_rust(&case, policy, which & 0x80 == 0) {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(e),
        }
    }
    QuickCheck::new()
        .tests(cases())
        .max_tests(cases() * 2)
        .quickcheck(prop as fn(Case, u8) -> TestResult);
}

#[test]
#[cfg_attr(miri, ignore)]
fn eight_threads_at_once_get_identical_bytes() {
    fn prop(case: Case, which: u8) -> TestResult {
        let policy = POLICIES[usize::from(which) % POLICIES.len()];
        let (cfg, c) = c_config(&case, policy, which & 0x80 == 0);
        let n = case.lengths.len();
        let mut reference = OwnedCPlan::new(n, &cfg, 0);
        if reference.schedule(&c, &case.lengths) != skrull_status::Ok {
            return TestResult::error(format!("{policy:?}: reference call failed"));
        }
        let want = reference.bytes();
        let barrier = Barrier::new(8);
        // The configuration and lengths are shared; each thread has its own buffers.
        let results: Vec<(skrull_status, Vec<u8>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u8)
                .map(|t| {
                    let (c, lengths, barrier) = (&c, &case.lengths, &barrier);
                    s.spawn(move || {
                        let mut out = OwnedCPlan::new(n, &cfg, t.wrapping_mul(37));
                        barrier.wait();
                        let st = out.schedule(c, lengths);
                        (st, out.bytes())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (t, (st, bytes)) in results.iter().enumerate() {
            if *st != skrull_status::Ok || *bytes != want {
                return TestResult::error(format!("{policy:?}: thread {t} differs ({st:?})"));
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests((cases() / 20).max(1))
        .max_tests(cases())
        .quickcheck(prop as fn(Case, u8) -> TestResult);
}
