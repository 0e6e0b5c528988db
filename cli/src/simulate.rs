//! `skrull simulate`: every policy on the same sampled batches, evaluated on the cost model,
//! side by side with the paper's reported speedups (the paper's evaluation).
//!
//! The `sorted` baseline (LongAlign sorted batching) lives here because it is dataset-level:
//! it sorts a pool of all the simulated global batches by length, cuts the pool into global
//! batches again and plans each with `packed`. Its mean iteration time is over the same
//! sequences as the other policies', regrouped.

use std::fmt::Write;
use std::time::Instant;

use skrull_core::CostModel;
use skrull_core::model::TimeModel;
use skrull_core::{Config, ModelShape, Policy};
use skrull_kit::sample::Dataset;
use skrull_kit::{OwnedBuffers, OwnedEval};

use crate::args::{Flags, parse_model};
use crate::cell::{Options, SimPolicy, sample_cell};
use crate::config_flags::cost_from_flags;
use crate::config_flags::{Subgroups, options_with, subgroups_flag};
use crate::setups::{
    CASE_STUDY_PAPER, PAPER_CELLS, PaperCell, RunMeans, SETUPS, Setup, geometric_mean, mean, ms,
};
use crate::svg::{Panel, gantt};

/// Mean results of one policy over a cell's iterations.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    /// The policy.
    pub policy: SimPolicy,
    /// Mean iteration time, seconds.
    pub mean_time: f64,
    /// Mean lower bound of the batches it ran, seconds.
    pub mean_bound: f64,
    /// The most tokens any GPU held in any micro-batch.
    pub peak_tokens: u64,
    /// Share of tokens in sharded sequences.
    pub sharded_share: f64,
    /// Mean over iterations of the most micro-batches one DP rank ran.
    pub micro_batches_per_dp: f64,
    /// Mean communication the slowest DP rank could not hide, seconds.
    pub exposed_comm: f64,
    /// Share of all CP communication hidden behind compute.
    pub hidden_fraction: f64,
    /// (micro-batch, GPU) pairs over BucketSize over all iterations (0 for a valid policy).
    pub over_budget: u64,
}

/// One simulated (setup, dataset) cell.
#[derive(Debug, Clone)]
pub struct CellResult {
    /// The layout.
    pub setup: Setup,
    /// The dataset's name.
    pub dataset: &'static str,
    /// The length every sequence was clipped at.
    pub clip: u32,
    /// Iterations simulated.
    pub iterations: usize,
    /// Mean lower bound over the sampled batches, seconds.
    pub mean_bound: f64,
    /// One entry per policy run (deepspeed always included).
    pub results: Vec<PolicyResult>,
    /// Gantt panels of the first iteration, when asked for.
    pub panels: Vec<Panel>,
}

impl CellResult {
    /// The result of `policy`, if it ran.
    pub fn get(&self, policy: SimPolicy) -> Option<&PolicyResult> {
        self.results.iter().find(|r| r.policy == policy)
    }

    /// `policy`'s speedup over deepspeed (ratio of mean iteration times).
    pub fn speedup(&self, policy: SimPolicy) -> Option<f64> {
        let ds = self.get(SimPolicy::Core(Policy::DeepSpeed))?.mean_time;
        Some(ds / self.get(policy)?.mean_time)
    }
}

#[derive(Default)]
struct Acc {
    time: f64,
    bound: f64,
    peak: u64,
    sharded: u64,
    tokens: u64,
    mbs: f64,
    exposed: f64,
    comm: f64,
    comm_exposed: f64,
    over: u64,
}

