//! The plan a C caller holds ([`Held`]): planned through `skrull_schedule()`, staged into the
//! core's types when it is still a valid plan, and corrupted one entry at a time.

use core::ffi::c_void;
use core::ptr::null_mut;

use skrull::{
    skrull_config, skrull_cp_group, skrull_micro_batch, skrull_placement, skrull_plan_buffers,
    skrull_plan_sizes, skrull_schedule, skrull_sizes, skrull_status, skrull_summary,
};
use skrull_core::config::{MAX_CP, MAX_DP};
use skrull_core::{Config, MicroBatch, Placement, Plan, PlanParts};

use crate::c_check::{core_micro_batch, core_placement, shard_group_ok, share_over};

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
    /// The CP group of each sequence (capacity `caps[5]`; passed back only with `groups`).
    pub(super) cp_groups: Vec<skrull_cp_group>,
    /// Whether the caller passes `cp_groups` back to the layout functions.
    pub(super) groups: bool,
    pub(super) caps: [usize; 6],
    pub(super) reserved: u32,
}

impl Held {
    /// The group of sequence `i` as the layout functions read it: from `cp_groups` when
    /// passed, else `{cp_rank, 1}` local and the whole group sharded.
    pub(super) fn group(&self, i: usize, cp: u32) -> (u32, u32) {
        let p = &self.placements[i];
        if self.groups {
            let g = self.cp_groups[i];
            (g.first, g.size)
        } else if p.cp_rank >= 0 {
            (p.cp_rank as u32, 1)
        } else {
            (0, cp)
        }
    }

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
            cp_groups: if self.groups {
                self.cp_groups.as_mut_ptr()
            } else {
                null_mut()
            },
            cp_groups_len: if self.groups { self.caps[5] } else { 0 },
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
        cp_groups: vec![skrull_cp_group::default(); sz.placements],
        groups: true,
        caps: [
            sz.placements,
            sz.micro_batches,
            sz.members,
            sz.rank_tokens,
            sz.micro_batches_per_dp,
            sz.placements,
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
/// fields, groups and `tokens_per_gpu` are what a plan of `cfg` and `lengths` has (otherwise
/// the layout functions must answer `PLAN_INVALID`).
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
    let groups_count = if h.groups { n } else { 0 };
    let counts = [
        n,
        mbs,
        n,
        mbs * cfg.cp as usize,
        cfg.dp as usize,
        groups_count,
    ];
    if counts.iter().zip(h.caps).any(|(&c, cap)| c > cap) {
        return None;
    }
    let cp = cfg.cp;
    let placements = h.placements[..n]
        .iter()
        .zip(lengths)
        .enumerate()
        .map(|(i, (p, &len))| {
            let (first, size) = h.group(i, cp);
            // A local sequence is in its own group of one; a sharded one in the whole group
            // or, with sub-groups, an aligned one.
            let group_ok = if p.cp_rank == -1 {
                shard_group_ok(cp, cfg.subgroups, first, size)
            } else {
                p.cp_rank >= 0 && (first, size) == (p.cp_rank as u32, 1)
            };
            // A local sequence occupies its length, padded to the pad multiple with
            // `pad_local` (written out here, not read from the library's budget).
            let m = cfg.pad_multiple.max(1);
            let want = if p.cp_rank == -1 {
                share_over(cfg, len, size)
            } else if cfg.pad_local {
                len.div_ceil(m) * m
            } else {
                len
            };
            let group = h.groups.then_some(skrull_cp_group { first, size });
            (group_ok && p.tokens_per_gpu == want).then(|| core_placement(p, group, cp))
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
    let plan = Plan::from_parts(&crate::setup_of(cfg), lengths, parts).ok()?;
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

/// Moves one sharded sequence (the `index`-th, cyclically) onto an aligned sub-group picked by
/// `value` and rewrites what that changes as `skrull_schedule()` would have: its group, its
/// `tokens_per_gpu`, its micro-batch's rank tokens and the summary's peak. The result is a
/// valid plan when the configuration allows sub-groups and the budget still holds; otherwise
/// the layout functions must refuse it.
fn regroup(h: &mut Held, cfg: &Config, lengths: &[u32], index: usize, value: u32) {
    let cp = cfg.cp;
    let sizes: Vec<u32> = (1..8)
        .map(|l| 1u32 << l)
        .filter(|&g| g < cp && cp.is_multiple_of(g))
        .collect();
    let sharded: Vec<usize> = (0..h.placements.len().min(lengths.len()))
        .filter(|&i| h.placements[i].cp_rank == -1)
        .collect();
    if sizes.is_empty() || sharded.is_empty() {
        return;
    }
    let seq = sharded[index % sharded.len()];
    let g = sizes[value as usize % sizes.len()];
    let first = ((value >> 8) % (cp / g)) * g;
    let (old_first, old_size) = h.group(seq, cp);
    let p = h.placements[seq];
    let mbs = (h.summary.micro_batches as usize).min(h.micro_batches.len());
    let Some(gi) = h.micro_batches[..mbs]
        .iter()
        .position(|m| (m.dp_rank, m.index) == (p.dp_rank, p.micro_batch))
    else {
        return;
    };
    let share = share_over(cfg, lengths[seq], g);
    let row = &mut h.rank_tokens[gi * cp as usize..(gi + 1) * cp as usize];
    for r in old_first..(old_first + old_size).min(cp) {
        row[r as usize] = row[r as usize].wrapping_sub(p.tokens_per_gpu);
    }
    for r in first..first + g {
        row[r as usize] = row[r as usize].wrapping_add(share);
    }
    h.placements[seq].tokens_per_gpu = share;
    h.cp_groups[seq] = skrull_cp_group { first, size: g };
    h.groups = true;
    let used = (mbs * cp as usize).min(h.rank_tokens.len());
    h.summary.peak_rank_tokens = h.rank_tokens[..used].iter().copied().max().unwrap_or(0);
}

/// Edits one entry of the plan (kind 0: none; 28 moves a sharded sequence onto a sub-group,
/// see [`regroup`]). Returns whether anything changed.
pub(super) fn corrupt(
    h: &mut Held,
    cfg: &Config,
    lengths: &[u32],
    kind: u8,
    index: u16,
    value: u32,
) -> bool {
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
    if kind % 32 == 28 {
        regroup(h, cfg, lengths, i, value);
        return *h != before;
    }
    let s = &mut h.summary;
    match kind % 32 {
        1..=4 | 21 => {
            if let Some(k) = pick(np) {
                let p = &mut h.placements[k];
                match kind % 32 {
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
                match kind % 32 {
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
                *m = if kind % 32 == 9 {
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
                *t = if kind % 32 == 11 {
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
        // A group edited: its first rank, or its size.
        24 | 25 => {
            if let Some(k) = pick(np) {
                let g = &mut h.cp_groups[k];
                if kind % 32 == 24 {
                    g.first = value % 16;
                } else {
                    g.size = value % 17;
                }
            }
        }
        // The groups not passed back (every sharded sequence then spans the whole group).
        26 => h.groups = false,
        // The groups' capacity below the allocation (below `n`: refused).
        27 => h.caps[5] = h.caps[5].saturating_sub(value as usize % 3),
        _ => {}
    }
    *h != before
}
