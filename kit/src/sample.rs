//! Seeded, platform-independent length samplers (integer RNG, `libm` for the few floats).
//!
//! [`Dataset`] names every distribution the simulator draws from: the paper's Table 1 CDFs
//! (`wikipedia`, `lmsys`, `chatqa2`; log-uniform inside each interval), MagiAttention's binned
//! ChatQA2-attributed histogram (`chatqa2-hist`), 191 real LMSYS-Chat-1M conversation lengths
//! drawn with replacement (`lmsys-real`), and the fitted or assumed mixtures of
//! `data/length_models.json` (`lmsys-model`, `wikipedia-model`, `llama3-sft`, `longalpaca`,
//! `chatqa2-model`). Every draw is clipped at a limit the caller states (the simulator uses the
//! training context, 128K, and `N x C`, beyond which nothing fits even sharded).
//!
//! The numbers are embedded here; nothing is read from disk at run time.

#[path = "../../core/src/test_support/splitmix.rs"]
mod splitmix;

/// SplitMix64 (the one implementation, shared with core's unit tests): the same seed gives the
/// same stream on every platform.
pub use splitmix::SplitMix64 as Rng;

/// Draws log-uniformly in `[lo, hi]` (both at least 1), as an integer.
pub fn log_uniform(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    let (lo, hi) = (lo.max(1), hi.max(lo.max(1)));
    let (a, b) = (libm::log(f64::from(lo)), libm::log(f64::from(hi) + 1.0));
    let x = libm::exp(a + rng.unit() * (b - a));
    (libm::floor(x) as u32).clamp(lo, hi)
}

/// A distribution given as cumulative shares below increasing edges (the paper's Table 1).
#[derive(Debug, Clone, Copy)]
pub struct Table1Cdf {
    /// Name used on the command line.
    pub name: &'static str,
    /// Shortest sequence.
    pub min_tokens: u32,
    /// `(edge, share of sequences shorter than edge)`, increasing.
    pub points: [(u32, f64); 5],
    /// Longest sequence the paper reports.
    pub max_tokens: u32,
}

const K: u32 = 1024;

/// Table 1 of the Skrull paper (K = 1024 tokens).
pub const TABLE1: [Table1Cdf; 3] = [
    Table1Cdf {
        name: "wikipedia",
        min_tokens: 16,
        points: [
            (K, 0.8788),
            (4 * K, 0.9934),
            (8 * K, 0.9992),
            (32 * K, 0.9999),
            (128 * K, 1.0),
        ],
        max_tokens: 79_872,
    },
    Table1Cdf {
        name: "lmsys",
        min_tokens: 16,
        points: [
            (K, 0.8712),
            (4 * K, 0.9935),
            (8 * K, 0.9987),
            (32 * K, 0.9998),
            (128 * K, 0.9999),
        ],
        max_tokens: 1_682_432,
    },
    Table1Cdf {
        name: "chatqa2",
        min_tokens: 16,
        points: [
            (K, 0.2192),
            (4 * K, 0.3148),
            (8 * K, 0.4043),
            (32 * K, 0.9986),
            (128 * K, 1.0),
        ],
        max_tokens: 101_376,
    },
];

impl Table1Cdf {
    /// Looks a dataset up by name.
    pub fn by_name(name: &str) -> Option<&'static Table1Cdf> {
        TABLE1.iter().find(|t| t.name == name)
    }

    /// One length: a uniform draw picks the CDF interval, then log-uniform inside it; the
    /// result is clipped to `clip`.
    pub fn sample(&self, rng: &mut Rng, clip: u32) -> u32 {
        let u = rng.unit();
        let mut lo = self.min_tokens;
        let mut hi = self.max_tokens;
        for &(edge, share) in &self.points {
            if u < share {
                hi = edge - 1;
                break;
            }
            lo = edge;
        }
        // The upper edges may lie above the dataset's longest sequence.
        let hi = hi.min(self.max_tokens).max(lo);
        log_uniform(rng, lo, hi).min(clip.max(1))
    }

    /// `n` lengths from `seed`.
    pub fn batch(&self, seed: u64, n: usize, clip: u32) -> Vec<u32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| self.sample(&mut rng, clip)).collect()
    }
}

/// Draws from `N(0, 1)` (Box–Muller with `libm`, so the same on every platform).
pub fn standard_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.unit(); // (0, 1]
    let u2 = rng.unit();
    libm::sqrt(-2.0 * libm::log(u1)) * libm::cos(2.0 * core::f64::consts::PI * u2)
}