/// Simulates one cell: `opts.iterations` batches of `dp x batch_size` lengths from `dataset`,
/// every policy on each, evaluated under `cost`. With `panels`, also draws iteration 0.
///
/// # Errors
/// A message when a policy refuses a batch or the evaluator refuses a plan.
pub fn run_cell(
    setup: &Setup,
    dataset: Dataset,
    cost: &CostModel,
    opts: &Options,
    panels: bool,
) -> Result<CellResult, String> {
    let (base, clip, batches) = sample_cell(setup, dataset, cost, opts)?;
    let n = (setup.dp * setup.batch_size) as usize;
    let mut policies = opts.policies.clone();
    if !policies.contains(&SimPolicy::Core(Policy::DeepSpeed)) {
        policies.push(SimPolicy::Core(Policy::DeepSpeed));
    }
    let sorted_batches = || {
        let mut pool: Vec<u32> = batches.concat();
        pool.sort_unstable();
        pool.chunks(n.max(1))
            .map(<[u32]>::to_vec)
            .collect::<Vec<_>>()
    };
    let tm = TimeModel::new(cost, &base);
    let mut plan_bufs = OwnedBuffers::for_batch(n, &base);
    let mut eval_bufs = OwnedEval::default();
    let mut results = Vec::new();
    let mut drawn = Vec::new();
    let mut bound_sum = 0.0;
    for &policy in &policies {
        let (core, own_batches) = match policy {
            SimPolicy::Core(p) => (p, None),
            SimPolicy::Sorted => (Policy::Packed, Some(sorted_batches())),
        };
        let cfg = crate::chunking::with_chunk_size(base.with_policy(core), clip);
        let list = own_batches.as_ref().unwrap_or(&batches);
        let mut acc = Acc::default();
        for (i, lengths) in list.iter().enumerate() {
            let plan = plan_bufs.schedule(&cfg, lengths).map_err(|e| {
                format!(
                    "{} on {} {}: {e}",
                    policy.name(),
                    setup.name,
                    dataset.name()
                )
            })?;
            let ev = eval_bufs
                .evaluate(&cfg, lengths, plan.placements())
                .map_err(|e| format!("evaluating {}: {e}", policy.name()))?;
            let r = ev.report;
            acc.time += r.iteration_time;
            acc.bound += r.lower_bound.value;
            acc.peak = acc.peak.max(r.peak_tokens);
            acc.sharded += r.sharded_tokens;
            acc.tokens += r.total_tokens;
            acc.mbs += f64::from(r.max_micro_batches_per_dp);
            acc.exposed += r.critical_exposed_comm;
            acc.comm += r.comm;
            acc.comm_exposed += r.exposed_comm;
            acc.over += u64::from(r.over_budget);
            // The sorted pool's batch 0 holds other sequences: drawn only when asked for.
            let draw = panels && (policy != SimPolicy::Sorted || opts.draw_sorted);
            if i == 0 && draw {
                let note = if policy == SimPolicy::Sorted {
                    " (batch 0 of the sorted pool: other sequences)"
                } else {
                    ""
                };
                let title = format!(
                    "{}: {:.1} ms, lower bound {:.1} ms{note}",
                    policy.name(),
                    r.iteration_time * 1e3,
                    r.lower_bound.value * 1e3
                );
                drawn.push(Panel::new(title, cfg.dp, cfg.cp, &ev, &tm));
            }
        }
        let k = list.len().max(1) as f64;
        if policy == SimPolicy::Core(Policy::DeepSpeed) {
            bound_sum = acc.bound;
        }
        results.push(PolicyResult {
            policy,
            mean_time: acc.time / k,
            mean_bound: acc.bound / k,
            peak_tokens: acc.peak,
            sharded_share: if acc.tokens > 0 {
                acc.sharded as f64 / acc.tokens as f64
            } else {
                0.0
            },
            micro_batches_per_dp: acc.mbs / k,
            exposed_comm: acc.exposed / k,
            hidden_fraction: if acc.comm > 0.0 {
                1.0 - acc.comm_exposed / acc.comm
            } else {
                1.0
            },
            over_budget: acc.over,
        });
    }
    // Keep deepspeed in the results (speedups need it) but in print order.
    results.sort_by_key(|r| SimPolicy::ALL.iter().position(|&p| p == r.policy));
    Ok(CellResult {
        setup: *setup,
        dataset: dataset.name(),
        clip,
        iterations: batches.len(),
        mean_bound: bound_sum / batches.len().max(1) as f64,
        results,
        panels: drawn,
    })
}

/// `balanced` on one cell's batches without and with sub-groups ([`Config::subgroups`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SubgroupResult {
    /// The layout.
    pub setup: Setup,
    /// The dataset's name.
    pub dataset: &'static str,
    /// Every sharded sequence over the whole CP group.
    pub without: RunMeans,
    /// Sub-groups allowed. The lower bound then counts every allowed group size as an
    /// option, so it is never above `without`'s.
    pub with: RunMeans,
    /// Sequences sharded over a sub-group, summed over the iterations.
    pub subgroup_shards: u64,
}

impl SubgroupResult {
    /// Time without sub-groups over time with them.
    pub fn speedup(&self) -> f64 {
        self.without.mean_time / self.with.mean_time
    }
}

