//! Seeded, platform-independent length samplers (integer RNG, `libm` for the few floats).
//!
//! The numbers are embedded here; nothing is read from disk at run time.

/// SplitMix64: a tiny, well-mixed 64-bit generator; the same seed gives the same stream on
/// every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `0..n` (`n > 0`), by multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

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
}
