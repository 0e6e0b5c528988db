//! The prepared form: `skrull_setup_init()` validates a configuration once and keeps a
//! `skrull_setup` (the core's `Setup`: the budget and the cost model derived) in caller
//! memory; `skrull_schedule_prepared()` plans every batch with it. `skrull_config_check()`
//! validates a configuration alone.

use core::ffi::c_void;
use core::mem::{align_of, size_of};

use skrull_core::Setup;

use crate::boundary::{Span, guard};
use crate::config::{read_config, skrull_config};
use crate::error::{Failure, finish, info_span, skrull_error_info};
use crate::plan::skrull_plan_buffers;
use crate::schedule::schedule_with;
use crate::spans::{config_spans, details_target, target};
use crate::status::skrull_status;

/// Marks memory that `skrull_setup_init()` filled ("skrull-S" with the ABI version).
const MAGIC: u64 = 0x736b_7275_6c6c_2d53 ^ crate::version::SKRULL_ABI_VERSION as u64;

/// A prepared configuration, built in caller memory by `skrull_setup_init()` (opaque: its size
/// and layout may change between versions; use `skrull_setup_size()`).
///
/// Plain data with no pointers: it stays valid as long as its memory does, may be read by
/// many threads at once (`skrull_schedule_prepared()` never writes to it), and is discarded
/// by freeing that memory. Copying its bytes elsewhere is not supported (the handle is the
/// address `skrull_setup_init()` returned).
///
/// `repr(C)` keeps `magic` at offset 0, so a handle that is not a setup is refused after
/// reading its first 8 bytes only (regression: with Rust's field order the marker sat past a
/// 512-byte junk handle in `tests/c/prepared.c`, and reading it crashed about 1 run in 12
/// under AddressSanitizer).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct skrull_setup {
    magic: u64,
    setup: Setup,
}

/// Bytes `skrull_setup_init()` needs: the prepared configuration plus the slack to align a
/// buffer of any alignment.
///
/// # Safety
/// None: no arguments. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_setup_size() -> usize {
    guard(|| size_of::<skrull_setup>() + align_of::<skrull_setup>() - 1)
}

/// Validates `config` once and prepares it in `buf` (`len` bytes, any alignment, at least
/// `skrull_setup_size()`), storing the handle in `*setup`. Plan with it through
/// `skrull_schedule_prepared()` for as many batches as the configuration serves.
///
/// Checks, in order: `config` exactly as `skrull_schedule()` does (pointer, struct size,
/// reserved fields, option integers, the cost model, then the ranges), `buf` NULL, `setup`
/// NULL or misaligned, `buf` shorter than `skrull_setup_size()`, then `buf`, `setup`, the
/// configuration and `error` overlapping (`SKRULL_STATUS_INVALID_ARG`). On error nothing is
/// written but `error` (unless NULL, misaligned or overlapping another argument).
///
/// # Safety
/// - `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are
///   readable, and its `cost_model` pointer, unless NULL, to a readable `skrull_cost_model`.
/// - `buf`, unless NULL, points to `len` writable bytes that nothing else touches while the
///   setup is in use.
/// - `setup`, unless NULL, is writable; `error`, unless NULL, points to a writable
///   `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_setup_init(
    config: *const skrull_config,
    buf: *mut c_void,
    len: usize,
    setup: *mut *const skrull_setup,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe { init(config, buf, len, setup, error) };
        // SAFETY: forwarded caller contract for `config`.
        let [cfg, cost] = unsafe { config_spans(config) };
        let others = [
            cfg,
            cost,
            Span::clamped(buf.cast_const().cast::<u8>(), len),
            Span::clamped(setup.cast_const(), 1),
        ];
        // SAFETY: `error` is checked for alignment in `finish`; writable by contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

