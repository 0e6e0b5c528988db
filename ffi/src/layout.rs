//! The per-GPU execution layout through the C ABI: `skrull_layout_sizes_max()`,
//! `skrull_layout_sizes()` and `skrull_layout_fill()` turn the plan a caller got from
//! `skrull_schedule()` into what one GPU feeds its kernels (token spans, varlen `cu_seqlens`,
//! `max_seqlen`, position ids and loss weights). See `docs/layout.md`.
//!
//! The plan is read back from the caller's `skrull_plan_buffers` and validated by the core's
//! independent checker before any layout is computed, so a corrupted or foreign plan is a
//! status (`SKRULL_STATUS_PLAN_INVALID`), never undefined behaviour or a panic.

use core::ffi::c_void;
use core::mem::{align_of, size_of};

use skrull_core::config::MAX_SEQS;
use skrull_core::plan::layout::{self, Gpu, LayoutBuffers, LayoutSizes};
use skrull_core::plan::{CHUNKED, SHARDED};
use skrull_core::{Config, CpGroup, MicroBatch, Placement, Plan, PlanParts, Setup};

use crate::boundary::{Span, any_overlap, check_out, declared, guard, lengths};
use crate::config::{read_config, skrull_config};
use crate::error::{Failure, finish, info_span};
use crate::plan::{
    PLAN_BUFFERS_SIZES, skrull_cp_group, skrull_micro_batch, skrull_placement, skrull_plan_buffers,
    skrull_summary,
};
use crate::sized::{read_lenient, read_sized};
use crate::spans::{config_spans, struct_span, target};
use crate::status::skrull_status;
use crate::workspace::Carver;

/// `skrull_layout.micro_batch_global` of an empty lockstep micro-batch.
pub const SKRULL_NO_MICRO_BATCH: u32 = u32::MAX;

/// Which GPU a layout is for: DP rank, micro-batch on that DP rank, CP rank (frozen layout,
/// 12 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_gpu {
    /// The data-parallel rank, `< dp`.
    pub dp_rank: u32,
    /// The micro-batch index on that DP rank, `< micro_batches_per_dp[dp_rank]`.
    pub micro_batch: u32,
    /// The context-parallel rank, `< cp`.
    pub cp_rank: u32,
}

const _: () = assert!(size_of::<skrull_gpu>() == 12);

/// A run of consecutive tokens of one sequence in the GPU's buffer; also the position-id range
/// of those tokens (frozen layout, 24 bytes).
///
/// Buffer offsets `offset .. offset + len + pad` hold positions `start .. start + len + pad`
/// of sequence `seq`; the first `len` tokens are real, the `pad` after them are padding (mask
/// them out of the loss).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_span {
    /// The sequence (index into the batch's lengths).
    pub seq: u32,
    /// -1 for a whole local sequence, else the zigzag chunk index `0 .. 2 * g` over the `g`
    /// ranks of the sequence's group (`g = cp` for the whole CP group). In the chunked group
    /// (after the sharded group, see `skrull_chunk_pass`): `SKRULL_WHOLE_CHUNK` (-2) for a
    /// chunk on one GPU, else the zigzag piece index `0 .. 2 * g` of the chunk.
    pub chunk: i32,
    /// Offset of the span's first token in the GPU buffer.
    pub offset: u32,
    /// Position of the first token inside its sequence (padded coordinates).
    pub start: u32,
    /// Real tokens.
    pub len: u32,
    /// Padding tokens after the real ones: for a chunk of a sharded sequence, from
    /// `SKRULL_SHARD_PADDING_ZIGZAG` or a `pad_multiple` above 1 (the sequence is padded to a
    /// multiple of `lcm(2g, M)`); for a whole local sequence, up to the next multiple of
    /// `pad_multiple` with `pad_local` (else 0). See `docs/layout.md`.
    pub pad: u32,
}

const _: () = assert!(size_of::<skrull_span>() == 24);

/// One ring of a GPU's sharded group (frozen layout, 16 bytes): the sequences sharded over CP
/// ranks `first .. first + size`, which are entries `offset .. offset + seqs` of the sharded
/// group (`sharded_cu_seqlens[offset ..= offset + seqs]`, the same slices of
/// `sharded_cu_seqlens_padded` and `rank_cu_seqlens`, and spans `local_seqs + 2 * offset ..`).
/// Run the CP attention kernel once per ring, over that ring's process group, on those
/// slices less their first entry's value (each ring's arrays start at 0 for the kernel).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_layout_ring {
    /// The ring's first CP rank.
    pub first: u32,
    /// Its ranks: `cp` for the whole CP group, else a sub-group of `size` ranks.
    pub size: u32,
    /// Index of its first sequence in the sharded group.
    pub offset: u32,
    /// Sequences it holds (at least 1).
    pub seqs: u32,
}

const _: () = assert!(size_of::<skrull_layout_ring>() == 16);

/// `skrull_span.chunk` of a whole chunk of a chunked sequence that runs on one GPU.
pub const SKRULL_WHOLE_CHUNK: i32 = -2;

const _: () = assert!(SKRULL_WHOLE_CHUNK == layout::WHOLE_CHUNK);

/// One chunk pass of a chunked sequence on this GPU (frozen layout, 48 bytes): chunk `index`
/// of `count`, run by the ranks `first .. first + size`; this GPU holds `tokens` of its tokens
/// at buffer offsets `offset .. offset + tokens`, as spans `span .. span + spans`. With
/// chunking on, the chunked group follows the sharded group: every chunked sequence whose
/// group holds this GPU, in plan order, its chunks in order (see `docs/layout.md`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_chunk_pass {
    /// The sequence (index into the batch's lengths).
    pub seq: u32,
    /// The chunk, `0 .. count`: passes run in this order.
    pub index: u32,
    /// Chunks of the sequence: `ceil(len / chunk_size)`.
    pub count: u32,
    /// First CP rank of the group that runs the sequence.
    pub first: u32,
    /// Ranks in that group (1: one GPU, no CP communication; else one ring over them).
    pub size: u32,
    /// Position of the chunk's first token in its sequence: `index * chunk_size`.
    pub start: u32,
    /// Real tokens of the chunk (over the whole group).
    pub len: u32,
    /// The chunk's padded length over the whole group.
    pub padded: u32,
    /// Index of this GPU's first span of the chunk.
    pub span: u32,
    /// Spans of the chunk on this GPU: 1 on one GPU (`chunk` = `SKRULL_WHOLE_CHUNK`), 2 on a
    /// group (the zigzag pieces `j` and `2 * size - 1 - j` of the chunk).
    pub spans: u32,
    /// Buffer offset of this GPU's first token of the chunk.
    pub offset: u32,
    /// Tokens this GPU holds of the chunk, padding included.
    pub tokens: u32,
}

const _: () = assert!(size_of::<skrull_chunk_pass>() == 48);

/// The most rings one GPU belongs to (the whole group, and one sub-group of each power-of-two
/// size below `cp`): the capacity of `skrull_layout_buffers.rings` that fits every GPU of every
/// plan (1 is enough without `skrull_config.subgroups`).
pub const SKRULL_MAX_RINGS: u32 = 8;

