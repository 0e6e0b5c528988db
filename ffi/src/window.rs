//! The outlier-delay window (`docs/outlier_delay.md`): across global batches, a sequence that
//! alone outlasts its batch's fair share per DP rank may run up to `max_delay` steps later,
//! beside other such sequences. The window lives in caller storage
//! (`skrull_window_sizes()`, `skrull_window_init()`); the caller pushes global batches
//! (`skrull_window_push()`), keeps `max_delay` of them pushed ahead, and takes one step at a
//! time (`skrull_window_step()`), then plans the step's lengths as any batch
//! (`skrull_schedule_prepared()`). `skrull_window_queue()` and `skrull_window_requeue()` save
//! and restore the queue (resuming mid-epoch).

use core::ffi::c_void;
use core::mem::{align_of, size_of};

use skrull_core::window::{Deferred, WindowError, WindowParams, WindowState};

use crate::boundary::{Span, check_out, declared, guard, lengths};
use crate::error::{Failure, skrull_error_info};
use crate::setup::{prepared, skrull_setup};
use crate::sized::read_sized;
use crate::spans::{details_target, struct_span};
use crate::status::skrull_status;

/// The longest `skrull_window_params.max_delay`.
pub const SKRULL_WINDOW_MAX_DELAY: u32 = 64;
const _: () = assert!(SKRULL_WINDOW_MAX_DELAY == skrull_core::window::MAX_DELAY);

/// A window's shape and where it starts (`struct_size` first; version 1 is 32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct skrull_window_params {
    /// `sizeof(skrull_window_params)`.
    pub struct_size: u32,
    /// The most steps a sample may be delayed, `0..=SKRULL_WINDOW_MAX_DELAY` (0: never).
    pub max_delay: u32,
    /// The most sequences one pushed batch may hold, `1..=65536`.
    pub batch_capacity: u32,
    /// 0.
    pub _reserved: u32,
    /// The index of the first step (0 for a new epoch; the saved step when resuming).
    pub first_step: u64,
    /// The position of the first sample pushed (0 for a new epoch; when resuming, the
    /// position of the first sample of the saved step's batch).
    pub first_position: u64,
}

/// `sizeof(skrull_window_params)` of version 1.
pub const SKRULL_WINDOW_PARAMS_SIZE_V1: u32 = 32;
const _: () = assert!(size_of::<skrull_window_params>() == SKRULL_WINDOW_PARAMS_SIZE_V1 as usize);

/// What a window of given parameters needs (frozen layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_window_capacity {
    /// Bytes of state storage (8-byte aligned).
    pub state_bytes: usize,
    /// The most samples one step returns: the capacity `skrull_window_step()` needs.
    pub step_capacity: usize,
    /// The most samples the queue holds.
    pub queue_capacity: usize,
}

/// What one `skrull_window_step()` returned besides the samples (frozen layout, 32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_window_step_info {
    /// The step's index.
    pub index: u64,
    /// The released samples' delays summed, steps.
    pub delay_sum: u64,
    /// Samples written (the step's batch's kept samples, then the released ones).
    pub samples: u32,
    /// Of them, the last `released` were deferred from earlier steps.
    pub released: u32,
    /// Outliers of the step's batch deferred to a later step.
    pub deferred: u32,
    /// Samples in the queue after this step.
    pub queued: u32,
}
const _: () = assert!(size_of::<skrull_window_step_info>() == 32);

/// A deferred sample (frozen layout, 24 bytes): `skrull_window_queue()` lists them,
/// `skrull_window_requeue()` takes them back.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_window_deferred {
    /// Its position in push order.
    pub position: u64,
    /// The step of the batch it was pushed in.
    pub origin: u64,
    /// Its length, tokens.
    pub length: u32,
    /// 0.
    pub _reserved: u32,
}
const _: () = assert!(size_of::<skrull_window_deferred>() == 24);

const MAGIC: u64 = 0x736b_7275_6c6c_7764; // "skrullwd"