/// Runs `balanced` on the batches [`run_cell`] samples for the same cell, once with
/// [`Config::subgroups`] off and once on (the rest of `opts.template` as given).
///
/// # Errors
/// A message when the policy refuses a batch or the evaluator refuses a plan.
pub fn compare_subgroups(
    setup: &Setup,
    dataset: Dataset,
    cost: &CostModel,
    opts: &Options,
) -> Result<SubgroupResult, String> {
    let (base, _, batches) = sample_cell(setup, dataset, cost, opts)?;
    let base = base.with_policy(Policy::Balanced);
    let n = (setup.dp * setup.batch_size) as usize;
    let mut plan_bufs = OwnedBuffers::for_batch(n, &base);
    let mut eval_bufs = OwnedEval::default();
    let mut means = [RunMeans {
        mean_time: 0.0,
        mean_bound: 0.0,
    }; 2];
    let mut subgroup_shards = 0u64;
    for (on, m) in [false, true].into_iter().zip(&mut means) {
        let cfg = Config {
            subgroups: on,
            ..base
        };
        let (mut time, mut bound) = (0.0, 0.0);
        for lengths in &batches {
            let plan = plan_bufs.schedule(&cfg, lengths).map_err(|e| {
                format!(
                    "balanced (sub-groups {}) on {} {}: {e}",
                    if on { "on" } else { "off" },
                    setup.name,
                    dataset.name()
                )
            })?;
            if on {
                let subs = plan.placements().iter().filter(|p| p.is_subgroup(cfg.cp));
                subgroup_shards += subs.count() as u64;
            }
            let ev = eval_bufs
                .evaluate(&cfg, lengths, plan.placements())
                .map_err(|e| format!("evaluating balanced: {e}"))?;
            time += ev.report.iteration_time;
            bound += ev.report.lower_bound.value;
        }
        let k = batches.len().max(1) as f64;
        *m = RunMeans {
            mean_time: time / k,
            mean_bound: bound / k,
        };
    }
    Ok(SubgroupResult {
        setup: *setup,
        dataset: dataset.name(),
        without: means[0],
        with: means[1],
        subgroup_shards,
    })
}

/// The `--subgroups compare` table: per cell, `balanced`'s iteration time without and with
/// sub-groups, the speedup, each run over its own lower bound and the sub-group shards per
/// iteration; then the geometric mean of the speedup over the CP-16 rows.
pub fn subgroup_table(rows: &[SubgroupResult], iterations: usize) -> String {
    let mut s = String::from(
        "| setup | dataset | without sub-groups (ms) | with sub-groups (ms) | speedup \
         | without ÷ lower bound | with ÷ lower bound | sub-group shards per iteration |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2}x | {:.2} | {:.2} | {:.1} |",
            r.setup.label(),
            r.dataset,
            ms(r.without.mean_time),
            ms(r.with.mean_time),
            r.speedup(),
            r.without.gap(),
            r.with.gap(),
            r.subgroup_shards as f64 / iterations.max(1) as f64
        );
    }
    let cp16: Vec<f64> = rows
        .iter()
        .filter(|r| r.setup.cp == 16)
        .map(SubgroupResult::speedup)
        .collect();
    if !cp16.is_empty() {
        let _ = writeln!(
            s,
            "| **CP-16 geometric mean** ({} rows) | | | | **{:.2}x** | | | |",
            cp16.len(),
            geometric_mean(&cp16)
        );
    }
    s
}

fn paper_cell(setup: &str, dataset: &str) -> Option<&'static PaperCell> {
    PAPER_CELLS
        .iter()
        .find(|c| c.setup == setup && c.dataset == dataset)
}

fn paper_for(cell: &CellResult, policy: SimPolicy) -> String {
    if cell.setup.name == "case-study" && cell.dataset == "chatqa2" {
        return CASE_STUDY_PAPER
            .iter()
            .find(|(p, _)| *p == policy.name())
            .map_or(String::new(), |(_, v)| format!("{v:.2}x"));
    }
    match (paper_cell(cell.setup.name, cell.dataset), policy) {
        (Some(p), SimPolicy::Core(Policy::Skrull)) => format!("{:.2}x", p.vs_deepspeed),
        _ => String::new(),
    }
}

fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The detailed table: one row per (cell, policy), plus the lower bound.
pub fn detail_table(cells: &[CellResult], shown: &[SimPolicy]) -> String {
    let mut s = String::from(
        "| setup | dataset | policy | iteration (ms) | vs deepspeed | paper | ÷ lower bound \
         | peak tokens/GPU (÷ C) | sharded tokens | micro-batches per DP | exposed comm (ms) |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in cells {
        let label = c.setup.label();
        let _ = writeln!(
            s,
            "| {label} | {} | *lower bound* | {} | ≤ {:.2}x | | 1.00 | | | | |",
            c.dataset,
            ms(c.mean_bound),
            c.get(SimPolicy::Core(Policy::DeepSpeed))
                .map_or(0.0, |d| d.mean_time / c.mean_bound.max(1e-300))
        );
        for r in c.results.iter().filter(|r| shown.contains(&r.policy)) {
            let over = if r.over_budget > 0 {
                format!(" **{} over**", r.over_budget)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "| {label} | {} | {} | {} | {:.2}x | {} | {:.2} | {} ({:.2}){over} | {:.0}% | {:.1} | {} |",
                c.dataset,
                r.policy.name(),
                ms(r.mean_time),
                c.speedup(r.policy).unwrap_or(f64::NAN),
                paper_for(c, r.policy),
                r.mean_time / r.mean_bound.max(1e-300),
                thousands(r.peak_tokens),
                r.peak_tokens as f64 / f64::from(c.setup.bucket),
                r.sharded_share * 100.0,
                r.micro_batches_per_dp,
                ms(r.exposed_comm)
            );
        }
    }
    s
}

