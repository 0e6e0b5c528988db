//! `skrull_status`: the one result type of the C API, its stable numbers and messages, and the
//! one mapping from the core's [`Error`].

use core::ffi::CStr;

use skrull_core::Error;
use skrull_core::error::Buffer;
use skrull_core::plan::CheckError;
use skrull_core::plan::layout::LayoutError;

/// The result of every fallible skrull function.
///
/// `SKRULL_STATUS_OK` is 0, so `if (skrull_schedule(...))` tests for failure. The numbers are
/// stable forever: a status that is retired keeps its number reserved and is never reused.
/// Functions take and return the plain `uint32_t` typedef, so a value from a newer library is
/// never undefined behaviour; `skrull_status_str` names every value, known or not.
///
/// Groups: 1-9 malformed calls (pointers, struct sizes, integer enums, buffer sizes), 10-29
/// rejected configurations or batches (one per scheduler error), 30-39 rejected layout
/// requests (`skrull_layout_*`), 40-49 the online refit (`skrull_refit_*`), 50-59 the
/// outlier-delay window (`skrull_window_*`), 254-255 internal faults.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum skrull_status {
    /// Success; every output was written.
    Ok = 0,
    /// A required pointer argument is NULL (or a buffer is NULL with a nonzero length).
    NullArg = 1,
    /// A struct's `struct_size` is smaller than its first version, larger than 4096, or
    /// larger than this library's struct with nonzero bytes past the fields it knows.
    BadStructSize = 2,
    /// An integer that selects an option (policy, victim, FLOPs formula, shard padding,
    /// model preset, `swiglu`) has no meaning in this library version.
    InvalidEnum = 3,
    /// Another malformed argument: a pointer not aligned for its type (an extensible struct:
    /// for its `struct_size` class, see `skrull_config`); a buffer whose declared range
    /// (pointer + capacity x element size, the whole capacity) overlaps a buffer it must not
    /// overlap, exceeds `PTRDIFF_MAX` bytes or runs past the end of the address space; error
    /// details that overlap another argument; or a nonzero `_reserved` field of a parameter
    /// struct (`skrull_plan_buffers`, `skrull_layout_buffers`; `skrull_config`'s former
    /// `_reserved` word is now `chunk_size`).
    InvalidArg = 4,
    /// The workspace is smaller than `skrull_workspace_size()` bytes.
    WorkspaceTooSmall = 5,
    /// An output buffer is shorter than `skrull_plan_sizes()` (or, for a layout,
    /// `skrull_layout_sizes()`) says.
    OutputTooSmall = 6,
    /// `dp` is 0 or above 65536.
    InvalidDp = 10,
    /// `cp` is 0 or above 256.
    InvalidCp = 11,
    /// `bucket_tokens` is 0 or above 2^31 - 1.
    InvalidBucket = 12,
    /// A model-shape field is 0 or above its limit (or `kv_hidden > hidden`).
    InvalidModel = 13,
    /// The batch holds more than 65536 sequences.
    TooManySequences = 14,
    /// A sequence has zero tokens.
    EmptySequence = 15,
    /// A sequence is longer than 2^31 - 1 tokens.
    LengthOutOfRange = 16,
    /// A sequence cannot fit even sharded over the CP group: its per-GPU share, `ceil(P / cp)`
    /// for its padded length `P` (`P = len` without padding; see `docs/layout.md`), exceeds
    /// `bucket_tokens`.
    SequenceTooLong = 17,
    /// A DP rank needs more micro-batches than `max_micro_batches` allows (details: `index` the
    /// first such DP rank, `value` its count, `limit` the limit), or the configuration's fixed
    /// `micro_batches` is above a nonzero `max_micro_batches` (details: `index` -1, `value`
    /// `micro_batches`, `limit` `max_micro_batches`).
    MicroBatchLimit = 18,
    /// DACP could not place one micro-batch within the budget (`skrull_dacp_place` only).
    DacpFailed = 19,
    /// `pad_multiple` is above 65536.
    InvalidPadMultiple = 20,
    /// A `skrull_cost_model` value is out of range (not finite, a rate not above 0, a cost
    /// below 0, an efficiency above 1, a zero tile or node size, `attention_seqlen` not
    /// strictly increasing). Checked for every policy, not only `balanced`, which plans with
    /// it. The throughput columns need only be above 0: they may fall with the length.
    InvalidCostModel = 21,
    /// The policy does not apply an option set away from its default: `balanced` plans on
    /// estimated time, so it refuses `flops = SKRULL_FLOPS_MEGATRON`.
    UnsupportedOption = 22,
    /// A DP rank needs more micro-batches than the fixed count `skrull_config.micro_batches`.
    /// The error details give the smallest count that fits (`value`), the fixed count
    /// (`limit`) and the first DP rank that needs the most (`index`).
    MicroBatchCount = 23,
    /// The chunking fields are out of range (with `chunk_size` above 0: `chunk_keep` not in
    /// 1..=64 or `chunk_state_permille` above 1000), or the policy is
    /// `SKRULL_POLICY_CHUNKFLOW` with `chunk_size` 0. Details: `field` 1 `chunk_size`, 2
    /// `chunk_keep`, 3 `chunk_state_permille`; `value` that field; `limit` its bound (0 for
    /// `chunk_size`, which must be above it).
    InvalidChunking = 24,
    /// A sequence run chunked would hold more than `bucket_tokens` on a GPU of its group
    /// (its kept chunks, or one recomputed chunk, plus its share of the K/V state): a smaller
    /// `chunk_size` or `chunk_keep` fits it. Details: `index` the sequence, `value` its
    /// length, `limit` the BucketSize it would need.
    ChunkOverBudget = 25,
    /// No ChunkSize fits (`skrull_chunk_size_default()`): even one-token chunks of the longest
    /// sequence hold more than `bucket_tokens` on a GPU of the group that runs them, because
    /// the K/V state of the whole sequence is charged. Details: `value` the longest sequence,
    /// `limit` the tokens it would hold per GPU with one-token chunks (the least any chunk
    /// size gives).
    NoChunkSize = 26,
    /// The plan buffers given to a layout function do not hold a valid plan that
    /// `skrull_schedule()` made from this configuration and these lengths (wrong counts, a
    /// capacity below what `summary` says, corrupted entries including a nonzero
    /// `summary._reserved`, or another batch).
    PlanInvalid = 30,
    /// The GPU asked for is not in the plan: `dp_rank >= dp`, `cp_rank >= cp`, or
    /// `micro_batch >= micro_batches_per_dp[dp_rank]`. Details: `field` the coordinate at fault
    /// (1 DP rank, 2 micro-batch, 3 CP rank), `index` the DP rank, `value` the micro-batch,
    /// `limit` the micro-batches that DP rank runs (0 for a DP rank at or above `dp`).
    NoSuchGpu = 31,
    /// A layout value (a `cu_seqlens` entry, position id or token count) exceeds `INT32_MAX`.
    LayoutOverflow = 32,
    /// A `skrull_refit_params` field is out of range. Details: `field` its position after
    /// `struct_size` (1 `window_steps`, 2 `max_rows_per_step`, 3 `flags`, 4 `forgetting`,
    /// 5 `ridge`, 6 `outlier`).
    InvalidRefitParams = 40,
    /// The refit state was not initialised by `skrull_refit_init()`, is corrupted, or its
    /// size is below what its parameters need.
    RefitStateInvalid = 41,
    /// The measured times do not match the plan: their count is not
    /// `n_micro_batches * dp * cp`, the plan uses a micro-batch at or beyond
    /// `n_micro_batches`, or placements and lengths differ in count. Details: `value` what was
    /// given, `limit` what the plan needs.
    MeasurementMismatch = 42,
    /// One step holds more measurements (`n_micro_batches * dp * cp`) than the refit's
    /// `max_rows_per_step`. Details: `value` the measurements, `limit` the capacity.
    RefitStepTooLarge = 43,
    /// A `skrull_window_params` field is out of range. Details: `field` its position after
    /// `struct_size` (1 `max_delay`, 2 `batch_capacity`), `value` the value, `limit` its
    /// largest accepted value.
    InvalidWindowParams = 50,
    /// The window state was not initialised by `skrull_window_init()`, is corrupted, or is
    /// smaller than it was initialised with.
    WindowStateInvalid = 51,
    /// `skrull_window_push()`: the window already holds `max_delay + 1` batches (take a step
    /// first).
    WindowFull = 52,
    /// `skrull_window_step()`: no batch is pushed.
    WindowEmpty = 53,
    /// `skrull_window_push()`: the batch holds more sequences than `batch_capacity`. Details:
    /// `value` the sequences, `limit` the capacity.
    WindowBatchTooLarge = 54,
    /// `skrull_window_requeue()`: a deferred sample does not fit the window (its origin not
    /// before the next step or its deadline passed, its position not after the queue's last or
    /// not before the next push, the queue full, or a batch already pushed). Details: `index`
    /// the sample.
    InvalidDeferred = 55,
    /// The scheduler reported an error this version of the C API has no status for (a bug:
    /// please report it).
    Internal = 254,
    /// A Rust panic was caught at the C boundary (a bug: please report it). No output was
    /// written.
    Panic = 255,
}

