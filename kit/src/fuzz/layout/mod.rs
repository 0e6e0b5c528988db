//! The layout fuzz harness: plans a batch decoded from fuzz bytes through `skrull_schedule()`,
//! then drives `skrull_layout_sizes_max()`, `skrull_layout_sizes()` and `skrull_layout_fill()`
//! (and the core's `layout::fill`) on the plan as written, or with one plan entry corrupted,
//! for chosen or all GPUs, with or without one malformation of the call, and panics on any
//! broken promise:
//!
//! - C and Rust agree: the same status, and on success the same spans, `cu_seqlens`,
//!   positions and counts. A corrupted plan is `PLAN_INVALID` exactly when the plan arrays no
//!   longer hold a valid plan of the configuration and batch (decided here from the core's
//!   `Plan::from_parts` and the summary), and otherwise is laid out like any plan.
//! - The spans of all CP ranks of a micro-batch tile each of its sequences exactly once: a
//!   local sequence is one span on its CP rank, a sharded one is covered over `[0, P)` (`P`
//!   its padded length over its group) by two chunks on each rank of its group (the whole CP
//!   group or a sub-group) and none elsewhere, real tokens exactly below its length; every
//!   GPU's ring table names the groups of its sharded sequences in order.
//! - `cu_seqlens` start at 0, are monotone and step by the spans' lengths; the positions equal
//!   the spans' ranges; the counts add up; the charged tokens equal the plan's rank tokens.
//! - Nothing is written outside the buffers (guards on both sides), nothing past the valid
//!   entries, and nothing at all on an error.
//!
//! Input: 16 header bytes, then the `c_abi` format (`decode::decode`: configuration and
//! lengths; its perturbation byte is not used). Header: `[0]` GPU mode (0: every GPU, 1: one
//! GPU from bytes 10..16, 2: every GPU with exactly sized buffers, 3: every GPU without
//! positions, and without rings unless sub-groups require them), `[1]` corruption kind
//! (`plan::corrupt`; 28 moves a sharded sequence onto a sub-group, a valid plan when the
//! configuration has sub-groups), `[2..4]` its index, `[4..8]` its value, `[8]` call
//! malformation, `[9]` its argument, `[10..16]` the one GPU (three little-endian u16).
//!
//! Used by `fuzz/fuzz_targets/layout.rs` and replayed by `tests/regressions_fuzz.rs`.

mod call;
mod check;
mod plan;

use skrull::{
    skrull_gpu, skrull_layout_capacity, skrull_layout_sizes, skrull_layout_sizes_max, skrull_span,
    skrull_status,
};
use skrull_core::plan::layout::{Gpu, LayoutSizes};
use skrull_core::{Config, ShardPadding};

use self::call::{Malform, Outs, c_fill, expected, malform, rings_passed};
use self::check::{check_c_equals_core, check_gpu, core_fill};
use self::plan::{core_plan, corrupt, schedule, stage};
use super::decode::{Reader, decode};

/// At most this many GPUs are laid out per input (whole micro-batches only).
const MAX_GPUS: usize = 256;
/// The largest layout workspace (bytes) the harness allocates; a configuration whose maximum
/// is larger is planned and checked but not laid out.
const MAX_WORKSPACE: usize = 64 << 20;
/// Position arrays longer than this are skipped (the spans carry the same ranges).
const MAX_POSITIONS: usize = 1 << 18;

/// The independent padded length of a sequence sharded over a group of `g` ranks.
fn padded(cfg: &Config, len: u32, g: u32) -> u64 {
    // The rule of docs/layout.md, written out independently of the library's `Budget`: the
    // shard unit is lcm(2g, M) when g > 1 and the sequence is padded at all (zigzag, or a
    // pad multiple M > 1), else M (at g = 1 zigzag pads nothing).
    let (n, m) = (u64::from(g), u64::from(cfg.pad_multiple.max(1)));
    let padded_at_all = cfg.shard_padding == ShardPadding::Zigzag || m > 1;
    let unit = if n > 1 && padded_at_all {
        let (mut a, mut b) = (2 * n, m);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        2 * n / a * m
    } else {
        m
    };
    u64::from(len).div_ceil(unit) * unit
}

