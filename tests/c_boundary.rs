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

use core::ffi::c_void;
use std::sync::Barrier;

use quickcheck::{QuickCheck, TestResult};
use skrull::{
    skrull_config, skrull_micro_batch, skrull_placement, skrull_plan_buffers, skrull_plan_sizes,
    skrull_schedule, skrull_sizes, skrull_status, skrull_summary,
};
use skrull_core::Config;
use skrull_kit::c_check::{CPlan, check_c_plan};
use skrull_kit::cases::{Case, POLICIES, cases, with_policy};
use skrull_kit::fuzz::c_abi::{c_as_rust, rust_plan};

/// The output buffers and workspace of one C call, sized by `skrull_plan_sizes()` and
/// pre-filled with fixed patterns.
struct COut {
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
    workspace: Vec<u8>,
}

const FILL: u32 = 0xDEAD_BEEF;

impl COut {
    fn new(n: usize, cfg: &Config, ws_fill: u8) -> COut {
        let mut s = skrull_sizes::default();
        // SAFETY: `s` is a live, aligned skrull_sizes.
        let st = unsafe { skrull_plan_sizes(n, cfg.dp, cfg.cp, &mut s) };
        assert_eq!(st, skrull_status::Ok);
        COut {
            placements: vec![
                skrull_placement {
                    dp_rank: FILL,
                    micro_batch: FILL,
                    cp_rank: -7,
                    tokens_per_gpu: FILL,
                };
                s.placements
            ],
            micro_batches: vec![
                skrull_micro_batch {
                    dp_rank: FILL,
                    index: FILL,
                    first: FILL,
                    count: FILL,
                };
                s.micro_batches
            ],
            members: vec![FILL; s.members],
            rank_tokens: vec![FILL; s.rank_tokens],
            per_dp: vec![FILL; s.micro_batches_per_dp],
            summary: skrull_summary {
                total_tokens: u64::MAX,
                sequences: FILL,
                micro_batches: FILL,
                sharded: FILL,
                rollbacks: FILL,
                peak_rank_tokens: FILL,
                _reserved: FILL,
            },
            workspace: vec![ws_fill; s.workspace_bytes],
        }
    }

    /// Calls `skrull_schedule()` into these buffers.
    fn schedule(&mut self, cfg: &skrull_config, lengths: &[u32]) -> skrull_status {
        let out = skrull_plan_buffers {
            struct_size: size_of::<skrull_plan_buffers>() as u32,
            _reserved: 0,
            placements: self.placements.as_mut_ptr(),
            placements_len: self.placements.len(),
            micro_batches: self.micro_batches.as_mut_ptr(),
            micro_batches_len: self.micro_batches.len(),
            members: self.members.as_mut_ptr(),
            members_len: self.members.len(),
            rank_tokens: self.rank_tokens.as_mut_ptr(),
            rank_tokens_len: self.rank_tokens.len(),
            micro_batches_per_dp: self.per_dp.as_mut_ptr(),
            micro_batches_per_dp_len: self.per_dp.len(),
            summary: &mut self.summary,
            error: std::ptr::null_mut(),
        };
        // SAFETY: every pointer is valid for the length it is given, nothing overlaps.
        unsafe {
            skrull_schedule(
                cfg,
                lengths.as_ptr(),
                lengths.len(),
                self.workspace.as_mut_ptr().cast::<c_void>(),
                self.workspace.len(),
                &out,
            )
        }
    }

    fn plan(&self) -> CPlan<'_> {
        CPlan {
            placements: &self.placements,
            micro_batches: &self.micro_batches,
            members: &self.members,
            rank_tokens: &self.rank_tokens,
            per_dp: &self.per_dp,
            summary: &self.summary,
        }
    }

    /// Every output byte (written or not; the workspace excluded), little-endian field by
    /// field.
    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for p in &self.placements {
            for x in [p.dp_rank, p.micro_batch, p.cp_rank as u32, p.tokens_per_gpu] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        for m in &self.micro_batches {
            for x in [m.dp_rank, m.index, m.first, m.count] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        for x in self
            .members
            .iter()
            .chain(&self.rank_tokens)
            .chain(&self.per_dp)
        {
            b.extend_from_slice(&x.to_le_bytes());
        }
        let s = &self.summary;
        b.extend_from_slice(&s.total_tokens.to_le_bytes());
        for x in [
            s.sequences,
            s.micro_batches,
            s.sharded,
            s.rollbacks,
            s.peak_rank_tokens,
            s._reserved,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b
    }
}

/// The case's configuration under `policy`, as the C struct (asserting the translation
/// round-trips, so a policy the C ABI cannot name fails here).
fn c_config(case: &Case, policy: skrull_core::Policy) -> (Config, skrull_config) {
    let cfg = with_policy(&case.cfg, policy);
    let c = skrull_config::from_core(&cfg);
    assert_eq!(
        c.to_core(),
        Ok(cfg),
        "{policy:?} does not round-trip through skrull_config"
    );
    (cfg, c)
}

/// One C call for `case` under `policy`: valid, equal to the Rust API, and a second call
/// (with a differently dirtied workspace) gives identical bytes.
fn c_matches_rust(case: &Case, policy: skrull_core::Policy) -> Result<(), String> {
    let (cfg, c) = c_config(case, policy);
    let n = case.lengths.len();
    let mut a = COut::new(n, &cfg, 0xA5);
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
    let mut b = COut::new(n, &cfg, 0x5A);
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
        // One policy per case keeps 10,000 cases fast; `which` spreads them evenly.
        let policy = POLICIES[usize::from(which) % POLICIES.len()];
        match c_matches_rust(&case, policy) {
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
        let (cfg, c) = c_config(&case, policy);
        let n = case.lengths.len();
        let mut reference = COut::new(n, &cfg, 0);
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
                        let mut out = COut::new(n, &cfg, t.wrapping_mul(37));
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
