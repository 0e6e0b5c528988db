//! The online refit of the cost model (`docs/cost_model.md`, "Refitting online"): a window of
//! measured per-GPU micro-batch times in caller storage (`skrull_refit_size()`,
//! `skrull_refit_init()`), one step added per `skrull_refit_observe()`, and the refitted
//! `skrull_cost_model` from `skrull_refit_solve()`, bit-identical on every rank that saw the
//! same times.

use core::ffi::c_void;
use core::mem::{align_of, size_of};

use skrull_core::config::MAX_SEQS;
use skrull_core::model::refit::{
    COEFFICIENTS, Coef, MAX_WINDOW, RefitError, RefitParams, RefitReport, RefitState, Row,
};
use skrull_core::plan::CHUNKED;

use crate::boundary::{Span, any_overlap, declared, guard, lengths};
use crate::config::{read_config, skrull_config};
use crate::cost::{SKRULL_COST_MODEL_SIZE_V1, skrull_cost_model};
use crate::error::{Failure, finish, skrull_error_info};
use crate::layout::staged_placement;
use crate::plan::{skrull_cp_group, skrull_placement};
use crate::sized::read_sized;
use crate::spans::{config_spans, details_target, struct_span};
use crate::status::skrull_status;

/// The `skrull_refit_params` fields after `struct_size`, in order: `skrull_error_info.field`
/// of `SKRULL_STATUS_INVALID_REFIT_PARAMS` is a 1-based position in this list.
pub(crate) const REFIT_PARAM_NAMES: [&str; 9] = [
    "window_steps",
    "max_rows_per_step",
    "flags",
    "forgetting",
    "ridge",
    "outlier",
    "trust",
    "max_error",
    "holdout",
];

/// Coefficients of `skrull_refit_report.coefficients` (version 1); the ninth,
/// `SKRULL_REFIT_SHARDED_SEQUENCE`, is the appended `coefficient_sharded_sequence`, the
/// tenth, `SKRULL_REFIT_LAST_MICRO_BATCH`, the appended `coefficient_last_micro_batch`, the
/// eleventh, `SKRULL_REFIT_LOCAL_SEQUENCE`, the appended `coefficient_local_sequence`.
pub const SKRULL_REFIT_COEFFICIENTS: usize = 8;
/// Coefficient: fixed cost per micro-batch (scale of the prior's).
pub const SKRULL_REFIT_FIXED: u32 = 0;
/// Coefficient: GEMM time scale.
pub const SKRULL_REFIT_GEMM: u32 = 1;
/// Coefficient: attention time scale.
pub const SKRULL_REFIT_ATTENTION: u32 = 2;
/// Coefficient: ring step latency inside a node (scale).
pub const SKRULL_REFIT_INTRA_LATENCY: u32 = 3;
/// Coefficient: ring time per byte inside a node (scale).
pub const SKRULL_REFIT_INTRA_BANDWIDTH: u32 = 4;
/// Coefficient: ring step latency across nodes (scale).
pub const SKRULL_REFIT_INTER_LATENCY: u32 = 5;
/// Coefficient: ring time per byte across nodes (scale).
pub const SKRULL_REFIT_INTER_BANDWIDTH: u32 = 6;
/// Coefficient: the overlap fraction (0 local attention, 1 all attention).
pub const SKRULL_REFIT_OVERLAP: u32 = 7;
/// Coefficient: fixed cost per sharded sequence (scale of the prior's; of 1 ms when the
/// prior's is 0); in `skrull_refit_report.coefficient_sharded_sequence`, and bit 8 of the
/// report's bit sets.
pub const SKRULL_REFIT_SHARDED_SEQUENCE: u32 = 8;
/// Coefficient: the per-step cost paid inside each DP rank's last micro-batch (DDP's gradient
/// all-reduce; fitted under `SKRULL_SYNC_SHARDED` only, 0 otherwise), in milliseconds; the
/// refitted model's `iteration_fixed_s` includes it. In
/// `skrull_refit_report.coefficient_last_micro_batch`, and bit 9 of the report's bit sets.
pub const SKRULL_REFIT_LAST_MICRO_BATCH: u32 = 9;
/// Coefficient: the cost per sequence held whole on a GPU (calling the attention kernel once
/// per sequence), scale of the prior's `local_sequence_s`; the fit leaves it at 0 when the
/// prior's is 0. In `skrull_refit_report.coefficient_local_sequence`, and bit 10 of the
/// report's bit sets.
pub const SKRULL_REFIT_LOCAL_SEQUENCE: u32 = 10;
/// Verdict: the fit was adopted.
pub const SKRULL_REFIT_ADOPTED: u32 = 0;
/// Verdict: no valid measurement in the window; the model in use is returned.
pub const SKRULL_REFIT_NO_DATA: u32 = 1;
/// Verdict: the fit does not explain the measurements better than the model in use (on the
/// window, without explaining the held-out ones worse); the model in use is returned.
pub const SKRULL_REFIT_NOT_BETTER: u32 = 2;
/// Verdict: the fit explains them no better than the model in use times one uniform factor
/// (`scale`): a scale, not a model; the model in use is returned.
pub const SKRULL_REFIT_SCALE_ONLY: u32 = 3;
/// Verdict: even the best fit's error stays above `max_error`: the model cannot describe these
/// times; the model in use is returned.
pub const SKRULL_REFIT_HIGH_ERROR: u32 = 4;
/// Verdict: no held-out measurement yet (or nothing else); the model in use is returned.
pub const SKRULL_REFIT_UNVALIDATED: u32 = 5;
/// The most steps a window keeps.
pub const SKRULL_REFIT_MAX_WINDOW: u32 = 64;
/// `skrull_refit_params.flags`: never change the overlap rule.
pub const SKRULL_REFIT_KEEP_OVERLAP: u32 = 1;

