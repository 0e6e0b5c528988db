//! The token budget: what a sequence costs one GPU, and the up-front checks every policy
//! shares.

use crate::config::{Config, MAX_SEQ_LEN, MAX_SEQS, ShardPadding};
use crate::error::Error;

/// Tokens one CP rank holds of a sequence of `len` tokens sharded over `cp` ranks:
/// `ceil(len / cp)` unpadded, `2 * ceil(len / 2cp)` with zigzag padding (never above
/// `len + 1`, so it fits `u32` for every accepted length).
#[inline]
pub fn shard_tokens(len: u32, cp: u32, padding: ShardPadding) -> u32 {
    let cp = cp.max(1);
    match padding {
        ShardPadding::None => len.div_ceil(cp),
        ShardPadding::Zigzag => 2 * len.div_ceil(2 * cp),
    }
}

/// Checks a batch against the configuration and returns its total token count.
///
/// # Errors
/// [`Error::TooManySequences`], [`Error::EmptySequence`], [`Error::LengthOutOfRange`] or
/// [`Error::SequenceTooLong`] (the first offending sequence in input order).
pub fn check_lengths(cfg: &Config, lengths: &[u32]) -> Result<u64, Error> {
    if lengths.len() > MAX_SEQS {
        return Err(Error::TooManySequences {
            count: lengths.len(),
            max: MAX_SEQS,
        });
    }
    // `shard_tokens(len) > bucket` exactly when `len` exceeds the longest length that fits:
    // `ceil(len / N) > C` iff `len > N·C`; `2·ceil(len / 2N) > C` iff
    // `ceil(len / 2N) > floor(C / 2)` iff `len > 2N·floor(C / 2)`. No division per sequence.
    let cp = u64::from(cfg.cp.max(1));
    let fits = match cfg.shard_padding {
        ShardPadding::None => cp * u64::from(cfg.bucket),
        ShardPadding::Zigzag => 2 * cp * u64::from(cfg.bucket / 2),
    };
    let mut total = 0u64;
    for (index, &len) in lengths.iter().enumerate() {
        if len == 0 {
            return Err(Error::EmptySequence { index });
        }
        if len > MAX_SEQ_LEN {
            return Err(Error::LengthOutOfRange { index, len });
        }
        if u64::from(len) > fits {
            let shard = cfg.shard_tokens(len);
            return Err(Error::SequenceTooLong {
                index,
                len,
                needed_bucket: shard,
            });
        }
        // At most 2^16 sequences of < 2^31 tokens: < 2^47, no overflow.
        total += u64::from(len);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelShape;

    #[test]
    fn shard_is_ceiling() {
        let none = ShardPadding::None;
        assert_eq!(shard_tokens(30, 4, none), 8);
        assert_eq!(shard_tokens(32, 4, none), 8);
        assert_eq!(shard_tokens(1, 8, none), 1);
        assert_eq!(shard_tokens(MAX_SEQ_LEN, 1, none), MAX_SEQ_LEN);
    }

    #[test]
    fn zigzag_padding_rounds_to_pairs_of_chunks() {
        let z = ShardPadding::Zigzag;
        // N = 4, S = 10: 2N = 8 chunks of ceil(10/8) = 2 tokens, 2 chunks per GPU.
        assert_eq!(shard_tokens(10, 4, z), 4);
        assert_eq!(shard_tokens(16, 4, z), 4);
        assert_eq!(shard_tokens(17, 4, z), 6);
        assert_eq!(shard_tokens(1, 8, z), 2);
        assert_eq!(shard_tokens(MAX_SEQ_LEN, 1, z), MAX_SEQ_LEN + 1);
    }

    #[test]
    fn first_offender_is_reported() {
        let cfg = Config::new(1, 4, 10, ModelShape::QWEN2_5_0_5B);
        assert_eq!(check_lengths(&cfg, &[5, 40, 3]), Ok(48));
        assert_eq!(
            check_lengths(&cfg, &[5, 41, 0]),
            Err(Error::SequenceTooLong {
                index: 1,
                len: 41,
                needed_bucket: 11
            })
        );
        assert_eq!(
            check_lengths(&cfg, &[5, 0, 41]),
            Err(Error::EmptySequence { index: 1 })
        );
        assert_eq!(
            check_lengths(&cfg, &[u32::MAX]),
            Err(Error::LengthOutOfRange {
                index: 0,
                len: u32::MAX
            })
        );
        assert_eq!(check_lengths(&cfg, &[]), Ok(0));
    }
}

#[cfg(test)]
mod threshold_tests {
    use super::*;
    use crate::config::ModelShape;

    /// The division-free check rejects exactly the lengths whose share exceeds the bucket.
    #[test]
    fn threshold_equals_the_share_test() {
        for padding in [ShardPadding::None, ShardPadding::Zigzag] {
            // Fewer cases under miri, which runs this about 1,000x slower.
            let (max_cp, max_bucket) = if cfg!(miri) { (3, 6) } else { (9, 40) };
            for cp in 1..=max_cp {
                for bucket in 1..=max_bucket {
                    let mut cfg = Config::new(1, cp, bucket, ModelShape::QWEN2_5_0_5B);
                    cfg.shard_padding = padding;
                    for len in 1..=(2 * cp * bucket + 3) {
                        let shard = shard_tokens(len, cp, padding);
                        let want = if shard > bucket {
                            Err(Error::SequenceTooLong {
                                index: 0,
                                len,
                                needed_bucket: shard,
                            })
                        } else {
                            Ok(u64::from(len))
                        };
                        assert_eq!(
                            check_lengths(&cfg, &[len]),
                            want,
                            "{padding:?} {cp} {bucket}"
                        );
                    }
                }
            }
        }
        let mut cfg = Config::new(1, 256, MAX_SEQ_LEN, ModelShape::QWEN2_5_0_5B);
        cfg.shard_padding = ShardPadding::Zigzag;
        assert_eq!(
            check_lengths(&cfg, &[MAX_SEQ_LEN]),
            Ok(u64::from(MAX_SEQ_LEN))
        );
    }
}
