//! Per-GPU execution layout: which tokens one GPU holds in one micro-batch, in the order it
//! packs them, and the FlashAttention varlen metadata, position ids, gather index and loss
//! weights that go with them.
//!
//! A [`Plan`] says where each sequence runs; this module turns it into what one GPU — DP rank
//! `d`, micro-batch `m`, CP rank `r` (a [`Gpu`]) — feeds its kernels. [`fill`] writes into
//! caller buffers (sizes: [`LayoutSizes`]) and returns a [`Layout`] of counts; it never
//! allocates and runs in `O(sequences of the DP rank + tokens written)`.
//!
//! # The GPU buffer
//!
//! The GPU packs its tokens (no gap between sequences) in up to three groups:
//!
//! ```text
//! offset 0                      local_tokens                              local + sharded tokens             tokens
//! | local group                 | sharded group                                | chunked group                  |
//! | seq a (whole) | seq b (whole) | x: chunk r | x: chunk 2N-1-r | y: chunk r | y: chunk 2N-1-r | z: chunk 0 | z: chunk 1 | ... |
//! ```
//!
//! 1. **Local group**: every sequence the plan keeps whole on rank `r`, in plan order, one
//!    [`Span`] each (padded to a multiple of `M` with [`Config::pad_local`]). It needs no CP
//!    communication: run it with a plain varlen attention call (`flash_attn_varlen_func`) with
//!    `local_cu_seqlens` (real lengths), `local_cu_seqlens_padded` (buffer offsets) and
//!    [`Layout::local_max_seqlen`].
//! 2. **Sharded group**: for every sequence the plan shards over a CP group this rank belongs
//!    to, rank `r`'s two zigzag chunks, front then back: always exactly two [`Span`]s per
//!    sharded sequence (a chunk may be empty when `S < 2N`). Run it with the CP attention
//!    kernel (ring / all-gather, e.g. TransformerEngine THD) with `sharded_cu_seqlens` (global,
//!    real lengths), `sharded_cu_seqlens_padded` (global, padded) and `rank_cu_seqlens` (this
//!    rank's part of each sequence), all relative to the start of the sharded group.
//! 3. **Chunked group** (only with [`Config::chunking`] on): the chunk passes of every chunked
//!    sequence whose group holds this rank; see [the chunked group](self#the-chunked-group).
//!
//! # Sub-group rings
//!
//! A plan may shard a sequence over an aligned sub-group of `g` ranks
//! ([`Placement::cp_size`](crate::plan::Placement::cp_size)); such a sequence is one more ring
//! (one more CP attention call, over that sub-group's process group) on the `g` ranks that hold
//! it, cut into `2g` zigzag chunks, rank `first + j` holding chunks `j` and `2g - 1 - j`. The
//! sharded group then holds one block per ring this GPU belongs to: the whole CP group's
//! sequences first, then those of its sub-group of `N/2` ranks, `N/4`, ... down to 2, each block
//! in plan order. The `cu_seqlens` arrays run on across the blocks, and [`LayoutBuffers::rings`]
//! says where each block starts ([`LayoutRing`]): run the CP kernel once per ring on
//! `cu_seqlens[offset..=offset + seqs]` (minus its first entry) over that ring's ranks. Without
//! sub-groups there is at most one ring, the whole group, and `rings` may be left empty.
//!
//! # Zigzag sharding
//!
//! A sharded sequence of `S` tokens is first padded at its end to `P` tokens
//! ([`Budget::padded`]: `P = S` without padding, a multiple of `lcm(2N, M)` with
//! [`ShardPadding::Zigzag`](crate::config::options::ShardPadding::Zigzag) or a pad multiple `M > 1`; see
//! [`crate::config::budget`]). The `P` positions are cut into `2N`
//! consecutive chunks `0..2N` (N = CP size); rank `r` holds chunk `r` (its *front* chunk) and
//! chunk `2N-1-r` (its *back* chunk), so every rank pairs an early, cheap part of the causal
//! triangle with a late, expensive one. With `q = P / 2N` and `R = P % 2N`, front chunk `k < N`
//! has `q + [k < R]` positions and back chunk `2N-1-r` has `q + [r < R - N]`; the chunks tile
//! `[0, P)` in chunk order. So:
//!
//! * when padded (TransformerEngine THD, Megatron, ring-flash-attn) `2N` divides `P`:
//!   every chunk holds `c = P / 2N` positions and every rank exactly `P / N` tokens (what the
//!   budget charged). The `P - S` padding tokens sit at positions `S..P`, in the last chunks,
//!   which are the back chunks of ranks `0, 1, ...` (a front chunk holds padding only when
//!   `c` is small against `P - S`). Causal work counted over padded positions is equal on
//!   every rank;
//! * without padding (`P = S`, uneven chunks) every rank holds `floor(S/N)` or `ceil(S/N)`
//!   tokens (never more than the `ceil(S/N)` the budget charged; see
//!   [`Layout::charged_tokens`]) and a rank's front chunk is never shorter than its back
//!   chunk. This form suits kernels that take explicit chunk boundaries or position ids
//!   (all-gather CP); TransformerEngine's THD kernel needs the padded form.
//!
//! In both forms the spread of causal attention work over the ranks (work of a token at
//! position `p` = `p + 1` keys) is at most the work of the heaviest single chunk (padded
//! positions counted); `tests/layout_props.rs` checks it.
//!
//! # The chunked group
//!
//! A chunked sequence ([`CHUNKED`]) of `S` tokens runs on the group of
//! `g` ranks its placement names as `n = ceil(S / ChunkSize)` passes, one per chunk, in order:
//! chunk `k` holds positions `k·ChunkSize .. min(S, (k+1)·ChunkSize)`
//! ([`Chunking::chunk_len`](crate::config::chunking::Chunking::chunk_len)) and attends to the
//! K/V state of the chunks before it, which the executor keeps. For every chunked sequence of
//! the micro-batch whose group holds this rank, in plan order, the group lays out its chunks in
//! order, each as:
//!
//! * on one GPU (`g = 1`): one [`Span`] of the whole chunk, `chunk` = [`WHOLE_CHUNK`] (-2),
//!   padded as a local sequence ([`Budget::local`], so only with [`Config::pad_local`]);
//! * on a group of `g > 1` ranks: the two zigzag pieces a sequence of the chunk's length
//!   sharded over that group would give this rank ([`Budget::for_group`] padding; rank
//!   `first + j` holds pieces `j` and `2g - 1 - j`, `chunk` = the piece index), positions
//!   shifted by the chunk's start. The chunk is one ring over the group's ranks.
//!
//! [`ChunkPass`] (one per chunk, in [`fill_with_passes`]'s `chunk_passes` slice, at most one
//! per span) says which chunk of which sequence each pass is, its group, its spans and where
//! its tokens sit in the buffer; [`Layout::chunked_seqs`], [`Layout::chunk_passes`] and
//! [`Layout::chunked_tokens`] count them. The local and sharded groups, their spans and every
//! `cu_seqlens` array are unchanged by chunking; a GPU without chunked sequences has no
//! chunked group. Padding of a chunk other than the last continues its positions past the
//! chunk's end (into the next chunk's range); like all padding it is masked (gather `-1`).
//!
//! The layout holds every token of the sequence over all its passes, `S/g` on each rank and
//! more than the budget charged it: the budget charges the *peak*
//! ([`Budget::chunked`]: the activations of the last K chunks, or one full chunk while
//! recomputing, plus the K/V state over `g`), which the executor meets by running the passes
//! one at a time and freeing activations. So [`Layout::charged_tokens`] bounds
//! `tokens - chunked_tokens` (the groups that are alive together), not `tokens`.
//!
//! # Position ids, gather index and loss weights
//!
//! The token at buffer offset `span.offset + i` (for `i < span.len + span.pad`) has position
//! `span.start + i` inside its own sequence: spans *are* the position-id ranges, and
//! `positions` holds the same as a full array. Padding tokens continue the count (`S..P`), so a
//! RoPE table needs `P` rows for a padded sequence. A span's first `len` tokens are real, the
//! `pad` after them are padding (mask them out of the loss).
//!
//! The **gather index** maps every buffer token to its source: the DP rank's sequences
//! concatenated in plan order (micro-batch 0's members in plan order, then micro-batch 1's,
//! ...; see [`dp_sequences`]) form one token stream, and `gather_index[i]` is the offset in
//! that stream of the token at buffer offset `i`, or `-1` for a padding token. A trainer fills
//! its buffer with one gather (`torch.index_select` after clamping, then masking), as
//! Megatron does with TransformerEngine's `thd_get_partitioned_indices`.
//!
//! [`Layout::loss_tokens`] counts the real tokens this GPU contributes; summed over every GPU
//! (all DP ranks, micro-batches and CP ranks) it equals [`Layout::global_tokens`], the tokens
//! of the global batch. Weighting each real token's loss by `1 / global_tokens` and summing
//! gradients over DP x CP (multiply by DP if the gradient all-reduce averages over DP) gives
//! the same optimizer step as unscheduled training. A trainer that masks prompt tokens or
//! shifts labels should count its own label tokens over the same spans.
//!
//! # Empty micro-batches
//!
//! With [`Config::lockstep`] a DP rank may run micro-batches past the ones the plan's table
//! lists; their layout is valid and empty (no span, every `cu_seqlens` array `[0]`, no token)
//! and its [`Layout::micro_batch_global`] is [`NO_MICRO_BATCH`].

use core::fmt;

use crate::config::Config;
use crate::config::budget::Budget;
use crate::error::Error;
use crate::plan::{CHUNKED, CpGroup, MicroBatch, Plan, SHARDED};
use crate::setup::Setup;

mod chunked;

pub use chunked::{ChunkPass, WHOLE_CHUNK};

/// [`Span::chunk`] of a local (whole) sequence.
pub const LOCAL_CHUNK: i32 = -1;

/// [`Layout::micro_batch_global`] of an empty (lockstep) micro-batch, which the plan's table
/// does not list.
pub const NO_MICRO_BATCH: u32 = u32::MAX;

