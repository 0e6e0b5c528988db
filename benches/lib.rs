//! Shared inputs for skrull's benchmarks: the batches, drawn once with fixed seeds from
//! the same sampler and clip as `skrull plan`'s default batch.

pub mod floor;

use skrull_cli::plan_cmd::{DEFAULT_CONTEXT, DEFAULT_SEED};
use skrull_cli::sample::Table1Cdf;
use skrull_core::model::eval::{EvalBuffers, EvalSizes, MicroBatchTime, RankSlot};
use skrull_core::{Config, ModelShape, Policy};

/// BucketSize of every benchmark: 26K tokens, as in the paper and `skrull plan`.
pub const BUCKET: u32 = 26 * 1024;
/// CP size of every benchmark.
pub const CP: u32 = 8;

/// `n` lengths of the Table 1 dataset `name` from `seed`, clipped like `skrull plan`'s default
/// batch (at 128K and at `cp x bucket`).
pub fn lengths(name: &str, seed: u64, n: usize, cp: u32, bucket: u32) -> Vec<u32> {
    let clip = DEFAULT_CONTEXT.min(cp.saturating_mul(bucket));
    let table = Table1Cdf::by_name(name).unwrap_or(&skrull_cli::sample::TABLE1[1]);
    table.batch(seed, n, clip)
}

/// `n` LMsys-like lengths from `skrull plan`'s default seed (`n = 256` is its default batch).
pub fn lmsys(n: usize) -> Vec<u32> {
    lengths("lmsys", DEFAULT_SEED, n, CP, BUCKET)
}

/// `n` ChatQA2-like lengths from `skrull plan`'s default seed.
pub fn chatqa2(n: usize) -> Vec<u32> {
    lengths("chatqa2", DEFAULT_SEED, n, CP, BUCKET)
}

/// DP `dp`, CP 8, BucketSize 26K, Qwen2.5-0.5B, `policy`.
pub fn config(dp: u32, policy: Policy) -> Config {
    Config::new(dp, CP, BUCKET, ModelShape::QWEN2_5_0_5B).with_policy(policy)
}

/// Heap-backed evaluator buffers for `n` sequences under `cfg`.
#[derive(Debug, Clone, Default)]
pub struct OwnedEval {
    micro_batches: Vec<MicroBatchTime>,
    ranks: Vec<RankSlot>,
    dp_times: Vec<f64>,
    dp_offsets: Vec<u32>,
}

impl OwnedEval {
    /// Buffers sized by [`EvalSizes::for_batch`].
    pub fn for_batch(n: usize, cfg: &Config) -> OwnedEval {
        let s = EvalSizes::for_batch(n, cfg);
        OwnedEval {
            micro_batches: vec![MicroBatchTime::default(); s.micro_batches],
            ranks: vec![RankSlot::default(); s.ranks],
            dp_times: vec![0.0; s.dp_times],
            dp_offsets: vec![0; s.dp_offsets],
        }
    }

    /// A borrow of the buffers for one evaluation.
    pub fn buffers(&mut self) -> EvalBuffers<'_> {
        EvalBuffers {
            micro_batches: &mut self.micro_batches,
            ranks: &mut self.ranks,
            dp_times: &mut self.dp_times,
            dp_offsets: &mut self.dp_offsets,
        }
    }
}
