//! `skrull simulate --online`: the online refit against a truth model. Each step plans a
//! sampled batch with the current model, "measures" every (micro-batch, GPU) of the plan
//! under the truth model with log-normal noise and stragglers, feeds the times to the refit
//! (`skrull_core::model::refit`) and plans the next step with the refitted model. Per step it
//! reports the true time of that plan, of the plan the truth model itself makes (the oracle)
//! and of the uncalibrated preset's plan.

use std::fmt::Write;

use skrull_core::config::cost::Overlap;
use skrull_core::model::TimeModel;
use skrull_core::model::refit::{RefitParams, RefitState, Row};
use skrull_core::{Config, CostModel, Policy};
use skrull_kit::refit::{perturb, rank_times};
use skrull_kit::sample::{Dataset, Rng};
use skrull_kit::{OwnedBuffers, OwnedEval};

use crate::args::Flags;
pub use crate::online_cell::{OnlineCell, StepResult, Truth};
use crate::setups::{PAPER_CELLS, SETUPS, Setup, sharded_limit};
use crate::svg::{Panel, escape, gantt};

/// The built-in truths: ring bandwidth 4x lower, GEMM efficiency 0.6, attention 1.3x
/// slower, ring communication hidden behind all attention, and all four at once.
pub const TRUTHS: [Truth; 5] = [
    Truth {
        name: "bandwidth/4",
        apply: |c| CostModel {
            intra_node_bandwidth: c.intra_node_bandwidth / 4.0,
            inter_node_bandwidth: c.inter_node_bandwidth / 4.0,
            ..*c
        },
    },
    Truth {
        name: "gemm-0.6",
        apply: |c| CostModel {
            gemm_efficiency: 0.6,
            ..*c
        },
    },
    Truth {
        name: "attention-1.3x",
        apply: |c| CostModel {
            attention: c.attention.slowed(1.3),
            ..*c
        },
    },
    Truth {
        name: "overlap-all",
        apply: |c| CostModel {
            overlap: Overlap::AllAttention,
            ..*c
        },
    },
    Truth {
        name: "combined",
        apply: |c| CostModel {
            intra_node_bandwidth: c.intra_node_bandwidth / 4.0,
            inter_node_bandwidth: c.inter_node_bandwidth / 4.0,
            gemm_efficiency: 0.6,
            attention: c.attention.slowed(1.3),
            overlap: Overlap::AllAttention,
            ..*c
        },
    },
];

/// How a run measures and refits.
#[derive(Debug, Clone, Copy)]
pub struct OnlineOptions {
    /// Steps per cell.
    pub steps: usize,
    /// Seed of the batches and the noise.
    pub seed: u64,
    /// Log-normal noise of every measurement (sigma of its logarithm).
    pub noise: f64,
    /// One straggler per this many micro-batches (0: none).
    pub straggler_every: u64,
    /// How much slower a straggler is.
    pub straggler: f64,
    /// The refit's parameters (`max_rows_per_step` is sized per cell).
    pub params: RefitParams,
}

impl Default for OnlineOptions {
    fn default() -> Self {
        OnlineOptions {
            steps: 20,
            seed: skrull_kit::batch::DEFAULT_SEED,
            noise: 0.05,
            straggler_every: 50,
            straggler: 100.0,
            params: RefitParams::default(),
        }
    }
}

/// The true iteration time of `model`'s plan of `lengths` under `truth`, with its placements.
fn true_time(
    plans: &mut OwnedBuffers,
    eval: &mut OwnedEval,
    cfg: &Config,
    model: &CostModel,
    truth: &CostModel,
    lengths: &[u32],
) -> Result<(f64, Vec<skrull_core::Placement>), String> {
    let plan = plans
        .schedule(&cfg.with_cost(*model), lengths)
        .map_err(|e| e.to_string())?;
    let placements = plan.placements().to_vec();
    let t = eval
        .evaluate(&cfg.with_cost(*truth), lengths, &placements)
        .map_err(|e| e.to_string())?
        .report
        .iteration_time;
    Ok((t, placements))
}

