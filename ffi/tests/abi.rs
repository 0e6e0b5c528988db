//! The C ABI called the way C calls it (raw pointers, caller buffers): the plan equals the
//! core's, every status is reachable, and outputs are untouched on every error.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;
use core::ptr::{null, null_mut};
use std::ffi::CStr;

use skrull::*;

/// Buffers a C caller would allocate for one batch, pre-filled with guard values.
struct Outs {
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
    workspace: Vec<u8>,
}

const GUARD_P: skrull_placement = skrull_placement {
    dp_rank: 0xDEAD_BEEF,
    micro_batch: 0xDEAD_BEEF,
    cp_rank: -7,
    tokens_per_gpu: 0xDEAD_BEEF,
};
const GUARD_MB: skrull_micro_batch = skrull_micro_batch {
    dp_rank: 0xDEAD_BEEF,
    index: 0xDEAD_BEEF,
    first: 0xDEAD_BEEF,
    count: 0xDEAD_BEEF,
};
const GUARD_SUMMARY: skrull_summary = skrull_summary {
    total_tokens: 0xDEAD_BEEF_DEAD_BEEF,
    sequences: 0xDEAD_BEEF,
    micro_batches: 0xDEAD_BEEF,
    sharded: 0xDEAD_BEEF,
    rollbacks: 0xDEAD_BEEF,
    peak_rank_tokens: 0xDEAD_BEEF,
    _reserved: 0xDEAD_BEEF,
};

impl Outs {
    fn new(n: usize, dp: u32, cp: u32) -> Outs {
        let mut s = skrull_sizes::default();
        // SAFETY: `s` is a live, aligned skrull_sizes.
        assert_eq!(
            unsafe { skrull_plan_sizes(n, dp, cp, &mut s) },
            skrull_status::Ok
        );
        Outs {
            placements: vec![GUARD_P; s.placements],
            micro_batches: vec![GUARD_MB; s.micro_batches],
            members: vec![0xDEAD_BEEF; s.members],
            rank_tokens: vec![0xDEAD_BEEF; s.rank_tokens],
            per_dp: vec![0xDEAD_BEEF; s.micro_batches_per_dp],
            summary: GUARD_SUMMARY,
            workspace: vec![0xA5; s.workspace_bytes],
        }
    }

    fn buffers(&mut self) -> skrull_plan_buffers {
        skrull_plan_buffers {
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
            ..skrull_plan_buffers::EMPTY
        }
    }

    fn schedule(&mut self, cfg: &skrull_config, lengths: &[u32]) -> skrull_status {
        let b = self.buffers();
        // SAFETY: every pointer comes from a live Vec or field of `self` with its true length.
        unsafe {
            skrull_schedule(
                cfg,
                lengths.as_ptr(),
                lengths.len(),
                self.workspace.as_mut_ptr().cast::<c_void>(),
                self.workspace.len(),
                &b,
            )
        }
    }

    fn untouched(&self) -> bool {
        self.placements.iter().all(|p| *p == GUARD_P)
            && self.micro_batches.iter().all(|m| *m == GUARD_MB)
            && self.members.iter().all(|&m| m == 0xDEAD_BEEF)
            && self.rank_tokens.iter().all(|&m| m == 0xDEAD_BEEF)
            && self.per_dp.iter().all(|&m| m == 0xDEAD_BEEF)
            && self.summary == GUARD_SUMMARY
    }
}

fn config(dp: u32, cp: u32, bucket: u32) -> skrull_config {
    let mut c = std::mem::MaybeUninit::<skrull_config>::uninit();
    // SAFETY: `c` is writable and aligned; on OK it is fully initialised.
    unsafe {
        assert_eq!(
            skrull_config_init(c.as_mut_ptr(), size_of::<skrull_config>()),
            skrull_status::Ok
        );
        let mut c = c.assume_init();
        (c.dp, c.cp, c.bucket_tokens) = (dp, cp, bucket);
        c
    }
}

