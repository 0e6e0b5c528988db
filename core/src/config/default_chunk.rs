//! The default ChunkSize, and which lengths a policy that chunks can still accept.
//!
//! A policy that chunks over the whole CP group (`chunkflow`) can run a sequence too long to
//! fit sharded, as long as its chunked peak on the group fits BucketSize; every front end
//! (the CLI, the C library's callers, Python) takes the chunk size it uses when none is given
//! from [`Config::default_chunk_size`], so the rule is written once. See `docs/chunking.md`.

use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::chunking::{Chunking, STATE_SCALE};
use crate::config::limits::MAX_SEQ_LEN;
use crate::config::options::Policy;
use crate::error::Error;

/// The largest ChunkSize [`Config::default_chunk_size`] tries: 2^30 tokens.
pub const MAX_DEFAULT_CHUNK_SHIFT: u32 = 30;

impl Config {
    /// How many CP ranks a chunked sequence runs on when the policy picks the group itself:
    /// the whole CP group for `chunkflow` (it chunks every long sequence over all of them),
    /// one GPU for any other policy (`balanced` may chunk on one GPU, the smallest group).
    pub fn chunk_group(&self) -> u32 {
        if self.policy == Policy::ChunkFlow {
            self.cp.max(1)
        } else {
            1
        }
    }

    /// The default ChunkSize for sequences of up to `longest` tokens (0: the longest the
    /// layout accepts sharded, [`Budget::max_sharded_len`](crate::Budget::max_sharded_len)):
    /// the largest power of two below `longest` and at most BucketSize whose chunked peak on
    /// [`Config::chunk_group`] GPUs fits BucketSize, with this configuration's K and state
    /// charge (`Budget::chunked`). 1 when `longest` is at most 1 (no sequence is longer than
    /// a chunk). The configuration need not have chunking on.
    ///
    /// At most BucketSize: a chunk is never longer than one GPU may hold, as in ChunkFlow,
    /// whose chunk is a memory unit; on a group of `g` GPUs it then takes `1/g` of each
    /// budget, the rest is left to the state, and a batch gives `chunkflow` at least
    /// `tokens / BucketSize` units to balance over the DP ranks (the largest chunk the
    /// group could hold, `g x` larger, packs a whole batch into one micro-batch on one DP
    /// rank).
    ///
    /// # Errors
    /// [`Error::NoChunkSize`] when not even a one-token chunk fits: the K/V state of a
    /// `longest`-token sequence (plus K one-token chunks) is over BucketSize on each GPU of
    /// the group.
    pub fn default_chunk_size(&self, longest: u32) -> Result<u32, Error> {
        let budget = self.budget();
        let longest = if longest == 0 {
            budget.max_sharded_len()
        } else {
            longest
        };
        let group = self.chunk_group();
        let with_size = |size: u32| Chunking {
            size,
            ..self.chunking
        };
        if longest <= 1 {
            return Ok(1);
        }
        let fits = |size: u32| budget.chunked(&with_size(size), longest, group);
        (0..=MAX_DEFAULT_CHUNK_SHIFT)
            .rev()
            .map(|k| 1u32 << k)
            .filter(|&size| size < longest && size <= self.bucket)
            .find(|&size| fits(size) <= u64::from(self.bucket))
            .ok_or(Error::NoChunkSize {
                longest,
                group,
                peak: fits(1),
            })
    }

    /// Checks a batch with `budget` (this configuration's) as its policy accepts it: every
    /// sequence fits sharded, or for `chunkflow` runs chunked over the whole group within
    /// BucketSize ([`Budget::check_lengths_chunked`]). Returns the total token count.
    ///
    /// # Errors
    /// As [`Budget::check_lengths_chunked`].
    pub fn check_lengths(&self, budget: &Budget, lengths: &[u32]) -> Result<u64, Error> {
        if self.policy == Policy::ChunkFlow {
            budget.check_lengths_chunked(lengths, &self.chunking, self.cp.max(1))
        } else {
            budget.check_lengths(lengths)
        }
    }