const _: () = assert!(SKRULL_MAX_RINGS == layout::MAX_RINGS);

/// Element counts of the `skrull_layout_buffers` arrays, and the workspace bytes the layout
/// functions need (frozen layout, 5 `size_t`). It has no room for `rings`: give that
/// `SKRULL_MAX_RINGS` entries (1 without `skrull_config.subgroups`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_layout_capacity {
    /// `spans`: local sequences + 2 x sharded sequences.
    pub spans: usize,
    /// `local_cu_seqlens`: local sequences + 1.
    pub local_cu_seqlens: usize,
    /// Each of `sharded_cu_seqlens`, `sharded_cu_seqlens_padded`, `rank_cu_seqlens`: sharded
    /// sequences + 1.
    pub sharded_cu_seqlens: usize,
    /// `positions`: tokens in the GPU buffer, padding included.
    pub positions: usize,
    /// Bytes of workspace `skrull_layout_sizes()` and `skrull_layout_fill()` need for a batch
    /// of this many sequences (any alignment).
    pub workspace_bytes: usize,
}

const _: () = assert!(size_of::<skrull_layout_capacity>() == 5 * size_of::<usize>());

/// Counts, maxima and loss weights of one GPU's layout, written by `skrull_layout_fill()`
/// (frozen layout, 88 bytes, explicit padding).
///
/// The GPU buffer is the local group (offsets `0 .. local_tokens`) followed by the sharded
/// group (`local_tokens .. local_tokens + sharded_tokens`) and, with chunking, the chunked
/// group (up to `tokens`; see `skrull_chunk_pass`). Valid entries: `spans[0 .. spans]`,
/// `local_cu_seqlens[0 ..= local_seqs]`, each sharded `cu_seqlens[0 ..= sharded_seqs]` and
/// `positions[0 .. tokens]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_layout {
    /// The DP rank.
    pub dp_rank: u32,
    /// The micro-batch index on that DP rank.
    pub micro_batch: u32,
    /// The CP rank.
    pub cp_rank: u32,
    /// The micro-batch's position `g` in the plan's micro-batch table, or
    /// `SKRULL_NO_MICRO_BATCH` for an empty lockstep micro-batch (one the table does not
    /// list; its layout is empty: no span, every `cu_seqlens` array `{0}`, no token).
    pub micro_batch_global: u32,
    /// Sequences held whole on this GPU (the local group).
    pub local_seqs: u32,
    /// Sequences sharded over a CP group this GPU belongs to (two spans each): the whole group
    /// or, with `skrull_config.subgroups`, a sub-group (see `skrull_layout_buffers.rings`).
    pub sharded_seqs: u32,
    /// Spans written: `local_seqs + 2 * sharded_seqs`, plus the chunked group's.
    pub spans: u32,
    /// Tokens of the local group.
    pub local_tokens: u32,
    /// Tokens of the sharded group on this GPU, padding included.
    pub sharded_tokens: u32,
    /// Tokens in the GPU buffer, padding included.
    pub tokens: u32,
    /// Padding tokens among them.
    pub pad_tokens: u32,
    /// Tokens the budget charged this GPU (equals `rank_tokens[g * cp + cp_rank]`); for a
    /// chunked sequence its peak, which does not bound the chunked group's tokens.
    pub charged_tokens: u32,
    /// `max_seqlen` of the local group over real lengths (0 when empty): the longest local
    /// sequence's real tokens, also with `pad_local` (the padded lengths are the differences
    /// of `skrull_layout_buffers.local_cu_seqlens_padded`).
    pub local_max_seqlen: i32,
    /// Longest sharded sequence, real tokens (`max_seqlen` for `sharded_cu_seqlens`).
    pub sharded_max_seqlen: i32,
    /// Longest sharded sequence, padded.
    pub sharded_max_seqlen_padded: i32,
    /// Longest part of one sharded sequence on this rank (`max_seqlen` for
    /// `rank_cu_seqlens`).
    pub rank_max_seqlen: i32,
    /// Real tokens this GPU contributes to the loss (`tokens - pad_tokens`).
    pub loss_tokens: u32,
    /// Always 0.
    pub _reserved: u32,
    /// Real tokens of the whole micro-batch (all CP ranks).
    pub micro_batch_tokens: u64,
    /// Real tokens of the global batch: normalise the loss by this.
    pub global_tokens: u64,
}

const _: () = assert!(size_of::<skrull_layout>() == 88);

/// The output buffers `skrull_layout_fill()` fills, each a pointer and its capacity in
/// elements (size them once with `skrull_layout_sizes_max()`).
///
/// Nothing is written unless the call returns `SKRULL_STATUS_OK`; then only the valid entries
/// named in `skrull_layout` (and `rings[0 .. *rings_count]`) are written. `positions` may be NULL with `positions_len` 0 to
/// skip the full position-id array (the spans carry the same ranges). As in
/// `skrull_plan_buffers`, each buffer is its declared range (the whole capacity): the ranges
/// must not overlap each other, the workspace or any input (the lengths, the `summary` and every
/// plan array at its declared capacity), and none may exceed `PTRDIFF_MAX` bytes or run past the
/// end of the address space (`SKRULL_STATUS_INVALID_ARG`). `struct_size` follows the rules of
/// `skrull_config`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct skrull_layout_buffers {
    /// `sizeof(skrull_layout_buffers)`.
    pub struct_size: u32,
    /// Must be 0.
    pub _reserved: u32,
    /// The spans: the local group, then two per sharded sequence (front chunk, back chunk).
    pub spans: *mut skrull_span,
    /// Capacity of `spans`, in elements.
    pub spans_len: usize,
    /// `cu_seqlens` of the local group (`int32`, starts at 0).
    pub local_cu_seqlens: *mut i32,
    /// Capacity of `local_cu_seqlens`, in elements.
    pub local_cu_seqlens_len: usize,
    /// Global `cu_seqlens` of the sharded group over real lengths.
    pub sharded_cu_seqlens: *mut i32,
    /// Capacity of `sharded_cu_seqlens`, in elements.
    pub sharded_cu_seqlens_len: usize,
    /// Global `cu_seqlens` of the sharded group over padded lengths (TransformerEngine's
    /// `cu_seqlens_padded`).
    pub sharded_cu_seqlens_padded: *mut i32,
    /// Capacity of `sharded_cu_seqlens_padded`, in elements.
    pub sharded_cu_seqlens_padded_len: usize,
    /// This rank's `cu_seqlens` of the sharded group (offsets from the group's start).
    pub rank_cu_seqlens: *mut i32,
    /// Capacity of `rank_cu_seqlens`, in elements.
    pub rank_cu_seqlens_len: usize,
    /// Position id of every token in the buffer (NULL with length 0: skip).
    pub positions: *mut i32,
    /// Capacity of `positions`, in elements.
    pub positions_len: usize,
    /// Receives the counts, maxima and loss weights (required).
    pub layout: *mut skrull_layout,
    /// Gather index of every token in the buffer (`int64`, NULL with length 0: skip; same
    /// count as `positions`): the token's offset in the DP rank's sequences concatenated in
    /// plan order, -1 for padding. See `docs/layout.md`. Added after version 1.
    pub gather_index: *mut i64,
    /// Capacity of `gather_index`, in elements.
    pub gather_index_len: usize,
    /// `cu_seqlens` of the local group over padded lengths, i.e. buffer offsets (NULL with
    /// length 0: skip; same count as `local_cu_seqlens`); equal to `local_cu_seqlens` unless
    /// `pad_local` pads local sequences. Added after version 1.
    pub local_cu_seqlens_padded: *mut i32,
    /// Capacity of `local_cu_seqlens_padded`, in elements.
    pub local_cu_seqlens_padded_len: usize,
    /// The rings of the sharded group, one per CP group this GPU shards sequences over: the
    /// whole CP group first, then its sub-groups, largest first (capacity: this GPU's rings,
    /// at most `SKRULL_MAX_RINGS`; 1 without `skrull_config.subgroups`). The sharded group
    /// holds the rings' sequences block after block, and the sharded `cu_seqlens` arrays run on
    /// across the blocks: run one CP attention call per ring (see `skrull_layout_ring`).
    /// Required when `skrull_config.subgroups` is 1 (NULL: `SKRULL_STATUS_NULL_ARG`); without
    /// sub-groups it may be NULL with length 0 (there is then at most one ring, the whole
    /// group's). Added after version 1.
    pub rings: *mut skrull_layout_ring,
    /// Capacity of `rings`, in elements.
    pub rings_len: usize,
    /// Receives the number of rings written to `rings` (0 without sharded sequences, 1 with
    /// only the whole group's; NULL: not written). Optional: the `seqs` of the rings also add
    /// up to `skrull_layout.sharded_seqs`. Added after version 1.
    pub rings_count: *mut u32,
    /// The chunk passes of the chunked group, one per chunk of every chunked sequence on this
    /// GPU (NULL with length 0: skip; capacity: `skrull_layout.spans` always suffices). See
    /// `skrull_chunk_pass`. Added after version 1.
    pub chunk_passes: *mut skrull_chunk_pass,
    /// Capacity of `chunk_passes`, in elements.
    pub chunk_passes_len: usize,
    /// Receives the number of chunk passes (0 without chunked sequences; NULL: not written).
    /// Added after version 1.
    pub chunk_passes_count: *mut u32,
}

