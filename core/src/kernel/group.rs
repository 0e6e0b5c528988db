//! Groupings of a DP rank's sequences into micro-batches, shared by the policies: consecutive
//! shares in sample order, next-fit packing under the per-GPU shard budget, and the strided
//! interleave of GDS.

use core::ops::Range;

use crate::config::budget::Budget;

/// The consecutive run of sequence indices DP rank `d` takes in sample order: `n` sequences
/// split into `dp` runs whose sizes differ by at most one, the longer runs first (`n = 10,
/// dp = 4` gives 3, 3, 2, 2).
pub fn consecutive_share(n: usize, dp: usize, d: usize) -> Range<usize> {
    let dp = dp.max(1);
    let (base, rem) = (n / dp, n % dp);
    let start = d * base + d.min(rem);
    let len = base + usize::from(d < rem);
    start..(start + len).min(n)
}

/// Next-fit packing of sharded sequences: walks `lens` in order and opens a new micro-batch
/// when the next shard would take a GPU past the budget. Calls `visit(k, Some(j))` when
/// sequence `k` opens micro-batch `j`, `visit(k, None)` when it joins the open one; returns the
/// number of micro-batches.
pub(crate) fn next_fit(
    budget: &Budget,
    lens: impl IntoIterator<Item = u32>,
    mut visit: impl FnMut(usize, Option<u32>),
) -> u32 {
    let mut count = 0u32;
    let mut used = 0u64;
    for (k, len) in lens.into_iter().enumerate() {
        let share = u64::from(budget.share(len));
        if count == 0 || used + share > u64::from(budget.bucket()) {
            visit(k, Some(count));
            count += 1;
            used = share;
        } else {
            visit(k, None);
            used += share;
        }
    }
    count
}

/// The largest micro-batch token sum of the strided split of ascending `sub` into `m`.
///
/// Micro-batches `j < K mod m` hold one more sequence; among equal counts the sum grows with
/// `j`, so only `j = (K mod m) - 1` and `j = m - 1` can be the largest: `O(K / m)`.
// Out of line: its callers' hot loops stay as compiled without it.
#[inline(never)]
pub(crate) fn max_strided_sum(sub: &[u32], lengths: &[u32], m: usize) -> u64 {
    // A plain strided loop: `skip(j).step_by(m)` compiled to an out-of-line fold per call,
    // which costs more than the sum itself on ranks of one or two sequences.
    let m = m.max(1);
    let sum = |j: usize| -> u64 {
        let mut total = 0u64;
        let mut i = j;
        while let Some(&s) = sub.get(i) {
            total += u64::from(lengths.get(s as usize).copied().unwrap_or(0));
            i += m;
        }
        total
    };
    let r = sub.len() % m;
    let last = sum(m - 1);
    if r > 0 { last.max(sum(r - 1)) } else { last }
}

/// Copies micro-batch `j` of the strided split of `sub` into `scratch` (in `sub`'s order, or
/// by sequence index, i.e. sample order, with `by_index`) and returns its length.
pub(crate) fn strided(
    sub: &[u32],
    j: usize,
    m: usize,
    by_index: bool,
    scratch: &mut [u32],
) -> usize {
    let mut count = 0;
    for (dst, &seq) in scratch.iter_mut().zip(sub.iter().skip(j).step_by(m)) {
        *dst = seq;
        count += 1;
    }
    if by_index {
        scratch[..count].sort_unstable();
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_shares_tile_the_batch() {
        assert_eq!(consecutive_share(10, 4, 0), 0..3);
        assert_eq!(consecutive_share(10, 4, 1), 3..6);
        assert_eq!(consecutive_share(10, 4, 2), 6..8);
        assert_eq!(consecutive_share(10, 4, 3), 8..10);
        assert_eq!(consecutive_share(2, 4, 3), 2..2);
        for (n, dp) in [(0, 3), (7, 7), (5, 8), (256, 4), (1000, 7)] {
            let mut next = 0;
            for d in 0..dp {
                let r = consecutive_share(n, dp, d);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, n);
        }
    }
}