/// A binned length histogram: pick a bin in proportion to its count, then draw log-uniformly
/// between its bounds.
#[derive(Debug, Clone, Copy)]
pub struct Binned {
    /// Name used on the command line.
    pub name: &'static str,
    /// `(lowest, highest, count)` per bin, tokens inclusive.
    pub bins: &'static [(u32, u32, u64)],
}

/// The ChatQA2-attributed length histogram from MagiAttention
/// (`exps/dist_attn/benchmark/datasets/default/doc_length_distribution.csv`, Apache-2.0):
/// 13,463,214 sequences in 14 bins. Unit and tokenizer undocumented; see `data/README.md`.
pub const CHATQA2_HIST: Binned = Binned {
    name: "chatqa2-hist",
    bins: &[
        (0, 10, 30_254),
        (11, 50, 391_188),
        (51, 100, 699_596),
        (101, 200, 1_377_757),
        (201, 500, 3_794_735),
        (501, 1024, 3_316_785),
        (1025, 2048, 2_106_566),
        (2049, 4096, 988_525),
        (4097, 8192, 410_002),
        (8193, 16384, 173_574),
        (16385, 32768, 115_007),
        (32769, 65536, 18_428),
        (65537, 131_072, 22_513),
        (131_073, 196_608, 18_284),
    ],
};

impl Binned {
    /// One length, clipped to `clip`.
    pub fn sample(&self, rng: &mut Rng, clip: u32) -> u32 {
        let total: u64 = self.bins.iter().map(|b| b.2).sum();
        let mut pick = rng.below(total.max(1));
        let mut bin = self.bins.last().copied().unwrap_or((1, 1, 1));
        for &b in self.bins {
            if pick < b.2 {
                bin = b;
                break;
            }
            pick -= b.2;
        }
        log_uniform(rng, bin.0.max(1), bin.1).min(clip.max(1))
    }
}

/// A list of real lengths, drawn uniformly with replacement.
#[derive(Debug, Clone, Copy)]
pub struct RealLengths {
    /// Name used on the command line.
    pub name: &'static str,
    /// The lengths.
    pub lengths: &'static [u32],
}

/// Per-conversation token counts (cl100k, +4 per message) of 191 LMSYS-Chat-1M conversations:
/// English, 3–20 user turns only, so biased long (mean 1,093, max 8,935). Only the counts
/// are kept (`data/lmsys_chat_1m_191conv_lengths_cl100k.txt`).
pub const LMSYS_191: [u32; 191] = [
    1592, 1185, 1731, 2514, 8935, 1680, 1685, 1411, 1131, 990, 940, 161, 319, 1066, 1674, 2704,
    1053, 1233, 2167, 263, 239, 1943, 79, 788, 1340, 565, 368, 493, 216, 175, 1376, 1368, 376, 619,
    2248, 1577, 436, 1154, 83, 674, 115, 198, 557, 522, 966, 362, 638, 894, 737, 796, 2548, 301,
    555, 177, 1825, 370, 951, 777, 327, 2273, 162, 897, 184, 875, 759, 206, 590, 52, 226, 2094,
    344, 1151, 1256, 1041, 1185, 238, 853, 3511, 749, 1635, 665, 375, 542, 2590, 1552, 1031, 2255,
    309, 520, 202, 514, 666, 279, 1514, 3556, 2092, 1289, 2980, 1345, 410, 1797, 884, 159, 1366,
    811, 1522, 1647, 1756, 1265, 1261, 884, 5388, 1816, 974, 1856, 767, 611, 1383, 1442, 625, 1597,
    318, 541, 1119, 380, 1304, 1894, 2877, 755, 1594, 177, 568, 2064, 553, 131, 971, 1173, 68,
    1187, 1391, 868, 1075, 440, 1855, 2788, 1229, 1198, 137, 1939, 798, 213, 1281, 231, 1400, 565,
    1690, 790, 1450, 2270, 322, 1074, 1382, 442, 1719, 518, 791, 249, 1682, 199, 886, 630, 660,
    992, 1579, 755, 852, 822, 181, 426, 2207, 481, 1360, 940, 602, 1498, 429, 648, 562, 1969, 569,
    1121,
];

/// The real LMSYS sample as a sampler.
pub const LMSYS_REAL: RealLengths = RealLengths {
    name: "lmsys-real",
    lengths: &LMSYS_191,
};