const _: () = assert!(SKRULL_REFIT_COEFFICIENTS + 3 == COEFFICIENTS);
const _: () = assert!(SKRULL_REFIT_SHARDED_SEQUENCE as usize == Coef::ShardedSequence as usize);
const _: () = assert!(SKRULL_REFIT_LAST_MICRO_BATCH as usize == Coef::LastMicroBatch as usize);
const _: () = assert!(SKRULL_REFIT_LOCAL_SEQUENCE as usize == Coef::LocalSequence as usize);
const _: () = assert!(SKRULL_REFIT_MAX_WINDOW == MAX_WINDOW);

/// How the refit weighs and bounds its data (`struct_size` first; version 1 is 40 bytes,
/// version 2, with `trust`, `max_error` and `holdout`, 64). `skrull_refit_params_default()`
/// fills the defaults; a version-1 caller gets version 2's defaults for the fields it lacks.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct skrull_refit_params {
    /// `sizeof(skrull_refit_params)`.
    pub struct_size: u32,
    /// Steps the window keeps, `1..=SKRULL_REFIT_MAX_WINDOW` (default 32).
    pub window_steps: u32,
    /// Measurements one step may hold, `n_micro_batches * dp * cp`, `1..=2^24` (default 4096).
    pub max_rows_per_step: u32,
    /// 0 or `SKRULL_REFIT_KEEP_OVERLAP`.
    pub flags: u32,
    /// Weight of a step `k` steps old: `forgetting^k`, in `(0, 1]` (default 0.95).
    pub forgetting: f64,
    /// Pull toward the anchor (the last solve's coefficients), `>= 0` (default 1e-3).
    pub ridge: f64,
    /// A time off the fit by more than this fraction is dropped as a straggler, `> 0`
    /// (default 0.5).
    pub outlier: f64,
    /// The trust region: per solve each coefficient moves at most this factor either way from
    /// the model in use (after the window's uniform factor), `>= 1`, infinite for none
    /// (default 2; version 2).
    pub trust: f64,
    /// A fit whose error on the window stays above this is not adopted, `> 0` (default 0.25;
    /// version 2).
    pub max_error: f64,
    /// One micro-batch in `holdout` is held out of the fit and judges it, `0` (none: judged
    /// in-sample) or `2..=1024` (default 3; version 2).
    pub holdout: u32,
    /// 0.
    pub _reserved: u32,
}

/// `sizeof(skrull_refit_params)` of version 1.
pub const SKRULL_REFIT_PARAMS_SIZE_V1: u32 = 40;
/// `sizeof(skrull_refit_params)` of version 2.
pub const SKRULL_REFIT_PARAMS_SIZE_V2: u32 = 64;
const _: () = assert!(size_of::<skrull_refit_params>() == SKRULL_REFIT_PARAMS_SIZE_V2 as usize);