/// A long-tailed batch from a fixed-seed generator (kit's SplitMix64).
fn batch(seed: u64, n: usize, max: u32) -> Vec<u32> {
    let mut rng = skrull_kit::sample::Rng::new(seed);
    (0..n)
        .map(|_| {
            let z = rng.next_u64();
            let r = (z % 1000) as u32;
            let len = if r < 700 {
                50 + (z >> 20) as u32 % 1000
            } else if r < 950 {
                1000 + (z >> 20) as u32 % 7000
            } else {
                8000 + (z >> 20) as u32 % 120_000
            };
            len.min(max)
        })
        .collect()
}

/// The core's plan for the same input, through the Rust API.
fn assert_same_as_core(cfg: &skrull_config, lengths: &[u32], outs: &Outs) {
    let core = cfg.to_core().unwrap();
    let n = lengths.len();
    let setup = skrull_core::Setup::single_use(&core).unwrap();
    let mut bufs = skrull_core::OwnedBuffers::new();
    let plan = bufs.schedule(&setup, lengths).unwrap();
    assert!(skrull_core::plan::check(&setup, lengths, &plan).is_ok());
    for (i, (c, p)) in outs.placements.iter().zip(plan.placements()).enumerate() {
        let share = if p.is_sharded() {
            core.shard_tokens(lengths[i])
        } else {
            lengths[i]
        };
        assert_eq!(
            (c.dp_rank, c.micro_batch, c.cp_rank, c.tokens_per_gpu),
            (p.dp_rank, p.micro_batch, p.cp_rank, share),
            "placement {i}"
        );
    }
    let g = plan.micro_batches().len();
    for (c, m) in outs.micro_batches.iter().zip(plan.micro_batches()) {
        assert_eq!(
            (c.dp_rank, c.index, c.first, c.count),
            (m.dp_rank, m.index, m.first, m.count)
        );
    }
    assert!(outs.micro_batches[g..].iter().all(|m| *m == GUARD_MB));
    assert_eq!(&outs.members[..n], plan.members());
    let cp = core.cp as usize;
    for k in 0..g {
        assert_eq!(&outs.rank_tokens[k * cp..(k + 1) * cp], plan.rank_tokens(k));
    }
    assert!(outs.rank_tokens[g * cp..].iter().all(|&t| t == 0xDEAD_BEEF));
    assert_eq!(&outs.per_dp[..], plan.micro_batches_per_dp());
    let s = plan.summary();
    assert_eq!(
        outs.summary,
        skrull_summary {
            total_tokens: s.total_tokens,
            sequences: n as u32,
            micro_batches: s.micro_batches,
            sharded: s.sharded,
            rollbacks: s.rollbacks,
            peak_rank_tokens: s.peak_rank_tokens,
            _reserved: 0,
        }
    );
}

#[test]
#[cfg_attr(miri, ignore = "slow under miri; the small cases cover the same code")]
fn plan_equals_the_core_plan_for_every_policy_and_option() {
    for (seed, n, dp, cp, bucket) in [
        (1, 256, 4, 8, 26 * 1024),
        (2, 40, 2, 16, 13 * 1024),
        (3, 3, 4, 8, 26 * 1024),
        (4, 1, 1, 1, 200_000),
        (5, 0, 3, 2, 100),
        (6, 97, 5, 3, 50_000),
    ] {
        let max = cp * bucket;
        let lengths = batch(seed, n, max);
        for policy in 0..4 {
            for (victim, flops, padding) in [(0, 0, 0), (1, 1, 1)] {
                let mut cfg = config(dp, cp, bucket);
                (cfg.policy, cfg.victim, cfg.flops) = (policy, victim, flops);
                cfg.shard_padding = padding;
                if padding == 1 {
                    // Zigzag can cost one token more per shard: keep every sequence feasible.
                    cfg.bucket_tokens += 1;
                }
                let mut outs = Outs::new(n, dp, cp);
                assert_eq!(outs.schedule(&cfg, &lengths), skrull_status::Ok);
                assert_same_as_core(&cfg, &lengths, &outs);
            }
        }
    }
}

#[test]
fn known_plan_of_the_readme_batch() {
    // DP 2, CP 4, BucketSize 24, Qwen2.5-0.5B, skrull policy (the core's crate example).
    let lengths = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];
    let cfg = config(2, 4, 24);
    let mut outs = Outs::new(lengths.len(), 2, 4);
    assert_eq!(outs.schedule(&cfg, &lengths), skrull_status::Ok);
    assert_same_as_core(&cfg, &lengths, &outs);
    assert_eq!(outs.summary.total_tokens, 76);
    assert_eq!(outs.summary.sequences, 10);
    assert!(outs.summary.peak_rank_tokens <= 24);
}

