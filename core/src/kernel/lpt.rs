//! Longest-processing-time (LPT) assignment of sequences to bins (DP ranks), with the two
//! tournament trees that make each choice `O(log bins)`, and the counting sort that lists each
//! bin's sequences. GDS balances FLOPs with it, `balanced` estimated time.

use crate::kernel::sort::key_index;

/// Bits of a packed `u128` LPT key that hold the DP rank (`MAX_DP = 2^16`).
const RANK_BITS: u32 = 16;

/// Bits that hold a rank below `bins` (0 for one bin): the `u64` tree packs only these, so
/// the fewer the ranks the larger the loads it takes (the order of the keys, `(load, rank)`,
/// does not depend on the width).
fn rank_bits(bins: usize) -> u32 {
    usize::BITS - bins.saturating_sub(1).leading_zeros()
}

/// The `u128` LPT tree, for batches whose loads do not fit [`MinTree64`]: a winner tree with
/// `keys[r] = (load << 16) | r`, so one comparison orders by `(load, rank)` (loads stay below
/// `2^109`, see [`crate::model::flops`], so the packed key cannot overflow); internal node `i` in
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

    /// Every load 0, the inner nodes not built yet ([`WinnerTree::build`]).
    fn leaves(&mut self) {
        for (r, k) in self.keys.iter_mut().enumerate() {
            *k = r as u128;
        }
    }

    /// The inner nodes from the keys.
    fn build(&mut self) {
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
            // A mask rather than a select: a `u128` select compiles to a branch, and this one
            // is taken about half the time at random.
            let mask = 0u128.wrapping_sub(u128::from(take));
            wk = (sk & mask) | (wk & !mask);
            node >>= 1;
            if let Some(t) = self.tree.get_mut(node) {
                *t = w;
            }
        }
    }
}

/// The `u64` LPT tree, stored in the `u128` load slots without any other memory: the low half
/// of slot `r` is rank `r`'s packed key `(load << bits) | r` (its leaf, node `dp + r`), the high
/// half of slot `i` in `1..dp` is the least key below internal node `i` (children `2i` and
/// `2i + 1`). A key names its rank, so the root is the winner, and replaying a path needs no
/// indirection: each level is one `min` of two `u64`s, a conditional move.
struct MinTree64<'a> {
    slots: &'a mut [u128],
    /// [`rank_bits`] of the bin count.
    bits: u32,
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

    /// Every load 0, the inner nodes not built yet ([`MinTree64::build`]).
    fn leaves(&mut self) {
        for (r, s) in self.slots.iter_mut().enumerate() {
            *s = r as u128;
        }
    }

    /// Adds `packed` to rank `r`'s leaf only (before [`MinTree64::build`]).
    #[inline(always)]
    fn add_leaf(&mut self, r: u32, packed: u64) {
        if let Some(s) = self.slots.get_mut(r as usize) {
            *s += u128::from(packed);
        }
    }

    /// The inner nodes from the leaves.
    fn build(&mut self) {
        for i in (1..self.slots.len()).rev() {
            let m = self.value(2 * i).min(self.value(2 * i + 1));
            self.set_inner(i, m);
        }
    }

    /// The rank with the least `(load, rank)`.
    #[inline(always)]
    fn winner(&self) -> u32 {
        if self.slots.len() > 1 {
            (self.value(1) & ((1 << self.bits) - 1)) as u32
        } else {
            0
        }
    }

    /// Adds `packed` (a load shifted by `bits`) to rank `r`'s key and replays its path.
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
        self.slots.get(r).map_or(0, |&s| s as u64) >> self.bits
    }
}