/// Runs one cell: `opts.steps` batches, refitting after each.
///
/// # Errors
/// A message when a plan, an evaluation or the refit is refused.
pub fn run_cell(
    setup: &Setup,
    dataset: Dataset,
    truth_name: &str,
    truth: &CostModel,
    opts: &OnlineOptions,
    draw: bool,
) -> Result<OnlineCell, String> {
    let preset = CostModel::h100(&setup.model);
    let cfg = Config::new(setup.dp, setup.cp, setup.bucket, setup.model)
        .with_policy(Policy::Balanced)
        .with_cost(preset);
    cfg.validate().map_err(|e| e.to_string())?;
    let clip = (128 * 1024).min(sharded_limit(&cfg)).max(1);
    let n = (setup.dp * setup.batch_size) as usize;
    let params = RefitParams {
        max_rows_per_step: (n as u32) * setup.cp,
        ..opts.params
    };
    let mut state = RefitState::new(params, &cfg).map_err(|e| e.to_string())?;
    let mut rows = vec![Row::default(); params.rows_needed()];
    let mut plans = OwnedBuffers::for_batch(n, &cfg);
    let mut eval = OwnedEval::for_batch(n, &cfg);
    let mut rng = Rng::new(opts.seed);
    let mut noise = Rng::new(opts.seed ^ 0x5eed);
    let mut model = preset;
    let mut steps = Vec::with_capacity(opts.steps);
    let mut panels = Vec::new();
    for step in 0..opts.steps {
        let lengths = dataset.batch(rng.next_u64(), n, clip);
        let (ours, placements) = true_time(&mut plans, &mut eval, &cfg, &model, truth, &lengths)?;
        let (oracle, oracle_placements) =
            true_time(&mut plans, &mut eval, &cfg, truth, truth, &lengths)?;
        let (preset_t, _) = true_time(&mut plans, &mut eval, &cfg, &preset, truth, &lengths)?;
        if draw && step + 1 == opts.steps {
            let tm = TimeModel::new(truth, &cfg);
            for (title, p) in [("refitted", &placements), ("oracle", &oracle_placements)] {
                let ev = eval
                    .evaluate(&cfg.with_cost(*truth), &lengths, p)
                    .map_err(|e| e.to_string())?;
                let t = format!(
                    "{title} plan under the truth: {:.1} ms",
                    ev.report.iteration_time * 1e3
                );
                panels.push(Panel::new(t, cfg.dp, cfg.cp, &ev, &tm));
            }
        }
        let (mut times, n_mb) =
            rank_times(&mut eval, &cfg.with_cost(*truth), &lengths, &placements)
                .map_err(|e| e.to_string())?;
        perturb(
            &mut times,
            cfg.cp as usize,
            &mut noise,
            opts.noise,
            opts.straggler_every,
            opts.straggler,
        );
        state
            .observe(&mut rows, &lengths, &placements, n_mb, &times)
            .map_err(|e| e.to_string())?;
        // The step's wall time: the true iteration time with the same noise.
        let wall = ours * (opts.noise * skrull_kit::sample::standard_normal(&mut noise)).exp();
        state.observe_step_time(wall).map_err(|e| e.to_string())?;
        let fit = state.solve(&rows).map_err(|e| e.to_string())?;
        if std::env::var("SKRULL_DBG").is_ok() {
            let r = &fit.report;
            eprintln!(
                "step {step}: {} unl {:.4} held use {:.4} fit {:.4} scale {:.4} limited {:#b} raised {:#b} heldout {} rows {}",
                r.verdict.name(),
                r.error_unlimited,
                r.error_heldout_in_use,
                r.error_heldout_fit,
                r.scale,
                r.limited,
                r.raised,
                r.heldout_rows,
                r.rows
            );
        }
        model = fit.model;
        steps.push(StepResult {
            ours,
            oracle,
            preset: preset_t,
            kept_prior: fit.report.kept_prior,
            adopted: fit.report.adopted,
            error_fit: fit.report.error_fit,
            coefficients: fit.report.coefficients,
        });
    }
    Ok(OnlineCell {
        setup: *setup,
        dataset: dataset.name(),
        truth: truth_name.to_string(),
        steps,
        last_model: model,
        panels,
    })
}

