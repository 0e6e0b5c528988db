//! The one plan type every policy writes: placements, the micro-batch table, per-GPU token
//! loads and a summary, in caller buffers sized by [`PlanSizes`].

use crate::config::Config;
pub use crate::config::cp_group::CpGroup;
use crate::error::{Buffer, Error};

/// `Placement::cp_rank` of a sequence sharded over the whole CP group.
pub const SHARDED: i32 = -1;
/// `Placement::cp_rank` of a chunked sequence: it runs as consecutive chunks
/// ([`Config::chunking`]) on the GPU or aligned group named by `cp_first` and `cp_size`.
pub const CHUNKED: i32 = -2;

/// Where one sequence runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Placement {
    /// The data-parallel rank.
    pub dp_rank: u32,
    /// The micro-batch index on that DP rank (0-based, run in this order).
    pub micro_batch: u32,
    /// [`SHARDED`] (-1), [`CHUNKED`] (-2), or the CP rank that holds the sequence whole.
    pub cp_rank: i32,
    /// For a sharded or chunked sequence: the first CP rank of the group it runs on (see
    /// [`Placement::cp_size`]); 0 otherwise.
    pub cp_first: u16,
    /// For a sharded sequence: the size `g` of that sub-group, or 0 for the whole CP group
    /// (what every policy but `balanced` writes). A sub-group is aligned and contiguous:
    /// `g` a power of two that divides the CP size, `cp_first` a multiple of `g`
    /// ([`CpGroup::is_valid_shard`]). For a chunked sequence: the size of its aligned group,
    /// 1 (one GPU) up to the CP size. 0 for a local sequence.
    pub cp_size: u16,
}

impl Placement {
    /// Whether the sequence is sharded (over the whole CP group or a sub-group).
    pub fn is_sharded(&self) -> bool {
        self.cp_rank == SHARDED
    }

    /// Whether the sequence runs chunked ([`CHUNKED`]).
    pub fn is_chunked(&self) -> bool {
        self.cp_rank == CHUNKED
    }

    /// Whether the sequence is held whole on one CP rank (neither sharded nor chunked).
    pub fn is_local(&self) -> bool {
        self.cp_rank >= 0
    }

    /// The CP ranks that hold the sequence in a CP group of `cp` ranks: `(r, 1)` for a local
    /// sequence on rank `r`, `(0, cp)` for the whole group, else its sub-group.
    pub fn group(&self, cp: u32) -> CpGroup {
        if self.cp_rank >= 0 {
            CpGroup {
                first: self.cp_rank as u32,
                size: 1,
            }
        } else if self.cp_rank == CHUNKED {
            CpGroup {
                first: u32::from(self.cp_first),
                size: u32::from(self.cp_size),
            }
        } else if self.cp_size == 0 || u32::from(self.cp_size) == cp {
            CpGroup::whole(cp)
        } else {
            CpGroup {
                first: u32::from(self.cp_first),
                size: u32::from(self.cp_size),
            }
        }
    }

    /// Whether the placement's group fields are well formed for a CP group of `cp` ranks: a
    /// local sequence names none (`cp_first = cp_size = 0`); a sharded one names the whole
    /// group (`cp_size` 0 or `cp`, `cp_first` 0) or a valid sub-group
    /// ([`CpGroup::is_valid_shard`]); a chunked one an aligned group of 1 to `cp` ranks
    /// ([`CpGroup::is_valid_chunk_group`]).
    pub fn group_is_valid(&self, cp: u32) -> bool {
        if self.cp_rank == CHUNKED {
            return self.group(cp).is_valid_chunk_group(cp);
        }
        if self.cp_rank != SHARDED {
            return self.cp_first == 0 && self.cp_size == 0;
        }
        let whole = self.cp_size == 0 || u32::from(self.cp_size) == cp;
        if whole {
            self.cp_first == 0
        } else {
            self.group(cp).is_valid_shard(cp)
        }
    }

    /// Whether the sequence is sharded over a proper sub-group of the `cp` ranks.
    pub fn is_subgroup(&self, cp: u32) -> bool {
        self.is_sharded() && self.group(cp).size < cp
    }
}

/// One micro-batch: which DP rank runs it, and where its sequences sit in `members`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct MicroBatch {
    /// The DP rank that runs it.
    pub dp_rank: u32,
    /// Its index among that rank's micro-batches.
    pub index: u32,
    /// Offset of its first sequence in [`Plan::members`].
    pub first: u32,
    /// How many sequences it holds (at least one).
    pub count: u32,
}

/// Counts that summarise a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Summary {
    /// Micro-batches over all DP ranks.
    pub micro_batches: u32,
    /// Sequences sharded over their CP group.
    pub sharded: u32,
    /// Sequences run chunked.
    pub chunked: u32,
    /// DACP rollbacks (local sequences turned sharded to free memory).
    pub rollbacks: u32,
    /// The most tokens any GPU holds in any micro-batch.
    pub peak_rank_tokens: u32,
    /// Tokens in the batch.
    pub total_tokens: u64,
}

/// How many elements each [`PlanBuffers`] slice needs for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSizes {
    /// `n`: one per sequence.
    pub placements: usize,
    /// `n`: at most one micro-batch per sequence.
    pub micro_batches: usize,
    /// `n`: every sequence appears once.
    pub members: usize,
    /// `n x cp`: one per (micro-batch, CP rank).
    pub rank_tokens: usize,
    /// `dp`.
    pub micro_batches_per_dp: usize,
}

