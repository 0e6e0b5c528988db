//! Prints one digest of the plans of a few hundred seeded random batches over every policy and
//! many configurations (dp 1..64, cp 1..16, both victims, both paddings, both FLOPs formulas,
//! with and without a micro-batch limit). An optimisation that leaves the scheduler's output
//! unchanged leaves the digest unchanged.
//!
//! `cargo run --release -p skrull-benches --example plan_digest [cases]`; with
//! `DIGEST_POLICY=name` it digests that one policy instead (e.g. `balanced`, whose plans the
//! fixed list leaves out).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use skrull_core::{
    Config, Error, FlopsFormula, ModelShape, Policy, ShardPadding, Victim, policy::dacp,
};
use skrull_kit::OwnedBuffers;
use skrull_kit::sample::{Rng, TABLE1};

/// A fixed list (not `Policy::ALL`, which grows), so the digest compares across versions.
const POLICIES: [Policy; 4] = [
    Policy::Skrull,
    Policy::DeepSpeed,
    Policy::Packed,
    Policy::RoundRobin,
];

/// An error as the digest has always hashed it: its `Debug` text without the bound a range
/// error carries (a constant of the variant, not a property of the batch), so the digest
/// compares with versions whose errors did not carry it.
fn error_text(e: &Error) -> String {
    match *e {
        Error::InvalidDp { dp, .. } => format!("InvalidDp {{ dp: {dp} }}"),
        Error::InvalidCp { cp, .. } => format!("InvalidCp {{ cp: {cp} }}"),
        Error::InvalidBucket { bucket, .. } => format!("InvalidBucket {{ bucket: {bucket} }}"),
        Error::InvalidPadMultiple { pad_multiple, .. } => {
            format!("InvalidPadMultiple {{ pad_multiple: {pad_multiple} }}")
        }
        Error::LengthOutOfRange { index, len, .. } => {
            format!("LengthOutOfRange {{ index: {index}, len: {len} }}")
        }
        Error::Unsupported { policy, option } => match Policy::from_name(policy) {
            Some(p) => format!("Unsupported {{ policy: {p:?}, option: {option:?} }}"),
            None => format!("{e:?}"),
        },
        _ => format!("{e:?}"),
    }
}

