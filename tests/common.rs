//! Shared helpers for the integration tests: random cases and an independent plan checker
//! that trusts nothing but the placements.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};

use quickcheck::{Arbitrary, Gen};
use skrull_core::{Config, ModelShape, Plan, Policy, Victim};

/// A random configuration and batch that always passes validation.
#[derive(Debug, Clone)]
pub struct Case {
    pub cfg: Config,
    pub lengths: Vec<u32>,
}

fn pick<T: Copy>(g: &mut Gen, xs: &[T]) -> T {
    xs[usize::arbitrary(g) % xs.len()]
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let dp = pick(g, &[1u32, 1, 2, 3, 4, 5, 8, 16]);
        let cp = pick(g, &[1u32, 2, 3, 4, 7, 8, 16]);
        let bucket = pick(g, &[1u32, 2, 3, 7, 10, 64, 100, 1000, 4096, 26 * 1024]);
        let model = pick(g, &[ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B]);
        let mut cfg = Config::new(dp, cp, bucket, model);
        cfg.victim = pick(g, &[Victim::Shortest, Victim::Longest]);
        cfg.flops = pick(
            g,
            &[
                skrull_core::FlopsFormula::Paper,
                skrull_core::FlopsFormula::Megatron,
            ],
        );
        cfg.shard_padding = pick(
            g,
            &[
                skrull_core::ShardPadding::None,
                skrull_core::ShardPadding::Zigzag,
            ],
        );
        cfg.pad_multiple = pick(g, &[1u32, 1, 1, 2, 4, 8, 16, 12]);
        cfg.pad_local = bool::arbitrary(g);
        cfg.lockstep = bool::arbitrary(g);
        // The longest length whose shard fits the budget. Zigzag padding charges at least 2
        // tokens per rank, so a budget of 1 takes no sequence at all: fall back to no padding.
        let fits = |cfg: &Config| {
            (1..=u64::from(cp) * u64::from(bucket))
                .rev()
                .find(|&s| u64::from(cfg.shard_tokens(s as u32)) <= u64::from(bucket))
                .unwrap_or(0) as u32
        };
        let mut max_len = fits(&cfg);
        if max_len == 0 {
            cfg.shard_padding = skrull_core::ShardPadding::None;
            cfg.pad_multiple = 1;
            max_len = fits(&cfg);
        }
        let n = usize::arbitrary(g) % 120;
        let shape = u8::arbitrary(g) % 6;
        let mut lengths: Vec<u32> = (0..n)
            .map(|_| {
                let r = u32::arbitrary(g);
                match shape {
                    // Long tail: mostly short, a few near the sharded limit.
                    0 | 1 => {
                        if r % 10 == 0 {
                            1 + r % max_len
                        } else {
                            1 + r % max_len.min(bucket).max(1)
                        }
                    }
                    // Uniform over everything that fits sharded.
                    2 => 1 + r % max_len,
                    // Tiny sequences.
                    3 => 1 + r % 4.min(max_len),
                    // Exactly at the local budget or at the sharded limit.
                    4 => pick(g, &[bucket.min(max_len), max_len]),
                    // All equal.
                    _ => 0,
                }
            })
            .collect();
        if shape == 5 {
            let v = 1 + u32::arbitrary(g) % max_len;
            lengths.iter_mut().for_each(|x| *x = v);
        }
        Case { cfg, lengths }
    }

    /// A bounded shrink: halves of the batch, single removals on small batches, and all
    /// lengths halved. Shrinking only lowers lengths, so every candidate stays feasible.
    fn shrink(&self) -> Box<dyn Iterator<Item = Case>> {
        let cfg = self.cfg;
        let v = &self.lengths;
        let n = v.len();
        let mut out: Vec<Vec<u32>> = Vec::new();
        if n >= 2 {
            out.push(v[..n / 2].to_vec());
            out.push(v[n / 2..].to_vec());
        }
        if n <= 16 {
            for i in 0..n {
                let mut w = v.clone();
                w.remove(i);
                out.push(w);
            }
        }
        if v.iter().any(|&x| x > 1) {
            out.push(v.iter().map(|&x| (x / 2).max(1)).collect());
        }
        Box::new(out.into_iter().map(move |lengths| Case { cfg, lengths }))
    }
}