/// The summary: skrull's speedups, ours beside the paper's, with the averages the paper
/// reports when all six cells are present.
pub fn summary_table(cells: &[CellResult]) -> String {
    let skrull = SimPolicy::Core(Policy::Skrull);
    let mut s = String::from(
        "| setup | dataset | skrull vs deepspeed | paper | skrull vs sorted | paper | skrull vs packed \
         | best possible vs deepspeed | balanced vs best of skrull/deepspeed/packed | balanced ÷ lower bound |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let (mut small, mut large, mut vs_sorted, mut p_sorted) = (vec![], vec![], vec![], vec![]);
    let mut complete = 0;
    for c in cells {
        let Some(sk) = c.get(skrull) else { continue };
        let ds = c.speedup(skrull).unwrap_or(f64::NAN);
        let vs = |p: SimPolicy| c.get(p).map(|r| r.mean_time / sk.mean_time);
        let sorted = vs(SimPolicy::Sorted);
        let packed = vs(SimPolicy::Core(Policy::Packed));
        let paper = paper_cell(c.setup.name, c.dataset);
        let fmt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.2}x"));
        let best = c
            .get(SimPolicy::Core(Policy::DeepSpeed))
            .map(|d| d.mean_time / c.mean_bound.max(1e-300));
        let balanced = c.get(SimPolicy::Core(Policy::Balanced));
        let best_of = [Policy::Skrull, Policy::DeepSpeed, Policy::Packed]
            .iter()
            .filter_map(|&p| c.get(SimPolicy::Core(p)).map(|r| r.mean_time))
            .fold(f64::INFINITY, f64::min);
        let vs_best = balanced.map(|b| best_of / b.mean_time);
        let gap = balanced.map_or("—".to_string(), |b| {
            format!("{:.2}", b.mean_time / b.mean_bound.max(1e-300))
        });
        let _ = writeln!(
            s,
            "| {} | {} | {ds:.2}x | {} | {} | {} | {} | ≤ {} | {} | {gap} |",
            c.setup.label(),
            c.dataset,
            fmt(paper.map(|p| p.vs_deepspeed)),
            fmt(sorted),
            fmt(paper.map(|p| p.vs_sorted)),
            fmt(packed),
            fmt(best),
            fmt(vs_best)
        );
        if let Some(p) = paper {
            complete += 1;
            if c.setup.model == ModelShape::QWEN2_5_0_5B {
                small.push(ds);
            } else {
                large.push(ds);
            }
            if let Some(v) = sorted {
                vs_sorted.push(v);
                p_sorted.push(p.vs_sorted);
            }
        }
    }
    if complete == PAPER_CELLS.len() {
        let all: Vec<f64> = small.iter().chain(&large).copied().collect();
        let _ = writeln!(
            s,
            "| **0.5B average** | | **{:.2}x** | **5.50x** | | | | | | |",
            mean(&small)
        );
        let _ = writeln!(
            s,
            "| **7B average** | | **{:.2}x** | **2.03x** | | | | | | |",
            mean(&large)
        );
        let sorted_avg = if vs_sorted.len() == PAPER_CELLS.len() {
            format!("**{:.2}x**", mean(&vs_sorted))
        } else {
            "—".into()
        };
        let _ = writeln!(
            s,
            "| **overall average** | | **{:.2}x** | **3.76x** | {sorted_avg} | **3.45x** | | | | |",
            mean(&all)
        );
        let peak = all.iter().copied().fold(f64::NAN, f64::max);
        let _ = writeln!(
            s,
            "| **peak** | | **{peak:.2}x** | **7.54x** | | **6.85x** | | | | |"
        );
    }
    s
}

