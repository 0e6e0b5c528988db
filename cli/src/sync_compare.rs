//! `skrull simulate --sync compare`: does planning for the trainer's real synchronisation make
//! steps faster? On every cell's batches, for each synchronisation other than the default
//! (`sharded`: DDP under `no_sync`; `every-gpu`: ZeRO-2/3), `balanced` planned for the
//! default composition and `balanced` planned for that synchronisation are both evaluated the
//! way the trainer runs them; `packed` and `skrull` are evaluated that way too, for reference.

use std::fmt::Write;

use skrull_core::{Config, CostModel, Policy, Synchronisation};
use skrull_kit::sample::Dataset;
use skrull_kit::{OwnedBuffers, OwnedEval};

use crate::cell::{Options, sample_cell};
use crate::setups::{Setup, geometric_mean, ms};

/// One synchronisation of one cell: mean iteration times under its composition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyncRow {
    /// The synchronisation the trainer runs.
    pub sync: Synchronisation,
    /// `balanced` planned for the default composition (`cp-group`; lockstep counts for
    /// `every-gpu`, which the trainer needs), evaluated under `sync`.
    pub planned_default: f64,
    /// `balanced` planned for `sync`, evaluated under it.
    pub planned_for_sync: f64,
    /// `packed` under `sync`.
    pub packed: f64,
    /// `skrull` under `sync`.
    pub skrull: f64,
}

impl SyncRow {
    /// How much faster planning for the synchronisation makes `balanced`'s steps.
    pub fn speedup(&self) -> f64 {
        self.planned_default / self.planned_for_sync
    }
}

/// A cell's rows, one per synchronisation other than the default.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    /// The layout.
    pub setup: Setup,
    /// The dataset's name.
    pub dataset: &'static str,
    /// `sharded`, then `every-gpu`.
    pub rows: Vec<SyncRow>,
}

/// Runs the comparison on one cell.
///
/// # Errors
/// A message when a policy refuses a batch or the evaluator refuses a plan.
pub fn compare_sync(
    setup: &Setup,
    dataset: Dataset,
    cost: &CostModel,
    opts: &Options,
) -> Result<SyncResult, String> {
    let (base, _, batches) = sample_cell(setup, dataset, cost, opts)?;
    let n = (setup.dp * setup.batch_size) as usize;
    let mut plan_bufs = OwnedBuffers::for_batch(n, &base);
    let mut eval_bufs = OwnedEval::default();
    let mut mean = |plan_cfg: Config, eval_cfg: Config| -> Result<f64, String> {
        let mut time = 0.0;
        for lengths in &batches {
            let plan = plan_bufs.schedule(&plan_cfg, lengths).map_err(|e| {
                format!(
                    "{} ({}) on {} {}: {e}",
                    plan_cfg.policy.name(),
                    plan_cfg.sync.name(),
                    setup.name,
                    dataset.name()
                )
            })?;
            let ev = eval_bufs
                .evaluate(&eval_cfg, lengths, plan.placements())
                .map_err(|e| format!("evaluating {}: {e}", plan_cfg.policy.name()))?;
            time += ev.report.iteration_time;
        }
        Ok(time / batches.len().max(1) as f64)
    };
    let mut rows = Vec::new();
    for sync in [Synchronisation::Sharded, Synchronisation::EveryGpu] {
        let under = |policy: Policy| Config {
            sync,
            ..base.with_policy(policy)
        };
        let mut default = base.with_policy(Policy::Balanced);
        default.lockstep |= sync == Synchronisation::EveryGpu;
        // The baselines' plans do not depend on the synchronisation; under every-gpu they
        // run with the equal counts the trainer needs.
        let same = |policy: Policy| Config {
            lockstep: default.lockstep,
            ..base.with_policy(policy)
        };
        rows.push(SyncRow {
            sync,
            planned_default: mean(default, under(Policy::Balanced))?,
            planned_for_sync: mean(under(Policy::Balanced), under(Policy::Balanced))?,
            packed: mean(same(Policy::Packed), under(Policy::Packed))?,
            skrull: mean(same(Policy::Skrull), under(Policy::Skrull))?,
        });
    }
    Ok(SyncResult {
        setup: *setup,
        dataset: dataset.name(),
        rows,
    })
}

/// What the `--sync compare` table shows, before it.
pub const INTRO: &str = "Synchronisation: each row evaluates plans the way a trainer with \
that synchronisation runs them (`sharded`: DDP under `no_sync`, CP ranks meet only in \
micro-batches holding a sharded sequence; `every-gpu`: ZeRO-2/3, every micro-batch waits for \
every GPU). `balanced` planned for the default composition (`cp-group`, with lockstep counts \
for `every-gpu`) against `balanced` planned for the row's synchronisation; `packed` and \
`skrull` for reference:\n\n";

/// The `--sync compare` table, with the geometric mean of the speedup per synchronisation.
pub fn sync_table(results: &[SyncResult], iterations: usize) -> String {
    let mut s = String::from(
        "| setup | dataset | sync | balanced planned for cp-group (ms) | balanced planned for \
         sync (ms) | speedup | packed (ms) | skrull (ms) |\n|---|---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        for row in &r.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.3}x | {} | {} |",
                r.setup.label(),
                r.dataset,
                row.sync.name(),
                ms(row.planned_default),
                ms(row.planned_for_sync),
                row.speedup(),
                ms(row.packed),
                ms(row.skrull)
            );
        }
    }
    for sync in [Synchronisation::Sharded, Synchronisation::EveryGpu] {
        let speedups: Vec<f64> = results
            .iter()
            .flat_map(|r| r.rows.iter())
            .filter(|row| row.sync == sync)
            .map(SyncRow::speedup)
            .collect();
        if !speedups.is_empty() {
            let _ = writeln!(
                s,
                "\nGeometric mean speedup of planning for `{}`: {:.3}x over {} cells ({iterations} \
                 batches each).",
                sync.name(),
                geometric_mean(&speedups),
                speedups.len()
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setups::SETUPS;

    /// On a CP-8 cell, planning for each synchronisation is never slower than planning for
    /// the default and evaluating under it (the arrangement only levels ranks or orders
    /// micro-batches), and the run is deterministic.
    #[test]
    fn planning_for_the_synchronisation_is_never_slower_on_a_cell() {
        let setup = SETUPS.iter().find(|s| s.name == "0.5b").copied().unwrap();
        let cost = CostModel::h100(&setup.model);
        let opts = Options {
            iterations: 2,
            ..Options::default()
        };
        let lmsys = Dataset::by_name("lmsys").unwrap();
        let r = compare_sync(&setup, lmsys, &cost, &opts).unwrap();
        assert_eq!(r.rows.len(), 2);
        for row in &r.rows {
            assert!(
                row.planned_for_sync <= row.planned_default * (1.0 + 1e-9),
                "{row:?}"
            );
        }
        assert_eq!(compare_sync(&setup, lmsys, &cost, &opts).unwrap(), r);
        let table = sync_table(std::slice::from_ref(&r), 2);
        assert!(
            table.contains("| sharded |") && table.contains("| every-gpu |"),
            "{table}"
        );
    }
}