impl PlanSizes {
    /// The sizes for a batch of `n` sequences under `cfg` (an upper bound for every policy).
    pub fn for_batch(n: usize, cfg: &Config) -> PlanSizes {
        PlanSizes {
            placements: n,
            micro_batches: n,
            members: n,
            rank_tokens: n.saturating_mul(cfg.cp as usize),
            micro_batches_per_dp: cfg.dp as usize,
        }
    }

    /// Checks that `out` is at least this large.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] naming the first short buffer.
    pub fn check(&self, out: &PlanBuffers<'_>) -> Result<(), Error> {
        let pairs = [
            (Buffer::Placements, self.placements, out.placements.len()),
            (
                Buffer::MicroBatches,
                self.micro_batches,
                out.micro_batches.len(),
            ),
            (Buffer::Members, self.members, out.members.len()),
            (Buffer::RankTokens, self.rank_tokens, out.rank_tokens.len()),
            (
                Buffer::MicroBatchesPerDp,
                self.micro_batches_per_dp,
                out.micro_batches_per_dp.len(),
            ),
        ];
        for (buffer, needed, got) in pairs {
            if got < needed {
                return Err(Error::BufferTooSmall {
                    buffer,
                    needed,
                    got,
                });
            }
        }
        Ok(())
    }
}

/// Caller-provided storage a policy writes the plan into (sizes: [`PlanSizes`]).
#[derive(Debug)]
pub struct PlanBuffers<'a> {
    /// Per sequence, in input order.
    pub placements: &'a mut [Placement],
    /// Per micro-batch, grouped by DP rank, then by index.
    pub micro_batches: &'a mut [MicroBatch],
    /// Sequence indices grouped by micro-batch.
    pub members: &'a mut [u32],
    /// Tokens per (micro-batch, CP rank): entry `g * cp + r`.
    pub rank_tokens: &'a mut [u32],
    /// Micro-batches per DP rank.
    pub micro_batches_per_dp: &'a mut [u32],
}

impl PlanBuffers<'_> {
    /// The same buffers, lent for a shorter time (a policy writes through them, then the
    /// fill pass rearranges them).
    pub(crate) fn reborrow(&mut self) -> PlanBuffers<'_> {
        PlanBuffers {
            placements: self.placements,
            micro_batches: self.micro_batches,
            members: self.members,
            rank_tokens: self.rank_tokens,
            micro_batches_per_dp: self.micro_batches_per_dp,
        }
    }
}

/// A finished plan: read-only views into the [`PlanBuffers`] it was written to.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    pub(crate) dp: u32,
    pub(crate) cp: u32,
    pub(crate) placements: &'a [Placement],
    pub(crate) micro_batches: &'a [MicroBatch],
    pub(crate) members: &'a [u32],
    pub(crate) rank_tokens: &'a [u32],
    pub(crate) micro_batches_per_dp: &'a [u32],
    pub(crate) summary: Summary,
}

impl<'a> Plan<'a> {
    /// Data-parallel size of the plan.
    pub fn dp(&self) -> u32 {
        self.dp
    }
    /// Context-parallel size of the plan.
    pub fn cp(&self) -> u32 {
        self.cp
    }
    /// Per sequence, in input order.
    pub fn placements(&self) -> &'a [Placement] {
        self.placements
    }
    /// Every micro-batch, grouped by DP rank, then by index.
    pub fn micro_batches(&self) -> &'a [MicroBatch] {
        self.micro_batches
    }
    /// Sequence indices grouped by micro-batch (see [`MicroBatch::first`]).
    pub fn members(&self) -> &'a [u32] {
        self.members
    }
    /// Micro-batches per DP rank.
    pub fn micro_batches_per_dp(&self) -> &'a [u32] {
        self.micro_batches_per_dp
    }
    /// Counts that summarise the plan.
    pub fn summary(&self) -> Summary {
        self.summary
    }
    /// The sequences of micro-batch `mb`, in the order the policy placed them.
    pub fn members_of(&self, mb: &MicroBatch) -> &'a [u32] {
        let first = mb.first as usize;
        first
            .checked_add(mb.count as usize)
            .and_then(|end| self.members.get(first..end))
            .unwrap_or(&[])
    }
    /// Tokens per CP rank of the `g`-th micro-batch (global index into [`Plan::micro_batches`]).
    pub fn rank_tokens(&self, g: usize) -> &'a [u32] {
        let cp = self.cp as usize;
        self.rank_tokens.get(g * cp..(g + 1) * cp).unwrap_or(&[])
    }
    /// The global index of micro-batch `index` of DP rank `dp_rank`, if it exists.
    pub fn find(&self, dp_rank: u32, index: u32) -> Option<usize> {
        self.micro_batches
            .binary_search_by_key(&(dp_rank, index), |m| (m.dp_rank, m.index))
            .ok()
    }
}

/// The slices of a plan held outside a [`Plan`], e.g. the arrays a C caller got from
/// `skrull_schedule()`, for [`Plan::from_parts`]. Each slice holds exactly the plan's entries
/// (not the capacity of the buffer it came from).
#[derive(Debug, Clone, Copy)]
pub struct PlanParts<'a> {
    /// Per sequence, in input order (`n` entries).
    pub placements: &'a [Placement],
    /// Every micro-batch, grouped by DP rank, then by index.
    pub micro_batches: &'a [MicroBatch],
    /// Sequence indices grouped by micro-batch (`n` entries).
    pub members: &'a [u32],
    /// Tokens per (micro-batch, CP rank): `micro_batches.len() x cp` entries.
    pub rank_tokens: &'a [u32],
    /// Micro-batches per DP rank (`dp` entries).
    pub micro_batches_per_dp: &'a [u32],
    /// DACP rollbacks, copied into [`Summary::rollbacks`] (the arrays do not record them).
    pub rollbacks: u32,
}