/// The head of the caller's state storage (the marker first); the slab's words follow it.
#[repr(C)]
struct Header {
    magic: u64,
    bytes: u64,
    state: WindowState,
}

/// Offset of the slab in the state storage.
const WORDS_AT: usize = size_of::<Header>().next_multiple_of(8);
/// Alignment the state storage needs.
const STATE_ALIGN: usize = 8;
const _: () = assert!(align_of::<Header>() <= STATE_ALIGN);

impl skrull_window_params {
    const DEFAULT: skrull_window_params = skrull_window_params {
        struct_size: SKRULL_WINDOW_PARAMS_SIZE_V1,
        max_delay: 0,
        batch_capacity: 0,
        _reserved: 0,
        first_step: 0,
        first_position: 0,
    };
}

/// Reads and checks the caller's parameters.
///
/// # Safety
/// Unless NULL, `params` points to a `skrull_window_params` whose `struct_size` bytes are
/// readable.
unsafe fn read_params(params: *const skrull_window_params) -> Result<WindowParams, Failure> {
    let sizes = [SKRULL_WINDOW_PARAMS_SIZE_V1 as usize];
    // SAFETY: forwarded caller contract.
    let p = unsafe { read_sized(params, &sizes, skrull_window_params::DEFAULT) }?;
    if p._reserved != 0 {
        return Err(skrull_status::InvalidArg.into());
    }
    let core = WindowParams {
        max_delay: p.max_delay,
        batch_capacity: p.batch_capacity,
        first_step: p.first_step,
        first_position: p.first_position,
    };
    core.validate().map_err(window_failure)?;
    Ok(core)
}

/// Bytes of state storage `p` needs (`None` when they overflow).
fn state_bytes(p: &WindowParams) -> Option<usize> {
    p.words()
        .checked_mul(8)?
        .checked_add(WORDS_AT)
        .filter(|&b| b <= isize::MAX as usize)
}

/// The status and details of a window error.
fn window_failure(e: WindowError) -> Failure {
    let with = |status, value: u64, limit: u64| {
        let mut f = Failure::from(status);
        f.info.value = value;
        f.info.limit = limit;
        f
    };
    match e {
        WindowError::Params { field, value, max } => {
            let mut f = with(skrull_status::InvalidWindowParams, value, max);
            f.info.field = field.number();
            f
        }
        WindowError::Storage { .. } => skrull_status::WindowStateInvalid.into(),
        WindowError::BatchTooLarge { count, capacity } => with(
            skrull_status::WindowBatchTooLarge,
            count as u64,
            u64::from(capacity),
        ),
        WindowError::Batch(e) => e.into(),
        WindowError::Full => skrull_status::WindowFull.into(),
        WindowError::Empty => skrull_status::WindowEmpty.into(),
        WindowError::Deferred { index } => {
            let mut f = Failure::from(skrull_status::InvalidDeferred);
            f.info.index = index as i64;
            f
        }
        _ => skrull_status::Internal.into(),
    }
}

/// Writes a body's result to the caller: the status, and the details unless `error` is NULL,
/// misaligned or overlaps one of `others`.
///
/// # Safety
/// Unless NULL, `error` points to a writable `skrull_error_info`.
unsafe fn finish(
    r: Result<(), Failure>,
    error: *mut skrull_error_info,
    others: &[Span],
) -> skrull_status {
    // SAFETY: `target` returns NULL or `error` checked for alignment and overlap; writable by
    // contract.
    unsafe { crate::error::finish(r, details_target(error, others)) }
}

