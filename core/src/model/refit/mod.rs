//! The online refit: the cost model fitted, while training runs, to the measured time of every
//! (micro-batch, GPU) of the last steps' plans (`docs/cost_model.md`, "Refitting online").
//!
//! The refit keeps a *prior* [`CostModel`] and fits [`COEFFICIENTS`] dimensionless
//! coefficients relative to it ([`Coef`]): the fixed cost per micro-batch, the GEMM time, the
//! attention time, ring latency and time per byte inside and across nodes, the overlap rule
//! the fixed cost per sharded sequence, the per-step cost paid inside each DP rank's last
//! micro-batch and the cost per whole sequence of calling the attention kernel. A prior coefficient is 1 (the overlap: 0 for
//! `local-attention`, 1 for `all-attention`; a fixed cost the prior lacks: 0). Each step,
//! [`RefitState::observe`] turns a plan into per-GPU features (the prior's time of each term,
//! [`features`]) and stores them with the measured times in a window of the last
//! `window_steps` steps in caller storage ([`Row`]); [`RefitState::observe_step_time`] adds
//! the step's wall time, from which the per-step cost is measured ([`steps`]).
//! [`RefitState::solve`] fits the window ([`solve`]) and adopts the fit only when it explains
//! held-out measurements better than the model in use, within a trust region around it
//! ([`adopt`]). No allocation, fixed summation order, IEEE basic operations and `libm` only:
//! the same window gives the same bits on every platform, so every rank that sees the same
//! all-gathered times plans identically.

use core::fmt;

use crate::config::Config;
use crate::config::cost::{CostModel, InvalidCost};
use crate::error::Error;

pub mod adopt;
pub mod censored;
pub mod features;
pub mod solve;
pub mod steps;

/// Coefficients the refit fits ([`Coef`]).
pub const COEFFICIENTS: usize = 11;
/// The most steps a window keeps.
pub const MAX_WINDOW: u32 = 64;
/// The most measurements (micro-batches x DP x CP) one step may hold.
pub const MAX_ROWS_PER_STEP: u32 = 1 << 24;
/// Features of one measurement ([`Row::x`]).
pub const FEATURES: usize = 11;

/// The fitted coefficients, by index into [`RefitReport::coefficients`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Coef {
    /// Fixed cost per micro-batch (scale of the prior's; of 1 ms when the prior's is 0).
    Fixed = 0,
    /// GEMM time scale (divides `gemm_efficiency` and `hbm_bandwidth`).
    Gemm = 1,
    /// Attention time scale (divides the attention table).
    Attention = 2,
    /// Intra-node ring step latency scale.
    IntraLatency = 3,
    /// Intra-node time per byte scale (divides `intra_node_bandwidth`).
    IntraBandwidth = 4,
    /// Inter-node ring step latency scale.
    InterLatency = 5,
    /// Inter-node time per byte scale (divides `inter_node_bandwidth`).
    InterBandwidth = 6,
    /// The overlap fraction: 0 `local-attention`, 1 `all-attention`.
    Overlap = 7,
    /// Fixed cost per sharded sequence per GPU of its group (scale of the prior's; of 1 ms
    /// when the prior's is 0).
    ShardedSequence = 8,
    /// The per-step cost paid inside each DP rank's last micro-batch (DDP's gradient
    /// all-reduce runs in that micro-batch's backward: fitted under
    /// [`Synchronisation::Sharded`](crate::config::options::Synchronisation::Sharded) only,
    /// 0 otherwise), in units of [`LAST_UNIT_S`]; the returned model adds it to
    /// `iteration_fixed_s` (it moves no plan: every plan pays it once per step). The prior's
    /// is 0.
    LastMicroBatch = 9,
    /// Cost per sequence held whole on a GPU, per micro-batch (calling the attention kernel
    /// once per sequence), in the overlap window (scale of the prior's; of 1 ms when the
    /// prior's is 0).
    LocalSequence = 10,
}

/// The unit of [`Coef::LastMicroBatch`], seconds.
pub const LAST_UNIT_S: f64 = 1e-3;

/// How the refit weighs and bounds its data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefitParams {
    /// Steps the window keeps, `1..=MAX_WINDOW`.
    pub window_steps: u32,
    /// Capacity of one step: micro-batches x DP x CP, `1..=MAX_ROWS_PER_STEP`.
    pub max_rows_per_step: u32,
    /// Never change the overlap rule.
    pub keep_overlap: bool,
    /// Weight of a step `k` steps old: `forgetting^k`, in `(0, 1]`.
    pub forgetting: f64,
    /// Pull of every coefficient toward the prior, relative to the data's weight, `>= 0`.
    pub ridge: f64,
    /// A measurement off the fit by more than this fraction is dropped (a straggler), `> 0`.
    pub outlier: f64,
    /// The trust region: per solve, each scale moves by at most this factor either way from
    /// the model in use (after the window's uniform scale), `>= 1`; infinite: no limit.
    pub trust: f64,
    /// Every `holdout`-th micro-batch (by a hash of its step, index and DP rank) is held out
    /// of the fit and decides whether the fit is adopted; `0`: none held out (the fit is
    /// judged on the data it was fitted to).
    pub holdout: u32,
    /// A fit whose error on the window stays above this (relative, rms) does not describe the
    /// machine: it is reported and not adopted, `> 0`.
    pub max_error: f64,
}

