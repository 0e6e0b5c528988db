//! The plan from the staged decisions: a counting sort by micro-batch, then the shared plan
//! writer in plan order.

use crate::config::Config;
use crate::config::cp_group::Decision;
use crate::plan::{Placement, Plan, PlanBuffers, PlanWriter, SHARDED};

use super::chunks::{Chunker, chunk_of_code};

/// The workspace rows [`write_plan`] reads and uses as scratch.
pub(super) struct Scratch<'a> {
    /// At least `dp + 1` words: on entry each DP rank's micro-batch count (an upper bound on
    /// its micro-batch indices; empty micro-batches are dropped) and then 0; the writer turns
    /// them into each DP rank's first micro-batch slot.
    pub(super) base: &'a mut [u32],
    /// At least `n` words: the sequences in plan order.
    pub(super) order: &'a mut [u32],
    /// At least `n + 1` words: each micro-batch slot's end in `order`.
    pub(super) counts: &'a mut [u32],
    /// Per sequence: its decision as a [`Decision`] word (or a chunk code, with chunking).
    pub(super) kept: &'a mut [u32],
}

/// Writes the decisions (DP rank and micro-batch per sequence in `out.placements`, the CP
/// ranks or groups in `scratch.kept`) as the plan, in plan order: (DP rank, micro-batch,
/// sequence), empty micro-batches dropped.
// Inlined (one caller), so that the writer's push is inlined here too, as before the split.
/// With `CHUNKS` (chunking on), each micro-batch first goes through `chunker`'s pass, and
/// chunk codes are written as chunked placements; without, the code is the same as before
/// chunking existed.
#[inline(always)]
pub(super) fn write_plan<'b, const CHUNKS: bool>(
    cfg: &Config,
    lengths: &[u32],
    scratch: Scratch<'_>,
    out: PlanBuffers<'b>,
    total_tokens: u64,
    chunker: Option<&Chunker<'_>>,
) -> Plan<'b> {
    let Scratch {
        base,
        order,
        counts,
        kept,
    } = scratch;
    let n = lengths.len();
    let dp = cfg.dp as usize;
    // Only the batch's own placements: entries past `n` (a larger buffer's spare capacity,
    // or a previous batch's) must not count (regression
    // `balanced_plans_do_not_depend_on_spare_placement_capacity`).
    let own = out.placements.get(..n).unwrap_or(&[]);
    let counts = sort_by_micro_batch(dp, own, base, order, counts);
    let mut w = PlanWriter::new(out, cfg, total_tokens);
    let mut start = 0usize;
    for d in 0..dp {
        let (a, b) = (base[d] as usize, base[d + 1] as usize);
        let mut count = 0u32;
        for &end in counts.get(a..b).unwrap_or(&[]) {
            let end = end as usize;
            if end > start {
                w.open(d as u32, count);
                count += 1;
                if CHUNKS && let Some(c) = chunker {
                    c.improve(
                        d as u32,
                        order.get(start..end).unwrap_or(&[]),
                        lengths,
                        kept,
                    );
                }
                for &seq in order.get(start..end).unwrap_or(&[]) {
                    let len = lengths.get(seq as usize).copied().unwrap_or(0);
                    let word = kept.get(seq as usize).map_or(SHARDED, |&w| w as i32);
                    if CHUNKS && let Some(g) = chunk_of_code(word) {
                        w.push_chunked(seq, len, (g.first, g.size), &cfg.chunking);
                        continue;
                    }
                    // A local rank or the whole group is its own code (`Placement::cp_rank`).
                    let (cp, first, size) = match Decision::sub_of_code(word) {
                        Some(g) => (SHARDED, g.first, g.size),
                        None => (word, 0, 0),
                    };
                    // One call site: the writer's push is inlined here.
                    w.push_in(seq, len, cp, first, size);
                }
                start = end;
            }
        }
        w.set_count(d as u32, count);
    }
    w.finish(n)
}

/// A counting sort of the sequences by (DP rank, micro-batch), stable: `base[d]`, DP rank
/// `d`'s micro-batch count on entry ([`Scratch::base`]), becomes its first slot, `order` the
/// sequences in plan order, and the returned prefix of `counts` each slot's end in `order`.
fn sort_by_micro_batch<'c>(
    dp: usize,
    placements: &[Placement],
    base: &mut [u32],
    order: &mut [u32],
    counts: &'c mut [u32],
) -> &'c [u32] {
    // Micro-batch slots per DP rank (its micro-batch count, at most its sequence count, so
    // the slots total at most n), then their offsets.
    let mut slots = 0u32;
    for b in base.iter_mut().take(dp + 1) {
        let c = *b;
        *b = slots;
        slots += c;
    }
    let slot = |p: &Placement| {
        base.get(p.dp_rank as usize)
            .map_or(0, |&b| b + p.micro_batch) as usize
    };
    let counts = counts.get_mut(..slots as usize + 1).unwrap_or(&mut []);
    counts.fill(0);
    for p in placements.iter() {
        if let Some(c) = counts.get_mut(slot(p) + 1) {
            *c += 1;
        }
    }
    for j in 1..counts.len() {
        counts[j] += counts[j - 1];
    }
    // Stable: within a micro-batch, sequences stay in index order.
    for (i, p) in placements.iter().enumerate() {
        if let Some(c) = counts.get_mut(slot(p)) {
            if let Some(o) = order.get_mut(*c as usize) {
                *o = i as u32;
            }
            *c += 1;
        }
    }
    counts
}
