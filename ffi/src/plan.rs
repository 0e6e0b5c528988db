//! The plan as C reads it: frozen POD records, the summary, and the struct that lends
//! `skrull_schedule()` its output buffers.

use core::mem::size_of;

use crate::error::skrull_error_info;

/// `skrull_placement.cp_rank` of a sequence sharded over the whole CP group.
pub const SKRULL_SHARDED: i32 = -1;
/// `skrull_placement.cp_rank` of a chunked sequence (`skrull_config.chunk_size`): it runs as
/// consecutive chunks, in order, on every CP rank of its group (`skrull_plan_buffers.cp_groups`:
/// one GPU, an aligned sub-group or the whole CP group), each chunk sharded over that group.
pub const SKRULL_CHUNKED: i32 = -2;

/// Where one sequence runs (frozen layout, 16 bytes, no implicit padding).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_placement {
    /// The data-parallel rank that runs it.
    pub dp_rank: u32,
    /// Its micro-batch on that DP rank (0-based, run in this order).
    pub micro_batch: u32,
    /// `SKRULL_SHARDED` (-1): split over the CP ranks of its group (the whole CP group, or
    /// with `skrull_config.subgroups` the sub-group in `skrull_plan_buffers.cp_groups`);
    /// `SKRULL_CHUNKED` (-2, only with `skrull_config.chunk_size` above 0): run as chunks on
    /// the group in `cp_groups`; otherwise (0 or more) the CP rank that holds it whole. Test
    /// for the two negative values by name: a negative `cp_rank` is not always "sharded".
    pub cp_rank: i32,
    /// Tokens it occupies on each GPU that holds it: its length when local (padded to
    /// `pad_multiple` with `pad_local`); its share over its group when sharded
    /// (`ceil(len / g)` for a group of `g` ranks, or the padded share with
    /// `SKRULL_SHARD_PADDING_ZIGZAG` or a pad multiple above 1); when chunked, its peak on
    /// each GPU of its group (the activations of the chunks alive at once plus its share of
    /// the K/V state; see `docs/chunking.md`).
    pub tokens_per_gpu: u32,
}

const _: () = assert!(size_of::<skrull_placement>() == 16);

/// The consecutive CP ranks `first .. first + size` that hold one sequence (frozen layout, 8
/// bytes): `{cp_rank, 1}` for a local sequence, `{0, cp}` for one sharded over the whole CP
/// group, and for one sharded over a sub-group (`skrull_config.subgroups`) an aligned block:
/// `size` a power of two, `2 <= size < cp`, dividing `cp`, and `first` a multiple of `size`.
/// Such a sequence is one more ring: a CP attention call over the process group of those
/// ranks. A chunked sequence (`SKRULL_CHUNKED`) names one GPU `{r, 1}`, an aligned sub-group
/// or the whole group `{0, cp}`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_cp_group {
    /// The first CP rank.
    pub first: u32,
    /// How many CP ranks (1: a local sequence).
    pub size: u32,
}

const _: () = assert!(size_of::<skrull_cp_group>() == 8);

/// One micro-batch: the DP rank that runs it and where its sequences are listed.
///
/// The table is sorted by `(dp_rank, index)`: DP rank d's micro-batches are the
/// `micro_batches_per_dp[d]` consecutive entries that start after those of ranks 0..d. The
/// micro-batch at table position `g` lists its sequences in
/// `members[first .. first + count]` and its per-GPU token loads in
/// `rank_tokens[g * cp .. (g + 1) * cp]` (frozen layout, 16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_micro_batch {
    /// The DP rank that runs it.
    pub dp_rank: u32,
    /// Its position among that rank's micro-batches (0-based, run in this order).
    pub index: u32,
    /// Offset of its first sequence index in `members`.
    pub first: u32,
    /// How many sequences it holds (at least 1).
    pub count: u32,
}

const _: () = assert!(size_of::<skrull_micro_batch>() == 16);

/// Counts that summarise a plan (frozen layout, 32 bytes, explicit padding).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_summary {
    /// Tokens in the batch (the global token count a trainer normalises the loss by).
    pub total_tokens: u64,
    /// Sequences in the batch.
    pub sequences: u32,
    /// Micro-batches over all DP ranks (entries written to `micro_batches`).
    pub micro_batches: u32,
    /// Sequences sharded over their CP group (the whole group or a sub-group); chunked
    /// sequences are not counted here (count the `SKRULL_CHUNKED` placements).
    pub sharded: u32,
    /// DACP rollbacks (local sequences turned sharded to free memory).
    pub rollbacks: u32,
    /// The most tokens any GPU holds in any micro-batch (at most `bucket_tokens`).
    pub peak_rank_tokens: u32,
    /// Always 0 (the layout functions return `SKRULL_STATUS_PLAN_INVALID` for a summary whose
    /// `_reserved` is not 0).
    pub _reserved: u32,
}

const _: () = assert!(size_of::<skrull_summary>() == 32);

