//! `skrull_schedule()`: check every argument, run the core scheduler into workspace staging,
//! then copy the plan into the caller's buffers.

use core::ffi::c_void;

use skrull_core::plan::{CHUNKED, SHARDED};
use skrull_core::{Config, Plan, PlanBuffers, Setup, Workspace};

use crate::boundary::{Span, any_overlap, check_out, declared, guard, lengths};
use crate::config::{read_config, skrull_config};
use crate::error::{Failure, finish, info_span};
use crate::plan::{
    PLAN_BUFFERS_SIZES, skrull_cp_group, skrull_micro_batch, skrull_placement, skrull_plan_buffers,
    skrull_summary,
};
use crate::sized::read_sized;
use crate::spans::{config_spans, target};
use crate::status::skrull_status;
use crate::workspace::{Carver, Layout};

/// Plans one global batch: every sequence's DP rank, micro-batch and placement (local on one
/// CP rank, or sharded over the CP group, or with `skrull_config.subgroups` over an aligned
/// sub-group of it, or with `chunk_size` run as chunks on a group), the micro-batch table grouped by (DP rank, micro-batch), per-GPU token
/// loads and a summary.
///
/// Every rank of a training job may call this with the same configuration and lengths and
/// gets a bit-identical plan (integer arithmetic only), so no broadcast is needed.
///
/// Arguments, in order: the configuration; `n` sequence lengths in tokens (`lengths` may be
/// NULL when `n` is 0); a scratch workspace of at least `skrull_workspace_size(n, dp, cp)`
/// bytes, any alignment, contents ignored and unspecified afterwards; the output buffers (see
/// `skrull_plan_buffers`, sized with `skrull_plan_sizes()`).
///
/// Outputs are written only when `SKRULL_STATUS_OK` is returned; on any error every output
/// buffer is left exactly as it was (the workspace may have been overwritten). When several
/// problems exist the first in this order is reported (`docs/c_api.md`, "The order of
/// checks"): `config` (NULL, not 4-byte aligned, struct size, not aligned for its size class,
/// option integers in field order, the cost model struct, then ranges
/// `INVALID_DP`, `INVALID_CP`, `INVALID_BUCKET`, `INVALID_PAD_MULTIPLE`, `INVALID_MODEL`,
/// `INVALID_COST_MODEL`, `INVALID_CHUNKING`, `MICRO_BATCH_LIMIT` for a fixed `micro_batches` above a nonzero
/// `max_micro_batches`, `UNSUPPORTED_OPTION`), `out` (NULL, not 4-byte aligned, struct size,
/// misaligned, reserved field), `TOO_MANY_SEQUENCES`, `lengths`, `workspace` (NULL, then
/// `WORKSPACE_TOO_SMALL`), the summary pointer, each output buffer in field order, `cp_groups`
/// last (NULL with a nonzero capacity, or `cp_groups` NULL when `subgroups` is 1 or
/// `chunk_size` above 0; misaligned or
/// an impossible declared range, then `OUTPUT_TOO_SMALL`), the workspace's declared range,
/// overlapping declared ranges (outputs, workspace and lengths; see `skrull_plan_buffers`), the
/// error details (misaligned or overlapping another argument), then the batch's own errors
/// (`EMPTY_SEQUENCE`, `LENGTH_OUT_OF_RANGE`, `SEQUENCE_TOO_LONG`: the first offending
/// sequence in input order), `CHUNK_OVER_BUDGET` (a chunked sequence whose peak exceeds
/// BucketSize), `MICRO_BATCH_LIMIT` and `MICRO_BATCH_COUNT`. The error details
/// are written only
/// where they overlap no argument (see `skrull_error_info`).
///
/// It never allocates, keeps no state between calls, and is safe to call from many threads at
/// once as long as each call has its own workspace and output buffers (the configuration and
/// lengths may be shared).
///
/// # Safety
/// - `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are
///   readable.
/// - `lengths`, unless NULL, points to `n` readable `uint32_t`.
/// - `workspace`, unless NULL, points to `workspace_size` writable bytes.
/// - `out`, unless NULL, points to a `skrull_plan_buffers` whose `struct_size` bytes are
///   readable, and each of its pointers, unless NULL, points to the number of writable
///   elements its `_len` field states.
/// - No other thread writes to `config` or `lengths`, or touches the workspace or the output
///   buffers, during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_schedule(
    config: *const skrull_config,
    lengths: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_plan_buffers,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe { schedule(config, lengths, n, workspace, workspace_size, out) };
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
        ];
        // SAFETY: forwarded caller contract for `out`; the target is checked in `target`.
        unsafe { finish(r, target(out, &others)) }
    })
}

