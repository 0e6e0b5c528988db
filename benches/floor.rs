//! The floor every policy is measured against: what any scheduler must at least do for a
//! batch, radix-sort the lengths and write one placement per sequence. It makes no decision,
//! so the ratio of a policy's time to it is the policy's own work plus its fixed overhead.

use skrull_core::Placement;
use skrull_core::plan::SHARDED;

/// Bits per radix digit: 8 for small batches (256 counters, so clearing them does not dominate
/// a pass), 11 from 2,048 sequences (fewer passes).
fn digit_bits(n: usize) -> u32 {
    if n < 2048 { 8 } else { 11 }
}

/// Buffers of the floor for `n` sequences, allocated once.
#[derive(Debug, Clone)]
pub struct Floor {
    keys: Vec<u64>,
    tmp: Vec<u64>,
    placements: Vec<Placement>,
    counts: Vec<u32>,
}

impl Floor {
    /// Buffers for up to `n` sequences.
    pub fn new(n: usize) -> Floor {
        Floor {
            keys: vec![0; n],
            tmp: vec![0; n],
            placements: vec![Placement::default(); n],
            counts: vec![0; 1 << digit_bits(n)],
        }
    }

    /// Sorts `lengths` ascending (ties: index order; a stable LSD radix sort on as many
    /// digits as the longest length needs) and writes one placement per sequence, in
    /// sorted order: DP rank 0, micro-batch = rank in the order, sharded. Returns the
    /// placements (the caller keeps them alive against the optimiser).
    pub fn run(&mut self, lengths: &[u32]) -> &[Placement] {
        let n = lengths.len().min(self.keys.len());
        let mut max = 0u32;
        for (k, (i, &len)) in self.keys.iter_mut().zip(lengths.iter().enumerate()) {
            *k = (u64::from(len) << 32) | i as u64;
            max = max.max(len);
        }
        let bits = 32 - max.leading_zeros();
        let digit_bits = digit_bits(n);
        let counts = &mut self.counts[..1 << digit_bits];
        let mut shift = 32;
        while shift < 32 + bits {
            counts.fill(0);
            let digit = |k: u64| ((k >> shift) & ((1 << digit_bits) - 1)) as usize;
            for &k in &self.keys[..n] {
                counts[digit(k)] += 1;
            }
            let mut at = 0u32;
            for c in counts.iter_mut() {
                let here = *c;
                *c = at;
                at += here;
            }
            for &k in &self.keys[..n] {
                let d = digit(k);
                self.tmp[counts[d] as usize] = k;
                counts[d] += 1;
            }
            core::mem::swap(&mut self.keys, &mut self.tmp);
            shift += digit_bits;
        }
        for (pos, &k) in self.keys[..n].iter().enumerate() {
            self.placements[(k & 0xFFFF_FFFF) as usize] = Placement {
                dp_rank: 0,
                micro_batch: pos as u32,
                cp_rank: SHARDED,
                ..Placement::default()
            };
        }
        &self.placements[..n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_stably_and_places_every_sequence_once() {
        let lengths = [5u32, 3, 70_000, 3, 1, 2048, 2047, 5];
        let mut f = Floor::new(lengths.len());
        let order: Vec<u32> = f.run(&lengths).iter().map(|p| p.micro_batch).collect();
        // Ascending by length, ties in index order: 1, 3 (1), 3 (3), 5 (0), 5 (7), 2047, 2048, 70000.
        assert_eq!(order, [3, 1, 7, 2, 0, 6, 5, 4]);
    }
}