/// Which GPU a layout is for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gpu {
    /// The data-parallel rank `d`.
    pub dp_rank: u32,
    /// The micro-batch index `m` on that DP rank.
    pub micro_batch: u32,
    /// The context-parallel rank `r` inside the DP rank's CP group.
    pub cp_rank: u32,
}

/// One zigzag chunk of a sharded sequence.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// First position (inside the padded sequence).
    pub start: u32,
    /// Real tokens: positions `start..start + len`.
    pub len: u32,
    /// Padding tokens after them: positions `start + len..start + len + pad`.
    pub pad: u32,
}

/// A run of consecutive tokens of one sequence in the GPU buffer; also the position-id range
/// of those tokens.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// The sequence (index into the batch's lengths).
    pub seq: u32,
    /// [`LOCAL_CHUNK`] (-1) for a whole local sequence, else the zigzag chunk index `0..2N`;
    /// in the chunked group [`WHOLE_CHUNK`] (-2) for a chunk on one GPU, else the zigzag
    /// piece index `0..2g` of the chunk ([`ChunkPass`] says which chunk).
    pub chunk: i32,
    /// Offset of the span's first token in the GPU buffer.
    pub offset: u32,
    /// Position of the first token inside its sequence (padded coordinates).
    pub start: u32,
    /// Real tokens (positions `start..start + len`).
    pub len: u32,
    /// Padding tokens after the real ones.
    pub pad: u32,
}

/// One ring (CP group) of a GPU's sharded group: the sequences sharded over ranks
/// `first..first + size`, entries `offset..=offset + seqs` of the sharded `cu_seqlens` arrays.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayoutRing {
    /// The group's first CP rank.
    pub first: u32,
    /// The group's size `g` (the CP size for the whole group).
    pub size: u32,
    /// Index of the ring's first sequence in the sharded `cu_seqlens` arrays.
    pub offset: u32,
    /// Sequences in the ring.
    pub seqs: u32,
}

/// Most rings one GPU belongs to: the whole group and one sub-group per power of two below
/// the CP size (at most 256).
pub const MAX_RINGS: u32 = 8;

/// Element counts of the [`LayoutBuffers`] slices.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayoutSizes {
    /// [`LayoutBuffers::spans`]: local sequences + 2 x sharded sequences + the chunked
    /// group's spans (1 per chunk on one GPU, 2 per chunk on a group).
    pub spans: u32,
    /// Each of [`LayoutBuffers::local_cu_seqlens`] and
    /// [`LayoutBuffers::local_cu_seqlens_padded`]: local sequences + 1.
    pub local_cu_seqlens: u32,
    /// Each of [`LayoutBuffers::sharded_cu_seqlens`], [`LayoutBuffers::sharded_cu_seqlens_padded`]
    /// and [`LayoutBuffers::rank_cu_seqlens`]: sharded sequences + 1.
    pub sharded_cu_seqlens: u32,
    /// Each of [`LayoutBuffers::positions`] and [`LayoutBuffers::gather_index`]: tokens in the
    /// GPU buffer, padding included.
    pub positions: u32,
    /// [`LayoutBuffers::rings`]: the rings of the sharded group when one is a sub-group (the
    /// slice is then required); 0 otherwise (an empty slice skips it, a longer one gets the
    /// whole group's ring).
    pub rings: u32,
    /// The `chunk_passes` slice of [`fill_with_passes`]: one per chunk of the chunked
    /// sequences on this GPU (0 without chunking; never more than `spans`).
    pub chunk_passes: u32,
}

impl LayoutSizes {
    /// Sizes that hold the layout of every GPU of every plan of up to `n` sequences under `cfg`
    /// that respects the budget (every plan [`schedule`](crate::schedule()) returns): `2n` spans,
    /// `n + 1` entries per `cu_seqlens` array and `cfg.bucket` position ids. Allocate once,
    /// reuse for every batch.
    ///
    /// With [`Config::chunking`] on, a GPU also holds every token of its chunked sequences
    /// (the budget charges only their peak), so the bound assumes each of the `n` sequences
    /// may be a chunked one of the longest accepted length ([`Config::longest_accepted`]) on
    /// one GPU: far more than any real plan needs (saturating at `u32::MAX`). Size per batch with [`LayoutSizes::for_gpu`]
    /// then, or skip `positions` and `gather_index`.
    pub fn max_for(n: usize, cfg: &Config) -> LayoutSizes {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let mut sizes = LayoutSizes {
            spans: n32.saturating_mul(2),
            local_cu_seqlens: n32.saturating_add(1),
            sharded_cu_seqlens: n32.saturating_add(1),
            positions: cfg.bucket,
            rings: if cfg.subgroups { MAX_RINGS } else { 1 },
            chunk_passes: 0,
        };
        if cfg.chunking.is_on() {
            let budget = cfg.budget();
            let (passes, spans, tokens) =
                chunked::worst_case(&budget, &cfg.chunking, cfg.longest_accepted(), cfg.cp);
            let times = |x: u64| to_u32(x.saturating_mul(u64::from(n32)));
            sizes.chunk_passes = times(passes);
            sizes.spans = sizes.spans.saturating_add(times(spans));
            sizes.positions = sizes.positions.saturating_add(times(tokens));
        }
        sizes
    }

    /// The exact sizes for one GPU of `plan`.
    ///
    /// # Errors
    /// As [`fill`], except [`LayoutError::BufferTooSmall`].
    pub fn for_gpu(
        setup: &Setup,
        lengths: &[u32],
        plan: &Plan<'_>,
        gpu: Gpu,
    ) -> Result<LayoutSizes, LayoutError> {
        measure(setup, lengths, plan, gpu).map(|(sizes, _)| sizes)
    }

    /// Checks that `out` is at least this large (an empty `local_cu_seqlens_padded`,
    /// `positions` or `gather_index` slice is accepted: it asks [`fill`] to skip that array).
    ///
    /// # Errors
    /// [`LayoutError::BufferTooSmall`] naming the first short buffer.
    pub fn check(&self, out: &LayoutBuffers<'_>) -> Result<(), LayoutError> {
        let (l, s) = (self.local_cu_seqlens, self.sharded_cu_seqlens);
        let optional = |len: usize, needed: u32| if len == 0 { 0 } else { needed };
        let pairs = [
            (LayoutBuffer::Spans, self.spans, out.spans.len()),
            (LayoutBuffer::LocalCuSeqlens, l, out.local_cu_seqlens.len()),
            (
                LayoutBuffer::LocalCuSeqlensPadded,
                optional(out.local_cu_seqlens_padded.len(), l),
                out.local_cu_seqlens_padded.len(),
            ),
            (
                LayoutBuffer::ShardedCuSeqlens,
                s,
                out.sharded_cu_seqlens.len(),
            ),
            (
                LayoutBuffer::ShardedCuSeqlensPadded,
                s,
                out.sharded_cu_seqlens_padded.len(),
            ),
            (LayoutBuffer::RankCuSeqlens, s, out.rank_cu_seqlens.len()),
            (
                LayoutBuffer::Positions,
                optional(out.positions.len(), self.positions),
                out.positions.len(),
            ),
            (
                LayoutBuffer::GatherIndex,
                optional(out.gather_index.len(), self.positions),
                out.gather_index.len(),
            ),
            (LayoutBuffer::Rings, self.rings, out.rings.len()),
        ];
        for (buffer, needed, got) in pairs {
            if got < needed as usize {
                return Err(LayoutError::BufferTooSmall {
                    buffer,
                    needed: *self,
                    got,
                });
            }
        }
        Ok(())
    }

    /// Checks that the `chunk_passes` slice of [`fill_with_passes`] holds
    /// [`LayoutSizes::chunk_passes`] entries (an empty slice is accepted: it skips them).
    ///
    /// # Errors
    /// [`LayoutError::BufferTooSmall`] for [`LayoutBuffer::ChunkPasses`].
    pub fn check_passes(&self, chunk_passes: &[ChunkPass]) -> Result<(), LayoutError> {
        let got = chunk_passes.len();
        if got != 0 && got < self.chunk_passes as usize {
            return Err(LayoutError::BufferTooSmall {
                buffer: LayoutBuffer::ChunkPasses,
                needed: *self,
                got,
            });
        }
        Ok(())
    }
}

/// Caller storage [`fill`] writes one GPU's layout into (sizes: [`LayoutSizes`]). Entries past
/// the counts in the returned [`Layout`] are left untouched.
#[derive(Debug)]
pub struct LayoutBuffers<'a> {
    /// The spans, local group first, then two per sharded sequence (front chunk, back chunk).
    pub spans: &'a mut [Span],
    /// `cu_seqlens` of the local group over real lengths: `0, S_a, S_a + S_b, ...` (int32).
    pub local_cu_seqlens: &'a mut [i32],
    /// `cu_seqlens` of the local group over padded lengths: the buffer offsets of the local
    /// sequences; equal to `local_cu_seqlens` unless [`Config::pad_local`] pads them (empty:
    /// skip).
    pub local_cu_seqlens_padded: &'a mut [i32],
    /// Global `cu_seqlens` of the sharded group over real lengths: `0, S_x, S_x + S_y, ...`.
    pub sharded_cu_seqlens: &'a mut [i32],
    /// Global `cu_seqlens` of the sharded group over padded lengths `P` (TE's
    /// `cu_seqlens_padded`); equal to `sharded_cu_seqlens` when nothing is padded.
    pub sharded_cu_seqlens_padded: &'a mut [i32],
    /// This rank's `cu_seqlens` of the sharded group: where each sequence's two chunks sit in
    /// the sharded group of this GPU's buffer (padding included; `sharded_cu_seqlens_padded / N`
    /// with [`ShardPadding::Zigzag`](crate::config::options::ShardPadding::Zigzag)).
    pub rank_cu_seqlens: &'a mut [i32],
    /// Position id of every token in the buffer (empty: skip; the spans carry the same).
    pub positions: &'a mut [i32],
    /// Source offset of every token in the DP rank's token stream, `-1` for padding (empty:
    /// skip). See the [module documentation](self).
    pub gather_index: &'a mut [i64],
    /// The rings of the sharded group, whole group first, then sub-groups largest first (see
    /// [sub-group rings](self#sub-group-rings); empty: skip, allowed when no sequence on this
    /// GPU is sharded over a sub-group).
    pub rings: &'a mut [LayoutRing],
}