/// `sizeof(skrull_layout_buffers)` of ABI version 1, the smallest accepted `struct_size`, on
/// this platform (112 bytes on 64-bit): everything before `gather_index`.
pub const LAYOUT_BUFFERS_SIZE_V1: usize = 8 + 13 * size_of::<usize>();

/// The `struct_size` values of `skrull_layout_buffers` below the current size that end on a
/// field boundary: version 1, then each appended pointer with its length, and `rings_count`.
pub(crate) const LAYOUT_BUFFERS_SIZES: [usize; 7] = [
    LAYOUT_BUFFERS_SIZE_V1,
    core::mem::offset_of!(skrull_layout_buffers, local_cu_seqlens_padded),
    core::mem::offset_of!(skrull_layout_buffers, rings),
    core::mem::offset_of!(skrull_layout_buffers, rings_count),
    core::mem::offset_of!(skrull_layout_buffers, chunk_passes),
    core::mem::offset_of!(skrull_layout_buffers, chunk_passes_count),
    size_of::<skrull_layout_buffers>(),
];

const _: () = assert!(
    size_of::<skrull_layout_buffers>() == LAYOUT_BUFFERS_SIZE_V1 + 10 * size_of::<usize>(),
    "skrull_layout_buffers must have no implicit padding"
);

impl skrull_layout_buffers {
    /// All NULL and zero, with `struct_size` set: the base the reader fills in.
    pub const EMPTY: skrull_layout_buffers = skrull_layout_buffers {
        struct_size: size_of::<skrull_layout_buffers>() as u32,
        _reserved: 0,
        spans: core::ptr::null_mut(),
        spans_len: 0,
        local_cu_seqlens: core::ptr::null_mut(),
        local_cu_seqlens_len: 0,
        sharded_cu_seqlens: core::ptr::null_mut(),
        sharded_cu_seqlens_len: 0,
        sharded_cu_seqlens_padded: core::ptr::null_mut(),
        sharded_cu_seqlens_padded_len: 0,
        rank_cu_seqlens: core::ptr::null_mut(),
        rank_cu_seqlens_len: 0,
        positions: core::ptr::null_mut(),
        positions_len: 0,
        layout: core::ptr::null_mut(),
        gather_index: core::ptr::null_mut(),
        gather_index_len: 0,
        local_cu_seqlens_padded: core::ptr::null_mut(),
        local_cu_seqlens_padded_len: 0,
        rings: core::ptr::null_mut(),
        rings_len: 0,
        rings_count: core::ptr::null_mut(),
        chunk_passes: core::ptr::null_mut(),
        chunk_passes_len: 0,
        chunk_passes_count: core::ptr::null_mut(),
    };
}

/// The strictest alignment the workspace carver applies to its base.
const BASE_ALIGN: usize = align_of::<u128>();

/// Bytes from the aligned base to the end of the staging regions for `n` sequences: the
/// plan's placements and micro-batch table in the core's types, and up to `2n` spans.
fn workspace_end(n: usize) -> usize {
    let mut end = n * size_of::<Placement>();
    end = end.next_multiple_of(align_of::<MicroBatch>()) + n * size_of::<MicroBatch>();
    end.next_multiple_of(align_of::<layout::Span>()) + 2 * n * size_of::<layout::Span>()
}

/// Bytes of workspace the layout functions need for `n` sequences (any alignment).
pub(crate) fn workspace_bytes(n: usize) -> usize {
    workspace_end(n) + (BASE_ALIGN - 1)
}

/// Bytes of workspace `skrull_layout_fill()` needs for a GPU of `spans` spans and `passes`
/// chunk passes: [`workspace_bytes`] unless the chunked group needs more than `2n` spans'
/// room (saturating).
pub(crate) fn workspace_bytes_for(n: usize, spans: usize, passes: usize) -> usize {
    let extra_spans = spans.saturating_sub(2 * n);
    if extra_spans == 0 && passes == 0 {
        return workspace_bytes(n);
    }
    let end = extra_spans
        .saturating_mul(size_of::<layout::Span>())
        .saturating_add(workspace_end(n))
        .saturating_add(align_of::<layout::ChunkPass>())
        .saturating_add(passes.saturating_mul(size_of::<layout::ChunkPass>()));
    end.saturating_add(BASE_ALIGN - 1)
}

