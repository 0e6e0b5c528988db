//! The bad-input matrix (docs/robustness.md): table-driven cases over every entry point of the
//! Rust API (`schedule`, `dacp::place`, `Config::validate`) and the C ABI (`skrull_schedule`,
//! `skrull_dacp_place`, `skrull_plan_sizes`, `skrull_workspace_size`, the config
//! initialisers, `skrull_status_str`), called from Rust the way C calls them.
//!
//! Each case asserts the exact error or status, and that the guard elements around every
//! output buffer (and the whole buffer, on error) are untouched, the inputs unchanged, and any
//! plan returned valid under the independent checker. The "valid but awkward" batches of
//! the bad-input rules are in the tables too, expecting success.
#![allow(clippy::unwrap_used, clippy::panic)] // test helpers: a failure is a test failure
#![allow(clippy::type_complexity, clippy::needless_range_loop)] // case tables

use core::ffi::{CStr, c_void};
use core::ptr::{null, null_mut};

use skrull::{
    SKRULL_CONFIG_SIZE_V1, SKRULL_MAX_STRUCT_SIZE, SKRULL_PRESET_QWEN2_5_0_5B,
    SKRULL_PRESET_QWEN2_5_7B, skrull_config, skrull_config_default, skrull_config_init,
    skrull_config_preset, skrull_config_preset_init, skrull_dacp_place, skrull_dacp_summary,
    skrull_plan_buffers, skrull_plan_sizes, skrull_schedule, skrull_sizes, skrull_status,
    skrull_status_str, skrull_summary, skrull_workspace_size,
};
use skrull_core::config::{MAX_BUCKET, MAX_CP, MAX_DP, MAX_SEQ_LEN, MAX_SEQS};
use skrull_core::error::{Buffer, ShapeField};
use skrull_core::{
    Config, Error, FlopsFormula, ModelShape, PlanBuffers, PlanSizes, Policy, Setup, ShardPadding,
    Workspace, WorkspaceSizes,
};
use skrull_kit::Guarded;
use skrull_kit::c_check::{CPlan, check_c_plan};
use skrull_kit::cases::with_policy;
use skrull_kit::check::independent_check;
use skrull_kit::guarded::{FILL, FILL_G, FILL_MB, FILL_P, FILL_RMB, FILL_RP, FILL_S};

/// The docs' example batch (docs/c_api.md): DP 2, CP 4, BucketSize 24.
const EXAMPLE: [u32; 10] = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];

fn base_cfg() -> Config {
    Config::new(2, 4, 24, ModelShape::QWEN2_5_0_5B)
}

/// The largest valid model shape.
const MAX_MODEL: ModelShape = ModelShape {
    hidden: 1 << 16,
    kv_hidden: 1 << 16,
    ffn: 1 << 18,
    layers: 1 << 10,
    vocab: 1 << 22,
    swiglu: true,
};

/// `n` sequences of the longest valid length on DP 1 x CP 1 with the largest budget and the
/// largest model: token sums near 2^47 and FLOPs sums far above 2^64.
fn overflow_cfg(flops: FlopsFormula) -> Config {
    let mut cfg = Config::new(1, 1, MAX_BUCKET, MAX_MODEL);
    cfg.flops = flops;
    cfg
}

// ---------------------------------------------------------------------------------------
// Rust API: schedule()
// ---------------------------------------------------------------------------------------

/// One `schedule()` case: configuration, batch, which of the 11 buffers (5 plan buffers, then
/// the 6 workspace slices) is one element short, and the exact result.
struct RCase {
    name: &'static str,
    cfg: Config,
    lengths: Vec<u32>,
    short: Option<usize>,
    want: Result<(), Error>,
}

fn r(name: &'static str, cfg: Config, lengths: &[u32], want: Result<(), Error>) -> RCase {
    RCase {
        name,
        cfg,
        lengths: lengths.to_vec(),
        short: None,
        want,
    }
}