/// What [`fill`] wrote, with the counts, maxima and loss weights of one GPU's layout.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The DP rank.
    pub dp_rank: u32,
    /// The micro-batch index on that DP rank.
    pub micro_batch: u32,
    /// The CP rank.
    pub cp_rank: u32,
    /// The micro-batch's global index (into [`Plan::micro_batches`] and [`Plan::rank_tokens`]),
    /// or [`NO_MICRO_BATCH`] for an empty lockstep micro-batch.
    pub micro_batch_global: u32,
    /// Sequences held whole on this GPU.
    pub local_seqs: u32,
    /// Sequences sharded over a CP group this GPU belongs to (it holds two chunks of each).
    pub sharded_seqs: u32,
    /// Rings (CP groups) those sequences ride: 0 without sharded sequences, 1 with only the
    /// whole group's, more with sub-groups ([`LayoutBuffers::rings`]).
    pub rings: u32,
    /// Spans written: `local_seqs + 2 * sharded_seqs` plus those of the chunked group.
    pub spans: u32,
    /// Tokens of the local group, padding included (buffer offsets `0..local_tokens`).
    pub local_tokens: u32,
    /// Tokens of the sharded group, padding included (offsets `local_tokens..tokens`).
    pub sharded_tokens: u32,
    /// Tokens in the GPU buffer, padding included.
    pub tokens: u32,
    /// Padding tokens among them.
    pub pad_tokens: u32,
    /// Tokens the budget charged this GPU: [`Budget::local`] per local sequence,
    /// [`Budget::share`] per sharded one and [`Budget::chunked`] (the peak) per chunked one
    /// (equals [`Plan::rank_tokens`] for a plan of `cfg`). Without chunked sequences: equal
    /// to `tokens` when every sharded share is exact (zigzag padding); otherwise it exceeds
    /// `tokens` by `ceil(P/N) - T_r` summed over the sharded sequences. The chunked group is
    /// not bounded by it (see [the chunked group](self#the-chunked-group)).
    pub charged_tokens: u32,
    /// `max_seqlen` of the local group, real tokens (0 when it is empty).
    pub local_max_seqlen: i32,
    /// Longest sharded sequence, real tokens (0 when there is none).
    pub sharded_max_seqlen: i32,
    /// Longest sharded sequence, padded.
    pub sharded_max_seqlen_padded: i32,
    /// Longest part of one sharded sequence on this rank (two chunks, padding included).
    pub rank_max_seqlen: i32,
    /// Real tokens this GPU contributes to the loss (`tokens - pad_tokens`).
    pub loss_tokens: u32,
    /// Real tokens of the whole micro-batch (all CP ranks).
    pub micro_batch_tokens: u64,
    /// Real tokens of the global batch: normalise the loss by this.
    pub global_tokens: u64,
    /// Chunked sequences whose group holds this GPU (the chunked group).
    pub chunked_seqs: u32,
    /// Chunk passes of the chunked group (entries of `chunk_passes`).
    pub chunk_passes: u32,
    /// Tokens of the chunked group, padding included (offsets
    /// `local_tokens + sharded_tokens..tokens`).
    pub chunked_tokens: u32,
    /// Most tokens of one chunk pass on this GPU, padding included (0 without one).
    pub chunk_max_tokens: u32,
}

/// Which [`LayoutBuffers`] slice an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LayoutBuffer {
    /// [`LayoutBuffers::spans`].
    Spans,
    /// [`LayoutBuffers::local_cu_seqlens`].
    LocalCuSeqlens,
    /// [`LayoutBuffers::local_cu_seqlens_padded`].
    LocalCuSeqlensPadded,
    /// [`LayoutBuffers::sharded_cu_seqlens`].
    ShardedCuSeqlens,
    /// [`LayoutBuffers::sharded_cu_seqlens_padded`].
    ShardedCuSeqlensPadded,
    /// [`LayoutBuffers::rank_cu_seqlens`].
    RankCuSeqlens,
    /// [`LayoutBuffers::positions`] (also: the buffer's token count).
    Positions,
    /// [`LayoutBuffers::gather_index`].
    GatherIndex,
    /// [`LayoutBuffers::rings`].
    Rings,
    /// The `chunk_passes` slice of [`fill_with_passes`].
    ChunkPasses,
}

/// Why [`fill`] or [`LayoutSizes::for_gpu`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The configuration is invalid.
    Config(Error),
    /// The plan was not made for this configuration and batch (DP/CP size or sequence count
    /// differ, or a listed sequence has no length or placement).
    PlanMismatch,
    /// No such GPU: `dp_rank >= dp`, `cp_rank >= cp` or `micro_batch >= micro_batches` (the
    /// micro-batches that DP rank runs; 0 for a DP rank without sequences or out of range).
    NoSuchGpu {
        /// The GPU asked for.
        gpu: Gpu,
        /// The plan's DP size.
        dp: u32,
        /// Micro-batches the DP rank runs.
        micro_batches: u32,
        /// The plan's CP size.
        cp: u32,
    },
    /// A buffer is shorter than this GPU's layout needs.
    BufferTooSmall {
        /// The first short buffer.
        buffer: LayoutBuffer,
        /// What every buffer needs.
        needed: LayoutSizes,
        /// Elements the short buffer holds.
        got: usize,
    },
    /// A value does not fit the `int32` the kernels take.
    Overflow {
        /// The array the value belongs to.
        buffer: LayoutBuffer,
        /// The value (above `i32::MAX`).
        value: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::Config(e) => write!(f, "invalid configuration: {e}"),
            LayoutError::PlanMismatch => {
                write!(f, "the plan was not made for this configuration and batch")
            }
            LayoutError::NoSuchGpu {
                gpu,
                dp,
                micro_batches,
                cp,
            } => write!(
                f,
                "no GPU (DP {}, micro-batch {}, CP {}): the plan has DP {dp}, CP {cp} and DP \
                 rank {} runs {micro_batches} micro-batches",
                gpu.dp_rank, gpu.micro_batch, gpu.cp_rank, gpu.dp_rank
            ),
            LayoutError::BufferTooSmall {
                buffer,
                needed,
                got,
            } => write!(
                f,
                "layout buffer {buffer:?} holds {got} elements; needed: {} spans, {} local \
                 cu_seqlens, {} sharded cu_seqlens, {} positions",
                needed.spans, needed.local_cu_seqlens, needed.sharded_cu_seqlens, needed.positions
            ),
            LayoutError::Overflow { buffer, value } => write!(
                f,
                "layout value {value} in {buffer:?} does not fit int32 (max {})",
                i32::MAX
            ),
        }
    }
}

impl core::error::Error for LayoutError {}

/// Zigzag chunk `chunk` (`0..2N`) of a sequence of `len` tokens sharded under `budget` (see
/// the [module documentation](self)). Exact for every accepted length; an out-of-range chunk
/// is empty.
pub fn zigzag_chunk(budget: &Budget, len: u32, chunk: u32) -> Chunk {
    let n = u64::from(budget.cp());
    let (s, p, k) = (u64::from(len), budget.padded(len), u64::from(chunk));
    if k >= 2 * n {
        return Chunk::default();
    }
    let (q, rem) = (p / (2 * n), p % (2 * n));
    let extra_back = rem.saturating_sub(n);
    let (start, width) = if k < n {
        (k * q + k.min(rem), q + u64::from(k < rem))
    } else {
        let r = 2 * n - 1 - k;
        let width = q + u64::from(r < extra_back);
        ((p - r * q - r.min(extra_back)).saturating_sub(width), width)
    };
    let real = s.saturating_sub(start).min(width);
    let c32 = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    Chunk {
        start: c32(start),
        len: c32(real),
        pad: c32(width - real),
    }
}

/// The two zigzag chunks rank `cp_rank` holds of a sequence of `len` tokens: chunk `cp_rank`
/// (front) and chunk `2N - 1 - cp_rank` (back). Empty for `cp_rank >= N`.
pub fn zigzag_chunks(budget: &Budget, len: u32, cp_rank: u32) -> [Chunk; 2] {
    let n = budget.cp();
    if cp_rank >= n {
        return [Chunk::default(); 2];
    }
    [
        zigzag_chunk(budget, len, cp_rank),
        zigzag_chunk(budget, len, 2 * n - 1 - cp_rank),
    ]
}

/// The DP rank's sequences in plan order (micro-batch by micro-batch, members in plan order):
/// the order of the token stream the gather index points into. Empty for a DP rank without
/// sequences or out of range.
pub fn dp_sequences<'a>(plan: &Plan<'a>, dp_rank: u32) -> &'a [u32] {
    let Some(first) = plan.find(dp_rank, 0) else {
        return &[];
    };
    let mbs = plan.micro_batches();
    let tail = mbs.get(first..).unwrap_or(&[]);
    let listed = tail.iter().take_while(|m| m.dp_rank == dp_rank).count();
    let (Some(a), Some(b)) = (tail.first(), tail.get(listed.saturating_sub(1))) else {
        return &[];
    };
    let start = a.first as usize;
    let end = (b.first as usize).saturating_add(b.count as usize);
    plan.members().get(start..end).unwrap_or(&[])
}

/// The rings of one GPU in fill order: the whole group, then its sub-groups of `N/2`, `N/4`,
/// ... 2 ranks (as `(first, size)`; a size that does not divide `N` or is not a power of two is
/// skipped).
fn gpu_rings(cp: u32, rank: u32) -> impl Iterator<Item = CpGroup> {
    let subs = CpGroup::sub_sizes(cp)
        .rev()
        .map(move |g| CpGroup::around(rank, g));
    core::iter::once(CpGroup::whole(cp)).chain(subs)
}