/// What a window with `params` needs: its state bytes, the capacity of a step's outputs and
/// of the queue.
///
/// Statuses: `NULL_ARG` (`params` or `out`), `INVALID_ARG` (misaligned, overlapping, or a
/// nonzero `_reserved`), `BAD_STRUCT_SIZE`, `INVALID_WINDOW_PARAMS`. `out` is written only on
/// success.
///
/// # Safety
/// Unless NULL, `params` points to a `skrull_window_params` whose `struct_size` bytes are
/// readable and `out` to a writable `skrull_window_capacity`. Safe from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_window_sizes(
    params: *const skrull_window_params,
    out: *mut skrull_window_capacity,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let p = match unsafe { read_params(params) } {
            Ok(p) => p,
            Err(f) => return f.status,
        };
        if out.is_null() {
            return skrull_status::NullArg;
        }
        // SAFETY: forwarded caller contract (readable `struct_size` bytes).
        let params_span = unsafe { struct_span(params) };
        if !out.is_aligned() || Span::clamped(out, 1).overlaps(params_span) {
            return skrull_status::InvalidArg;
        }
        let Some(state_bytes) = state_bytes(&p) else {
            return skrull_status::InvalidWindowParams;
        };
        let c = skrull_window_capacity {
            state_bytes,
            step_capacity: p.step_capacity(),
            queue_capacity: p.queue_capacity(),
        };
        // SAFETY: non-null, aligned (checked), writable (caller contract).
        unsafe { out.write(c) };
        skrull_status::Ok
    })
}

/// Initialises an empty window in caller storage: `state` (`state_size` bytes, 8-byte
/// aligned, at least `skrull_window_sizes()`'s `state_bytes`) for the prepared configuration
/// `setup` (copied: the setup's memory may go after this call). The window estimates with
/// the setup's cost model (`docs/outlier_delay.md`); plan its steps with the same setup. The
/// state is plain memory valid only in this process and at this address.
///
/// Statuses, in order: `params` (`NULL_ARG`, `INVALID_ARG`, `BAD_STRUCT_SIZE`,
/// `INVALID_WINDOW_PARAMS` with the field in the details), `setup` (`NULL_ARG`,
/// `INVALID_ARG`: misaligned or not a prepared configuration), then `state`: `NULL_ARG`,
/// `INVALID_ARG` (misaligned, or overlapping `params`, `setup` or the details),
/// `WORKSPACE_TOO_SMALL`. Nothing is written on error but the details.
///
/// # Safety
/// - `params` as for `skrull_window_sizes()`; `setup`, unless NULL, is what
///   `skrull_setup_init()` stored, readable during the call.
/// - `state`, unless NULL, points to `state_size` writable bytes no other thread touches
///   during the call.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_window_init(
    params: *const skrull_window_params,
    setup: *const skrull_setup,
    state: *mut c_void,
    state_size: usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            // SAFETY: forwarded caller contract.
            unsafe { struct_span(params) },
            Span::clamped(setup, 1),
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
        ];
        // SAFETY: forwarded caller contract.
        let r = unsafe { init(params, setup, state, state_size, &others) };
        // SAFETY: forwarded caller contract for `error`.
        unsafe { finish(r, error, &others) }
    })
}

/// The body of [`skrull_window_init`].
///
/// # Safety
/// As [`skrull_window_init`].
unsafe fn init(
    params: *const skrull_window_params,
    setup: *const skrull_setup,
    state: *mut c_void,
    state_size: usize,
    others: &[Span],
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { read_params(params) }?;
    // SAFETY: forwarded caller contract.
    let setup = unsafe { prepared(setup) }?;
    if state.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    let span = declared(state.cast_const().cast::<u8>(), state_size)?;
    if !(state as usize).is_multiple_of(STATE_ALIGN) || others[..2].iter().any(|o| o.overlaps(span))
    {
        return Err(skrull_status::InvalidArg.into());
    }
    let bytes = state_bytes(&p).ok_or(skrull_status::WorkspaceTooSmall)?;
    if state_size < bytes {
        return Err(skrull_status::WorkspaceTooSmall.into());
    }
    let header = Header {
        magic: MAGIC,
        bytes: bytes as u64,
        state: WindowState::new(setup, p).map_err(window_failure)?,
    };
    // SAFETY: `state` is non-null, aligned for `Header` (checked) and holds `bytes >=
    // size_of::<Header>()` writable bytes (checked, caller contract).
    unsafe { state.cast::<Header>().write(header) };
    Ok(())
}