/// The convergence chart: our true time over the oracle's per step, one line per cell.
pub fn convergence_svg(cells: &[OnlineCell]) -> String {
    let (w, h, left, bottom, top) = (900.0, 420.0, 64.0, 40.0, 30.0);
    let steps = cells
        .iter()
        .map(|c| c.steps.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let ymax = cells
        .iter()
        .flat_map(|c| c.steps.iter().map(|s| s.ours / s.oracle))
        .fold(1.05f64, f64::max)
        .min(2.0);
    let x = |i: usize| left + (w - left - 200.0) * i as f64 / (steps - 1) as f64;
    let y = |r: f64| top + (h - top - bottom) * (1.0 - (r.min(ymax) - 1.0) / (ymax - 1.0));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"18\" font-size=\"13\">Online refit: true time of the refitted plan / oracle's, per step</text>"
    );
    for r in [1.0, 1.02, ymax] {
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#bbb\" stroke-dasharray=\"{}\"/><text x=\"4\" y=\"{:.1}\">{r:.2}</text>",
            w - 200.0,
            y(r),
            y(r),
            if r == 1.02 { "4 3" } else { "" },
            y(r) + 4.0
        );
    }
    let colors = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
    ];
    for (k, c) in cells.iter().enumerate() {
        let color = colors[k % colors.len()];
        let pts: Vec<String> = c
            .steps
            .iter()
            .enumerate()
            .map(|(i, st)| format!("{:.1},{:.1}", x(i), y(st.ours / st.oracle)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>",
            pts.join(" ")
        );
        let label = escape(&format!("{} {} {}", c.setup.name, c.dataset, c.truth));
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" fill=\"{color}\">{label}</text>",
            w - 192.0,
            top + 14.0 * k as f64
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\">step (0: the H100 preset; each later step plans with the model refitted on the steps before)</text></svg>",
        h - 10.0
    );
    s
}

/// Usage text of `skrull simulate --online`.
pub const USAGE: &str = "\
skrull simulate --online [--truth-model FILE | --truth NAME[,NAME...]] [--steps 20]
                [--setup NAME] [--dataset NAME] [--seed S] [--noise 0.05]
                [--straggler-every 50] [--svg FILE] [--format text|json]
                [--window 32] [--forgetting 0.95] [--ridge 1e-3] [--trust 2]
                [--holdout 3] [--max-error 0.25]

Starts every cell from the H100 preset and refits the cost model after each step from the
per-GPU times of its plan, measured under a truth model with log-normal noise (--noise, the
sigma of the log) and one 100x straggler per --straggler-every micro-batches. Prints per step
the true time of the refitted plan, of the truth model's own plan (the oracle) and of the
preset's plan. Truths: bandwidth/4, gemm-0.6, attention-1.3x, overlap-all, combined (all
four; the default runs every one), or a cost-model file over the preset. Cells: the paper's
six setups and the CP-16 rows (as `skrull simulate`). --svg FILE draws the convergence, and
FILE.gantt.svg the last step of the first cell (refitted and oracle plans).
--format json prints {\"cells\": [{setup, dataset, truth, steps_to_2pct, final_ratio,
preset_ratio}]}.";

/// The cells of `skrull simulate` (the paper's six and the CP-16 rows), filtered by flags.
fn cells(flags: &Flags) -> Result<Vec<(Setup, Dataset)>, String> {
    let setup = |n: &str| {
        SETUPS
            .iter()
            .copied()
            .find(|s| s.name == n)
            .ok_or_else(|| format!("--setup: unknown setup '{n}'"))
    };
    let dataset =
        |n: &str| Dataset::by_name(n).ok_or_else(|| format!("--dataset: unknown dataset '{n}'"));
    let mut v: Vec<(Setup, Dataset)> = PAPER_CELLS
        .iter()
        .map(|c| Ok((setup(c.setup)?, dataset(c.dataset)?)))
        .collect::<Result<_, String>>()?;
    for s in ["0.5b-cp16", "7b-cp16-bs64"] {
        for d in ["wikipedia", "lmsys", "chatqa2"] {
            v.push((setup(s)?, dataset(d)?));
        }
    }
    if let Some(s) = flags.get("--setup") {
        let s = setup(s)?;
        v.retain(|(x, _)| x.name == s.name);
        if v.is_empty() {
            v = ["wikipedia", "lmsys", "chatqa2"]
                .iter()
                .map(|d| Ok((s, dataset(d)?)))
                .collect::<Result<_, String>>()?;
        }
    }
    if let Some(d) = flags.get("--dataset") {
        let d = dataset(d)?;
        v.retain(|(_, x)| x.name() == d.name());
        if v.is_empty() {
            return Err("no cell of that setup and dataset".into());
        }
    }
    Ok(v)
}

