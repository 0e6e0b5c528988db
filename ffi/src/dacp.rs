//! `skrull_dacp_place()`: DACP alone, for one micro-batch a trainer has already formed.

use core::ffi::c_void;

use crate::boundary::{Span, any_overlap, check_out, declared, guard, lengths};
use crate::config::{read_config, skrull_config};
use crate::error::Failure;
use crate::status::skrull_status;
use crate::workspace::{Carver, Layout};

/// What `skrull_dacp_place()` decided besides the placements (frozen layout, 8 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct skrull_dacp_summary {
    /// Sequences sharded over the CP group.
    pub sharded: u32,
    /// Rollbacks performed (local sequences turned sharded to free memory).
    pub rollbacks: u32,
}

const _: () = assert!(size_of::<skrull_dacp_summary>() == 8);

/// Runs DACP (the paper's distribution-aware context parallelism) on ONE micro-batch: for each
/// of its `n` sequences decides whether it stays whole on one CP rank or is sharded over the
/// CP group, keeping every GPU within `bucket_tokens`.
///
/// Uses `cp`, `bucket_tokens`, `victim`, `flops`, `shard_padding` and `model` of `config`
/// (`dp`, `policy` and `max_micro_batches` are range-checked but not used). Writes
/// `cp_ranks[k]` = `SKRULL_SHARDED` (-1) or the CP rank holding sequence k, for k < n, and
/// `*summary`. The workspace needs `skrull_workspace_size(n, dp, cp)` bytes, any alignment.
///
/// Returns `SKRULL_STATUS_DACP_FAILED` when the micro-batch cannot fit (even after every
/// rollback); `skrull_schedule()` never does, because GDS splits such micro-batches. The other
/// statuses and their order are those of `skrull_schedule()`. As there, `cp_ranks` is its
/// declared range (`cp_ranks_len` elements, not only the `n` written): it, `summary`, the
/// workspace and the lengths must not overlap, and it may not exceed `PTRDIFF_MAX` bytes or run
/// past the end of the address space (`SKRULL_STATUS_INVALID_ARG`). Outputs are written only
/// on success. No allocation, no state; thread-safe with separate workspaces and outputs.
///
/// # Safety
/// - `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are
///   readable; `lengths`, unless NULL, to `n` readable `uint32_t`.
/// - `workspace`, unless NULL, points to `workspace_size` writable bytes.
/// - `cp_ranks`, unless NULL, points to `cp_ranks_len` writable `int32_t`; `summary`, unless
///   NULL, to one writable `skrull_dacp_summary`.
/// - No other thread writes to these during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_dacp_place(
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    cp_ranks: *mut i32,
    cp_ranks_len: usize,
    summary: *mut skrull_dacp_summary,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe {
            place(
                config,
                lengths,
                n,
                workspace,
                workspace_size,
                cp_ranks,
                cp_ranks_len,
                summary,
            )
        };
        r.err().map_or(skrull_status::Ok, |f| f.status)
    })
}

/// The body of [`skrull_dacp_place`].
///
/// # Safety
/// As [`skrull_dacp_place`].
#[allow(clippy::too_many_arguments)]
unsafe fn place(
    config: *const skrull_config,
    lengths_ptr: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    cp_ranks: *mut i32,
    cp_ranks_len: usize,
    summary: *mut skrull_dacp_summary,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract for `config`.
    let cfg = unsafe { read_config(config) }?;
    let layout = Layout::new(n, cfg.dp, cfg.cp).ok_or_else(|| Failure::too_many_sequences(n))?;
    // SAFETY: forwarded caller contract for `lengths`.
    let lengths = unsafe { lengths(lengths_ptr, n) }?;
    if workspace.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if workspace_size < layout.bytes() {
        return Err(skrull_status::WorkspaceTooSmall.into());
    }
    if summary.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !summary.is_aligned() {
        return Err(skrull_status::InvalidArg.into());
    }
    let spans = [
        check_out(cp_ranks, cp_ranks_len, n)?,
        Span::of(summary.cast_const(), 1).ok_or(skrull_status::InvalidArg)?,
        declared(workspace.cast_const().cast::<u8>(), workspace_size)?,
        Span::of(lengths.as_ptr(), n).ok_or(skrull_status::InvalidArg)?,
    ];
    if any_overlap(&spans) {
        return Err(skrull_status::InvalidArg.into());
    }
    // SAFETY: non-null (checked), `workspace_size` writable bytes for the call (caller
    // contract), disjoint from the outputs (checked).
    let mut carver = unsafe { Carver::new(workspace.cast::<u8>(), workspace_size, layout.end()) }?;
    let order: &mut [u32] = carver.take(n)?;
    let staged: &mut [i32] = carver.take(n)?;
    let setup = skrull_core::Setup::without_models(&cfg)?;
    let outcome = skrull_core::policy::dacp::place(&setup, lengths, order, staged)?;
    // SAFETY: `cp_ranks` holds at least `n` aligned writable elements and `summary` one
    // (checked above, caller contract); neither overlaps the staging workspace (checked).
    unsafe {
        for (k, &r) in staged.iter().enumerate() {
            cp_ranks.add(k).write(r);
        }
        summary.write(skrull_dacp_summary {
            sharded: outcome.sharded,
            rollbacks: outcome.rollbacks,
        });
    }
    Ok(())
}
