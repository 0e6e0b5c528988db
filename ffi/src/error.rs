//! `skrull_error_info`: the details of a failed call (which sequence, rank, value or limit a
//! status is about), and the internal failure type that carries them to the boundary.

use core::mem::size_of;

use skrull_core::Error;
use skrull_core::error::ShapeField;
use skrull_core::plan::CheckError;
use skrull_core::plan::layout::LayoutError;

use crate::boundary::Span;
use crate::status::skrull_status;

/// Details of a failed call (frozen layout, 32 bytes).
///
/// A caller that wants them points `skrull_plan_buffers.error` at one of these; the call
/// writes it only when it fails (never on success) and leaves every other output untouched.
/// It is written only where it overlaps no other argument (each buffer at its declared
/// capacity, the parameter structs, the configuration, the lengths and the workspace): a
/// details struct that overlaps one is never written, and the call returns the first problem
/// in its documented order (`SKRULL_STATUS_INVALID_ARG` when there is no earlier one).
/// The fields a status fills are listed in `docs/c_api.md` ("Error details"); the others are
/// `index = -1`, `field = value = limit = 0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct skrull_error_info {
    /// The status the call returned.
    pub status: u32,
    /// For `SKRULL_STATUS_INVALID_MODEL`: the shape field, 1 `hidden`, 2 `kv_hidden`, 3 `ffn`,
    /// 4 `layers`, 5 `vocab`; for `SKRULL_STATUS_INVALID_COST_MODEL`: the field's position in
    /// `skrull_cost_model` after `struct_size` (1 `attention_tile`, 2 `peak_flops`, ...);
    /// for `SKRULL_STATUS_UNSUPPORTED_OPTION`: 1 `flops`; for `SKRULL_STATUS_INVALID_CHUNKING`:
    /// 1 `chunk_size`, 2 `chunk_keep`, 3 `chunk_state_permille`; for `SKRULL_STATUS_NO_SUCH_GPU`: the
    /// coordinate at fault, 1 `dp_rank >= dp`, 2 `micro_batch >= micro_batches_per_dp[dp_rank]`,
    /// 3 `cp_rank >= cp` (the first of these that holds); otherwise 0.
    pub field: u32,
    /// The sequence (input index), DP rank or CP rank the status is about; -1 when none.
    pub index: i64,
    /// The offending value: the out-of-range number, the sequence's length, the batch size,
    /// the micro-batches needed, the micro-batch asked for, or the overflowing value.
    pub value: u64,
    /// The bound it broke: the largest accepted value, the BucketSize the sequence needs, the
    /// configured micro-batch limit, or the micro-batches the DP rank runs.
    pub limit: u64,
}

const _: () = assert!(size_of::<skrull_error_info>() == 32);

impl skrull_error_info {
    /// Details that name nothing beyond the status.
    pub fn of_status(status: skrull_status) -> skrull_error_info {
        skrull_error_info {
            status: status as u32,
            field: 0,
            index: -1,
            value: 0,
            limit: 0,
        }
    }

    /// The details of a core error.
    pub fn of_core(e: &Error) -> skrull_error_info {
        use skrull_core::config::MAX_SEQS;
        let base = Self::of_status(skrull_status::from(*e));
        let with = |index: i64, value: u64, limit: u64| skrull_error_info {
            index,
            value,
            limit,
            ..base
        };
        match *e {
            Error::InvalidDp { dp, max } => with(-1, dp.into(), max.into()),
            Error::InvalidCp { cp, max } => with(-1, cp.into(), max.into()),
            Error::InvalidBucket { bucket, max } => with(-1, bucket.into(), max.into()),
            Error::InvalidPadMultiple { pad_multiple, max } => {
                with(-1, pad_multiple.into(), max.into())
            }
            Error::InvalidModel { field, value } => skrull_error_info {
                field: match field {
                    ShapeField::Hidden => 1,
                    ShapeField::KvHidden => 2,
                    ShapeField::Ffn => 3,
                    ShapeField::Layers => 4,
                    ShapeField::Vocab => 5,
                    _ => 0,
                },
                ..with(-1, value.into(), 0)
            },
            Error::TooManySequences { count, max } => with(-1, count as u64, max as u64),
            Error::EmptySequence { index } => with(index as i64, 0, 0),
            Error::LengthOutOfRange { index, len, max } => {
                with(index as i64, len.into(), max.into())
            }
            Error::SequenceTooLong {
                index,
                len,
                needed_bucket,
            } => with(index as i64, len.into(), needed_bucket.into()),
            Error::BufferTooSmall { needed, got, .. } => with(-1, got as u64, needed as u64),
            Error::MicroBatchLimit {
                dp_rank,
                limit,
                needed,
            } => with(dp_rank.into(), needed.into(), limit.into()),
            Error::MicroBatchCount {
                dp_rank,
                count,
                needed,
            } => with(dp_rank.into(), needed.into(), count.into()),
            Error::DacpFailed { cp_rank } => with(cp_rank.into(), 0, 0),
            Error::InvalidCost { field } => skrull_error_info {
                field: field.number(),
                ..with(-1, 0, 0)
            },
            Error::Unsupported { .. } => skrull_error_info {
                field: 1,
                ..with(-1, 0, 0)
            },
            // `field` names the setting (1 chunk_size, 2 chunk_keep, 3
            // chunk_state_permille), with its value and bound.
            Error::InvalidChunking { field, value, max } => skrull_error_info {
                field: field.number(),
                value: value.into(),
                limit: max.into(),
                ..base
            },
            Error::ChunkOverBudget { index, len, peak } => with(index as i64, len.into(), peak),
            Error::NoChunkSize { longest, peak, .. } => with(-1, longest.into(), peak),
            _ => with(-1, 0, MAX_SEQS as u64),
        }
    }

