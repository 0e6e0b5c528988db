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

/// Below this many sequences [`sort_ascending_radix`] falls back to the comparison sort.
const RADIX_MIN: usize = 128;
/// Widest radix digit, in bits: three passes cover every length below `2^33`.
const RADIX_BITS: u32 = 11;

/// A stable LSD radix sort of the indices `0..n` by `lengths[k]` (`n = lengths.len()`), so by
/// `(length, index)`: calls `emit(position, index, length)` for every index in its final
/// position. `a` and `b` (at least `n` each) are scratch. Digits are about `log2 n` bits (4 to
/// [`RADIX_BITS`]), so the histograms stay small next to `n`; `ceil(width / digit)` passes
/// over the significant bits of the longest length. 8 KiB of stack.
pub(crate) fn radix_by_length(
    lengths: &[u32],
    a: &mut [u32],
    b: &mut [u32],
    mut emit: impl FnMut(usize, u32, u32),
) {
    let n = lengths.len();
    let (Some(a), Some(b)) = (a.get_mut(..n), b.get_mut(..n)) else {
        return;
    };
    let width = 32 - lengths.iter().fold(0u32, |m, &l| m | l).leading_zeros();
    let digit = (usize::BITS - n.leading_zeros()).clamp(4, RADIX_BITS);
    let passes = width.div_ceil(digit).max(1);
    let bits = width.div_ceil(passes).max(1);
    let mask = (1u32 << bits) - 1;
    let buckets = mask as usize + 1;
    // One histogram at a time; only the buckets in use are initialised.
    let mut cursor: heapless::Vec<u32, { 1 << RADIX_BITS }> = heapless::Vec::new();
    let (mut src, mut dst) = (a, b);
    for p in 0..passes {
        let shift = p * bits;
        let last = p + 1 == passes;
        cursor.clear();
        // buckets <= 2^RADIX_BITS: the resize cannot fail.
        let _ = cursor.resize(buckets, 0);
        for &len in lengths {
            if let Some(c) = cursor.get_mut(((len >> shift) & mask) as usize) {
                *c += 1;
            }
        }
        let mut sum = 0u32;
        for x in cursor.iter_mut() {
            let here = *x;
            *x = sum;
            sum += here;
        }
        let mut place = |seq: u32, dst: &mut [u32]| {
            let len = lengths.get(seq as usize).copied().unwrap_or(0);
            if let Some(c) = cursor.get_mut(((len >> shift) & mask) as usize) {
                if last {
                    emit(*c as usize, seq, len);
                } else if let Some(d) = dst.get_mut(*c as usize) {
                    *d = seq;
                }
                *c += 1;
            }
        };
        if p == 0 {
            for seq in 0..n as u32 {
                place(seq, dst);
            }
        } else {
            for &seq in src.iter() {
                place(seq, dst);
            }
        }
        core::mem::swap(&mut src, &mut dst);
    }
}

/// [`sort_ascending`] by [`radix_by_length`], using `a` and `b` (at least `lengths.len()`
/// each) as scratch: the same keys in the same order, in `O(n)` for the usual lengths.
pub(crate) fn sort_ascending_radix(
    lengths: &[u32],
    keys: &mut [u64],
    a: &mut [u32],
    b: &mut [u32],
) {
    let n = lengths.len();
    if n < RADIX_MIN || keys.len() < n || a.len() < n || b.len() < n {
        let m = n.min(keys.len());
        sort_ascending(lengths, &mut keys[..m]);
        return;
    }
    radix_by_length(lengths, a, b, |pos, seq, len| {
        if let Some(k) = keys.get_mut(pos) {
            *k = (u64::from(len) << 32) | u64::from(seq);
        }
    });
}

/// The index part of a sort key.
#[inline]
pub(crate) fn key_index(key: u64) -> usize {
    (key & 0xFFFF_FFFF) as usize
}

/// Bits of a packed LPT key that hold the DP rank (`MAX_DP = 2^16`).
const RANK_BITS: u32 = 16;