#[test]
#[cfg_attr(miri, ignore = "slow under miri; the small cases cover the same code")]
fn misaligned_workspace_gives_the_same_plan() {
    let lengths = batch(9, 64, 8 * 4096);
    let cfg = config(4, 8, 4096);
    let mut a = Outs::new(64, 4, 8);
    assert_eq!(a.schedule(&cfg, &lengths), skrull_status::Ok);
    for shift in 1..16 {
        let mut b = Outs::new(64, 4, 8);
        let size = b.workspace.len();
        let mut big = vec![0u8; size + shift];
        let bufs = b.buffers();
        // SAFETY: `big[shift..]` holds `size` writable bytes; the other pointers are live.
        let s = unsafe {
            skrull_schedule(
                &cfg,
                lengths.as_ptr(),
                lengths.len(),
                big.as_mut_ptr().add(shift).cast(),
                size,
                &bufs,
            )
        };
        assert_eq!(s, skrull_status::Ok);
        assert_eq!(a.placements, b.placements);
        assert_eq!(a.summary, b.summary);
    }
}

/// Calls `skrull_schedule` after `edit` changed the arguments; asserts `want` and that no
/// output was touched.
fn expect_status(
    want: skrull_status,
    lengths: &[u32],
    edit: impl FnOnce(&mut skrull_config, &mut skrull_plan_buffers, &mut usize, &mut usize),
) {
    let mut cfg = config(2, 4, 24);
    // Too many sequences is reported before any buffer is looked at: small buffers suffice.
    let mut outs = Outs::new(
        if lengths.len() > 65_536 {
            10
        } else {
            lengths.len()
        },
        2,
        4,
    );
    let mut bufs = outs.buffers();
    let mut n = lengths.len();
    let mut ws_size = outs.workspace.len();
    edit(&mut cfg, &mut bufs, &mut n, &mut ws_size);
    let ws = if ws_size == 0 {
        null_mut()
    } else {
        outs.workspace.as_mut_ptr().cast()
    };
    // SAFETY: every pointer is live with at least the stated length (edits only shrink them,
    // set NULL, or point inside the same allocations).
    let s = unsafe { skrull_schedule(&cfg, lengths.as_ptr(), n, ws, ws_size, &bufs) };
    assert_eq!(s, want);
    assert!(outs.untouched(), "{want:?} wrote an output");
}

const OK10: [u32; 10] = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];

