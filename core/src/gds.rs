//! GDS: spread the global batch over DP ranks and cut each rank's share into micro-batches.
//!
//! 1. **Bin-packing over DP ranks by FLOPs, LPT**: sequences longest-first (ties: input
//!    order), each into the DP rank with the least FLOPs so far (ties: lowest rank). LPT is
//!    deterministic, `O(n log dp)`, and within 4/3 of the optimal makespan; the paper does not
//!    name its bin-packer.
//! 2. **Strided micro-batches**: each rank's sequences sorted ascending (ties: input order);
//!    with `m` micro-batches, micro-batch `j` takes sorted positions `j, j+m, j+2m, ...`, which
//!    pairs long and short sequences.
//! 3. **Growing `m`** from `max(1, ceil(sum / (C·N)))` until every micro-batch holds at most
//!    `C·N` tokens and its placement routine (DACP, or Algorithm 4 for `roundrobin`)
//!    succeeds. `m = |sub|` (one sequence per micro-batch) always succeeds once every
//!    sequence passed the `ceil(S/N) <= C` check.

use crate::config::Config;
use crate::dacp::{self, MemberSlots, Rule};
use crate::error::Error;
use crate::flops::FlopsModel;
use crate::plan::PlanWriter;
use crate::workspace::Workspace;

/// Sorts `0..n` by (length, index) into `keys` as `(len << 32) | index`.
pub(crate) fn sort_ascending(lengths: &[u32], keys: &mut [u64]) {
    for (k, (key, &len)) in keys.iter_mut().zip(lengths).enumerate() {
        *key = (u64::from(len) << 32) | k as u64;
    }
    keys.sort_unstable();
}

/// The index part of a sort key.
#[inline]
pub(crate) fn key_index(key: u64) -> usize {
    (key & 0xFFFF_FFFF) as usize
}

/// Restores the min-heap property of `heap` (DP ranks keyed by `(load, rank)`) below `pos`.
fn sift_down(heap: &mut [u32], loads: &[u128], mut pos: usize) {
    let key = |h: &[u32], p: usize| {
        let r = h.get(p).copied().unwrap_or(0);
        (loads.get(r as usize).copied().unwrap_or(0), r)
    };
    loop {
        let l = 2 * pos + 1;
        if l >= heap.len() {
            return;
        }
        let r = l + 1;
        let child = if r < heap.len() && key(heap, r) < key(heap, l) {
            r
        } else {
            l
        };
        if key(heap, child) < key(heap, pos) {
            heap.swap(child, pos);
            pos = child;
        } else {
            return;
        }
    }
}

/// LPT over DP ranks, then each rank's sequences ascending into
/// `ws.seqs[ws.dp_start[d]..ws.dp_start[d + 1]]`.
///
/// `ws.keys[..n]` must hold the ascending sort keys. `dp_of` is scratch of `n` entries that
/// receives each sequence's DP rank.
pub(crate) fn bin_pack(
    cfg: &Config,
    flops: &FlopsModel,
    ws: &mut Workspace<'_>,
    n: usize,
    dp_of: &mut [crate::plan::Placement],
) {
    let dp = cfg.dp as usize;
    let loads = &mut ws.dp_loads[..dp];
    let heap = &mut ws.dp_heap[..dp];
    loads.fill(0);
    for (i, h) in heap.iter_mut().enumerate() {
        *h = i as u32;
    }
    // Longest first, ties in input order: walk runs of equal length from the end, each run
    // forwards.
    let keys = &ws.keys[..n];
    let mut end = n;
    while end > 0 {
        let len = keys[end - 1] >> 32;
        let mut start = end - 1;
        while start > 0 && keys[start - 1] >> 32 == len {
            start -= 1;
        }
        let f = flops.of(len as u32);
        for &key in &keys[start..end] {
            let Some(&bin) = heap.first() else { return };
            if let Some(p) = dp_of.get_mut(key_index(key)) {
                p.dp_rank = bin;
            }
            if let Some(l) = loads.get_mut(bin as usize) {
                *l += f;
            }
            sift_down(heap, loads, 0);
        }
        end = start;
    }
    group_by_dp(ws, n, dp, |seq| dp_of.get(seq).map_or(0, |p| p.dp_rank));
}

