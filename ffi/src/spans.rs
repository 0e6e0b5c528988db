//! Where the details of a failed call may go: the byte spans of the arguments a call was
//! given (parameter structs at their `struct_size`, the configuration and its cost model, the
//! buffers a plan struct lends), so that `skrull_error_info` is written only where it
//! overlaps none of them.

use crate::boundary::Span;
use crate::config::{CONFIG_SIZES, SKRULL_PRESET_QWEN2_5_0_5B, skrull_config};
use crate::error::{info_span, skrull_error_info};
use crate::plan::{PLAN_BUFFERS_SIZES, skrull_plan_buffers};
use crate::sized::{SKRULL_MAX_STRUCT_SIZE, read_lenient, read_sized};

/// The bytes a parameter struct that starts with `uint32_t struct_size` occupies: its
/// `struct_size` (at least 4, at most `SKRULL_MAX_STRUCT_SIZE + 1`) when it can be read, else
/// `size_of::<T>()`; empty for NULL.
///
/// # Safety
/// Unless NULL, `ptr` points to at least 4 readable bytes (its `struct_size`).
pub(crate) unsafe fn struct_span<T>(ptr: *const T) -> Span {
    if ptr.is_null() || !ptr.cast::<u32>().is_aligned() {
        return Span::clamped(ptr, 1);
    }
    // SAFETY: non-null, 4-byte aligned (checked), 4 readable bytes (contract).
    let size = unsafe { ptr.cast::<u32>().read() } as usize;
    let size = size.clamp(4, SKRULL_MAX_STRUCT_SIZE as usize + 1);
    Span::clamped(ptr.cast::<u8>(), size)
}

/// The regions of a configuration argument: the struct and the cost model it points at (at
/// `sizeof(skrull_cost_model)`: the pointer is not followed, since a refused configuration's
/// pointer need not be valid).
///
/// # Safety
/// As the `config` argument of the exports: unless NULL, a `skrull_config` whose
/// `struct_size` bytes are readable.
pub(crate) unsafe fn config_spans(config: *const skrull_config) -> [Span; 2] {
    let cost = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B)
        // SAFETY: forwarded caller contract.
        .and_then(|default| unsafe { read_lenient(config, &CONFIG_SIZES, default) })
        .map_or(core::ptr::null(), |c| c.cost_model);
    // SAFETY: forwarded caller contract.
    [unsafe { struct_span(config) }, Span::clamped(cost, 1)]
}

/// Where the details of a failed call that took `plan` go: its `error` pointer when the
/// struct is readable, carries one, and the target is aligned and overlaps neither the plan
/// struct, any buffer it lends (each at its declared capacity, cut at the end of the address
/// space when that capacity does not fit), nor any of `others` (every other region the caller
/// gave: the configuration and its cost model, the lengths, the workspace, the outputs of a
/// layout call); NULL otherwise. So the details are never written into an argument, whatever
/// status the call returns.
///
/// # Safety
/// As the `plan` (or `out`) argument of the export: unless NULL, `plan` points to a
/// `skrull_plan_buffers` whose `struct_size` bytes are readable.
pub(crate) unsafe fn target(
    plan: *const skrull_plan_buffers,
    others: &[Span],
) -> *mut skrull_error_info {
    let none = core::ptr::null_mut();
    // SAFETY: forwarded caller contract.
    let Ok(b) = (unsafe { read_sized(plan, &PLAN_BUFFERS_SIZES, skrull_plan_buffers::EMPTY) })
    else {
        return none;
    };
    let Ok(Some(span)) = info_span(b.error) else {
        return none;
    };
    let lent = [
        // SAFETY: forwarded caller contract.
        unsafe { struct_span(plan) },
        Span::clamped(b.placements, b.placements_len),
        Span::clamped(b.micro_batches, b.micro_batches_len),
        Span::clamped(b.members, b.members_len),
        Span::clamped(b.rank_tokens, b.rank_tokens_len),
        Span::clamped(b.micro_batches_per_dp, b.micro_batches_per_dp_len),
        Span::clamped(b.summary, 1),
        Span::clamped(b.cp_groups, b.cp_groups_len),
    ];
    if lent.iter().chain(others).any(|s| s.overlaps(span)) {
        return none;
    }
    b.error
}

/// `error` when it may be written: non-null, aligned and overlapping none of `others`; NULL
/// otherwise.
pub(crate) fn details_target(
    error: *mut skrull_error_info,
    others: &[Span],
) -> *mut skrull_error_info {
    match info_span(error) {
        Ok(Some(span)) if !others.iter().any(|s| s.overlaps(span)) => error,
        _ => core::ptr::null_mut(),
    }
}
