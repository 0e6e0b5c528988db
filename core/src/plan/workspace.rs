//! Scratch memory the caller lends to a scheduling call (the core never allocates).

use crate::config::{Config, Policy};
use crate::error::{Buffer, Error};

/// How many elements each [`Workspace`] slice needs for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceSizes {
    /// `n`: sort keys.
    pub keys: usize,
    /// `n`: sequences grouped by DP rank.
    pub seqs: usize,
    /// `n`: one micro-batch's sequences.
    pub scratch: usize,
    /// `dp`: FLOPs load per DP rank.
    pub dp_loads: usize,
    /// `dp`: heap of DP ranks by load.
    pub dp_heap: usize,
    /// `dp + 1`: offsets of each DP rank's sequences in `seqs`.
    pub dp_start: usize,
    /// `balanced`: `4n` per-sequence costs; 0 for the other policies.
    pub costs: usize,
    /// `balanced`: `4n` decision words (four rows of `n`, see [`Workspace::marks`]); 0 for
    /// the others.
    pub marks: usize,
}

impl WorkspaceSizes {
    /// The sizes for a batch of `n` sequences under `cfg` (its policy decides the last two
    /// rows).
    pub fn for_batch(n: usize, cfg: &Config) -> WorkspaceSizes {
        let dp = cfg.dp as usize;
        let balanced = cfg.policy == Policy::Balanced;
        WorkspaceSizes {
            keys: n,
            seqs: n,
            scratch: n,
            dp_loads: dp,
            dp_heap: dp,
            dp_start: dp + 1,
            costs: if balanced { 4 * n } else { 0 },
            marks: if balanced { 4 * n } else { 0 },
        }
    }

    /// Sizes that fit every policy: what a caller that picks the policy later allocates.
    pub fn for_any_policy(n: usize, cfg: &Config) -> WorkspaceSizes {
        Self::for_batch(n, &cfg.with_policy(Policy::Balanced))
    }

    /// Bytes of one workspace of these sizes, counting each slice at its element size.
    pub fn bytes(&self) -> usize {
        (self.keys + self.costs) * 8
            + (self.seqs + self.scratch + self.dp_heap + self.dp_start + self.marks) * 4
            + self.dp_loads * 16
    }

    /// Checks that `ws` is at least this large.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] with [`Buffer::Workspace`] and the first short slice's sizes.
    pub fn check(&self, ws: &Workspace<'_>) -> Result<(), Error> {
        let pairs = [
            (self.keys, ws.keys.len()),
            (self.seqs, ws.seqs.len()),
            (self.scratch, ws.scratch.len()),
            (self.dp_loads, ws.dp_loads.len()),
            (self.dp_heap, ws.dp_heap.len()),
            (self.dp_start, ws.dp_start.len()),
            (self.costs, ws.costs.len()),
            (self.marks, ws.marks.len()),
        ];
        for (needed, got) in pairs {
            if got < needed {
                return Err(Error::BufferTooSmall {
                    buffer: Buffer::Workspace,
                    needed,
                    got,
                });
            }
        }
        Ok(())
    }
}

/// Caller-provided scratch memory (sizes: [`WorkspaceSizes`]); its contents on entry do not
/// matter and on return are unspecified.
#[derive(Debug)]
pub struct Workspace<'a> {
    /// Sort keys, `(length << 32) | index`.
    pub keys: &'a mut [u64],
    /// Sequence indices grouped by DP rank.
    pub seqs: &'a mut [u32],
    /// One micro-batch's sequence indices.
    pub scratch: &'a mut [u32],
    /// FLOPs load per DP rank.
    pub dp_loads: &'a mut [u128],
    /// Min-heap of DP ranks keyed by load.
    pub dp_heap: &'a mut [u32],
    /// Offsets of each DP rank's sequences in `seqs`.
    pub dp_start: &'a mut [u32],
    /// `balanced`: four words per sequence, side by side: whole attention, shard attention,
    /// work (the cheaper of whole and sharded GPU time) and the cheapest sharding group's
    /// cost.
    pub costs: &'a mut [u64],
    /// `balanced`: four rows of `n` words where it stages its decisions (never in the plan
    /// buffers): per sequence its micro-batch in the grouping being tried, its decision in the
    /// fastest grouping so far, its decision in the grouping being tried, and per member of
    /// the micro-batch being placed its working decision (decisions as compact codes of the
    /// CP rank, the whole group or a sub-group). The plan writer reuses them as scratch.
    pub marks: &'a mut [u32],
}