impl Default for RefitParams {
    fn default() -> Self {
        RefitParams {
            window_steps: 32,
            max_rows_per_step: 4096,
            keep_overlap: false,
            forgetting: 0.95,
            ridge: 1e-3,
            outlier: 0.5,
            trust: 2.0,
            holdout: 3,
            max_error: 0.25,
        }
    }
}

impl RefitParams {
    /// Checks every field's range.
    ///
    /// # Errors
    /// [`RefitError::Params`] naming the first bad field.
    pub fn validate(&self) -> Result<(), RefitError> {
        let bad = |field| Err(RefitError::Params { field });
        if !(1..=MAX_WINDOW).contains(&self.window_steps) {
            return bad("window_steps");
        }
        if !(1..=MAX_ROWS_PER_STEP).contains(&self.max_rows_per_step) {
            return bad("max_rows_per_step");
        }
        if !(self.forgetting > 0.0 && self.forgetting <= 1.0) {
            return bad("forgetting");
        }
        if !(self.ridge.is_finite() && self.ridge >= 0.0) {
            return bad("ridge");
        }
        if !(self.outlier.is_finite() && self.outlier > 0.0) {
            return bad("outlier");
        }
        if self.trust.is_nan() || self.trust < 1.0 {
            return bad("trust");
        }
        if self.holdout == 1 || self.holdout > 1024 {
            return bad("holdout");
        }
        if !(self.max_error.is_finite() && self.max_error > 0.0) {
            return bad("max_error");
        }
        Ok(())
    }

    /// [`Row`]s of storage the window needs: `window_steps x max_rows_per_step`.
    pub fn rows_needed(&self) -> usize {
        self.window_steps as usize * self.max_rows_per_step as usize
    }
}

/// One measurement: a GPU's time in one micro-batch and the prior's terms of it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Row {
    /// The step it was observed in.
    pub step: u64,
    /// Tokens the GPU held (for the GEMM term).
    pub tokens: u64,
    /// Rings whose latency is already counted (bit `l` a sub-group of `2^(l+1)`, bit 7 the
    /// whole group).
    pub rings: u32,
    /// 1 when the row is a valid measurement.
    pub used: u32,
    /// 1 when the row's micro-batch is held out of the fit ([`RefitParams::holdout`]).
    pub heldout: u32,
    /// 1 when the GPU ran a chunked sequence in the micro-batch: its time composes the step
    /// (the per-step cost's busy time) but the fit does not model chunked passes yet, so the
    /// row is not fitted (and counts in [`RefitReport::skipped`]).
    pub chunked: u32,
    /// The prior's terms ([`features`]).
    pub x: [f64; FEATURES],
    /// The measured time, seconds.
    pub time: f64,
}

/// Why a refit call was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum RefitError {
    /// A [`RefitParams`] field is out of range.
    Params {
        /// The field.
        field: &'static str,
    },
    /// The configuration is invalid.
    Config(Error),
    /// The prior cost model is invalid.
    Cost(InvalidCost),
    /// The caller's row storage is smaller than [`RefitParams::rows_needed`].
    Storage {
        /// Rows needed.
        needed: usize,
        /// Rows given.
        got: usize,
    },
    /// A sequence has 0 tokens or more than `MAX_SEQ_LEN`.
    Length {
        /// The sequence.
        index: usize,
    },
    /// A placement does not fit the configuration (DP rank, CP rank or group out of range).
    Plan {
        /// The sequence.
        seq: usize,
    },
    /// The times do not match the plan: their count is not `n_micro_batches x dp x cp`, the
    /// plan uses a micro-batch beyond `n_micro_batches`, or lengths and placements differ
    /// in count.
    Mismatch {
        /// What was given.
        got: usize,
        /// What the plan needs.
        expected: usize,
    },
    /// One step holds more measurements than `max_rows_per_step`.
    StepTooLarge {
        /// Measurements of the step.
        needed: usize,
        /// The capacity.
        limit: usize,
    },
}

