//! The token budget: what each placement costs one GPU, the padding rules behind it, and the
//! up-front length checks every policy shares.
//!
//! # The padding rule
//!
//! With `N` CP ranks, pad multiple `M` ([`Config::pad_multiple`]) and shard padding `p`:
//!
//! - the **shard unit** is `u = lcm(2N, M)` when `N > 1` and the sequence is padded at all
//!   ([`ShardPadding::Zigzag`], or `M > 1`), else `u = M` (at `N = 1` nothing is exchanged, so
//!   zigzag asks for no padding of its own). So a pad multiple above 1 always pads shards to
//!   whole zigzag chunks: with `M > 1` the two shard paddings coincide;
//! - a **sharded** sequence of `S` tokens is padded at its end to `P = u·ceil(S / u)` tokens
//!   and every GPU of the CP group is charged `ceil(P / N)` ([`Budget::share`]): exactly
//!   `P / N` with zigzag (`2N` divides `P`), `ceil(S / N)` with no padding at all;
//! - a **local** sequence costs its rank `S` tokens, or `M·ceil(S / M)` with
//!   [`Config::pad_local`] ([`Budget::local`]).
//!
//! A batch is accepted only when every sequence fits sharded (`share(S) <= C`); the
//! baselines shard everything, so this is what makes every policy able to plan it. The one
//! exception is `chunkflow` with chunking on, which runs every long sequence chunked over the
//! whole group: it accepts a longer sequence whose chunked peak fits
//! ([`Budget::check_lengths_chunked`]).

use crate::config::Config;
use crate::config::chunking::Chunking;
use crate::config::limits::{MAX_SEQ_LEN, MAX_SEQS};
use crate::config::options::ShardPadding;
use crate::error::Error;

/// What each placement of a sequence costs one GPU, for one configuration (see the
/// [module documentation](self)). Cheap to build; policies build it once per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    bucket: u32,
    cp: u32,
    padding: ShardPadding,
    pad_multiple: u32,
    shard_unit: u32,
    local_unit: u32,
    /// `log2 cp` when `cp` is a power of two.
    cp_shift: Option<u32>,
    /// `shard_unit - 1` when `shard_unit` is a power of two.
    unit_mask: Option<u64>,
    /// The longest sequence whose share fits the bucket.
    max_len: u64,
}