/// The `u128` LPT tree, for batches whose loads do not fit [`MinTree64`]: a winner tree with
/// `keys[r] = (load << 16) | r`, so one comparison orders by `(load, rank)` (loads stay below
/// `2^109`, see [`crate::flops`], so the packed key cannot overflow); internal node `i` in
/// `1..dp` of `tree` holds the rank with the least key below it, whose children are nodes
/// `2i` and `2i + 1`, node `dp + r` being rank `r`'s leaf. The least key is unique (ranks
/// differ), so the choice is exactly the least `(load, rank)`, as a heap would give; an
/// update costs one comparison per level.
struct WinnerTree<'a> {
    keys: &'a mut [u128],
    tree: &'a mut [u32],
}

impl WinnerTree<'_> {
    /// The rank at node `node`.
    #[inline(always)]
    fn at(&self, node: usize) -> u32 {
        let dp = self.keys.len();
        if node >= dp {
            (node - dp) as u32
        } else {
            self.tree.get(node).copied().unwrap_or(0)
        }
    }

    #[inline(always)]
    fn key(&self, rank: u32) -> u128 {
        self.keys.get(rank as usize).copied().unwrap_or(u128::MAX)
    }

    /// Every load 0.
    fn init(&mut self) {
        for (r, k) in self.keys.iter_mut().enumerate() {
            *k = r as u128;
        }
        for i in (1..self.keys.len()).rev() {
            let (a, b) = (self.at(2 * i), self.at(2 * i + 1));
            let w = if self.key(b) < self.key(a) { b } else { a };
            if let Some(t) = self.tree.get_mut(i) {
                *t = w;
            }
        }
    }

    /// The rank with the least `(load, rank)`.
    #[inline(always)]
    fn winner(&self) -> u32 {
        if self.keys.len() > 1 { self.at(1) } else { 0 }
    }

    /// Adds `packed` (a load shifted by [`RANK_BITS`]) to rank `r`'s key and replays its path.
    #[inline(always)]
    fn add(&mut self, r: u32, packed: u128) {
        let Some(slot) = self.keys.get_mut(r as usize) else {
            return;
        };
        *slot += packed;
        let mut wk = *slot;
        let mut w = r;
        let mut node = self.keys.len() + r as usize;
        while node > 1 {
            let s = self.at(node ^ 1);
            let sk = self.key(s);
            // Ties cannot happen (ranks differ), so `<` alone decides.
            let take = sk < wk;
            w = core::hint::select_unpredictable(take, s, w);
            wk = core::hint::select_unpredictable(take, sk, wk);
            node >>= 1;
            if let Some(t) = self.tree.get_mut(node) {
                *t = w;
            }
        }
    }
}

/// The `u64` LPT tree, stored in the `u128` load slots without any other memory: the low half
/// of slot `r` is rank `r`'s packed key `(load << 16) | r` (its leaf, node `dp + r`), the high
/// half of slot `i` in `1..dp` is the least key below internal node `i` (children `2i` and
/// `2i + 1`). A key names its rank, so the root is the winner, and replaying a path needs no
/// indirection: each level is one `min` of two `u64`s, a conditional move.
struct MinTree64<'a> {
    slots: &'a mut [u128],
}

impl MinTree64<'_> {
    #[inline(always)]
    fn value(&self, node: usize) -> u64 {
        let dp = self.slots.len();
        if node >= dp {
            self.slots.get(node - dp).map_or(u64::MAX, |&s| s as u64)
        } else {
            self.slots.get(node).map_or(u64::MAX, |&s| (s >> 64) as u64)
        }
    }

    #[inline(always)]
    fn set_inner(&mut self, node: usize, key: u64) {
        if let Some(s) = self.slots.get_mut(node) {
            *s = (*s & u128::from(u64::MAX)) | (u128::from(key) << 64);
        }
    }

    /// Every load 0.
    fn init(&mut self) {
        for (r, s) in self.slots.iter_mut().enumerate() {
            *s = r as u128;
        }
        for i in (1..self.slots.len()).rev() {
            let m = self.value(2 * i).min(self.value(2 * i + 1));
            self.set_inner(i, m);
        }
    }

    /// The rank with the least `(load, rank)`.
    #[inline(always)]
    fn winner(&self) -> u32 {
        if self.slots.len() > 1 {
            (self.value(1) & ((1 << RANK_BITS) - 1)) as u32
        } else {
            0
        }
    }

    /// Adds `packed` (a load shifted by [`RANK_BITS`]) to rank `r`'s key and replays its path.
    #[inline(always)]
    fn add(&mut self, r: u32, packed: u64) {
        let Some(slot) = self.slots.get_mut(r as usize) else {
            return;
        };
        let mut key = (*slot as u64) + packed;
        *slot = (*slot & (u128::from(u64::MAX) << 64)) | u128::from(key);
        let mut node = self.slots.len() + r as usize;
        while node > 1 {
            key = key.min(self.value(node ^ 1));
            node >>= 1;
            self.set_inner(node, key);
        }
    }

    /// Rank `r`'s load, in the units of the packed keys.
    fn load(&self, r: usize) -> u64 {
        self.slots.get(r).map_or(0, |&s| s as u64) >> RANK_BITS
    }
}