/// What `skrull_refit_solve()` found (112 bytes in version 1; version 2, 184 bytes, appends
/// the adoption rule's fields, version 3, 200 bytes, `coefficient_last_micro_batch` and
/// `coefficient_local_sequence`: a caller's smaller `out_report_size` gets the first bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct skrull_refit_report {
    /// Bytes written.
    pub struct_size: u32,
    /// 1: the returned model is the prior (nothing adopted yet, or no data).
    pub kept_prior: u32,
    /// Steps in the window.
    pub steps: u32,
    /// Valid measurements in the window.
    pub rows: u32,
    /// Of them, dropped as outliers (stragglers) by the returned fit.
    pub dropped: u32,
    /// Measurements skipped in the window (NaN, infinite, zero or negative, or a GPU's
    /// micro-batch holding a chunked sequence, which the fit does not model yet).
    pub skipped: u32,
    /// Bit `i` set: coefficient `i` of the returned model is more than 1 % from the prior's.
    pub moved: u32,
    /// 0.
    pub _reserved: u32,
    /// Weighted rms relative error of the prior on the window (residuals clipped at
    /// `outlier`).
    pub error_prior: f64,
    /// The same of the returned model.
    pub error_fit: f64,
    /// The returned model relative to the prior (`SKRULL_REFIT_*` indices).
    pub coefficients: [f64; SKRULL_REFIT_COEFFICIENTS],
    /// 1: the fit was adopted (the returned model is new). Version 2 from here.
    pub adopted: u32,
    /// Why it was or was not: `SKRULL_REFIT_ADOPTED` .. `SKRULL_REFIT_UNVALIDATED`.
    pub verdict: u32,
    /// Bit `i` set: the trust region held coefficient `i` of the fit back.
    pub limited: u32,
    /// Bit `i` set: communication coefficient `i` was raised to the most the window allows
    /// (its cost hidden on every measurement).
    pub raised: u32,
    /// Held-out measurements in the window.
    pub heldout_rows: u32,
    /// Steps of the window with a step time (`skrull_refit_observe_step_time()`).
    pub step_times: u32,
    /// The window's median of measured over predicted time under the model in use before this
    /// solve: the uniform factor it is off by.
    pub scale: f64,
    /// Error of the model in use on the held-out measurements.
    pub error_heldout_in_use: f64,
    /// Error of the fit on them.
    pub error_heldout_fit: f64,
    /// Error of the fit without the trust region on the measurements it was fitted to
    /// (compared with `max_error`).
    pub error_unlimited: f64,
    /// The per-step cost measured from the step times, seconds (the returned model's
    /// `iteration_fixed_s`).
    pub iteration_fixed_s: f64,
    /// The returned model's `SKRULL_REFIT_SHARDED_SEQUENCE` coefficient.
    pub coefficient_sharded_sequence: f64,
    /// The returned model's `SKRULL_REFIT_LAST_MICRO_BATCH` coefficient, milliseconds per step
    /// (included in `iteration_fixed_s`). Version 3.
    pub coefficient_last_micro_batch: f64,
    /// The returned model's `SKRULL_REFIT_LOCAL_SEQUENCE` coefficient. Version 3.
    pub coefficient_local_sequence: f64,
}

/// `sizeof(skrull_refit_report)` of version 1.
pub const SKRULL_REFIT_REPORT_SIZE_V1: u32 = 112;
/// `sizeof(skrull_refit_report)` of version 2.
pub const SKRULL_REFIT_REPORT_SIZE_V2: u32 = 184;
/// `sizeof(skrull_refit_report)` of version 3.
pub const SKRULL_REFIT_REPORT_SIZE_V3: u32 = 200;
const _: () = assert!(size_of::<skrull_refit_report>() == SKRULL_REFIT_REPORT_SIZE_V3 as usize);

const MAGIC: u64 = 0x736b_7275_6c6c_7266; // "skrullrf"

/// The head of the caller's state storage; the rows follow it.
#[repr(C)]
struct Header {
    magic: u64,
    bytes: u64,
    state: RefitState,
}

/// Offset of the rows in the state storage.
const ROWS_AT: usize = size_of::<Header>().next_multiple_of(align_of::<Row>());
/// Alignment the state storage needs.
const STATE_ALIGN: usize = if align_of::<Header>() > align_of::<Row>() {
    align_of::<Header>()
} else {
    align_of::<Row>()
};

impl skrull_refit_params {
    const DEFAULT: skrull_refit_params = skrull_refit_params {
        struct_size: SKRULL_REFIT_PARAMS_SIZE_V2,
        window_steps: 32,
        max_rows_per_step: 4096,
        flags: 0,
        forgetting: 0.95,
        ridge: 1e-3,
        outlier: 0.5,
        trust: 2.0,
        max_error: 0.25,
        holdout: 3,
        _reserved: 0,
    };