/// Borrows an input array of the plan: `count` entries of a buffer of `capacity`, and returns
/// them with the buffer's declared range (all `capacity` elements, for the overlap checks).
///
/// # Errors
/// As [`declared`] for the buffer (`NullArg`, `InvalidArg`), then `PlanInvalid` when
/// `count > capacity`.
///
/// # Safety
/// Unless NULL, `ptr` must point to `capacity` initialised `T` unchanged for `'a`.
pub(crate) unsafe fn input<'a, T>(
    ptr: *const T,
    capacity: usize,
    count: usize,
) -> Result<(&'a [T], Span), skrull_status> {
    let span = declared(ptr, capacity)?;
    if count > capacity {
        return Err(skrull_status::PlanInvalid);
    }
    if count == 0 {
        return Ok((&[], span));
    }
    // SAFETY: non-null (`declared` rejects NULL with a nonzero capacity), aligned, `count <=
    // capacity` initialised elements (caller contract), and the byte size is at most
    // isize::MAX and does not wrap (checked by `declared`).
    Ok((unsafe { core::slice::from_raw_parts(ptr, count) }, span))
}

/// The plan a caller's `skrull_plan_buffers` hold, borrowed (C arrays) and staged (records
/// converted into the core's types in the workspace).
pub(crate) struct CallerPlan<'a> {
    pub(crate) plan: Plan<'a>,
    /// Every input region, for overlap checks against outputs.
    pub(crate) inputs: [Span; 8],
    /// The rest of the workspace (for the spans).
    pub(crate) carver: Carver<'a>,
}

/// Reads and validates the plan in `bufs` for `cfg` and `lengths`, staging it in the workspace.
///
/// # Errors
/// `NullArg`/`InvalidArg`/`PlanInvalid` for the plan arrays, `NullArg`/`WorkspaceTooSmall`
/// for the workspace, `InvalidArg` when the workspace overlaps an input, `PlanInvalid` when
/// the arrays do not hold a valid plan of `cfg` and `lengths`.
///
/// # Safety
/// Every non-NULL pointer of `bufs` points to as many readable elements as its `_len` field
/// states (the summary: one); `workspace`, unless NULL, to `workspace_size` writable bytes;
/// nothing writes to any of them for `'a`.
pub(crate) unsafe fn read_plan<'a>(
    setup: &Setup,
    lengths: &'a [u32],
    bufs: &skrull_plan_buffers,
    workspace: *mut c_void,
    workspace_size: usize,
) -> Result<CallerPlan<'a>, skrull_status> {
    let cfg = setup.config();
    let n = lengths.len();
    if workspace.is_null() {
        return Err(skrull_status::NullArg);
    }
    if workspace_size < workspace_bytes(n) {
        return Err(skrull_status::WorkspaceTooSmall);
    }
    let summary_ptr: *const skrull_summary = bufs.summary;
    // SAFETY: forwarded caller contract (one readable summary unless NULL).
    let (summary, summary_span) = unsafe { input(summary_ptr, 1, 1) }?;
    let summary = summary.first().copied().ok_or(skrull_status::NullArg)?;
    let mbs = summary.micro_batches as usize;
    // `_reserved` is always 0 in a summary `skrull_schedule()` wrote: anything else is a
    // corrupted plan, like any other edited entry.
    if summary.sequences as usize != n || mbs > n || summary._reserved != 0 {
        return Err(skrull_status::PlanInvalid);
    }
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    // SAFETY: forwarded caller contract for each array and its capacity (all six).
    let (placements, placements_span): (&[skrull_placement], _) =
        unsafe { input(bufs.placements, bufs.placements_len, n) }?;
    // SAFETY: as above.
    let (micro_batches, micro_batches_span): (&[skrull_micro_batch], _) =
        unsafe { input(bufs.micro_batches, bufs.micro_batches_len, mbs) }?;
    // SAFETY: as above.
    let (members, members_span): (&'a [u32], _) =
        unsafe { input(bufs.members, bufs.members_len, n) }?;
    // SAFETY: as above.
    let (rank_tokens, rank_tokens_span): (&'a [u32], _) =
        unsafe { input(bufs.rank_tokens, bufs.rank_tokens_len, mbs * cp) }?;
    // SAFETY: as above.
    let (per_dp, per_dp_span): (&'a [u32], _) =
        unsafe { input(bufs.micro_batches_per_dp, bufs.micro_batches_per_dp_len, dp) }?;
    // The groups, when the caller kept them (a struct that ends before them has none).
    let groups_count = if bufs.cp_groups.is_null() { 0 } else { n };
    // SAFETY: as above.
    let (groups, groups_span): (&[skrull_cp_group], _) =
        unsafe { input(bufs.cp_groups, bufs.cp_groups_len, groups_count) }?;
    let region = |s: Option<Span>| s.ok_or(skrull_status::InvalidArg);
    // Declared ranges: every capacity the caller lent, not only the entries the plan uses.
    let inputs = [
        region(Span::of(lengths.as_ptr(), n))?,
        placements_span,
        micro_batches_span,
        members_span,
        rank_tokens_span,
        per_dp_span,
        summary_span,
        groups_span,
    ];
    let ws = declared(workspace.cast_const().cast::<u8>(), workspace_size)?;
    if inputs.iter().any(|i| i.overlaps(ws)) {
        return Err(skrull_status::InvalidArg);
    }
    // SAFETY: non-null (checked), `workspace_size` writable bytes for the call (caller
    // contract), disjoint from every input (checked) and from the outputs (checked by the
    // caller of this function before anything is written to them).
    let mut carver =
        unsafe { Carver::new(workspace.cast::<u8>(), workspace_size, workspace_end(n)) }?;
    let staged_p: &'a mut [Placement] = carver.take(n)?;
    let budget = cfg.budget();
    for (i, ((s, c), &len)) in staged_p.iter_mut().zip(placements).zip(lengths).enumerate() {
        let group = groups.get(i).copied();
        *s = staged_placement(cfg, c, group).ok_or(skrull_status::PlanInvalid)?;
        let expect = if c.cp_rank == SHARDED {
            budget.for_group(s.group(cfg.cp).size).share(len)
        } else if c.cp_rank == CHUNKED {
            // The chunked peak each GPU of the group is charged (see `Budget::chunked`).
            let peak = budget.chunked(&cfg.chunking, len, s.group(cfg.cp).size);
            u32::try_from(peak).map_err(|_| skrull_status::PlanInvalid)?
        } else {
            budget.local(len)
        };
        if c.tokens_per_gpu != expect {
            return Err(skrull_status::PlanInvalid);
        }
    }
    let staged_mb: &'a mut [MicroBatch] = carver.take(mbs)?;
    for (s, c) in staged_mb.iter_mut().zip(micro_batches) {
        *s = MicroBatch {
            dp_rank: c.dp_rank,
            index: c.index,
            first: c.first,
            count: c.count,
        };
    }
    let parts = PlanParts {
        placements: staged_p,
        micro_batches: staged_mb,
        members,
        rank_tokens,
        micro_batches_per_dp: per_dp,
        rollbacks: summary.rollbacks,
    };
    let plan = Plan::from_parts(setup, lengths, parts)?;
    let s = plan.summary();
    if (
        s.total_tokens,
        s.micro_batches,
        s.sharded,
        s.peak_rank_tokens,
    ) != (
        summary.total_tokens,
        summary.micro_batches,
        summary.sharded,
        summary.peak_rank_tokens,
    ) {
        return Err(skrull_status::PlanInvalid);
    }
    Ok(CallerPlan {
        plan,
        inputs,
        carver,
    })
}

/// A caller's placement in the core's type, with its group from `cp_groups` (`None`: the
/// caller gave none, so a sharded sequence spans the whole group). `None` when the group does
/// not fit the placement: a local sequence's group must be `{cp_rank, 1}`, a sharded one's
/// the whole group `{0, cp}` or, with `subgroups`, a valid aligned sub-group.
pub(crate) fn staged_placement(
    cfg: &Config,
    c: &skrull_placement,
    group: Option<skrull_cp_group>,
) -> Option<Placement> {
    let mut p = Placement {
        dp_rank: c.dp_rank,
        micro_batch: c.micro_batch,
        cp_rank: c.cp_rank,
        ..Placement::default()
    };
    if c.cp_rank == CHUNKED {
        // A chunked sequence needs its group: one GPU up to the whole CP group.
        let g = group?;
        let g = CpGroup {
            first: g.first,
            size: g.size,
        };
        if !g.is_valid_chunk_group(cfg.cp) {
            return None;
        }
        p.cp_first = u16::try_from(g.first).ok()?;
        p.cp_size = u16::try_from(g.size).ok()?;
        return Some(p);
    }
    let Some(g) = group else {
        return Some(p);
    };
    if c.cp_rank != SHARDED {
        let own = u32::try_from(c.cp_rank).ok() == Some(g.first) && g.size == 1;
        return own.then_some(p);
    }
    let whole = CpGroup {
        first: 0,
        size: cfg.cp,
    };
    let g = CpGroup {
        first: g.first,
        size: g.size,
    };
    if g == whole {
        return Some(p);
    }
    if !cfg.subgroups || !g.is_valid_shard(cfg.cp) {
        return None;
    }
    // A valid sub-group lies inside 0..cp <= 256: both fit 16 bits.
    p.cp_first = u16::try_from(g.first).ok()?;
    p.cp_size = u16::try_from(g.size).ok()?;
    Some(p)
}

/// Checks that the plan's `error` target (if any) overlaps none of `regions`.
///
/// # Errors
/// A silent `InvalidArg` (the details are not written) when it does, or when it is
/// misaligned.
fn check_error_target<'s>(
    bufs: &skrull_plan_buffers,
    mut regions: impl Iterator<Item = &'s Span>,
) -> Result<(), Failure> {
    match info_span(bufs.error)? {
        Some(e) if regions.any(|r| r.overlaps(e)) => {
            Err(Failure::silent(skrull_status::InvalidArg))
        }
        _ => Ok(()),
    }
}

/// Reads the configuration and the plan buffers struct every layout function takes.
///
/// # Safety
/// As [`skrull_layout_sizes`] for `config` and `plan`.
pub(crate) unsafe fn read_head(
    config: *const skrull_config,
    plan: *const skrull_plan_buffers,
) -> Result<(Setup, skrull_plan_buffers), Failure> {
    // SAFETY: forwarded caller contract for `config`.
    let cfg = unsafe { read_config(config) }?;
    // SAFETY: forwarded caller contract for `plan`.
    let bufs = unsafe { read_sized(plan, &PLAN_BUFFERS_SIZES, skrull_plan_buffers::EMPTY) }?;
    if bufs._reserved != 0 {
        return Err(skrull_status::InvalidArg.into());
    }
    Ok((Setup::without_models(&cfg)?, bufs))
}

/// Checks `n` and borrows the lengths.
///
/// # Safety
/// Unless NULL, `ptr` points to `n` readable `uint32_t` unchanged for `'a`.
pub(crate) unsafe fn read_lengths<'a>(
    ptr: *const u32,
    n: usize,
) -> Result<&'a [u32], skrull_status> {
    if n > MAX_SEQS {
        return Err(skrull_status::TooManySequences);
    }
    // SAFETY: forwarded caller contract.
    unsafe { lengths(ptr, n) }
}