/// Assigns the sequences of `keys` (ascending sort keys `(len << 32) | seq`) to `loads.len()`
/// bins by LPT: longest first (ties: input order), each into the bin with the least
/// `(load, index)`, adding `weight(len, seq)` (`seq`: one sequence of that length, so a caller
/// can read costs it cached per sequence). Calls `assign(seq, bin)` for every sequence and
/// leaves each bin's load (in weight units) in `loads`.
///
/// `total` must bound the sum of every weight: below `2^(64 - b)`, `b` the bits of the
/// largest bin index (`2^54` for 1,024 bins, `2^48` for `2^16`), the packed keys fit `u64`
/// ([`MinTree64`], branch-free), otherwise they are `u128` ([`WinnerTree`], which needs
/// `tree`, at least as long as `loads`). Weights must stay below `2^112`. `weight` is called
/// once per distinct length (twice for a length of weight 0 met while a bin is empty).
// Out of line: inlined into `gds::run` it spends about 12 more instructions per sequence
// (callgrind, 256 to 65,536 sequences).
#[inline(never)]
pub(crate) fn lpt(
    keys: &[u64],
    loads: &mut [u128],
    tree: &mut [u32],
    total: u128,
    weight: impl Fn(u32, usize) -> u128,
    mut assign: impl FnMut(usize, u32),
) {
    let bins = loads.len();
    if bins == 0 {
        return;
    }
    let bits = rank_bits(bins);
    if total < 1u128 << (64 - bits) {
        let mut t = MinTree64 { slots: loads, bits };
        t.leaves();
        let rest = fill_empty(keys, bins, &weight, &mut assign, |r, w| {
            t.add_leaf(r, (w as u64) << bits);
        });
        t.build();
        longest_first(keys.get(..rest).unwrap_or(keys), |len, run| {
            let first = run.first().map_or(0, |&k| key_index(k));
            let packed = (weight(len, first) as u64) << bits;
            for &key in run {
                let bin = t.winner();
                t.add(bin, packed);
                assign(key_index(key), bin);
            }
        });
        for r in 0..bins {
            let l = u128::from(t.load(r));
            if let Some(s) = t.slots.get_mut(r) {
                *s = l;
            }
        }
    } else {
        let Some(tree) = tree.get_mut(..bins) else {
            return;
        };
        let mut wt = WinnerTree { keys: loads, tree };
        wt.leaves();
        let rest = fill_empty(keys, bins, &weight, &mut assign, |r, w| {
            if let Some(k) = wt.keys.get_mut(r as usize) {
                *k += w << RANK_BITS;
            }
        });
        wt.build();
        longest_first(keys.get(..rest).unwrap_or(keys), |len, run| {
            let first = run.first().map_or(0, |&k| key_index(k));
            let packed = weight(len, first) << RANK_BITS;
            for &key in run {
                let bin = wt.winner();
                wt.add(bin, packed);
                assign(key_index(key), bin);
            }
        });
        for k in wt.keys.iter_mut() {
            *k >>= RANK_BITS;
        }
    }
}

/// The first sequences of [`lpt`], while a bin is still empty: every bin filled so far has a
/// positive load and every empty one none, so the least `(load, index)` is the lowest empty
/// bin, and the longest sequences go to bins `0, 1, 2, ...` in turn without a tree. Walks the
/// runs of one length as [`longest_first`] does, calling `add(bin, weight)` and `assign(seq,
/// bin)` for each sequence, and stops before a run that would not fit the empty bins or has
/// weight 0; returns how many keys (a prefix) are left for the tree.
fn fill_empty(
    keys: &[u64],
    bins: usize,
    weight: &impl Fn(u32, usize) -> u128,
    assign: &mut impl FnMut(usize, u32),
    mut add: impl FnMut(u32, u128),
) -> usize {
    let (mut end, mut filled) = (keys.len(), 0usize);
    while end > 0 {
        let len = keys[end - 1] >> 32;
        let mut start = end - 1;
        while start > 0 && keys[start - 1] >> 32 == len {
            start -= 1;
        }
        let run = &keys[start..end];
        if run.len() > bins - filled {
            break;
        }
        let w = weight(len as u32, key_index(keys[start]));
        if w == 0 {
            break;
        }
        for &key in run {
            add(filled as u32, w);
            assign(key_index(key), filled as u32);
            filled += 1;
        }
        end = start;
    }
    end
}

/// Walks ascending sort keys longest first, ties in input order: the runs of equal length from
/// the end, each run forwards, calling `visit(len, run)`.
fn longest_first(keys: &[u64], mut visit: impl FnMut(u32, &[u64])) {
    let mut end = keys.len();
    while end > 0 {
        let len = keys[end - 1] >> 32;
        let mut start = end - 1;
        while start > 0 && keys[start - 1] >> 32 == len {
            start -= 1;
        }
        visit(len as u32, &keys[start..end]);
        end = start;
    }
}