/// Usage text of `skrull simulate`.
pub const USAGE: &str = "\
skrull simulate [--setup 0.5b|7b|7b-cp16|0.5b-cp16|7b-cp16-bs64|case-study] [--dataset NAME]
                [--policy skrull,deepspeed,packed,sorted,roundrobin,balanced,chunkflow]
                [--iterations 20]
                [--seed 20250526] [--context 128K] [--gpu h100|h200] [--cost-model FILE]
                [--gpus-per-node 8]
                [--overlap local-attention|all-attention] [--svg FILE]
                [--dp D --cp N --bucket C --batch-size B --model M]
                [--victim shortest|longest] [--flops paper|megatron] [--shard-padding none|zigzag]
                [--pad-multiple M] [--pad-local] [--lockstep] [--fill-empty] [--micro-batches G]
                [--subgroups on|off|compare] [--chunking compare]
                [--chunk-size C] [--chunk-keep K] [--chunk-state-permille P]
                [--sync cp-group|every-gpu|sharded|compare] [--outlier-delay W[,W...]]
skrull simulate --online [--truth-model FILE] [--steps 20] ... (see below)

Runs every policy on the same sampled global batches, evaluates each plan on the cost model
(docs/cost_model.md) and prints mean iteration times, speedups over deepspeed, the gap to
the lower bound, peak tokens per GPU against BucketSize and the sharded share, with the
paper's reported speedups beside ours.

Without --setup/--dataset: the six experiments of the paper (0.5B on wikipedia, lmsys,
chatqa2; 7B on wikipedia, lmsys; 7B CP16 on chatqa2), the case study (0.5B, chatqa2, DP 1)
and DP 2 x CP 16 with 64-sequence batches on all three datasets for both models (rings that
span two 8-GPU nodes). --setup alone runs it on the three Table 1 datasets; --dataset alone runs it on 0.5b
and 7b. --dp/--cp/--bucket/--batch-size/--model override the chosen setup.
Datasets: wikipedia, lmsys, chatqa2 (Table 1), chatqa2-hist, lmsys-real, lmsys-model,
wikipedia-model, llama3-sft, longalpaca, chatqa2-model.
Lengths are clipped at --context and at N x C (nothing longer fits even sharded).
--svg FILE draws iteration 0 of the first cell as a Gantt chart, one panel per policy.
--subgroups on (the default) lets balanced shard a sequence over an aligned sub-group of the
CP ranks, off keeps every shard on the whole group; compare plans with sub-groups and adds a
table: per cell, balanced without and with sub-groups (same batches), the speedup, each run
over its own lower bound, and the geometric mean of the speedup over the CP-16 rows.
--chunk-size C (0: off) lets sequences longer than C run as chunks of C tokens (ChunkFlow),
the last K (--chunk-keep, default 1) keeping their activations; chunkflow (not run unless
named) chunks every sequence longer than C over the whole CP group and packs the rest into
C-token bins. Without --chunk-size, chunkflow takes the default ChunkSize of each cell: the
largest power of two below its clip length whose K-chunk peak on ONE GPU, K/V state of the
clip length included, fits BucketSize.
--chunking compare adds a table: per cell, on the same batches, balanced without chunking,
balanced with chunking, chunkflow and skrull at that ChunkSize (or --chunk-size): iteration
times, the speedup of chunking, each run over its own lower bound, chunked sequences per
iteration, and geometric means over the CP-16 rows.
--outlier-delay W[,W...] adds a table: per cell, its batches as one epoch planned by balanced
without and with the outlier-delay window of max_delay W (docs/outlier_delay.md).
--online runs the online refit of the cost model against a truth model instead (flags:
--truth-model FILE, --truth NAMES, --steps, --noise, --straggler-every, --format json;
see cli/src/online.rs and docs/cost_model.md).";

fn setup_by_name(name: &str) -> Result<Setup, String> {
    SETUPS
        .iter()
        .copied()
        .find(|s| s.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = SETUPS.iter().map(|s| s.name).collect();
            format!("--setup: unknown setup '{name}' ({})", names.join(", "))
        })
}

fn dataset_by_name(name: &str) -> Result<Dataset, String> {
    Dataset::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = Dataset::all().iter().map(Dataset::name).collect();
        format!("--dataset: unknown dataset '{name}' ({})", names.join(", "))
    })
}

/// The configuration flags other than `--policy` (which here takes a list): layout
/// overrides (checked later, per cell) and every option flag ([`options_over`]).
fn template_from(flags: &Flags, compare: bool) -> Result<Config, String> {
    let base = Config::new(
        flags.tokens("--dp", 1)?,
        flags.tokens("--cp", 1)?,
        flags.tokens("--bucket", 1)?,
        parse_model(flags.get("--model").unwrap_or("qwen2.5-0.5b"))?,
    );
    options_with(flags, base, true, compare)
}