fn core_gpu(gpu: skrull_gpu) -> Gpu {
    Gpu {
        dp_rank: gpu.dp_rank,
        micro_batch: gpu.micro_batch,
        cp_rank: gpu.cp_rank,
    }
}

fn c_sizes(s: LayoutSizes, n: usize) -> skrull_layout_capacity {
    skrull_layout_capacity {
        spans: s.spans as usize,
        local_cu_seqlens: s.local_cu_seqlens as usize,
        sharded_cu_seqlens: s.sharded_cu_seqlens as usize,
        positions: s.positions as usize,
        workspace_bytes: workspace_bytes_for(n, s.spans as usize, s.chunk_passes as usize),
    }
}

/// Writes `value` to `out` after the NULL and alignment checks.
///
/// # Safety
/// Unless NULL, `out` must be valid for writing one `T`.
unsafe fn write_out<T>(out: *mut T, value: T) -> skrull_status {
    if out.is_null() {
        return skrull_status::NullArg;
    }
    if !out.is_aligned() {
        return skrull_status::InvalidArg;
    }
    // SAFETY: non-null, aligned (checked), writable (caller contract).
    unsafe { out.write(value) };
    skrull_status::Ok
}

/// Sizes that hold the layout of every GPU of every plan of up to `n` sequences under
/// `config` (every plan `skrull_schedule()` returns): `2n` spans, `n + 1` entries per
/// `cu_seqlens` array, `bucket_tokens` position ids, and the workspace bytes the other layout
/// functions need for `n` sequences. Allocate the buffers once and reuse them every step
/// (`rings`, which this frozen struct has no field for: `SKRULL_MAX_RINGS` entries with
/// `subgroups`, 1 without).
///
/// Returns `SKRULL_STATUS_NULL_ARG` for a NULL `config` or `out`, the configuration's own
/// errors (as `skrull_schedule()`), `SKRULL_STATUS_TOO_MANY_SEQUENCES` for `n > 65536`;
/// `*out` is written only on success.
///
/// # Safety
/// `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are readable;
/// `out`, unless NULL, is valid for writing one aligned `skrull_layout_capacity`. Safe to call
/// from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_layout_sizes_max(
    config: *const skrull_config,
    n: usize,
    out: *mut skrull_layout_capacity,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract for `config`.
        let cfg = match unsafe { read_config(config) } {
            Ok(c) => c,
            Err(f) => return f.status,
        };
        if n > MAX_SEQS {
            return skrull_status::TooManySequences;
        }
        let sizes = c_sizes(LayoutSizes::max_for(n, &cfg), n);
        // SAFETY: forwarded caller contract for `out`.
        unsafe { write_out(out, sizes) }
    })
}