/// Every status, in numeric order (private: an array constant would leak into the header).
const ALL: [skrull_status; 39] = [
    skrull_status::Ok,
    skrull_status::NullArg,
    skrull_status::BadStructSize,
    skrull_status::InvalidEnum,
    skrull_status::InvalidArg,
    skrull_status::WorkspaceTooSmall,
    skrull_status::OutputTooSmall,
    skrull_status::InvalidDp,
    skrull_status::InvalidCp,
    skrull_status::InvalidBucket,
    skrull_status::InvalidModel,
    skrull_status::TooManySequences,
    skrull_status::EmptySequence,
    skrull_status::LengthOutOfRange,
    skrull_status::SequenceTooLong,
    skrull_status::MicroBatchLimit,
    skrull_status::DacpFailed,
    skrull_status::InvalidPadMultiple,
    skrull_status::InvalidCostModel,
    skrull_status::UnsupportedOption,
    skrull_status::MicroBatchCount,
    skrull_status::InvalidChunking,
    skrull_status::ChunkOverBudget,
    skrull_status::NoChunkSize,
    skrull_status::PlanInvalid,
    skrull_status::NoSuchGpu,
    skrull_status::LayoutOverflow,
    skrull_status::InvalidRefitParams,
    skrull_status::RefitStateInvalid,
    skrull_status::MeasurementMismatch,
    skrull_status::RefitStepTooLarge,
    skrull_status::InvalidWindowParams,
    skrull_status::WindowStateInvalid,
    skrull_status::WindowFull,
    skrull_status::WindowEmpty,
    skrull_status::WindowBatchTooLarge,
    skrull_status::InvalidDeferred,
    skrull_status::Internal,
    skrull_status::Panic,
];