/// Totals of one GPU's layout, from the counting pass.
#[derive(Default)]
struct Totals {
    /// The micro-batch's global index, `None` for an empty lockstep micro-batch.
    g: Option<usize>,
    /// Tokens of the DP rank's stream before this micro-batch.
    stream_base: u64,
    local_seqs: u64,
    sharded_seqs: u64,
    local_tokens: u64,
    local_real: u64,
    sharded_tokens: u64,
    pad_tokens: u64,
    charged: u64,
    real_sum: u64,
    padded_sum: u64,
    local_max: u64,
    sharded_max: u64,
    sharded_max_padded: u64,
    rank_max: u64,
    mb_tokens: u64,
    /// Sharded sequences per ring of [`gpu_rings`], in its order.
    ring_seqs: [u32; MAX_RINGS as usize],
    /// Whether a sub-group ring holds a sequence.
    has_subgroup: bool,
    chunked_seqs: u64,
    chunk_passes: u64,
    chunked_spans: u64,
    chunked_tokens: u64,
    /// Most tokens of one chunk pass.
    chunk_max: u64,
    /// One past the largest position of the chunked group.
    chunked_max_pos: u64,
}

fn to_i32(buffer: LayoutBuffer, value: u64) -> Result<i32, LayoutError> {
    i32::try_from(value).map_err(|_| LayoutError::Overflow { buffer, value })
}

fn to_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The members of micro-batch `g` of the plan with their placements and lengths, in plan
/// order; `PlanMismatch` as soon as one is missing or belongs elsewhere.
fn members<'p>(
    plan: &Plan<'p>,
    lengths: &'p [u32],
    mb: &MicroBatch,
) -> impl Iterator<Item = Result<(u32, i32, CpGroup, u32), LayoutError>> + 'p {
    let (dp_rank, index, cp) = (mb.dp_rank, mb.index, plan.cp());
    let placements = plan.placements();
    plan.members_of(mb).iter().map(move |&seq| {
        let s = seq as usize;
        match (placements.get(s), lengths.get(s)) {
            (Some(p), Some(&len)) if p.dp_rank == dp_rank && p.micro_batch == index => {
                let group = p.group(cp);
                let valid = p.group_is_valid(cp);
                if valid {
                    Ok((seq, p.cp_rank, group, len))
                } else {
                    Err(LayoutError::PlanMismatch)
                }
            }
            _ => Err(LayoutError::PlanMismatch),
        }
    })
}

/// Checks the request and counts: the sizes and totals of one GPU's layout.
fn measure(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
    gpu: Gpu,
) -> Result<(LayoutSizes, Totals), LayoutError> {
    let cfg = setup.config();
    check_gpu(cfg, lengths, plan, gpu)?;
    let budget = setup.budget();
    let mut t = Totals {
        g: plan.find(gpu.dp_rank, gpu.micro_batch),
        ..Totals::default()
    };
    let Some(g) = t.g else {
        // An empty lockstep micro-batch: listed in the counts, absent from the table.
        let empty = LayoutSizes {
            spans: 0,
            local_cu_seqlens: 1,
            sharded_cu_seqlens: 1,
            positions: 0,
            rings: 0,
            chunk_passes: 0,
        };
        return Ok((empty, t));
    };
    let mb = plan
        .micro_batches()
        .get(g)
        .ok_or(LayoutError::PlanMismatch)?;
    t.stream_base = stream_base(plan, lengths, gpu, g);
    for member in members(plan, lengths, mb) {
        let (_, cp_rank, group, len) = member?;
        t.mb_tokens += u64::from(len);
        if cp_rank == SHARDED && group.contains(gpu.cp_rank) {
            tally_sharded(&mut t, cfg, &budget, group, len, gpu.cp_rank);
        } else if cp_rank == CHUNKED && group.contains(gpu.cp_rank) {
            chunked::measure(&mut t, &budget, &cfg.chunking, len, group, gpu.cp_rank);
        } else if u32::try_from(cp_rank) == Ok(gpu.cp_rank) {
            let (held, len64) = (u64::from(budget.local(len)), u64::from(len));
            t.local_seqs += 1;
            t.local_tokens += held;
            t.local_real += len64;
            t.pad_tokens += held - len64;
            t.charged += held;
            t.local_max = t.local_max.max(len64);
        }
    }
    Ok((sizes_of(&t)?, t))
}

/// The plan matches the configuration and the GPU exists.
fn check_gpu(cfg: &Config, lengths: &[u32], plan: &Plan<'_>, gpu: Gpu) -> Result<(), LayoutError> {
    if plan.dp() != cfg.dp || plan.cp() != cfg.cp || plan.placements().len() != lengths.len() {
        return Err(LayoutError::PlanMismatch);
    }
    let micro_batches = plan
        .micro_batches_per_dp()
        .get(gpu.dp_rank as usize)
        .copied()
        .unwrap_or(0);
    if gpu.micro_batch >= micro_batches || gpu.cp_rank >= cfg.cp {
        return Err(LayoutError::NoSuchGpu {
            gpu,
            dp: cfg.dp,
            micro_batches,
            cp: cfg.cp,
        });
    }
    Ok(())
}

/// Where micro-batch `g` starts in its DP rank's stream: the tokens of the rank's earlier
/// micro-batches' members.
fn stream_base(plan: &Plan<'_>, lengths: &[u32], gpu: Gpu, g: usize) -> u64 {
    let first_of_rank = plan.find(gpu.dp_rank, 0).unwrap_or(g);
    let earlier = plan.micro_batches().get(first_of_rank..g).unwrap_or(&[]);
    let (Some(a), Some(b)) = (earlier.first(), earlier.last()) else {
        return 0;
    };
    let end = (b.first as usize).saturating_add(b.count as usize);
    let before = plan.members().get(a.first as usize..end).unwrap_or(&[]);
    before
        .iter()
        .map(|&s| u64::from(lengths.get(s as usize).copied().unwrap_or(0)))
        .sum()
}

/// Counts rank `cp_rank`'s two zigzag chunks of a `len`-token sequence sharded over `group`.
fn tally_sharded(
    t: &mut Totals,
    cfg: &Config,
    budget: &Budget,
    group: CpGroup,
    len: u32,
    cp_rank: u32,
) {
    let len64 = u64::from(len);
    let rb = budget.for_group(group.size);
    let [front, back] = zigzag_chunks(&rb, len, cp_rank - group.first);
    let padded = rb.padded(len);
    let pad = u64::from(front.pad) + u64::from(back.pad);
    let share = u64::from(front.len) + u64::from(back.len) + pad;
    if let Some(k) = gpu_rings(cfg.cp, cp_rank).position(|g| g == group)
        && let Some(c) = t.ring_seqs.get_mut(k)
    {
        *c += 1;
    }
    t.has_subgroup |= group.size < cfg.cp;
    t.sharded_seqs += 1;
    t.sharded_tokens += share;
    t.pad_tokens += pad;
    t.charged += u64::from(rb.share(len));
    t.real_sum += len64;
    t.padded_sum += padded;
    t.sharded_max = t.sharded_max.max(len64);
    t.sharded_max_padded = t.sharded_max_padded.max(padded);
    t.rank_max = t.rank_max.max(share);
}

/// The buffer sizes of counted totals; `Overflow` when an int32 array would not hold a value.
fn sizes_of(t: &Totals) -> Result<LayoutSizes, LayoutError> {
    // Every value written to an int32 array is bounded by one of these sums; the gather
    // index by the stream's length, below 2^47.
    to_i32(LayoutBuffer::LocalCuSeqlensPadded, t.local_tokens)?;
    to_i32(LayoutBuffer::ShardedCuSeqlens, t.real_sum)?;
    to_i32(LayoutBuffer::ShardedCuSeqlensPadded, t.padded_sum)?;
    to_i32(LayoutBuffer::RankCuSeqlens, t.sharded_tokens)?;
    let tokens = t.local_tokens + t.sharded_tokens + t.chunked_tokens;
    to_i32(LayoutBuffer::Positions, tokens)?;
    to_i32(LayoutBuffer::Positions, t.sharded_max_padded)?;
    to_i32(LayoutBuffer::Positions, t.chunked_max_pos)?;
    Ok(LayoutSizes {
        spans: to_u32(t.local_seqs + 2 * t.sharded_seqs + t.chunked_spans),
        local_cu_seqlens: to_u32(t.local_seqs + 1),
        sharded_cu_seqlens: to_u32(t.sharded_seqs + 1),
        positions: to_u32(tokens),
        rings: if t.has_subgroup {
            t.ring_seqs.iter().filter(|&&c| c > 0).count() as u32
        } else {
            0
        },
        chunk_passes: to_u32(t.chunk_passes),
    })
}

/// Where [`fill`] writes, with its running counts.
struct Writer<'o> {
    spans: &'o mut [Span],
    positions: &'o mut [i32],
    gather: &'o mut [i64],
    n_spans: usize,
    offset: u32,
}

impl Writer<'_> {
    /// Writes one span of sequence `seq`, whose first token is token `base` of the DP rank's
    /// stream, with its position ids and gather index.
    fn push(&mut self, span: Span, base: u64) {
        if let Some(slot) = self.spans.get_mut(self.n_spans) {
            *slot = span;
        }
        self.n_spans += 1;
        let at = span.offset as usize;
        let (real, count) = (span.len as usize, (span.len + span.pad) as usize);
        // All values fit: positions are below P <= i32::MAX (checked by `measure`).
        if let Some(dst) = self.positions.get_mut(at..at + count) {
            for (p, v) in dst.iter_mut().zip(span.start..) {
                *p = v as i32;
            }
        }
        if let Some(dst) = self.gather.get_mut(at..at + count) {
            let first = base + u64::from(span.start);
            for (i, g) in dst.iter_mut().enumerate() {
                *g = if i < real {
                    (first + i as u64) as i64
                } else {
                    -1
                };
            }
        }
        self.offset += span.len + span.pad;
    }
}