/// The exact sizes of one GPU's layout (`gpu`: DP rank, micro-batch, CP rank) of the plan
/// that `skrull_schedule()` wrote into `plan` for `config` and the `n` `lengths`.
///
/// `plan` is the same `skrull_plan_buffers` given to `skrull_schedule()` (its `summary` says
/// how many entries are valid); the plan is validated before use. The workspace needs
/// `skrull_layout_sizes_max(config, n).workspace_bytes` bytes, any alignment; contents
/// ignored and unspecified afterwards. `out->workspace_bytes` is that same number.
///
/// Statuses, first problem first: `config` (as `skrull_schedule()`), `plan` (NULL, misaligned,
/// struct size, reserved field), `TOO_MANY_SEQUENCES`, `lengths`, `workspace` (NULL,
/// `WORKSPACE_TOO_SMALL`), `plan->summary` (NULL, misaligned; `PLAN_INVALID` when its
/// `sequences` is not `n`, its `micro_batches` exceeds `n` or its `_reserved` is not 0), the
/// plan arrays in field order (NULL with a nonzero capacity, misaligned or an impossible
/// declared range; `PLAN_INVALID` when a capacity is below what `summary` says), the
/// workspace's declared range and its overlap with an input's (`INVALID_ARG`), `PLAN_INVALID`
/// (not a valid plan of this configuration and batch), `NO_SUCH_GPU`, `LAYOUT_OVERFLOW` (a
/// value above `INT32_MAX`), then `out` (NULL, misaligned, overlapping an input or the
/// workspace). Overlaps are checked on declared ranges, as in `skrull_plan_buffers`.
/// `*out` is written only on success. No allocation, no state; thread-safe with separate
/// workspaces (the configuration, lengths and plan may be shared).
///
/// # Safety
/// - `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are
///   readable; `lengths`, unless NULL, to `n` readable `uint32_t`.
/// - `plan`, unless NULL, points to a `skrull_plan_buffers` whose `struct_size` bytes are
///   readable, and each of its pointers, unless NULL, to the number of readable elements its
///   `_len` field states (`summary`: one).
/// - `workspace`, unless NULL, points to `workspace_size` writable bytes; `out`, unless NULL,
///   is valid for writing one `skrull_layout_capacity`.
/// - No other thread writes to any of these during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_layout_sizes(
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    plan: *const skrull_plan_buffers,
    gpu: skrull_gpu,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *mut skrull_layout_capacity,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            sizes(
                config,
                lengths,
                n,
                plan,
                gpu,
                workspace,
                workspace_size,
                out,
            )
        };
        if r.is_ok() {
            return skrull_status::Ok;
        }
        // SAFETY: forwarded caller contract for `config`.
        let [cfg, cost] = unsafe { config_spans(config) };
        let others = [
            cfg,
            cost,
            Span::clamped(lengths, n),
            Span::clamped(workspace.cast_const().cast::<u8>(), workspace_size),
            Span::clamped(out.cast_const(), 1),
        ];
        // SAFETY: forwarded caller contract for `plan`; the target is checked in `target`.
        unsafe { finish(r, target(plan, &others)) }
    })
}

/// The body of [`skrull_layout_sizes`].
///
/// # Safety
/// As [`skrull_layout_sizes`].
#[allow(clippy::too_many_arguments)]
unsafe fn sizes(
    config: *const skrull_config,
    lengths_ptr: *const u32,
    n: usize,
    plan: *const skrull_plan_buffers,
    gpu: skrull_gpu,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *mut skrull_layout_capacity,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let (setup, bufs) = unsafe { read_head(config, plan) }?;
    // SAFETY: forwarded caller contract.
    let lengths = unsafe { read_lengths(lengths_ptr, n) }?;
    // SAFETY: forwarded caller contract.
    let p = unsafe { read_plan(&setup, lengths, &bufs, workspace, workspace_size) }?;
    let s = LayoutSizes::for_gpu(&setup, lengths, &p.plan, core_gpu(gpu))?;
    if out.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !out.is_aligned() {
        return Err(skrull_status::InvalidArg.into());
    }
    let out_span = Span::of(out.cast_const(), 1).ok_or(skrull_status::InvalidArg)?;
    let ws = declared(workspace.cast_const().cast::<u8>(), workspace_size)?;
    if p.inputs.iter().chain([&ws]).any(|i| i.overlaps(out_span)) {
        return Err(skrull_status::InvalidArg.into());
    }
    check_error_target(&bufs, p.inputs.iter().chain([&ws, &out_span]))?;
    // SAFETY: non-null and aligned (checked), writable (caller contract), overlaps nothing
    // the call reads (checked).
    unsafe { out.write(c_sizes(s, n)) };
    Ok(())
}

/// Fills `out` with one GPU's layout (`gpu`: DP rank, micro-batch, CP rank) of the plan that
/// `skrull_schedule()` wrote into `plan` for `config` and the `n` `lengths`: the spans in the
/// order the GPU packs its tokens (local group, then the two zigzag chunks of every sharded
/// sequence, ring by ring), the varlen `cu_seqlens` of both groups, the rings (unless
/// skipped), position ids (unless skipped) and `*out->layout` (counts, `max_seqlen`s, loss
/// weights). See `docs/layout.md`.
///
/// Arguments and the workspace are those of `skrull_layout_sizes()`; buffers sized with
/// `skrull_layout_sizes_max()` fit every GPU. Outputs are written only on success. Statuses,
/// first problem first: as `skrull_layout_sizes()` up to `LAYOUT_OVERFLOW` (with `out` NULL,
/// misaligned, struct size or reserved field checked right after `plan`), then
/// `out->layout` (NULL, misaligned), each buffer in field order (NULL with a nonzero capacity,
/// or `rings` NULL when `config->subgroups` is 1; misaligned or an impossible declared range,
/// then `OUTPUT_TOO_SMALL`; `rings_count` misaligned), then overlapping declared ranges
/// (`INVALID_ARG`; see `skrull_layout_buffers`). No allocation, no state;
/// thread-safe with separate workspaces and outputs.
///
/// # Safety
/// - As `skrull_layout_sizes()` for `config`, `lengths`, `plan` and `workspace`.
/// - `out`, unless NULL, points to a `skrull_layout_buffers` whose `struct_size` bytes are
///   readable, and each of its pointers, unless NULL, to the number of writable elements its
///   `_len` field states (`layout`: one).
/// - No other thread touches any of these during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_layout_fill(
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    plan: *const skrull_plan_buffers,
    gpu: skrull_gpu,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_layout_buffers,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            fill(
                config,
                lengths,
                n,
                plan,
                gpu,
                workspace,
                workspace_size,
                out,
            )
        };
        if r.is_ok() {
            return skrull_status::Ok;
        }
        // SAFETY: forwarded caller contract for `config` and `out`.
        let others = unsafe { fill_regions(config, lengths, n, workspace, workspace_size, out) };
        // SAFETY: forwarded caller contract for `plan`; the target is checked in `target`.
        unsafe { finish(r, target(plan, &others)) }
    })
}

/// Every region a `skrull_layout_fill()` call lends besides the plan: the configuration and its
/// cost model, the lengths, the workspace, the `out` struct and each buffer it names (as far
/// as `out` can be read), for keeping the error details out of all of them.
///
/// # Safety
/// As [`skrull_layout_fill`] for `config` and `out`.
unsafe fn fill_regions(
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_layout_buffers,
) -> [Span; 18] {
    // SAFETY: forwarded caller contract.
    let [cfg, cost] = unsafe { config_spans(config) };
    // SAFETY: forwarded caller contract.
    let [a, b, c, d, e, f, g, h, i, j, k, l, m, q] = unsafe { out_regions(out) };
    [
        cfg,
        cost,
        Span::clamped(lengths, n),
        Span::clamped(workspace.cast_const().cast::<u8>(), workspace_size),
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        h,
        i,
        j,
        k,
        l,
        m,
        q,
    ]
}