fn rust_cases() -> Vec<RCase> {
    let b = base_cfg();
    let with = |f: &dyn Fn(&mut Config)| {
        let mut c = b;
        f(&mut c);
        c
    };
    let model = |f: &dyn Fn(&mut ModelShape)| {
        let mut c = b;
        f(&mut c.model);
        c
    };
    let bad_model = |field, value| Err(Error::InvalidModel { field, value });
    let mut v = vec![
        r("the example", b, &EXAMPLE, Ok(())),
        // DP
        r(
            "dp 0",
            with(&|c| c.dp = 0),
            &EXAMPLE,
            Err(Error::InvalidDp { dp: 0, max: MAX_DP }),
        ),
        r(
            "dp max + 1",
            with(&|c| c.dp = MAX_DP + 1),
            &EXAMPLE,
            Err(Error::InvalidDp {
                dp: MAX_DP + 1,
                max: MAX_DP,
            }),
        ),
        r(
            "dp u32::MAX",
            with(&|c| c.dp = u32::MAX),
            &EXAMPLE,
            Err(Error::InvalidDp {
                dp: u32::MAX,
                max: MAX_DP,
            }),
        ),
        r("dp max", with(&|c| c.dp = MAX_DP), &EXAMPLE, Ok(())),
        // CP
        r(
            "cp 0",
            with(&|c| c.cp = 0),
            &EXAMPLE,
            Err(Error::InvalidCp { cp: 0, max: MAX_CP }),
        ),
        r(
            "cp max + 1",
            with(&|c| c.cp = MAX_CP + 1),
            &EXAMPLE,
            Err(Error::InvalidCp {
                cp: MAX_CP + 1,
                max: MAX_CP,
            }),
        ),
        r(
            "cp u32::MAX",
            with(&|c| c.cp = u32::MAX),
            &EXAMPLE,
            Err(Error::InvalidCp {
                cp: u32::MAX,
                max: MAX_CP,
            }),
        ),
        r("cp max", with(&|c| c.cp = MAX_CP), &EXAMPLE, Ok(())),
        // BucketSize
        r(
            "bucket 0",
            with(&|c| c.bucket = 0),
            &EXAMPLE,
            Err(Error::InvalidBucket {
                bucket: 0,
                max: MAX_BUCKET,
            }),
        ),
        r(
            "bucket 2^31",
            with(&|c| c.bucket = 1 << 31),
            &EXAMPLE,
            Err(Error::InvalidBucket {
                bucket: 1 << 31,
                max: MAX_BUCKET,
            }),
        ),
        r(
            "bucket u32::MAX",
            with(&|c| c.bucket = u32::MAX),
            &EXAMPLE,
            Err(Error::InvalidBucket {
                bucket: u32::MAX,
                max: MAX_BUCKET,
            }),
        ),
        r(
            "bucket max",
            with(&|c| c.bucket = MAX_BUCKET),
            &EXAMPLE,
            Ok(()),
        ),
        r(
            "dp, cp and bucket max",
            with(&|c| (c.dp, c.cp, c.bucket) = (MAX_DP, MAX_CP, MAX_BUCKET)),
            &EXAMPLE,
            Ok(()),
        ),
        r("bucket 1", with(&|c| c.bucket = 1), &[1, 4, 3], Ok(())),
        // Model shape
        r(
            "hidden 0",
            model(&|m| m.hidden = 0),
            &EXAMPLE,
            bad_model(ShapeField::Hidden, 0),
        ),
        r(
            "hidden max + 1",
            model(&|m| m.hidden = (1 << 16) + 1),
            &EXAMPLE,
            bad_model(ShapeField::Hidden, (1 << 16) + 1),
        ),
        r(
            "kv_hidden 0",
            model(&|m| m.kv_hidden = 0),
            &EXAMPLE,
            bad_model(ShapeField::KvHidden, 0),
        ),
        r(
            "kv_hidden > hidden",
            model(&|m| m.kv_hidden = m.hidden + 1),
            &EXAMPLE,
            bad_model(ShapeField::KvHidden, 897),
        ),
        r(
            "ffn 0",
            model(&|m| m.ffn = 0),
            &EXAMPLE,
            bad_model(ShapeField::Ffn, 0),
        ),
        r(
            "ffn u32::MAX",
            model(&|m| m.ffn = u32::MAX),
            &EXAMPLE,
            bad_model(ShapeField::Ffn, u32::MAX),
        ),
        r(
            "layers 0",
            model(&|m| m.layers = 0),
            &EXAMPLE,
            bad_model(ShapeField::Layers, 0),
        ),
        r(
            "layers max + 1",
            model(&|m| m.layers = (1 << 10) + 1),
            &EXAMPLE,
            bad_model(ShapeField::Layers, 1025),
        ),
        r(
            "vocab max + 1",
            model(&|m| m.vocab = (1 << 22) + 1),
            &EXAMPLE,
            bad_model(ShapeField::Vocab, (1 << 22) + 1),
        ),
        r(
            "vocab 0 (LM head not counted)",
            model(&|m| m.vocab = 0),
            &EXAMPLE,
            Ok(()),
        ),
        r(
            "largest model",
            with(&|c| c.model = MAX_MODEL),
            &EXAMPLE,
            Ok(()),
        ),
        // The first configuration error wins: DP before CP before bucket before model.
        r(
            "dp 0 and cp 0",
            with(&|c| (c.dp, c.cp) = (0, 0)),
            &EXAMPLE,
            Err(Error::InvalidDp { dp: 0, max: MAX_DP }),
        ),
        r(
            "cp 0 and bucket 0 and hidden 0",
            with(&|c| (c.cp, c.bucket, c.model.hidden) = (0, 0, 0)),
            &EXAMPLE,
            Err(Error::InvalidCp { cp: 0, max: MAX_CP }),
        ),
        r(
            "bad config and bad lengths",
            with(&|c| c.bucket = 0),
            &[0],
            Err(Error::InvalidBucket {
                bucket: 0,
                max: MAX_BUCKET,
            }),
        ),
        // Lengths
        r("empty batch", b, &[], Ok(())),
        r("length 0", b, &[0], Err(Error::EmptySequence { index: 0 })),
        r(
            "length 0 later",
            b,
            &[5, 6, 0, 7],
            Err(Error::EmptySequence { index: 2 }),
        ),
        r("length 1", b, &[1], Ok(())),
        r(
            "length 2^31 - 1",
            overflow_cfg(FlopsFormula::Paper),
            &[MAX_SEQ_LEN],
            Ok(()),
        ),
        r(
            "length 2^31",
            overflow_cfg(FlopsFormula::Paper),
            &[1 << 31],
            Err(Error::LengthOutOfRange {
                index: 0,
                len: 1 << 31,
                max: MAX_SEQ_LEN,
            }),
        ),
        r(
            "length u32::MAX",
            b,
            &[3, u32::MAX],
            Err(Error::LengthOutOfRange {
                index: 1,
                len: u32::MAX,
                max: MAX_SEQ_LEN,
            }),
        ),
        r(
            "first bad length wins",
            b,
            &[3, u32::MAX, 0],
            Err(Error::LengthOutOfRange {
                index: 1,
                len: u32::MAX,
                max: MAX_SEQ_LEN,
            }),
        ),
        r(
            "first bad length wins (2)",
            b,
            &[3, 0, u32::MAX],
            Err(Error::EmptySequence { index: 1 }),
        ),
        // Too long even sharded: ceil(len / cp) > bucket.
        r("sharded limit", b, &[96, 1], Ok(())),
        r(
            "too long sharded",
            b,
            &[1, 97],
            Err(Error::SequenceTooLong {
                index: 1,
                len: 97,
                needed_bucket: 25,
            }),
        ),
        r(
            "too long sharded, 2^31 - 1",
            b,
            &[MAX_SEQ_LEN],
            Err(Error::SequenceTooLong {
                index: 0,
                len: MAX_SEQ_LEN,
                needed_bucket: 536_870_912,
            }),
        ),
        // Zigzag padding on CP 4, BucketSize 23: 89 tokens need 2 x ceil(89 / 8) = 24 per GPU
        // (92 would fit unpadded).
        r(
            "too long with zigzag padding",
            with(&|c| (c.shard_padding, c.bucket) = (ShardPadding::Zigzag, 23)),
            &[89],
            Err(Error::SequenceTooLong {
                index: 0,
                len: 89,
                needed_bucket: 24,
            }),
        ),
        r(
            "zigzag limit",
            with(&|c| (c.shard_padding, c.bucket) = (ShardPadding::Zigzag, 23)),
            &[88],
            Ok(()),
        ),
        r(
            "unpadded limit at 23",
            with(&|c| c.bucket = 23),
            &[92],
            Ok(()),
        ),
        // Micro-batch limit
        r(
            "micro-batch limit",
            with(&|c| (c.dp, c.max_micro_batches) = (1, 1)),
            &[96, 96],
            Err(Error::MicroBatchLimit {
                dp_rank: 0,
                limit: 1,
                needed: 2,
            }),
        ),
        r(
            "micro-batch limit held",
            with(&|c| (c.dp, c.max_micro_batches) = (1, 2)),
            &[96, 96],
            Ok(()),
        ),
        // Valid but awkward.
        r(
            "fewer sequences than DP ranks",
            with(&|c| c.dp = 16),
            &[5, 6, 7],
            Ok(()),
        ),
        r(
            "count not divisible by DP",
            with(&|c| c.dp = 3),
            &EXAMPLE,
            Ok(()),
        ),
        r("single sequence", b, &[30], Ok(())),
        r("all equal", b, &[7; 33], Ok(())),
        r("every sequence at the local budget", b, &[24; 17], Ok(())),
        r("every sequence at the sharded limit", b, &[96; 9], Ok(())),
        // Token and FLOPs sums near the top of the ranges.
        r(
            "max sums, paper FLOPs",
            overflow_cfg(FlopsFormula::Paper),
            &vec![MAX_SEQ_LEN; 8192],
            Ok(()),
        ),
        r(
            "max sums, Megatron FLOPs",
            overflow_cfg(FlopsFormula::Megatron),
            &vec![MAX_SEQ_LEN; 8192],
            Ok(()),
        ),
        // Counts above capacity.
        r("max sequences", b, &vec![1; MAX_SEQS], Ok(())),
        r(
            "max sequences + 1",
            b,
            &vec![1; MAX_SEQS + 1],
            Err(Error::TooManySequences {
                count: MAX_SEQS + 1,
                max: MAX_SEQS,
            }),
        ),
        r(
            "too many beats bad lengths",
            b,
            &vec![0; MAX_SEQS + 1],
            Err(Error::TooManySequences {
                count: MAX_SEQS + 1,
                max: MAX_SEQS,
            }),
        ),
    ];
    // Every buffer one element short, named exactly, for every policy.
    let n = EXAMPLE.len();
    let which = [
        Buffer::Placements,
        Buffer::MicroBatches,
        Buffer::Members,
        Buffer::RankTokens,
        Buffer::MicroBatchesPerDp,
    ];
    for policy in Policy::ALL {
        // The workspace slab: `balanced` needs more words than the others.
        let words = WorkspaceSizes::for_batch(n, &with_policy(&b, policy)).words;
        let needed = [n, n, n, n * 4, 2, words];
        for k in 0..needed.len() {
            let buffer = which.get(k).copied().unwrap_or(Buffer::Workspace);
            v.push(RCase {
                name: "one buffer one short",
                cfg: with_policy(&b, policy),
                lengths: EXAMPLE.to_vec(),
                short: Some(k),
                want: Err(Error::BufferTooSmall {
                    buffer,
                    needed: needed[k],
                    got: needed[k] - 1,
                }),
            });
        }
    }
    // A short buffer is reported after configuration and batch errors.
    v.push(RCase {
        short: Some(0),
        ..r(
            "bad length beats short buffer",
            b,
            &[0],
            Err(Error::EmptySequence { index: 0 }),
        )
    });
    v
}

/// Runs one `schedule()` case with guarded buffers and checks everything.
fn run_rust(c: &RCase) {
    let n = c.lengths.len();
    let sized = Config {
        dp: c.cfg.dp.clamp(1, MAX_DP),
        cp: c.cfg.cp.clamp(1, MAX_CP),
        ..c.cfg
    };
    let ps = PlanSizes::for_batch(n, &sized);
    let ws = WorkspaceSizes::for_batch(n, &sized);
    let mut s = [
        ps.placements,
        ps.micro_batches,
        ps.members,
        ps.rank_tokens,
        ps.micro_batches_per_dp,
        ws.words,
    ];
    if let Some(k) = c.short {
        s[k] -= 1;
    }
    let mut placements = Guarded::new(s[0], FILL_RP);
    let mut micro_batches = Guarded::new(s[1], FILL_RMB);
    let mut members = Guarded::new(s[2], FILL);
    let mut rank_tokens = Guarded::new(s[3], FILL);
    let mut per_dp = Guarded::new(s[4], FILL);
    let mut words = Guarded::new(s[5], u128::MAX);
    let mut work = Workspace::new(words.body_mut());
    let out = PlanBuffers {
        placements: placements.body_mut(),
        micro_batches: micro_batches.body_mut(),
        members: members.body_mut(),
        rank_tokens: rank_tokens.body_mut(),
        micro_batches_per_dp: per_dp.body_mut(),
    };
    let setup = Setup::single_use(&c.cfg);
    let got = setup
        .as_ref()
        .map_err(|e| *e)
        .and_then(|s| skrull_core::schedule(s, &c.lengths, &mut work, out));
    let name = format!("rust {} ({:?}, short {:?})", c.name, c.cfg.policy, c.short);
    // `balanced` plans on time, not FLOPs: it refuses another FLOPs formula up front.
    let refused = Err(Error::Unsupported {
        policy: Policy::Balanced.name(),
        option: "flops",
    });
    let want = match &c.want {
        Ok(()) if c.cfg.policy == Policy::Balanced && c.cfg.flops != FlopsFormula::Paper => {
            &refused
        }
        w => w,
    };
    match (&got, want) {
        (Ok(plan), Ok(())) => {
            assert_eq!(
                independent_check(&c.cfg, &c.lengths, plan),
                Ok(()),
                "{name}"
            );
            assert_eq!(
                skrull_core::plan::check(&skrull_kit::setup_of(&c.cfg), &c.lengths, plan),
                Ok(()),
                "{name}"
            );
        }
        (Err(e), Err(w)) => assert_eq!(e, w, "{name}"),
        (g, w) => panic!("{name}: got {:?}, want {w:?}", g.as_ref().map(|_| ())),
    }
    placements.guards_intact(&format!("{name}: placements"));
    micro_batches.guards_intact(&format!("{name}: micro_batches"));
    members.guards_intact(&format!("{name}: members"));
    rank_tokens.guards_intact(&format!("{name}: rank_tokens"));
    per_dp.guards_intact(&format!("{name}: micro_batches_per_dp"));
    words.guards_intact(&format!("{name}: workspace"));
}