/// The body of [`skrull_setup_init`].
///
/// # Safety
/// As [`skrull_setup_init`].
unsafe fn init(
    config: *const skrull_config,
    buf: *mut c_void,
    len: usize,
    setup: *mut *const skrull_setup,
    error: *mut skrull_error_info,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract for `config`.
    let cfg = unsafe { read_config(config) }?;
    if buf.is_null() || setup.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !setup.is_aligned() {
        return Err(skrull_status::InvalidArg.into());
    }
    let bytes = buf.cast::<u8>();
    let pad = bytes.align_offset(align_of::<skrull_setup>());
    if pad >= align_of::<skrull_setup>() || len < pad + size_of::<skrull_setup>() {
        return Err(skrull_status::WorkspaceTooSmall.into());
    }
    let spans = [
        Span::of(bytes.cast_const(), len).ok_or(skrull_status::InvalidArg)?,
        Span::of(setup.cast_const(), 1).ok_or(skrull_status::InvalidArg)?,
        // SAFETY: forwarded caller contract for `config`.
        unsafe { config_spans(config) }[0],
    ];
    if crate::boundary::any_overlap(&spans) {
        return Err(skrull_status::InvalidArg.into());
    }
    if let Some(e) = info_span(error)?
        && spans.iter().any(|s| s.overlaps(e))
    {
        return Err(Failure::silent(skrull_status::InvalidArg));
    }
    let prepared = skrull_setup {
        magic: MAGIC,
        setup: Setup::new(&cfg)?,
    };
    // SAFETY: `pad < align` keeps `at` inside `buf`, which holds `pad + size_of` writable
    // bytes (checked), aligned for `skrull_setup`; `setup` is non-null, aligned and writable,
    // and overlaps neither (checked).
    unsafe {
        let at = bytes.add(pad).cast::<skrull_setup>();
        at.write(prepared);
        setup.write(at.cast_const());
    }
    Ok(())
}

/// Plans one global batch with a prepared configuration: exactly `skrull_schedule()` with the
/// configuration `setup` was prepared from (the same checks from `lengths` on, in the same
/// order; the same plan, bit for bit), without validating it or deriving its cost model again.
///
/// `setup` must be what `skrull_setup_init()` stored: NULL is `SKRULL_STATUS_NULL_ARG`, a
/// misaligned pointer or memory that does not hold a prepared configuration (checked by a
/// marker word) `SKRULL_STATUS_INVALID_ARG`, reported before any other argument.
///
/// # Safety
/// - `setup`, unless NULL, points to memory readable for `skrull_setup_size()` bytes from the
///   handle (what `skrull_setup_init()` stored), not written during the call.
/// - The other arguments as for `skrull_schedule()`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_schedule_prepared(
    setup: *const skrull_setup,
    lengths: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_plan_buffers,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe { prepared(setup) }.and_then(|s| {
            // SAFETY: forwarded caller contract.
            unsafe { schedule_with(s, lengths, n, workspace, workspace_size, out) }
        });
        if r.is_ok() {
            return skrull_status::Ok;
        }
        let others = [
            Span::clamped(setup, 1),
            Span::clamped(lengths, n),
            Span::clamped(workspace.cast_const().cast::<u8>(), workspace_size),
        ];
        // SAFETY: forwarded caller contract for `out`; the target is checked in `target`.
        unsafe { finish(r, target(out, &others)) }
    })
}

/// The core setup behind a caller's handle.
///
/// # Safety
/// As the `setup` argument of [`skrull_schedule_prepared`].
pub(crate) unsafe fn prepared<'a>(setup: *const skrull_setup) -> Result<&'a Setup, Failure> {
    if setup.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !setup.is_aligned() {
        return Err(skrull_status::InvalidArg.into());
    }
    // SAFETY: non-null, aligned (checked), readable (caller contract). The marker is read as
    // a plain integer before anything else is interpreted.
    let magic = unsafe { core::ptr::addr_of!((*setup).magic).read() };
    if magic != MAGIC {
        return Err(skrull_status::InvalidArg.into());
    }
    // SAFETY: the marker says `skrull_setup_init()` wrote a `skrull_setup` here (caller
    // contract: the handle it stored), unchanged since.
    Ok(unsafe { &(*setup).setup })
}

/// Validates `config` alone: `SKRULL_STATUS_OK`, or the first problem `skrull_schedule()`
/// would report for it (pointer, struct size, reserved fields, option integers, the cost
/// model, then the ranges), with its details in `error` (unless NULL, misaligned or
/// overlapping the configuration).
///
/// # Safety
/// `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are readable
/// (and its `cost_model`, unless NULL, to a readable `skrull_cost_model`); `error`, unless
/// NULL, to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_config_check(
    config: *const skrull_config,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe { read_config(config) }.map(|_| ());
        // SAFETY: forwarded caller contract for `config`.
        let others = unsafe { config_spans(config) };
        // SAFETY: `error` is checked for alignment in `finish`; writable by contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

#[cfg(test)]
mod tests {
    use super::skrull_setup;

    /// Regression: the marker must be the first 8 bytes, so a junk handle is refused after
    /// reading only those (it sat 3 KB in under Rust's field order; `tests/c/prepared.c`'s
    /// 512-byte junk handle then crashed the C tests about 1 run in 12).
    #[test]
    fn setup_marker_is_at_offset_zero() {
        assert_eq!(core::mem::offset_of!(skrull_setup, magic), 0);
    }
}