/// The `out` struct of a layout call and each buffer it names (as far as `out` can be read),
/// for keeping the error details out of them.
///
/// # Safety
/// As [`skrull_layout_fill`] for `out`.
pub(crate) unsafe fn out_regions(out: *const skrull_layout_buffers) -> [Span; 14] {
    // SAFETY: forwarded caller contract.
    let o = unsafe { read_lenient(out, &LAYOUT_BUFFERS_SIZES, skrull_layout_buffers::EMPTY) }
        .unwrap_or(skrull_layout_buffers::EMPTY);
    [
        // SAFETY: forwarded caller contract.
        unsafe { struct_span(out) },
        Span::clamped(o.spans, o.spans_len),
        Span::clamped(o.local_cu_seqlens, o.local_cu_seqlens_len),
        Span::clamped(o.sharded_cu_seqlens, o.sharded_cu_seqlens_len),
        Span::clamped(o.sharded_cu_seqlens_padded, o.sharded_cu_seqlens_padded_len),
        Span::clamped(o.rank_cu_seqlens, o.rank_cu_seqlens_len),
        Span::clamped(o.positions, o.positions_len),
        Span::clamped(o.layout, 1),
        Span::clamped(o.gather_index, o.gather_index_len),
        Span::clamped(o.local_cu_seqlens_padded, o.local_cu_seqlens_padded_len),
        Span::clamped(o.rings, o.rings_len),
        Span::clamped(o.rings_count, 1),
        Span::clamped(o.chunk_passes, o.chunk_passes_len),
        Span::clamped(o.chunk_passes_count, 1),
    ]
}

/// Checks the caller's `rings` buffer for a GPU of `gpu_rings` rings: required with
/// sub-groups, optional (NULL with length 0) without; returns its declared range.
///
/// # Errors
/// `NullArg` when it is NULL under `subgroups` (or NULL with a nonzero length), then as
/// [`check_out`].
fn rings_out(
    cfg: &Config,
    o: &skrull_layout_buffers,
    gpu_rings: usize,
) -> Result<Span, skrull_status> {
    if cfg.subgroups && o.rings.is_null() {
        return Err(skrull_status::NullArg);
    }
    let needed = if o.rings.is_null() { 0 } else { gpu_rings };
    check_out(o.rings, o.rings_len, needed)
}

/// Borrows an output array of exactly `needed` elements (checked by `check_out`).
///
/// # Safety
/// `ptr` passed `check_out(ptr, len, needed)` and points to `len >= needed` writable elements
/// that nothing else touches for `'a`.
unsafe fn output<'a, T>(ptr: *mut T, needed: usize) -> &'a mut [T] {
    if needed == 0 {
        return &mut [];
    }
    // SAFETY: non-null (check_out rejects NULL when `len >= needed > 0`), aligned, `needed`
    // writable elements, exclusive (function contract).
    unsafe { core::slice::from_raw_parts_mut(ptr, needed) }
}

/// The body of [`skrull_layout_fill`].
///
/// # Safety
/// As [`skrull_layout_fill`].
#[allow(clippy::too_many_arguments)]
unsafe fn fill(
    config: *const skrull_config,
    lengths_ptr: *const u32,
    n: usize,
    plan: *const skrull_plan_buffers,
    gpu: skrull_gpu,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_layout_buffers,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let (setup, bufs) = unsafe { read_head(config, plan) }?;
    // SAFETY: forwarded caller contract for `out`.
    let o = unsafe { read_out(out) }?;
    // SAFETY: forwarded caller contract.
    let lengths = unsafe { read_lengths(lengths_ptr, n) }?;
    // SAFETY: forwarded caller contract.
    let mut p = unsafe { read_plan(&setup, lengths, &bufs, workspace, workspace_size) }?;
    let ws = declared(workspace.cast_const().cast::<u8>(), workspace_size)?;
    let c = check_gpu(&setup, lengths, &p, &bufs, &o, gpu, ws, &[])?;
    let staged: &mut [layout::Span] = p.carver.take(c.spans)?;
    let passes: &mut [layout::ChunkPass] = p.carver.take(c.passes)?;
    // SAFETY: `check_gpu` passed for `o` (caller contract: its buffers are writable).
    unsafe { write_gpu(&setup, lengths, &p.plan, &o, &c, staged, passes) }
}

/// Reads one `skrull_layout_buffers` (struct size and reserved field).
///
/// # Safety
/// As the `out` argument of [`skrull_layout_fill`].
pub(crate) unsafe fn read_out(
    out: *const skrull_layout_buffers,
) -> Result<skrull_layout_buffers, Failure> {
    // SAFETY: forwarded caller contract for `out`.
    let o = unsafe { read_sized(out, &LAYOUT_BUFFERS_SIZES, skrull_layout_buffers::EMPTY) }?;
    if o._reserved != 0 {
        return Err(skrull_status::InvalidArg.into());
    }
    Ok(o)
}

/// One GPU's layout sizes and the element counts its output buffers get, after
/// [`check_gpu`] checked them.
pub(crate) struct Checked {
    gpu: Gpu,
    /// Spans the GPU's layout has (staged in the workspace first).
    pub(crate) spans: usize,
    local: usize,
    local_padded: usize,
    sharded: usize,
    positions: usize,
    gather: usize,
    rings: usize,
    /// Chunk passes to write (0 when the caller skips them).
    pub(crate) passes: usize,
}