/// The body of [`skrull_schedule`].
///
/// # Safety
/// As [`skrull_schedule`].
unsafe fn schedule(
    config: *const skrull_config,
    lengths_ptr: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_plan_buffers,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract for `config`.
    let cfg = unsafe { read_config(config) }?;
    // `read_config` validated it; this derives what the policy needs for this one call.
    let setup = Setup::single_use(&cfg)?;
    // SAFETY: forwarded caller contract.
    unsafe { schedule_with(&setup, lengths_ptr, n, workspace, workspace_size, out) }
}

/// [`skrull_schedule`] after the configuration: the same checks, in the same order, from
/// `out` on.
///
/// # Safety
/// As [`skrull_schedule`] for every argument but the configuration.
pub(crate) unsafe fn schedule_with(
    setup: &Setup,
    lengths_ptr: *const u32,
    n: usize,
    workspace: *mut c_void,
    workspace_size: usize,
    out: *const skrull_plan_buffers,
) -> Result<(), Failure> {
    let cfg = *setup.config();
    // SAFETY: forwarded caller contract for `out`.
    let bufs = unsafe { read_sized(out, &PLAN_BUFFERS_SIZES, skrull_plan_buffers::EMPTY) }?;
    if bufs._reserved != 0 {
        return Err(skrull_status::InvalidArg.into());
    }
    let layout = Layout::new(n, cfg.dp, cfg.cp).ok_or_else(|| Failure::too_many_sequences(n))?;
    // SAFETY: forwarded caller contract for `lengths`.
    let lengths = unsafe { lengths(lengths_ptr, n) }?;
    if workspace.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if workspace_size < layout.bytes() {
        return Err(skrull_status::WorkspaceTooSmall.into());
    }
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    if bufs.summary.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    if !bufs.summary.is_aligned() {
        return Err(skrull_status::InvalidArg.into());
    }
    let groups_needed = if bufs.cp_groups.is_null() { 0 } else { n };
    let spans = [
        check_out(bufs.placements, bufs.placements_len, n)?,
        check_out(bufs.micro_batches, bufs.micro_batches_len, n)?,
        check_out(bufs.members, bufs.members_len, n)?,
        check_out(bufs.rank_tokens, bufs.rank_tokens_len, n * cp)?,
        check_out(bufs.micro_batches_per_dp, bufs.micro_batches_per_dp_len, dp)?,
        // With sub-groups or chunking the groups are required (`cp_rank` -1 or -2 alone no
        // longer says which ranks hold a sequence), checked in field order like every other
        // buffer; without, they are written when given.
        if (cfg.subgroups || cfg.chunking.is_on()) && bufs.cp_groups.is_null() {
            return Err(skrull_status::NullArg.into());
        } else {
            check_out(bufs.cp_groups, bufs.cp_groups_len, groups_needed)?
        },
        Span::of(bufs.summary.cast_const(), 1).ok_or(skrull_status::InvalidArg)?,
        declared(workspace.cast_const().cast::<u8>(), workspace_size)?,
        Span::of(lengths.as_ptr(), n).ok_or(skrull_status::InvalidArg)?,
    ];
    if any_overlap(&spans) {
        return Err(skrull_status::InvalidArg.into());
    }
    if let Some(e) = info_span(bufs.error)?
        && spans.iter().any(|s| s.overlaps(e))
    {
        return Err(Failure::silent(skrull_status::InvalidArg));
    }
    // SAFETY: `workspace` is non-null (checked) and, by the caller contract, `workspace_size`
    // writable bytes that nothing else touches during the call; it overlaps no output
    // (checked).
    let mut carver = unsafe { Carver::new(workspace.cast::<u8>(), workspace_size, layout.end()) }?;
    let r = layout.carve(&mut carver)?;
    let mut ws = Workspace::new(r.slab);
    let staged = PlanBuffers {
        placements: r.placements,
        micro_batches: r.micro_batches,
        members: r.members,
        rank_tokens: r.rank_tokens,
        micro_batches_per_dp: r.micro_batches_per_dp,
    };
    let plan = skrull_core::schedule(setup, lengths, &mut ws, staged)?;
    // SAFETY: every output pointer was checked non-null (or needed 0 elements), aligned, of
    // sufficient capacity and disjoint from the staging workspace and the other outputs; the
    // caller guarantees they are writable.
    unsafe { copy_out(&cfg, lengths, &plan, &bufs) };
    Ok(())
}