/// Runs `skrull simulate --online`; returns the text to print.
///
/// # Errors
/// A message that names the offending value.
pub fn run(flags: &Flags) -> Result<String, String> {
    let mut opts = OnlineOptions {
        steps: flags.u64("--steps", 20)? as usize,
        seed: flags.u64("--seed", skrull_kit::batch::DEFAULT_SEED)?,
        straggler_every: flags.u64("--straggler-every", 50)?,
        ..OnlineOptions::default()
    };
    if opts.steps == 0 || opts.steps > 10_000 {
        return Err("--steps must be 1..=10000".into());
    }
    let float = |name: &str, default: f64| -> Result<f64, String> {
        match flags.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<f64>()
                .map_err(|_| format!("{name}: '{v}' is not a number")),
        }
    };
    opts.params.forgetting = float("--forgetting", opts.params.forgetting)?;
    opts.params.ridge = float("--ridge", opts.params.ridge)?;
    opts.params.window_steps = flags.u64("--window", u64::from(opts.params.window_steps))? as u32;
    opts.params.trust = float("--trust", opts.params.trust)?;
    opts.params.max_error = float("--max-error", opts.params.max_error)?;
    opts.params.holdout = flags.u64("--holdout", u64::from(opts.params.holdout))? as u32;
    opts.params.validate().map_err(|e| e.to_string())?;
    if let Some(v) = flags.get("--noise") {
        opts.noise = v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("--noise: '{v}' is not a non-negative number"))?;
    }
    let json = match flags.get("--format").unwrap_or("text") {
        "text" => false,
        "json" => true,
        f => return Err(format!("--format: unknown format '{f}' (text, json)")),
    };
    let file = flags.get("--truth-model").map(str::to_string);
    // `--truth grid` names every truth of the grid (`truth_grid`), and prints its summary.
    let grid = flags
        .get("--truth")
        .is_some_and(|l| l.split(',').any(|n| n.trim() == "grid"));
    let names: Vec<Truth> = match flags.get("--truth") {
        None => TRUTHS.to_vec(),
        Some(list) => {
            let mut v = Vec::new();
            for n in list.split(',').map(str::trim) {
                if n == "grid" {
                    v.extend(crate::truth_grid::GRID);
                    continue;
                }
                let t = TRUTHS
                    .iter()
                    .chain(crate::truth_grid::GRID.iter())
                    .copied()
                    .find(|t| t.name == n)
                    .ok_or_else(|| format!("--truth: unknown truth '{n}'"))?;
                v.push(t);
            }
            v
        }
    };
    let svg = flags.get("--svg").map(str::to_string);
    let cells = cells(flags)?;
    flags.finish()?;
    let mut out_cells = Vec::new();
    for (i, (setup, dataset)) in cells.iter().enumerate() {
        let preset = CostModel::h100(&setup.model);
        let truths: Vec<(String, CostModel)> = match &file {
            Some(f) => {
                let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
                vec![(
                    f.clone(),
                    crate::calibrate::parse_cost_model(&text, &preset)?,
                )]
            }
            None => names
                .iter()
                .map(|t| (t.name.to_string(), (t.apply)(&preset)))
                .collect(),
        };
        for (j, (name, truth)) in truths.iter().enumerate() {
            let draw = svg.is_some() && i == 0 && j == 0;
            out_cells.push(run_cell(setup, *dataset, name, truth, &opts, draw)?);
        }
    }
    if let (Some(path), true) = (&svg, grid) {
        // The grid's chart: the worst cell's trajectory beside its preset and oracle.
        let text = crate::truth_grid::worst_svg(&out_cells);
        std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
    } else if let Some(path) = &svg {
        std::fs::write(path, convergence_svg(&out_cells)).map_err(|e| format!("{path}: {e}"))?;
        if let Some(c) = out_cells.first().filter(|c| !c.panels.is_empty()) {
            let title = format!(
                "{} {} truth {}: last step",
                c.setup.label(),
                c.dataset,
                c.truth
            );
            let g = format!("{path}.gantt.svg");
            std::fs::write(&g, gantt(&title, &c.panels)).map_err(|e| format!("{g}: {e}"))?;
        }
    }
    Ok(if json {
        to_json(&out_cells)
    } else if grid {
        crate::truth_grid::summary(&out_cells)
    } else {
        to_text(&out_cells, &opts)
    })
}