/// Counting sort of the ascending keys into per-bin runs: bin `d`'s sequences, ascending,
/// end up in `seqs[start[d]..start[d + 1]]` (`start`: at least `bins + 1` entries; `cursor`:
/// at least `bins`, scratch).
pub(crate) fn group_by_dp(
    keys: &[u64],
    bins: usize,
    start: &mut [u32],
    cursor: &mut [u32],
    seqs: &mut [u32],
    rank_of: impl Fn(usize) -> u32,
) {
    let (Some(start), Some(cursor)) = (start.get_mut(..=bins), cursor.get_mut(..bins)) else {
        return;
    };
    start.fill(0);
    for &key in keys {
        if let Some(c) = start.get_mut(rank_of(key_index(key)) as usize + 1) {
            *c += 1;
        }
    }
    for d in 0..bins {
        start[d + 1] += start[d];
    }
    cursor.copy_from_slice(&start[..bins]);
    for &key in keys {
        let seq = key_index(key);
        if let Some(c) = cursor.get_mut(rank_of(seq) as usize) {
            if let Some(s) = seqs.get_mut(*c as usize) {
                *s = seq as u32;
            }
            *c += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::sort::sort_ascending;
    use std::vec;
    use std::vec::Vec;

    /// Runs [`lpt`] with weight `w(len)` and the given `total`; the bins and the loads.
    fn run(
        lengths: &[u32],
        bins: usize,
        total: u128,
        w: impl Fn(u32) -> u128,
    ) -> (Vec<u32>, Vec<u128>) {
        let mut keys = vec![0u64; lengths.len()];
        sort_ascending(lengths, &mut keys);
        let (mut loads, mut tree) = (vec![0u128; bins], vec![0u32; bins]);
        let mut bin_of = vec![u32::MAX; lengths.len()];
        lpt(
            &keys,
            &mut loads,
            &mut tree,
            total,
            |len, _| w(len),
            |s, b| bin_of[s] = b,
        );
        (bin_of, loads)
    }

    #[test]
    fn rank_bits_hold_the_largest_bin_index() {
        for (bins, bits) in [
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (1024, 10),
            (1025, 11),
            (1 << 16, 16),
        ] {
            assert_eq!(rank_bits(bins), bits, "{bins}");
        }
    }

    /// LPT by its definition: longest first (ties: input order), each into the bin with the
    /// least `(load, index)`, found by a scan.
    fn reference(lengths: &[u32], bins: usize, w: impl Fn(u32) -> u128) -> (Vec<u32>, Vec<u128>) {
        let mut order: Vec<usize> = (0..lengths.len()).collect();
        order.sort_by_key(|&i| (core::cmp::Reverse(lengths[i]), i));
        let (mut loads, mut bin_of) = (vec![0u128; bins], vec![u32::MAX; lengths.len()]);
        for i in order {
            let b = (0..bins).min_by_key(|&b| (loads[b], b)).unwrap();
            loads[b] += w(lengths[i]);
            bin_of[i] = b as u32;
        }
        (bin_of, loads)
    }

    /// The first sequences go straight to the empty bins (`fill_empty`) only while that is
    /// what the trees would choose: with zero weights (an empty-looking bin already holds a
    /// sequence), runs of one length longer than the empty bins left, fewer or more sequences
    /// than bins, on both trees, every assignment and load is LPT's by definition.
    #[test]
    fn filling_the_empty_bins_first_is_lpt() {
        let mut rng = crate::test_support::SplitMix64::new(0x1EE7);
        for case in 0..if cfg!(miri) { 20 } else { 400 } {
            let n = rng.below_mod(40) as usize;
            let bins = 1 + rng.below_mod(24) as usize;
            let distinct = 1 + rng.below_mod(8) as u32;
            let lengths: Vec<u32> = (0..n)
                .map(|_| 1 + rng.below_mod(u64::from(distinct)) as u32)
                .collect();
            // Weight 0 for some lengths in half the cases.
            let zero = if case % 2 == 0 {
                1 + rng.below_mod(u64::from(distinct)) as u32
            } else {
                0
            };
            let w = |len: u32| if len == zero { 0 } else { u128::from(len) * 3 };
            let want = reference(&lengths, bins, w);
            assert_eq!(
                run(&lengths, bins, 1 << 40, w),
                want,
                "case {case}: u64 tree"
            );
            assert_eq!(
                run(&lengths, bins, u128::MAX, w),
                want,
                "case {case}: u128 tree"
            );
        }
    }

    /// With few bins the `u64` tree takes loads up to `2^(64 - bits)`: on weights near `2^55`
    /// it is chosen for 4 and 1,000 bins and gives the `u128` tree's bins and loads, ties
    /// included.
    #[test]
    fn narrow_rank_keys_give_the_wide_trees_assignment() {
        let n = if cfg!(miri) { 200 } else { 3000 };
        let lengths: Vec<u32> = (0..n).map(|i| 1 + (i * 7919) % 97).collect();
        for bins in [1usize, 2, 4, 7, 1000] {
            let bits = rank_bits(bins);
            // Weights with their sum just below the u64 tree's limit.
            let limit = 1u128 << (64 - bits);
            let sum: u128 = lengths.iter().map(|&l| u128::from(l)).sum();
            let unit = (limit - 1) / sum;
            let w = |len: u32| u128::from(len) * unit;
            let total = sum * unit;
            assert!(total < limit && total >= 1 << 48, "{bins}");
            let narrow = run(&lengths, bins, total, w);
            let wide = run(&lengths, bins, u128::MAX, w);
            assert_eq!(narrow, wide, "{bins} bins");
            assert_eq!(narrow.1.iter().sum::<u128>(), total);
        }
    }
}