#[test]
fn every_status_is_reachable_and_leaves_outputs_untouched() {
    use skrull_status as S;
    expect_status(S::NullArg, &OK10, |_, b, _, _| b.members = null_mut());
    expect_status(S::NullArg, &OK10, |_, b, _, _| b.summary = null_mut());
    expect_status(S::NullArg, &OK10, |_, _, _, w| *w = 0);
    expect_status(S::BadStructSize, &OK10, |c, _, _, _| c.struct_size = 8);
    expect_status(S::BadStructSize, &OK10, |_, b, _, _| b.struct_size = 0);
    expect_status(S::InvalidEnum, &OK10, |c, _, _, _| c.policy = 99);
    expect_status(S::InvalidEnum, &OK10, |c, _, _, _| c.victim = 2);
    expect_status(S::InvalidEnum, &OK10, |c, _, _, _| c.flops = 2);
    expect_status(S::InvalidEnum, &OK10, |c, _, _, _| c.shard_padding = 9);
    expect_status(S::InvalidEnum, &OK10, |c, _, _, _| c.model.swiglu = 3);
    expect_status(S::InvalidArg, &OK10, |_, b, _, _| b._reserved = 1);
    expect_status(S::InvalidArg, &OK10, |_, b, _, _| {
        b.members = b.members.cast::<u8>().wrapping_add(2).cast();
        b.members_len -= 1;
    });
    expect_status(S::InvalidArg, &OK10, |_, b, _, _| b.rank_tokens = b.members);
    expect_status(S::WorkspaceTooSmall, &OK10, |_, _, _, w| *w -= 1);
    expect_status(S::OutputTooSmall, &OK10, |_, b, _, _| b.placements_len = 9);
    expect_status(S::OutputTooSmall, &OK10, |_, b, _, _| {
        b.micro_batches_len = 9
    });
    expect_status(S::OutputTooSmall, &OK10, |_, b, _, _| b.members_len = 0);
    expect_status(S::OutputTooSmall, &OK10, |_, b, _, _| {
        b.rank_tokens_len = 39
    });
    expect_status(S::OutputTooSmall, &OK10, |_, b, _, _| {
        b.micro_batches_per_dp_len = 1
    });
    expect_status(S::InvalidDp, &OK10, |c, _, _, _| c.dp = 0);
    expect_status(S::InvalidDp, &OK10, |c, _, _, _| c.dp = 65_537);
    expect_status(S::InvalidCp, &OK10, |c, _, _, _| c.cp = 0);
    expect_status(S::InvalidCp, &OK10, |c, _, _, _| c.cp = 257);
    expect_status(S::InvalidBucket, &OK10, |c, _, _, _| c.bucket_tokens = 0);
    expect_status(S::InvalidBucket, &OK10, |c, _, _, _| {
        c.bucket_tokens = u32::MAX
    });
    expect_status(S::InvalidModel, &OK10, |c, _, _, _| c.model.layers = 0);
    expect_status(S::InvalidModel, &OK10, |c, _, _, _| {
        c.model.kv_hidden = 100_000
    });
    let many = vec![1u32; 65_537];
    expect_status(S::TooManySequences, &many, |_, _, _, _| {});
    expect_status(S::EmptySequence, &[3, 0, 2], |_, _, _, _| {});
    expect_status(S::LengthOutOfRange, &[3, u32::MAX], |c, _, _, _| {
        c.bucket_tokens = i32::MAX as u32;
    });
    expect_status(S::SequenceTooLong, &[3, 97], |_, _, _, _| {});
    expect_status(S::MicroBatchLimit, &OK10, |c, _, _, _| {
        c.max_micro_batches = 1;
        c.policy = SKRULL_POLICY_DEEPSPEED;
    });
    // SAFETY: no preconditions.
    assert_eq!(unsafe { skrull_panic_selftest() }, S::Panic);
}

#[test]
fn null_config_lengths_and_out_are_null_arg() {
    let cfg = config(2, 4, 24);
    let mut outs = Outs::new(10, 2, 4);
    let bufs = outs.buffers();
    let ws = outs.workspace.as_mut_ptr().cast::<c_void>();
    let wl = outs.workspace.len();
    // SAFETY: NULL is allowed for each argument; the rest are live.
    unsafe {
        let l = OK10.as_ptr();
        assert_eq!(
            skrull_schedule(null(), l, 10, ws, wl, &bufs),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_schedule(&cfg, null(), 10, ws, wl, &bufs),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_schedule(&cfg, l, 10, ws, wl, null()),
            skrull_status::NullArg
        );
    }
    assert!(outs.untouched());
    // An empty batch needs no lengths and gets an empty plan.
    let mut e = Outs::new(0, 2, 4);
    let b = e.buffers();
    // SAFETY: live buffers; lengths may be NULL for n = 0.
    let s = unsafe {
        skrull_schedule(
            &cfg,
            null(),
            0,
            e.workspace.as_mut_ptr().cast(),
            e.workspace.len(),
            &b,
        )
    };
    assert_eq!(s, skrull_status::Ok);
    assert_eq!(e.per_dp, [0, 0]);
    assert_eq!(e.summary.micro_batches, 0);
}

