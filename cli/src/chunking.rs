//! Chunking in the CLI: the default ChunkSize, and `skrull simulate --chunking compare`
//! (`balanced` without and with chunking, `chunkflow` and `skrull` on the same batches).

use std::fmt::Write;

use skrull_core::{Chunking, Config, CostModel, Error, Policy};
use skrull_kit::sample::Dataset;
use skrull_kit::{OwnedBuffers, OwnedEval};

use crate::cell::{Options, sample_cell};
use crate::setups::{RunMeans, Setup, geometric_mean, ms};

/// `cfg` ready to plan sequences of up to `longest` tokens: as it is, unless its policy is
/// `chunkflow` and chunking is off, which gets the core's default chunk size
/// ([`Config::default_chunk_size`]; left off when none fits: validation then names the
/// problem).
pub fn with_chunk_size(cfg: Config, longest: u32) -> Config {
    if cfg.policy != Policy::ChunkFlow || cfg.chunking.is_on() {
        return cfg;
    }
    let mut cfg = cfg;
    cfg.chunking.size = cfg.default_chunk_size(longest).unwrap_or(0);
    cfg
}

/// One policy run of the chunking comparison over a cell's batches.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkRun {
    /// Every batch planned and evaluated.
    Ran {
        /// Mean iteration time and lower bound (under the run's own configuration).
        means: RunMeans,
        /// Chunked sequences, summed over the iterations.
        chunked: u64,
    },
    /// The policy refused a batch: ChunkFlow has no placement for a chunk over BucketSize.
    Refused(String),
}

impl ChunkRun {
    /// The means, when the run completed.
    pub fn means(&self) -> Option<RunMeans> {
        match self {
            ChunkRun::Ran { means, .. } => Some(*means),
            ChunkRun::Refused(_) => None,
        }
    }
}

/// One cell of `--chunking compare`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkingResult {
    /// The layout.
    pub setup: Setup,
    /// The dataset's name.
    pub dataset: &'static str,
    /// The chunking of the runs with chunking on (the cell's default or the flags').
    pub chunking: Chunking,
    /// `balanced` with chunking off.
    pub balanced: ChunkRun,
    /// `balanced` with [`ChunkingResult::chunking`].
    pub balanced_chunked: ChunkRun,
    /// `chunkflow` with it.
    pub chunkflow: ChunkRun,
    /// `skrull` (chunking off: the paper).
    pub skrull: ChunkRun,
    /// Plans scheduled and evaluated.
    pub plans: usize,
}

impl ChunkingResult {
    /// `balanced` without chunking over `balanced` with it (iteration times).
    pub fn speedup(&self) -> Option<f64> {
        Some(self.balanced.means()?.mean_time / self.balanced_chunked.means()?.mean_time)
    }

    /// `chunkflow` over `balanced` with chunking (iteration times): how much faster
    /// `balanced` with chunking runs than ChunkFlow's scheme.
    pub fn over_chunkflow(&self) -> Option<f64> {
        Some(self.chunkflow.means()?.mean_time / self.balanced_chunked.means()?.mean_time)
    }
}

/// The chunking of the runs with chunking on for a cell whose sequences are clipped at
/// `clip`: `template`'s when `--chunk-size` gave one, else the core's default for chunks on
/// one GPU, the smallest group `balanced` chunks on ([`Config::default_chunk_size`] of
/// `balanced`, with the template's K and state charge), so both chunking runs can use it.
fn cell_chunking(cfg: &Config, clip: u32) -> Result<Chunking, String> {
    if cfg.chunking.is_on() {
        return Ok(cfg.chunking);
    }
    let one_gpu = cfg.with_policy(Policy::Balanced);
    let size = one_gpu.default_chunk_size(clip).map_err(|e| {
        format!(
            "no ChunkSize fits BucketSize {} with {clip}-token sequences ({e}): give \
             --chunk-size",
            cfg.bucket
        )
    })?;
    Ok(Chunking {
        size,
        ..cfg.chunking
    })
}

/// Runs `cfg` over `batches`: mean time and bound and chunked sequences, or the refusal of
/// a batch with [`Error::ChunkOverBudget`] (any other error is returned).
fn run_policy(
    cfg: &Config,
    batches: &[Vec<u32>],
    bufs: &mut (OwnedBuffers, OwnedEval),
    label: &str,
) -> Result<(ChunkRun, usize), String> {
    let (mut time, mut bound, mut chunked) = (0.0, 0.0, 0u64);
    for (i, lengths) in batches.iter().enumerate() {
        let plan = match bufs.0.schedule(cfg, lengths) {
            Ok(plan) => plan,
            Err(e @ Error::ChunkOverBudget { .. }) => {
                return Ok((ChunkRun::Refused(format!("batch {i}: {e}")), i));
            }
            Err(e) => return Err(format!("{label}: {e}")),
        };
        let ev = bufs
            .1
            .evaluate(cfg, lengths, plan.placements())
            .map_err(|e| format!("evaluating {label}: {e}"))?;
        time += ev.report.iteration_time;
        bound += ev.report.lower_bound.value;
        chunked += u64::from(ev.report.chunked_sequences);
    }
    let k = batches.len().max(1) as f64;
    let means = RunMeans {
        mean_time: time / k,
        mean_bound: bound / k,
    };
    Ok((ChunkRun::Ran { means, chunked }, batches.len()))
}