    fn to_core(self) -> Result<RefitParams, Failure> {
        if self.flags & !SKRULL_REFIT_KEEP_OVERLAP != 0 {
            return Err(params_failure(3));
        }
        if self._reserved != 0 {
            return Err(params_failure(10));
        }
        let p = RefitParams {
            window_steps: self.window_steps,
            max_rows_per_step: self.max_rows_per_step,
            keep_overlap: self.flags & SKRULL_REFIT_KEEP_OVERLAP != 0,
            forgetting: self.forgetting,
            ridge: self.ridge,
            outlier: self.outlier,
            trust: self.trust,
            holdout: self.holdout,
            max_error: self.max_error,
        };
        p.validate().map_err(refit_failure)?;
        Ok(p)
    }
}

fn params_failure(field: u32) -> Failure {
    let mut f = Failure::from(skrull_status::InvalidRefitParams);
    f.info.field = field;
    f
}

/// The status and details of a core refit error.
fn refit_failure(e: RefitError) -> Failure {
    let with = |status, value: usize, limit: usize, index: i64| {
        let mut f = Failure::from(status);
        f.info.value = value as u64;
        f.info.limit = limit as u64;
        f.info.index = index;
        f
    };
    match e {
        RefitError::Params { field } => {
            let at = REFIT_PARAM_NAMES
                .iter()
                .position(|n| *n == field)
                .map_or(0, |i| i + 1);
            params_failure(at as u32)
        }
        RefitError::Config(e) => e.into(),
        RefitError::Cost(e) => {
            let mut f = Failure::from(skrull_status::InvalidCostModel);
            f.info.field = e.field.number();
            f
        }
        RefitError::Storage { .. } => skrull_status::RefitStateInvalid.into(),
        RefitError::Length { index } => with(skrull_status::LengthOutOfRange, 0, 0, index as i64),
        RefitError::Plan { seq } => with(skrull_status::PlanInvalid, 0, 0, seq as i64),
        RefitError::Mismatch { got, expected } => {
            with(skrull_status::MeasurementMismatch, got, expected, -1)
        }
        RefitError::StepTooLarge { needed, limit } => {
            with(skrull_status::RefitStepTooLarge, needed, limit, -1)
        }
        _ => skrull_status::Internal.into(),
    }
}

/// Bytes of state storage `params` need (`None` when they overflow).
fn state_bytes(p: &RefitParams) -> Option<usize> {
    p.rows_needed()
        .checked_mul(size_of::<Row>())?
        .checked_add(ROWS_AT)
        .filter(|&b| b <= isize::MAX as usize)
}

/// Writes the defaults into `*out` (`struct_size` = `min(out_size, sizeof)`).
///
/// Returns `SKRULL_STATUS_NULL_ARG` for NULL, `SKRULL_STATUS_INVALID_ARG` when misaligned,
/// `SKRULL_STATUS_BAD_STRUCT_SIZE` for an `out_size` below version 1; nothing is written then.
///
/// # Safety
/// Unless NULL, `out` is valid for writing `out_size` bytes. Safe from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_refit_params_default(
    out: *mut skrull_refit_params,
    out_size: usize,
) -> skrull_status {
    guard(|| {
        if out.is_null() {
            return skrull_status::NullArg;
        }
        if !out.is_aligned() {
            return skrull_status::InvalidArg;
        }
        if out_size < SKRULL_REFIT_PARAMS_SIZE_V1 as usize {
            return skrull_status::BadStructSize;
        }
        let n = out_size.min(size_of::<skrull_refit_params>());
        let mut p = skrull_refit_params::DEFAULT;
        p.struct_size = n as u32;
        // SAFETY: `n` bytes readable at `p`, writable at `out` (non-null, aligned: checked;
        // `out_size >= n`: caller contract); distinct objects.
        unsafe { core::ptr::copy_nonoverlapping((&raw const p).cast::<u8>(), out.cast(), n) };
        skrull_status::Ok
    })
}

/// Bytes of state storage the refit with `params` needs (its window of
/// `window_steps * max_rows_per_step` measurements and a header); 0 when `params` is NULL,
/// misaligned, of a bad size or out of range. The storage must be 8-byte aligned.
///
/// # Safety
/// Unless NULL, `params` points to a `skrull_refit_params` whose `struct_size` bytes are
/// readable. Safe from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_refit_size(params: *const skrull_refit_params) -> usize {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = unsafe { read_params(params) };
        p.ok().and_then(|p| state_bytes(&p)).unwrap_or(0)
    })
}

