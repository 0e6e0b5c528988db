//! `skrull_layout_fill_many`: several GPUs' layouts of one plan in one call, the plan
//! validated once (a trainer lays out every micro-batch of its GPU each step; one call per
//! micro-batch validates the whole plan each time).

use core::ffi::c_void;

use crate::boundary::{Span, declared, guard};
use crate::config::skrull_config;
use crate::error::{Failure, finish, skrull_error_info};
use crate::layout::{
    check_gpu, input, out_regions, read_head, read_lengths, read_out, read_plan, skrull_gpu,
    skrull_layout_buffers, write_gpu,
};
use crate::plan::skrull_plan_buffers;
use crate::spans::{config_spans, target};
use crate::status::skrull_status;

/// Fills the layouts of `count` GPUs of one plan: `*outs[k]` with the layout of `gpus[k]`,
/// exactly as `skrull_layout_fill(config, lengths, n, plan, gpus[k], workspace,
/// workspace_size, outs[k])` would, but validating the plan once for all of them. Lay out
/// every micro-batch of a GPU per step with one call.
///
/// `gpus` holds `count` GPUs and `outs` `count` pointers to `skrull_layout_buffers` (each
/// sized as for `skrull_layout_fill()`, e.g. from `skrull_layout_sizes()` or
/// `skrull_layout_sizes_max()`). The workspace is `skrull_layout_fill()`'s. Every GPU is
/// checked before anything is written, so on any error no output is touched.
///
/// Statuses, first problem first: `config` and `plan` (as `skrull_layout_fill()`), `gpus`
/// (NULL with a nonzero `count`, misaligned), `outs` (the same), each `outs[k]` in order
/// (NULL, misaligned, struct size, reserved field), `lengths`, the plan and the workspace (as
/// `skrull_layout_fill()`), then every GPU in order as `skrull_layout_fill()` checks its GPU
/// and outputs (`NO_SUCH_GPU`, `LAYOUT_OVERFLOW`, `out->layout`, each buffer, overlaps), where
/// an output must not overlap the `gpus` or `outs` arrays either. Outputs of different GPUs
/// must not overlap each other or another GPU's `skrull_layout_buffers`; where they do, the
/// call stays memory-safe (each GPU is checked again just before it is written) but what they
/// hold afterwards is unspecified. `count = 0` validates the plan and writes nothing. No
/// allocation, no state; thread-safe with separate workspaces and outputs.
///
/// # Safety
/// - As `skrull_layout_fill()` for `config`, `lengths`, `plan` and `workspace`.
/// - `gpus`, unless NULL, points to `count` readable `skrull_gpu`; `outs`, unless NULL, to
///   `count` readable pointers, each NULL or pointing to a `skrull_layout_buffers` that meets
///   `skrull_layout_fill()`'s contract for `out`.
/// - No other thread touches any of these during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_layout_fill_many(
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    plan: *const skrull_plan_buffers,
    gpus: *const skrull_gpu,
    count: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    outs: *const *const skrull_layout_buffers,
) -> skrull_status {
    guard(|| {
        let call = Call {
            config,
            lengths,
            n,
            plan,
            gpus,
            count,
            workspace,
            workspace_size,
            outs,
        };
        // SAFETY: forwarded caller contract.
        let r = unsafe { fill_many(&call) };
        if r.is_ok() {
            return skrull_status::Ok;
        }
        // SAFETY: forwarded caller contract; the target is checked in `details_target`.
        unsafe { finish(r, details_target(&call)) }
    })
}