/// Writes `value` at `cu[k]` when the slot exists.
fn set(cu: &mut [i32], k: usize, value: i32) {
    if let Some(slot) = cu.get_mut(k) {
        *slot = value;
    }
}

/// Fills `out` with the layout of one GPU (DP rank, micro-batch, CP rank) of `plan`, the plan
/// [`schedule`](crate::schedule()) made from `cfg` and `lengths`, and returns its counts.
///
/// Writes, in the order the GPU packs its tokens, the spans of its local sequences and of its
/// zigzag chunks of every sharded sequence, the varlen `cu_seqlens` of both groups and (unless
/// the slice is empty) every token's position id and gather index. See the
/// [module documentation](self) for the exact layout. Nothing is written when an error is
/// returned.
///
/// # Errors
/// [`LayoutError::Config`], [`LayoutError::PlanMismatch`], [`LayoutError::NoSuchGpu`],
/// [`LayoutError::Overflow`] (a `cu_seqlens` entry, position id or token count above
/// `i32::MAX`) and [`LayoutError::BufferTooSmall`].
pub fn fill(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
    gpu: Gpu,
    out: LayoutBuffers<'_>,
) -> Result<Layout, LayoutError> {
    fill_with_passes(setup, lengths, plan, gpu, out, &mut [])
}

/// [`fill`], and one [`ChunkPass`] per chunk of the chunked group into `chunk_passes`
/// ([`LayoutSizes::chunk_passes`] entries; an empty slice skips them, as [`fill`] does). See
/// [the chunked group](self#the-chunked-group).
///
/// # Errors
/// As [`fill`]; [`LayoutError::BufferTooSmall`] also for a short non-empty `chunk_passes`.
pub fn fill_with_passes(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
    gpu: Gpu,
    out: LayoutBuffers<'_>,
    chunk_passes: &mut [ChunkPass],
) -> Result<Layout, LayoutError> {
    let (sizes, t) = measure(setup, lengths, plan, gpu)?;
    let cfg = setup.config();
    sizes.check(&out)?;
    sizes.check_passes(chunk_passes)?;
    let LayoutBuffers {
        spans,
        local_cu_seqlens,
        local_cu_seqlens_padded,
        sharded_cu_seqlens,
        sharded_cu_seqlens_padded,
        rank_cu_seqlens,
        positions,
        gather_index,
        rings,
    } = out;
    for cu in [
        &mut *local_cu_seqlens,
        &mut *local_cu_seqlens_padded,
        &mut *sharded_cu_seqlens,
        &mut *sharded_cu_seqlens_padded,
        &mut *rank_cu_seqlens,
    ] {
        set(cu, 0, 0);
    }
    let mut w = Writer {
        spans,
        positions,
        gather: gather_index,
        n_spans: 0,
        offset: 0,
    };
    let budget = setup.budget();
    let mut n_rings = 0u32;
    if let Some(mb) = t.g.and_then(|g| plan.micro_batches().get(g)) {
        let local = (&mut *local_cu_seqlens, &mut *local_cu_seqlens_padded);
        write_local(
            &mut w,
            &budget,
            local,
            plan,
            lengths,
            mb,
            gpu,
            t.stream_base,
        )?;
        let cus = ShardedCus {
            real: sharded_cu_seqlens,
            padded: sharded_cu_seqlens_padded,
            rank: rank_cu_seqlens,
            rings,
        };
        n_rings = write_sharded(
            &mut w,
            cfg,
            &budget,
            cus,
            plan,
            lengths,
            mb,
            gpu,
            t.stream_base,
        )?;
        // Chunked group: the chunk passes of every chunked sequence this rank runs.
        let ctx = (&budget, &cfg.chunking, t.stream_base, gpu.cp_rank);
        chunked::write(&mut w, chunk_passes, members(plan, lengths, mb), ctx)?;
    }
    Ok(layout_of(&t, &sizes, gpu, n_rings, plan))
}

/// The local group: the sequences whole on this rank, in plan order, with their
/// `cu_seqlens` (real, padded).
#[allow(clippy::too_many_arguments)]
fn write_local(
    w: &mut Writer<'_>,
    budget: &Budget,
    (cu, cu_padded): (&mut [i32], &mut [i32]),
    plan: &Plan<'_>,
    lengths: &[u32],
    mb: &MicroBatch,
    gpu: Gpu,
    stream_base: u64,
) -> Result<(), LayoutError> {
    let (mut n_local, mut real) = (0usize, 0u32);
    let mut base = stream_base;
    for member in members(plan, lengths, mb) {
        let (seq, cp_rank, _, len) = member?;
        if cp_rank != SHARDED && u32::try_from(cp_rank) == Ok(gpu.cp_rank) {
            let span = Span {
                seq,
                chunk: LOCAL_CHUNK,
                offset: w.offset,
                start: 0,
                len,
                pad: budget.local(len) - len,
            };
            w.push(span, base);
            n_local += 1;
            real += len;
            // Both sums were bounded by i32::MAX in `measure`.
            set(cu, n_local, real as i32);
            set(cu_padded, n_local, w.offset as i32);
        }
        base += u64::from(len);
    }
    Ok(())
}

/// The sharded group's `cu_seqlens` arrays and ring table.
struct ShardedCus<'o> {
    real: &'o mut [i32],
    padded: &'o mut [i32],
    rank: &'o mut [i32],
    rings: &'o mut [LayoutRing],
}

/// The sharded group: this rank's front and back chunk of every sequence sharded over a
/// group it belongs to, ring by ring. Returns the rings written.
#[allow(clippy::too_many_arguments)]
fn write_sharded(
    w: &mut Writer<'_>,
    cfg: &Config,
    budget: &Budget,
    cus: ShardedCus<'_>,
    plan: &Plan<'_>,
    lengths: &[u32],
    mb: &MicroBatch,
    gpu: Gpu,
    stream_base: u64,
) -> Result<u32, LayoutError> {
    let group_start = w.offset;
    let (mut n_sharded, mut real_sum, mut padded_sum) = (0usize, 0u64, 0u64);
    let mut n_rings = 0usize;
    for ring in gpu_rings(cfg.cp, gpu.cp_rank) {
        let offset = n_sharded;
        let rb = budget.for_group(ring.size);
        let j = gpu.cp_rank - ring.first;
        let mut base = stream_base;
        for member in members(plan, lengths, mb) {
            let (seq, cp_rank, group, len) = member?;
            if cp_rank == SHARDED && group == ring {
                let chunks = zigzag_chunks(&rb, len, j);
                let indices = [j, 2 * ring.size - 1 - j];
                for (c, k) in chunks.into_iter().zip(indices) {
                    let span = Span {
                        seq,
                        chunk: k as i32,
                        offset: w.offset,
                        start: c.start,
                        len: c.len,
                        pad: c.pad,
                    };
                    w.push(span, base);
                }
                n_sharded += 1;
                real_sum += u64::from(len);
                padded_sum += rb.padded(len);
                // All three sums were bounded by i32::MAX in `measure`.
                set(cus.real, n_sharded, real_sum as i32);
                set(cus.padded, n_sharded, padded_sum as i32);
                set(cus.rank, n_sharded, (w.offset - group_start) as i32);
            }
            base += u64::from(len);
        }
        if n_sharded > offset {
            if let Some(slot) = cus.rings.get_mut(n_rings) {
                *slot = LayoutRing {
                    first: ring.first,
                    size: ring.size,
                    offset: offset as u32,
                    seqs: (n_sharded - offset) as u32,
                };
            }
            n_rings += 1;
        }
    }
    Ok(n_rings as u32)
}