/// The output buffers `skrull_schedule()` fills, each a pointer and its capacity in elements.
///
/// Size them with `skrull_plan_sizes()`. Nothing is written unless the call returns
/// `SKRULL_STATUS_OK`; then the first `summary.sequences` placements and members, the first
/// `summary.micro_batches` micro-batches, `summary.micro_batches * cp` rank-token entries and
/// `dp` micro-batch counts are written, and the rest of each buffer is left as it was.
/// Each buffer is the declared range `[ptr, ptr + capacity * sizeof(element))`: the whole
/// capacity its `_len` field states, not only the part a call writes. These ranges must not
/// overlap each other, the lengths or the workspace, and none may exceed `PTRDIFF_MAX` bytes or
/// run past the end of the address space (`SKRULL_STATUS_INVALID_ARG`). A pointer may be NULL
/// only when its capacity is 0 and the batch needs none of it (`cp_groups`: see there).
/// `struct_size` follows the rules of `skrull_config`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct skrull_plan_buffers {
    /// `sizeof(skrull_plan_buffers)`.
    pub struct_size: u32,
    /// Must be 0.
    pub _reserved: u32,
    /// Per sequence, in input order (capacity: `n`).
    pub placements: *mut skrull_placement,
    /// Capacity of `placements`, in elements.
    pub placements_len: usize,
    /// The micro-batch table, sorted by (DP rank, index) (capacity: `n`).
    pub micro_batches: *mut skrull_micro_batch,
    /// Capacity of `micro_batches`, in elements.
    pub micro_batches_len: usize,
    /// Sequence indices grouped by micro-batch, in table order (capacity: `n`).
    pub members: *mut u32,
    /// Capacity of `members`, in elements.
    pub members_len: usize,
    /// Tokens per (micro-batch, CP rank): entry `g * cp + r` (capacity: `n * cp`).
    pub rank_tokens: *mut u32,
    /// Capacity of `rank_tokens`, in elements.
    pub rank_tokens_len: usize,
    /// Micro-batches each DP rank runs (capacity: `dp`; 0 for a rank that got no sequence).
    pub micro_batches_per_dp: *mut u32,
    /// Capacity of `micro_batches_per_dp`, in elements.
    pub micro_batches_per_dp_len: usize,
    /// Receives the summary (required).
    pub summary: *mut skrull_summary,
    /// Receives the details of a failure (optional, NULL: none). Written only when the call
    /// fails, by `skrull_schedule()` and by the layout functions that read this plan, and only
    /// where it overlaps no other argument (any buffer at its declared capacity included):
    /// one that overlaps is never written, and the call fails with the first problem in its
    /// order (`SKRULL_STATUS_INVALID_ARG` when there is no earlier one). Added after version
    /// 1: a caller whose `struct_size` ends before it gets no details.
    pub error: *mut skrull_error_info,
    /// Per sequence, in input order, the CP ranks that hold it (capacity: `n`): `{cp_rank,
    /// 1}` local, `{0, cp}` sharded over the whole group, else the sub-group it is sharded
    /// over, or the group a chunked sequence runs on. Written when not NULL; required (NULL:
    /// `SKRULL_STATUS_NULL_ARG`, short: `SKRULL_STATUS_OUTPUT_TOO_SMALL`) when
    /// `skrull_config.subgroups` is 1 or `chunk_size` is above 0, since `cp_rank` -1 or -2
    /// then no longer says which ranks hold a sequence. The layout functions read it back
    /// when present (it must then hold `n` entries consistent with the placements, else
    /// `SKRULL_STATUS_PLAN_INVALID`); absent (NULL, or a `struct_size` that ends before it),
    /// every sharded sequence is taken to span the whole group. Added after version 1.
    pub cp_groups: *mut skrull_cp_group,
    /// Capacity of `cp_groups`, in elements.
    pub cp_groups_len: usize,
}

/// `sizeof(skrull_plan_buffers)` of ABI version 1, the smallest accepted `struct_size`, on
/// this platform (96 bytes on 64-bit): everything before `error`.
pub const PLAN_BUFFERS_SIZE_V1: usize = 8 + 11 * size_of::<usize>();

/// The `struct_size` values of `skrull_plan_buffers` below the current size that end on a
/// field boundary: version 1, then each appended field (a pointer with its length).
pub(crate) const PLAN_BUFFERS_SIZES: [usize; 3] = [
    PLAN_BUFFERS_SIZE_V1,
    core::mem::offset_of!(skrull_plan_buffers, cp_groups),
    size_of::<skrull_plan_buffers>(),
];

const _: () = assert!(
    size_of::<skrull_plan_buffers>() == PLAN_BUFFERS_SIZE_V1 + 3 * size_of::<usize>(),
    "skrull_plan_buffers must have no implicit padding"
);

impl skrull_plan_buffers {
    /// All NULL and zero, with `struct_size` set: the base the reader fills in.
    pub const EMPTY: skrull_plan_buffers = skrull_plan_buffers {
        struct_size: size_of::<skrull_plan_buffers>() as u32,
        _reserved: 0,
        placements: core::ptr::null_mut(),
        placements_len: 0,
        micro_batches: core::ptr::null_mut(),
        micro_batches_len: 0,
        members: core::ptr::null_mut(),
        members_len: 0,
        rank_tokens: core::ptr::null_mut(),
        rank_tokens_len: 0,
        micro_batches_per_dp: core::ptr::null_mut(),
        micro_batches_per_dp_len: 0,
        summary: core::ptr::null_mut(),
        error: core::ptr::null_mut(),
        cp_groups: core::ptr::null_mut(),
        cp_groups_len: 0,
    };
}

/// The buffer sizes one batch needs, from `skrull_plan_sizes()`.
///
/// Element counts are upper bounds valid for every policy, so buffers sized once for the
/// largest batch and layout can be reused every step (frozen layout, 6 `size_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_sizes {
    /// Bytes of workspace `skrull_schedule()` needs (`skrull_workspace_size()`).
    pub workspace_bytes: usize,
    /// Elements of `placements`: `n`.
    pub placements: usize,
    /// Elements of `micro_batches`: `n`.
    pub micro_batches: usize,
    /// Elements of `members`: `n`.
    pub members: usize,
    /// Elements of `rank_tokens`: `n * cp`.
    pub rank_tokens: usize,
    /// Elements of `micro_batches_per_dp`: `dp`.
    pub micro_batches_per_dp: usize,
}

const _: () = assert!(size_of::<skrull_sizes>() == 6 * size_of::<usize>());