/// Reads and checks the caller's parameters.
///
/// # Safety
/// As the `params` argument of [`skrull_refit_size`].
unsafe fn read_params(params: *const skrull_refit_params) -> Result<RefitParams, Failure> {
    let sizes = [
        SKRULL_REFIT_PARAMS_SIZE_V1 as usize,
        SKRULL_REFIT_PARAMS_SIZE_V2 as usize,
    ];
    // SAFETY: forwarded caller contract.
    let p = unsafe { read_sized(params, &sizes, skrull_refit_params::DEFAULT) }?;
    p.to_core()
}

/// Initialises a refit in caller storage: `state` (`state_size` bytes, 8-byte aligned, at
/// least `skrull_refit_size(params)`) gets an empty window for `config` (its DP and CP sizes,
/// model shape and padding rules) and the PRIOR cost model: `config->cost_model`, or the H100
/// preset for the shape when that is NULL. The state is plain memory that the caller owns and
/// frees; the library never allocates. It is valid only in this process (send the measured
/// times to other ranks, not the state).
///
/// Statuses, in order: `config`'s (as `skrull_schedule()`), then `params`' (`NULL_ARG`,
/// `INVALID_ARG`, `BAD_STRUCT_SIZE`, `INVALID_REFIT_PARAMS` with the field in the details),
/// then `state`: `NULL_ARG`, `INVALID_ARG` (misaligned, or overlapping `params`, `config` or
/// the details), `WORKSPACE_TOO_SMALL` (`state_size` below what `params` need). The details
/// go to `error` unless NULL, misaligned or overlapping an argument. Nothing is written on
/// error.
///
/// # Safety
/// - `params` and `config`, unless NULL, point to their structs with `struct_size` readable
///   bytes (and `config->cost_model`, unless NULL, to a readable `skrull_cost_model`).
/// - `state`, unless NULL, points to `state_size` writable bytes no other thread touches
///   during the call.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_refit_init(
    params: *const skrull_refit_params,
    config: *const skrull_config,
    state: *mut c_void,
    state_size: usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let [cfg, cost] = unsafe { config_spans(config) };
        let others = [
            cfg,
            cost,
            // SAFETY: forwarded caller contract.
            unsafe { struct_span(params) },
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
        ];
        // SAFETY: forwarded caller contract.
        let r = unsafe { init(params, config, state, state_size, &others) };
        // SAFETY: `error` is NULL or checked by `details_target`; caller contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

/// The body of [`skrull_refit_init`].
///
/// # Safety
/// As [`skrull_refit_init`].
unsafe fn init(
    params: *const skrull_refit_params,
    config: *const skrull_config,
    state: *mut c_void,
    state_size: usize,
    others: &[Span],
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let cfg = unsafe { read_config(config) }?;
    // SAFETY: forwarded caller contract.
    let p = unsafe { read_params(params) }?;
    if state.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    let span = declared(state.cast_const().cast::<u8>(), state_size)?;
    if !(state as usize).is_multiple_of(STATE_ALIGN) || others[..3].iter().any(|o| o.overlaps(span))
    {
        return Err(skrull_status::InvalidArg.into());
    }
    let bytes = state_bytes(&p).ok_or(skrull_status::WorkspaceTooSmall)?;
    if state_size < bytes {
        return Err(skrull_status::WorkspaceTooSmall.into());
    }
    let s = RefitState::new(p, &cfg).map_err(refit_failure)?;
    let header = Header {
        magic: MAGIC,
        bytes: bytes as u64,
        state: s,
    };
    // SAFETY: `state` is non-null, aligned for `Header` and `Row` (checked), and holds
    // `bytes >= ROWS_AT + rows * size_of::<Row>()` writable bytes (checked, caller contract);
    // the rows are plain data (every bit pattern of zeros is a valid `Row`).
    unsafe {
        state.cast::<Header>().write(header);
        let rows = state.cast::<u8>().add(ROWS_AT).cast::<Row>();
        for i in 0..p.rows_needed() {
            rows.add(i).write(Row::default());
        }
    }
    Ok(())
}