#[test]
#[cfg_attr(miri, ignore)] // 65,536-sequence cases
fn rust_schedule_matrix() {
    let cases = rust_cases();
    assert!(cases.len() > 60);
    for c in &cases {
        if c.short.is_some() || c.cfg.policy != Policy::Skrull {
            run_rust(c);
            continue;
        }
        // Every policy (bad-input results do not depend on it, except that chunkflow runs a
        // sequence too long to fit sharded chunked).
        for policy in Policy::ALL {
            let t0 = std::time::Instant::now();
            let cfg = with_policy(&c.cfg, policy);
            run_rust(&RCase {
                cfg,
                lengths: c.lengths.clone(),
                want: chunkflow_want(&cfg, c.want),
                ..*c
            });
            if t0.elapsed().as_secs_f64() > 0.5 {
                eprintln!("slow: {} {policy:?} {:?}", c.name, t0.elapsed());
            }
        }
    }
}

/// What `cfg` gives for a batch whose only fault is `want`: as `want`, except that
/// `chunkflow` plans a sequence too long to fit sharded when it can chunk it within BucketSize
/// on the whole group (`ChunkOverBudget` otherwise), by the independent checker's peak.
fn chunkflow_want(cfg: &Config, want: Result<(), Error>) -> Result<(), Error> {
    match want {
        Err(Error::SequenceTooLong { index, len, .. })
            if cfg.policy == Policy::ChunkFlow && cfg.chunking.can_chunk(len) =>
        {
            let peak = skrull_kit::check::chunked_peak(cfg, len, cfg.cp);
            if peak <= u64::from(cfg.bucket) {
                Ok(())
            } else {
                Err(Error::ChunkOverBudget { index, len, peak })
            }
        }
        w => w,
    }
}

/// 65,536 longest sequences on DP 1 x CP 1 with the largest budget: every sequence fills a
/// GPU, so one DP rank runs 65,536 micro-batches (token sums near 2^47). Returns the time.
fn one_rank_full_budget(policy: Policy) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    for flops in [FlopsFormula::Paper, FlopsFormula::Megatron] {
        run_rust(&RCase {
            name: "65,536 micro-batches on one rank",
            cfg: with_policy(&overflow_cfg(flops), policy),
            lengths: vec![MAX_SEQ_LEN; MAX_SEQS],
            short: None,
            want: Ok(()),
        });
    }
    t0.elapsed()
}

#[test]
#[cfg_attr(miri, ignore)]
fn every_policy_plans_65536_micro_batches_on_one_rank() {
    for policy in Policy::ALL {
        one_rank_full_budget(policy);
    }
}

/// Regression, found by this matrix: on 65,536 full-budget sequences (one DP rank, 65,536
/// micro-batches) the balanced policy took about 5 s per call in a release build where Skrull
/// took 32 ms (67 s against 0.3 s in debug): above 256 micro-batches it gathered each
/// micro-batch's members by rescanning the rank's whole list, O(m x n). Fixed with a sort of
/// (micro-batch, position) keys; now about as fast as Skrull.
#[test]
#[cfg_attr(miri, ignore)]
fn balanced_plans_65536_micro_batches_about_as_fast_as_skrull() {
    let Some(balanced) = Policy::ALL.into_iter().find(|p| p.name() == "balanced") else {
        return;
    };
    let skrull = one_rank_full_budget(Policy::Skrull);
    let t = one_rank_full_budget(balanced);
    assert!(
        t <= skrull * 10 + std::time::Duration::from_secs(1),
        "balanced took {t:?}, skrull {skrull:?}"
    );
}