impl RealLengths {
    /// One length, clipped to `clip`.
    pub fn sample(&self, rng: &mut Rng, clip: u32) -> u32 {
        let i = rng.below(self.lengths.len().max(1) as u64) as usize;
        self.lengths.get(i).copied().unwrap_or(1).min(clip.max(1))
    }
}

/// One component of a fitted length model (`data/length_models.json`).
#[derive(Debug, Clone, Copy)]
pub enum Component {
    /// `exp(N(ln median, sigma))`, clamped to `clip` when given.
    LogNormal {
        /// Median, tokens.
        median: f64,
        /// Log-space standard deviation.
        sigma: f64,
        /// Hard limits.
        clip: Option<(f64, f64)>,
    },
    /// Pareto with index `alpha` above `xmin`, truncated at `xmax` (inverse CDF).
    TruncatedPareto {
        /// Lower end, tokens.
        xmin: f64,
        /// Tail index.
        alpha: f64,
        /// Upper end, tokens.
        xmax: f64,
    },
    /// `cap − |N(0, sd)|`, clamped to `clip`: sequences packed up to a context cap.
    NearCap {
        /// The cap, tokens.
        cap: f64,
        /// Standard deviation below the cap.
        sd: f64,
        /// Hard limits.
        clip: (f64, f64),
    },
}

impl Component {
    fn sample(&self, rng: &mut Rng) -> f64 {
        match *self {
            Component::LogNormal {
                median,
                sigma,
                clip,
            } => {
                let x = median * libm::exp(sigma * standard_normal(rng));
                clip.map_or(x, |(lo, hi)| x.clamp(lo, hi))
            }
            Component::TruncatedPareto { xmin, alpha, xmax } => {
                let u = rng.unit();
                let tail = libm::pow(xmin / xmax, alpha);
                xmin * libm::pow(1.0 - u * (1.0 - tail), -1.0 / alpha)
            }
            Component::NearCap { cap, sd, clip } => {
                (cap - libm::fabs(sd * standard_normal(rng))).clamp(clip.0, clip.1)
            }
        }
    }
}

/// A fitted or assumed mixture from `data/length_models.json`: pick a component by weight,
/// draw, clamp to the model's hard limits.
#[derive(Debug, Clone, Copy)]
pub struct Mixture {
    /// Name used on the command line.
    pub name: &'static str,
    /// `(weight, component)`; the weights sum to 1.
    pub components: &'static [(f64, Component)],
    /// The model's hard limits, tokens.
    pub clip: (f64, f64),
}

impl Mixture {
    /// One length, clipped to `clip`.
    pub fn sample(&self, rng: &mut Rng, clip: u32) -> u32 {
        let u = rng.unit();
        let mut acc = 0.0;
        let mut comp = self.components.last().map(|c| c.1);
        for &(w, c) in self.components {
            acc += w;
            if u < acc {
                comp = Some(c);
                break;
            }
        }
        let x = comp
            .map_or(1.0, |c| c.sample(rng))
            .clamp(self.clip.0, self.clip.1);
        (libm::floor(x).max(1.0) as u32).min(clip.max(1))
    }
}

const fn lognormal(median: f64, sigma: f64) -> Component {
    Component::LogNormal {
        median,
        sigma,
        clip: None,
    }
}

const fn lognormal_clipped(median: f64, sigma: f64, lo: f64, hi: f64) -> Component {
    Component::LogNormal {
        median,
        sigma,
        clip: Some((lo, hi)),
    }
}

