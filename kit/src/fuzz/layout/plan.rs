//! The plan a C caller holds ([`Held`]): planned through `skrull_schedule()`, staged into the
//! core's types when it is still a valid plan, and corrupted one entry at a time.

use core::ffi::c_void;
use core::ptr::null_mut;

use skrull::{
    skrull_config, skrull_micro_batch, skrull_placement, skrull_plan_buffers, skrull_plan_sizes,
    skrull_schedule, skrull_sizes, skrull_status, skrull_summary,
};
use skrull_core::config::{MAX_CP, MAX_DP};
use skrull_core::{Config, MicroBatch, Placement, Plan, PlanParts};

use crate::c_check::{core_micro_batch, core_placement};

/// A plan as a C caller holds it, with the capacities it declares (never above what is
/// allocated: a corruption may only shrink them).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Held {
    pub(super) placements: Vec<skrull_placement>,
    pub(super) micro_batches: Vec<skrull_micro_batch>,
    pub(super) members: Vec<u32>,
    pub(super) rank_tokens: Vec<u32>,
    pub(super) per_dp: Vec<u32>,
    pub(super) summary: skrull_summary,
    pub(super) caps: [usize; 5],
    pub(super) reserved: u32,
}

impl Held {
    pub(super) fn buffers(&mut self) -> skrull_plan_buffers {
        skrull_plan_buffers {
            struct_size: size_of::<skrull_plan_buffers>() as u32,
            _reserved: self.reserved,
            placements: self.placements.as_mut_ptr(),
            placements_len: self.caps[0],
            micro_batches: self.micro_batches.as_mut_ptr(),
            micro_batches_len: self.caps[1],
            members: self.members.as_mut_ptr(),
            members_len: self.caps[2],
            rank_tokens: self.rank_tokens.as_mut_ptr(),
            rank_tokens_len: self.caps[3],
            micro_batches_per_dp: self.per_dp.as_mut_ptr(),
            micro_batches_per_dp_len: self.caps[4],
            summary: &mut self.summary,
            error: null_mut(),
        }
    }
}

/// Plans through the C ABI with exactly sized buffers.
pub(super) fn schedule(c: &skrull_config, lengths: &[u32]) -> Result<Held, skrull_status> {
    let n = lengths.len();
    let (dp, cp) = (c.dp.clamp(1, MAX_DP), c.cp.clamp(1, MAX_CP));
    let mut sz = skrull_sizes::default();
    // SAFETY: `sz` is a live, aligned skrull_sizes.
    let st = unsafe { skrull_plan_sizes(n, dp, cp, &mut sz) };
    assert_eq!(st, skrull_status::Ok);
    let mut h = Held {
        placements: vec![skrull_placement::default(); sz.placements],
        micro_batches: vec![skrull_micro_batch::default(); sz.micro_batches],
        members: vec![0; sz.members],
        rank_tokens: vec![0; sz.rank_tokens],
        per_dp: vec![0; sz.micro_batches_per_dp],
        summary: skrull_summary::default(),
        caps: [
            sz.placements,
            sz.micro_batches,
            sz.members,
            sz.rank_tokens,
            sz.micro_batches_per_dp,
        ],
        reserved: 0,
    };
    let mut ws = vec![0u8; sz.workspace_bytes];
    let out = h.buffers();
    // SAFETY: every pointer is a live Vec of the stated capacity.
    let st = unsafe {
        skrull_schedule(
            c,
            lengths.as_ptr(),
            n,
            ws.as_mut_ptr().cast::<c_void>(),
            ws.len(),
            &out,
        )
    };
    if st == skrull_status::Ok {
        Ok(h)
    } else {
        Err(st)
    }
}

/// The plan entries converted to the core's types, when the counts, capacities, summary
/// fields and `tokens_per_gpu` are what a plan of `cfg` and `lengths` has (otherwise the
/// layout functions must answer `PLAN_INVALID`).
pub(super) struct Staged {
    placements: Vec<Placement>,
    micro_batches: Vec<MicroBatch>,
}

