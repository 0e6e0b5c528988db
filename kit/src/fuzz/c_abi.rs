//! The `c_abi` fuzz target: one `skrull_schedule()` call from fuzz bytes ([`decode`]), with at
//! most one malformation of the call. It must return a valid status, write nothing outside the
//! buffers (guards on both sides) and nothing at all on failure, fail a well-formed call
//! exactly as the Rust API does, and on success write a plan that passes the independent C
//! checker and equals the Rust API's ([`rust_plan`]). A broken promise panics.

use core::ffi::c_void;
use core::ptr::{null, null_mut};

use skrull::skrull_workspace_size;
use skrull::{skrull_config, skrull_plan_buffers, skrull_schedule, skrull_status};
use skrull_core::config::{MAX_CP, MAX_DP};
use skrull_core::{Config, Error, MicroBatch, Placement};

use super::decode::{Perturb, decode};
use crate::OwnedBuffers;
use crate::c_check::{CPlan, check_c_plan, check_rust_plan, core_micro_batch, core_placement};
use crate::guarded::{FILL_E, FILL_G, FILL_MB, FILL_P, FILL_S, Guarded};

/// The `skrull_config` sizes below the current one that end on a field boundary (version 1's
/// 60 bytes, then after each appended field: `pad_multiple`, `pad_local`, `lockstep`,
/// `cost_model`, `subgroups`, `fill_empty`, `micro_batches`, `chunk_size`, `chunk_keep`):
/// written out here, not read from the library.
const CONFIG_STRUCT_SIZES: [usize; 10] = [60, 64, 68, 72, 80, 84, 88, 92, 96, 100];

/// The `skrull_plan_buffers` sizes the library accepts below the current one: version 1 (96
/// bytes: everything before `error`) and the one that ends after `error` (104).
const OUT_STRUCT_SIZES: [usize; 2] = [96, 104];

// The configuration-tail perturbation writes past the struct inside a 128-byte buffer.
const _: () = assert!(size_of::<skrull_config>() < 128);

/// Statuses `skrull_schedule()` must never return.
fn assert_valid_schedule_status(st: skrull_status) {
    assert!(
        !matches!(
            st,
            skrull_status::Panic | skrull_status::Internal | skrull_status::DacpFailed
        ),
        "skrull_schedule returned {st:?}"
    );
    assert!(skrull_status::from_u32(st as u32) == Some(st));
}

/// The Rust API's plan for a core configuration: placements, micro-batch counts, table,
/// members and rank tokens, after the independent checker and the core checker passed.
pub type RustPlan = (
    Vec<Placement>,
    Vec<u32>,
    Vec<MicroBatch>,
    Vec<u32>,
    Vec<u32>,
);

/// Plans through the Rust API with exactly sized buffers, checking any plan it returns.
pub fn rust_plan(cfg: &Config, lengths: &[u32]) -> Result<RustPlan, Error> {
    let n = lengths.len();
    cfg.validate()?;
    if n > skrull_core::config::MAX_SEQS {
        return Err(Error::TooManySequences {
            count: n,
            max: skrull_core::config::MAX_SEQS,
        });
    }
    let mut bufs = OwnedBuffers::for_batch(n, cfg);
    let plan = bufs.schedule_no_grow(cfg, lengths)?;
    if let Err(e) = check_rust_plan(cfg, lengths, &plan) {
        panic!("Rust API plan fails the independent check: {e}");
    }
    if let Err(e) = skrull_core::plan::check(&crate::setup_of(cfg), lengths, &plan) {
        panic!("Rust API plan fails the core check: {e:?}");
    }
    let mbs = plan.micro_batches().to_vec();
    let rt: Vec<u32> = (0..mbs.len())
        .flat_map(|g| plan.rank_tokens(g).to_vec())
        .collect();
    Ok((
        plan.placements().to_vec(),
        plan.micro_batches_per_dp().to_vec(),
        mbs,
        plan.members().to_vec(),
        rt,
    ))
}