impl fmt::Display for RefitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RefitError::Params { field } => write!(f, "refit parameter {field} is out of range"),
            RefitError::Config(e) => write!(f, "{e}"),
            RefitError::Cost(e) => write!(f, "{e}"),
            RefitError::Storage { needed, got } => {
                write!(f, "refit storage holds {got} rows, {needed} are needed")
            }
            RefitError::Length { index } => write!(f, "sequence {index} has a bad length"),
            RefitError::Plan { seq } => {
                write!(
                    f,
                    "sequence {seq}: placement out of range for the configuration"
                )
            }
            RefitError::Mismatch { got, expected } => write!(
                f,
                "measurements do not match the plan: {got} given, {expected} expected"
            ),
            RefitError::StepTooLarge { needed, limit } => write!(
                f,
                "a step of {needed} measurements exceeds max_rows_per_step {limit}"
            ),
        }
    }
}

impl core::error::Error for RefitError {}

impl Row {
    /// Whether the fit reads the row: a valid measurement of a micro-batch without a chunked
    /// sequence on this GPU.
    pub fn fitted(&self) -> bool {
        self.used == 1 && self.chunked == 0
    }
}

/// What a [`RefitState::solve`] decided about its fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum Verdict {
    /// The fit was adopted: the returned model is the fit (within the trust region).
    Adopted = 0,
    /// No valid measurement in the window: the model in use is returned.
    #[default]
    NoData = 1,
    /// The fit does not explain the held-out measurements better than the model in use: the
    /// model in use is returned.
    NotBetter = 2,
    /// The fit explains the held-out measurements no better than the model in use times one
    /// uniform factor ([`RefitReport::scale`]): it found a scale, not a model; the model in
    /// use is returned (a uniform factor changes no plan).
    ScaleOnly = 3,
    /// Even the best fit leaves an error above `max_error` on the window: the model cannot
    /// describe these times (another composition, noise, a cost it lacks); the model in use
    /// is returned.
    HighError = 4,
    /// The window holds no held-out measurement yet, or nothing but held-out ones: the fit
    /// cannot be judged, and the model in use is returned.
    Unvalidated = 5,
}

impl Verdict {
    /// The verdict's stable name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Adopted => "adopted",
            Verdict::NoData => "no-data",
            Verdict::NotBetter => "not-better",
            Verdict::ScaleOnly => "scale-only",
            Verdict::HighError => "high-error",
            Verdict::Unvalidated => "unvalidated",
        }
    }
}

/// What a [`RefitState::solve`] found.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RefitReport {
    /// The returned model is the prior (nothing adopted yet, or no data).
    pub kept_prior: bool,
    /// Steps in the window.
    pub steps: u32,
    /// Valid measurements in the window.
    pub rows: u32,
    /// Of them, dropped as outliers (stragglers) by the returned model.
    pub dropped: u32,
    /// Measurements skipped in the window (NaN, infinite, zero or negative, or a GPU's
    /// micro-batch holding a chunked sequence, which the fit does not model yet).
    pub skipped: u32,
    /// Bit `i` set: coefficient `i` of the returned model is more than 1 % from the prior's.
    pub moved: u32,
    /// Weighted rms relative error of the prior on the window (residuals clipped at
    /// `outlier`).
    pub error_prior: f64,
    /// The same of the returned model.
    pub error_fit: f64,
    /// The returned model relative to the prior ([`Coef`]).
    pub coefficients: [f64; COEFFICIENTS],
    /// Whether the fit was adopted (the returned model is new).
    pub adopted: bool,
    /// Why it was or was not.
    pub verdict: Verdict,
    /// Bit `i` set: coefficient `i` of the fit was held back by the trust region.
    pub limited: u32,
    /// Bit `i` set: communication coefficient `i` of the fit was raised to the most the
    /// window allows, its cost hidden on every measurement
    /// ([`censored`]).
    pub raised: u32,
    /// The window's weighted median of measured over predicted time under the model in use
    /// (before this solve): the uniform factor it is off by.
    pub scale: f64,
    /// Error of the model in use on the held-out measurements (on the window when none is
    /// held out).
    pub error_heldout_in_use: f64,
    /// Error of the fit (within the trust region) on the same measurements.
    pub error_heldout_fit: f64,
    /// Error of the best fit without the trust region on the measurements it was fitted to
    /// (what `max_error` is compared with).
    pub error_unlimited: f64,
    /// Held-out measurements in the window.
    pub heldout_rows: u32,
    /// Steps in the window with a measured step time ([`RefitState::observe_step_time`]).
    pub step_times: u32,
    /// The returned model's `iteration_fixed_s`, seconds: the per-step cost measured from them
    /// (the weighted median of each step's time over its slowest DP rank's micro-batches; the
    /// model in use's when no step time was given) plus the per-step cost the returned
    /// coefficients find inside each DP rank's last micro-batch ([`Coef::LastMicroBatch`]).
    pub iteration_fixed_s: f64,
}

/// The refitted model and its report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refit {
    /// The model to plan with (validated).
    pub model: CostModel,
    /// How it was found.
    pub report: RefitReport,
}

