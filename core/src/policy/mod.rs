//! The policy layer: [`schedule`], the entry point that validates once and dispatches to the
//! configured policy, and one module per policy. Every policy reads the configuration and the
//! lengths and writes the same plan type through the plan writer; nothing downstream knows
//! which policy made a plan.
//!
//! | policy | module | what decides |
//! |---|---|---|
//! | `skrull` | [`gds`] + [`dacp`] | the paper: FLOPs-balanced DP ranks (LPT), strided micro-batches, DACP inside each |
//! | `roundrobin` | [`gds`] + [`dacp`] | the paper's Algorithm 4 (memory-only worst fit) inside GDS |
//! | `deepspeed` | [`baselines`] | consecutive shares, one sharded sequence per micro-batch |
//! | `packed` | [`baselines`] | consecutive shares, next-fit packing, everything sharded |
//! | `balanced` | [`balanced`] | estimated time of the cost model, over a small candidate set |
//! | `chunkflow` | [`chunkflow`] | ChunkFlow: long sequences chunked over the group, the rest packed into ChunkSize bins |

pub mod balanced;
pub mod baselines;
pub mod chunkflow;
pub mod dacp;
pub mod gds;

use crate::config::Config;
use crate::config::options::{Policy, Synchronisation};
use crate::error::Error;
use crate::plan::{Plan, PlanBuffers, PlanSizes, PlanWriter, fill};
use crate::setup::Setup;
use crate::setup::workspace::{Scratch, Workspace};
use dacp::Rule;

/// Plans one global batch: every sequence's DP rank, micro-batch and placement.
///
/// The same `cfg` and `lengths` always give the same plan, on every platform. Runs in
/// `O(n log n + n·cp)` for typical batches without allocating; `ws` and `out` must be at least
/// [`Setup::workspace_sizes`] and [`PlanSizes::for_batch`] large. The configuration was
/// validated when `setup` was built.
///
/// # Errors
/// Batch errors ([`Error::EmptySequence`],
/// [`Error::SequenceTooLong`], ...), [`Error::BufferTooSmall`] and
/// [`Error::MicroBatchLimit`], and [`Error::MicroBatchCount`] when a fixed
/// [`Config::micro_batches`] is too small. On error the contents of `out` are unspecified.
///
/// With [`Config::micro_batches`], or [`Config::fill_empty`] with lockstep, the policy's plan
/// is then filled: every DP rank reports the same count, and a rank splits its
/// multi-sequence micro-batches rather than run an empty one (see `docs/algorithms.md`).
pub fn schedule<'b>(
    setup: &Setup,
    lengths: &[u32],
    ws: &mut Workspace<'_>,
    out: PlanBuffers<'b>,
) -> Result<Plan<'b>, Error> {
    let cfg = setup.config();
    let total = cfg.check_lengths(&setup.budget(), lengths)?;
    let n = lengths.len();
    PlanSizes::for_batch(n, cfg).check(&out)?;
    let ws = &mut ws.carve(n, cfg.dp as usize, cfg.policy.uses_cost_rows())?;
    let arranges = cfg.policy == Policy::Balanced && cfg.sync != Synchronisation::CpGroup;
    if !cfg.fills_empty() && !arranges {
        return run(setup, lengths, ws, out, total);
    }
    // The policy writes into the buffers, then the fill pass and `balanced`'s arrangement
    // for the trainer's synchronisation rearrange them in place.
    let mut out = out;
    let written = {
        let plan = run(setup, lengths, ws, out.reborrow(), total)?;
        fill::Written {
            summary: plan.summary,
            micro_batches: plan.micro_batches.len(),
        }
    };
    let written = fill::fill_in_place(cfg, lengths, out.reborrow(), written)?;
    if arranges {
        let im = setup.int_model();
        balanced::sync::arrange(cfg, &im, lengths, out.reborrow(), written.micro_batches);
    }
    Ok(fill::view(cfg, n, out, written))
}

/// Runs the configured policy on validated input and buffers.
fn run<'b>(
    setup: &Setup,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    out: PlanBuffers<'b>,
    total: u64,
) -> Result<Plan<'b>, Error> {
    let cfg = setup.config();
    let n = lengths.len();
    // `balanced` lends the plan buffers to itself as scratch before writing, so it takes
    // them whole; every other policy writes through a `PlanWriter`.
    match cfg.policy {
        Policy::Balanced => balanced::schedule(setup, lengths, ws, out, total),
        Policy::Skrull => written(cfg, n, total, out, |w| {
            gds::run(cfg, lengths, ws, w, Rule::Dacp)
        }),
        Policy::RoundRobin => written(cfg, n, total, out, |w| {
            gds::run(cfg, lengths, ws, w, Rule::WorstFit)
        }),
        Policy::DeepSpeed => written(cfg, n, total, out, |w| {
            baselines::deepspeed(cfg, lengths, w)
        }),
        Policy::Packed => written(cfg, n, total, out, |w| baselines::packed(cfg, lengths, w)),
        Policy::ChunkFlow => written(cfg, n, total, out, |w| chunkflow::run(cfg, lengths, ws, w)),
    }
}

/// Runs `policy` on a fresh [`PlanWriter`] over `out` and returns the finished plan.
fn written<'b>(
    cfg: &Config,
    n: usize,
    total: u64,
    out: PlanBuffers<'b>,
    policy: impl FnOnce(&mut PlanWriter<'b>) -> Result<(), Error>,
) -> Result<Plan<'b>, Error> {
    let mut w = PlanWriter::new(out, cfg, total);
    policy(&mut w)?;
    Ok(w.finish(n))
}