/// LPT in `u64` keys (see [`MinTree64`]); `flops` in the units of the keys, whose loads
/// must fit 48 bits. `ws.dp_loads[r]` receives rank `r`'s load times `unit`.
fn lpt64(
    dp: usize,
    flops: &FlopsModel,
    unit: u64,
    ws: &mut Workspace<'_>,
    n: usize,
    dp_of: &mut [crate::plan::Placement],
) {
    let mut t = MinTree64 {
        slots: &mut ws.dp_loads[..dp],
    };
    t.init();
    let keys = &ws.keys[..n];
    let mut end = n;
    while end > 0 {
        let len = keys[end - 1] >> 32;
        let mut start = end - 1;
        while start > 0 && keys[start - 1] >> 32 == len {
            start -= 1;
        }
        let f = (flops.of(len as u32) as u64) << RANK_BITS;
        for &key in &keys[start..end] {
            let bin = t.winner();
            t.add(bin, f);
            if let Some(p) = dp_of.get_mut(key_index(key)) {
                p.dp_rank = bin;
            }
        }
        end = start;
    }
    for r in 0..dp {
        let l = u128::from(t.load(r)) * u128::from(unit);
        if let Some(s) = t.slots.get_mut(r) {
            *s = l;
        }
    }
}

/// Greatest common divisor (`gcd(0, 0) = 0`).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// LPT in `u128` keys (see [`WinnerTree`]); `ws.dp_loads[r]` receives rank `r`'s load.
fn lpt128(
    dp: usize,
    flops: &FlopsModel,
    ws: &mut Workspace<'_>,
    n: usize,
    dp_of: &mut [crate::plan::Placement],
) {
    let mut wt = WinnerTree {
        keys: &mut ws.dp_loads[..dp],
        tree: &mut ws.dp_heap[..dp],
    };
    wt.init();
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
        let f = flops.of(len as u32) << RANK_BITS;
        for &key in &keys[start..end] {
            let bin = wt.winner();
            wt.add(bin, f);
            if let Some(p) = dp_of.get_mut(key_index(key)) {
                p.dp_rank = bin;
            }
        }
        end = start;
    }
    for k in wt.keys.iter_mut() {
        *k >>= RANK_BITS;
    }
}