    /// The longest sequence a batch may hold under this configuration: the longest that
    /// fits sharded, or for `chunkflow` (which chunks every long sequence over the whole
    /// group) an upper bound on the longest whose chunked peak can fit: its K/V state share,
    /// `ceil(state / cp)`, within BucketSize. Sizes buffers; the exact check is per length.
    pub fn longest_accepted(&self) -> u32 {
        let budget = self.budget();
        let sharded = budget.max_sharded_len();
        if self.policy != Policy::ChunkFlow || !self.chunking.is_on() {
            return sharded;
        }
        let permille = u64::from(self.chunking.state_permille);
        let state_cap = u64::from(self.bucket) * u64::from(self.cp.max(1));
        let by_state = (state_cap * STATE_SCALE)
            .checked_div(permille)
            .unwrap_or(u64::from(MAX_SEQ_LEN));
        by_state.min(u64::from(MAX_SEQ_LEN)).max(u64::from(sharded)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::shape::ModelShape;

    fn cfg(dp: u32, cp: u32, bucket: u32, policy: Policy) -> Config {
        let mut c = Config::new(dp, cp, bucket, ModelShape::QWEN2_5_7B);
        c.policy = policy;
        c
    }

    /// Regression: `chunkflow` at DP 2 x CP 16 (7B, 13K) had no default: the chunked peak
    /// was sized for ONE GPU, where the state of a 212,992-token sequence alone is over
    /// BucketSize, while `chunkflow` chunks over the whole group (state / 16).
    #[test]
    fn chunkflow_default_chunk_size_fits_the_whole_group_at_cp_16() {
        let c = cfg(2, 16, 13_312, Policy::ChunkFlow);
        let size = c.default_chunk_size(0).unwrap();
        let longest = c.budget().max_sharded_len();
        assert_eq!(longest, 16 * 13_312);
        // The largest power of two within BucketSize; its peak on the group fits.
        assert_eq!(size, 8192);
        let chunking = Chunking::new(size, 1);
        assert!(c.budget().chunked(&chunking, longest, 16) <= 13_312);
        // On one GPU the state of the longest sequence alone is over BucketSize.
        assert!(c.budget().chunked(&Chunking::new(1, 1), longest, 1) > 13_312);
        // 0.5B at 26K too.
        let mut c = c;
        c.model = ModelShape::QWEN2_5_0_5B;
        c.bucket = 26_624;
        assert!(c.default_chunk_size(0).is_ok());
    }

    #[test]
    fn other_policies_size_the_chunk_for_one_gpu() {
        let mut c = cfg(4, 8, 26 * 1024, Policy::Balanced);
        c.model = ModelShape::QWEN2_5_0_5B;
        assert_eq!(c.chunk_group(), 1);
        // 128K tokens: the state is ceil(131072 * 64 / 1000) = 8389; 16384 + 8389 <= 26624.
        assert_eq!(c.default_chunk_size(128 * 1024), Ok(16_384));
        let fits = |c: &Config, size: u32| {
            c.budget()
                .chunked(&Chunking::new(size, c.chunking.keep), 128 * 1024, 1)
                <= u64::from(c.bucket)
        };
        assert!(fits(&c, 16_384) && !fits(&c, 32_768));
        // 7B, 13K: 4096 + 8389 fits, 8192 + 8389 does not.
        c.bucket = 13 * 1024;
        assert_eq!(c.default_chunk_size(128 * 1024), Ok(4096));
        // K = 4 keeps four chunks: 2048 * 4 + 8389 <= 13312.
        c.chunking.keep = 4;
        assert_eq!(c.default_chunk_size(128 * 1024), Ok(1024));
        // Below the longest sequence: a chunk as long as it would chunk nothing.
        c.chunking.keep = 1;
        assert_eq!(c.default_chunk_size(3000), Ok(2048));
        // Nothing is longer than one token: any chunk size chunks nothing.
        assert_eq!(c.default_chunk_size(1), Ok(1));
        // The state alone over BucketSize: nothing fits.
        c.bucket = 100;
        assert!(matches!(
            c.default_chunk_size(1 << 20),
            Err(Error::NoChunkSize { .. })
        ));
    }

    #[test]
    fn no_chunk_size_names_the_numbers() {
        // One GPU, 1M tokens: the state alone (67,109 tokens) is over the bucket.
        let c = cfg(1, 8, 26 * 1024, Policy::Balanced);
        assert_eq!(
            c.default_chunk_size(1 << 20),
            Err(Error::NoChunkSize {
                longest: 1 << 20,
                group: 1,
                peak: 67_109 + 1,
            })
        );
    }

    #[test]
    fn longest_accepted_grows_only_for_chunkflow_with_chunking_on() {
        let mut c = cfg(1, 4, 1000, Policy::ChunkFlow);
        assert_eq!(c.longest_accepted(), 4000);
        c.chunking = Chunking::new(512, 1);
        // state 64/1000 per token: 4,000 state tokens at most, so 62,500 tokens.
        assert_eq!(c.longest_accepted(), 62_500);
        c.policy = Policy::Balanced;
        assert_eq!(c.longest_accepted(), 4000);
    }
}