/// The generators of `data/length_models.json` (synthetic; see each entry's "targets").
pub const MODELS: [Mixture; 5] = [
    // Calibrated: mean ~568 tokens, >99 % < 4K, max ~300K.
    Mixture {
        name: "lmsys-model",
        components: &[
            (0.999, lognormal(300.0, 1.1)),
            (
                0.001,
                Component::TruncatedPareto {
                    xmin: 4096.0,
                    alpha: 1.3,
                    xmax: 300_000.0,
                },
            ),
        ],
        clip: (1.0, 300_000.0),
    },
    // Calibrated (weakly): mean ~700–750 tokens per English Wikipedia article.
    Mixture {
        name: "wikipedia-model",
        components: &[(1.0, lognormal(380.0, 1.15))],
        clip: (16.0, 200_000.0),
    },
    // Calibrated: Llama 3 SFT mix, 99.89 % short (avg 846), 0.11 % long (avg ~38K).
    Mixture {
        name: "llama3-sft",
        components: &[
            (0.9989, lognormal(464.0, 1.05)),
            (
                0.0011,
                lognormal_clipped(36_000.0, 0.35, 16_384.0, 131_072.0),
            ),
        ],
        clip: (1.0, f64::MAX),
    },
    // Assumed: 3K short Alpaca QA + 9K long QA, 32K context.
    Mixture {
        name: "longalpaca",
        components: &[
            (0.25, lognormal(110.0, 0.6)),
            (0.75, lognormal_clipped(19_000.0, 0.45, 4096.0, 32_768.0)),
        ],
        clip: (1.0, f64::MAX),
    },
    // Assumed: ChatQA2 long_sft rows plus NarrativeQA near the 128K cap.
    Mixture {
        name: "chatqa2-model",
        components: &[
            (
                0.1329,
                Component::NearCap {
                    cap: 131_072.0,
                    sd: 12_000.0,
                    clip: (32_768.0, 131_072.0),
                },
            ),
            (0.4891, lognormal(450.0, 0.8)),
            (0.2668, lognormal_clipped(14_000.0, 0.6, 2048.0, 65_536.0)),
            (0.0836, lognormal_clipped(19_000.0, 0.45, 4096.0, 32_768.0)),
            (0.0276, lognormal(110.0, 0.6)),
        ],
        clip: (1.0, f64::MAX),
    },
];