/// The header and rows of an initialised state.
///
/// # Safety
/// Unless NULL, `state` points to `state_size` bytes that `skrull_refit_init()` initialised
/// and only the refit calls changed since, which nothing else touches for `'a`.
unsafe fn open<'a>(
    state: *mut c_void,
    state_size: usize,
) -> Result<(&'a mut RefitState, &'a mut [Row]), Failure> {
    if state.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !(state as usize).is_multiple_of(STATE_ALIGN) {
        return Err(skrull_status::InvalidArg.into());
    }
    if state_size < ROWS_AT {
        return Err(skrull_status::RefitStateInvalid.into());
    }
    let head = state.cast::<u64>();
    // SAFETY: non-null, aligned, at least `ROWS_AT >= 16` readable bytes (checked, contract).
    let (magic, bytes) = unsafe { (head.read(), head.add(1).read()) };
    if magic != MAGIC || bytes > state_size as u64 {
        return Err(skrull_status::RefitStateInvalid.into());
    }
    // SAFETY: the magic says `skrull_refit_init()` wrote a `Header` here (caller contract:
    // nothing else changed it); aligned (checked); exclusive for `'a` (contract).
    let header = unsafe { &mut *state.cast::<Header>() };
    let rows = header.state.params().rows_needed();
    if state_bytes(header.state.params()) != Some(bytes as usize) {
        return Err(skrull_status::RefitStateInvalid.into());
    }
    // SAFETY: `bytes` (checked against `state_size`) cover `ROWS_AT + rows` rows, initialised
    // by `skrull_refit_init()`; aligned; exclusive for `'a` (contract); disjoint from the
    // header.
    let rows = unsafe {
        core::slice::from_raw_parts_mut(state.cast::<u8>().add(ROWS_AT).cast::<Row>(), rows)
    };
    Ok((&mut header.state, rows))
}

/// Adds one step to the refit's window: the plan `skrull_schedule()` made for `lengths` (its
/// `placements`, and its `cp_groups`, or NULL when the configuration has no sub-groups: every
/// sharded sequence then spans the whole CP group) and the measured `times`: `double`
/// SECONDS of forward + backward of each micro-batch on each GPU, laid out
/// `[micro-batch][dp][cp]` (`times[(m * dp + d) * cp + r]`,
/// `n_times = n_micro_batches * dp * cp`, `n_micro_batches` at least the most micro-batches
/// a DP rank runs in the plan).
/// Entries of a (micro-batch, DP rank) that holds no sequence are ignored; an entry that is
/// NaN, infinite, zero or negative is skipped and counted (`skrull_refit_report.skipped`):
/// pass NaN for a GPU that did not report. Once the window holds `window_steps` steps the
/// oldest is evicted. A GPU's time is its own busy time in the micro-batch.
///
/// Statuses, in order: `state` (`NULL_ARG`, `INVALID_ARG` misaligned, `REFIT_STATE_INVALID`),
/// `TOO_MANY_SEQUENCES`, `lengths`, `placements` (`NULL_ARG` with `n > 0`, `INVALID_ARG`),
/// `cp_groups` (`INVALID_ARG` when misaligned), `times` (`NULL_ARG`, `INVALID_ARG`), any
/// overlap of the state with an input (`INVALID_ARG`), then `MEASUREMENT_MISMATCH` (counts),
/// `REFIT_STEP_TOO_LARGE`, and per sequence in input order `EMPTY_SEQUENCE` /
/// `LENGTH_OUT_OF_RANGE`, `PLAN_INVALID` (a placement or group out of range, or a chunked
/// placement `SKRULL_CHUNKED` without its group in `cp_groups`; details: the sequence) or
/// `MEASUREMENT_MISMATCH` (its micro-batch beyond `n_micro_batches`). A GPU's micro-batch
/// holding a chunked sequence composes the step's time but is not fitted (the refit does
/// not model chunked passes yet; it counts in the report's `skipped`). The state changes
/// only on `SKRULL_STATUS_OK`.
///
/// # Safety
/// - `state`, unless NULL, points to `state_size` bytes initialised by `skrull_refit_init()`
///   and changed since only by the refit calls; no other thread touches it during the call.
/// - `lengths` and `placements`, unless NULL, point to `n` readable elements; `cp_groups`,
///   unless NULL, too; `times`, unless NULL, to `n_times` readable `double`.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn skrull_refit_observe(
    state: *mut c_void,
    state_size: usize,
    lengths: *const u32,
    n: usize,
    placements: *const skrull_placement,
    cp_groups: *const skrull_cp_group,
    n_micro_batches: u32,
    times: *const f64,
    n_times: usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
            Span::clamped(lengths, n),
            Span::clamped(placements, n),
            Span::clamped(cp_groups, n),
            Span::clamped(times, n_times),
        ];
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            observe(
                state,
                state_size,
                lengths,
                n,
                placements,
                cp_groups,
                n_micro_batches,
                times,
                n_times,
            )
        };
        // SAFETY: `error` is NULL or checked by `details_target`; caller contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