/// Runs, on the batches `run_cell` samples for the cell: `balanced` without chunking,
/// `balanced` with chunking, `chunkflow` and `skrull` (the rest of `opts.template` as given;
/// the chunking is `--chunk-size`'s, else the cell's [`Config::default_chunk_size`] for its clip
/// length).
///
/// # Errors
/// A message when the cell's configuration is invalid, no ChunkSize fits, a policy other
/// than `chunkflow` refuses a batch, or the evaluator refuses a plan.
pub fn compare_chunking(
    setup: &Setup,
    dataset: Dataset,
    cost: &CostModel,
    opts: &Options,
) -> Result<ChunkingResult, String> {
    let (base, clip, batches) = sample_cell(setup, dataset, cost, opts)?;
    let chunking = cell_chunking(&base, clip)
        .map_err(|e| format!("{} {}: {e}", setup.name, dataset.name()))?;
    let n = (setup.dp * setup.batch_size) as usize;
    let mut bufs = (OwnedBuffers::for_batch(n, &base), OwnedEval::default());
    let off = Config {
        chunking: Chunking::OFF,
        ..base
    };
    let on = Config { chunking, ..base };
    let runs = [
        off.with_policy(Policy::Balanced),
        on.with_policy(Policy::Balanced),
        on.with_policy(Policy::ChunkFlow),
        off.with_policy(Policy::Skrull),
    ];
    let mut out = Vec::with_capacity(runs.len());
    let mut plans = 0;
    for cfg in &runs {
        let label = format!(
            "{} (ChunkSize {}) on {} {}",
            cfg.policy.name(),
            cfg.chunking.size,
            setup.name,
            dataset.name()
        );
        let (run, planned) = run_policy(cfg, &batches, &mut bufs, &label)?;
        plans += planned;
        out.push(run);
    }
    let [balanced, balanced_chunked, chunkflow, skrull] =
        <[ChunkRun; 4]>::try_from(out).map_err(|_| "four runs".to_string())?;
    Ok(ChunkingResult {
        setup: *setup,
        dataset: dataset.name(),
        chunking,
        balanced,
        balanced_chunked,
        chunkflow,
        skrull,
        plans,
    })
}

/// The paragraph before the `--chunking compare` table.
pub const INTRO: &str = "Chunking: on the same batches, `balanced` without chunking, `balanced` \
    with chunking (it chunks a sequence where its cost model says that pays), `chunkflow` \
    (ChunkFlow: every sequence longer than ChunkSize chunked over the whole CP group, the rest \
    packed into ChunkSize bins) and `skrull` (the paper). ChunkSize: --chunk-size, else per \
    cell the largest power of two whose K-chunk peak on one GPU fits BucketSize for the \
    cell's clip length. Each run over its own lower bound (with chunking on, the bound counts \
    chunked options). Speedup: balanced without over with chunking; balanced+chunking vs \
    chunkflow: chunkflow's time over balanced+chunking's.\n\n";

/// A run's time, its ratio to its bound and its chunked sequences per iteration, as table
/// cells (the refusal for all three when the policy refused a batch).
fn run_cells(run: &ChunkRun, iterations: usize) -> [String; 3] {
    match run {
        ChunkRun::Ran { means, chunked } => [
            ms(means.mean_time),
            format!("{:.2}", means.gap()),
            format!("{:.1}", *chunked as f64 / iterations.max(1) as f64),
        ],
        ChunkRun::Refused(e) => [format!("refused ({e})"), "—".into(), "—".into()],
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.2}x"))
}

/// The `--chunking compare` table: per cell, the ChunkSize and K, the four runs' iteration
/// times, the speedup of chunking for `balanced`, `balanced`+chunking against `chunkflow`,
/// each run over its own lower bound, chunked sequences per iteration; then the geometric
/// means of both ratios over the CP-16 rows.
pub fn chunking_table(rows: &[ChunkingResult], iterations: usize) -> String {
    let mut s = String::from(
        "| setup | dataset | ChunkSize, K | balanced (ms) | balanced+chunking (ms) | speedup \
         | chunkflow (ms) | skrull (ms) | balanced+chunking vs chunkflow \
         | ÷ lower bound: balanced | balanced+chunking | chunkflow | skrull \
         | chunked per iteration: balanced+chunking | chunkflow |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let [b_ms, b_gap, _] = run_cells(&r.balanced, iterations);
        let [c_ms, c_gap, c_n] = run_cells(&r.balanced_chunked, iterations);
        let [f_ms, f_gap, f_n] = run_cells(&r.chunkflow, iterations);
        let [s_ms, s_gap, _] = run_cells(&r.skrull, iterations);
        let _ = writeln!(
            s,
            "| {} | {} | {}, {} | {b_ms} | {c_ms} | {} | {f_ms} | {s_ms} | {} | {b_gap} | {c_gap} \
             | {f_gap} | {s_gap} | {c_n} | {f_n} |",
            r.setup.label(),
            r.dataset,
            r.chunking.size,
            r.chunking.keep,
            ratio(r.speedup()),
            ratio(r.over_chunkflow()),
        );
    }
    let cp16 = |f: fn(&ChunkingResult) -> Option<f64>| -> Vec<f64> {
        rows.iter()
            .filter(|r| r.setup.cp == 16)
            .filter_map(f)
            .collect()
    };
    let (speedups, vs_flow) = (
        cp16(ChunkingResult::speedup),
        cp16(ChunkingResult::over_chunkflow),
    );
    if !speedups.is_empty() {
        let mean = |xs: &[f64]| {
            if xs.is_empty() {
                "—".to_string()
            } else {
                format!("**{:.2}x** ({} rows)", geometric_mean(xs), xs.len())
            }
        };
        let _ = writeln!(
            s,
            "| **CP-16 geometric mean** | | | | | {} | | | {} | | | | | | |",
            mean(&speedups),
            mean(&vs_flow)
        );
    }
    s
}