/// Any length distribution the simulator can draw from.
#[derive(Debug, Clone, Copy)]
pub enum Dataset {
    /// The paper's Table 1 CDF.
    Table1(&'static Table1Cdf),
    /// A binned histogram.
    Binned(&'static Binned),
    /// Real lengths drawn with replacement.
    Real(&'static RealLengths),
    /// A fitted mixture.
    Model(&'static Mixture),
}

impl Dataset {
    /// Every dataset, in a fixed order.
    pub fn all() -> Vec<Dataset> {
        let mut v: Vec<Dataset> = TABLE1.iter().map(Dataset::Table1).collect();
        v.push(Dataset::Binned(&CHATQA2_HIST));
        v.push(Dataset::Real(&LMSYS_REAL));
        v.extend(MODELS.iter().map(Dataset::Model));
        v
    }

    /// Looks a dataset up by name.
    pub fn by_name(name: &str) -> Option<Dataset> {
        Self::all().into_iter().find(|d| d.name() == name)
    }

    /// The name used on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Dataset::Table1(t) => t.name,
            Dataset::Binned(b) => b.name,
            Dataset::Real(r) => r.name,
            Dataset::Model(m) => m.name,
        }
    }

    /// One line on where the numbers come from.
    pub fn description(&self) -> &'static str {
        match self.name() {
            "wikipedia" => {
                "Skrull Table 1 CDF (Chinese Wikipedia), log-uniform inside each interval"
            }
            "lmsys" => "Skrull Table 1 CDF (LMsysChat1M), log-uniform inside each interval",
            "chatqa2" => "Skrull Table 1 CDF (ChatQA2-Long-SFT), log-uniform inside each interval",
            "chatqa2-hist" => {
                "MagiAttention's ChatQA2-attributed histogram (14 bins, 13.5M sequences), log-uniform in bins"
            }
            "lmsys-real" => {
                "191 real LMSYS-Chat-1M conversations (3-20 turns: biased long), with replacement"
            }
            "lmsys-model" => "fitted lognormal + truncated Pareto (data/length_models.json)",
            "wikipedia-model" => "fitted lognormal (data/length_models.json)",
            "llama3-sft" => "fitted Llama 3 SFT mix (data/length_models.json)",
            "longalpaca" => "assumed LongAlpaca-12k mix (data/length_models.json)",
            "chatqa2-model" => {
                "assumed ChatQA2 long_sft + NarrativeQA mix (data/length_models.json)"
            }
            _ => "",
        }
    }

    /// One length, clipped to `clip`.
    pub fn sample(&self, rng: &mut Rng, clip: u32) -> u32 {
        match self {
            Dataset::Table1(t) => t.sample(rng, clip),
            Dataset::Binned(b) => b.sample(rng, clip),
            Dataset::Real(r) => r.sample(rng, clip),
            Dataset::Model(m) => m.sample(rng, clip),
        }
    }

    /// `n` lengths from `seed`, each clipped to `clip`.
    pub fn batch(&self, seed: u64, n: usize, clip: u32) -> Vec<u32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| self.sample(&mut rng, clip)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_batch_and_shares_follow_the_table() {
        let t = Table1Cdf::by_name("lmsys").unwrap();
        let a = t.batch(7, 20_000, 131_072);
        assert_eq!(a, t.batch(7, 20_000, 131_072));
        assert_ne!(a, t.batch(8, 20_000, 131_072));
        let below_1k = a.iter().filter(|&&s| s < 1024).count() as f64 / a.len() as f64;
        assert!((below_1k - 0.8712).abs() < 0.01, "{below_1k}");
        assert!(a.iter().all(|&s| (16..=131_072).contains(&s)));
    }

    #[test]
    fn chatqa2_is_bimodal() {
        let t = Table1Cdf::by_name("chatqa2").unwrap();
        let a = t.batch(1, 20_000, 131_072);
        let long = a.iter().filter(|&&s| s >= 8192).count() as f64 / a.len() as f64;
        assert!((long - 0.5957).abs() < 0.015, "{long}");
    }

    #[test]
    fn log_uniform_stays_inside() {
        let mut r = Rng::new(3);
        for _ in 0..10_000 {
            let x = log_uniform(&mut r, 100, 200);
            assert!((100..=200).contains(&x));
        }
        assert_eq!(log_uniform(&mut r, 5, 5), 5);
    }
    #[test]
    fn every_dataset_is_named_seeded_and_clipped() {
        let all = Dataset::all();
        assert_eq!(all.len(), 10);
        for d in &all {
            assert_eq!(Dataset::by_name(d.name()).map(|x| x.name()), Some(d.name()));
            assert!(!d.description().is_empty(), "{}", d.name());
            let a = d.batch(11, 5000, 20_000);
            assert_eq!(a, d.batch(11, 5000, 20_000));
            assert!(a.iter().all(|&s| (1..=20_000).contains(&s)), "{}", d.name());
        }
        assert!(Dataset::by_name("nope").is_none());
    }

    #[test]
    fn histogram_shares_follow_the_bins() {
        let a = Dataset::by_name("chatqa2-hist")
            .unwrap()
            .batch(5, 50_000, 1 << 20);
        let share = |hi: u32| a.iter().filter(|&&s| s <= hi).count() as f64 / a.len() as f64;
        assert!((share(1024) - 0.7138).abs() < 0.01, "{}", share(1024));
        assert!((share(8192) - 0.9742).abs() < 0.005, "{}", share(8192));
        assert!(a.iter().all(|&s| s <= 196_608));
    }

    #[test]
    fn real_lengths_are_drawn_from_the_list() {
        let a = Dataset::by_name("lmsys-real")
            .unwrap()
            .batch(2, 2000, 1 << 20);
        assert!(a.iter().all(|s| LMSYS_191.contains(s)));
        assert_eq!(LMSYS_191.iter().copied().max(), Some(8935));
        assert_eq!(
            LMSYS_191.iter().map(|&s| u64::from(s)).sum::<u64>(),
            208_774
        );
    }

    #[test]
    fn fitted_models_hit_their_targets() {
        // lmsys-model: mean ~568, > 99 % below 4K.
        let a = Dataset::by_name("lmsys-model")
            .unwrap()
            .batch(3, 100_000, 300_000);
        let mean = a.iter().map(|&s| s as f64).sum::<f64>() / a.len() as f64;
        let below = a.iter().filter(|&&s| s < 4096).count() as f64 / a.len() as f64;
        assert!((450.0..750.0).contains(&mean), "{mean}");
        assert!(below > 0.99, "{below}");
        // chatqa2-model: ~13 % near the 128K cap.
        let c = Dataset::by_name("chatqa2-model")
            .unwrap()
            .batch(4, 50_000, 131_072);
        let near = c.iter().filter(|&&s| s >= 98_304).count() as f64 / c.len() as f64;
        assert!((near - 0.13).abs() < 0.02, "{near}");
        let mut r = Rng::new(1);
        let z: Vec<f64> = (0..50_000).map(|_| standard_normal(&mut r)).collect();
        let m = z.iter().sum::<f64>() / z.len() as f64;
        let v = z.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / z.len() as f64;
        assert!(m.abs() < 0.02 && (v - 1.0).abs() < 0.03, "{m} {v}");
    }
}