fn to_json(cells: &[OnlineCell]) -> String {
    let list: Vec<String> = cells
        .iter()
        .map(|c| {
            let ratios: Vec<String> = c
                .steps
                .iter()
                .map(|s| format!("{:.6}", s.ours / s.oracle))
                .collect();
            let (worst_step, worst) = c.worst_vs_preset();
            let vs_preset: Vec<String> = c
                .steps
                .iter()
                .map(|s| format!("{:.6}", s.ours / s.preset))
                .collect();
            format!(
                "{{\"setup\": \"{}\", \"dataset\": \"{}\", \"truth\": \"{}\", \"steps_to_2pct\": {}, \"steps_to_2pct_strict\": {}, \"final_ratio\": {:.6}, \"preset_ratio\": {:.6}, \"worst_vs_preset\": {worst:.6}, \"worst_step\": {worst_step}, \"refused\": {}, \"ratios\": [{}], \"vs_preset\": [{}]}}",
                c.setup.name,
                c.dataset,
                c.truth.replace('\\', "\\\\").replace('"', "\\\""),
                c.steps_to_2pct().map_or("null".into(), |k| k.to_string()),
                c.steps_to_2pct_strict().map_or("null".into(), |k| k.to_string()),
                c.final_ratio(),
                c.preset_ratio(),
                c.refused(),
                ratios.join(", "),
                vs_preset.join(", ")
            )
        })
        .collect();
    format!("{{\"cells\": [\n  {}\n]}}\n", list.join(",\n  "))
}

fn to_text(cells: &[OnlineCell], opts: &OnlineOptions) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# skrull simulate --online\n\nStart: the H100 preset. Measurements: the truth model, \
         log-normal noise sigma {}, one {}x straggler per {} micro-batches. {} steps per cell.\n",
        opts.noise, opts.straggler, opts.straggler_every, opts.steps
    );
    let _ = writeln!(
        s,
        "| setup | dataset | truth | steps to 2 % (5-step mean) | every step within 2 % from | final ratio | preset ratio |\n|---|---|---|---:|---:|---:|---:|"
    );
    for c in cells {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.4} | {:.4} |",
            c.setup.name,
            c.dataset,
            c.truth,
            c.steps_to_2pct().map_or("never".into(), |k| k.to_string()),
            c.steps_to_2pct_strict()
                .map_or("never".into(), |k| k.to_string()),
            c.final_ratio(),
            c.preset_ratio()
        );
    }
    for c in cells {
        let _ = writeln!(
            s,
            "\n## {} {} truth {}\n\n| step | refitted (ms) | oracle (ms) | preset (ms) | ratio | fit error | coefficients after the step: fixed, GEMM, attention, intra latency, intra s/B, inter latency, inter s/B, overlap, per sharded sequence |\n|---:|---:|---:|---:|---:|---:|---|",
            c.setup.label(),
            c.dataset,
            c.truth
        );
        for (i, st) in c.steps.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {i} | {:.2} | {:.2} | {:.2} | {:.4} | {:.4}{} | {} |",
                st.ours * 1e3,
                st.oracle * 1e3,
                st.preset * 1e3,
                st.ours / st.oracle,
                st.error_fit,
                if st.kept_prior { " (prior kept)" } else { "" },
                st.coefficients
                    .iter()
                    .map(|c| format!("{c:.3}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    s
}