#[test]
fn dacp_place_matches_the_paper_example_and_reports_dacp_failed() {
    let lengths = [1u32, 2, 2, 3, 4, 6, 9, 14, 30];
    let mut cfg = config(1, 4, 24);
    let wl = unsafe_size(lengths.len(), 1, 4);
    let mut ws = vec![0u8; wl];
    let mut ranks = [99i32; 9];
    let mut sum = skrull_dacp_summary::default();
    // SAFETY: live buffers with their true lengths.
    let s = unsafe {
        skrull_dacp_place(
            &cfg,
            lengths.as_ptr(),
            9,
            ws.as_mut_ptr().cast(),
            wl,
            ranks.as_mut_ptr(),
            9,
            &mut sum,
        )
    };
    assert_eq!(s, skrull_status::Ok);
    assert_eq!(ranks, [0, 1, 2, -1, 0, 1, 2, 3, -1]);
    assert_eq!(
        sum,
        skrull_dacp_summary {
            sharded: 2,
            rollbacks: 1
        }
    );
    // Example 2 (BucketSize 20) cannot fit with integer shares.
    cfg.bucket_tokens = 20;
    let mut r2 = [99i32; 9];
    let mut s2 = skrull_dacp_summary {
        sharded: 7,
        rollbacks: 7,
    };
    // SAFETY: as above.
    let s = unsafe {
        skrull_dacp_place(
            &cfg,
            lengths.as_ptr(),
            9,
            ws.as_mut_ptr().cast(),
            wl,
            r2.as_mut_ptr(),
            9,
            &mut s2,
        )
    };
    assert_eq!(s, skrull_status::DacpFailed);
    assert_eq!(r2, [99; 9]);
    assert_eq!(
        s2,
        skrull_dacp_summary {
            sharded: 7,
            rollbacks: 7
        }
    );
    // SAFETY: as above, with a short output.
    let s = unsafe {
        skrull_dacp_place(
            &cfg,
            lengths.as_ptr(),
            9,
            ws.as_mut_ptr().cast(),
            wl,
            r2.as_mut_ptr(),
            8,
            &mut s2,
        )
    };
    assert_eq!(s, skrull_status::OutputTooSmall);
}

fn unsafe_size(n: usize, dp: u32, cp: u32) -> usize {
    // SAFETY: no preconditions.
    unsafe { skrull_workspace_size(n, dp, cp) }
}

#[test]
#[cfg_attr(miri, ignore = "slow under miri; the small cases cover the same code")]
fn separate_buffers_on_many_threads_give_identical_plans() {
    let lengths = batch(42, 512, 8 * 26 * 1024);
    let cfg = config(4, 8, 26 * 1024);
    let mut reference = Outs::new(512, 4, 8);
    assert_eq!(reference.schedule(&cfg, &lengths), skrull_status::Ok);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut o = Outs::new(512, 4, 8);
                    for _ in 0..5 {
                        assert_eq!(o.schedule(&cfg, &lengths), skrull_status::Ok);
                    }
                    o
                })
            })
            .collect();
        for h in handles {
            let o = h.join().unwrap();
            assert_eq!(o.placements, reference.placements);
            assert_eq!(o.micro_batches, reference.micro_batches);
            assert_eq!(o.rank_tokens, reference.rank_tokens);
            assert_eq!(o.summary, reference.summary);
        }
    });
}

#[test]
fn status_strings_and_versions() {
    for &s in skrull_status::all() {
        // SAFETY: the function returns a static NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(skrull_status_str(s as u32)) };
        assert_eq!(msg, s.message());
    }
    // SAFETY: no preconditions.
    assert_eq!(unsafe { skrull_abi_version() }, SKRULL_ABI_VERSION);
}

/// Calls `skrull_schedule` with an error-details target; returns the status and the details
/// (the guard value when nothing was written).
fn schedule_with_details(
    cfg: &skrull_config,
    lengths: &[u32],
) -> (skrull_status, skrull_error_info) {
    const GUARD: skrull_error_info = skrull_error_info {
        status: 0xDEAD_BEEF,
        field: 0xDEAD_BEEF,
        index: -7,
        value: 7,
        limit: 7,
    };
    let mut o = Outs::new(lengths.len(), cfg.dp.clamp(1, 8), cfg.cp.clamp(1, 8));
    let mut info = GUARD;
    let mut b = o.buffers();
    b.error = &mut info;
    // SAFETY: every pointer comes from a live Vec or local with its true length.
    let st = unsafe {
        skrull_schedule(
            cfg,
            lengths.as_ptr(),
            lengths.len(),
            o.workspace.as_mut_ptr().cast::<c_void>(),
            o.workspace.len(),
            &b,
        )
    };
    if st == skrull_status::Ok {
        assert_eq!(info, GUARD, "details are written only on failure");
    } else {
        assert!(o.untouched());
        assert_eq!(info.status, st as u32);
    }
    (st, info)
}

