//! `balanced`: a cost-aware policy that plans on the estimated time of the configuration's
//! cost model ([`Setup::int_model`], the integer form of [`Config::cost_model`](crate::Config::cost_model)) instead of FLOPs
//! alone; the paper-faithful `skrull` policy stays selectable.
//!
//! # Algorithm
//!
//! 1. **DP ranks by estimated time.** Sequences longest-first (ties: input order) into the DP
//!    rank with the least estimated GPU time (ties: lowest rank), by the shared LPT kernel. A
//!    sequence's estimate is the cheaper of running it whole and `N` times one shard, plus its
//!    share of the fixed micro-batch cost by tokens.
//! 2. **Micro-batches by evaluation.** For each DP rank a small deterministic candidate set is
//!    planned and timed, and the fastest kept: a longest-processing-time grouping on estimated
//!    time into `m_min = ceil(tokens / (N·C))` micro-batches under the per-GPU shard budget,
//!    and, with one DP rank, `packed`'s next-fit grouping in sample order (which always fits
//!    with everything sharded). A candidate is skipped when `m·T_fixed + Σ work / N` already
//!    reaches the best total. (The strided interleave of GDS and `m_min + 1`, `m_min + 2` were
//!    measured and never won on the paper's rows: `docs/balanced.md`.)
//! 3. **Placement inside a micro-batch.** Sequences heaviest-first. The `s` heaviest are
//!    sharded, for a few `s` around the point where the next sequence whole would still
//!    outweigh a balanced rank (and `s = K`, everything sharded); the rest go through the
//!    shared CP-rank state machine ([`kernel::ranks`](crate::kernel)) with this policy's rule:
//!    the rank whose estimated time grows least, among the ranks with room. The machine's
//!    memory rules apply unchanged: a sequence no rank can hold whole is sharded; if its shard
//!    does not fit either, a local sequence of the fullest rank (the configured
//!    [`Victim`](crate::Victim)) is sharded and the step retried. Each `s` is timed exactly
//!    (its ring crosses nodes or not, by the topology) and the fastest kept. A micro-batch of
//!    one sequence skips the machine: its outcome is fixed (whole on rank 0 if it fits, else
//!    sharded) and is timed in closed form ([`IntModel::slowest`](crate::model::fixed::IntModel::slowest)).
//!
//! 4. **Chunking** (only with [`Config::chunking`](crate::Config::chunking) on): each
//!    micro-batch then tries its longest sharded sequences chunked on every aligned group and
//!    keeps a change only when its estimated time drops and every GPU stays within BucketSize
//!    (`chunks`). With chunking off nothing of this runs and the plans are those of before.
//!
//! Every step has a fixed candidate count, so the policy runs in `O(n log n + n·N)` per
//! candidate, with no allocation: the caller's workspace holds the per-sequence costs and
//! decisions ([`WorkspaceSizes::for_batch`](crate::WorkspaceSizes::for_batch) sizes them for
//! this policy); decisions are staged there as `Decision` codes and reach the caller's
//! buffers only as the finished plan.
//!
//! # Modules
//!
//! - `chunks`: with chunking on, the pass that runs a micro-batch's longest sharded
//!   sequences chunked where that lowers its estimated time;
//! - `costs`: the per-sequence cost rows and the bounds' sums;
//! - `ledger`: the estimated time per CP rank (`TimeLedger`, the state machine's rule),
//!   sub-group rings included;
//! - `placer`: one micro-batch's attempts (sharded counts, sub-groups, the one-sequence
//!   closed form);
//! - `search`: the candidate groupings of one DP rank and the search over them;
//! - `write`: the plan, from the staged decisions.

mod chunks;
mod costs;
mod ledger;
mod placer;
mod search;
pub(crate) mod sync;
#[cfg(test)]
mod tests;
mod write;

use crate::error::Error;
use crate::kernel::lpt::{group_by_dp, lpt};
use crate::kernel::sort::sort_ascending_radix;
use crate::plan::{Placement, Plan, PlanBuffers};
use crate::setup::Setup;
use crate::setup::workspace::Scratch;

use costs::{Rows, Weight};
use placer::Placer;
use search::{DpRanks, MarkRows};