/// Checks a plan from scratch: every sequence exactly once, ranks in range, micro-batch
/// indices dense per DP rank, every GPU at most BucketSize, every micro-batch at most C x N,
/// the recorded token loads equal to the recount. Returns a description of the first problem.
pub fn independent_check(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> Result<(), String> {
    let n = lengths.len();
    let (dp, cp, c) = (cfg.dp, cfg.cp, u64::from(cfg.bucket));
    if plan.placements().len() != n {
        return Err(format!(
            "{} placements for {n} sequences",
            plan.placements().len()
        ));
    }
    // Recount from placements only.
    let mut gpu: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
    let mut mb_total: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let mut used_mbs: BTreeMap<u32, HashSet<u32>> = BTreeMap::new();
    for (i, p) in plan.placements().iter().enumerate() {
        if p.dp_rank >= dp {
            return Err(format!("seq {i}: dp rank {} >= {dp}", p.dp_rank));
        }
        let len = u64::from(lengths[i]);
        used_mbs.entry(p.dp_rank).or_default().insert(p.micro_batch);
        *mb_total.entry((p.dp_rank, p.micro_batch)).or_default() += len;
        if p.cp_rank == -1 {
            let share = u64::from(cfg.shard_tokens(lengths[i]));
            for r in 0..cp {
                *gpu.entry((p.dp_rank, p.micro_batch, r)).or_default() += share;
            }
        } else if p.cp_rank >= 0 && (p.cp_rank as u32) < cp {
            *gpu.entry((p.dp_rank, p.micro_batch, p.cp_rank as u32))
                .or_default() += u64::from(cfg.local_tokens(lengths[i]));
        } else {
            return Err(format!("seq {i}: cp rank {} out of range", p.cp_rank));
        }
    }
    for (&(d, m, r), &t) in &gpu {
        if t > c {
            return Err(format!("dp {d} mb {m} cp {r}: {t} tokens > bucket {c}"));
        }
    }
    for (&(d, m), &t) in &mb_total {
        if t > c * u64::from(cp) {
            return Err(format!("dp {d} mb {m}: {t} tokens > C x N"));
        }
    }
    // Micro-batch indices of each DP rank are 0..count, and count matches the plan (with
    // lockstep: every rank declares the most any rank uses).
    let most = (0..dp)
        .map(|d| used_mbs.get(&d).map_or(0, HashSet::len) as u32)
        .max()
        .unwrap_or(0);
    for d in 0..dp {
        let used = used_mbs.get(&d).map_or(0, HashSet::len) as u32;
        let declared = plan.micro_batches_per_dp()[d as usize];
        let expected = if cfg.lockstep { most } else { used };
        if declared != expected {
            return Err(format!(
                "dp {d}: {used} micro-batches used, {declared} declared"
            ));
        }
        if let Some(set) = used_mbs.get(&d)
            && (0..used).any(|m| !set.contains(&m))
        {
            return Err(format!("dp {d}: micro-batch indices are not dense"));
        }
    }
    // The grouped view lists every sequence once, under its own micro-batch, with the loads
    // the recount gives.
    let mut seen = vec![false; n];
    for (g, mb) in plan.micro_batches().iter().enumerate() {
        for &s in plan.members_of(mb) {
            let s = s as usize;
            if s >= n || seen[s] {
                return Err(format!("seq {s} listed twice or out of range"));
            }
            seen[s] = true;
            let p = plan.placements()[s];
            if (p.dp_rank, p.micro_batch) != (mb.dp_rank, mb.index) {
                return Err(format!("seq {s} listed under the wrong micro-batch"));
            }
        }
        for r in 0..cp {
            let want = gpu.get(&(mb.dp_rank, mb.index, r)).copied().unwrap_or(0);
            if u64::from(plan.rank_tokens(g)[r as usize]) != want {
                return Err(format!(
                    "micro-batch {g} cp {r}: recorded load differs from recount"
                ));
            }
        }
    }
    if let Some(s) = seen.iter().position(|&x| !x) {
        return Err(format!("seq {s} is not listed in any micro-batch"));
    }
    if cfg.max_micro_batches != 0
        && plan
            .micro_batches_per_dp()
            .iter()
            .any(|&m| m > cfg.max_micro_batches)
    {
        return Err("micro-batch limit exceeded".into());
    }
    Ok(())
}

/// `cfg` under `policy`, with the options that policy refuses reset to their defaults
/// (`balanced` plans on time and takes no FLOPs formula).
pub fn with_policy(cfg: &Config, policy: Policy) -> Config {
    let mut c = cfg.with_policy(policy);
    if policy == Policy::Balanced {
        c.flops = skrull_core::FlopsFormula::default();
    }
    c
}

/// Every policy of the core.
pub const POLICIES: [Policy; Policy::ALL.len()] = Policy::ALL;

/// Quickcheck case count: `QUICKCHECK_TESTS` or 10,000.
pub fn cases() -> u64 {
    std::env::var("QUICKCHECK_TESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}
