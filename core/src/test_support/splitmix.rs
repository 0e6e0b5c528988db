//! SplitMix64, the one seeded generator of skrull's tests: core's unit tests reach it through
//! `crate::test_support`, and `skrull-kit` (tests, benchmarks, CLI samplers) includes this
//! file by `#[path]` as `skrull_kit::sample::Rng` (kit depends on core, so core cannot use
//! kit). The same seed gives the same stream on every platform. The C tests' copy is
//! `tests/c/rng.h`.
#![allow(dead_code)]

/// SplitMix64: a tiny, well-mixed 64-bit generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
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

    /// An integer in `0..n` by remainder (`0` when `n = 0`): the draw core's unit tests were
    /// written with, kept so their cases stay the same.
    pub fn below_mod(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
