//! Chunking (ChunkFlow's Algorithm 2): a long sequence runs on one GPU or an aligned CP group
//! as consecutive chunks of at most [`Chunking::size`] tokens, in order, each attending to the
//! K/V state of the chunks before it. Only the last [`Chunking::keep`] chunks keep their
//! activations through the forward pass; the others are recomputed in the backward pass, one
//! at a time. What that holds on a GPU, in BucketSize tokens, is [`Chunking::peak`]; the time
//! it takes is [`TimeModel::chunked`](crate::model::time::TimeModel::chunked). See
//! `docs/chunking.md`.

/// Largest [`Chunking::keep`] (chunks whose activations stay alive).
pub const MAX_CHUNK_KEEP: u32 = 64;
/// [`Chunking::state_permille`] is in thousandths of a token.
pub const STATE_SCALE: u64 = 1000;

/// How sequences may be chunked. Off by default ([`Chunking::size`] 0): no policy writes a
/// chunked placement and the checker refuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunking {
    /// ChunkSize: the most tokens of one chunk (0: chunking off). A sequence of `S` tokens is
    /// cut into `ceil(S / size)` chunks of `size` tokens, the last one shorter; only
    /// sequences longer than `size` may be chunked.
    pub size: u32,
    /// K: how many chunks keep their activations from the forward to the backward pass
    /// (ChunkFlow's K, at least 1).
    pub keep: u32,
    /// BucketSize tokens that the K/V state of one token occupies, in thousandths: the K/V
    /// of every earlier chunk and its gradient stay alive while a chunked sequence runs.
    /// With `Mem(S) = a·S + b`, it is `1000 · bytes of K, V, dK, dV per token / a`; 64
    /// (1/16 of a token) is an upper estimate for the Qwen2.5 models (see `docs/chunking.md`).
    pub state_permille: u32,
}

impl Default for Chunking {
    fn default() -> Self {
        Chunking::OFF
    }
}

impl Chunking {
    /// Chunking off.
    pub const OFF: Chunking = Chunking {
        size: 0,
        keep: 1,
        state_permille: 64,
    };

    /// Chunks of `size` tokens with `keep` chunks kept alive and the default state charge.
    pub const fn new(size: u32, keep: u32) -> Chunking {
        Chunking {
            size,
            keep,
            state_permille: Chunking::OFF.state_permille,
        }
    }

    /// Whether chunking is on.
    #[inline]
    pub const fn is_on(&self) -> bool {
        self.size != 0
    }

    /// Whether a sequence of `len` tokens may be chunked (chunking is on and it is longer than
    /// one chunk).
    #[inline]
    pub const fn can_chunk(&self, len: u32) -> bool {
        self.size != 0 && len > self.size
    }

    /// How many chunks a sequence of `len` tokens is cut into (0 with chunking off).
    #[inline]
    pub const fn count(&self, len: u32) -> u32 {
        if self.size == 0 {
            0
        } else {
            len.div_ceil(self.size)
        }
    }

    /// The tokens of chunk `i` of a sequence of `len` tokens (0 past the last).
    #[inline]
    pub const fn chunk_len(&self, len: u32, i: u32) -> u32 {
        let start = (i as u64) * (self.size as u64);
        if start >= len as u64 {
            0
        } else {
            let left = len as u64 - start;
            if left < self.size as u64 {
                left as u32
            } else {
                self.size
            }
        }
    }

    /// BucketSize tokens the K/V state of a `len`-token sequence occupies in all:
    /// `ceil(len · state_permille / 1000)`.
    #[inline]
    pub const fn state_tokens(&self, len: u32) -> u64 {
        ((len as u64) * (self.state_permille as u64)).div_ceil(STATE_SCALE)
    }

    /// The most BucketSize tokens a chunked sequence of `len` tokens holds on each GPU of a
    /// group of `g` ranks, where `share(t)` is what a `t`-token chunk costs each of them
    /// (`t` itself on one GPU): the activations alive at once (the last K chunks at the end of
    /// the forward pass, or one full chunk while earlier ones are recomputed) plus the state
    /// split over the group, `ceil(state_tokens / g)`.
    pub fn peak(&self, len: u32, g: u32, share: impl Fn(u32) -> u32) -> u64 {
        let n = self.count(len);
        let keep = self.keep.clamp(1, n.max(1));
        let mut kept = 0u64;
        // With chunking off (no chunks) nothing but the state is charged.
        for i in n.saturating_sub(keep)..n {
            kept += u64::from(share(self.chunk_len(len, i)));
        }
        let live = if n > keep {
            kept.max(u64::from(share(self.size)))
        } else {
            kept
        };
        live + self.state_tokens(len).div_ceil(u64::from(g.max(1)))
    }

    /// Checks the values: with chunking on, `keep` in `1..=MAX_CHUNK_KEEP` and
    /// `state_permille <= 1000`.
    pub const fn is_valid(&self) -> bool {
        self.size == 0
            || (self.keep >= 1 && self.keep <= MAX_CHUNK_KEEP && self.state_permille <= 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_tile_the_sequence() {
        let c = Chunking::new(4096, 2);
        assert_eq!(c.count(10_000), 3);
        let lens: [u32; 4] = core::array::from_fn(|i| c.chunk_len(10_000, i as u32));
        assert_eq!(lens, [4096, 4096, 1808, 0]);
        assert!(c.can_chunk(4097) && !c.can_chunk(4096));
        assert!(!Chunking::OFF.can_chunk(u32::MAX));
    }

    #[test]
    fn peak_counts_kept_chunks_a_recomputed_chunk_and_the_state() {
        let one = |t: u32| t;
        // 3 chunks, K = 1: the kept last chunk (1,808) is smaller than a recomputed full one.
        let c = Chunking::new(4096, 1);
        assert_eq!(c.peak(10_000, 1, one), 4096 + 640);
        // K = 2: the last two chunks.
        let c = Chunking::new(4096, 2);
        assert_eq!(c.peak(10_000, 1, one), 4096 + 1808 + 640);
        // K >= n: everything is kept, nothing recomputed.
        let c = Chunking::new(4096, 8);
        assert_eq!(c.peak(10_000, 1, one), 10_000 + 640);
        // On 4 GPUs: shares and a quarter of the state.
        let c = Chunking::new(4096, 1);
        assert_eq!(c.peak(10_000, 4, |t: u32| t.div_ceil(4)), 1024 + 160);
        // No chunks (chunking off): only the state, and no underflow.
        assert_eq!(Chunking::OFF.peak(10_000, 1, one), 640);
    }

    #[test]
    fn validity() {
        assert!(Chunking::OFF.is_valid());
        assert!(Chunking::new(1024, 1).is_valid());
        assert!(!Chunking::new(1024, 0).is_valid());
        assert!(!Chunking::new(1024, MAX_CHUNK_KEEP + 1).is_valid());
        let mut c = Chunking::new(1024, 1);
        c.state_permille = 1001;
        assert!(!c.is_valid());
    }
}