fn main() {
    let cases: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let policies: Vec<Policy> = match std::env::var("DIGEST_POLICY") {
        Err(_) => POLICIES.to_vec(),
        Ok(name) => match Policy::from_name(&name) {
            Some(p) => vec![p],
            None => {
                eprintln!("DIGEST_POLICY: unknown policy {name}");
                std::process::exit(2);
            }
        },
    };
    let mut all = DefaultHasher::new();
    let (mut ok, mut err, mut mbs, mut rollbacks) = (0u64, 0u64, 0u64, 0u64);
    for case in 0..cases {
        let mut rng = Rng::new(0x5EED_0000 + case);
        let dp = if case % 50 == 49 {
            1 + rng.below(1024) as u32
        } else {
            1 + rng.below(64) as u32
        };
        let cp = 1 + rng.below(16) as u32;
        let n = match rng.below(if case % 50 == 49 { 5 } else { 4 }) {
            4 => 1 + rng.below(20_000) as usize,
            0 => 1 + rng.below(16) as usize,
            1 => 1 + rng.below(300) as usize,
            _ => 1 + rng.below(3000) as usize,
        };
        // Lengths: a Table 1 dataset or uniform, clipped to a random context.
        let bits = 6 + rng.below(12);
        let clip = 1 + rng.below(1 << bits) as u32;
        let kind = rng.below(5) as usize;
        let lengths: Vec<u32> = (0..n)
            .map(|_| match kind {
                3 => 1 + rng.below(u64::from(clip)) as u32,
                // Wide lengths (three radix passes), sometimes all equal.
                4 if case % 7 == 0 => 1 << 30,
                4 => 1 + rng.below(i32::MAX as u64) as u32,
                k => TABLE1[k].sample(&mut rng, clip),
            })
            .collect();
        let longest = lengths.iter().copied().max().unwrap_or(1);
        let padding = if rng.below(2) == 0 {
            ShardPadding::None
        } else {
            ShardPadding::Zigzag
        };
        // Bucket from just feasible (many rollbacks, many micro-batches) to roomy.
        let min_bucket = match padding {
            ShardPadding::None => longest.div_ceil(cp),
            ShardPadding::Zigzag => 2 * longest.div_ceil(2 * cp),
        };
        let bucket = match rng.below(4) {
            0 => min_bucket,
            1 => min_bucket + rng.below(u64::from(min_bucket)) as u32,
            2 => longest.max(min_bucket) + rng.below(u64::from(longest) + 1) as u32,
            _ => (min_bucket.saturating_mul(1 + rng.below(8) as u32)).max(1),
        };
        let model = if rng.below(2) == 0 {
            ModelShape::QWEN2_5_0_5B
        } else {
            ModelShape::QWEN2_5_7B
        };
        let max_mb = if rng.below(5) == 0 {
            1 + rng.below(8) as u32
        } else {
            0
        };
        let flops = if rng.below(2) == 0 {
            FlopsFormula::Paper
        } else {
            FlopsFormula::Megatron
        };
        for victim in [Victim::Shortest, Victim::Longest] {
            for &policy in &policies {
                let mut cfg = Config::new(dp, cp, bucket, model)
                    .with_policy(policy)
                    .with_victim(victim);
                cfg.shard_padding = padding;
                cfg.max_micro_batches = max_mb;
                // `balanced` plans on time and refuses another FLOPs formula.
                cfg.flops = if policy == Policy::Balanced {
                    FlopsFormula::Paper
                } else {
                    flops
                };
                let mut h = DefaultHasher::new();
                let mut bufs = OwnedBuffers::for_batch(n, &cfg);
                match bufs.schedule(&cfg, &lengths) {
                    Ok(plan) => {
                        if std::env::var("DIGEST_CASE").ok() == Some(case.to_string()) {
                            eprintln!("{cfg:?} n={n}");
                            eprintln!("{:?}", plan.summary());
                            eprintln!("{:?}", plan.micro_batches_per_dp());
                            for (i, p) in plan.placements().iter().enumerate() {
                                println!(
                                    "{i} {} {} {} {}",
                                    lengths[i], p.dp_rank, p.micro_batch, p.cp_rank
                                );
                            }
                        }
                        ok += 1;
                        mbs += u64::from(plan.summary().micro_batches);
                        rollbacks += u64::from(plan.summary().rollbacks);
                        plan.placements().hash(&mut h);
                        plan.micro_batches().hash(&mut h);
                        plan.members().hash(&mut h);
                        plan.micro_batches_per_dp().hash(&mut h);
                        // The summary's fields of before chunking, in order (what its derived
                        // `Hash` fed the digest then), so the digest compares across versions;
                        // no digested policy chunks.
                        let s = plan.summary();
                        assert_eq!(s.chunked, 0);
                        (s.micro_batches, s.sharded, s.rollbacks).hash(&mut h);
                        (s.peak_rank_tokens, s.total_tokens).hash(&mut h);
                        for g in 0..plan.micro_batches().len() {
                            plan.rank_tokens(g).hash(&mut h);
                        }
                    }
                    Err(e) => {
                        err += 1;
                        error_text(&e).hash(&mut h);
                    }
                }
                let hv = h.finish();
                if std::env::var_os("DIGEST_VERBOSE").is_some() {
                    println!("{case} {victim:?} {hv:016x}");
                }
                hv.hash(&mut all);
            }
            // DACP alone on the first (up to) 64 sequences.
            let cfg = Config::new(1, cp, bucket, model).with_victim(victim);
            let mb = &lengths[..n.min(64)];
            let (mut order, mut out) = (vec![0u32; mb.len()], vec![0i32; mb.len()]);
            match skrull_core::Setup::new(&cfg)
                .and_then(|s| dacp::place(&s, mb, &mut order, &mut out))
            {
                Ok(o) => (o.sharded, o.rollbacks, &out).hash(&mut all),
                Err(e) => error_text(&e).hash(&mut all),
            }
        }
    }
    println!(
        "cases {cases} plans ok {ok} err {err} micro-batches {mbs} rollbacks {rollbacks} digest {:016x}",
        all.finish()
    );
}