/// LPT over DP ranks, then each rank's sequences ascending into
/// `ws.seqs[ws.dp_start[d]..ws.dp_start[d + 1]]`; on return `ws.dp_loads[d]` holds rank `d`'s
/// FLOPs load.
///
/// `ws.keys[..n]` must hold the ascending sort keys. `dp_of` is scratch of `n` entries that
/// receives each sequence's DP rank.
///
/// Every load is a multiple of `g = gcd(linear, quadratic)`, so LPT in units of `g` makes the
/// same choices; when the whole batch then stays below `2^48` units (the usual case) the
/// packed keys fit `u64`, which compare and select without branches. Otherwise the keys are
/// `u128`: loads stay below `2^109` (see [`crate::flops`]), so they cannot overflow either.
pub(crate) fn bin_pack(
    cfg: &Config,
    flops: &FlopsModel,
    ws: &mut Workspace<'_>,
    n: usize,
    dp_of: &mut [crate::plan::Placement],
) {
    let dp = cfg.dp as usize;
    let g = gcd(flops.linear, flops.quadratic).max(1);
    let reduced = FlopsModel {
        linear: flops.linear / g,
        quadratic: flops.quadratic / g,
    };
    // The batch's load in units of g bounds every rank's: sum(S) < 2^47, sum(S^2) < 2^78.
    let (mut sum, mut sum_sq) = (0u64, 0u128);
    for &key in &ws.keys[..n] {
        let s = key >> 32;
        sum += s;
        sum_sq += u128::from(s * s);
    }
    let total =
        u128::from(reduced.linear) * u128::from(sum) + u128::from(reduced.quadratic) * sum_sq;
    if total < 1u128 << (64 - RANK_BITS) {
        lpt64(dp, &reduced, g, ws, n, dp_of);
    } else {
        lpt128(dp, flops, ws, n, dp_of);
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
    let budget = cfg.budget();
    sort_ascending_radix(lengths, ws.keys, ws.seqs, ws.scratch);
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
                    match dacp::run(&mut slots, cfg, &budget, &flops, rule) {
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
            w.push_placed(&ws.scratch[..count], lengths);
        }
        w.set_count(d as u32, m as u32);
        w.add_rollbacks(rollbacks);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{MAX_SEQ_LEN, ModelShape};
    use crate::plan::{MicroBatch, Placement, PlanBuffers, SHARDED};
    use std::vec;
    use std::vec::Vec;

    /// SplitMix64, for reproducible inputs.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    fn random_lengths(rng: &mut Rng, n: usize) -> Vec<u32> {
        let max = match rng.below(4) {
            0 => 3,
            1 => 1 << 11,
            2 => 1 << 17,
            _ => MAX_SEQ_LEN,
        };
        (0..n)
            .map(|_| 1 + rng.below(u64::from(max)) as u32)
            .collect()
    }

    #[test]
    fn radix_sort_matches_the_comparison_sort() {
        let mut rng = Rng(7);
        for case in 0..if cfg!(miri) { 6 } else { 300 } {
            let n = match case % 3 {
                0 => rng.below(RADIX_MIN as u64 + 2) as usize,
                _ => rng.below(5000) as usize,
            };
            let lengths = random_lengths(&mut rng, n);
            let mut want = vec![0u64; n];
            sort_ascending(&lengths, &mut want);
            let (mut got, mut a, mut b) = (vec![0u64; n], vec![0u32; n], vec![0u32; n]);
            sort_ascending_radix(&lengths, &mut got, &mut a, &mut b);
            assert_eq!(got, want, "case {case}");
        }
    }

    /// LPT by the book: a linear scan for the least `(load, rank)`, loads in `u128`.
    fn reference_lpt(cfg: &Config, flops: &FlopsModel, lengths: &[u32]) -> (Vec<u32>, Vec<u128>) {
        let mut order: Vec<usize> = (0..lengths.len()).collect();
        order.sort_by_key(|&k| (core::cmp::Reverse(lengths[k]), k));
        let mut loads = vec![0u128; cfg.dp as usize];
        let mut rank = vec![0u32; lengths.len()];
        for k in order {
            let d = (0..loads.len()).min_by_key(|&d| (loads[d], d)).unwrap();
            loads[d] += flops.of(lengths[k]);
            rank[k] = d as u32;
        }
        (rank, loads)
    }

    #[test]
    fn both_lpt_key_widths_match_the_reference() {
        let mut rng = Rng(11);
        for case in 0..if cfg!(miri) { 3 } else { 200 } {
            let n = rng.below(if cfg!(miri) { 300 } else { 3000 }) as usize;
            let lengths = random_lengths(&mut rng, n);
            let dp = 1 + rng.below(if case % 4 == 0 { 1500 } else { 70 }) as u32;
            let shape = if case % 2 == 0 {
                ModelShape::QWEN2_5_0_5B
            } else {
                ModelShape::QWEN2_5_7B
            };
            let mut cfg = Config::new(dp, 4, u32::MAX >> 1, shape);
            if case % 3 == 0 {
                cfg.flops = crate::config::FlopsFormula::Megatron;
            }
            let flops = FlopsModel::new(&cfg.model, cfg.flops);
            let (want_rank, want_loads) = reference_lpt(&cfg, &flops, &lengths);
            let d = dp as usize;
            let (mut keys, mut seqs, mut scratch) = (vec![0u64; n], vec![0u32; n], vec![0u32; n]);
            let (mut loads, mut heap, mut start) =
                (vec![0u128; d], vec![0u32; d], vec![0u32; d + 1]);
            let mut ws = Workspace {
                keys: &mut keys,
                seqs: &mut seqs,
                scratch: &mut scratch,
                dp_loads: &mut loads,
                dp_heap: &mut heap,
                dp_start: &mut start,
            };
            sort_ascending(&lengths, ws.keys);
            // The chosen path (u64 when the batch fits), then the u128 path forced.
            let mut dp_of = vec![Placement::default(); n];
            bin_pack(&cfg, &flops, &mut ws, n, &mut dp_of);
            let got: Vec<u32> = dp_of.iter().map(|p| p.dp_rank).collect();
            assert_eq!(got, want_rank, "case {case}");
            assert_eq!(ws.dp_loads, &want_loads[..], "case {case}");
            let mut dp_of = vec![Placement::default(); n];
            lpt128(d, &flops, &mut ws, n, &mut dp_of);
            let got: Vec<u32> = dp_of.iter().map(|p| p.dp_rank).collect();
            assert_eq!(got, want_rank, "case {case} (u128)");
            assert_eq!(ws.dp_loads, &want_loads[..], "case {case} (u128)");
            // The grouping lists every rank's sequences ascending.
            group_by_dp(&mut ws, n, d, |s| dp_of[s].dp_rank);
            for r in 0..d {
                let run = &ws.seqs[ws.dp_start[r] as usize..ws.dp_start[r + 1] as usize];
                assert!(run.iter().all(|&s| want_rank[s as usize] == r as u32));
                assert!(
                    run.windows(2)
                        .all(|w| (lengths[w[0] as usize], w[0]) < (lengths[w[1] as usize], w[1]))
                );
            }
        }
    }

    #[test]
    fn push_placed_equals_push_one_by_one() {
        let mut rng = Rng(5);
        for case in 0..if cfg!(miri) { 5 } else { 100 } {
            let cp = 1 + rng.below(9) as u32;
            let n = 1 + rng.below(60) as usize;
            let lengths = random_lengths(&mut rng, n);
            let mut cfg = Config::new(2, cp, 1 << 30, ModelShape::QWEN2_5_0_5B);
            if case % 2 == 0 {
                cfg.shard_padding = crate::config::ShardPadding::Zigzag;
            }
            let ranks: Vec<i32> = (0..n)
                .map(|_| match rng.below(u64::from(cp) + 2) {
                    0 => SHARDED,
                    r => (r as i32 - 1).min(cp as i32 - 1),
                })
                .collect();
            let split = rng.below(n as u64 + 1) as usize;
            let run = |bulk: bool| {
                let mut placements = vec![Placement::default(); n];
                for (p, &r) in placements.iter_mut().zip(&ranks) {
                    p.cp_rank = r;
                }
                let mut mbs = vec![MicroBatch::default(); n];
                let mut members = vec![0u32; n];
                let mut rank_tokens = vec![0u32; n * cp as usize];
                let mut per_dp = vec![0u32; 2];
                let out = PlanBuffers {
                    placements: &mut placements,
                    micro_batches: &mut mbs,
                    members: &mut members,
                    rank_tokens: &mut rank_tokens,
                    micro_batches_per_dp: &mut per_dp,
                };
                let mut w = PlanWriter::new(out, &cfg, 0);
                let seqs: Vec<u32> = (0..n as u32).rev().collect();
                w.open(1, 0);
                for part in [&seqs[..split], &seqs[split..]] {
                    if bulk {
                        w.push_placed(part, &lengths);
                    } else {
                        for &s in part {
                            w.push(s, lengths[s as usize], ranks[s as usize]);
                        }
                    }
                }
                w.set_count(1, 1);
                let plan = w.finish(n);
                (
                    plan.placements().to_vec(),
                    plan.micro_batches().to_vec(),
                    plan.members().to_vec(),
                    plan.rank_tokens(0).to_vec(),
                    plan.summary(),
                )
            };
            assert_eq!(run(true), run(false), "case {case}");
        }
    }
}
