//! The random cases of the property tests: a quickcheck [`Case`] (a configuration and a batch
//! that always pass validation), the policies to run them under and the case count.

use quickcheck::{Arbitrary, Gen};
use skrull_core::{Chunking, Config, ModelShape, Policy, Victim};

/// A random configuration and batch that always passes validation.
#[derive(Debug, Clone)]
pub struct Case {
    /// The configuration.
    pub cfg: Config,
    /// The batch: every length fits `cfg` sharded.
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
        cfg.fill_empty = bool::arbitrary(g);
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

/// `cfg` under `policy`, with the options that policy refuses reset to their defaults
/// (`balanced` plans on time and takes no FLOPs formula) and those it needs set (`chunkflow`
/// needs chunking on: [`chunking_for`] unless `cfg` has it on).
pub fn with_policy(cfg: &Config, policy: Policy) -> Config {
    let mut c = cfg.with_policy(policy);
    if policy == Policy::Balanced {
        c.flops = skrull_core::FlopsFormula::default();
    }
    if policy == Policy::ChunkFlow && !c.chunking.is_on() {
        c.chunking = chunking_for(&c);
    }
    c
}

/// Chunking under which every batch `cfg` accepts runs chunked without exceeding BucketSize:
/// chunks of half the longest sequence that fits sharded (at least 1 token), K = 1, and the
/// default K/V state charge unless the longest such sequence would then be over budget on
/// the whole group (tiny buckets), where the state is not charged. With K = 1 the peak is one
/// full chunk's share plus the state, which grows with the length, so the longest sequence is
/// the one to test.
pub fn chunking_for(cfg: &Config) -> Chunking {
    let max_len = cfg.budget().max_sharded_len();
    let mut c = *cfg;
    c.chunking = Chunking::new((max_len / 2).max(1), 1);
    if crate::check::chunked_peak(&c, max_len, cfg.cp) > u64::from(cfg.bucket) {
        c.chunking.state_permille = 0;
    }
    c.chunking
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
