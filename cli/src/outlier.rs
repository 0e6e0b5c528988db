//! `skrull simulate --outlier-delay W[,W...]`: on each cell's batches, taken as one epoch in
//! order, `balanced` per global batch (no delay) against the outlier-delay window
//! (`skrull_core::window`, `docs/outlier_delay.md`) with `max_delay` W: per-step iteration
//! time (mean and p95), the speedup of the mean, the deferred sequences and their delays.
//! `simulate` samples each cell's batches and hands them here ([`compare_delay`]).

use std::fmt::Write;

use skrull_core::window::{Window, WindowParams};
use skrull_core::{Config, Policy};
use skrull_kit::{OwnedBuffers, OwnedEval};

use crate::args::Flags;

/// The `max_delay` values of `--outlier-delay` (a comma-separated list, each `1..=64`), or
/// `None` without the flag.
///
/// # Errors
/// A message naming the bad value.
pub fn delays(flags: &Flags) -> Result<Option<Vec<u32>>, String> {
    let Some(list) = flags.get("--outlier-delay") else {
        return Ok(None);
    };
    let max = skrull_core::window::MAX_DELAY;
    let mut out = Vec::new();
    for w in list.split(',') {
        let v: u32 = w
            .trim()
            .parse()
            .ok()
            .filter(|v| (1..=max).contains(v))
            .ok_or_else(|| format!("--outlier-delay: '{w}' is not a delay in 1..={max}"))?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(Some(out))
}

/// One epoch of a cell's batches at one `max_delay` (0: each batch as it is).
#[derive(Debug, Clone, PartialEq)]
pub struct DelayRun {
    /// `max_delay`.
    pub max_delay: u32,
    /// Per step, the evaluated iteration time, seconds.
    pub times: Vec<f64>,
    /// Mean lower bound of the steps, seconds.
    pub mean_bound: f64,
    /// Sequences deferred over the epoch.
    pub deferred: u64,
    /// Their delays summed, steps.
    pub delay_sum: u64,
    /// The longest delay, steps.
    pub longest_delay: u64,
}

impl DelayRun {
    /// Mean iteration time, seconds.
    pub fn mean(&self) -> f64 {
        self.times.iter().sum::<f64>() / self.times.len().max(1) as f64
    }

    /// The 95th percentile (nearest rank) of the iteration times, seconds.
    pub fn p95(&self) -> f64 {
        let mut t = self.times.clone();
        t.sort_by(f64::total_cmp);
        let rank = (0.95 * t.len() as f64).ceil() as usize;
        t.get(rank.saturating_sub(1)).copied().unwrap_or(0.0)
    }

    /// Mean delay of a deferred sequence, steps.
    pub fn mean_delay(&self) -> f64 {
        self.delay_sum as f64 / self.deferred.max(1) as f64
    }
}

/// One cell: no delay, then each delay asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayResult {
    /// The layout's label.
    pub setup: String,
    /// The dataset's name.
    pub dataset: &'static str,
    /// Sequences per epoch.
    pub sequences: usize,
    /// `max_delay` 0 first, then the delays in the order asked.
    pub runs: Vec<DelayRun>,
}

impl DelayResult {
    /// The speedup of run `i`'s mean over no delay's.
    pub fn speedup(&self, i: usize) -> f64 {
        self.runs[0].mean() / self.runs[i].mean()
    }
}

/// Runs one epoch through a window of `max_delay` (keeping `max_delay` batches pushed
/// ahead) and plans and evaluates every step under `cfg`.
fn run_epoch(cfg: &Config, batches: &[Vec<u32>], max_delay: u32) -> Result<DelayRun, String> {
    let setup = skrull_core::Setup::new(cfg).map_err(|e| e.to_string())?;
    let capacity = batches.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
    let params = WindowParams::new(max_delay, capacity);
    let mut slab = vec![0u64; params.words()];
    let mut window = Window::new(&setup, params, &mut slab).map_err(|e| e.to_string())?;
    let origin: Vec<u64> = batches
        .iter()
        .enumerate()
        .flat_map(|(t, b)| std::iter::repeat_n(t as u64, b.len()))
        .collect();
    let mut plans = OwnedBuffers::for_batch(params.step_capacity(), cfg);
    let mut eval = OwnedEval::default();
    let mut run = DelayRun {
        max_delay,
        times: Vec::with_capacity(batches.len()),
        mean_bound: 0.0,
        deferred: 0,
        delay_sum: 0,
        longest_delay: 0,
    };
    let mut pushed = 0;
    for t in 0..batches.len() {
        while pushed < batches.len() && pushed <= t + max_delay as usize {
            window.push(&batches[pushed]).map_err(|e| e.to_string())?;
            pushed += 1;
        }
        let step = window.step().map_err(|e| e.to_string())?;
        run.deferred += u64::from(step.deferred);
        run.delay_sum += step.delay_sum;
        let first_released = step.positions.len() - step.released as usize;
        for &p in &step.positions[first_released..] {
            run.longest_delay = run.longest_delay.max(t as u64 - origin[p as usize]);
        }
        let plan = plans
            .schedule_prepared(&setup, step.lengths)
            .map_err(|e| format!("step {t}: {e}"))?;
        let ev = eval
            .evaluate(cfg, step.lengths, plan.placements())
            .map_err(|e| format!("evaluating step {t}: {e}"))?;
        run.times.push(ev.report.iteration_time);
        run.mean_bound += ev.report.lower_bound.value / batches.len().max(1) as f64;
    }
    Ok(run)
}