/// The configuration errors also come from `Config::validate` directly.
#[test]
fn rust_config_validate_matrix() {
    for c in rust_cases() {
        if let Err(
            e @ (Error::InvalidDp { .. }
            | Error::InvalidCp { .. }
            | Error::InvalidBucket { .. }
            | Error::InvalidModel { .. }),
        ) = c.want
        {
            assert_eq!(c.cfg.validate(), Err(e), "{}", c.name);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rust API: dacp::place()
// ---------------------------------------------------------------------------------------

#[test]
fn rust_dacp_matrix() {
    let b = base_cfg();
    let one = Config::new(1, 1, 10, ModelShape::QWEN2_5_0_5B);
    // (name, cfg, lengths, order shortfall, out shortfall, result)
    let cases: Vec<(&str, Config, Vec<u32>, usize, usize, Result<(), Error>)> = vec![
        (
            "the example fits",
            b,
            vec![1, 2, 2, 3, 4, 6, 9, 14, 30],
            0,
            0,
            Ok(()),
        ),
        ("empty", b, vec![], 0, 0, Ok(())),
        (
            "cp 0",
            Config { cp: 0, ..b },
            vec![1],
            0,
            0,
            Err(Error::InvalidCp { cp: 0, max: MAX_CP }),
        ),
        (
            "bucket 0",
            Config { bucket: 0, ..b },
            vec![1],
            0,
            0,
            Err(Error::InvalidBucket {
                bucket: 0,
                max: MAX_BUCKET,
            }),
        ),
        (
            "length 0",
            b,
            vec![1, 0],
            0,
            0,
            Err(Error::EmptySequence { index: 1 }),
        ),
        (
            "length u32::MAX",
            b,
            vec![u32::MAX],
            0,
            0,
            Err(Error::LengthOutOfRange {
                index: 0,
                len: u32::MAX,
                max: MAX_SEQ_LEN,
            }),
        ),
        (
            "too long sharded",
            b,
            vec![97],
            0,
            0,
            Err(Error::SequenceTooLong {
                index: 0,
                len: 97,
                needed_bucket: 25,
            }),
        ),
        (
            "order one short",
            b,
            vec![1, 2, 3],
            1,
            0,
            Err(Error::BufferTooSmall {
                buffer: Buffer::Workspace,
                needed: 3,
                got: 2,
            }),
        ),
        (
            "out one short",
            b,
            vec![1, 2, 3],
            0,
            1,
            Err(Error::BufferTooSmall {
                buffer: Buffer::Placements,
                needed: 3,
                got: 2,
            }),
        ),
        (
            "does not fit",
            one,
            vec![6, 6],
            0,
            0,
            Err(Error::DacpFailed { cp_rank: 0 }),
        ),
        (
            "too many",
            b,
            vec![1; MAX_SEQS + 1],
            0,
            0,
            Err(Error::TooManySequences {
                count: MAX_SEQS + 1,
                max: MAX_SEQS,
            }),
        ),
    ];
    for (name, cfg, lengths, order_short, out_short, want) in cases {
        let n = lengths.len();
        let mut order = Guarded::new(n - order_short, FILL);
        let mut out = Guarded::new(n - out_short, 7i32);
        let got = Setup::single_use(&cfg).and_then(|s| {
            skrull_core::policy::dacp::place(&s, &lengths, order.body_mut(), out.body_mut())
        });
        match (&got, &want) {
            (Ok(o), Ok(())) => {
                let sharded = out.body().iter().filter(|&&r| r == -1).count() as u32;
                assert_eq!(o.sharded, sharded, "{name}");
                assert!(
                    out.body()
                        .iter()
                        .all(|&r| r == -1 || (0..cfg.cp as i32).contains(&r))
                );
            }
            (Err(e), Err(w)) => assert_eq!(e, w, "dacp {name}"),
            (g, w) => panic!("dacp {name}: got {g:?}, want {w:?}"),
        }
        order.guards_intact(&format!("{name}: order"));
        out.guards_intact(&format!("{name}: out"));
    }
}

// ---------------------------------------------------------------------------------------
// C ABI: skrull_schedule()
// ---------------------------------------------------------------------------------------

/// A pointer argument of `skrull_schedule()` (the buffer ones are fields of `out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P {
    Config,
    Lengths,
    Workspace,
    Out,
    Placements,
    MicroBatches,
    Members,
    RankTokens,
    PerDp,
    Summary,
    CpGroups,
}

/// One `skrull_schedule()` call: starts from the docs' example and changes one thing (or a
/// few, for the error-order cases).
#[derive(Debug, Clone)]
struct CSpec {
    cfg: skrull_config,
    /// A byte of the config storage at this offset (past the known fields) set to 1.
    cfg_tail: Option<usize>,
    lengths: Vec<u32>,
    /// `n` passed instead of `lengths.len()`.
    n: Option<usize>,
    /// Workspace bytes given minus the bytes needed (clamped at 0).
    ws_delta: isize,
    out_size: u32,
    out_tail: Option<usize>,
    out_reserved: u32,
    null: Vec<P>,
    misalign: Option<P>,
    short: Option<P>,
    /// Output capacities of placements, micro-batches, members and rank tokens set to 0.
    zero_caps: bool,
    /// The first buffer's pointer replaced by the second's.
    overlap: Option<(P, P)>,
}

fn base_spec() -> CSpec {
    CSpec {
        cfg: skrull_config::from_core(&base_cfg()),
        cfg_tail: None,
        lengths: EXAMPLE.to_vec(),
        n: None,
        ws_delta: 0,
        out_size: size_of::<skrull_plan_buffers>() as u32,
        out_tail: None,
        out_reserved: 0,
        null: Vec::new(),
        misalign: None,
        short: None,
        zero_caps: false,
        overlap: None,
    }
}

/// Storage for an extensible struct of up to 4096 + 8 bytes, zeroed, 8-aligned.
const STRUCT_WORDS: usize = 4104 / 8 + 1;

/// `p` moved by one byte (misaligned for every type here) when asked.
fn maybe_misalign<T>(p: *mut T, spec: &CSpec, which: P) -> *mut T {
    if spec.null.contains(&which) {
        null_mut()
    } else if spec.misalign == Some(which) {
        p.cast::<u8>().wrapping_add(1).cast::<T>()
    } else {
        p
    }
}

/// Runs one `skrull_schedule()` call and checks guards, inputs and (on success) the plan.
fn run_c(name: &str, spec: &CSpec) -> skrull_status {
    let n_alloc = spec.lengths.len();
    let (dp, cp) = (spec.cfg.dp.clamp(1, MAX_DP), spec.cfg.cp.clamp(1, MAX_CP));
    let mut sz = skrull_sizes::default();
    // SAFETY: `sz` is a live, aligned skrull_sizes.
    let st = unsafe { skrull_plan_sizes(n_alloc.min(MAX_SEQS), dp, cp, &mut sz) };
    assert_eq!(st, skrull_status::Ok);
    let ws_given = (sz.workspace_bytes as isize + spec.ws_delta).max(0) as usize;

    let mut cfg_mem = vec![0u64; STRUCT_WORDS];
    // SAFETY: 8-aligned and larger than a skrull_config.
    unsafe { cfg_mem.as_mut_ptr().cast::<skrull_config>().write(spec.cfg) };
    if let Some(off) = spec.cfg_tail {
        // SAFETY: `off` < 4104, inside `cfg_mem`.
        unsafe { cfg_mem.as_mut_ptr().cast::<u8>().add(off).write(1) };
    }
    let cfg_before = cfg_mem.clone();

    let mut lengths = Guarded::with(&spec.lengths, 0xA5A5_A5A5u32);
    let mut placements = Guarded::new(sz.placements, FILL_P);
    let mut micro_batches = Guarded::new(sz.micro_batches, FILL_MB);
    let mut members = Guarded::new(sz.members, FILL);
    let mut rank_tokens = Guarded::new(sz.rank_tokens, FILL);
    let mut per_dp = Guarded::new(sz.micro_batches_per_dp, FILL);
    let mut summary = Guarded::new(1, FILL_S);
    // As many groups as placements (`skrull_sizes` has no entry for them).
    let mut groups = Guarded::new(sz.placements, FILL_G);
    let mut workspace = Guarded::new(ws_given.max(sz.workspace_bytes), 0x5Au8);

    let cap = |len: usize, which: P| {
        if spec.zero_caps && !matches!(which, P::PerDp) {
            0
        } else if spec.short == Some(which) {
            len - 1
        } else {
            len
        }
    };
    let mut out = skrull_plan_buffers {
        struct_size: spec.out_size,
        _reserved: spec.out_reserved,
        placements: maybe_misalign(placements.ptr(), spec, P::Placements),
        placements_len: cap(sz.placements, P::Placements),
        micro_batches: maybe_misalign(micro_batches.ptr(), spec, P::MicroBatches),
        micro_batches_len: cap(sz.micro_batches, P::MicroBatches),
        members: maybe_misalign(members.ptr(), spec, P::Members),
        members_len: cap(sz.members, P::Members),
        rank_tokens: maybe_misalign(rank_tokens.ptr(), spec, P::RankTokens),
        rank_tokens_len: cap(sz.rank_tokens, P::RankTokens),
        micro_batches_per_dp: maybe_misalign(per_dp.ptr(), spec, P::PerDp),
        micro_batches_per_dp_len: cap(sz.micro_batches_per_dp, P::PerDp),
        summary: maybe_misalign(summary.ptr(), spec, P::Summary),
        error: std::ptr::null_mut(),
        cp_groups: maybe_misalign(groups.ptr(), spec, P::CpGroups),
        // A caller without groups passes NULL with capacity 0.
        cp_groups_len: if spec.null.contains(&P::CpGroups) {
            0
        } else {
            cap(sz.placements, P::CpGroups)
        },
    };
    let lengths_ptr = maybe_misalign(lengths.ptr(), spec, P::Lengths);
    let ws_ptr = maybe_misalign(workspace.ptr(), spec, P::Workspace);
    match spec.overlap {
        None => {}
        Some((P::Members, P::RankTokens)) => out.members = out.rank_tokens,
        Some((P::RankTokens, P::Lengths)) => out.rank_tokens = lengths_ptr,
        Some((P::Members, P::Workspace)) => out.members = ws_ptr.cast::<u32>(),
        Some((P::Summary, P::Placements)) => out.summary = out.placements.cast::<skrull_summary>(),
        Some((P::CpGroups, P::Placements)) => out.cp_groups = out.placements.cast(),
        Some(o) => panic!("no such overlap case {o:?}"),
    }
    let mut out_mem = vec![0u64; STRUCT_WORDS];
    // SAFETY: 8-aligned and larger than a skrull_plan_buffers.
    unsafe {
        out_mem
            .as_mut_ptr()
            .cast::<skrull_plan_buffers>()
            .write(out)
    };
    if let Some(off) = spec.out_tail {
        // SAFETY: `off` < 4104, inside `out_mem`.
        unsafe { out_mem.as_mut_ptr().cast::<u8>().add(off).write(1) };
    }
    let cfg_ptr = maybe_misalign(
        cfg_mem.as_mut_ptr().cast::<skrull_config>(),
        spec,
        P::Config,
    );
    let out_ptr = maybe_misalign(
        out_mem.as_mut_ptr().cast::<skrull_plan_buffers>(),
        spec,
        P::Out,
    );
    let n = spec.n.unwrap_or(n_alloc);

    // SAFETY: every pointer is NULL, or valid (possibly misaligned, which the library
    // rejects before any access) for the size it is given; `n` is larger than the lengths
    // only in cases the library rejects (TOO_MANY_SEQUENCES) before reading them.
    let st = unsafe {
        skrull_schedule(
            cfg_ptr,
            lengths_ptr,
            n,
            ws_ptr.cast::<c_void>(),
            ws_given,
            out_ptr,
        )
    };
    assert!(
        !matches!(st, skrull_status::Panic | skrull_status::Internal),
        "{name}: {st:?}"
    );
    assert_eq!(cfg_mem, cfg_before, "{name}: the configuration was written");
    assert_eq!(
        lengths.body(),
        &spec.lengths[..],
        "{name}: lengths were written"
    );
    lengths.guards_intact(&format!("{name}: lengths"));
    workspace.guards_intact(&format!("{name}: workspace"));
    if st != skrull_status::Ok {
        placements.untouched_from(0, &format!("{name}: placements"));
        micro_batches.untouched_from(0, &format!("{name}: micro_batches"));
        members.untouched_from(0, &format!("{name}: members"));
        rank_tokens.untouched_from(0, &format!("{name}: rank_tokens"));
        per_dp.untouched_from(0, &format!("{name}: micro_batches_per_dp"));
        summary.untouched_from(0, &format!("{name}: summary"));
        groups.untouched_from(0, &format!("{name}: cp_groups"));
        return st;
    }
    let s = summary.body()[0];
    let (k, mbs) = (spec.lengths.len(), s.micro_batches as usize);
    placements.untouched_from(k, &format!("{name}: placements"));
    micro_batches.untouched_from(mbs, &format!("{name}: micro_batches"));
    members.untouched_from(k, &format!("{name}: members"));
    rank_tokens.untouched_from(mbs * cp as usize, &format!("{name}: rank_tokens"));
    per_dp.untouched_from(dp as usize, &format!("{name}: micro_batches_per_dp"));
    summary.untouched_from(1, &format!("{name}: summary"));
    // The groups reach the library when not NULL and the struct is large enough to hold them.
    let groups_given = !out.cp_groups.is_null() && spec.out_size as usize >= size_of_val(&out);
    groups.untouched_from(
        if groups_given { k } else { 0 },
        &format!("{name}: cp_groups"),
    );
    // A configuration struct that ends before `subgroups` plans without them.
    let mut read = spec.cfg;
    if read.struct_size as usize <= core::mem::offset_of!(skrull_config, subgroups) {
        read.subgroups = 0;
    }
    // One that ends before the chunking fields plans with their defaults (chunking off).
    let ends_before = |field: usize| read.struct_size as usize <= field;
    if ends_before(core::mem::offset_of!(skrull_config, chunk_size)) {
        read.chunk_size = 0;
    }
    if ends_before(core::mem::offset_of!(skrull_config, chunk_keep)) {
        read.chunk_keep = 1;
    }
    if ends_before(core::mem::offset_of!(skrull_config, chunk_state_permille)) {
        read.chunk_state_permille = 64;
    }
    let cfg = read.to_core().unwrap();
    let plan = CPlan {
        placements: placements.body(),
        micro_batches: micro_batches.body(),
        members: members.body(),
        rank_tokens: rank_tokens.body(),
        per_dp: per_dp.body(),
        summary: &s,
        cp_groups: groups_given.then(|| groups.body()),
    };
    if let Err(e) = check_c_plan(&cfg, &spec.lengths, &plan) {
        panic!("{name}: the plan fails the checker: {e}");
    }
    st
}

fn c_cases() -> Vec<(&'static str, CSpec, skrull_status)> {
    use skrull_status as S;
    let b = base_spec();
    let mut v: Vec<(&'static str, CSpec, skrull_status)> = Vec::new();
    let mut add = |name: &'static str, want: S, f: &dyn Fn(&mut CSpec)| {
        let mut s = b.clone();
        f(&mut s);
        v.push((name, s, want));
    };
    add("the example", S::Ok, &|_| {});
    // NULL in every position.
    for (name, p) in [
        ("NULL config", P::Config),
        ("NULL lengths", P::Lengths),
        ("NULL workspace", P::Workspace),
        ("NULL out", P::Out),
        ("NULL placements", P::Placements),
        ("NULL micro_batches", P::MicroBatches),
        ("NULL members", P::Members),
        ("NULL rank_tokens", P::RankTokens),
        ("NULL micro_batches_per_dp", P::PerDp),
        ("NULL summary", P::Summary),
        ("NULL cp_groups with sub-groups", P::CpGroups),
    ] {
        add(name, S::NullArg, &|s| s.null = vec![p]);
    }
    add("NULL cp_groups without sub-groups", S::Ok, &|s| {
        s.cfg.subgroups = 0;
        s.null = vec![P::CpGroups];
    });
    add("n = 0, NULL cp_groups with sub-groups", S::NullArg, &|s| {
        s.lengths.clear();
        s.null = vec![P::CpGroups];
    });
    add("NULL lengths, n = 0", S::Ok, &|s| {
        s.lengths.clear();
        s.null = vec![P::Lengths];
    });
    add("n = 0, NULL buffers of capacity 0", S::Ok, &|s| {
        s.lengths.clear();
        s.zero_caps = true;
        s.null = vec![P::Placements, P::MicroBatches, P::Members, P::RankTokens];
    });
    add("n = 0, NULL micro_batches_per_dp", S::NullArg, &|s| {
        s.lengths.clear();
        s.null = vec![P::PerDp];
    });
    add("n = 0, NULL workspace", S::NullArg, &|s| {
        s.lengths.clear();
        s.null = vec![P::Workspace];
    });
    add("n = 0, NULL summary", S::NullArg, &|s| {
        s.lengths.clear();
        s.null = vec![P::Summary];
    });
    // Misaligned pointers.
    for (name, p) in [
        ("misaligned config", P::Config),
        ("misaligned lengths", P::Lengths),
        ("misaligned out", P::Out),
        ("misaligned placements", P::Placements),
        ("misaligned micro_batches", P::MicroBatches),
        ("misaligned members", P::Members),
        ("misaligned rank_tokens", P::RankTokens),
        ("misaligned micro_batches_per_dp", P::PerDp),
        ("misaligned summary", P::Summary),
        ("misaligned cp_groups", P::CpGroups),
    ] {
        add(name, S::InvalidArg, &|s| s.misalign = Some(p));
    }
    add(
        "workspace at an odd address (any alignment is fine)",
        S::Ok,
        &|s| {
            s.misalign = Some(P::Workspace);
        },
    );
    // struct_size of the config.
    for (name, size, want) in [
        ("config struct_size 0", 0, S::BadStructSize),
        (
            "config struct_size v1 - 1",
            SKRULL_CONFIG_SIZE_V1 - 1,
            S::BadStructSize,
        ),
        (
            "config struct_size 4097",
            SKRULL_MAX_STRUCT_SIZE + 1,
            S::BadStructSize,
        ),
        ("config struct_size u32::MAX", u32::MAX, S::BadStructSize),
        (
            "config struct_size v1 + 4, zero tail",
            SKRULL_CONFIG_SIZE_V1 + 4,
            S::Ok,
        ),
        (
            "config struct_size 4096, zero tail",
            SKRULL_MAX_STRUCT_SIZE,
            S::Ok,
        ),
    ] {
        add(name, want, &|s| s.cfg.struct_size = size);
    }
    add(
        "config with a nonzero unknown byte",
        S::BadStructSize,
        &|s| {
            s.cfg.struct_size = 128;
            s.cfg_tail = Some(127);
        },
    );
    add(
        "config nonzero byte past struct_size is ignored",
        S::Ok,
        &|s| {
            s.cfg.struct_size = 64;
            s.cfg_tail = Some(64);
        },
    );
    // struct_size of the output buffers, and the reserved field.
    let ob = size_of::<skrull_plan_buffers>() as u32;
    let ob_v1 = skrull::plan::PLAN_BUFFERS_SIZE_V1 as u32;
    let ob_error = core::mem::offset_of!(skrull_plan_buffers, cp_groups) as u32;
    for (name, size, want) in [
        ("out struct_size 0", 0, S::BadStructSize),
        ("out struct_size v1 - 1", ob_v1 - 1, S::BadStructSize),
        // Sub-groups need the groups, which a struct this small has no room for.
        ("out struct_size v1 (no error details)", ob_v1, S::NullArg),
        (
            "out struct_size v1 + error (no cp_groups)",
            ob_error,
            S::NullArg,
        ),
        (
            "out struct_size v1 + error + 4",
            ob_error + 4,
            S::BadStructSize,
        ),
        ("out struct_size current - 8", ob - 8, S::BadStructSize),
        (
            "out struct_size 4097",
            SKRULL_MAX_STRUCT_SIZE + 1,
            S::BadStructSize,
        ),
        ("out struct_size u32::MAX", u32::MAX, S::BadStructSize),
        ("out struct_size v1 + 8, zero tail", ob + 8, S::Ok),
    ] {
        add(name, want, &|s| s.out_size = size);
    }
    for (name, size) in [
        ("out struct_size v1, no sub-groups", ob_v1),
        ("out struct_size v1 + error, no sub-groups", ob_error),
    ] {
        add(name, S::Ok, &|s| {
            s.out_size = size;
            s.cfg.subgroups = 0;
        });
    }
    add("out with a nonzero unknown byte", S::BadStructSize, &|s| {
        s.out_size = 4096;
        s.out_tail = Some(4095);
    });
    add("out _reserved nonzero", S::InvalidArg, &|s| {
        s.out_reserved = 1
    });
    // Option integers: far out of range (new constants may be added at the low end).
    for (name, f) in [
        (
            "policy 99",
            (|s: &mut CSpec| s.cfg.policy = 99) as fn(&mut CSpec),
        ),
        ("policy u32::MAX", |s| s.cfg.policy = u32::MAX),
        ("victim 99", |s| s.cfg.victim = 99),
        ("victim u32::MAX", |s| s.cfg.victim = u32::MAX),
        ("flops 99", |s| s.cfg.flops = 99),
        ("flops u32::MAX", |s| s.cfg.flops = u32::MAX),
        ("shard_padding 99", |s| s.cfg.shard_padding = 99),
        ("shard_padding u32::MAX", |s| s.cfg.shard_padding = u32::MAX),
        ("swiglu 2", |s| s.cfg.model.swiglu = 2),
        ("swiglu u32::MAX", |s| s.cfg.model.swiglu = u32::MAX),
        ("subgroups 2", |s| s.cfg.subgroups = 2),
        ("subgroups u32::MAX", |s| s.cfg.subgroups = u32::MAX),
        ("sync 3", |s| s.cfg.sync = 3),
        ("sync u32::MAX", |s| s.cfg.sync = u32::MAX),
    ] {
        add(name, S::InvalidEnum, &f);
    }
    add("config _reserved nonzero", S::InvalidArg, &|s| {
        s.cfg._reserved = 1
    });
    add(
        "config chunk_keep 0 with chunking on",
        S::InvalidChunking,
        &|s| (s.cfg.chunk_size, s.cfg.chunk_keep) = (8, 0),
    );
    add(
        "config chunkflow with chunking off",
        S::InvalidChunking,
        &|s| s.cfg.policy = skrull::SKRULL_POLICY_CHUNKFLOW,
    );
    add(
        "config struct_size before chunk_size: chunking off, cp_groups optional",
        S::Ok,
        &|s| {
            s.cfg.struct_size = core::mem::offset_of!(skrull_config, chunk_size) as u32;
            (s.cfg.chunk_size, s.cfg.subgroups) = (8, 0);
            s.null = vec![P::CpGroups];
        },
    );
    add(
        "config struct_size before subgroups: they are off, cp_groups optional",
        S::Ok,
        &|s| {
            s.cfg.struct_size = core::mem::offset_of!(skrull_config, subgroups) as u32;
            s.cfg.subgroups = 2;
            s.null = vec![P::CpGroups];
        },
    );
    // DP, CP, BucketSize, model.
    for (name, f, want) in [
        (
            "dp 0",
            (|s: &mut CSpec| s.cfg.dp = 0) as fn(&mut CSpec),
            S::InvalidDp,
        ),
        ("dp max + 1", |s| s.cfg.dp = MAX_DP + 1, S::InvalidDp),
        ("dp u32::MAX", |s| s.cfg.dp = u32::MAX, S::InvalidDp),
        ("dp max", |s| s.cfg.dp = MAX_DP, S::Ok),
        ("cp 0", |s| s.cfg.cp = 0, S::InvalidCp),
        ("cp max + 1", |s| s.cfg.cp = MAX_CP + 1, S::InvalidCp),
        ("cp u32::MAX", |s| s.cfg.cp = u32::MAX, S::InvalidCp),
        ("cp max", |s| s.cfg.cp = MAX_CP, S::Ok),
        ("bucket 0", |s| s.cfg.bucket_tokens = 0, S::InvalidBucket),
        (
            "bucket 2^31",
            |s| s.cfg.bucket_tokens = 1 << 31,
            S::InvalidBucket,
        ),
        (
            "bucket u32::MAX",
            |s| s.cfg.bucket_tokens = u32::MAX,
            S::InvalidBucket,
        ),
        ("bucket max", |s| s.cfg.bucket_tokens = MAX_BUCKET, S::Ok),
        (
            "dp, cp and bucket max",
            |s| (s.cfg.dp, s.cfg.cp, s.cfg.bucket_tokens) = (MAX_DP, MAX_CP, MAX_BUCKET),
            S::Ok,
        ),
        ("hidden 0", |s| s.cfg.model.hidden = 0, S::InvalidModel),
        (
            "hidden u32::MAX",
            |s| s.cfg.model.hidden = u32::MAX,
            S::InvalidModel,
        ),
        (
            "kv_hidden > hidden",
            |s| s.cfg.model.kv_hidden = s.cfg.model.hidden + 1,
            S::InvalidModel,
        ),
        ("ffn 0", |s| s.cfg.model.ffn = 0, S::InvalidModel),
        ("layers 0", |s| s.cfg.model.layers = 0, S::InvalidModel),
        (
            "vocab u32::MAX",
            |s| s.cfg.model.vocab = u32::MAX,
            S::InvalidModel,
        ),
        (
            "largest model",
            |s| s.cfg.model = skrull::skrull_model_shape::from_core(&MAX_MODEL),
            S::Ok,
        ),
    ] {
        add(name, want, &f);
    }
    // Lengths.
    for (name, lengths, want) in [
        ("empty batch", vec![], S::Ok),
        ("length 0", vec![0], S::EmptySequence),
        ("length 0 later", vec![5, 6, 0], S::EmptySequence),
        ("length 1", vec![1], S::Ok),
        (
            "length 2^31 - 1, too long sharded",
            vec![MAX_SEQ_LEN],
            S::SequenceTooLong,
        ),
        ("length 2^31", vec![1 << 31], S::LengthOutOfRange),
        ("length u32::MAX", vec![4, u32::MAX], S::LengthOutOfRange),
        (
            "first bad length wins",
            vec![u32::MAX, 0],
            S::LengthOutOfRange,
        ),
        ("first bad length wins (2)", vec![97, 0], S::SequenceTooLong),
        ("sharded limit", vec![96, 96, 1], S::Ok),
        ("too long sharded", vec![1, 97], S::SequenceTooLong),
        ("fewer sequences than DP ranks", vec![5], S::Ok),
        ("all equal", vec![7; 33], S::Ok),
        ("every sequence at the local budget", vec![24; 17], S::Ok),
        ("max sequences", vec![1; MAX_SEQS], S::Ok),
        (
            "max sequences + 1",
            vec![1; MAX_SEQS + 1],
            S::TooManySequences,
        ),
    ] {
        add(name, want, &|s| s.lengths = lengths.clone());
    }
    add("length 2^31 - 1 fits the largest budget", S::Ok, &|s| {
        s.cfg = skrull_config::from_core(&overflow_cfg(FlopsFormula::Paper));
        s.lengths = vec![MAX_SEQ_LEN, 1, MAX_SEQ_LEN];
    });
    add("max sums, paper FLOPs", S::Ok, &|s| {
        s.cfg = skrull_config::from_core(&overflow_cfg(FlopsFormula::Paper));
        s.lengths = vec![MAX_SEQ_LEN; 8192];
    });
    add("max sums, Megatron FLOPs", S::Ok, &|s| {
        s.cfg = skrull_config::from_core(&overflow_cfg(FlopsFormula::Megatron));
        s.lengths = vec![MAX_SEQ_LEN; 8192];
    });
    add("n = usize::MAX", S::TooManySequences, &|s| {
        s.n = Some(usize::MAX)
    });
    add("n = usize::MAX / 4 + 1", S::TooManySequences, &|s| {
        s.n = Some(usize::MAX / 4 + 1)
    });
    add("micro-batch limit", S::MicroBatchLimit, &|s| {
        (s.cfg.dp, s.cfg.max_micro_batches) = (1, 1);
        s.lengths = vec![96, 96];
    });
    add("zigzag too long", S::SequenceTooLong, &|s| {
        s.cfg.shard_padding = skrull::SKRULL_SHARD_PADDING_ZIGZAG;
        s.cfg.bucket_tokens = 23;
        s.lengths = vec![89];
    });
    // Workspace and outputs one element too small.
    add("workspace one byte short", S::WorkspaceTooSmall, &|s| {
        s.ws_delta = -1
    });
    add("workspace 0 bytes", S::WorkspaceTooSmall, &|s| {
        s.ws_delta = -1_000_000
    });
    add("n = 0, workspace 0 bytes", S::WorkspaceTooSmall, &|s| {
        s.lengths.clear();
        s.ws_delta = -1_000_000;
    });
    for (name, p) in [
        ("placements one short", P::Placements),
        ("micro_batches one short", P::MicroBatches),
        ("members one short", P::Members),
        ("rank_tokens one short", P::RankTokens),
        ("micro_batches_per_dp one short", P::PerDp),
        ("cp_groups one short", P::CpGroups),
    ] {
        add(name, S::OutputTooSmall, &|s| s.short = Some(p));
    }
    add(
        "cp_groups one short without sub-groups",
        S::OutputTooSmall,
        &|s| {
            s.cfg.subgroups = 0;
            s.short = Some(P::CpGroups);
        },
    );
    add(
        "NULL micro_batches_per_dp of capacity 0",
        S::OutputTooSmall,
        &|s| {
            s.lengths.clear();
            s.zero_caps = true;
            s.null = vec![
                P::Placements,
                P::MicroBatches,
                P::Members,
                P::RankTokens,
                P::PerDp,
            ];
            s.short = Some(P::PerDp);
            s.cfg.dp = 1;
        },
    );
    // Overlapping buffers.
    add("members overlap rank_tokens", S::InvalidArg, &|s| {
        s.overlap = Some((P::Members, P::RankTokens));
    });
    add("rank_tokens overlap lengths", S::InvalidArg, &|s| {
        s.overlap = Some((P::RankTokens, P::Lengths));
    });
    add("members overlap the workspace", S::InvalidArg, &|s| {
        s.overlap = Some((P::Members, P::Workspace));
    });
    add("summary overlaps placements", S::InvalidArg, &|s| {
        s.overlap = Some((P::Summary, P::Placements));
    });
    add("cp_groups overlap placements", S::InvalidArg, &|s| {
        s.overlap = Some((P::CpGroups, P::Placements));
    });
    // The documented order: the first problem wins.
    add("option integer before range", S::InvalidEnum, &|s| {
        (s.cfg.policy, s.cfg.dp) = (u32::MAX, 0);
    });
    add("config before out", S::InvalidDp, &|s| {
        s.cfg.dp = 0;
        s.null = vec![P::Out];
    });
    add(
        "config struct size before options",
        S::BadStructSize,
        &|s| {
            (s.cfg.struct_size, s.cfg.policy) = (0, 99);
        },
    );
    add("out before too many", S::NullArg, &|s| {
        s.null = vec![P::Out];
        s.n = Some(usize::MAX);
    });
    add("too many before NULL lengths", S::TooManySequences, &|s| {
        s.null = vec![P::Lengths];
        s.n = Some(MAX_SEQS + 1);
    });
    add("lengths before workspace", S::NullArg, &|s| {
        s.null = vec![P::Lengths];
        s.ws_delta = -1;
    });
    add("workspace before summary", S::WorkspaceTooSmall, &|s| {
        s.ws_delta = -1;
        s.null = vec![P::Summary];
    });
    add("summary before placements", S::NullArg, &|s| {
        s.null = vec![P::Summary];
        s.short = Some(P::Placements);
    });
    add("buffers before the batch", S::OutputTooSmall, &|s| {
        s.short = Some(P::RankTokens);
        s.lengths = vec![0, u32::MAX];
    });
    add("overlap before the batch", S::InvalidArg, &|s| {
        s.overlap = Some((P::Members, P::RankTokens));
        s.lengths = vec![0];
    });
    v
}

#[test]
#[cfg_attr(miri, ignore)] // 65,536-sequence cases
fn c_schedule_matrix() {
    let cases = c_cases();
    assert!(cases.len() > 100);
    let mut failures = Vec::new();
    for (name, spec, want) in &cases {
        // Every policy of the core, by its C constant: the statuses do not depend on it.
        for p in Policy::ALL {
            let policy = skrull_config::from_core(&base_cfg().with_policy(p)).policy;
            // chunkflow needs chunking, which needs cp_groups: the cases that withhold them
            // (a NULL buffer, a struct that ends before them) are for the other policies.
            let withheld = spec.null.contains(&P::CpGroups)
                || (spec.cfg.struct_size as usize) < size_of::<skrull_config>()
                || (spec.out_size as usize) < size_of::<skrull_plan_buffers>();
            if p == Policy::ChunkFlow && withheld {
                continue;
            }
            let mut s = spec.clone();
            if s.cfg.policy == skrull::SKRULL_POLICY_SKRULL {
                s.cfg.policy = policy;
                // chunkflow needs chunking on: chunks longer than any sequence (so nothing
                // is chunked and no chunk is over budget; bins of any length).
                if p == Policy::ChunkFlow && s.cfg.chunk_size == 0 {
                    s.cfg.chunk_size = u32::MAX;
                }
            }
            let got = run_c(name, &s);
            // `balanced` plans on time, not FLOPs: it refuses another FLOPs formula.
            let refuses = s.cfg.policy == skrull::SKRULL_POLICY_BALANCED
                && s.cfg.flops != skrull::SKRULL_FLOPS_PAPER
                && *want == skrull_status::Ok;
            let want = if refuses {
                skrull_status::UnsupportedOption
            } else {
                *want
            };
            if got != want {
                failures.push(format!(
                    "{name} (policy {policy}): got {got:?}, want {want:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The C statuses for well-formed calls match the Rust API's errors one for one.
#[test]
#[cfg_attr(miri, ignore)]
fn c_statuses_map_the_rust_errors() {
    for c in rust_cases() {
        if c.short.is_some() || c.lengths.len() > 4096 {
            continue;
        }
        let spec = CSpec {
            cfg: skrull_config::from_core(&c.cfg),
            lengths: c.lengths.clone(),
            ..base_spec()
        };
        let want = c
            .want
            .map_or_else(skrull_status::from, |()| skrull_status::Ok);
        assert_eq!(run_c(c.name, &spec), want, "{}", c.name);
    }
}

// ---------------------------------------------------------------------------------------
// C ABI: the other entry points
// ---------------------------------------------------------------------------------------

#[test]
fn c_plan_sizes_and_workspace_size_matrix() {
    use skrull_status as S;
    let cases: [(&str, usize, u32, u32, bool, S); 12] = [
        ("ok", 10, 2, 4, false, S::Ok),
        ("n 0", 0, 1, 1, false, S::Ok),
        ("max everything", MAX_SEQS, MAX_DP, MAX_CP, false, S::Ok),
        ("NULL out", 10, 2, 4, true, S::NullArg),
        ("dp 0", 10, 0, 4, false, S::InvalidDp),
        ("dp max + 1", 10, MAX_DP + 1, 4, false, S::InvalidDp),
        ("cp 0", 10, 2, 0, false, S::InvalidCp),
        ("cp u32::MAX", 10, 2, u32::MAX, false, S::InvalidCp),
        ("n max + 1", MAX_SEQS + 1, 2, 4, false, S::TooManySequences),
        ("n usize::MAX", usize::MAX, 2, 4, false, S::TooManySequences),
        ("dp before cp", 10, 0, 0, false, S::InvalidDp),
        ("dp before n", usize::MAX, 0, 4, false, S::InvalidDp),
    ];
    for (name, n, dp, cp, null_out, want) in cases {
        let mut out = Guarded::new(
            1,
            skrull_sizes {
                workspace_bytes: 7,
                placements: 7,
                micro_batches: 7,
                members: 7,
                rank_tokens: 7,
                micro_batches_per_dp: 7,
            },
        );
        let p = if null_out { null_mut() } else { out.ptr() };
        // SAFETY: `p` is NULL or one writable skrull_sizes.
        let st = unsafe { skrull_plan_sizes(n, dp, cp, p) };
        assert_eq!(st, want, "{name}");
        // SAFETY: no preconditions.
        let ws = unsafe { skrull_workspace_size(n, dp, cp) };
        if want == S::Ok || null_out {
            assert!(ws > 0, "{name}: workspace size 0 for a valid layout");
        } else {
            assert_eq!(ws, 0, "{name}: workspace size for an invalid layout");
        }
        if st == S::Ok {
            let s = out.body()[0];
            assert_eq!(s.workspace_bytes, ws, "{name}");
            assert_eq!(
                (
                    s.placements,
                    s.micro_batches,
                    s.members,
                    s.rank_tokens,
                    s.micro_batches_per_dp
                ),
                (n, n, n, n * cp as usize, dp as usize),
                "{name}"
            );
            out.guards_intact(&format!("{name}: sizes"));
        } else {
            out.untouched_from(0, &format!("{name}: sizes"));
        }
    }
}

#[test]
fn c_config_initialisers_matrix() {
    let fill = skrull_config {
        struct_size: FILL,
        dp: FILL,
        cp: FILL,
        bucket_tokens: FILL,
        policy: FILL,
        victim: FILL,
        flops: FILL,
        shard_padding: FILL,
        max_micro_batches: FILL,
        model: skrull::skrull_model_shape {
            hidden: FILL,
            kv_hidden: FILL,
            ffn: FILL,
            layers: FILL,
            vocab: FILL,
            swiglu: FILL,
        },
        pad_multiple: FILL,
        pad_local: FILL,
        lockstep: FILL,
        cost_model: 0x5A5A_5A5A as *const skrull::skrull_cost_model,
        subgroups: FILL,
        fill_empty: FILL,
        micro_batches: FILL,
        chunk_size: FILL,
        chunk_keep: FILL,
        chunk_state_permille: FILL,
        sync: FILL,
        _reserved: FILL,
    };
    // (name, preset or None for skrull_config_default, NULL out, status)
    let cases: [(&str, Option<u32>, bool, skrull_status); 8] = [
        ("default", None, false, skrull_status::Ok),
        ("default NULL", None, true, skrull_status::NullArg),
        (
            "preset 0.5B",
            Some(SKRULL_PRESET_QWEN2_5_0_5B),
            false,
            skrull_status::Ok,
        ),
        (
            "preset 7B",
            Some(SKRULL_PRESET_QWEN2_5_7B),
            false,
            skrull_status::Ok,
        ),
        ("preset 99", Some(99), false, skrull_status::InvalidEnum),
        (
            "preset u32::MAX",
            Some(u32::MAX),
            false,
            skrull_status::InvalidEnum,
        ),
        (
            "preset NULL",
            Some(SKRULL_PRESET_QWEN2_5_0_5B),
            true,
            skrull_status::NullArg,
        ),
        (
            "NULL before unknown preset",
            Some(99),
            true,
            skrull_status::NullArg,
        ),
    ];
    // Each case through the version-1 initialisers (which write the first 60 bytes) and the
    // sized ones (which write what `sizeof` says).
    let full = size_of::<skrull_config>();
    for sized in [false, true] {
        for (name, preset, null_out, want) in cases {
            let mut out = Guarded::new(1, fill);
            let p = if null_out { null_mut() } else { out.ptr() };
            // SAFETY: `p` is NULL or one writable skrull_config.
            let st = unsafe {
                match (preset, sized) {
                    (None, false) => skrull_config_default(p),
                    (Some(k), false) => skrull_config_preset(k, p),
                    (None, true) => skrull_config_init(p, full),
                    (Some(k), true) => skrull_config_preset_init(k, p, full),
                }
            };
            assert_eq!(st, want, "{name}");
            if st == skrull_status::Ok {
                let c = out.body()[0];
                let size = if sized {
                    full
                } else {
                    SKRULL_CONFIG_SIZE_V1 as usize
                };
                assert_eq!(c.struct_size as usize, size, "{name}");
                if sized {
                    assert!(
                        c.to_core().is_ok_and(|cfg| cfg.validate().is_ok()),
                        "{name}"
                    );
                    // Sub-groups, chunking and another synchronisation are opt-in.
                    assert_eq!((c.subgroups, c.chunk_size, c.sync), (0, 0, 0), "{name}");
                    assert_eq!(c._reserved, 0, "{name}");
                } else {
                    // The fields past version 1 keep the caller's bytes.
                    assert_eq!((c.pad_multiple, c.lockstep), (FILL, FILL), "{name}");
                    assert_eq!((c.subgroups, c.chunk_size), (FILL, FILL), "{name}");
                    assert_eq!((c.sync, c._reserved), (FILL, FILL), "{name}");
                }
                out.guards_intact(&format!("{name}: config"));
            } else {
                out.untouched_from(0, &format!("{name}: config"));
            }
        }
    }
}

#[test]
fn c_status_str_names_every_number() {
    for code in [0u32, 1, 6, 7, 9, 19, 20, 253, 254, 255, 256, u32::MAX] {
        // SAFETY: any value is accepted.
        let p = unsafe { skrull_status_str(code) };
        assert!(!p.is_null(), "{code}");
        // SAFETY: non-null, NUL-terminated, static (documented).
        let s = unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert!(!s.is_empty(), "{code}");
        match skrull_status::from_u32(code) {
            Some(st) => assert_eq!(s, st.message().to_str().unwrap(), "{code}"),
            None => assert_eq!(s, "unknown status", "{code}"),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)] // a 65,537-sequence case
fn c_dacp_place_matrix() {
    use skrull_status as S;
    let base = skrull_config::from_core(&base_cfg());
    let one = skrull_config::from_core(&Config::new(1, 1, 10, ModelShape::QWEN2_5_0_5B));
    let ex: Vec<u32> = vec![1, 2, 2, 3, 4, 6, 9, 14, 30];
    // (name, config, lengths, NULL which (0 config, 1 lengths, 2 workspace, 3 cp_ranks,
    //  4 summary, else none), workspace shortfall, cp_ranks shortfall, status)
    let cases: Vec<(&str, skrull_config, Vec<u32>, u8, usize, usize, S)> = vec![
        ("ok", base, ex.clone(), 9, 0, 0, S::Ok),
        ("empty", base, vec![], 9, 0, 0, S::Ok),
        ("NULL config", base, ex.clone(), 0, 0, 0, S::NullArg),
        ("NULL lengths", base, ex.clone(), 1, 0, 0, S::NullArg),
        ("NULL workspace", base, ex.clone(), 2, 0, 0, S::NullArg),
        ("NULL cp_ranks", base, ex.clone(), 3, 0, 0, S::NullArg),
        ("NULL summary", base, ex.clone(), 4, 0, 0, S::NullArg),
        (
            "workspace one short",
            base,
            ex.clone(),
            9,
            1,
            0,
            S::WorkspaceTooSmall,
        ),
        (
            "cp_ranks one short",
            base,
            ex.clone(),
            9,
            0,
            1,
            S::OutputTooSmall,
        ),
        (
            "policy u32::MAX",
            skrull_config {
                policy: u32::MAX,
                ..base
            },
            ex.clone(),
            9,
            0,
            0,
            S::InvalidEnum,
        ),
        (
            "victim 99",
            skrull_config { victim: 99, ..base },
            ex.clone(),
            9,
            0,
            0,
            S::InvalidEnum,
        ),
        (
            "struct_size 0",
            skrull_config {
                struct_size: 0,
                ..base
            },
            ex.clone(),
            9,
            0,
            0,
            S::BadStructSize,
        ),
        (
            "cp 0",
            skrull_config { cp: 0, ..base },
            ex.clone(),
            9,
            0,
            0,
            S::InvalidCp,
        ),
        (
            "bucket u32::MAX",
            skrull_config {
                bucket_tokens: u32::MAX,
                ..base
            },
            ex.clone(),
            9,
            0,
            0,
            S::InvalidBucket,
        ),
        ("length 0", base, vec![3, 0], 9, 0, 0, S::EmptySequence),
        (
            "length u32::MAX",
            base,
            vec![u32::MAX],
            9,
            0,
            0,
            S::LengthOutOfRange,
        ),
        (
            "too long sharded",
            base,
            vec![97],
            9,
            0,
            0,
            S::SequenceTooLong,
        ),
        ("does not fit", one, vec![6, 6], 9, 0, 0, S::DacpFailed),
        (
            "too many",
            base,
            vec![1; MAX_SEQS + 1],
            9,
            0,
            0,
            S::TooManySequences,
        ),
    ];
    for (name, cfg, lengths, null_which, ws_short, out_short, want) in cases {
        let n = lengths.len();
        // SAFETY: no preconditions.
        let wsb = unsafe { skrull_workspace_size(n.min(MAX_SEQS), 2, 4) };
        let mut ws = Guarded::new(wsb, 0x5Au8);
        let mut ranks = Guarded::new(n, 7i32);
        let mut sum = Guarded::new(
            1,
            skrull_dacp_summary {
                sharded: FILL,
                rollbacks: FILL,
            },
        );
        let lens = Guarded::with(&lengths, 0xA5A5_A5A5u32);
        let nul = |k: u8, p: *mut u8| if null_which == k { null_mut() } else { p };
        // SAFETY: every pointer is NULL or valid for the length it is given.
        let st = unsafe {
            skrull_dacp_place(
                if null_which == 0 { null() } else { &cfg },
                if null_which == 1 {
                    null()
                } else {
                    lens.body().as_ptr()
                },
                n,
                nul(2, ws.ptr()).cast::<c_void>(),
                wsb - ws_short,
                nul(3, ranks.ptr().cast::<u8>()).cast::<i32>(),
                n - out_short,
                nul(4, sum.ptr().cast::<u8>()).cast::<skrull_dacp_summary>(),
            )
        };
        assert_eq!(st, want, "dacp {name}");
        assert_eq!(lens.body(), &lengths[..], "{name}: lengths written");
        lens.guards_intact(&format!("{name}: lengths"));
        ws.guards_intact(&format!("{name}: workspace"));
        if st == S::Ok {
            ranks.guards_intact(&format!("{name}: cp_ranks"));
            sum.guards_intact(&format!("{name}: summary"));
            let sharded = ranks.body().iter().filter(|&&r| r == -1).count() as u32;
            assert_eq!(sum.body()[0].sharded, sharded, "{name}");
        } else {
            ranks.untouched_from(0, &format!("{name}: cp_ranks"));
            sum.untouched_from(0, &format!("{name}: summary"));
        }
    }
}