impl skrull_status {
    /// Every status, in numeric order.
    pub fn all() -> &'static [skrull_status] {
        &ALL
    }

    /// The status with number `code`, if there is one.
    pub fn from_u32(code: u32) -> Option<skrull_status> {
        ALL.iter().copied().find(|s| *s as u32 == code)
    }

    /// The status's name as the header spells it after `SKRULL_STATUS_` (`SEQUENCE_TOO_LONG`).
    pub fn name(self) -> &'static CStr {
        match self {
            skrull_status::Ok => c"OK",
            skrull_status::NullArg => c"NULL_ARG",
            skrull_status::BadStructSize => c"BAD_STRUCT_SIZE",
            skrull_status::InvalidEnum => c"INVALID_ENUM",
            skrull_status::InvalidArg => c"INVALID_ARG",
            skrull_status::WorkspaceTooSmall => c"WORKSPACE_TOO_SMALL",
            skrull_status::OutputTooSmall => c"OUTPUT_TOO_SMALL",
            skrull_status::InvalidDp => c"INVALID_DP",
            skrull_status::InvalidCp => c"INVALID_CP",
            skrull_status::InvalidBucket => c"INVALID_BUCKET",
            skrull_status::InvalidModel => c"INVALID_MODEL",
            skrull_status::TooManySequences => c"TOO_MANY_SEQUENCES",
            skrull_status::EmptySequence => c"EMPTY_SEQUENCE",
            skrull_status::LengthOutOfRange => c"LENGTH_OUT_OF_RANGE",
            skrull_status::SequenceTooLong => c"SEQUENCE_TOO_LONG",
            skrull_status::MicroBatchLimit => c"MICRO_BATCH_LIMIT",
            skrull_status::DacpFailed => c"DACP_FAILED",
            skrull_status::InvalidPadMultiple => c"INVALID_PAD_MULTIPLE",
            skrull_status::InvalidCostModel => c"INVALID_COST_MODEL",
            skrull_status::UnsupportedOption => c"UNSUPPORTED_OPTION",
            skrull_status::MicroBatchCount => c"MICRO_BATCH_COUNT",
            skrull_status::InvalidChunking => c"INVALID_CHUNKING",
            skrull_status::ChunkOverBudget => c"CHUNK_OVER_BUDGET",
            skrull_status::NoChunkSize => c"NO_CHUNK_SIZE",
            skrull_status::PlanInvalid => c"PLAN_INVALID",
            skrull_status::NoSuchGpu => c"NO_SUCH_GPU",
            skrull_status::LayoutOverflow => c"LAYOUT_OVERFLOW",
            skrull_status::InvalidRefitParams => c"INVALID_REFIT_PARAMS",
            skrull_status::RefitStateInvalid => c"REFIT_STATE_INVALID",
            skrull_status::MeasurementMismatch => c"MEASUREMENT_MISMATCH",
            skrull_status::RefitStepTooLarge => c"REFIT_STEP_TOO_LARGE",
            skrull_status::InvalidWindowParams => c"INVALID_WINDOW_PARAMS",
            skrull_status::WindowStateInvalid => c"WINDOW_STATE_INVALID",
            skrull_status::WindowFull => c"WINDOW_FULL",
            skrull_status::WindowEmpty => c"WINDOW_EMPTY",
            skrull_status::WindowBatchTooLarge => c"WINDOW_BATCH_TOO_LARGE",
            skrull_status::InvalidDeferred => c"INVALID_DEFERRED",
            skrull_status::Internal => c"INTERNAL",
            skrull_status::Panic => c"PANIC",
        }
    }

    /// The static, NUL-terminated message for this status.
    pub fn message(self) -> &'static CStr {
        match self {
            skrull_status::Ok => c"ok",
            skrull_status::NullArg => c"a required pointer argument is NULL",
            skrull_status::BadStructSize => {
                c"struct_size is not a size this library accepts (set it to sizeof the struct)"
            }
            skrull_status::InvalidEnum => {
                c"an option integer (policy, victim, flops, shard padding, preset, swiglu, pad_local, lockstep, overlap, gpu) is out of range"
            }
            skrull_status::InvalidArg => {
                c"a pointer is misaligned, a declared buffer range overlaps another or does not fit the address space, or a parameter struct's _reserved field is nonzero"
            }
            skrull_status::WorkspaceTooSmall => {
                c"the workspace is smaller than skrull_workspace_size() bytes"
            }
            skrull_status::OutputTooSmall => {
                c"an output buffer is shorter than skrull_plan_sizes() or skrull_layout_sizes() requires"
            }
            skrull_status::InvalidDp => c"dp is out of range 1..=65536",
            skrull_status::InvalidCp => c"cp is out of range 1..=256",
            skrull_status::InvalidBucket => c"bucket_tokens is out of range 1..=2147483647",
            skrull_status::InvalidModel => c"a model shape field is zero or out of range",
            skrull_status::TooManySequences => c"the batch holds more than 65536 sequences",
            skrull_status::EmptySequence => c"a sequence has zero tokens",
            skrull_status::LengthOutOfRange => c"a sequence is longer than 2147483647 tokens",
            skrull_status::SequenceTooLong => {
                c"a sequence cannot fit even sharded: its padded share ceil(P / cp) > bucket_tokens"
            }
            skrull_status::MicroBatchLimit => {
                c"a DP rank needs more micro-batches than max_micro_batches allows"
            }
            skrull_status::DacpFailed => c"DACP could not fit the micro-batch within the budget",
            skrull_status::InvalidPadMultiple => c"pad_multiple is out of range 0..=65536",
            skrull_status::InvalidCostModel => c"a cost model value is out of range",
            skrull_status::UnsupportedOption => {
                c"the policy does not apply an option that is set (balanced takes no FLOPs formula)"
            }
            skrull_status::MicroBatchCount => {
                c"a DP rank needs more micro-batches than the fixed count micro_batches (details: the smallest count that fits)"
            }
            skrull_status::InvalidChunking => {
                c"chunking is out of range (chunk_keep 1..=64, chunk_state_permille <= 1000) or chunkflow has chunk_size 0"
            }
            skrull_status::ChunkOverBudget => {
                c"a chunked sequence holds more than bucket_tokens on a GPU (use a smaller chunk_size or chunk_keep)"
            }
            skrull_status::NoChunkSize => {
                c"no chunk size fits: the K/V state of the longest sequence is over bucket_tokens on each GPU of its group (give a chunk_size)"
            }
            skrull_status::PlanInvalid => {
                c"the plan buffers do not hold a valid plan of this configuration and batch (wrong counts or corrupted entries)"
            }
            skrull_status::NoSuchGpu => {
                c"no such GPU in the plan (DP rank, micro-batch or CP rank out of range)"
            }
            skrull_status::LayoutOverflow => {
                c"a layout value (cu_seqlens entry, position id or token count) exceeds INT32_MAX"
            }
            skrull_status::InvalidRefitParams => c"a refit parameter is out of range",
            skrull_status::RefitStateInvalid => {
                c"the refit state is not initialised by skrull_refit_init(), corrupted, or too small"
            }
            skrull_status::MeasurementMismatch => {
                c"the measured times do not match the plan (count, micro-batches or placements)"
            }
            skrull_status::RefitStepTooLarge => {
                c"one step holds more measurements than the refit's max_rows_per_step"
            }
            skrull_status::InvalidWindowParams => c"a window parameter is out of range",
            skrull_status::WindowStateInvalid => {
                c"the window state is not initialised by skrull_window_init(), corrupted, or too small"
            }
            skrull_status::WindowFull => {
                c"the window already holds max_delay + 1 batches: take a step first"
            }
            skrull_status::WindowEmpty => c"the window holds no batch: push one first",
            skrull_status::WindowBatchTooLarge => {
                c"the batch holds more sequences than the window's batch_capacity"
            }
            skrull_status::InvalidDeferred => {
                c"a deferred sample does not fit the window (origin, deadline, position or room)"
            }
            skrull_status::Internal => c"internal error (a bug in skrull; please report it)",
            skrull_status::Panic => {
                c"a panic was caught at the C boundary (a bug in skrull; please report it)"
            }
        }
    }
}