/// Where a failed call's error details go: `plan->error` unless it overlaps any argument
/// (the configuration and its cost model, the lengths, the workspace, the `gpus` and `outs`
/// arrays, every `outs[k]` and each buffer it names, the plan); NULL otherwise.
///
/// # Safety
/// As [`skrull_layout_fill_many`] for every pointer of `call`.
unsafe fn details_target(call: &Call) -> *mut skrull_error_info {
    // SAFETY: forwarded caller contract.
    let [cfg, cost] = unsafe { config_spans(call.config) };
    let others = [
        cfg,
        cost,
        Span::clamped(call.lengths, call.n),
        Span::clamped(
            call.workspace.cast_const().cast::<u8>(),
            call.workspace_size,
        ),
        Span::clamped(call.gpus, call.count),
        Span::clamped(call.outs, call.count),
    ];
    // SAFETY: forwarded caller contract for `plan`.
    let t = unsafe { target(call.plan, &others) };
    if t.is_null() || call.outs.is_null() {
        return t;
    }
    let details = Span::clamped(t.cast_const(), 1);
    for k in 0..call.count {
        // SAFETY: `outs`, not NULL, points to `count` readable pointers (caller contract);
        // read unaligned, since the call may have failed on its alignment.
        let out = unsafe { call.outs.add(k).read_unaligned() };
        // SAFETY: each pointer meets `skrull_layout_fill()`'s contract for `out`.
        if unsafe { out_regions(out) }
            .iter()
            .any(|r| r.overlaps(details))
        {
            return core::ptr::null_mut();
        }
    }
    t
}

/// The arguments of one [`skrull_layout_fill_many`] call.
struct Call {
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    plan: *const skrull_plan_buffers,
    gpus: *const skrull_gpu,
    count: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    outs: *const *const skrull_layout_buffers,
}

/// The body of [`skrull_layout_fill_many`].
///
/// # Safety
/// As [`skrull_layout_fill_many`] for every pointer of `call`.
unsafe fn fill_many(call: &Call) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let (setup, bufs) = unsafe { read_head(call.config, call.plan) }?;
    // SAFETY: `count` readable GPUs unless NULL (caller contract).
    let (gpus, gpus_span) = unsafe { input(call.gpus, call.count, call.count) }?;
    // SAFETY: `count` readable pointers unless NULL (caller contract).
    let (outs, outs_span) = unsafe { input(call.outs, call.count, call.count) }?;
    for &out in outs {
        // SAFETY: each pointer meets `skrull_layout_fill()`'s contract for `out`.
        unsafe { read_out(out) }?;
    }
    // SAFETY: forwarded caller contract.
    let lengths = unsafe { read_lengths(call.lengths, call.n) }?;
    // SAFETY: forwarded caller contract.
    let mut p = unsafe { read_plan(&setup, lengths, &bufs, call.workspace, call.workspace_size) }?;
    let ws = declared(
        call.workspace.cast_const().cast::<u8>(),
        call.workspace_size,
    )?;
    let more = [gpus_span, outs_span];
    // Every GPU is checked before anything is written.
    let (mut most_spans, mut most_passes) = (2 * call.n, 0);
    for (&gpu, &out) in gpus.iter().zip(outs) {
        // SAFETY: as above (nothing was written yet).
        let o = unsafe { read_out(out) }?;
        let c = check_gpu(&setup, lengths, &p, &bufs, &o, gpu, ws, &more)?;
        (most_spans, most_passes) = (most_spans.max(c.spans), most_passes.max(c.passes));
    }
    // The spans of one GPU at a time, staged in the same workspace region (a GPU's layout
    // has at most `2n` spans, what the workspace holds, unless it has a chunked group).
    let staging = p.carver.take(most_spans)?;
    let pass_staging = p.carver.take(most_passes)?;
    for (&gpu, &out) in gpus.iter().zip(outs) {
        // Read and checked again: an earlier GPU's outputs may overlap this GPU's struct
        // (a caller error that leaves outputs unspecified, never an unchecked write).
        // SAFETY: as above.
        let o = unsafe { read_out(out) }?;
        let c = check_gpu(&setup, lengths, &p, &bufs, &o, gpu, ws, &more)?;
        let staged = staging.get_mut(..c.spans).ok_or(skrull_status::Internal)?;
        let passes = pass_staging
            .get_mut(..c.passes)
            .ok_or(skrull_status::Internal)?;
        // SAFETY: `check_gpu` passed for `o` (caller contract: its buffers are writable).
        unsafe { write_gpu(&setup, lengths, &p.plan, &o, &c, staged, passes) }?;
    }
    Ok(())
}