/// The counts of a filled layout.
fn layout_of(t: &Totals, sizes: &LayoutSizes, gpu: Gpu, rings: u32, plan: &Plan<'_>) -> Layout {
    let tokens = to_u32(t.local_tokens + t.sharded_tokens + t.chunked_tokens);
    Layout {
        dp_rank: gpu.dp_rank,
        micro_batch: gpu.micro_batch,
        cp_rank: gpu.cp_rank,
        micro_batch_global: t.g.map_or(NO_MICRO_BATCH, |g| to_u32(g as u64)),
        local_seqs: to_u32(t.local_seqs),
        sharded_seqs: to_u32(t.sharded_seqs),
        rings,
        spans: sizes.spans,
        local_tokens: to_u32(t.local_tokens),
        sharded_tokens: to_u32(t.sharded_tokens),
        tokens,
        pad_tokens: to_u32(t.pad_tokens),
        charged_tokens: to_u32(t.charged),
        local_max_seqlen: t.local_max as i32,
        sharded_max_seqlen: t.sharded_max as i32,
        sharded_max_seqlen_padded: t.sharded_max_padded as i32,
        rank_max_seqlen: t.rank_max as i32,
        loss_tokens: to_u32(t.local_tokens + t.sharded_tokens + t.chunked_tokens - t.pad_tokens),
        micro_batch_tokens: t.mb_tokens,
        global_tokens: plan.summary().total_tokens,
        chunked_seqs: to_u32(t.chunked_seqs),
        chunk_passes: to_u32(t.chunk_passes),
        chunked_tokens: to_u32(t.chunked_tokens),
        chunk_max_tokens: to_u32(t.chunk_max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::options::Policy;
    use crate::config::options::ShardPadding;
    use crate::config::shape::ModelShape;
    use crate::test_support::OwnedPlan;
    use crate::test_support::setup_of;

    use crate::Error;
    use std::vec;
    use std::vec::Vec;

    fn plan_of<'a>(cfg: &Config, lengths: &[u32], st: &'a mut OwnedPlan) -> Plan<'a> {
        st.schedule(cfg, lengths).unwrap()
    }

    fn store(n: usize, cfg: &Config) -> OwnedPlan {
        OwnedPlan::new(n, cfg)
    }

    /// One GPU's layout in owned vectors, trimmed to the written counts.
    #[derive(Debug)]
    pub(super) struct Owned {
        pub(super) layout: Layout,
        pub(super) spans: Vec<Span>,
        local_cu: Vec<i32>,
        local_cu_padded: Vec<i32>,
        sharded_cu: Vec<i32>,
        sharded_cu_padded: Vec<i32>,
        rank_cu: Vec<i32>,
        pub(super) positions: Vec<i32>,
        pub(super) gather: Vec<i64>,
        pub(super) passes: Vec<ChunkPass>,
    }

    pub(super) fn layout_of(cfg: &Config, lengths: &[u32], plan: &Plan<'_>, gpu: Gpu) -> Owned {
        let s = LayoutSizes::for_gpu(&setup_of(cfg), lengths, plan, gpu).unwrap();
        let mut spans = vec![Span::default(); s.spans as usize];
        let mut local_cu = vec![-7; s.local_cu_seqlens as usize];
        let mut local_cu_padded = vec![-7; s.local_cu_seqlens as usize];
        let mut sharded_cu = vec![-7; s.sharded_cu_seqlens as usize];
        let mut sharded_cu_padded = vec![-7; s.sharded_cu_seqlens as usize];
        let mut rank_cu = vec![-7; s.sharded_cu_seqlens as usize];
        let mut positions = vec![-7; s.positions as usize];
        let mut gather = vec![-7; s.positions as usize];
        let mut passes = vec![ChunkPass::default(); s.chunk_passes as usize];
        let out = LayoutBuffers {
            spans: &mut spans,
            local_cu_seqlens: &mut local_cu,
            local_cu_seqlens_padded: &mut local_cu_padded,
            sharded_cu_seqlens: &mut sharded_cu,
            sharded_cu_seqlens_padded: &mut sharded_cu_padded,
            rank_cu_seqlens: &mut rank_cu,
            positions: &mut positions,
            gather_index: &mut gather,
            rings: &mut [LayoutRing::default(); 8],
        };
        let layout =
            fill_with_passes(&setup_of(cfg), lengths, plan, gpu, out, &mut passes).unwrap();
        Owned {
            layout,
            spans,
            local_cu,
            local_cu_padded,
            sharded_cu,
            sharded_cu_padded,
            rank_cu,
            positions,
            gather,
            passes,
        }
    }

    pub(super) fn gpu(dp_rank: u32, micro_batch: u32, cp_rank: u32) -> Gpu {
        Gpu {
            dp_rank,
            micro_batch,
            cp_rank,
        }
    }

    pub(super) fn span(seq: u32, chunk: i32, offset: u32, start: u32, len: u32, pad: u32) -> Span {
        Span {
            seq,
            chunk,
            offset,
            start,
            len,
            pad,
        }
    }

    /// The worked example of the docs: N = 4, S = 10, no padding.
    ///
    /// q = 10 / 8 = 1, R = 10 % 8 = 2 < N: ranks 0 and 1 get a 2-token front chunk, ranks 2
    /// and 3 a 1-token one; every back chunk has q = 1 token (R - N <= 0).
    /// Chunks 0..8: [0,2) [2,4) [4,5) [5,6) | [6,7) [7,8) [8,9) [9,10).
    /// Rank r holds chunks r and 7 - r: 3, 3, 2, 2 tokens (<= ceil(10/4) = 3, charged 3 each).
    #[test]
    fn worked_example_n4_s10_unpadded() {
        let cfg = Config::new(1, 4, 3, ModelShape::QWEN2_5_0_5B);
        let lengths = [10];
        let mut st = store(1, &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        assert!(plan.placements()[0].is_sharded());
        let expect: [([Span; 2], &[i32]); 4] = [
            ([span(0, 0, 0, 0, 2, 0), span(0, 7, 2, 9, 1, 0)], &[0, 1, 9]),
            ([span(0, 1, 0, 2, 2, 0), span(0, 6, 2, 8, 1, 0)], &[2, 3, 8]),
            ([span(0, 2, 0, 4, 1, 0), span(0, 5, 1, 7, 1, 0)], &[4, 7]),
            ([span(0, 3, 0, 5, 1, 0), span(0, 4, 1, 6, 1, 0)], &[5, 6]),
        ];
        for (r, (spans, positions)) in expect.iter().enumerate() {
            let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, r as u32));
            assert_eq!(o.spans, spans.to_vec(), "rank {r}");
            assert_eq!(o.positions, positions.to_vec(), "rank {r}");
            let t = positions.len() as i32;
            assert_eq!(o.local_cu, vec![0]);
            assert_eq!(o.sharded_cu, vec![0, 10]);
            assert_eq!(o.sharded_cu_padded, vec![0, 10]);
            assert_eq!(o.rank_cu, vec![0, t]);
            let l = o.layout;
            assert_eq!(
                (l.tokens, l.pad_tokens, l.loss_tokens),
                (t as u32, 0, t as u32)
            );
            assert_eq!((l.charged_tokens, plan.rank_tokens(0)[r]), (3, 3));
            assert_eq!((l.local_max_seqlen, l.sharded_max_seqlen), (0, 10));
            assert_eq!((l.sharded_max_seqlen_padded, l.rank_max_seqlen), (10, t));
            assert_eq!((l.micro_batch_tokens, l.global_tokens), (10, 10));
        }
    }

    /// The same sequence padded (TransformerEngine THD): c = ceil(10/8) = 2, P = 16, chunk k
    /// = [2k, 2k+2); positions 10..16 (chunks 5, 6, 7) are padding. Every rank carries 4 tokens
    /// (= shard_tokens = the budget charge): ranks 0, 1, 2 hold 2 real + 2 padding, rank 3 holds
    /// 4 real.
    #[test]
    fn worked_example_n4_s10_zigzag_padded() {
        let mut cfg = Config::new(1, 4, 4, ModelShape::QWEN2_5_0_5B);
        cfg.shard_padding = ShardPadding::Zigzag;
        let lengths = [10];
        let mut st = store(1, &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        assert!(plan.placements()[0].is_sharded());
        let expect: [([Span; 2], [i32; 4], u32); 4] = [
            (
                [span(0, 0, 0, 0, 2, 0), span(0, 7, 2, 14, 0, 2)],
                [0, 1, 14, 15],
                2,
            ),
            (
                [span(0, 1, 0, 2, 2, 0), span(0, 6, 2, 12, 0, 2)],
                [2, 3, 12, 13],
                2,
            ),
            (
                [span(0, 2, 0, 4, 2, 0), span(0, 5, 2, 10, 0, 2)],
                [4, 5, 10, 11],
                2,
            ),
            (
                [span(0, 3, 0, 6, 2, 0), span(0, 4, 2, 8, 2, 0)],
                [6, 7, 8, 9],
                0,
            ),
        ];
        for (r, (spans, positions, pad)) in expect.iter().enumerate() {
            let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, r as u32));
            assert_eq!(o.spans, spans.to_vec(), "rank {r}");
            assert_eq!(o.positions, positions.to_vec(), "rank {r}");
            assert_eq!(o.sharded_cu, vec![0, 10]);
            assert_eq!(o.sharded_cu_padded, vec![0, 16]);
            assert_eq!(o.rank_cu, vec![0, 4]);
            let l = o.layout;
            assert_eq!((l.tokens, l.pad_tokens, l.loss_tokens), (4, *pad, 4 - pad));
            assert_eq!((l.charged_tokens, plan.rank_tokens(0)[r]), (4, 4));
            assert_eq!((l.sharded_max_seqlen_padded, l.rank_max_seqlen), (16, 4));
        }
    }

    #[test]
    fn chunk_formulas_tile_and_bound() {
        for padding in [ShardPadding::None, ShardPadding::Zigzag] {
            for n in 1..=9u32 {
                let mut cfg = Config::new(1, n, 1, ModelShape::QWEN2_5_0_5B);
                cfg.shard_padding = padding;
                let budget = cfg.budget();
                // Under miri lengths up to 50 (every length past 2N·9 repeats the pattern).
                for s in 1..=if cfg!(miri) { 50 } else { 200u32 } {
                    let mut next = 0;
                    let mut sizes = Vec::new();
                    for k in 0..2 * n {
                        let c = zigzag_chunk(&budget, s, k);
                        assert_eq!(c.start, next, "{padding:?} n {n} s {s} k {k}");
                        next += c.len + c.pad;
                        sizes.push(c.len + c.pad);
                        assert!(c.pad == 0 || c.start + c.len == s.max(c.start));
                    }
                    assert_eq!(u64::from(next), budget.padded(s));
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    assert!(hi - lo <= 1);
                    for r in 0..n {
                        let [f, b] = zigzag_chunks(&budget, s, r);
                        let share = f.len + f.pad + b.len + b.pad;
                        match padding {
                            ShardPadding::Zigzag if n > 1 => assert_eq!(share, budget.share(s)),
                            _ => {
                                assert_eq!(share, s / n + u32::from(r < s % n));
                                assert!(share <= budget.share(s));
                                assert!(f.len >= b.len && f.len - b.len <= 1);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn local_group_precedes_sharded_group() {
        // Rank budget 6 on CP 2: 20 must be sharded (10 per rank), the short ones stay local.
        let mut cfg = Config::new(1, 2, 14, ModelShape::QWEN2_5_0_5B);
        cfg.policy = Policy::Skrull;
        let lengths = [3, 20, 2, 4];
        let mut st = store(lengths.len(), &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        let mbs = plan.micro_batches_per_dp()[0];
        let mut loss = 0u64;
        for m in 0..mbs {
            for r in 0..2 {
                let o = layout_of(&cfg, &lengths, &plan, gpu(0, m, r));
                let l = o.layout;
                loss += u64::from(l.loss_tokens);
                let local = &o.spans[..l.local_seqs as usize];
                assert!(local.iter().all(|s| s.chunk == LOCAL_CHUNK && s.start == 0));
                assert!(
                    o.spans[l.local_seqs as usize..]
                        .iter()
                        .all(|s| s.chunk >= 0)
                );
                assert_eq!(*o.local_cu.last().unwrap() as u32, l.local_tokens);
                assert_eq!(*o.rank_cu.last().unwrap() as u32, l.sharded_tokens);
                assert_eq!(
                    l.charged_tokens,
                    plan.rank_tokens(l.micro_batch_global as usize)[r as usize]
                );
                assert_eq!(o.positions.len() as u32, l.tokens);
            }
        }
        assert_eq!(loss, 29);
    }

    #[test]
    fn empty_rank_and_cp1() {
        // One short sequence stays local on rank 0: rank 1 holds nothing.
        let cfg = Config::new(1, 2, 8, ModelShape::QWEN2_5_0_5B);
        let mut st = store(1, &cfg);
        let plan = plan_of(&cfg, &[5], &mut st);
        let o = layout_of(&cfg, &[5], &plan, gpu(0, 0, 1));
        assert_eq!(o.layout.tokens, 0);
        assert!(o.spans.is_empty() && o.positions.is_empty());
        assert_eq!((o.local_cu, o.rank_cu), (vec![0], vec![0]));
        let o = layout_of(&cfg, &[5], &plan, gpu(0, 0, 0));
        assert_eq!(o.spans, vec![span(0, LOCAL_CHUNK, 0, 0, 5, 0)]);
        assert_eq!(o.local_cu, vec![0, 5]);
        assert_eq!(o.layout.local_max_seqlen, 5);
        assert_eq!(o.positions, vec![0, 1, 2, 3, 4]);
        // CP 1, sharded: chunks 0 and 1 both on rank 0, contiguous.
        let mut c1 = Config::new(1, 1, 7, ModelShape::QWEN2_5_0_5B);
        c1.policy = Policy::DeepSpeed;
        let mut st = store(1, &c1);
        let plan = plan_of(&c1, &[7], &mut st);
        let o = layout_of(&c1, &[7], &plan, gpu(0, 0, 0));
        assert_eq!(
            o.spans,
            vec![span(0, 0, 0, 0, 4, 0), span(0, 1, 4, 4, 3, 0)]
        );
        assert_eq!(o.positions, vec![0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn tiny_sequence_gets_empty_chunks() {
        // S = 3 < N = 4 (deepspeed: all sharded): ranks 0..3 hold one token each in front.
        let mut cfg = Config::new(1, 4, 1, ModelShape::QWEN2_5_0_5B);
        cfg.policy = Policy::DeepSpeed;
        let mut st = store(1, &cfg);
        let plan = plan_of(&cfg, &[3], &mut st);
        let o = layout_of(&cfg, &[3], &plan, gpu(0, 0, 3));
        assert_eq!(
            o.spans,
            vec![span(0, 3, 0, 3, 0, 0), span(0, 4, 0, 3, 0, 0)]
        );
        assert_eq!((o.layout.tokens, o.layout.charged_tokens), (0, 1));
        let o = layout_of(&cfg, &[3], &plan, gpu(0, 0, 2));
        assert_eq!(o.positions, vec![2]);
    }

    #[test]
    fn errors_name_the_problem_and_write_nothing() {
        let cfg = Config::new(2, 4, 3, ModelShape::QWEN2_5_0_5B);
        let lengths = [10, 2];
        let mut st = store(2, &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        for bad in [gpu(2, 0, 0), gpu(0, 5, 0), gpu(0, 0, 4)] {
            let e = LayoutSizes::for_gpu(&setup_of(&cfg), &lengths, &plan, bad).unwrap_err();
            assert!(
                matches!(e, LayoutError::NoSuchGpu { dp: 2, cp: 4, .. }),
                "{e:?}"
            );
        }
        assert_eq!(
            LayoutSizes::for_gpu(&setup_of(&cfg), &lengths[..1], &plan, gpu(0, 0, 0)),
            Err(LayoutError::PlanMismatch)
        );
        let mut other = cfg;
        other.cp = 2;
        assert_eq!(
            LayoutSizes::for_gpu(&setup_of(&other), &lengths, &plan, gpu(0, 0, 0)),
            Err(LayoutError::PlanMismatch)
        );
        // An invalid configuration has no `Setup` to lay out with.
        other.cp = 0;
        assert_eq!(
            Setup::new(&other).unwrap_err(),
            Error::InvalidCp {
                cp: 0,
                max: crate::config::limits::MAX_CP
            }
        );
        // Short buffers: the error carries every size needed; nothing is written.
        let d = plan.placements()[0].dp_rank;
        let needed = LayoutSizes::for_gpu(&setup_of(&cfg), &lengths, &plan, gpu(d, 0, 0)).unwrap();
        let mut spans = vec![Span::default(); 1];
        let (mut a, mut b, mut c, mut e) = (vec![-7; 8], vec![-7; 8], vec![-7; 8], vec![-7; 8]);
        let mut p = vec![-7; 8];
        let mut lp = vec![-7; 8];
        let out = LayoutBuffers {
            spans: &mut spans,
            local_cu_seqlens: &mut a,
            local_cu_seqlens_padded: &mut lp,
            sharded_cu_seqlens: &mut b,
            sharded_cu_seqlens_padded: &mut c,
            rank_cu_seqlens: &mut e,
            positions: &mut p,
            gather_index: &mut [],
            rings: &mut [LayoutRing::default(); 8],
        };
        let err = fill(&setup_of(&cfg), &lengths, &plan, gpu(d, 0, 0), out).unwrap_err();
        assert_eq!(
            err,
            LayoutError::BufferTooSmall {
                buffer: LayoutBuffer::Spans,
                needed,
                got: 1
            }
        );
        assert!(a.iter().chain(&p).all(|&x| x == -7));
        assert_eq!(spans[0], Span::default());
        // An empty positions slice skips the full array.
        let mut spans = vec![Span::default(); 8];
        let out = LayoutBuffers {
            spans: &mut spans,
            local_cu_seqlens: &mut a,
            local_cu_seqlens_padded: &mut lp,
            sharded_cu_seqlens: &mut b,
            sharded_cu_seqlens_padded: &mut c,
            rank_cu_seqlens: &mut e,
            positions: &mut [],
            gather_index: &mut [],
            rings: &mut [LayoutRing::default(); 8],
        };
        let l = fill(&setup_of(&cfg), &lengths, &plan, gpu(d, 0, 0), out).unwrap();
        assert_eq!(l.tokens, 3);
        assert_eq!(&b[..2], &[0, 10]);
    }

    #[test]
    fn int32_overflow_is_an_error() {
        // 2 sequences of 2^31 - 2 tokens sharded in one micro-batch: each rank holds 2^30 - 1
        // tokens of each (fits), but the global cu_seqlens reach 2^32 - 4.
        let max = i32::MAX as u32;
        let mut cfg = Config::new(1, 2, max, ModelShape::QWEN2_5_0_5B);
        cfg.policy = Policy::Packed;
        let lengths = [max - 1, max - 1];
        let mut st = store(2, &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        assert_eq!(plan.micro_batches_per_dp()[0], 1);
        assert_eq!(
            LayoutSizes::for_gpu(&setup_of(&cfg), &lengths, &plan, gpu(0, 0, 0)),
            Err(LayoutError::Overflow {
                buffer: LayoutBuffer::ShardedCuSeqlens,
                value: 2 * u64::from(max - 1)
            })
        );
        // Padded: one sequence of 2^31 - 1 pads to 2^31, one past i32::MAX.
        cfg.shard_padding = ShardPadding::Zigzag;
        cfg.bucket = max;
        let mut st = store(1, &cfg);
        let plan = plan_of(&cfg, &[max], &mut st);
        assert_eq!(
            LayoutSizes::for_gpu(&setup_of(&cfg), &[max], &plan, gpu(0, 0, 0)),
            Err(LayoutError::Overflow {
                buffer: LayoutBuffer::ShardedCuSeqlensPadded,
                value: 1 << 31
            })
        );
    }

    /// A plan with sub-group shards (`balanced` on DP 2 x CP 16, where the whole group's ring
    /// crosses nodes): on every GPU the rings come whole group first, then sub-groups largest
    /// first, contiguous in the `cu_seqlens` arrays; and the chunks of each sharded sequence,
    /// over all the GPUs of its group, tile its padded length exactly once.
    #[test]
    fn subgroup_rings_tile_every_sequence_once() {
        let cfg = Config::new(
            2,
            16,
            13 * 1024,
            crate::config::shape::ModelShape::QWEN2_5_7B,
        )
        .with_policy(crate::config::options::Policy::Balanced);
        let base = [
            100_000u32, 90_000, 61_000, 40_000, 35_000, 20_000, 18_000, 9_000, 5_000, 3_000, 800,
            120,
        ];
        let lengths: Vec<u32> = base.iter().chain(&base).map(|&l| l - 7).collect();
        let mut st = store(lengths.len(), &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        assert_eq!(crate::plan::check(&setup_of(&cfg), &lengths, &plan), Ok(()));
        assert!(
            plan.placements().iter().any(|p| p.is_subgroup(16)),
            "the test needs a sub-group shard"
        );
        let mut cover: Vec<Vec<(u32, u32)>> = vec![Vec::new(); lengths.len()];
        for mb in plan.micro_batches() {
            for r in 0..16 {
                let gpu = gpu(mb.dp_rank, mb.index, r);
                let s = LayoutSizes::for_gpu(&setup_of(&cfg), &lengths, &plan, gpu).unwrap();
                let mut spans = vec![Span::default(); s.spans as usize];
                let mut cu = [
                    vec![0; s.local_cu_seqlens as usize],
                    vec![0; s.local_cu_seqlens as usize],
                    vec![0; s.sharded_cu_seqlens as usize],
                    vec![0; s.sharded_cu_seqlens as usize],
                    vec![0; s.sharded_cu_seqlens as usize],
                ];
                let mut rings = vec![LayoutRing::default(); s.rings as usize];
                let [a, b, c, d, e] = &mut cu;
                let out = LayoutBuffers {
                    spans: &mut spans,
                    local_cu_seqlens: a,
                    local_cu_seqlens_padded: b,
                    sharded_cu_seqlens: c,
                    sharded_cu_seqlens_padded: d,
                    rank_cu_seqlens: e,
                    positions: &mut [],
                    gather_index: &mut [],
                    rings: &mut rings,
                };
                let l = fill(&setup_of(&cfg), &lengths, &plan, gpu, out).unwrap();
                if s.rings > 0 {
                    assert_eq!(l.rings, s.rings);
                    let mut next = 0;
                    for (k, ring) in rings.iter().enumerate() {
                        assert_eq!(ring.offset, next, "rings are contiguous");
                        assert!(ring.seqs > 0 && ring.first <= r && r < ring.first + ring.size);
                        if k > 0 {
                            assert!(ring.size < rings[k - 1].size, "largest group first");
                        }
                        next += ring.seqs;
                    }
                    assert_eq!(next, l.sharded_seqs);
                }
                for span in &spans[l.local_seqs as usize..] {
                    cover[span.seq as usize].push((span.start, span.start + span.len + span.pad));
                }
            }
        }
        let budget = cfg.budget();
        for (seq, p) in plan.placements().iter().enumerate() {
            if !p.is_sharded() {
                continue;
            }
            let g = p.group(16).size;
            let mut ranges = core::mem::take(&mut cover[seq]);
            assert_eq!(
                ranges.len() as u32,
                2 * g,
                "seq {seq}: two chunks per GPU of its group"
            );
            ranges.sort_unstable();
            let mut at = 0;
            for (start, end) in ranges {
                assert_eq!(start, at, "seq {seq}: gap or overlap");
                at = end;
            }
            assert_eq!(u64::from(at), budget.for_group(g).padded(lengths[seq]));
        }
    }

    #[test]
    fn max_sizes_bound_every_gpu() {
        let cfg = Config::new(2, 4, 64, ModelShape::QWEN2_5_0_5B);
        let lengths = [200, 3, 60, 7, 1, 90, 33, 12, 5, 250, 8];
        let mut st = store(lengths.len(), &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        let max = LayoutSizes::max_for(lengths.len(), &cfg);
        assert_eq!(
            max,
            LayoutSizes {
                spans: 22,
                local_cu_seqlens: 12,
                sharded_cu_seqlens: 12,
                positions: 64,
                rings: MAX_RINGS,
                chunk_passes: 0,
            }
        );
        for mb in plan.micro_batches() {
            for r in 0..4 {
                let s = LayoutSizes::for_gpu(
                    &setup_of(&cfg),
                    &lengths,
                    &plan,
                    gpu(mb.dp_rank, mb.index, r),
                )
                .unwrap();
                assert!(s.spans <= max.spans && s.positions <= max.positions);
                assert!(s.local_cu_seqlens <= max.local_cu_seqlens);
                assert!(s.sharded_cu_seqlens <= max.sharded_cu_seqlens);
            }
        }
    }

    /// Every token of a DP rank's stream is gathered exactly once over the CP ranks of its
    /// micro-batch, at the position its span says, and padding is marked -1.
    fn assert_gather_covers_stream(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) {
        for d in 0..cfg.dp {
            let seqs = dp_sequences(plan, d);
            let stream: u64 = seqs.iter().map(|&s| u64::from(lengths[s as usize])).sum();
            // (sequence, position) of every stream offset.
            let mut owner = Vec::new();
            for &s in seqs {
                owner.extend((0..lengths[s as usize]).map(|p| (s, p)));
            }
            assert_eq!(owner.len() as u64, stream);
            let mut seen = vec![0u32; owner.len()];
            for m in 0..plan.micro_batches_per_dp()[d as usize] {
                for r in 0..cfg.cp {
                    let o = layout_of(cfg, lengths, plan, gpu(d, m, r));
                    assert_eq!(o.gather.len(), o.positions.len());
                    for sp in &o.spans {
                        for i in 0..(sp.len + sp.pad) as usize {
                            let at = sp.offset as usize + i;
                            let g = o.gather[at];
                            if i < sp.len as usize {
                                assert_eq!(owner[g as usize], (sp.seq, sp.start + i as u32));
                                assert_eq!(o.positions[at], (sp.start + i as u32) as i32);
                                seen[g as usize] += 1;
                            } else {
                                assert_eq!(g, -1, "padding is marked");
                            }
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "DP {d}: {seen:?}");
        }
    }

    #[test]
    fn gather_index_covers_every_dp_stream_once() {
        let lengths = [200, 3, 60, 7, 1, 90, 33, 12, 5, 250, 8, 2, 41];
        for (p, policy) in Policy::ALL.into_iter().enumerate() {
            for (i, padding) in [ShardPadding::None, ShardPadding::Zigzag]
                .into_iter()
                .enumerate()
            {
                for (j, (m, local)) in [(1, false), (16, false), (12, true)]
                    .into_iter()
                    .enumerate()
                {
                    // Under miri a third of the combinations, rotating over the policies
                    // (all 36 took two minutes there).
                    if cfg!(miri) && (p + i + j) % 3 != 0 {
                        continue;
                    }
                    let mut cfg = Config::new(3, 4, 96, ModelShape::QWEN2_5_0_5B);
                    cfg.policy = policy;
                    if policy == Policy::ChunkFlow {
                        // 200, 90 and 250 run in chunks of 64 over the group.
                        cfg.chunking = crate::config::chunking::Chunking::new(64, 1);
                    }
                    cfg.shard_padding = padding;
                    cfg.pad_multiple = m;
                    cfg.pad_local = local;
                    let mut st = store(lengths.len(), &cfg);
                    let plan = plan_of(&cfg, &lengths, &mut st);
                    if policy == Policy::ChunkFlow {
                        assert_eq!(plan.summary().chunked, 3, "200, 90 and 250 run chunked");
                    }
                    assert_gather_covers_stream(&cfg, &lengths, &plan);
                }
            }
        }
    }

    /// Pad multiple 4 at CP 2: a sharded 13-token sequence is padded to 16 (4 chunks of 4),
    /// a local 3-token one to 4 with `pad_local`; 13 cannot stay local (16 > C = 12).
    #[test]
    fn pad_multiple_pads_shards_and_locals() {
        let mut cfg = Config::new(1, 2, 12, ModelShape::QWEN2_5_0_5B);
        cfg.shard_padding = ShardPadding::Zigzag;
        cfg.pad_multiple = 4;
        cfg.pad_local = true;
        let lengths = [13, 3];
        let mut st = store(2, &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        let p = plan.placements();
        assert!(p[0].is_sharded(), "13 tokens cannot be local under C = 12");
        assert!(!p[1].is_sharded());
        let r = p[1].cp_rank as u32;
        let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, r));
        assert_eq!(o.spans[0], span(1, LOCAL_CHUNK, 0, 0, 3, 1));
        assert_eq!(
            (o.local_cu.clone(), o.local_cu_padded.clone()),
            (vec![0, 3], vec![0, 4])
        );
        // The sharded 13 tokens: chunks of 4 over positions 0..16; rank r holds r and 3 - r.
        let front = zigzag_chunk(&cfg.budget(), 13, r);
        let back = zigzag_chunk(&cfg.budget(), 13, 3 - r);
        assert_eq!(
            front,
            Chunk {
                start: 4 * r,
                len: 4,
                pad: 0
            }
        );
        assert_eq!(back.start, 12 - 4 * r);
        assert_eq!(
            o.spans[1],
            span(0, r as i32, 4, front.start, front.len, front.pad)
        );
        assert_eq!(
            o.spans[2],
            span(0, (3 - r) as i32, 8, back.start, back.len, back.pad)
        );
        assert_eq!(
            (o.sharded_cu.clone(), o.sharded_cu_padded.clone()),
            (vec![0, 13], vec![0, 16])
        );
        assert_eq!(o.rank_cu, vec![0, 8]);
        let l = o.layout;
        assert_eq!(
            (l.tokens, l.charged_tokens, plan.rank_tokens(0)[r as usize]),
            (12, 12, 12)
        );
        assert_eq!(l.pad_tokens, 1 + front.pad + back.pad);
        assert_eq!(l.local_max_seqlen, 3);
    }

    /// Lockstep: the DP rank with fewer micro-batches reports the longest rank's count, and
    /// its extra micro-batch has a valid, empty layout.
    #[test]
    fn lockstep_extra_micro_batches_are_empty() {
        let mut cfg = Config::new(2, 2, 8, ModelShape::QWEN2_5_0_5B).with_policy(Policy::Packed);
        let lengths = [16, 16, 2, 2];
        let mut st = store(4, &cfg);
        let counts = plan_of(&cfg, &lengths, &mut st)
            .micro_batches_per_dp()
            .to_vec();
        assert_eq!(counts, vec![2, 1]);
        cfg.lockstep = true;
        let mut st = store(4, &cfg);
        let plan = plan_of(&cfg, &lengths, &mut st);
        assert_eq!(plan.micro_batches_per_dp(), &[2, 2]);
        assert_eq!(
            plan.micro_batches().len(),
            3,
            "the table lists the non-empty ones"
        );
        assert_eq!(crate::plan::check(&setup_of(&cfg), &lengths, &plan), Ok(()));
        for r in 0..2 {
            let o = layout_of(&cfg, &lengths, &plan, gpu(1, 1, r));
            assert_eq!(o.layout.micro_batch_global, NO_MICRO_BATCH);
            assert_eq!(
                (o.layout.tokens, o.layout.spans, o.layout.loss_tokens),
                (0, 0, 0)
            );
            assert!(o.spans.is_empty() && o.positions.is_empty() && o.gather.is_empty());
            assert_eq!(
                (o.local_cu, o.sharded_cu, o.rank_cu),
                (vec![0], vec![0], vec![0])
            );
        }
        assert!(matches!(
            LayoutSizes::for_gpu(&setup_of(&cfg), &lengths, &plan, gpu(1, 2, 0)),
            Err(LayoutError::NoSuchGpu {
                micro_batches: 2,
                ..
            })
        ));
        assert_gather_covers_stream(&cfg, &lengths, &plan);
    }
}