/// Checks one GPU's output buffers `o` against its layout sizes, in the documented order of
/// [`skrull_layout_fill`]: `o.layout`, each buffer in field order, then overlaps (outputs
/// with each other, the workspace `ws`, every plan input and `more_inputs`) and the error
/// details' target.
///
/// # Errors
/// `NO_SUCH_GPU`, `LAYOUT_OVERFLOW`, `NULL_ARG`, `INVALID_ARG`, `OUTPUT_TOO_SMALL`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_gpu(
    setup: &Setup,
    lengths: &[u32],
    p: &CallerPlan<'_>,
    bufs: &skrull_plan_buffers,
    o: &skrull_layout_buffers,
    gpu: skrull_gpu,
    ws: Span,
    more_inputs: &[Span],
) -> Result<Checked, Failure> {
    let cfg = setup.config();
    let g = core_gpu(gpu);
    let s = LayoutSizes::for_gpu(setup, lengths, &p.plan, g)?;
    if o.layout.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !o.layout.is_aligned() {
        return Err(skrull_status::InvalidArg.into());
    }
    let skip = |null: bool, len: usize| null && len == 0;
    let skip_positions = skip(o.positions.is_null(), o.positions_len);
    let nlocal_padded = if skip(
        o.local_cu_seqlens_padded.is_null(),
        o.local_cu_seqlens_padded_len,
    ) {
        0
    } else {
        s.local_cu_seqlens as usize
    };
    let ngather = if skip(o.gather_index.is_null(), o.gather_index_len) {
        0
    } else {
        s.positions as usize
    };
    let (nspans, nlocal, nsharded) = (
        s.spans as usize,
        s.local_cu_seqlens as usize,
        s.sharded_cu_seqlens as usize,
    );
    let npos = if skip_positions {
        0
    } else {
        s.positions as usize
    };
    // This GPU's rings: the core counts them when one is a sub-group; otherwise there is the
    // whole group's, if any sequence is sharded.
    let gpu_rings = if s.rings > 0 {
        s.rings as usize
    } else {
        usize::from(s.sharded_cu_seqlens > 1)
    };
    let npasses = if skip(o.chunk_passes.is_null(), o.chunk_passes_len) {
        0
    } else {
        s.chunk_passes as usize
    };
    let outputs = [
        check_out(o.spans, o.spans_len, nspans)?,
        check_out(o.local_cu_seqlens, o.local_cu_seqlens_len, nlocal)?,
        check_out(o.sharded_cu_seqlens, o.sharded_cu_seqlens_len, nsharded)?,
        check_out(
            o.sharded_cu_seqlens_padded,
            o.sharded_cu_seqlens_padded_len,
            nsharded,
        )?,
        check_out(o.rank_cu_seqlens, o.rank_cu_seqlens_len, nsharded)?,
        check_out(o.positions, o.positions_len, npos)?,
        check_out(o.gather_index, o.gather_index_len, ngather)?,
        check_out(
            o.local_cu_seqlens_padded,
            o.local_cu_seqlens_padded_len,
            nlocal_padded,
        )?,
        rings_out(cfg, o, gpu_rings)?,
        declared(
            o.rings_count.cast_const(),
            usize::from(!o.rings_count.is_null()),
        )?,
        check_out(o.chunk_passes, o.chunk_passes_len, npasses)?,
        declared(
            o.chunk_passes_count.cast_const(),
            usize::from(!o.chunk_passes_count.is_null()),
        )?,
        Span::of(o.layout.cast_const(), 1).ok_or(skrull_status::InvalidArg)?,
        ws,
    ];
    let nrings = if o.rings.is_null() { 0 } else { gpu_rings };
    // Outputs must not overlap each other, the workspace or any input (inputs may share).
    let crosses = outputs
        .iter()
        .any(|a| p.inputs.iter().chain(more_inputs).any(|b| a.overlaps(*b)));
    if any_overlap(&outputs) || crosses {
        return Err(skrull_status::InvalidArg.into());
    }
    check_error_target(bufs, outputs.iter().chain(&p.inputs).chain(more_inputs))?;
    Ok(Checked {
        gpu: g,
        spans: nspans,
        local: nlocal,
        local_padded: nlocal_padded,
        sharded: nsharded,
        positions: npos,
        gather: ngather,
        rings: nrings,
        passes: npasses,
    })
}

/// Writes one GPU's layout into `o`, staging its spans in `staged` (exactly `c.spans`) and
/// its chunk passes in `passes` (exactly `c.passes`).
///
/// # Errors
/// Only `INTERNAL`: every check the core makes passed in [`check_gpu`].
///
/// # Safety
/// `c` is what [`check_gpu`] returned for `o` and this plan, and `o`'s buffers are writable
/// for the counts it checked and touched by nothing else during the call.
pub(crate) unsafe fn write_gpu(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
    o: &skrull_layout_buffers,
    c: &Checked,
    staged: &mut [layout::Span],
    passes: &mut [layout::ChunkPass],
) -> Result<(), Failure> {
    let mut staged_rings = [layout::LayoutRing::default(); layout::MAX_RINGS as usize];
    let staged_rings = staged_rings
        .get_mut(..c.rings)
        .ok_or(skrull_status::Internal)?;
    // SAFETY: each pointer passed `check_out` for exactly these counts, is writable for them
    // (caller contract) and overlaps no other output, input or the workspace (checked).
    let bufs = unsafe {
        LayoutBuffers {
            spans: &mut *staged,
            local_cu_seqlens: output(o.local_cu_seqlens, c.local),
            local_cu_seqlens_padded: output(o.local_cu_seqlens_padded, c.local_padded),
            sharded_cu_seqlens: output(o.sharded_cu_seqlens, c.sharded),
            sharded_cu_seqlens_padded: output(o.sharded_cu_seqlens_padded, c.sharded),
            rank_cu_seqlens: output(o.rank_cu_seqlens, c.sharded),
            positions: output(o.positions, c.positions),
            gather_index: output(o.gather_index, c.gather),
            rings: &mut *staged_rings,
        }
    };
    // Every check `fill` makes already passed in `check_gpu` (and it writes nothing on error).
    let l = layout::fill_with_passes(setup, lengths, plan, c.gpu, bufs, &mut *passes)?;
    // SAFETY: `o.spans` holds at least `c.spans` writable, aligned spans, `o.rings` (unless
    // NULL) this GPU's rings, `o.rings_count` (unless NULL) and `o.layout` one value each
    // (checked), disjoint from the workspace the staged spans live in (checked).
    unsafe {
        for (k, sp) in staged.iter().enumerate().take(l.spans as usize) {
            o.spans.add(k).write(skrull_span {
                seq: sp.seq,
                chunk: sp.chunk,
                offset: sp.offset,
                start: sp.start,
                len: sp.len,
                pad: sp.pad,
            });
        }
        for (k, r) in staged_rings.iter().enumerate().take(l.rings as usize) {
            o.rings.add(k).write(skrull_layout_ring {
                first: r.first,
                size: r.size,
                offset: r.offset,
                seqs: r.seqs,
            });
        }
        if !o.rings_count.is_null() {
            o.rings_count.write(l.rings);
        }
        for (k, p) in passes.iter().enumerate().take(c.passes) {
            o.chunk_passes.add(k).write(skrull_chunk_pass {
                seq: p.seq,
                index: p.index,
                count: p.count,
                first: p.first,
                size: p.size,
                start: p.start,
                len: p.len,
                padded: p.padded,
                span: p.span,
                spans: p.spans,
                offset: p.offset,
                tokens: p.tokens,
            });
        }
        if !o.chunk_passes_count.is_null() {
            o.chunk_passes_count.write(l.chunk_passes);
        }
        o.layout.write(skrull_layout {
            dp_rank: l.dp_rank,
            micro_batch: l.micro_batch,
            cp_rank: l.cp_rank,
            micro_batch_global: l.micro_batch_global,
            local_seqs: l.local_seqs,
            sharded_seqs: l.sharded_seqs,
            spans: l.spans,
            local_tokens: l.local_tokens,
            sharded_tokens: l.sharded_tokens,
            tokens: l.tokens,
            pad_tokens: l.pad_tokens,
            charged_tokens: l.charged_tokens,
            local_max_seqlen: l.local_max_seqlen,
            sharded_max_seqlen: l.sharded_max_seqlen,
            sharded_max_seqlen_padded: l.sharded_max_seqlen_padded,
            rank_max_seqlen: l.rank_max_seqlen,
            loss_tokens: l.loss_tokens,
            _reserved: 0,
            micro_batch_tokens: l.micro_batch_tokens,
            global_tokens: l.global_tokens,
        });
    }
    Ok(())
}