impl From<Error> for skrull_status {
    fn from(e: Error) -> skrull_status {
        match e {
            Error::InvalidDp { .. } => skrull_status::InvalidDp,
            Error::InvalidCp { .. } => skrull_status::InvalidCp,
            Error::InvalidBucket { .. } => skrull_status::InvalidBucket,
            Error::InvalidModel { .. } => skrull_status::InvalidModel,
            Error::TooManySequences { .. } => skrull_status::TooManySequences,
            Error::EmptySequence { .. } => skrull_status::EmptySequence,
            Error::LengthOutOfRange { .. } => skrull_status::LengthOutOfRange,
            Error::SequenceTooLong { .. } => skrull_status::SequenceTooLong,
            Error::BufferTooSmall {
                buffer: Buffer::Workspace,
                ..
            } => skrull_status::WorkspaceTooSmall,
            Error::BufferTooSmall { .. } => skrull_status::OutputTooSmall,
            Error::MicroBatchLimit { .. } => skrull_status::MicroBatchLimit,
            Error::DacpFailed { .. } => skrull_status::DacpFailed,
            Error::InvalidPadMultiple { .. } => skrull_status::InvalidPadMultiple,
            Error::InvalidCost { .. } => skrull_status::InvalidCostModel,
            Error::Unsupported { .. } => skrull_status::UnsupportedOption,
            Error::MicroBatchCount { .. } => skrull_status::MicroBatchCount,
            Error::InvalidChunking { .. } => skrull_status::InvalidChunking,
            Error::ChunkOverBudget { .. } => skrull_status::ChunkOverBudget,
            Error::NoChunkSize { .. } => skrull_status::NoChunkSize,
            // `Error` is non-exhaustive: a variant added to the core without a status here
            // still maps to a defined code.
            _ => skrull_status::Internal,
        }
    }
}