/// The body of [`skrull_refit_observe`].
///
/// # Safety
/// As [`skrull_refit_observe`].
#[allow(clippy::too_many_arguments)]
unsafe fn observe(
    state: *mut c_void,
    state_size: usize,
    lengths_ptr: *const u32,
    n: usize,
    placements: *const skrull_placement,
    cp_groups: *const skrull_cp_group,
    n_micro_batches: u32,
    times: *const f64,
    n_times: usize,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let (s, rows) = unsafe { open(state, state_size) }?;
    if n > MAX_SEQS {
        return Err(Failure::too_many_sequences(n));
    }
    // SAFETY: forwarded caller contract.
    let lengths = unsafe { lengths(lengths_ptr, n) }?;
    let spans = [
        Span::of(state.cast_const().cast::<u8>(), state_size).ok_or(skrull_status::InvalidArg)?,
        Span::of(lengths.as_ptr(), n).ok_or(skrull_status::InvalidArg)?,
        declared(placements, n)?,
        if cp_groups.is_null() {
            Span::clamped(cp_groups, 0)
        } else {
            declared(cp_groups, n)?
        },
        declared(times, n_times)?,
    ];
    if spans[1..].iter().any(|x| x.overlaps(spans[0])) {
        return Err(skrull_status::InvalidArg.into());
    }
    let slice = |p: *const skrull_placement| {
        if n == 0 {
            &[][..]
        } else {
            // SAFETY: non-null, aligned, `n` readable elements (checked, caller contract).
            unsafe { core::slice::from_raw_parts(p, n) }
        }
    };
    let placed = slice(placements);
    let groups: &[skrull_cp_group] = if cp_groups.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: non-null, aligned, `n` readable elements (checked, caller contract).
        unsafe { core::slice::from_raw_parts(cp_groups, n) }
    };
    let times: &[f64] = if n_times == 0 {
        &[]
    } else {
        // SAFETY: non-null, aligned, `n_times` readable elements (checked, caller contract).
        unsafe { core::slice::from_raw_parts(times, n_times) }
    };
    let cfg = *s.config();
    let at = |i: usize| {
        let c = placed.get(i)?;
        // A chunked placement needs its group (its GPUs are timed, not fitted); anything else
        // below -1 is garbage, refused, never read as local or sharded.
        if c.cp_rank < CHUNKED {
            return None;
        }
        staged_placement(&cfg, c, groups.get(i).copied())
    };
    for (index, &len) in lengths.iter().enumerate() {
        if len == 0 {
            let mut f = Failure::from(skrull_status::EmptySequence);
            f.info.index = index as i64;
            return Err(f);
        }
    }
    s.observe_with(rows, lengths, at, n_micro_batches, times)
        .map_err(|e| match e {
            RefitError::Length { index } => {
                let mut f = Failure::from(skrull_status::LengthOutOfRange);
                f.info.index = index as i64;
                f.info.value = u64::from(lengths.get(index).copied().unwrap_or(0));
                f
            }
            e => refit_failure(e),
        })?;
    Ok(())
}

/// Records the measured wall time of the step last added by `skrull_refit_observe()`:
/// `seconds` of the whole step on its slowest GPU (forward, backward, the optimizer step and
/// everything between). The refit measures the per-step cost from it (each step's time less
/// its slowest DP rank's sum of micro-batch times, the median over the window) and returns it
/// as the model's `iteration_fixed_s`. A NaN, infinite, zero or negative `seconds` records no
/// time for the step. A later call for the same step replaces the time.
///
/// Statuses: the state's (as `skrull_refit_observe()`), then `MEASUREMENT_MISMATCH` when no
/// step was observed yet. The state changes only on `SKRULL_STATUS_OK`.
///
/// # Safety
/// - `state` as for `skrull_refit_observe()`.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_refit_observe_step_time(
    state: *mut c_void,
    state_size: usize,
    seconds: f64,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [Span::clamped(state.cast_const().cast::<u8>(), state_size)];
        // SAFETY: forwarded caller contract.
        let r = unsafe { open(state, state_size) }.and_then(|(s, _)| {
            s.observe_step_time(seconds)
                .map(|_| ())
                .map_err(refit_failure)
        });
        // SAFETY: `error` is NULL or checked by `details_target`; caller contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