/// The state and slab of an initialised window.
///
/// # Safety
/// Unless NULL, `state` points to `state_size` bytes that `skrull_window_init()` initialised
/// and only the window calls changed since, which nothing else touches for `'a`.
unsafe fn open<'a>(
    state: *mut c_void,
    state_size: usize,
) -> Result<(&'a mut WindowState, &'a mut [u64]), Failure> {
    if state.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !(state as usize).is_multiple_of(STATE_ALIGN) {
        return Err(skrull_status::InvalidArg.into());
    }
    if state_size < WORDS_AT {
        return Err(skrull_status::WindowStateInvalid.into());
    }
    let head = state.cast::<u64>();
    // SAFETY: non-null, aligned, at least `WORDS_AT >= 16` readable bytes (checked, contract).
    let (magic, bytes) = unsafe { (head.read(), head.add(1).read()) };
    if magic != MAGIC || bytes > state_size as u64 {
        return Err(skrull_status::WindowStateInvalid.into());
    }
    // SAFETY: the marker says `skrull_window_init()` wrote a `Header` here (caller contract:
    // nothing else changed it); aligned (checked); exclusive for `'a` (contract).
    let header = unsafe { &mut *state.cast::<Header>() };
    let p = *header.state.params();
    if !header.state.is_consistent() || state_bytes(&p) != Some(bytes as usize) {
        return Err(skrull_status::WindowStateInvalid.into());
    }
    // SAFETY: `bytes` (checked against `state_size`) cover `WORDS_AT + words * 8` bytes;
    // aligned for u64 (`WORDS_AT` is a multiple of 8); disjoint from the header; every bit
    // pattern is a valid u64; exclusive for `'a` (contract).
    let words = unsafe {
        core::slice::from_raw_parts_mut(state.cast::<u8>().add(WORDS_AT).cast::<u64>(), p.words())
    };
    Ok((&mut header.state, words))
}

/// Appends the next global batch (`n` lengths, in sample order; its samples get the next
/// positions). Keep `max_delay` batches pushed ahead of the step you take: the window
/// defers only to batches it holds, and a step with none pushed after it runs the whole
/// queue (the epoch's end).
///
/// Statuses, in order: `state` (`NULL_ARG`, `INVALID_ARG` misaligned, `WINDOW_STATE_INVALID`),
/// `lengths` (`NULL_ARG` with `n > 0`, `INVALID_ARG` misaligned or overlapping the state),
/// `WINDOW_BATCH_TOO_LARGE`, `WINDOW_FULL`, then per sequence in input order
/// `EMPTY_SEQUENCE`, `LENGTH_OUT_OF_RANGE`, `SEQUENCE_TOO_LONG` (details: the sequence). The
/// state changes only on `SKRULL_STATUS_OK`.
///
/// # Safety
/// - `state` as for `skrull_window_step()`.
/// - `lengths`, unless NULL, points to `n` readable `uint32_t`.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_window_push(
    state: *mut c_void,
    state_size: usize,
    lengths_ptr: *const u32,
    n: usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
            Span::clamped(lengths_ptr, n),
        ];
        let r = (|| {
            // SAFETY: forwarded caller contract.
            let (s, words) = unsafe { open(state, state_size) }?;
            // SAFETY: forwarded caller contract.
            let lengths = unsafe { lengths(lengths_ptr, n) }?;
            if Span::of(lengths.as_ptr(), lengths.len()).is_some_and(|l| l.overlaps(others[0])) {
                return Err(skrull_status::InvalidArg.into());
            }
            s.push(words, lengths).map_err(window_failure)
        })();
        // SAFETY: forwarded caller contract for `error`.
        unsafe { finish(r, error, &others) }
    })
}

