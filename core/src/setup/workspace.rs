//! Scratch memory the caller lends to a scheduling call: one opaque slab of 16-byte words that
//! the core carves into the rows its algorithms need (the core never allocates).

use zerocopy::{FromBytes, IntoBytes};

use crate::config::Config;
use crate::config::options::Policy;
use crate::error::{Buffer, Error};

/// One word of a [`Workspace`] slab: 16 bytes, the widest row element.
pub type Word = u128;

/// How large a [`Workspace`] must be for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceSizes {
    /// Words of the slab.
    pub words: usize,
}

impl WorkspaceSizes {
    /// The size for a batch of `n` sequences under `cfg` (`balanced` needs more than the
    /// other policies).
    pub fn for_batch(n: usize, cfg: &Config) -> WorkspaceSizes {
        WorkspaceSizes {
            words: Rows::new(n, cfg.dp as usize, cfg.policy.uses_cost_rows()).words(),
        }
    }

    /// The size that fits every policy: what a caller that picks the policy later allocates.
    pub fn for_any_policy(n: usize, cfg: &Config) -> WorkspaceSizes {
        Self::for_batch(n, &cfg.with_policy(Policy::Balanced))
    }

    /// The size that fits every policy for `n` sequences on `dp` DP ranks (what the C ABI
    /// lends).
    pub fn for_any_policy_on(n: usize, dp: u32) -> WorkspaceSizes {
        WorkspaceSizes {
            words: Rows::new(n, dp as usize, true).words(),
        }
    }

    /// Bytes of a slab of this size.
    pub fn bytes(&self) -> usize {
        self.words * size_of::<Word>()
    }

    /// Checks that `ws` is at least this large.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] with [`Buffer::Workspace`], counting words.
    pub fn check(&self, ws: &Workspace<'_>) -> Result<(), Error> {
        if ws.words.len() < self.words {
            return Err(Error::BufferTooSmall {
                buffer: Buffer::Workspace,
                needed: self.words,
                got: ws.words.len(),
            });
        }
        Ok(())
    }
}

/// Caller-provided scratch memory: a slab of [`Word`]s at least
/// [`WorkspaceSizes::for_batch`] long. Its contents on entry do not matter and on return are
/// unspecified; how the core uses it is private and may change between versions.
#[derive(Debug)]
pub struct Workspace<'a> {
    words: &'a mut [Word],
}

impl<'a> Workspace<'a> {
    /// A workspace over `words`.
    pub fn new(words: &'a mut [Word]) -> Workspace<'a> {
        Workspace { words }
    }

    /// The slab's length in words.
    pub fn words(&self) -> usize {
        self.words.len()
    }

    /// Carves the rows for `n` sequences on `dp` ranks (with `balanced`'s rows when
    /// `balanced`).
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] when the slab is shorter than [`WorkspaceSizes::for_batch`].
    pub(crate) fn carve(
        &mut self,
        n: usize,
        dp: usize,
        balanced: bool,
    ) -> Result<Scratch<'_>, Error> {
        let rows = Rows::new(n, dp, balanced);
        let short = Error::BufferTooSmall {
            buffer: Buffer::Workspace,
            needed: rows.words(),
            got: self.words.len(),
        };
        let slab = self.words.get_mut(..rows.words()).ok_or(short)?;
        let (dp_loads, rest) = slab.split_at_mut(rows.dp_loads);
        let bytes = rest.as_mut_bytes();
        let (keys, bytes) = bytes.split_at_mut(rows.keys * 8);
        let (costs, bytes) = bytes.split_at_mut(rows.costs * 8);
        let (seqs, bytes) = bytes.split_at_mut(rows.seqs * 4);
        let (scratch, bytes) = bytes.split_at_mut(rows.seqs * 4);
        let (dp_heap, bytes) = bytes.split_at_mut(rows.dp_heap * 4);
        let (dp_start, bytes) = bytes.split_at_mut(rows.dp_start * 4);
        let (marks, _) = bytes.split_at_mut(rows.marks * 4);
        // Every region starts at a multiple of its element size (u64 rows first, from a
        // 16-byte word boundary) and holds whole elements, so the casts cannot fail.
        match (
            <[u64]>::mut_from_bytes(keys),
            <[u64]>::mut_from_bytes(costs),
            <[u32]>::mut_from_bytes(seqs),
            <[u32]>::mut_from_bytes(scratch),
            <[u32]>::mut_from_bytes(dp_heap),
            <[u32]>::mut_from_bytes(dp_start),
            <[u32]>::mut_from_bytes(marks),
        ) {
            (Ok(keys), Ok(costs), Ok(seqs), Ok(scratch), Ok(dp_heap), Ok(dp_start), Ok(marks)) => {
                Ok(Scratch {
                    keys,
                    seqs,
                    scratch,
                    dp_loads,
                    dp_heap,
                    dp_start,
                    costs,
                    marks,
                })
            }
            _ => Err(short),
        }
    }
}

