//! One cell of `skrull simulate --online`: the truth model it measures under and its
//! per-step results (a leaf the run and the truth grid's reports share).

use skrull_core::CostModel;

use crate::setups::Setup;
use crate::svg::Panel;

/// A built-in truth model: the preset changed the way the issue names.
#[derive(Debug, Clone, Copy)]
pub struct Truth {
    /// Its name.
    pub name: &'static str,
    /// The change.
    pub apply: fn(&CostModel) -> CostModel,
}

/// One step of a cell: true times of the three plans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepResult {
    /// True time of the plan made with the refitted model, seconds.
    pub ours: f64,
    /// True time of the truth model's own plan, seconds.
    pub oracle: f64,
    /// True time of the uncalibrated preset's plan, seconds.
    pub preset: f64,
    /// Whether the refit kept the prior after this step.
    pub kept_prior: bool,
    /// Whether the refit adopted its fit after this step (else it kept the model in use).
    pub adopted: bool,
    /// The fit's error on the window after this step.
    pub error_fit: f64,
    /// The refitted coefficients after this step (relative to the preset).
    pub coefficients: [f64; skrull_core::model::refit::COEFFICIENTS],
}

/// One (setup, dataset, truth) cell.
#[derive(Debug, Clone)]
pub struct OnlineCell {
    /// The layout.
    pub setup: Setup,
    /// The dataset's name.
    pub dataset: &'static str,
    /// The truth's name.
    pub truth: String,
    /// Every step.
    pub steps: Vec<StepResult>,
    /// The refitted model after the last step.
    pub last_model: CostModel,
    /// Gantt panels of the last step (ours and the oracle's, under the truth), when asked.
    pub panels: Vec<Panel>,
}

impl OnlineCell {
    /// The first step `k` from which every run of 5 consecutive steps (`k..k+5`, `k+1..k+6`,
    /// ...) has a mean true time within 2 % of the oracle's (the same 5-step mean as
    /// [`OnlineCell::final_ratio`]; one batch's plan can be a few percent off the oracle's
    /// under a model that is right, because `balanced` is a heuristic); `None` when the last
    /// run is not.
    pub fn steps_to_2pct(&self) -> Option<usize> {
        let r: Vec<f64> = self.steps.iter().map(|s| s.ours / s.oracle).collect();
        let k = r.len().min(5);
        let runs = r.len() + 1 - k;
        let ok = |j: usize| r[j..j + k].iter().sum::<f64>() / k as f64 <= 1.02;
        match (0..runs).rposition(|j| !ok(j)) {
            None => Some(0),
            Some(j) if j + 1 < runs => Some(j + 1),
            Some(_) => None,
        }
    }

    /// The first step from which every single step is within 2 % of the oracle.
    pub fn steps_to_2pct_strict(&self) -> Option<usize> {
        let ok = |s: &StepResult| s.ours <= 1.02 * s.oracle;
        match self.steps.iter().rposition(|s| !ok(s)) {
            None => Some(0),
            Some(i) if i + 1 < self.steps.len() => Some(i + 1),
            Some(_) => None,
        }
    }

    fn mean_last5(&self, f: impl Fn(&StepResult) -> f64) -> f64 {
        let k = self.steps.len().min(5);
        let tail = &self.steps[self.steps.len() - k..];
        tail.iter().map(f).sum::<f64>() / k.max(1) as f64
    }

    /// Mean over the last 5 steps of our true time over the oracle's.
    pub fn final_ratio(&self) -> f64 {
        self.mean_last5(|s| s.ours / s.oracle)
    }

    /// The same for the uncalibrated preset's plan.
    pub fn preset_ratio(&self) -> f64 {
        self.mean_last5(|s| s.preset / s.oracle)
    }
}