/// Runs `balanced` (with `base`'s other settings) over a cell's `batches`, as one epoch in
/// order: without delay, then with each of `delays`. `setup` and `dataset` label the rows.
///
/// # Errors
/// A message when a step cannot be planned or evaluated.
pub fn compare_delay(
    setup: &str,
    dataset: &'static str,
    base: &Config,
    batches: &[Vec<u32>],
    delays: &[u32],
) -> Result<DelayResult, String> {
    let cfg = base.with_policy(Policy::Balanced);
    let label = |w: u32| format!("outlier delay {w} on {setup} {dataset}");
    let runs = std::iter::once(0)
        .chain(delays.iter().copied())
        .map(|w| run_epoch(&cfg, batches, w).map_err(|e| format!("{}: {e}", label(w))))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(DelayResult {
        setup: setup.to_string(),
        dataset,
        sequences: batches.iter().map(Vec::len).sum(),
        runs,
    })
}

/// Milliseconds as the simulator prints them.
fn ms(s: f64) -> String {
    if s >= 10.0 {
        format!("{:.0}", s * 1e3)
    } else {
        format!("{:.1}", s * 1e3)
    }
}

/// The geometric mean of `xs` (NaN when empty).
fn geometric_mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

/// Plans one [`compare_delay`] schedules and evaluates.
pub fn plans(r: &DelayResult) -> usize {
    r.runs.iter().map(|x| x.times.len()).sum()
}

/// The paragraph before the table.
pub const INTRO: &str = "Outlier delay: each cell's batches taken as one epoch in order, \
    planned by `balanced` one global batch at a time (W = 0) and through the outlier-delay \
    window with max_delay W (docs/outlier_delay.md: a sequence that alone outlasts its \
    batch's fair share per DP rank may run up to W steps later beside other such sequences; \
    every sequence runs once per epoch, the last step drains the queue). Per-step \
    iteration time on the cost model: mean, p95 (nearest rank), the speedup of the mean over \
    W = 0, the mean over the mean lower bound of the steps, the deferred sequences per \
    epoch and their delay (mean, longest).\n\n";

/// The table: one row per (cell, W), W = 0 first; then per W the geometric mean of the
/// speedups over all cells and the worst cell.
pub fn delay_table(rows: &[DelayResult]) -> String {
    let mut s = String::from(
        "| setup | dataset | W | mean (ms) | p95 (ms) | speedup (mean) | p95 vs W = 0 \
         | ÷ lower bound | deferred / epoch (of sequences) | mean delay | longest |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        for (i, run) in r.runs.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.3}x | {:.3}x | {:.2} | {} ({}) | {:.2} | {} |",
                r.setup,
                r.dataset,
                run.max_delay,
                ms(run.mean()),
                ms(run.p95()),
                r.speedup(i),
                r.runs[0].p95() / run.p95().max(1e-300),
                run.mean() / run.mean_bound.max(1e-300),
                run.deferred,
                r.sequences,
                run.mean_delay(),
                run.longest_delay
            );
        }
    }
    let delays: Vec<u32> = rows
        .first()
        .map(|r| r.runs.iter().skip(1).map(|x| x.max_delay).collect())
        .unwrap_or_default();
    for (k, w) in delays.iter().enumerate() {
        let speedups: Vec<f64> = rows.iter().map(|r| r.speedup(k + 1)).collect();
        let worst = speedups.iter().copied().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            s,
            "| **all cells: geometric mean** ({} rows) | | {w} | | | **{:.3}x** | | | | | worst {:.3}x |",
            speedups.len(),
            geometric_mean(&speedups),
            worst
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::ModelShape;
    use skrull_kit::sample::Dataset;

    #[test]
    fn a_cell_runs_every_delay_on_the_same_sequences() {
        let base = Config::new(2, 16, 13 * 1024, ModelShape::QWEN2_5_7B);
        let d = Dataset::by_name("chatqa2-hist").unwrap();
        let batches: Vec<Vec<u32>> = (0..6).map(|k| d.batch(k, 80, 128 * 1024)).collect();
        let r = compare_delay("7B", d.name(), &base, &batches, &[1, 4]).unwrap();
        assert_eq!(r.runs.len(), 3);
        assert_eq!(r.sequences, 6 * 80);
        for run in &r.runs {
            assert_eq!(run.times.len(), 6);
            assert!(run.longest_delay <= u64::from(run.max_delay));
            assert!(run.p95() >= run.mean() * 0.5 && run.p95() > 0.0);
        }
        assert_eq!(r.runs[0].deferred, 0);
        assert_eq!(r.speedup(0), 1.0);
        let t = delay_table(&[r]);
        assert!(t.contains("| 4 |") && t.contains("geometric mean"), "{t}");
    }

    #[test]
    fn delays_parse_as_a_list_within_range() {
        let f = |v: &str| Flags::parse(&["--outlier-delay".to_string(), v.to_string()]);
        assert_eq!(
            delays(&f("1,2,4,8").unwrap()).unwrap(),
            Some(vec![1, 2, 4, 8])
        );
        assert_eq!(delays(&f("4, 4").unwrap()).unwrap(), Some(vec![4]));
        for bad in ["0", "65", "x", ""] {
            assert!(delays(&f(bad).unwrap()).is_err(), "{bad}");
        }
        assert_eq!(delays(&Flags::default()).unwrap(), None);
    }
}