/// Copies a finished plan into the caller's buffers (the only writes to them).
///
/// # Safety
/// Every buffer of `bufs` must be writable for what the plan needs (at least `n` placements,
/// micro-batches and members, `micro_batches * cp` rank-token entries, `dp` counts, one
/// summary, and `n` groups unless `cp_groups` is NULL), aligned, and disjoint from `plan`'s
/// storage.
unsafe fn copy_out(cfg: &Config, lengths: &[u32], plan: &Plan<'_>, bufs: &skrull_plan_buffers) {
    let budget = cfg.budget();
    // SAFETY: every write below is in bounds (the capacities were checked against `n`,
    // `n * cp` and `dp`, which bound the plan's slices), aligned and writable (function
    // contract).
    unsafe {
        for (i, (p, &len)) in plan.placements().iter().zip(lengths).enumerate() {
            let group = p.group(cfg.cp);
            let tokens_per_gpu = if p.cp_rank == SHARDED {
                budget.for_group(group.size).share(len)
            } else if p.cp_rank == CHUNKED {
                // At most BucketSize (the plan is checked), so it fits 32 bits.
                let peak = budget.chunked(&cfg.chunking, len, group.size);
                u32::try_from(peak).unwrap_or(u32::MAX)
            } else {
                budget.local(len)
            };
            bufs.placements.add(i).write(skrull_placement {
                dp_rank: p.dp_rank,
                micro_batch: p.micro_batch,
                cp_rank: p.cp_rank,
                tokens_per_gpu,
            });
            if !bufs.cp_groups.is_null() {
                bufs.cp_groups.add(i).write(skrull_cp_group {
                    first: group.first,
                    size: group.size,
                });
            }
        }
        for (i, mb) in plan.micro_batches().iter().enumerate() {
            bufs.micro_batches.add(i).write(skrull_micro_batch {
                dp_rank: mb.dp_rank,
                index: mb.index,
                first: mb.first,
                count: mb.count,
            });
        }
        for (i, &m) in plan.members().iter().enumerate() {
            bufs.members.add(i).write(m);
        }
        let cp = cfg.cp as usize;
        for g in 0..plan.micro_batches().len() {
            for (r, &t) in plan.rank_tokens(g).iter().enumerate() {
                bufs.rank_tokens.add(g * cp + r).write(t);
            }
        }
        for (d, &c) in plan.micro_batches_per_dp().iter().enumerate() {
            bufs.micro_batches_per_dp.add(d).write(c);
        }
        let s = plan.summary();
        bufs.summary.write(skrull_summary {
            total_tokens: s.total_tokens,
            sequences: lengths.len() as u32,
            micro_batches: s.micro_batches,
            sharded: s.sharded,
            rollbacks: s.rollbacks,
            peak_rank_tokens: s.peak_rank_tokens,
            _reserved: 0,
        });
    }
}