/// Element counts of the rows, in carving order.
#[derive(Debug, Clone, Copy)]
struct Rows {
    dp_loads: usize,
    keys: usize,
    costs: usize,
    seqs: usize,
    dp_heap: usize,
    dp_start: usize,
    marks: usize,
}

impl Rows {
    fn new(n: usize, dp: usize, balanced: bool) -> Rows {
        Rows {
            dp_loads: dp,
            keys: n,
            costs: if balanced { 4 * n } else { 0 },
            seqs: n,
            dp_heap: dp,
            dp_start: dp + 1,
            marks: if balanced { 4 * n } else { 0 },
        }
    }

    /// Words of the slab: the `u128` row, then the 8- and 4-byte rows rounded up to a word.
    fn words(&self) -> usize {
        let bytes = (self.keys + self.costs) * 8
            + (2 * self.seqs + self.dp_heap + self.dp_start + self.marks) * 4;
        self.dp_loads + bytes.div_ceil(size_of::<Word>())
    }
}

/// The rows carved from a [`Workspace`] for one call.
#[derive(Debug)]
pub(crate) struct Scratch<'a> {
    /// Sort keys, `(length << 32) | index`.
    pub(crate) keys: &'a mut [u64],
    /// Sequence indices grouped by DP rank.
    pub(crate) seqs: &'a mut [u32],
    /// One micro-batch's sequence indices.
    pub(crate) scratch: &'a mut [u32],
    /// FLOPs load per DP rank.
    pub(crate) dp_loads: &'a mut [u128],
    /// Min-heap of DP ranks keyed by load.
    pub(crate) dp_heap: &'a mut [u32],
    /// Offsets of each DP rank's sequences in `seqs`.
    pub(crate) dp_start: &'a mut [u32],
    /// `balanced`: four words per sequence, side by side: whole attention, shard attention,
    /// work (the cheaper of whole and sharded GPU time) and the cheapest sharding group's
    /// cost.
    pub(crate) costs: &'a mut [u64],
    /// `balanced`: four rows of `n` words where it stages its decisions (never in the plan
    /// buffers): per sequence its micro-batch in the grouping being tried, its decision in the
    /// fastest grouping so far, its decision in the grouping being tried, and per member of
    /// the micro-batch being placed its working decision (decisions as compact codes of the
    /// CP rank, the whole group or a sub-group). The plan writer reuses them as scratch.
    pub(crate) marks: &'a mut [u32],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::shape::ModelShape;
    use std::vec;

    #[test]
    fn every_row_is_carved_at_its_length_from_the_documented_size() {
        for (n, dp) in [(0, 1), (1, 1), (7, 3), (256, 4), (1001, 64)] {
            for policy in [Policy::Skrull, Policy::Balanced] {
                let cfg = Config::new(dp, 4, 1024, ModelShape::QWEN2_5_0_5B).with_policy(policy);
                let words = WorkspaceSizes::for_batch(n, &cfg).words;
                let mut slab = vec![0u128; words];
                let mut ws = Workspace::new(&mut slab);
                let b = policy == Policy::Balanced;
                let s = ws.carve(n, dp as usize, b).unwrap();
                let d = dp as usize;
                let extra = if b { 4 * n } else { 0 };
                assert_eq!(
                    [
                        s.keys.len(),
                        s.seqs.len(),
                        s.scratch.len(),
                        s.dp_loads.len()
                    ],
                    [n, n, n, d]
                );
                assert_eq!([s.dp_heap.len(), s.dp_start.len()], [d, d + 1]);
                assert_eq!([s.costs.len(), s.marks.len()], [extra, extra]);
                let mut short = vec![0u128; words.saturating_sub(1)];
                if words > 0 {
                    let err = Workspace::new(&mut short).carve(n, d, b).unwrap_err();
                    assert_eq!(
                        err,
                        Error::BufferTooSmall {
                            buffer: Buffer::Workspace,
                            needed: words,
                            got: words - 1
                        }
                    );
                }
            }
        }
    }
}