impl From<CheckError> for skrull_status {
    fn from(_: CheckError) -> skrull_status {
        skrull_status::PlanInvalid
    }
}

impl From<LayoutError> for skrull_status {
    fn from(e: LayoutError) -> skrull_status {
        match e {
            LayoutError::Config(e) => e.into(),
            LayoutError::PlanMismatch => skrull_status::PlanInvalid,
            LayoutError::NoSuchGpu { .. } => skrull_status::NoSuchGpu,
            LayoutError::BufferTooSmall { .. } => skrull_status::OutputTooSmall,
            LayoutError::Overflow { .. } => skrull_status::LayoutOverflow,
            // `LayoutError` is non-exhaustive: a new variant still maps to a defined code.
            _ => skrull_status::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable() {
        let expect: [(skrull_status, u32); 39] = [
            (skrull_status::Ok, 0),
            (skrull_status::NullArg, 1),
            (skrull_status::BadStructSize, 2),
            (skrull_status::InvalidEnum, 3),
            (skrull_status::InvalidArg, 4),
            (skrull_status::WorkspaceTooSmall, 5),
            (skrull_status::OutputTooSmall, 6),
            (skrull_status::InvalidDp, 10),
            (skrull_status::InvalidCp, 11),
            (skrull_status::InvalidBucket, 12),
            (skrull_status::InvalidModel, 13),
            (skrull_status::TooManySequences, 14),
            (skrull_status::EmptySequence, 15),
            (skrull_status::LengthOutOfRange, 16),
            (skrull_status::SequenceTooLong, 17),
            (skrull_status::MicroBatchLimit, 18),
            (skrull_status::DacpFailed, 19),
            (skrull_status::InvalidPadMultiple, 20),
            (skrull_status::InvalidCostModel, 21),
            (skrull_status::UnsupportedOption, 22),
            (skrull_status::MicroBatchCount, 23),
            (skrull_status::InvalidChunking, 24),
            (skrull_status::ChunkOverBudget, 25),
            (skrull_status::NoChunkSize, 26),
            (skrull_status::PlanInvalid, 30),
            (skrull_status::NoSuchGpu, 31),
            (skrull_status::LayoutOverflow, 32),
            (skrull_status::InvalidRefitParams, 40),
            (skrull_status::RefitStateInvalid, 41),
            (skrull_status::MeasurementMismatch, 42),
            (skrull_status::RefitStepTooLarge, 43),
            (skrull_status::InvalidWindowParams, 50),
            (skrull_status::WindowStateInvalid, 51),
            (skrull_status::WindowFull, 52),
            (skrull_status::WindowEmpty, 53),
            (skrull_status::WindowBatchTooLarge, 54),
            (skrull_status::InvalidDeferred, 55),
            (skrull_status::Internal, 254),
            (skrull_status::Panic, 255),
        ];
        for (s, n) in expect {
            assert_eq!(s as u32, n);
            assert_eq!(skrull_status::from_u32(n), Some(s));
        }
        assert_eq!(skrull_status::from_u32(7), None);
        assert_eq!(skrull_status::from_u32(u32::MAX), None);
    }

    #[test]
    fn every_core_error_has_its_own_status() {
        use skrull_core::error::ShapeField;
        let cases = [
            (Error::InvalidDp { dp: 0, max: 1 }, skrull_status::InvalidDp),
            (Error::InvalidCp { cp: 0, max: 1 }, skrull_status::InvalidCp),
            (
                Error::InvalidBucket { bucket: 0, max: 1 },
                skrull_status::InvalidBucket,
            ),
            (
                Error::InvalidModel {
                    field: ShapeField::Ffn,
                    value: 0,
                },
                skrull_status::InvalidModel,
            ),
            (
                Error::TooManySequences { count: 9, max: 8 },
                skrull_status::TooManySequences,
            ),
            (
                Error::EmptySequence { index: 0 },
                skrull_status::EmptySequence,
            ),
            (
                Error::LengthOutOfRange {
                    index: 0,
                    len: 9,
                    max: 8,
                },
                skrull_status::LengthOutOfRange,
            ),
            (
                Error::SequenceTooLong {
                    index: 0,
                    len: 9,
                    needed_bucket: 9,
                },
                skrull_status::SequenceTooLong,
            ),
            (
                Error::BufferTooSmall {
                    buffer: Buffer::Workspace,
                    needed: 1,
                    got: 0,
                },
                skrull_status::WorkspaceTooSmall,
            ),
            (
                Error::BufferTooSmall {
                    buffer: Buffer::Members,
                    needed: 1,
                    got: 0,
                },
                skrull_status::OutputTooSmall,
            ),
            (
                Error::MicroBatchLimit {
                    dp_rank: 0,
                    limit: 1,
                    needed: 2,
                },
                skrull_status::MicroBatchLimit,
            ),
            (Error::DacpFailed { cp_rank: 0 }, skrull_status::DacpFailed),
            (
                Error::InvalidPadMultiple {
                    pad_multiple: 0,
                    max: 1,
                },
                skrull_status::InvalidPadMultiple,
            ),
            (
                Error::InvalidChunking {
                    field: skrull_core::error::ChunkingField::Size,
                    value: 0,
                    max: 0,
                },
                skrull_status::InvalidChunking,
            ),
            (
                Error::ChunkOverBudget {
                    index: 0,
                    len: 9,
                    peak: 9,
                },
                skrull_status::ChunkOverBudget,
            ),
        ];
        for (e, s) in cases {
            assert_eq!(skrull_status::from(e), s, "{e:?}");
        }
    }

    #[test]
    fn every_layout_error_has_its_own_status() {
        use skrull_core::plan::layout::{Gpu, LayoutBuffer, LayoutSizes};
        let cases = [
            (
                LayoutError::Config(Error::InvalidCp { cp: 0, max: 1 }),
                skrull_status::InvalidCp,
            ),
            (LayoutError::PlanMismatch, skrull_status::PlanInvalid),
            (
                LayoutError::NoSuchGpu {
                    gpu: Gpu::default(),
                    dp: 1,
                    micro_batches: 0,
                    cp: 1,
                },
                skrull_status::NoSuchGpu,
            ),
            (
                LayoutError::BufferTooSmall {
                    buffer: LayoutBuffer::Spans,
                    needed: LayoutSizes::default(),
                    got: 0,
                },
                skrull_status::OutputTooSmall,
            ),
            (
                LayoutError::Overflow {
                    buffer: LayoutBuffer::Positions,
                    value: 1 << 31,
                },
                skrull_status::LayoutOverflow,
            ),
        ];
        for (e, s) in cases {
            assert_eq!(skrull_status::from(e), s, "{e:?}");
        }
        assert_eq!(
            skrull_status::from(CheckError::Shape),
            skrull_status::PlanInvalid
        );
    }

    #[test]
    fn every_status_has_a_distinct_message() {
        let all = skrull_status::all();
        for (i, a) in all.iter().enumerate() {
            assert!(!a.message().is_empty());
            for b in &all[i + 1..] {
                assert_ne!(a, b);
                assert_ne!(a.message(), b.message());
            }
        }
    }

    #[test]
    fn every_status_has_a_distinct_name_in_the_header_spelling() {
        let all = skrull_status::all();
        for (i, a) in all.iter().enumerate() {
            let name = a.name().to_str().unwrap();
            assert!(name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'));
            for b in &all[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
        assert_eq!(skrull_status::NoChunkSize.name(), c"NO_CHUNK_SIZE");
    }
}