/// Greatest common divisor (`gcd(x, 0) = x`).
const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The budget a configuration gives (here, not beside `Config`, so that `config` stands below
/// `budget` and the two never import each other).
impl Config {
    /// The token budget of this configuration: what each placement costs a GPU.
    #[inline]
    pub fn budget(&self) -> Budget {
        Budget::new(self)
    }

    /// Tokens each GPU holds of a sequence of `len` tokens sharded over the CP group
    /// ([`Budget::share`](Budget::share); builds the budget on every call, so
    /// hot loops should hold a [`Config::budget`] instead).
    #[inline]
    pub fn shard_tokens(&self, len: u32) -> u32 {
        self.budget().share(len)
    }

    /// Tokens a local sequence of `len` tokens costs its rank
    /// ([`Budget::local`](Budget::local)).
    #[inline]
    pub fn local_tokens(&self, len: u32) -> u32 {
        self.budget().local(len)
    }
}

impl Budget {
    /// The budget of `cfg` (its values need not be validated: zeros are treated as 1).
    pub fn new(cfg: &Config) -> Budget {
        Self::with(
            cfg.bucket,
            cfg.cp,
            cfg.shard_padding,
            cfg.pad_multiple,
            cfg.pad_local,
        )
    }

    /// The budget of a bucket, CP size and padding options, as [`Budget::new`] reads them
    /// from a [`Config`].
    pub fn with(
        bucket: u32,
        cp: u32,
        padding: ShardPadding,
        pad_multiple: u32,
        pad_local: bool,
    ) -> Budget {
        let cp = cp.max(1);
        let m = u64::from(pad_multiple.max(1));
        let unit = if cp > 1 && (padding == ShardPadding::Zigzag || m > 1) {
            let two_n = 2 * u64::from(cp);
            two_n / gcd(two_n, m) * m
        } else {
            m
        };
        // unit <= lcm(512, 65536) = 65536 for every valid configuration; clamp for the rest.
        let shard_unit = u32::try_from(unit).unwrap_or(u32::MAX);
        let unit = u64::from(shard_unit);
        // share(S) <= C  iff  P <= N·C  iff  S <= u·floor(N·C / u).
        let max_len = (u64::from(cp) * u64::from(bucket) / unit) * unit;
        Budget {
            bucket,
            cp,
            padding,
            pad_multiple: pad_multiple.max(1),
            shard_unit,
            local_unit: if pad_local { pad_multiple.max(1) } else { 1 },
            cp_shift: cp.is_power_of_two().then(|| cp.trailing_zeros()),
            unit_mask: unit.is_power_of_two().then(|| unit - 1),
            max_len,
        }
    }

    /// BucketSize C: the most tokens one GPU may hold in one micro-batch.
    #[inline]
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// The CP size N the shares are computed for.
    #[inline]
    pub fn cp(&self) -> u32 {
        self.cp
    }

    /// The same rules for a CP (sub-)group of `g` GPUs: what a sequence sharded over `g`
    /// ranks costs each of them ([`Budget::share`] of the result), its padded length and its
    /// zigzag chunks over `2g`. `for_group(cp())` is this budget.
    pub fn for_group(&self, g: u32) -> Budget {
        let local_pad = self.local_unit != 1;
        Budget::with(self.bucket, g, self.padding, self.pad_multiple, local_pad)
    }

    /// What a sequence of `len` tokens chunked by `chunking` on a group of `g` GPUs costs
    /// each of them ([`Chunking::peak`]): a chunk costs one GPU what a local sequence of its
    /// length costs ([`Budget::local`]), and each GPU of a larger group its share over the
    /// group ([`Budget::for_group`]).
    pub fn chunked(&self, chunking: &Chunking, len: u32, g: u32) -> u64 {
        if g <= 1 {
            chunking.peak(len, 1, |t| self.local(t))
        } else {
            let group = self.for_group(g);
            chunking.peak(len, g, |t| group.share(t))
        }
    }

    /// The shard unit `u`: a sharded sequence's padded length is a multiple of it.
    #[inline]
    pub fn shard_unit(&self) -> u32 {
        self.shard_unit
    }

    /// Padded length `P` of a sequence of `len` tokens when it is sharded.
    #[inline]
    pub fn padded(&self, len: u32) -> u64 {
        let s = u64::from(len);
        match self.unit_mask {
            Some(mask) => (s + mask) & !mask,
            None => s.div_ceil(u64::from(self.shard_unit)) * u64::from(self.shard_unit),
        }
    }

    /// Tokens each GPU of the CP group holds of a sharded sequence of `len` tokens,
    /// `ceil(P / N)`, padding included (below `2^32` for every accepted length).
    #[inline]
    pub fn share(&self, len: u32) -> u32 {
        let p = self.padded(len);
        let share = match self.cp_shift {
            Some(k) => (p + (1u64 << k) - 1) >> k,
            None => p.div_ceil(u64::from(self.cp)),
        };
        share as u32
    }

    /// Tokens a local sequence of `len` tokens costs the rank that holds it, padding
    /// included.
    #[inline]
    pub fn local(&self, len: u32) -> u32 {
        if self.local_unit == 1 {
            len
        } else {
            let u = self.local_unit;
            // len < 2^31 and u <= 2^16: no overflow.
            len.div_ceil(u) * u
        }
    }

    /// The longest sequence that fits the bucket sharded (and that [`Budget::check_lengths`]
    /// accepts): `u·floor(N·C / u)` for the shard unit `u`, capped at
    /// [`MAX_SEQ_LEN`]; 0 when not even one token fits (a shard unit above `N·C`).
    #[inline]
    pub fn max_sharded_len(&self) -> u32 {
        // Capped at MAX_SEQ_LEN < 2^32: the cast keeps the value.
        self.max_len.min(u64::from(MAX_SEQ_LEN)) as u32
    }

    /// Whether a sequence of `len` tokens fits the bucket sharded.
    #[inline]
    pub fn fits_sharded(&self, len: u32) -> bool {
        u64::from(len) <= self.max_len
    }

    /// Checks a batch against the configuration's limits and this budget, and returns its
    /// total token count.
    ///
    /// # Errors
    /// [`Error::TooManySequences`], [`Error::EmptySequence`], [`Error::LengthOutOfRange`] or
    /// [`Error::SequenceTooLong`] (the first offending sequence in input order).
    pub fn check_lengths(&self, lengths: &[u32]) -> Result<u64, Error> {
        self.check_lengths_chunked(lengths, &Chunking::OFF, 1)
    }

    /// [`Budget::check_lengths`] for a policy that runs every sequence longer than a chunk
    /// chunked on `group` GPUs (`chunkflow`: the whole CP group): a sequence too long to fit
    /// sharded is accepted when `chunking` can chunk it and its chunked peak on the group
    /// ([`Budget::chunked`]) fits BucketSize. With chunking off it is `check_lengths`.
    ///
    /// # Errors
    /// As [`Budget::check_lengths`], and [`Error::ChunkOverBudget`] for a sequence too long
    /// sharded whose chunked peak is over BucketSize too.
    pub fn check_lengths_chunked(
        &self,
        lengths: &[u32],
        chunking: &Chunking,
        group: u32,
    ) -> Result<u64, Error> {
        if lengths.len() > MAX_SEQS {
            return Err(Error::TooManySequences {
                count: lengths.len(),
                max: MAX_SEQS,
            });
        }
        let mut total = 0u64;
        for (index, &len) in lengths.iter().enumerate() {
            if len == 0 {
                return Err(Error::EmptySequence { index });
            }
            if len > MAX_SEQ_LEN {
                return Err(Error::LengthOutOfRange {
                    index,
                    len,
                    max: MAX_SEQ_LEN,
                });
            }
            if !self.fits_sharded(len) {
                self.too_long(index, len, chunking, group)?;
            }
            // At most 2^16 sequences of < 2^31 tokens: < 2^47, no overflow.
            total += u64::from(len);
        }
        Ok(total)
    }

    /// The error for a sequence too long to fit sharded, unless it fits chunked.
    #[cold]
    fn too_long(
        &self,
        index: usize,
        len: u32,
        chunking: &Chunking,
        group: u32,
    ) -> Result<(), Error> {
        if !chunking.can_chunk(len) {
            return Err(Error::SequenceTooLong {
                index,
                len,
                needed_bucket: self.share(len),
            });
        }
        let peak = self.chunked(chunking, len, group);
        if peak > u64::from(self.bucket) {
            return Err(Error::ChunkOverBudget { index, len, peak });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::shape::ModelShape;

    fn budget(cp: u32, bucket: u32, padding: ShardPadding, m: u32, local: bool) -> Budget {
        let mut cfg = Config::new(1, cp, bucket, ModelShape::QWEN2_5_0_5B);
        cfg.shard_padding = padding;
        cfg.pad_multiple = m;
        cfg.pad_local = local;
        cfg.budget()
    }

    #[test]
    fn share_is_ceiling_without_padding() {
        let b = |cp| budget(cp, 1, ShardPadding::None, 1, false);
        assert_eq!(b(4).share(30), 8);
        assert_eq!(b(4).share(32), 8);
        assert_eq!(b(8).share(1), 1);
        assert_eq!(b(3).share(10), 4);
        assert_eq!(b(1).share(MAX_SEQ_LEN), MAX_SEQ_LEN);
    }

    #[test]
    fn zigzag_padding_rounds_to_pairs_of_chunks() {
        let b = |cp| budget(cp, 1, ShardPadding::Zigzag, 1, false);
        // N = 4, S = 10: 2N = 8 chunks of ceil(10/8) = 2 tokens, 2 chunks per GPU.
        assert_eq!(b(4).share(10), 4);
        assert_eq!(b(4).padded(10), 16);
        assert_eq!(b(4).share(16), 4);
        assert_eq!(b(4).share(17), 6);
        assert_eq!(b(8).share(1), 2);
        assert_eq!(b(3).share(7), 4);
        assert_eq!(b(256).share(MAX_SEQ_LEN), 2 * MAX_SEQ_LEN.div_ceil(512));
    }

    /// Regression (C contract): at CP 1 a sequence is never exchanged, so zigzag padding adds
    /// nothing; CP 1, C 5, zigzag used to refuse a 5-token sequence (it charged 6).
    #[test]
    fn zigzag_at_cp_1_pads_nothing() {
        let b = budget(1, 5, ShardPadding::Zigzag, 1, false);
        assert_eq!(b.share(5), 5);
        assert_eq!(b.padded(5), 5);
        assert_eq!(b.check_lengths(&[5]), Ok(5));
        assert_eq!(b.share(MAX_SEQ_LEN), MAX_SEQ_LEN);
    }

    #[test]
    fn pad_multiple_pads_shards_to_the_lcm_with_2n() {
        // Megatron with sequence parallelism: M = 2·cp·tp = 16 at CP 4, TP 2: unit 16.
        let b = budget(4, 100, ShardPadding::Zigzag, 16, false);
        assert_eq!(b.shard_unit(), 16);
        assert_eq!(b.padded(17), 32);
        assert_eq!(b.share(17), 8);
        // lcm(2·3, 4) = 12 at CP 3.
        let b = budget(3, 100, ShardPadding::Zigzag, 4, false);
        assert_eq!(b.shard_unit(), 12);
        assert_eq!(b.padded(13), 24);
        assert_eq!(b.share(13), 8);
        // A pad multiple pads whole zigzag chunks with either shard padding; at CP 1 the unit
        // is M itself.
        let b = budget(4, 100, ShardPadding::None, 6, false);
        assert_eq!((b.shard_unit(), b.padded(7), b.share(7)), (24, 24, 6));
        let b = budget(1, 100, ShardPadding::Zigzag, 16, false);
        assert_eq!((b.shard_unit(), b.share(17)), (16, 32));
        // Local sequences are padded only when asked.
        assert_eq!(b.local(17), 17);
        let b = budget(4, 100, ShardPadding::Zigzag, 16, true);
        assert_eq!(b.local(17), 32);
        assert_eq!(b.local(32), 32);
    }

    #[test]
    fn first_offender_is_reported() {
        let b = budget(4, 10, ShardPadding::None, 1, false);
        assert_eq!(b.check_lengths(&[5, 40, 3]), Ok(48));
        assert_eq!(
            b.check_lengths(&[5, 41, 0]),
            Err(Error::SequenceTooLong {
                index: 1,
                len: 41,
                needed_bucket: 11
            })
        );
        assert_eq!(
            b.check_lengths(&[5, 0, 41]),
            Err(Error::EmptySequence { index: 1 })
        );
        assert_eq!(
            b.check_lengths(&[u32::MAX]),
            Err(Error::LengthOutOfRange {
                index: 0,
                len: u32::MAX,
                max: MAX_SEQ_LEN
            })
        );
        assert_eq!(b.check_lengths(&[]), Ok(0));
    }

    /// The longest length the search for `share(s) <= C` finds (downwards from `N·C`).
    fn searched_max_len(b: &Budget) -> u32 {
        let mut s = (u64::from(b.cp()) * u64::from(b.bucket())).min(u64::from(MAX_SEQ_LEN));
        while s > 0 && b.share(s as u32) > b.bucket() {
            s -= 1;
        }
        s as u32
    }

    /// The closed form agrees with the search and with `check_lengths` on every budget of a
    /// grid of CP sizes, buckets, paddings and pad multiples.
    #[test]
    fn max_sharded_len_is_the_longest_accepted_length() {
        let (max_cp, max_bucket) = if cfg!(miri) { (3, 5) } else { (17, 70) };
        for padding in [ShardPadding::None, ShardPadding::Zigzag] {
            for m in [1, 2, 3, 5, 8, 12, 16, 48] {
                for cp in 1..=max_cp {
                    for bucket in 1..=max_bucket {
                        let b = budget(cp, bucket, padding, m, m % 2 == 0);
                        let max = b.max_sharded_len();
                        assert_eq!(
                            max,
                            searched_max_len(&b),
                            "{padding:?} m {m} cp {cp} C {bucket}"
                        );
                        if max > 0 {
                            assert!(b.check_lengths(&[max]).is_ok());
                        }
                        assert!(b.check_lengths(&[max + 1]).is_err());
                    }
                }
            }
        }
        // Large budgets: capped at MAX_SEQ_LEN, and exact far from the cap.
        let b = budget(256, MAX_SEQ_LEN, ShardPadding::Zigzag, 65_536, false);
        assert_eq!(b.max_sharded_len(), MAX_SEQ_LEN);
        let b = budget(8, 13 * 1024 + 1, ShardPadding::Zigzag, 48, false);
        assert_eq!(b.max_sharded_len(), searched_max_len(&b));
        assert_eq!(
            budget(8, 1, ShardPadding::Zigzag, 1, false).max_sharded_len(),
            0
        );
    }

    /// The division-free check rejects exactly the lengths whose share exceeds the bucket.
    #[test]
    fn threshold_equals_the_share_test() {
        for padding in [ShardPadding::None, ShardPadding::Zigzag] {
            // Fewer cases under miri, which runs this about 1,000x slower.
            let (max_cp, max_bucket, ms): (u32, u32, &[u32]) = if cfg!(miri) {
                (3, 6, &[1, 4])
            } else {
                (9, 40, &[1, 2, 3, 8, 12])
            };
            for &m in ms {
                for cp in 1..=max_cp {
                    for bucket in 1..=max_bucket {
                        let b = budget(cp, bucket, padding, m, false);
                        for len in 1..=(2 * cp * bucket + 3) {
                            let share = b.share(len);
                            let p = b.padded(len);
                            assert!(
                                p >= u64::from(len) && p.is_multiple_of(u64::from(b.shard_unit()))
                            );
                            assert_eq!(u64::from(share), p.div_ceil(u64::from(cp)));
                            let want = if share > bucket {
                                Err(Error::SequenceTooLong {
                                    index: 0,
                                    len,
                                    needed_bucket: share,
                                })
                            } else {
                                Ok(u64::from(len))
                            };
                            assert_eq!(b.check_lengths(&[len]), want, "{padding:?} {cp} {bucket}");
                        }
                    }
                }
            }
        }
        let b = budget(256, MAX_SEQ_LEN, ShardPadding::Zigzag, 1, false);
        assert_eq!(b.check_lengths(&[MAX_SEQ_LEN]), Ok(u64::from(MAX_SEQ_LEN)));
        let b = budget(256, MAX_SEQ_LEN, ShardPadding::Zigzag, 65_536, true);
        assert!(b.share(MAX_SEQ_LEN) <= MAX_SEQ_LEN / 256 + 65_536);
        assert_eq!(b.local(MAX_SEQ_LEN), 1u32 << 31);
    }
}
