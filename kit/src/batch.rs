//! The built-in default batch of `skrull plan` (256 LMsys-like lengths from a fixed seed), and
//! Table 1 batches drawn the same way, for the benchmarks and the golden tests.

use crate::sample::{TABLE1, Table1Cdf};

/// Sequences in the built-in default batch (DP 4 x BatchSize 64, as in the paper).
pub const DEFAULT_BATCH: usize = 256;
/// Seed of the built-in default batch.
pub const DEFAULT_SEED: u64 = 20_250_526;
/// Context limit the default batch is clipped at (before the `N x C` clip).
pub const DEFAULT_CONTEXT: u32 = 128 * 1024;

/// `n` lengths of the Table 1 dataset `name` (LMsys when unknown) from `seed`, clipped like the
/// default batch: at 128K and at `cp x bucket`.
pub fn table1_lengths(name: &str, seed: u64, n: usize, cp: u32, bucket: u32) -> Vec<u32> {
    let clip = DEFAULT_CONTEXT.min(cp.saturating_mul(bucket));
    let table = Table1Cdf::by_name(name).unwrap_or(&TABLE1[1]);
    table.batch(seed, n, clip)
}

/// The built-in default batch: 256 LMsys-Chat-1M-like lengths (Table 1) from a fixed seed,
/// clipped at 128K and at `cp x bucket`.
pub fn default_lengths(cp: u32, bucket: u32) -> Vec<u32> {
    table1_lengths("lmsys", DEFAULT_SEED, DEFAULT_BATCH, cp, bucket)
}