/// The refit's state apart from the rows: parameters, configuration, prior, and which steps
/// the window holds. Plain data; the rows live in caller storage beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefitState {
    params: RefitParams,
    cfg: Config,
    prior: CostModel,
    /// The prior's fixed cost per micro-batch, or 1 ms when it is 0 (the unit of
    /// [`Coef::Fixed`]).
    fixed_unit: f64,
    /// Whether the prior's fixed cost is above 0.
    prior_has_fixed: bool,
    /// Steps observed so far.
    steps: u64,
    /// Rows written per window slot (`step % window_steps`).
    counts: [u32; MAX_WINDOW as usize],
    /// Measurements skipped per window slot.
    skipped: [u32; MAX_WINDOW as usize],
    /// The coefficients of the last [`RefitState::solve`] (at first the prior's): where the
    /// ridge pulls, and a start of the next fit.
    anchor: [f64; COEFFICIENTS],
    /// The anchor's scale: the product of the factors the fits rescaled it by
    /// ([`RefitState::rescaled`]), 1 while none did. The ridge's unit.
    unit: f64,
    /// The prior's fixed cost per sharded sequence, or 1 ms when it is 0 (the unit of
    /// [`Coef::ShardedSequence`]).
    seq_unit: f64,
    /// Whether the prior's fixed cost per sharded sequence is above 0.
    prior_has_seq: bool,
    /// The prior's cost per whole sequence, or 1 ms when it is 0 (the unit of
    /// [`Coef::LocalSequence`]).
    local_unit: f64,
    /// Whether the prior's cost per whole sequence is above 0.
    prior_has_local: bool,
    /// Per window slot: the step's measured wall time (0: none given).
    step_time: [f64; MAX_WINDOW as usize],
    /// Per window slot: the step's slowest DP rank's measured micro-batches (the sum of each
    /// micro-batch's slowest GPU), seconds.
    busy: [f64; MAX_WINDOW as usize],
    /// The per-step cost of the model in use outside the micro-batches, seconds (its
    /// `iteration_fixed_s` less its [`Coef::LastMicroBatch`] cost).
    iteration_fixed: f64,
    /// The ring kinds this configuration's plans can use: bit 0 rings inside a node, bit 1
    /// rings across nodes ([`censored`]).
    ring_kinds: u32,
}

impl RefitState {
    /// A state with an empty window for `cfg` (its DP and CP sizes, shape, padding) with
    /// [`Config::cost_model`] as the prior.
    ///
    /// # Errors
    /// [`RefitError::Params`], [`RefitError::Config`] or [`RefitError::Cost`].
    pub fn new(params: RefitParams, cfg: &Config) -> Result<RefitState, RefitError> {
        params.validate()?;
        cfg.validate().map_err(RefitError::Config)?;
        let prior = cfg.cost_model();
        prior.validate().map_err(RefitError::Cost)?;
        let fixed = crate::model::time::TimeModel::new(&prior, cfg).fixed();
        let seq = prior.sharded_sequence_s;
        let mut s = RefitState {
            params,
            cfg: cfg.with_cost(prior),
            prior,
            fixed_unit: if fixed > 0.0 { fixed } else { 1e-3 },
            prior_has_fixed: fixed > 0.0,
            steps: 0,
            counts: [0; MAX_WINDOW as usize],
            skipped: [0; MAX_WINDOW as usize],
            anchor: [1.0; COEFFICIENTS],
            unit: 1.0,
            seq_unit: if seq > 0.0 { seq } else { 1e-3 },
            prior_has_seq: seq > 0.0,
            local_unit: if prior.local_sequence_s > 0.0 {
                prior.local_sequence_s
            } else {
                1e-3
            },
            prior_has_local: prior.local_sequence_s > 0.0,
            step_time: [0.0; MAX_WINDOW as usize],
            busy: [0.0; MAX_WINDOW as usize],
            iteration_fixed: prior.iteration_fixed_s,
            ring_kinds: censored::ring_kinds(&prior, cfg),
        };
        s.anchor = s.prior_coefs();
        Ok(s)
    }

    /// The coefficients of the model in use (the last adopted fit, at first the prior's):
    /// where the next fit starts, is pulled toward and is judged against.
    pub fn anchor(&self) -> &[f64; COEFFICIENTS] {
        &self.anchor
    }

    /// The parameters.
    pub fn params(&self) -> &RefitParams {
        &self.params
    }

    /// The configuration (with the prior as its cost model).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The prior cost model.
    pub fn prior(&self) -> &CostModel {
        &self.prior
    }

    /// Steps observed so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    fn check_storage(&self, len: usize) -> Result<(), RefitError> {
        let needed = self.params.rows_needed();
        if len < needed {
            return Err(RefitError::Storage { needed, got: len });
        }
        Ok(())
    }
}
