//! Sorting sequence indices by length: packed `(len << 32) | index` keys, ascending by
//! `(length, index)`, by a stable radix sort for large batches and the comparison sort below.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::limits::MAX_SEQ_LEN;
    use std::vec;
    use std::vec::Vec;

    /// The tests' one deterministic generator.
    type Rng = crate::test_support::SplitMix64;

    fn random_lengths(rng: &mut Rng, n: usize) -> Vec<u32> {
        let max = match rng.below_mod(4) {
            0 => 3,
            1 => 1 << 11,
            2 => 1 << 17,
            _ => MAX_SEQ_LEN,
        };
        (0..n)
            .map(|_| 1 + rng.below_mod(u64::from(max)) as u32)
            .collect()
    }

    #[test]
    fn radix_sort_matches_the_comparison_sort() {
        let mut rng = Rng::new(7);
        for case in 0..if cfg!(miri) { 6 } else { 300 } {
            let n = match case % 3 {
                0 => rng.below_mod(RADIX_MIN as u64 + 2) as usize,
                // Under miri smaller batches (still past RADIX_MIN): 5,000 took 84 s there.
                _ => rng.below_mod(if cfg!(miri) { 1000 } else { 5000 }) as usize,
            };
            let lengths = random_lengths(&mut rng, n);
            let mut want = vec![0u64; n];
            sort_ascending(&lengths, &mut want);
            let (mut got, mut a, mut b) = (vec![0u64; n], vec![0u32; n], vec![0u32; n]);
            sort_ascending_radix(&lengths, &mut got, &mut a, &mut b);
            assert_eq!(got, want, "case {case}");
        }
    }
}