/// Runs `skrull simulate`; returns the text to print.
///
/// # Errors
/// A message that names the offending value.
pub fn run(flags: &Flags) -> Result<String, String> {
    if flags.has("--online") {
        return crate::online::run(flags);
    }
    let started = Instant::now();
    let mut opts = Options {
        iterations: flags.u64("--iterations", 20)? as usize,
        ..Options::default()
    };
    if opts.iterations == 0 || opts.iterations > 100_000 {
        return Err("--iterations must be 1..=100000".into());
    }
    opts.seed = flags.u64("--seed", opts.seed)?;
    opts.context = flags.tokens("--context", opts.context)?.max(1);
    if let Some(list) = flags.get("--policy") {
        opts.policies = list
            .split(',')
            .map(|p| {
                SimPolicy::from_name(p.trim()).ok_or_else(|| {
                    format!("--policy: unknown policy '{p}' (skrull, deepspeed, packed, sorted, roundrobin, balanced, chunkflow)")
                })
            })
            .collect::<Result<_, _>>()?;
        opts.draw_sorted = opts.policies.contains(&SimPolicy::Sorted);
    }
    // `--sync compare` plans for each synchronisation itself: the template keeps the default.
    opts.compare_sync = flags.get("--sync") == Some("compare");
    let template = template_from(flags, opts.compare_sync)?;
    opts.template = template;
    opts.compare_subgroups = subgroups_flag(flags, true)? == Some(Subgroups::Compare);
    opts.compare_chunking = match flags.get("--chunking") {
        None => false,
        Some("compare") => true,
        Some(v) => return Err(format!("--chunking: '{v}' is not compare")),
    };
    let overrides = [
        flags.get("--dp").is_some(),
        flags.get("--cp").is_some(),
        flags.get("--bucket").is_some(),
        flags.get("--model").is_some(),
    ];
    let batch_size = flags.get("--batch-size").map(str::to_string);
    let cells: Vec<(Setup, Dataset)> = match (flags.get("--setup"), flags.get("--dataset")) {
        (None, None) => {
            let mut v: Vec<(Setup, Dataset)> = PAPER_CELLS
                .iter()
                .map(|c| Ok((setup_by_name(c.setup)?, dataset_by_name(c.dataset)?)))
                .collect::<Result<_, String>>()?;
            v.push((setup_by_name("case-study")?, dataset_by_name("chatqa2")?));
            // CP-16 rings span two 8-GPU nodes: every dataset on both models.
            for setup in ["0.5b-cp16", "7b-cp16-bs64"] {
                for dataset in ["wikipedia", "lmsys", "chatqa2"] {
                    v.push((setup_by_name(setup)?, dataset_by_name(dataset)?));
                }
            }
            v
        }
        (Some(s), None) => {
            let s = setup_by_name(s)?;
            ["wikipedia", "lmsys", "chatqa2"]
                .iter()
                .map(|d| Ok((s, dataset_by_name(d)?)))
                .collect::<Result<_, String>>()?
        }
        (None, Some(d)) => {
            let d = dataset_by_name(d)?;
            vec![(setup_by_name("0.5b")?, d), (setup_by_name("7b")?, d)]
        }
        (Some(s), Some(d)) => vec![(setup_by_name(s)?, dataset_by_name(d)?)],
    };
    // Layout overrides apply to every chosen cell.
    let cells: Vec<(Setup, Dataset)> = cells
        .into_iter()
        .map(|(mut s, d)| {
            if overrides[0] {
                s.dp = template.dp;
            }
            if overrides[1] {
                s.cp = template.cp;
            }
            if overrides[2] {
                s.bucket = template.bucket;
            }
            if overrides[3] {
                s.model = template.model;
            }
            if let Some(b) = &batch_size {
                s.batch_size = crate::args::parse_tokens(b)
                    .filter(|&b| b > 0)
                    .ok_or_else(|| format!("--batch-size: '{b}' is not a positive count"))?;
            }
            if u64::from(s.dp) * u64::from(s.batch_size) > skrull_core::config::MAX_SEQS as u64 {
                return Err(format!(
                    "DP x BatchSize = {} is more than {} sequences",
                    u64::from(s.dp) * u64::from(s.batch_size),
                    skrull_core::config::MAX_SEQS
                ));
            }
            Ok((s, d))
        })
        .collect::<Result<_, String>>()?;
    let outlier_delays = crate::outlier::delays(flags)?;
    let svg = flags.get("--svg").map(str::to_string);
    let gpu = flags.get("--gpu").unwrap_or("h100").to_string();
    let cost_file = flags.get("--cost-model").map(str::to_string);
    // Validate the cost flags once (and mark them used) before the run.
    let mut costs = Vec::new();
    for (s, _) in &cells {
        costs.push(cost_from_flags(flags, &s.model)?);
    }
    flags.finish()?;

    let mut results = Vec::new();
    let mut compared = Vec::new();
    let mut chunk_rows = Vec::new();
    let mut sync_rows = Vec::new();
    let mut delay_rows = Vec::new();
    for (i, ((setup, dataset), cost)) in cells.iter().zip(&costs).enumerate() {
        let draw = svg.is_some() && i == 0;
        results.push(run_cell(setup, *dataset, cost, &opts, draw)?);
        if opts.compare_subgroups {
            compared.push(compare_subgroups(setup, *dataset, cost, &opts)?);
        }
        if opts.compare_chunking {
            let row = crate::chunking::compare_chunking(setup, *dataset, cost, &opts)?;
            chunk_rows.push(row);
        }
        if opts.compare_sync {
            sync_rows.push(crate::sync_compare::compare_sync(
                setup, *dataset, cost, &opts,
            )?);
        }
        if let Some(delays) = &outlier_delays {
            let (base, _, batches) = sample_cell(setup, *dataset, cost, &opts)?;
            let (label, name) = (setup.label(), dataset.name());
            let row = crate::outlier::compare_delay(&label, name, &base, &batches, delays)?;
            delay_rows.push(row);
        }
    }

    let mut out = String::new();
    let _ = writeln!(out, "# skrull simulate\n");
    let _ = writeln!(
        out,
        "Cost model: {gpu} preset{} (every default and its source: docs/cost_model.md); overlap: \
         {}. {} iterations per cell, seed {}; DP x BatchSize sequences per iteration, the same \
         batches for every policy (`sorted` regroups the same sequences).",
        cost_file
            .as_ref()
            .map_or(String::new(), |f| format!(" with {f} on top")),
        costs.first().map_or("", |c| c.overlap.name()),
        opts.iterations,
        opts.seed
    );
    let mut clips: Vec<String> = Vec::new();
    for c in &results {
        let line = format!(
            "{} {}: {}",
            c.setup.label(),
            c.dataset,
            thousands(u64::from(c.clip))
        );
        clips.push(line);
    }
    let _ = writeln!(
        out,
        "Lengths clipped at the {} context limit and at N x C: {}.\n",
        thousands(u64::from(opts.context)),
        clips.join("; ")
    );
    let (main, case): (Vec<CellResult>, Vec<CellResult>) = results
        .into_iter()
        .partition(|c| c.setup.name != "case-study");
    if !main.is_empty() {
        out.push_str(&detail_table(&main, &opts.policies));
        out.push('\n');
        out.push_str("Skrull's speedups, ours beside the paper's (figure-read per cell; the averages and the peak are the paper's certain numbers):\n\n");
        out.push_str(&summary_table(&main));
        out.push('\n');
    }
    if !case.is_empty() {
        out.push_str("Case study (Qwen2.5-0.5B, ChatQA2, DP 1, CP 8, BatchSize 64; the paper's Table 3 speedups are over its baseline):\n\n");
        out.push_str(&detail_table(&case, &opts.policies));
        out.push('\n');
    }
    if !compared.is_empty() {
        out.push_str(
            "Sub-groups: `balanced` on the same batches with every shard over the whole CP group \
             (without) and free to shard over an aligned sub-group (with); each run over its own \
             lower bound (without sub-groups the bound counts whole-group shards only):\n\n",
        );
        out.push_str(&subgroup_table(&compared, opts.iterations));
        out.push('\n');
    }
    if !sync_rows.is_empty() {
        out.push_str(crate::sync_compare::INTRO);
        out.push_str(&crate::sync_compare::sync_table(
            &sync_rows,
            opts.iterations,
        ));
        out.push('\n');
    }
    if !chunk_rows.is_empty() {
        out.push_str(crate::chunking::INTRO);
        out.push_str(&crate::chunking::chunking_table(
            &chunk_rows,
            opts.iterations,
        ));
        out.push('\n');
    }
    if !delay_rows.is_empty() {
        out.push_str(crate::outlier::INTRO);
        out.push_str(&crate::outlier::delay_table(&delay_rows));
        out.push('\n');
    }
    let all: Vec<&CellResult> = main.iter().chain(&case).collect();
    if let (Some(path), Some(first)) = (&svg, all.first()) {
        let title = format!(
            "skrull simulate: {} on {}, iteration 0 (one row per DP rank x CP rank)",
            first.setup.label(),
            first.dataset
        );
        std::fs::write(path, gantt(&title, &first.panels)).map_err(|e| format!("{path}: {e}"))?;
        let _ = writeln!(
            out,
            "Gantt chart of iteration 0 of {} {}: {path}\n",
            first.setup.label(),
            first.dataset
        );
    }
    let plans: usize = all
        .iter()
        .map(|c| c.iterations * c.results.len())
        .sum::<usize>()
        + 2 * opts.iterations * compared.len()
        + chunk_rows.iter().map(|r| r.plans).sum::<usize>()
        + delay_rows.iter().map(crate::outlier::plans).sum::<usize>();
    let _ = writeln!(
        out,
        "_{plans} plans scheduled and evaluated in {:.2} s._",
        started.elapsed().as_secs_f64()
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setups::sharded_limit;

    #[test]
    fn sharded_limit_respects_padding() {
        let mut cfg = Config::new(1, 8, 13 * 1024, ModelShape::QWEN2_5_7B);
        assert_eq!(sharded_limit(&cfg), 8 * 13 * 1024);
        cfg.bucket = 1001;
        cfg.shard_padding = skrull_core::ShardPadding::Zigzag;
        let s = sharded_limit(&cfg);
        assert!(cfg.shard_tokens(s) <= 1001 && cfg.shard_tokens(s + 1) > 1001);
    }

    #[test]
    fn a_cell_runs_every_policy_on_the_same_batches() {
        let opts = Options {
            iterations: 3,
            ..Options::default()
        };
        let setup = SETUPS[0];
        let d = Dataset::by_name("lmsys").unwrap();
        let cost = CostModel::h100(&setup.model);
        let c = run_cell(&setup, d, &cost, &opts, true).unwrap();
        assert_eq!(c.results.len(), 6);
        assert_eq!(c.panels.len(), 5);
        for r in &c.results {
            assert_eq!(r.over_budget, 0, "{:?}", r.policy);
            assert!(r.mean_time >= r.mean_bound, "{:?}", r.policy);
            assert!(r.peak_tokens <= u64::from(setup.bucket));
        }
        assert_eq!(c.speedup(SimPolicy::Core(Policy::DeepSpeed)), Some(1.0));
        // Deepspeed shards everything.
        let ds = c.get(SimPolicy::Core(Policy::DeepSpeed)).unwrap();
        assert_eq!(ds.sharded_share, 1.0);
        let again = run_cell(&setup, d, &cost, &opts, false).unwrap();
        assert_eq!(again.results, c.results);
    }

    #[test]
    fn the_subgroup_comparison_is_balanced_with_subgroups_off_and_on() {
        let setup = SETUPS[3];
        assert_eq!(setup.cp, 16);
        let d = Dataset::by_name("chatqa2").unwrap();
        let cost = CostModel::h100(&setup.model);
        let mut opts = Options {
            iterations: 2,
            policies: vec![SimPolicy::Core(Policy::Balanced)],
            ..Options::default()
        };
        let cmp = compare_subgroups(&setup, d, &cost, &opts).unwrap();
        let balanced = |opts: &Options| {
            let c = run_cell(&setup, d, &cost, opts, false).unwrap();
            let r = c.get(SimPolicy::Core(Policy::Balanced)).unwrap().clone();
            RunMeans {
                mean_time: r.mean_time,
                mean_bound: r.mean_bound,
            }
        };
        assert_eq!(cmp.with, balanced(&opts));
        opts.template.subgroups = false;
        assert_eq!(cmp.without, balanced(&opts));
        // The template's own switch does not matter to the comparison.
        assert_eq!(compare_subgroups(&setup, d, &cost, &opts).unwrap(), cmp);
        // Sub-groups only add options to the lower bound.
        assert!(cmp.with.mean_bound <= cmp.without.mean_bound);
        assert!(cmp.with.mean_time >= cmp.with.mean_bound);
        let table = subgroup_table(std::slice::from_ref(&cmp), 2);
        assert!(
            table.contains("| 0.5B DP2 CP16 BS64 C26K | chatqa2 |"),
            "{table}"
        );
        assert!(
            table.contains(&format!(
                "| **CP-16 geometric mean** (1 rows) | | | | **{:.2}x** |",
                cmp.speedup()
            )),
            "{table}"
        );
        let cp8 = SubgroupResult {
            setup: SETUPS[0],
            ..cmp.clone()
        };
        assert!(!subgroup_table(&[cp8], 2).contains("geometric mean"));
        let g = geometric_mean(&[1.0, 4.0]);
        assert!((g - 2.0).abs() < 1e-12, "{g}");
        assert!(geometric_mean(&[]).is_nan());
    }

    #[test]
    fn policy_names_round_trip() {
        for p in SimPolicy::ALL {
            assert_eq!(SimPolicy::from_name(p.name()), Some(p));
        }
        assert_eq!(SimPolicy::from_name("fifo"), None);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }
}