/// Fits the window and writes the refitted cost model to `*out_model` (`out_model_size >=
/// 264` bytes; `struct_size` = the bytes written) and the report to `*out_report` (unless
/// NULL; `out_report_size >= 112`). Deterministic: the same history of calls gives the same
/// bits on every platform. A fit is adopted only when it explains the window better than the
/// model in use without explaining its held-out micro-batches worse, within the trust region
/// around the model in use, with an error at most `max_error`, and beyond one uniform factor
/// (`skrull_refit_report.verdict` says which rule refused it); otherwise the model in use is
/// returned (at first the prior). Coefficients the window does not measure keep their value;
/// ring costs that every measurement hides are raised to the most the window allows. The
/// returned model is the state's model in use from now on: the next fit starts from it, is
/// pulled toward it and is judged against it (the window is not changed). To plan with the
/// model, point `skrull_config.cost_model` at it; keep the state's prior as it is (do not
/// re-initialise with the refitted model).
///
/// Statuses: the state's (as `skrull_refit_observe()`), `NULL_ARG` (`out_model`),
/// `INVALID_ARG` (misaligned or overlapping outputs), `BAD_STRUCT_SIZE` (an output size below
/// version 1). Outputs are written only on `SKRULL_STATUS_OK`.
///
/// # Safety
/// - `state` as for `skrull_refit_observe()`.
/// - `out_model`, unless NULL, is valid for writing `out_model_size` bytes; `out_report`,
///   unless NULL, for `out_report_size` bytes.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_refit_solve(
    state: *mut c_void,
    state_size: usize,
    out_model: *mut skrull_cost_model,
    out_model_size: usize,
    out_report: *mut skrull_refit_report,
    out_report_size: usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
            Span::clamped(out_model.cast_const().cast::<u8>(), out_model_size),
            Span::clamped(out_report.cast_const().cast::<u8>(), out_report_size),
        ];
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            solve(
                state,
                state_size,
                out_model,
                out_model_size,
                out_report,
                out_report_size,
                &others,
            )
        };
        // SAFETY: `error` is NULL or checked by `details_target`; caller contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

/// The body of [`skrull_refit_solve`].
///
/// # Safety
/// As [`skrull_refit_solve`].
unsafe fn solve(
    state: *mut c_void,
    state_size: usize,
    out_model: *mut skrull_cost_model,
    out_model_size: usize,
    out_report: *mut skrull_refit_report,
    out_report_size: usize,
    others: &[Span],
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let (s, rows) = unsafe { open(state, state_size) }?;
    if out_model.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !out_model.is_aligned() || !out_report.is_aligned() || any_overlap(others) {
        return Err(skrull_status::InvalidArg.into());
    }
    if out_model_size < SKRULL_COST_MODEL_SIZE_V1 as usize
        || (!out_report.is_null() && out_report_size < SKRULL_REFIT_REPORT_SIZE_V1 as usize)
    {
        return Err(skrull_status::BadStructSize.into());
    }
    let fit = s.solve(rows).map_err(refit_failure)?;
    let mut m = skrull_cost_model::from_core(&fit.model);
    let nm = out_model_size.min(size_of::<skrull_cost_model>());
    m.struct_size = nm as u32;
    let mut rep = report(&fit.report);
    let nr = out_report_size.min(size_of::<skrull_refit_report>());
    rep.struct_size = nr as u32;
    // SAFETY: the outputs are non-null where written, aligned (checked), valid for their
    // sizes (caller contract) and disjoint from the state and each other (checked).
    unsafe {
        core::ptr::copy_nonoverlapping((&raw const m).cast::<u8>(), out_model.cast(), nm);
        if !out_report.is_null() {
            core::ptr::copy_nonoverlapping((&raw const rep).cast::<u8>(), out_report.cast(), nr);
        }
    }
    Ok(())
}

/// The C form of a core report.
fn report(r: &RefitReport) -> skrull_refit_report {
    skrull_refit_report {
        struct_size: SKRULL_REFIT_REPORT_SIZE_V3,
        kept_prior: u32::from(r.kept_prior),
        steps: r.steps,
        rows: r.rows,
        dropped: r.dropped,
        skipped: r.skipped,
        moved: r.moved,
        _reserved: 0,
        error_prior: r.error_prior,
        error_fit: r.error_fit,
        coefficients: core::array::from_fn(|i| r.coefficients[i]),
        adopted: u32::from(r.adopted),
        verdict: r.verdict as u32,
        limited: r.limited,
        raised: r.raised,
        heldout_rows: r.heldout_rows,
        step_times: r.step_times,
        scale: r.scale,
        error_heldout_in_use: r.error_heldout_in_use,
        error_heldout_fit: r.error_heldout_fit,
        error_unlimited: r.error_unlimited,
        iteration_fixed_s: r.iteration_fixed_s,
        coefficient_sharded_sequence: r.coefficients[Coef::ShardedSequence as usize],
        coefficient_last_micro_batch: r.coefficients[Coef::LastMicroBatch as usize],
        coefficient_local_sequence: r.coefficients[Coef::LocalSequence as usize],
    }
}
