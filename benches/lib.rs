//! Shared inputs for skrull's benchmarks: the batches, drawn once with fixed seeds from
//! the same sampler and clip as `skrull plan`'s default batch.

pub mod floor;

use skrull_core::{Config, ModelShape, Policy};
use skrull_kit::batch::{DEFAULT_SEED, table1_lengths};

/// BucketSize of every benchmark: 26K tokens, as in the paper and `skrull plan`.
pub const BUCKET: u32 = 26 * 1024;
/// CP size of every benchmark.
pub const CP: u32 = 8;

/// `n` LMsys-like lengths from `skrull plan`'s default seed (`n = 256` is its default batch).
pub fn lmsys(n: usize) -> Vec<u32> {
    table1_lengths("lmsys", DEFAULT_SEED, n, CP, BUCKET)
}

/// `n` ChatQA2-like lengths from `skrull plan`'s default seed.
pub fn chatqa2(n: usize) -> Vec<u32> {
    table1_lengths("chatqa2", DEFAULT_SEED, n, CP, BUCKET)
}

/// DP `dp`, CP 8, BucketSize 26K, Qwen2.5-0.5B, `policy`.
pub fn config(dp: u32, policy: Policy) -> Config {
    Config::new(dp, CP, BUCKET, ModelShape::QWEN2_5_0_5B).with_policy(policy)
}