/// What one input exercised (for tests that pin a seed to what it is named after).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Run {
    /// `skrull_schedule()`'s status.
    pub schedule: Option<skrull_status>,
    /// A plan entry was edited.
    pub corrupted: bool,
    /// The (possibly edited) plan is a valid plan of the configuration and batch.
    pub plan_valid: bool,
    /// `skrull_layout_fill()`'s status for each GPU tried, in order.
    pub fills: Vec<skrull_status>,
    /// Every GPU of the plan was laid out and the tiling checked.
    pub tiled: bool,
    /// Sequences sharded over a sub-group whose tiling was checked.
    pub subgroups: usize,
}

/// Runs the layout harness on fuzz bytes.
pub fn layout(data: &[u8]) -> Run {
    let mut run = Run::default();
    let mut r = Reader::new(data);
    let mode = r.u8() % 4;
    let (kind, index, value) = (r.u8(), r.u16(), r.u32());
    let m = malform(r.u8(), r.u8());
    let one = Gpu {
        dp_rank: u32::from(r.u16()),
        micro_batch: u32::from(r.u16()),
        cp_rank: u32::from(r.u16()),
    };
    let input = decode(data.get(16..).unwrap_or(&[]));
    let (mut c, lengths) = (input.cfg, input.lengths.clone());
    // The caller's cost model lives here through every call.
    let cost = input.cost;
    if let Some(m) = &cost {
        c.cost_model = m;
    }
    let n = lengths.len();

    // The maximum sizes: the configuration's errors exactly as skrull_schedule reports them.
    let mut cap = skrull_layout_capacity::default();
    // SAFETY: live config and output.
    let st_max = unsafe { skrull_layout_sizes_max(&c, n, &mut cap) };
    let held = schedule(&c, &lengths);
    run.schedule = Some(held.as_ref().err().copied().unwrap_or(skrull_status::Ok));
    let mut h = match held {
        Ok(h) => h,
        Err(st) => {
            if matches!(
                st,
                skrull_status::InvalidEnum
                    | skrull_status::InvalidDp
                    | skrull_status::InvalidCp
                    | skrull_status::InvalidBucket
                    | skrull_status::InvalidModel
            ) {
                assert_eq!(st_max, st, "sizes_max and schedule disagree on the config");
                assert_eq!(cap, skrull_layout_capacity::default());
            }
            return run;
        }
    };
    assert_eq!(st_max, skrull_status::Ok);
    let cfg = input.core_config().expect("planned, so valid");
    let max = LayoutSizes::max_for(n, &cfg);
    assert_eq!(
        (
            cap.spans,
            cap.local_cu_seqlens,
            cap.sharded_cu_seqlens,
            cap.positions
        ),
        (
            max.spans as usize,
            max.local_cu_seqlens as usize,
            max.sharded_cu_seqlens as usize,
            max.positions as usize
        )
    );
    let corrupted = corrupt(&mut h, &cfg, &lengths, kind, index, value);
    // The core's view borrows a copy; the C calls get pointers into `h` (which they only read).
    let frozen = h.clone();
    let staged = stage(&cfg, &lengths, &frozen);
    let plan = staged
        .as_ref()
        .and_then(|st| core_plan(&cfg, &lengths, &frozen, st));
    if !corrupted {
        assert!(
            plan.is_some(),
            "the plan skrull_schedule wrote is not valid"
        );
    }
    run.corrupted = corrupted;
    run.plan_valid = plan.is_some();

    // A layout workspace this harness cannot allocate: with chunking the maximum grows with
    // the chunk passes a GPU may run (one per chunk: `len / chunk_size` of them, billions at
    // a chunk size of 1 and a bucket of 2^31 - 1), which is the library's honest bound.
    // The plan was checked above; its layouts are not laid out (found by this target).
    if cap.workspace_bytes > MAX_WORKSPACE {
        return run;
    }

    // The GPUs: one from the bytes, or whole micro-batches of the plan (up to MAX_GPUS).
    let mut gpus = Vec::new();
    if mode == 1 || plan.is_none() {
        gpus.push(one);
        gpus.push(Gpu::default());
    } else if let Some(p) = &plan {
        for mb in p.micro_batches() {
            if gpus.len() + cfg.cp as usize > MAX_GPUS {
                break;
            }
            for rank in 0..cfg.cp {
                gpus.push(Gpu {
                    dp_rank: mb.dp_rank,
                    micro_batch: mb.index,
                    cp_rank: rank,
                });
            }
        }
    }

    // Coverage per sequence over all laid-out GPUs: (start, end) position ranges.
    let mut cover: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(); n];
    let mut spare = Vec::new();
    let mut laid_out = 0usize;
    for (k, &gpu) in gpus.iter().enumerate() {
        let cg = skrull_gpu {
            dp_rank: gpu.dp_rank,
            micro_batch: gpu.micro_batch,
            cp_rank: gpu.cp_rank,
        };
        // The exact sizes, from C and from the core.
        let mut z = skrull_layout_capacity::default();
        let mut ws = vec![0u8; cap.workspace_bytes];
        let pb = h.buffers();
        // SAFETY: live buffers of their declared capacities.
        let st_sizes = unsafe {
            skrull_layout_sizes(
                &c,
                lengths.as_ptr(),
                n,
                &pb,
                cg,
                ws.as_mut_ptr().cast(),
                ws.len(),
                &mut z,
            )
        };
        let want_sizes = match &plan {
            None => Err(skrull_status::PlanInvalid),
            Some(p) => LayoutSizes::for_gpu(&crate::setup_of(&cfg), &lengths, p, gpu)
                .map_err(skrull_status::from),
        };
        // This GPU's rings, which the C sizes have no field for: the core counts them when one
        // is a sub-group, else there is the whole group's if anything is sharded.
        let gpu_rings = match want_sizes {
            Ok(s) if s.rings > 0 => s.rings as usize,
            Ok(s) => usize::from(s.sharded_cu_seqlens > 1),
            Err(_) => 0,
        };
        assert!(
            gpu_rings <= max.rings as usize,
            "{gpu_rings} rings > the maximum"
        );
        match want_sizes {
            Ok(s) => {
                assert_eq!(st_sizes, skrull_status::Ok);
                assert_eq!(
                    (
                        z.spans,
                        z.local_cu_seqlens,
                        z.sharded_cu_seqlens,
                        z.positions
                    ),
                    (
                        s.spans as usize,
                        s.local_cu_seqlens as usize,
                        s.sharded_cu_seqlens as usize,
                        s.positions as usize
                    )
                );
                // Without chunking every GPU needs the maximum workspace; with it a GPU
                // needs room for its own chunk passes only, at most the maximum. (The doc
                // of `skrull_layout_sizes` still says "that same number": found by this
                // target on the first run that drew chunking.)
                if cfg.chunking.is_on() {
                    assert!(z.workspace_bytes <= cap.workspace_bytes);
                } else {
                    assert_eq!(z.workspace_bytes, cap.workspace_bytes);
                }
                assert!(s.spans <= max.spans && s.positions <= max.positions);
            }
            Err(e) => {
                assert_eq!(st_sizes, e, "skrull_layout_sizes vs the core");
                assert_eq!(z, skrull_layout_capacity::default());
            }
        }

        // Buffer sizes for this call: the maxima or the exact sizes; positions within reason.
        let exact = st_sizes == skrull_status::Ok && mode == 2;
        let pick = |mx: usize, ex: usize| if exact { ex } else { mx };
        let nspans = pick(cap.spans, z.spans);
        let nlocal = pick(cap.local_cu_seqlens, z.local_cu_seqlens);
        let nsharded = pick(cap.sharded_cu_seqlens, z.sharded_cu_seqlens);
        let mut npos = if cap.positions <= MAX_POSITIONS && !exact {
            cap.positions
        } else {
            z.positions
        };
        let with_positions = mode != 3 && npos > 0 && npos <= MAX_POSITIONS;
        if !with_positions {
            npos = 0;
        }
        // The rings: the maximum, or exactly this GPU's; none (skipped) in mode 3 unless
        // sub-groups require them.
        let nrings = if mode == 3 && !cfg.subgroups {
            0
        } else {
            pick(max.rings as usize, gpu_rings)
        };
        let mut o = Outs::new(nspans, nlocal, nsharded, npos, nrings);
        // One malformed call per input (the first GPU); those that swap in plan capacities
        // only on the plan as written (a corruption may have shrunk one).
        let plan_edit = matches!(m, Malform::OutputInPlanSpare)
            || matches!(m, Malform::CapacityHuge(w) if matches!(w % 6, 3 | 4));
        let mcall = if k == 0 && !(corrupted && plan_edit) {
            m
        } else {
            Malform::None
        };
        let st = c_fill(
            &c,
            &lengths,
            &mut h,
            cg,
            &mut o,
            [nspans, nlocal, nsharded, npos, nrings],
            // With chunking, the workspace this GPU needs (its own chunk passes: less than
            // the maximum, and what a short workspace is one byte below).
            if cfg.chunking.is_on() && z.workspace_bytes > 0 {
                z.workspace_bytes
            } else {
                cap.workspace_bytes
            },
            mcall,
            &mut spare,
        );
        let core = plan
            .as_ref()
            .map(|p| core_fill(&cfg, &lengths, p, gpu, with_positions));
        let clean = match &core {
            None => skrull_status::PlanInvalid,
            Some(Ok(_)) => skrull_status::Ok,
            Some(Err(e)) => skrull_status::from(*e),
        };
        let lens = [nspans, nlocal, nsharded, nsharded, nsharded, npos, nrings];
        let zs = z.sharded_cu_seqlens;
        let needed = [
            z.spans,
            z.local_cu_seqlens,
            zs,
            zs,
            zs,
            npos.min(z.positions),
            gpu_rings,
        ];
        let spare_applied = npos > 0 && npos <= (nspans + 8) * size_of::<skrull_span>() / 4;
        let want = expected(clean, mcall, lens, needed, spare_applied, cfg.subgroups);
        assert_eq!(st, want, "skrull_layout_fill ({mcall:?}, gpu {gpu:?})");
        run.fills.push(st);
        if st != skrull_status::Ok {
            o.untouched(&format!("{st:?}"));
            continue;
        }
        let core = core
            .expect("OK implies a plan")
            .expect("OK implies a layout");
        assert_eq!(
            core.ring_count(),
            gpu_rings,
            "rings counted before and after the fill"
        );
        let with_rings = rings_passed(&c, nrings, mcall);
        check_c_equals_core(&o, &core, with_positions, with_rings);
        check_gpu(&cfg, &lengths, &h, gpu, &core);
        for s in &core.spans {
            let end = u64::from(s.start) + u64::from(s.len) + u64::from(s.pad);
            cover[s.seq as usize].push((u64::from(s.start), end, gpu.cp_rank));
        }
        laid_out += 1;
        o.reset();
    }

    // Tiling: when every GPU of the plan was laid out, each sequence is covered exactly once.
    let Some(p) = &plan else { return run };
    let all = p.micro_batches().len() * cfg.cp as usize;
    if mode == 1 || laid_out != all || gpus.len() != all {
        return run;
    }
    for (seq, ranges) in cover.iter_mut().enumerate() {
        let len = lengths[seq];
        let pl = &h.placements[seq];
        if pl.cp_rank != -1 {
            assert_eq!(
                ranges.len(),
                1,
                "local sequence {seq} laid out {} times",
                ranges.len()
            );
            // Its length, padded to the pad multiple with `pad_local`.
            let m = u64::from(cfg.pad_multiple.max(1));
            let held = if cfg.pad_local {
                u64::from(len).div_ceil(m) * m
            } else {
                u64::from(len)
            };
            assert_eq!(ranges[0], (0, held, pl.cp_rank as u32));
            continue;
        }
        // Two chunks on every rank of its group (the whole group or a sub-group), none
        // elsewhere, tiling [0, P) over the group's 2g chunks.
        let (first, g) = h.group(seq, cfg.cp);
        assert_eq!(ranges.len(), 2 * g as usize, "sharded {seq}: spans");
        let mut per_rank = vec![0u32; cfg.cp as usize];
        for &(_, _, rank) in ranges.iter() {
            assert!(
                rank >= first && rank - first < g,
                "sharded {seq}: on rank {rank} outside {first}+{g}"
            );
            per_rank[rank as usize] += 1;
        }
        assert!(
            per_rank[first as usize..(first + g) as usize]
                .iter()
                .all(|&c| c == 2),
            "sharded {seq}: not two chunks per rank of {first}+{g}"
        );
        ranges.sort_unstable();
        let mut at = 0u64;
        for &(start, end, _) in ranges.iter() {
            assert_eq!(start, at, "sharded {seq}: gap or overlap at {at}");
            at = end;
        }
        assert_eq!(at, padded(&cfg, len, g), "sharded {seq}: covered {at}");
        if g < cfg.cp {
            run.subgroups += 1;
        }
    }
    run.tiled = true;
    run
}