/// One `skrull_schedule()` call from fuzz bytes: asserts the checker and equality with the
/// Rust API on success, a valid status on failure, untouched guards always and untouched
/// outputs on failure. Returns the status.
pub fn c_abi(data: &[u8]) -> skrull_status {
    let input = decode(data);
    let (mut c, lengths, perturb) = (input.cfg, input.lengths.clone(), input.perturb);
    // The caller's cost model lives here through the call.
    let cost = input.cost;
    if let Some(m) = &cost {
        c.cost_model = m;
    }
    let n = lengths.len();
    let (dp, cp) = (
        c.dp.clamp(1, MAX_DP) as usize,
        c.cp.clamp(1, MAX_CP) as usize,
    );
    // SAFETY: no preconditions.
    let ws_bytes = unsafe { skrull_workspace_size(n, dp as u32, cp as u32) };

    // The configuration inside a zeroed, aligned 4 KiB + buffer, so any struct_size up to
    // 4097 stays readable.
    let mut cfg_mem = vec![0u64; 4104 / 8 + 1];
    // SAFETY: `cfg_mem` is 8-aligned and larger than a skrull_config.
    unsafe { cfg_mem.as_mut_ptr().cast::<skrull_config>().write(c) };
    let mut must_fail = false;
    // The configuration size the library reads (a smaller one drops the later fields).
    let read_as = match perturb {
        Perturb::ConfigStructSize(s) => s,
        Perturb::V1ConfigAtFour => 60,
        _ => u32::MAX,
    };
    let mut cfg_ptr = cfg_mem.as_ptr().cast::<skrull_config>();
    match perturb {
        Perturb::ConfigTail(k) => {
            cfg_mem[0] = (cfg_mem[0] & !0xFFFF_FFFF) | 128;
            // A byte past the struct as this library knows it (not past version 1's 60
            // bytes: the struct grew, and those bytes are fields now).
            let known = size_of::<skrull_config>();
            let bytes = cfg_mem.as_mut_ptr().cast::<u8>();
            // SAFETY: known + (127 - known) < 128 < the buffer's size (known < 128 is checked
            // at compile time below).
            unsafe { bytes.add(known + usize::from(k) % (128 - known)).write(1) };
            must_fail = true;
        }
        Perturb::V1ConfigAtFour => {
            let mut v1 = c;
            v1.struct_size = 60;
            cfg_mem.fill(0);
            let at = cfg_mem.as_mut_ptr().cast::<u8>().wrapping_add(4);
            // SAFETY: 60 bytes of `v1` into the zeroed buffer at byte 4 (it holds 4 KiB).
            unsafe { core::ptr::copy_nonoverlapping((&raw const v1).cast::<u8>(), at, 60) };
            cfg_ptr = at.cast_const().cast::<skrull_config>();
        }
        Perturb::ConfigStructSize(s) => {
            cfg_mem[0] = (cfg_mem[0] & !0xFFFF_FFFF) | u64::from(s);
            // Accepted: a size that ends on a field boundary, or a larger one up to 4096
            // (its tail is zero here).
            let known = size_of::<skrull_config>();
            let boundary = CONFIG_STRUCT_SIZES.contains(&(s as usize));
            must_fail = !(boundary || (known..=4096).contains(&(s as usize)));
        }
        _ => {}
    }

    let mut placements = Guarded::new(n, FILL_P);
    let mut micro_batches = Guarded::new(n, FILL_MB);
    let mut members = Guarded::new(n, 0xDEAD_BEEFu32);
    let mut rank_tokens = Guarded::new(n * cp, 0xDEAD_BEEFu32);
    let mut per_dp = Guarded::new(dp, 0xDEAD_BEEFu32);
    let mut summary = Guarded::new(1, FILL_S);
    let mut groups = Guarded::new(n, FILL_G);
    let mut details = Guarded::new(1, FILL_E);
    let mut workspace = Guarded::new(ws_bytes + 1, 0xA5u8);
    let lens = lengths.clone();

    let mut ws_len = ws_bytes;
    let mut ws_ptr = workspace.ptr();
    let mut lens_ptr = lens.as_ptr();
    let mut out = skrull_plan_buffers {
        struct_size: size_of::<skrull_plan_buffers>() as u32,
        _reserved: 0,
        placements: placements.ptr(),
        placements_len: n,
        micro_batches: micro_batches.ptr(),
        micro_batches_len: n,
        members: members.ptr(),
        members_len: n,
        rank_tokens: rank_tokens.ptr(),
        rank_tokens_len: n * cp,
        micro_batches_per_dp: per_dp.ptr(),
        micro_batches_per_dp_len: dp,
        summary: summary.ptr(),
        error: if input.error_details {
            details.ptr()
        } else {
            null_mut()
        },
        cp_groups: groups.ptr(),
        cp_groups_len: n,
    };
    match perturb {
        Perturb::WorkspaceShort(_) => {
            ws_len = ws_len.saturating_sub(1);
            must_fail = ws_bytes > 0;
        }
        Perturb::OddWorkspace => ws_ptr = ws_ptr.wrapping_add(1),
        Perturb::OutputShort(w) => {
            let len = match w % 6 {
                0 => &mut out.placements_len,
                1 => &mut out.micro_batches_len,
                2 => &mut out.members_len,
                3 => &mut out.rank_tokens_len,
                4 => &mut out.micro_batches_per_dp_len,
                _ => &mut out.cp_groups_len,
            };
            if *len > 0 {
                *len -= 1;
                must_fail = true;
            }
        }
        Perturb::Null(w) => match w % 9 {
            0 => {
                out.placements = null_mut();
                must_fail = n > 0;
            }
            1 => {
                out.micro_batches = null_mut();
                must_fail = n > 0;
            }
            2 => {
                out.members = null_mut();
                must_fail = n > 0;
            }
            3 => {
                out.rank_tokens = null_mut();
                must_fail = n > 0;
            }
            4 => {
                out.micro_batches_per_dp = null_mut();
                must_fail = true;
            }
            5 => {
                out.summary = null_mut();
                must_fail = true;
            }
            6 => {
                ws_ptr = null_mut();
                must_fail = true;
            }
            7 => {
                lens_ptr = null();
                must_fail = n > 0;
            }
            // No groups, as a caller without them passes it (NULL, capacity 0): optional
            // without sub-groups, required with them.
            _ => (out.cp_groups, out.cp_groups_len) = (null_mut(), 0),
        },
        Perturb::OutStructSize(s) => {
            out.struct_size = s;
            // Version 1 (the error pointer absent), version 1 and the error pointer (the
            // groups absent), or the current size up to 4096.
            must_fail = !(OUT_STRUCT_SIZES.contains(&(s as usize))
                || (size_of::<skrull_plan_buffers>()..=4096).contains(&(s as usize)));
        }
        Perturb::OutReserved => {
            out._reserved = 1;
            must_fail = true;
        }
        Perturb::DetailsOnOutput(w) => {
            out.error = if w % 2 == 0 {
                out.micro_batches_per_dp.cast()
            } else {
                out.summary.cast()
            };
            must_fail = true;
        }
        Perturb::GroupsNullPerDpShort => {
            (out.cp_groups, out.cp_groups_len) = (null_mut(), 0);
            out.micro_batches_per_dp_len -= 1;
            must_fail = true;
        }
        _ => {}
    }
    // `out` inside a zeroed 4 KiB + buffer too (its struct_size may be up to 4097).
    let mut out_mem = vec![0u64; 4104 / 8 + 1];
    // SAFETY: `out_mem` is 8-aligned and larger than a skrull_plan_buffers.
    unsafe {
        out_mem
            .as_mut_ptr()
            .cast::<skrull_plan_buffers>()
            .write(out)
    };

    // SAFETY: every pointer is NULL or valid for the length it is given; config and out are
    // readable for any struct_size up to 4104 bytes.
    let st = unsafe {
        skrull_schedule(
            cfg_ptr,
            lens_ptr,
            n,
            ws_ptr.cast::<c_void>(),
            ws_len,
            out_mem.as_ptr().cast::<skrull_plan_buffers>(),
        )
    };
    assert_valid_schedule_status(st);
    if perturb == Perturb::GroupsNullPerDpShort {
        // The short micro_batches_per_dp comes before cp_groups in the field order, and no
        // other pointer is NULL.
        assert_ne!(
            st,
            skrull_status::NullArg,
            "cp_groups checked before its turn"
        );
    }
    assert_eq!(lens, lengths, "lengths were written");
    workspace.untouched_from(ws_bytes + 1, "workspace");
    // The groups reach the library when the struct is large enough to carry them.
    let out_size = out.struct_size as usize;
    let groups_given = !out.cp_groups.is_null() && out_size >= size_of::<skrull_plan_buffers>();
    // Sub-groups and chunking need them (a smaller configuration struct drops both).
    let subgroups_read = input
        .core_config_sized(read_as)
        .is_ok_and(|cfg| cfg.subgroups || cfg.chunking.is_on());
    if subgroups_read && !groups_given {
        must_fail = true;
    }
    // The details are written exactly when the call fails and its plan-buffers struct has an
    // accepted size that carries the pointer: a perturbed struct_size may end before it, or
    // inside a later field (refused, so the pointer is not read either).
    let reported = input.error_details
        && st != skrull_status::Ok
        && (out_size == OUT_STRUCT_SIZES[1]
            || (size_of::<skrull_plan_buffers>()..=4096).contains(&out_size))
        && !matches!(perturb, Perturb::OutReserved | Perturb::DetailsOnOutput(_));
    if reported {
        details.untouched_from(1, "error details");
        assert_eq!(details.body()[0].status, st as u32, "error details' status");
    } else if !matches!(perturb, Perturb::OutReserved) {
        // Success, no details asked for, or no accepted place to read the pointer from.
        details.untouched_from(0, "error details");
    }
    if st != skrull_status::Ok {
        placements.untouched_from(0, "placements");
        micro_batches.untouched_from(0, "micro_batches");
        members.untouched_from(0, "members");
        rank_tokens.untouched_from(0, "rank_tokens");
        per_dp.untouched_from(0, "micro_batches_per_dp");
        summary.untouched_from(0, "summary");
        groups.untouched_from(0, "cp_groups");
        if matches!(
            perturb,
            Perturb::None | Perturb::OddWorkspace | Perturb::V1ConfigAtFour
        ) {
            // A well-formed call fails exactly as the Rust API does.
            let core = input.core_config_sized(read_as);
            match core {
                Err(e) => assert_eq!(st, e, "option integer error"),
                Ok(cfg) => {
                    let r = rust_plan(&cfg, &lengths);
                    match r {
                        Ok(_) => panic!("C failed with {st:?}, the Rust API planned"),
                        Err(e) => assert_eq!(st, skrull_status::from(e), "Rust API said {e:?}"),
                    }
                }
            }
        }
        return st;
    }
    assert!(!must_fail, "malformed call {perturb:?} returned OK");
    let cfg = input
        .core_config_sized(read_as)
        .expect("OK implies a valid configuration");
    let s = summary.body()[0];
    let mbs = s.micro_batches as usize;
    placements.untouched_from(n, "placements");
    micro_batches.untouched_from(mbs, "micro_batches");
    members.untouched_from(n, "members");
    rank_tokens.untouched_from(mbs * cp, "rank_tokens");
    per_dp.untouched_from(dp, "micro_batches_per_dp");
    summary.untouched_from(1, "summary");
    groups.untouched_from(if groups_given { n } else { 0 }, "cp_groups");
    let plan = CPlan {
        placements: placements.body(),
        micro_batches: micro_batches.body(),
        members: members.body(),
        rank_tokens: rank_tokens.body(),
        per_dp: per_dp.body(),
        summary: &s,
        cp_groups: groups_given.then(|| groups.body()),
    };
    if let Err(e) = check_c_plan(&cfg, &lengths, &plan) {
        panic!("C plan fails the checker: {e}");
    }
    let rust = match rust_plan(&cfg, &lengths) {
        Ok(p) => p,
        Err(e) => panic!("C planned, the Rust API failed with {e:?}"),
    };
    assert_eq!(
        rust,
        c_as_rust(&plan, cp),
        "C plan differs from the Rust API's"
    );
    st
}

/// The C plan in the Rust API's types (for equality): a sub-group from `cp_groups` becomes the
/// placement's `cp_first` and `cp_size`, as the Rust API writes them.
pub fn c_as_rust(p: &CPlan<'_>, cp: usize) -> RustPlan {
    let n = p.summary.sequences as usize;
    let mbs = p.summary.micro_batches as usize;
    let group = |i: usize| p.cp_groups.and_then(|g| g.get(i)).copied();
    (
        p.placements[..n]
            .iter()
            .enumerate()
            .map(|(i, pl)| core_placement(pl, group(i), cp as u32))
            .collect(),
        p.per_dp.to_vec(),
        p.micro_batches[..mbs]
            .iter()
            .map(core_micro_batch)
            .collect(),
        p.members[..n].to_vec(),
        p.rank_tokens[..mbs * cp].to_vec(),
    )
}