pub(super) fn stage(cfg: &Config, lengths: &[u32], h: &Held) -> Option<Staged> {
    let n = lengths.len();
    let s = &h.summary;
    let mbs = s.micro_batches as usize;
    if s.sequences as usize != n || mbs > n || s._reserved != 0 {
        return None;
    }
    let counts = [n, mbs, n, mbs * cfg.cp as usize, cfg.dp as usize];
    if counts.iter().zip(h.caps).any(|(&c, cap)| c > cap) {
        return None;
    }
    let placements = h.placements[..n]
        .iter()
        .zip(lengths)
        .map(|(p, &len)| {
            // A local sequence occupies its length, padded to the pad multiple with
            // `pad_local` (written out here, not read from the library's budget).
            let m = cfg.pad_multiple.max(1);
            let want = if p.cp_rank == -1 {
                cfg.shard_tokens(len)
            } else if cfg.pad_local {
                len.div_ceil(m) * m
            } else {
                len
            };
            (p.tokens_per_gpu == want).then(|| core_placement(p))
        })
        .collect::<Option<Vec<_>>>()?;
    let micro_batches = h.micro_batches[..mbs]
        .iter()
        .map(core_micro_batch)
        .collect();
    Some(Staged {
        placements,
        micro_batches,
    })
}

/// The core's view of the staged plan, if `Plan::from_parts` accepts it and its recount
/// matches the summary.
pub(super) fn core_plan<'a>(
    cfg: &Config,
    lengths: &'a [u32],
    h: &'a Held,
    st: &'a Staged,
) -> Option<Plan<'a>> {
    let (n, cp, dp) = (lengths.len(), cfg.cp as usize, cfg.dp as usize);
    let mbs = st.micro_batches.len();
    let parts = PlanParts {
        placements: &st.placements,
        micro_batches: &st.micro_batches,
        members: &h.members[..n],
        rank_tokens: &h.rank_tokens[..mbs * cp],
        micro_batches_per_dp: &h.per_dp[..dp],
        rollbacks: h.summary.rollbacks,
    };
    let plan = Plan::from_parts(cfg, lengths, parts).ok()?;
    let s = plan.summary();
    let c = &h.summary;
    let same = (
        s.total_tokens,
        s.micro_batches,
        s.sharded,
        s.peak_rank_tokens,
    ) == (
        c.total_tokens,
        c.micro_batches,
        c.sharded,
        c.peak_rank_tokens,
    );
    same.then_some(plan)
}

/// Edits one entry of the plan (kind 0: none). Returns whether anything changed.
pub(super) fn corrupt(h: &mut Held, kind: u8, index: u16, value: u32) -> bool {
    let before = h.clone();
    let i = usize::from(index);
    let pick = |len: usize| (len > 0).then(|| i % len);
    let (np, nm, nk, nt, nd) = (
        h.placements.len(),
        h.micro_batches.len(),
        h.members.len(),
        h.rank_tokens.len(),
        h.per_dp.len(),
    );
    let s = &mut h.summary;
    match kind % 24 {
        1..=4 | 21 => {
            if let Some(k) = pick(np) {
                let p = &mut h.placements[k];
                match kind % 24 {
                    1 => p.dp_rank = value % 8,
                    2 => p.micro_batch = value % 8,
                    3 => p.cp_rank = (value % 10) as i32 - 1,
                    4 => p.tokens_per_gpu = value,
                    _ => p.cp_rank = -1,
                }
            }
        }
        5..=8 => {
            if let Some(k) = pick(nm) {
                let m = &mut h.micro_batches[k];
                match kind % 24 {
                    5 => m.dp_rank = value % 8,
                    6 => m.index = value % 8,
                    7 => m.first = value % 64,
                    _ => m.count = value % 64,
                }
            }
        }
        9 | 22 => {
            if let Some(k) = pick(nk) {
                let m = &mut h.members[k];
                *m = if kind % 24 == 9 {
                    value % 1100
                } else {
                    m.wrapping_add(1)
                };
            }
        }
        // Two members swapped (may stay a valid plan: the order inside a micro-batch).
        10 if nk > 1 => h.members.swap(i % nk, value as usize % nk),
        11 | 23 => {
            if let Some(k) = pick(nt) {
                let t = &mut h.rank_tokens[k];
                *t = if kind % 24 == 11 {
                    value
                } else {
                    t.wrapping_sub(1)
                };
            }
        }
        12 => {
            if let Some(k) = pick(nd) {
                h.per_dp[k] = value % 8;
            }
        }
        13 => s.total_tokens = u64::from(value),
        14 => s.sequences = value % 1100,
        15 => s.micro_batches = value % 1100,
        16 => s.sharded = value % 1100,
        17 => s.rollbacks = value,
        18 => s.peak_rank_tokens = value,
        // The outside harness's report: a nonzero reserved field in the summary.
        19 => s._reserved = value | 1,
        // A capacity below the allocation (may drop below what the summary says).
        20 => {
            let k = i % 5;
            h.caps[k] = h.caps[k].saturating_sub(value as usize % 3);
        }
        _ => {}
    }
    *h != before
}
