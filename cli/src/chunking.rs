//! Chunking in the CLI: the default ChunkSize, and `skrull simulate --chunking compare`
//! (`balanced` without and with chunking, `chunkflow` and `skrull` on the same batches).

use skrull_core::{Chunking, Config};

/// The largest ChunkSize tried by [`default_chunk_size`]: 2^30 tokens.
const MAX_DEFAULT_SHIFT: u32 = 30;

/// The default ChunkSize for `cfg` when sequences of up to `longest` tokens may come: the
/// largest power of two below `longest` whose chunked peak on ONE GPU fits BucketSize,
/// `Budget::chunked(chunking, longest, 1) <= bucket`, with `cfg`'s K and state charge (the
/// last K chunks or one recomputed chunk, plus the K/V state of the whole sequence). `None`
/// when not even a one-token chunk fits (the state alone is over BucketSize) or `longest`
/// is below 2.
pub fn default_chunk_size(cfg: &Config, longest: u32) -> Option<u32> {
    let budget = cfg.budget();
    (0..=MAX_DEFAULT_SHIFT)
        .rev()
        .map(|k| 1u32 << k)
        .filter(|&size| size < longest)
        .find(|&size| {
            let c = Chunking {
                size,
                ..cfg.chunking
            };
            budget.chunked(&c, longest, 1) <= u64::from(cfg.bucket)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::ModelShape;

    #[test]
    fn the_default_chunk_size_is_the_largest_power_of_two_that_fits_one_gpu() {
        let mut cfg = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        // 128K tokens: the state is ceil(131072 * 64 / 1000) = 8389; 16384 + 8389 <= 26624.
        assert_eq!(default_chunk_size(&cfg, 128 * 1024), Some(16_384));
        let c = Chunking::new(16_384, 1);
        assert!(cfg.budget().chunked(&c, 128 * 1024, 1) <= u64::from(cfg.bucket));
        let c = Chunking::new(32_768, 1);
        assert!(cfg.budget().chunked(&c, 128 * 1024, 1) > u64::from(cfg.bucket));
        // 7B, 13K: 4096 + 8389 fits, 8192 + 8389 does not.
        cfg.bucket = 13 * 1024;
        assert_eq!(default_chunk_size(&cfg, 128 * 1024), Some(4096));
        // K = 4 keeps four chunks: 2048 * 4 + 8389 <= 13312.
        cfg.chunking.keep = 4;
        assert_eq!(default_chunk_size(&cfg, 128 * 1024), Some(1024));
        // Below the longest sequence: a chunk as long as it would chunk nothing.
        cfg.chunking.keep = 1;
        assert_eq!(default_chunk_size(&cfg, 3000), Some(2048));
        assert_eq!(default_chunk_size(&cfg, 1), None);
        // The state alone over BucketSize: nothing fits.
        cfg.bucket = 100;
        assert_eq!(default_chunk_size(&cfg, 1 << 20), None);
    }
}