    /// The details of a layout error.
    pub fn of_layout(e: &LayoutError) -> skrull_error_info {
        let base = Self::of_status(skrull_status::from(*e));
        match *e {
            LayoutError::Config(c) => Self::of_core(&c),
            // `field` names the coordinate at fault, first in the order DP rank, micro-batch,
            // CP rank; `index`, `value` and `limit` are the same three numbers whichever it is.
            LayoutError::NoSuchGpu {
                gpu,
                dp,
                micro_batches,
                cp,
            } => skrull_error_info {
                field: if gpu.dp_rank >= dp {
                    1
                } else if gpu.micro_batch >= micro_batches {
                    2
                } else if gpu.cp_rank >= cp {
                    3
                } else {
                    0
                },
                index: gpu.dp_rank.into(),
                value: gpu.micro_batch.into(),
                limit: micro_batches.into(),
                ..base
            },
            LayoutError::Overflow { value, .. } => skrull_error_info {
                value,
                limit: i32::MAX as u64,
                ..base
            },
            _ => base,
        }
    }
}

/// Why a call failed: its status, and the details it reports through the caller's
/// `skrull_error_info` (unless `report` is off because that struct overlaps another argument).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failure {
    pub(crate) status: skrull_status,
    pub(crate) info: skrull_error_info,
    pub(crate) report: bool,
}

impl Failure {
    /// A failure whose details must not be written (the details struct itself is bad).
    pub(crate) fn silent(status: skrull_status) -> Failure {
        Failure {
            report: false,
            ..Failure::from(status)
        }
    }
}

impl Failure {
    /// `TooManySequences` for a batch of `n`, with the count and the limit in its details.
    pub(crate) fn too_many_sequences(n: usize) -> Failure {
        Error::TooManySequences {
            count: n,
            max: skrull_core::config::MAX_SEQS,
        }
        .into()
    }
}

impl From<skrull_status> for Failure {
    fn from(status: skrull_status) -> Failure {
        Failure {
            status,
            info: skrull_error_info::of_status(status),
            report: true,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            status: e.into(),
            info: skrull_error_info::of_core(&e),
            report: true,
        }
    }
}

impl From<LayoutError> for Failure {
    fn from(e: LayoutError) -> Failure {
        Failure {
            status: e.into(),
            info: skrull_error_info::of_layout(&e),
            report: true,
        }
    }
}

impl From<CheckError> for Failure {
    fn from(e: CheckError) -> Failure {
        skrull_status::from(e).into()
    }
}

/// Checks the caller's optional details struct: `None` when NULL, its byte span otherwise.
///
/// # Errors
/// A silent `InvalidArg` when it is misaligned or wraps the address space.
pub(crate) fn info_span(ptr: *mut skrull_error_info) -> Result<Option<Span>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    if !ptr.is_aligned() {
        return Err(Failure::silent(skrull_status::InvalidArg));
    }
    Span::of(ptr.cast_const(), 1)
        .map(Some)
        .ok_or(Failure::silent(skrull_status::InvalidArg))
}

/// Turns a body's result into the status an export returns, writing the failure's details to
/// `info` when the caller asked for them and they may be written.
///
/// # Safety
/// Unless NULL or misaligned, `info` must be valid for writing one `skrull_error_info`.
pub(crate) unsafe fn finish(
    result: Result<(), Failure>,
    info: *mut skrull_error_info,
) -> skrull_status {
    match result {
        Ok(()) => skrull_status::Ok,
        Err(f) => {
            if f.report && !info.is_null() && info.is_aligned() {
                // SAFETY: non-null, aligned (checked), writable (function contract).
                unsafe { info.write(f.info) };
            }
            f.status
        }
    }
}