/// Runs the `balanced` policy and writes the plan.
///
/// # Errors
/// [`Error::MicroBatchLimit`] when no candidate fits `cfg.max_micro_batches`, or
/// [`Error::DacpFailed`] (defensive: one sequence per micro-batch always fits sharded).
pub(crate) fn schedule<'b>(
    setup: &Setup,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    out: PlanBuffers<'b>,
    total_tokens: u64,
) -> Result<Plan<'b>, Error> {
    plan_with(setup, lengths, ws, out, total_tokens, true)
}

/// [`schedule`], with the shortcuts that change no plan on or off ([`Placer::shortcuts`]):
/// cost rows, DP ranks, then each DP rank's search, then the plan.
fn plan_with<'b>(
    setup: &Setup,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    out: PlanBuffers<'b>,
    total_tokens: u64,
    shortcuts: bool,
) -> Result<Plan<'b>, Error> {
    let cfg = setup.config();
    let n = lengths.len();
    let dp = cfg.dp as usize;
    let budget = setup.budget();
    let im = setup.int_model();
    let tm = *im.time_model();
    sort_ascending_radix(lengths, ws.keys, ws.seqs, ws.scratch);
    // Per-sequence costs, once per distinct length: whole and shard attention, and work.
    // (The workspace check guarantees 4n words; the fallback is never taken.)
    let (costs, _) = ws
        .costs
        .get_mut(..4 * n)
        .unwrap_or_default()
        .as_chunks_mut::<4>();
    // Sub-groups are tried only on DP ranks whose ring crosses nodes (see `micro_batch`); the
    // pattern of crossings repeats within `gpus_per_node` DP ranks.
    let crossing =
        (0..cfg.dp.min(tm.cost.gpus_per_node.max(1))).any(|d| tm.group_ring(d).crosses_nodes);
    let subs = cfg.subgroups && cfg.cp >= 4 && crossing;
    let weight = Weight::new(&im, cfg.bucket, cfg.cp);
    let total = costs::fill(&im, cfg.bucket, subs, weight, &ws.keys[..n], costs);
    // DP ranks by LPT on that weight (`total` bounds the sum), written into the placements
    // (their real values: the plan keeps them), then the sequences grouped by DP rank.
    let mut marks = MarkRows::split(ws.marks, n);
    let mb_of = &mut *marks.mb_of;
    lpt(
        &ws.keys[..n],
        &mut ws.dp_loads[..dp],
        ws.dp_heap,
        total,
        |len, seq| weight.of(len, costs.get(seq).map_or(0, |c| c[2])),
        |seq, bin| {
            if let Some(x) = mb_of.get_mut(seq) {
                *x = bin;
            }
        },
    );
    for (p, &d) in out.placements.iter_mut().zip(mb_of.iter()) {
        p.dp_rank = d;
    }
    let pl: &[Placement] = out.placements;
    group_by_dp(&ws.keys[..n], dp, ws.dp_start, ws.dp_heap, ws.seqs, |s| {
        pl.get(s).map_or(0, |p| p.dp_rank)
    });
    let rows = Rows {
        lengths,
        costs: &*costs,
    };
    let mut placer = Placer::new(cfg, &im, rows, budget, shortcuts);
    let ranks = DpRanks::new(&tm, &im);
    for d in 0..dp {
        let (a, b) = (ws.dp_start[d] as usize, ws.dp_start[d + 1] as usize);
        let sub = ws.seqs.get(a..b).unwrap_or(&[]);
        let m = ranks.search(
            &mut placer,
            d as u32,
            sub,
            &mut marks,
            ws.scratch,
            out.placements,
        )?;
        // DP rank d's start is read no more: it takes the micro-batch count the writer's
        // counting sort needs (which then need not scan the placements for it).
        ws.dp_start[d] = m as u32;
    }
    ws.dp_start[dp] = 0;
    let scratch = marks.for_writing(&mut *ws.dp_start);
    if cfg.chunking.is_on() {
        let chunker = chunks::Chunker::new(cfg, &im);
        let plan =
            write::write_plan::<true>(cfg, lengths, scratch, out, total_tokens, Some(&chunker));
        return Ok(plan);
    }
    Ok(write::write_plan::<false>(
        cfg,
        lengths,
        scratch,
        out,
        total_tokens,
        None,
    ))
}