/// Takes the next step: decides which deferred samples and outliers run now and writes the
/// step's samples, the current batch's kept samples in batch order and then the released
/// ones in position order, as `positions` (`uint64_t`, each sample's position in push order)
/// and `lengths` (plan these), both with room for `capacity` entries (at least
/// `skrull_window_sizes()`'s `step_capacity`), and `*out`.
///
/// Statuses, in order: `state` (`NULL_ARG`, `INVALID_ARG` misaligned,
/// `WINDOW_STATE_INVALID`), `positions`, `lengths` (`NULL_ARG`, `INVALID_ARG` misaligned,
/// `OUTPUT_TOO_SMALL` below the step capacity), `out` (`NULL_ARG`, `INVALID_ARG`), any
/// overlap of the state and the outputs (`INVALID_ARG`), then `WINDOW_EMPTY`. Outputs and the
/// state change only on `SKRULL_STATUS_OK`.
///
/// # Safety
/// - `state`, unless NULL, points to `state_size` bytes initialised by `skrull_window_init()`
///   and changed since only by the window calls; no other thread touches it during the call.
/// - `positions` and `lengths`, unless NULL, are writable for `capacity` elements; `out`,
///   unless NULL, for one `skrull_window_step_info`.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_window_step(
    state: *mut c_void,
    state_size: usize,
    positions: *mut u64,
    lengths: *mut u32,
    capacity: usize,
    out: *mut skrull_window_step_info,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
            Span::clamped(positions.cast_const(), capacity),
            Span::clamped(lengths.cast_const(), capacity),
            Span::clamped(out.cast_const(), 1),
        ];
        let r = (|| {
            // SAFETY: forwarded caller contract.
            let (s, words) = unsafe { open(state, state_size) }?;
            let need = s.params().step_capacity();
            let spans = [
                others[0],
                check_out(positions, capacity, need)?,
                check_out(lengths, capacity, need)?,
                declared(out.cast_const(), 1)?,
            ];
            if out.is_null() {
                return Err(skrull_status::NullArg.into());
            }
            if crate::boundary::any_overlap(&spans) {
                return Err(skrull_status::InvalidArg.into());
            }
            let step = s.step(words).map_err(window_failure)?;
            let k = step.positions.len();
            let info = skrull_window_step_info {
                index: step.index,
                delay_sum: step.delay_sum,
                samples: k as u32,
                released: step.released,
                deferred: step.deferred,
                queued: step.queued,
            };
            // SAFETY: the outputs are non-null, aligned, hold `capacity >= need >= k` elements
            // (checked) and are disjoint from the state and each other (checked).
            unsafe {
                core::ptr::copy_nonoverlapping(step.positions.as_ptr(), positions, k);
                core::ptr::copy_nonoverlapping(step.lengths.as_ptr(), lengths, k);
                out.write(info);
            }
            Ok(())
        })();
        // SAFETY: forwarded caller contract for `error`.
        unsafe { finish(r, error, &others) }
    })
}