/// The details a Python or C caller needs to name the problem: which sequence, which
/// value, which bound.
#[test]
fn error_details_name_the_sequence_the_value_and_the_bound() {
    let base = config(2, 4, 24);
    let (st, e) = schedule_with_details(&base, &[5, 97, 3]);
    assert_eq!(st, skrull_status::SequenceTooLong);
    assert_eq!(
        (e.index, e.value, e.limit),
        (1, 97, 25),
        "ceil(97 / 4) = 25 > 24"
    );
    let (st, e) = schedule_with_details(&base, &[5, 0, 3]);
    assert_eq!((st, e.index), (skrull_status::EmptySequence, 1));
    let (st, e) = schedule_with_details(&base, &[5, u32::MAX]);
    assert_eq!(st, skrull_status::LengthOutOfRange);
    assert_eq!(
        (e.index, e.value, e.limit),
        (1, u64::from(u32::MAX), i32::MAX as u64)
    );
    let mut c = base;
    c.dp = 0;
    let (st, e) = schedule_with_details(&c, &[5]);
    assert_eq!(
        (st, e.index, e.value, e.limit),
        (skrull_status::InvalidDp, -1, 0, 65_536)
    );
    let mut c = base;
    c.model.ffn = 0;
    let (st, e) = schedule_with_details(&c, &[5]);
    assert_eq!((st, e.field, e.value), (skrull_status::InvalidModel, 3, 0));
    let mut c = base;
    c.pad_multiple = 70_000;
    let (st, e) = schedule_with_details(&c, &[5]);
    assert_eq!(
        (st, e.value, e.limit),
        (skrull_status::InvalidPadMultiple, 70_000, 65_536)
    );
    let mut c = base;
    c.max_micro_batches = 1;
    c.policy = SKRULL_POLICY_DEEPSPEED;
    let (st, e) = schedule_with_details(&c, &[5, 6, 7, 8]);
    assert_eq!(st, skrull_status::MicroBatchLimit);
    assert_eq!(
        (e.index, e.value, e.limit),
        (0, 2, 1),
        "DP 0 needs 2, the limit is 1"
    );
    let (st, _) = schedule_with_details(&base, &[5, 6, 7]);
    assert_eq!(st, skrull_status::Ok);
    // A status without details still reports itself.
    let mut c = base;
    c.policy = 99;
    let (st, e) = schedule_with_details(&c, &[5]);
    assert_eq!(
        (st, e.index, e.value, e.limit),
        (skrull_status::InvalidEnum, -1, 0, 0)
    );
}

/// A details target that overlaps another argument is never written: the call fails with
/// `INVALID_ARG` and the overlapped memory is left alone.
#[test]
fn error_details_that_overlap_an_argument_are_not_written() {
    let cfg = config(2, 4, 24);
    let mut o = Outs::new(4, 2, 4);
    // The details struct would overlap the first two placements.
    let mut b = o.buffers();
    b.error = o.placements.as_mut_ptr().cast::<skrull_error_info>();
    let lengths = [5u32, 6, 7, 8];
    // SAFETY: live buffers; the overlap is what is tested.
    let st = unsafe {
        skrull_schedule(
            &cfg,
            lengths.as_ptr(),
            4,
            o.workspace.as_mut_ptr().cast::<c_void>(),
            o.workspace.len(),
            &b,
        )
    };
    assert_eq!(st, skrull_status::InvalidArg);
    assert!(o.untouched());
    // Overlapping the lengths: a failing batch still writes nothing there.
    let mut lengths = [0u32; 16];
    let mut b = o.buffers();
    b.error = lengths.as_mut_ptr().cast::<skrull_error_info>();
    // SAFETY: as above.
    let st = unsafe {
        skrull_schedule(
            &cfg,
            lengths.as_ptr(),
            16,
            o.workspace.as_mut_ptr().cast::<c_void>(),
            o.workspace.len(),
            &b,
        )
    };
    assert_ne!(st, skrull_status::Ok);
    assert_eq!(lengths, [0u32; 16]);
}