/// Counting sort of the ascending keys into per-DP-rank runs of `ws.seqs`.
pub(crate) fn group_by_dp(
    ws: &mut Workspace<'_>,
    n: usize,
    dp: usize,
    rank_of: impl Fn(usize) -> u32,
) {
    let start = &mut ws.dp_start[..=dp];
    start.fill(0);
    for &key in &ws.keys[..n] {
        if let Some(c) = start.get_mut(rank_of(key_index(key)) as usize + 1) {
            *c += 1;
        }
    }
    for d in 0..dp {
        start[d + 1] += start[d];
    }
    // Fill using dp_heap as per-rank cursors (its heap role is over).
    let cursor = &mut ws.dp_heap[..dp];
    cursor.copy_from_slice(&start[..dp]);
    for &key in &ws.keys[..n] {
        let seq = key_index(key);
        if let Some(c) = cursor.get_mut(rank_of(seq) as usize) {
            if let Some(s) = ws.seqs.get_mut(*c as usize) {
                *s = seq as u32;
            }
            *c += 1;
        }
    }
}

/// The largest micro-batch token sum of the strided split of ascending `sub` into `m`.
///
/// Micro-batches `j < K mod m` hold one more sequence; among equal counts the sum grows with
/// `j`, so only `j = (K mod m) - 1` and `j = m - 1` can be the largest: `O(K / m)`.
fn max_strided_sum(sub: &[u32], lengths: &[u32], m: usize) -> u64 {
    let sum = |j: usize| -> u64 {
        sub.iter()
            .skip(j)
            .step_by(m)
            .map(|&s| u64::from(lengths.get(s as usize).copied().unwrap_or(0)))
            .sum()
    };
    let r = sub.len() % m;
    let last = sum(m - 1);
    if r > 0 { last.max(sum(r - 1)) } else { last }
}

/// Copies micro-batch `j` of the strided split of `sub` into `scratch` in processing order
/// (ascending for DACP, input order for Algorithm 4) and returns its length.
fn gather(sub: &[u32], j: usize, m: usize, rule: Rule, scratch: &mut [u32]) -> usize {
    let mut count = 0;
    for (dst, &seq) in scratch.iter_mut().zip(sub.iter().skip(j).step_by(m)) {
        *dst = seq;
        count += 1;
    }
    if rule == Rule::WorstFit {
        scratch[..count].sort_unstable();
    }
    count
}

/// Runs GDS with `rule` placing each micro-batch, writing the plan through `w`.
pub(crate) fn run(
    cfg: &Config,
    lengths: &[u32],
    ws: &mut Workspace<'_>,
    w: &mut PlanWriter<'_>,
    rule: Rule,
) -> Result<(), Error> {
    let n = lengths.len();
    let dp = cfg.dp as usize;
    let flops = FlopsModel::new(&cfg.model, cfg.flops);
    sort_ascending(lengths, &mut ws.keys[..n]);
    bin_pack(cfg, &flops, ws, n, w.placements_mut());
    let cap = u64::from(cfg.bucket) * u64::from(cfg.cp);
    for d in 0..dp {
        let (a, b) = (ws.dp_start[d] as usize, ws.dp_start[d + 1] as usize);
        let sub = &ws.seqs[a..b];
        let k = sub.len();
        let total: u64 = sub.iter().map(|&s| u64::from(lengths[s as usize])).sum();
        let mut m = total.div_ceil(cap).max(1) as usize;
        let mut accepted = None;
        while m <= k {
            if max_strided_sum(sub, lengths, m) <= cap {
                let mut rollbacks = 0u32;
                let mut ok = true;
                for j in 0..m {
                    let count = gather(sub, j, m, rule, ws.scratch);
                    let mut slots = MemberSlots {
                        members: &ws.scratch[..count],
                        lengths,
                        placements: w.placements_mut(),
                    };
                    match dacp::run(&mut slots, cfg, &flops, rule) {
                        Ok(r) => rollbacks += r,
                        Err(_) => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    accepted = Some((m, rollbacks));
                    break;
                }
            }
            m += 1;
        }
        let (m, rollbacks) = match accepted {
            Some(found) => found,
            // Unreachable once every sequence fits sharded (one per micro-batch), kept as
            // a defensive error rather than a panic.
            None if k > 0 => return Err(Error::DacpFailed { cp_rank: 0 }),
            None => (0, 0),
        };
        if cfg.max_micro_batches != 0 && m > cfg.max_micro_batches as usize {
            return Err(Error::MicroBatchLimit {
                dp_rank: d as u32,
                limit: cfg.max_micro_batches,
                needed: m as u32,
            });
        }
        for j in 0..m {
            let count = gather(sub, j, m, rule, ws.scratch);
            w.open(d as u32, j as u32);
            for &seq in &ws.scratch[..count] {
                let cp_rank = w.placements_mut()[seq as usize].cp_rank;
                w.push(seq, lengths[seq as usize], cp_rank);
            }
        }
        w.set_count(d as u32, m as u32);
        w.add_rollbacks(rollbacks);
    }
    Ok(())
}