/// Lists the queue (the deferred samples not yet returned), in position order, into `out`
/// (room for `capacity` entries; `skrull_window_sizes()`'s `queue_capacity` always suffices)
/// and their number into `*count`. With `skrull_window_requeue()`, what a trainer saves to
/// resume mid-epoch.
///
/// Statuses: `state`'s (as `skrull_window_step()`), `NULL_ARG` (`count`, or `out` with
/// `capacity > 0`), `INVALID_ARG` (misaligned or overlapping), `OUTPUT_TOO_SMALL` (fewer
/// entries than queued; details: `value` the queued samples, `limit` the capacity). Outputs
/// are written only on success.
///
/// # Safety
/// - `state` as for `skrull_window_step()` (only read).
/// - `out`, unless NULL, is writable for `capacity` entries; `count`, unless NULL, for one
///   `size_t`.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_window_queue(
    state: *mut c_void,
    state_size: usize,
    out: *mut skrull_window_deferred,
    capacity: usize,
    count: *mut usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
            Span::clamped(out.cast_const(), capacity),
            Span::clamped(count.cast_const(), 1),
        ];
        let r = (|| {
            // SAFETY: forwarded caller contract.
            let (s, words) = unsafe { open(state, state_size) }?;
            let queued = s.queue_len();
            let spans = [
                others[0],
                declared(out.cast_const(), capacity)?,
                declared(count.cast_const(), 1)?,
            ];
            if count.is_null() {
                return Err(skrull_status::NullArg.into());
            }
            if crate::boundary::any_overlap(&spans) {
                return Err(skrull_status::InvalidArg.into());
            }
            if capacity < queued {
                let mut f = Failure::from(skrull_status::OutputTooSmall);
                f.info.value = queued as u64;
                f.info.limit = capacity as u64;
                return Err(f);
            }
            for i in 0..queued {
                let d = s
                    .queued(words, i)
                    .ok_or(skrull_status::WindowStateInvalid)?;
                let e = skrull_window_deferred {
                    position: d.position,
                    origin: d.origin,
                    length: d.length,
                    _reserved: 0,
                };
                // SAFETY: `out` is non-null when `capacity >= queued > 0`, aligned, writable
                // for `capacity > i` entries (checked, contract), disjoint from the state.
                unsafe { out.add(i).write(e) };
            }
            // SAFETY: non-null, aligned (checked), writable (contract), disjoint.
            unsafe { count.write(queued) };
            Ok(())
        })();
        // SAFETY: forwarded caller contract for `error`.
        unsafe { finish(r, error, &others) }
    })
}

/// Puts deferred samples back in the queue, as `skrull_window_queue()` listed them, to
/// resume a window saved mid-epoch: initialise a window with the saved step as `first_step`
/// and the position of that step's batch's first sample as `first_position`, requeue, then
/// push the batches from that step on. Only while no batch is pushed.
///
/// Statuses, in order: `state`'s (as `skrull_window_step()`), `entries` (`NULL_ARG` with
/// `n > 0`, `INVALID_ARG` misaligned, overlapping the state, or an entry's nonzero
/// `_reserved`), then per entry `INVALID_DEFERRED` (details: the entry) or a length status
/// (`EMPTY_SEQUENCE`, `LENGTH_OUT_OF_RANGE`, `SEQUENCE_TOO_LONG`). Nothing is queued on
/// error.
///
/// # Safety
/// - `state` as for `skrull_window_step()`.
/// - `entries`, unless NULL, points to `n` readable entries.
/// - `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_window_requeue(
    state: *mut c_void,
    state_size: usize,
    entries: *const skrull_window_deferred,
    n: usize,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        let others = [
            Span::clamped(state.cast_const().cast::<u8>(), state_size),
            Span::clamped(entries, n),
        ];
        let r = (|| {
            // SAFETY: forwarded caller contract.
            let (s, words) = unsafe { open(state, state_size) }?;
            let span = declared(entries, n)?;
            if span.overlaps(others[0]) {
                return Err(skrull_status::InvalidArg.into());
            }
            let list: &[skrull_window_deferred] = if n == 0 {
                &[]
            } else {
                // SAFETY: non-null with `n > 0`, aligned (checked by `declared`), `n`
                // readable entries (contract), disjoint from the state (checked).
                unsafe { core::slice::from_raw_parts(entries, n) }
            };
            if list.iter().any(|e| e._reserved != 0) {
                return Err(skrull_status::InvalidArg.into());
            }
            s.requeue_with(words, n, |i| {
                let e = list.get(i).copied().unwrap_or_default();
                Deferred {
                    position: e.position,
                    length: e.length,
                    origin: e.origin,
                }
            })
            .map_err(window_failure)
        })();
        // SAFETY: forwarded caller contract for `error`.
        unsafe { finish(r, error, &others) }
    })
}
