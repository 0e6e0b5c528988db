//! The deterministic, robust fit of the window ([`RefitState::best_fit`]); what the refit
//! adopts of it is decided in [`adopt`](crate::model::refit::adopt).
//!
//! For each overlap rule to try (the prior's, and the other unless `keep_overlap`), the
//! coefficients start at the anchor (the model in use) and at the prior, each also with
//! costlier or cheaper communication ([`COMM_STARTS`]), and are refitted [`ITERATIONS`] times:
//! each rank time is linear in the coefficients once it is known which side of
//! `max(comm, window)` is larger, so every iteration fixes that side from the current
//! coefficients and solves the weighted least squares on relative error (weights
//! `forgetting^age / t²`), with a ridge pull toward the anchor (`ridge` times the data's
//! weight, so coefficients the data cannot identify stay where they were). From the second
//! iteration on, a measurement off the current fit by more than `outlier` (`|t/pred − 1|`) is
//! dropped: a straggler. Each solution is clamped to the valid range ([`RefitState::clamp`]).
//! The better rule wins by the clipped error ([`RefitState::error`]) on the rows fitted.
//!
//! Far from the data (a prior 100x off, say a GPU preset against a CPU), the anchor
//! and the prior are first rescaled by their weighted median of `t/pred` over the window
//! ([`RefitState::rescaled`], only when that median is off 1 by more than `outlier`): the
//! fit then starts near the data and judges stragglers against itself, not against a prior
//! that misses every time; the ridge is taken in units of that scale, so a uniformly scaled
//! window gives uniformly scaled coefficients.

use crate::config::cost::{CostModel, Overlap};
use crate::config::limits::MAX_CP;
use crate::config::options::Synchronisation;
use crate::model::fit::least_squares;
use crate::model::refit::features::{
    A_LOCAL, A_SHARDED, BW_INTER, BW_INTRA, FIXED, GEMM, LAST, LAT_INTER, LAT_INTRA, LOCALS, SEQS,
    Subset,
};
use crate::model::refit::{COEFFICIENTS, Coef, LAST_UNIT_S, RefitState, Row};

/// Refits per overlap rule.
pub const ITERATIONS: usize = 24;
/// Step halvings of the line search of one iteration.
const HALVINGS: usize = 12;
/// The starts of the fit: the prior with its communication coefficients times each of these.
/// Which side of `max(comm, window)` a measurement is on is decided by the current fit, so a
/// start whose communication is far too cheap never learns it (every measurement looks
/// compute-bound); several starts, the best kept, avoid that local minimum.
/// Each pair scales the intra-node and the inter-node coefficients: a ring across nodes may
/// be far slower than one inside a node, or the other way round.
pub const COMM_STARTS: [(f64, f64); 6] = [
    (1.0, 1.0),
    (4.0, 4.0),
    (16.0, 16.0),
    (0.25, 0.25),
    (1.0, 16.0),
    (16.0, 1.0),
];
/// Per coefficient (by index), its size in prior units below which a move is measured against
/// this instead (a fixed cost, a latency or a per-sequence cost may be 0); 0 for the scales,
/// which are never 0.
pub const FLOOR: [f64; COEFFICIENTS] = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0];

/// The ridge's cost of coefficient `k` at `v` against its target `a`: for a scale (never 0)
/// the squared log ratio, `ln(v/a)²` (a move by a factor costs the same either way, and a
/// well-measured 10x costs 5.3, not 81); for a cost that may be 0 (fixed, latencies, per
/// sharded sequence) `ln(1 + |v − a|/d)²`, `d` the larger of `a` and its floor (in the
/// window's units, `unit`): the same log growth, from 0 too.
fn ridge_cost(k: usize, v: f64, a: f64, unit: f64) -> f64 {
    if FLOOR[k] > 0.0 {
        let d = libm::fabs(a).max(FLOOR[k] * unit);
        let r = libm::log1p(libm::fabs(v - a) / d);
        r * r
    } else if v > 0.0 && a > 0.0 {
        let r = libm::log(v / a);
        r * r
    } else {
        f64::INFINITY
    }
}

/// The ridge row of coefficient `k` now at `v` with target `a`, as `(target, weight)` of the
/// linear row `c_k = target`: [`ridge_cost`] linearised at `v` (for a scale,
/// `ln c ≈ ln v + (c − v)/v`; for a cost that may be 0, the quadratic through `a` that equals
/// the cost at `v`).
fn ridge_row(k: usize, v: f64, a: f64, unit: f64) -> (f64, f64) {
    if FLOOR[k] > 0.0 {
        let d = libm::fabs(a).max(FLOOR[k] * unit);
        let x = libm::fabs(v - a) / d;
        let w = if x > 1e-9 {
            let r = libm::log1p(x);
            r * r / (x * x)
        } else {
            1.0
        };
        (a, w / (d * d))
    } else if v > 0.0 && a > 0.0 {
        (v * (1.0 + libm::log(a / v)), 1.0 / (v * v))
    } else {
        (a, 1.0)
    }
}

/// The ridge weight, relative to the data's, that holds a pinned coefficient at its target.
const PIN: f64 = 1e6;
/// The last iterations, which drop outliers instead of down-weighting them.
const TRIMMED: usize = 3;
/// The widest a scale may move from the prior (either way): wide enough for a prior 100x off
/// the machine (a GPU preset against a CPU, or the reverse).
pub const MAX_SCALE: f64 = 1024.0;
/// Coefficients solved by least squares (all but the overlap).
pub const LINEAR: usize = COEFFICIENTS - 1;
/// The coefficient index of each least-squares unknown.
pub const LIN: [usize; LINEAR] = [0, 1, 2, 3, 4, 5, 6, 8, 9, 10];
/// The most [`Coef::LastMicroBatch`] may reach, in its units: about 16 s per step (a whole
/// model's gradients reduced across nodes in one micro-batch).
pub const MAX_LAST: f64 = 16.0 * MAX_SCALE;

/// Coefficients of a fit: the scales and the overlap fraction (0 or 1) ([`Coef`]).
pub type Coefs = [f64; COEFFICIENTS];

/// The communication of `row` under `c`: ring latencies and traffic inside and across nodes.
pub(crate) fn comm(c: &Coefs, row: &Row) -> f64 {
    let x = &row.x;
    c[3] * x[LAT_INTRA] + c[4] * x[BW_INTRA] + c[5] * x[LAT_INTER] + c[6] * x[BW_INTER]
}

/// The compute of `row` under `c` that hides its communication: the attention of its whole
/// sequences (with their cost per call), and with the overlap fraction its shards' attention.
pub(crate) fn window(c: &Coefs, row: &Row) -> f64 {
    let x = &row.x;
    let phi = c[Coef::Overlap as usize];
    c[2] * (x[A_LOCAL] + phi * x[A_SHARDED]) + c[Coef::LocalSequence as usize] * x[LOCALS]
}

/// The rank time of `row` under `c`, and whether the communication side of the maximum is
/// the larger.
pub fn predict(c: &Coefs, row: &Row) -> (f64, bool) {
    let x = &row.x;
    let phi = c[Coef::Overlap as usize];
    let comm = comm(c, row);
    let window = window(c, row);
    let after = c[2] * (1.0 - phi) * x[A_SHARDED];
    let comm_side = comm > window;
    let t = c[0] * x[FIXED]
        + c[1] * x[GEMM]
        + comm.max(window)
        + after
        + c[8] * x[SEQS]
        + c[9] * x[LAST];
    (t, comm_side)
}

/// The linear terms of `row` on the side of the maximum given by `comm_side`.
pub(crate) fn terms(row: &Row, phi: f64, comm_side: bool) -> [f64; LINEAR] {
    let x = &row.x;
    if comm_side {
        [
            x[FIXED],
            x[GEMM],
            (1.0 - phi) * x[A_SHARDED],
            x[LAT_INTRA],
            x[BW_INTRA],
            x[LAT_INTER],
            x[BW_INTER],
            x[SEQS],
            x[LAST],
            0.0,
        ]
    } else {
        [
            x[FIXED],
            x[GEMM],
            x[A_LOCAL] + x[A_SHARDED],
            0.0,
            0.0,
            0.0,
            0.0,
            x[SEQS],
            x[LAST],
            x[LOCALS],
        ]
    }
}

/// `forgetting^age` by repeated multiplication (ages stay below the window size).
pub(crate) fn decay(forgetting: f64, age: u64) -> f64 {
    let mut w = 1.0;
    for _ in 0..age {
        w *= forgetting;
    }
    w
}

/// The Huber weight of `row` at prediction `pred`: 1 while its relative residual is within a
/// fifth of `outlier`, falling as `1/|r|` beyond (a straggler weighs almost nothing).
fn huber(row: &Row, pred: f64, outlier: f64) -> f64 {
    let k = outlier / 5.0;
    let r = if pred > 0.0 {
        libm::fabs(row.time / pred - 1.0)
    } else {
        f64::INFINITY
    };
    if r <= k { 1.0 } else { k / r }
}

/// Whether `row` is off the prediction `pred` by more than `outlier`.
fn is_outlier(row: &Row, pred: f64, outlier: f64) -> bool {
    pred.is_nan() || pred <= 0.0 || libm::fabs(row.time / pred - 1.0) > outlier
}

/// The factor a row's prediction is scaled by before it is judged a straggler: the median
/// over the valid rows of its micro-batch (`group`) of measured over predicted time under
/// `c`, when it has at least 3 of them (else 1). A GPU slower than its peers is a straggler;
/// a whole micro-batch off the model (a cost the model misses on a kind of micro-batch) is
/// not, and the fit learns from it.
pub(crate) fn peer_factor(c: &Coefs, group: &[Row]) -> f64 {
    let mut ratios = [0.0f64; MAX_CP as usize];
    let mut n = 0;
    for r in group.iter().filter(|r| r.fitted()) {
        let (p, _) = predict(c, r);
        if p > 0.0 && p.is_finite() && n < ratios.len() {
            ratios[n] = r.time / p;
            n += 1;
        }
    }
    if n < 3 {
        return 1.0;
    }
    let ratios = &mut ratios[..n];
    ratios.sort_unstable_by(f64::total_cmp);
    ratios[n / 2]
}

/// [`peer_factor`] of the group a walk over the window is in, computed once per group (rows
/// of a group come one after another).
pub(crate) struct Peers {
    group: *const Row,
    factor: f64,
}

impl Peers {
    /// A memo that has seen no group.
    pub(crate) fn new() -> Peers {
        Peers {
            group: core::ptr::null(),
            factor: 1.0,
        }
    }

    /// The factor of `group` under `c`.
    pub(crate) fn of(&mut self, c: &Coefs, group: &[Row]) -> f64 {
        if group.as_ptr() != self.group {
            self.group = group.as_ptr();
            self.factor = peer_factor(c, group);
        }
        self.factor
    }
}

impl RefitState {
    /// The prior's coefficients: every scale 1 (the fixed cost: the prior's over its unit),
    /// the overlap 0 or 1.
    pub fn prior_coefs(&self) -> Coefs {
        let mut c = [1.0; COEFFICIENTS];
        if !self.prior_has_fixed {
            c[Coef::Fixed as usize] = 0.0;
        }
        if !self.prior_has_seq {
            c[Coef::ShardedSequence as usize] = 0.0;
        }
        c[Coef::LastMicroBatch as usize] = 0.0;
        if !self.prior_has_local {
            c[Coef::LocalSequence as usize] = 0.0;
        }
        c[Coef::Overlap as usize] = match self.prior.overlap {
            Overlap::LocalAttention => 0.0,
            Overlap::AllAttention => 1.0,
        };
        c
    }

    /// The bits of the coefficients the fit leaves at the prior's 0: the cost per whole
    /// sequence when the prior has none (a varlen kernel takes every sequence in one call;
    /// where the executor calls it per sequence, `skrull.profile` measures the cost, and the
    /// refit then scales it; free, it would trade against the ring costs inside
    /// `max(comm, window)`), and the per-step cost inside the last micro-batch unless the
    /// configuration's synchronisation is `Sharded` (no feature measures it).
    pub fn held_at_prior(&self) -> u32 {
        let mut bits = 0;
        if !self.prior_has_local {
            bits |= 1 << Coef::LocalSequence as usize;
        }
        if self.cfg.sync != Synchronisation::Sharded {
            // No per-step cost inside the last micro-batch (the feature is 0 everywhere).
            bits |= 1 << Coef::LastMicroBatch as usize;
        }
        bits
    }

    /// `c` clamped to the valid range (the coefficients [`RefitState::held_at_prior`] holds
    /// at 0): scales within `MAX_SCALE` of the prior (latencies and
    /// the fixed cost may reach 0). A GEMM faster than the prior's at 100 % efficiency is
    /// not clamped: the prior's peak is then wrong (another machine's), and
    /// [`RefitState::model`] raises it instead, so the model stays valid.
    pub fn clamp(&self, c: &mut Coefs) {
        let lo = 1.0 / MAX_SCALE;
        let ranges = [
            (0.0, MAX_SCALE),
            (lo, MAX_SCALE),
            (lo, MAX_SCALE),
            (0.0, MAX_SCALE),
            (lo, MAX_SCALE),
            (0.0, MAX_SCALE),
            (lo, MAX_SCALE),
            (0.0, MAX_SCALE),
            (0.0, MAX_LAST),
            (0.0, MAX_SCALE),
        ];
        let held = self.held_at_prior();
        for (&k, (a, b)) in LIN.iter().zip(ranges) {
            let v = &mut c[k];
            *v = if held >> k & 1 == 1 {
                0.0
            } else if v.is_nan() {
                1.0
            } else {
                v.clamp(a, b)
            };
        }
    }

    /// The weighted rms relative error of `c` over the window and the measurements it judges
    /// stragglers. A straggler — a GPU off its micro-batch's peers by more than `outlier`
    /// (against its prediction times the peers' median of measured over predicted time,
    /// `peer_factor`; against its prediction alone when the micro-batch has fewer than 3
    /// GPUs measured) — counts with its residual clipped at `outlier`, so it weighs no more
    /// than any bad measurement; every other residual counts in full (within -1 and 10):
    /// a whole kind of micro-batch the model misses by 3x is a miss, not 3x stragglers.
    pub fn error(&self, rows: &[Row], c: &Coefs) -> (f64, u32) {
        self.error_on(rows, c, Subset::All)
    }

    /// The weighted sum of squared residuals of [`RefitState::error`] over the rows of
    /// `subset`, the sum of weights and the stragglers.
    pub fn error_sums(&self, rows: &[Row], c: &Coefs, subset: Subset) -> (f64, f64, u32) {
        let outlier = self.params.outlier;
        let (mut s, mut w_sum, mut dropped) = (0.0, 0.0, 0u32);
        let mut peers = Peers::new();
        for (age, row, group) in self.groups_of(rows, subset) {
            let w = decay(self.params.forgetting, age);
            let (pred, _) = predict(c, row);
            let peer = peers.of(c, group);
            let straggler = is_outlier(row, pred * peer, outlier);
            let r = if !(pred > 0.0 && pred.is_finite()) {
                outlier
            } else if straggler {
                (pred / row.time - 1.0).clamp(-outlier, outlier)
            } else {
                (pred / row.time - 1.0).clamp(-1.0, 10.0)
            };
            dropped += u32::from(straggler);
            s += w * r * r;
            w_sum += w;
        }
        (s, w_sum, dropped)
    }

    /// [`RefitState::error`] over the rows of `subset`.
    pub fn error_on(&self, rows: &[Row], c: &Coefs, subset: Subset) -> (f64, u32) {
        let (s, w_sum, dropped) = self.error_sums(rows, c, subset);
        let e = if w_sum > 0.0 {
            libm::sqrt(s / w_sum)
        } else {
            0.0
        };
        (e, dropped)
    }

    /// The weighted median (weights `forgetting^age`) over the window of `t / pred`, the
    /// measured time over `c`'s prediction: how far `c` is off as a whole, unmoved by a few
    /// stragglers. 1 when no row has a positive prediction. Exact and deterministic: a
    /// bisection over the bit patterns of the (positive) ratios, which order as integers.
    pub fn median_ratio(&self, rows: &[Row], c: &Coefs) -> f64 {
        let forgetting = self.params.forgetting;
        let ratio = |row: &Row| {
            let (pred, _) = predict(c, row);
            (pred > 0.0 && pred.is_finite()).then(|| row.time / pred)
        };
        let weight_upto = |bits: u64| -> f64 {
            self.window(rows)
                .filter(|(_, row)| ratio(row).is_some_and(|r| r.to_bits() <= bits))
                .map(|(age, _)| decay(forgetting, age))
                .sum()
        };
        let (mut lo, mut hi) = (0u64, f64::INFINITY.to_bits());
        let total = weight_upto(hi);
        if total <= 0.0 {
            return 1.0;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if weight_upto(mid) * 2.0 >= total {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        f64::from_bits(lo)
    }

    /// `c` with its scales times its [`RefitState::median_ratio`] (clamped) when that ratio
    /// is off 1 by more than `outlier`: then most of the window would be judged a straggler
    /// against `c`, and a fit from `c` (pulled toward it) would never move. Otherwise `c`.
    /// Returns the coefficients and the factor applied (1 when none).
    pub fn rescaled(&self, rows: &[Row], c: &Coefs) -> (Coefs, f64) {
        let s = self.median_ratio(rows, c);
        if libm::fabs(s - 1.0) <= self.params.outlier {
            return (*c, 1.0);
        }
        let mut out = *c;
        for k in LIN {
            out[k] *= s;
        }
        let s = s.clamp(1.0 / MAX_SCALE, MAX_SCALE);
        self.clamp(&mut out);
        (out, s)
    }

    /// The fit over the rows of `subset` for the overlap fraction `phi` from `start` with its
    /// communication coefficients inside and across nodes times `comm`, pulled toward `target` by the ridge in units
    /// of `unit` (the factor [`RefitState::rescaled`] applied to it: the pull is relative,
    /// like the data's error, so a uniformly scaled window gives uniformly scaled
    /// coefficients; see the [module docs](self)).
    #[allow(clippy::too_many_arguments)] // the fit's start, target, rule and rows, flat
    pub fn fit_overlap(
        &self,
        rows: &[Row],
        start: &Coefs,
        target: (&Coefs, f64),
        phi: f64,
        comm: (f64, f64),
        subset: Subset,
        pinned: u32,
    ) -> Coefs {
        let (prior, unit) = (*target.0, target.1);
        let pinned = pinned | self.held_at_prior();
        let mut c = *start;
        c[Coef::Overlap as usize] = phi;
        for v in &mut c[Coef::IntraLatency as usize..=Coef::IntraBandwidth as usize] {
            *v *= comm.0;
        }
        for v in &mut c[Coef::InterLatency as usize..=Coef::InterBandwidth as usize] {
            *v *= comm.1;
        }
        let forgetting = self.params.forgetting;
        let total: f64 = self
            .window_of(rows, subset)
            .map(|(a, _)| decay(forgetting, a))
            .sum();
        let lambda = self.params.ridge * total;
        let pull = |k: usize| {
            if pinned >> k & 1 == 1 {
                PIN * total
            } else {
                lambda
            }
        };
        for iteration in 0..ITERATIONS {
            let current = c;
            let mut peers = Peers::new();
            let data = self
                .groups_of(rows, subset)
                .filter_map(|(age, row, group)| {
                    let peer = peers.of(&current, group);
                    let w = self.weight(iteration, &current, age, row, peer)?;
                    let (_, comm_side) = predict(&current, row);
                    Some((terms(row, phi, comm_side), row.time, w))
                });
            let ridge = (0..LINEAR).map(|j| {
                let mut e = [0.0; LINEAR];
                e[j] = 1.0;
                let k = LIN[j];
                let (y, w) = ridge_row(k, current[k], prior[k], unit);
                (e, y, w * pull(k))
            });
            let Some(s) = least_squares::<LINEAR>(data.chain(ridge)) else {
                break;
            };
            // The least-squares solution is a Gauss-Newton step; halve it until the true
            // objective (with the maximum) falls, so every iteration descends.
            let objective = |c: &Coefs| {
                let mut f = 0.0;
                let mut peers = Peers::new();
                for (age, row, group) in self.groups_of(rows, subset) {
                    let peer = peers.of(&current, group);
                    if let Some(w) = self.weight(iteration, &current, age, row, peer) {
                        let r = predict(c, row).0 - row.time;
                        f += w * r * r;
                    }
                }
                for k in LIN {
                    f += pull(k) * ridge_cost(k, c[k], prior[k], unit);
                }
                f
            };
            let before = objective(&current);
            let mut step = 1.0;
            let mut moved = false;
            for _ in 0..HALVINGS {
                let mut next = current;
                for (j, &k) in LIN.iter().enumerate() {
                    next[k] = current[k] + step * (s[j] - current[k]);
                }
                self.clamp(&mut next);
                if objective(&next) < before {
                    c = next;
                    moved = true;
                    break;
                }
                step *= 0.5;
            }
            if !moved && iteration > 0 {
                break;
            }
        }
        c
    }

    /// The weight of `row` (of age `age`) in iteration `iteration` of a fit now at `current`:
    /// `forgetting^age / t²` times a Huber weight from the second iteration on; `None` for an
    /// outlier in the last [`TRIMMED`] iterations.
    pub(crate) fn weight(
        &self,
        iteration: usize,
        current: &Coefs,
        age: u64,
        row: &Row,
        peer: f64,
    ) -> Option<f64> {
        let outlier = self.params.outlier;
        let robust = if iteration == 0 {
            1.0
        } else {
            let (pred, _) = predict(current, row);
            let pred = pred * peer;
            if iteration + TRIMMED >= ITERATIONS && is_outlier(row, pred, outlier) {
                return None;
            }
            huber(row, pred, outlier)
        };
        Some(robust * decay(self.params.forgetting, age) / (row.time * row.time))
    }

    /// `c` applied to the prior: the cost model it describes.
    pub fn model(&self, c: &Coefs) -> CostModel {
        let p = &self.prior;
        let mut m = *p;
        let gemm = c[Coef::Gemm as usize];
        if gemm >= p.gemm_efficiency {
            m.gemm_efficiency = p.gemm_efficiency / gemm;
        } else {
            // Beyond 100 % efficiency the GEMMs run faster than the prior's peak: the peak
            // was wrong (the prior is another machine's), so it moves instead.
            m.gemm_efficiency = 1.0;
            m.peak_flops = p.peak_flops * (p.gemm_efficiency / gemm);
        }
        m.hbm_bandwidth = p.hbm_bandwidth / c[Coef::Gemm as usize];
        m.attention = p.attention.slowed(c[Coef::Attention as usize]);
        m.ring_step_latency_s = p.ring_step_latency_s * c[Coef::IntraLatency as usize];
        m.intra_node_bandwidth = p.intra_node_bandwidth / c[Coef::IntraBandwidth as usize];
        m.inter_node_ring_step_latency_s =
            p.inter_node_ring_step_latency_s * c[Coef::InterLatency as usize];
        m.inter_node_bandwidth = p.inter_node_bandwidth / c[Coef::InterBandwidth as usize];
        let fixed = c[Coef::Fixed as usize];
        if self.prior_has_fixed {
            m.kernel_launch_s = p.kernel_launch_s * fixed;
            m.micro_batch_extra_s = p.micro_batch_extra_s * fixed;
        } else {
            m.micro_batch_extra_s = fixed * self.fixed_unit;
        }
        m.overlap = if c[Coef::Overlap as usize] >= 0.5 {
            Overlap::AllAttention
        } else {
            Overlap::LocalAttention
        };
        m.sharded_sequence_s = c[Coef::ShardedSequence as usize] * self.seq_unit;
        m.local_sequence_s = c[Coef::LocalSequence as usize] * self.local_unit;
        m
    }

    /// [`RefitState::model`] with `iteration_fixed_s` the per-step cost measured outside the
    /// micro-batches (`outside`, seconds) plus the one `c` finds inside each DP rank's last
    /// micro-batch ([`Coef::LastMicroBatch`]).
    pub fn model_with_step(&self, c: &Coefs, outside: f64) -> CostModel {
        let mut m = self.model(c);
        m.iteration_fixed_s = outside + c[Coef::LastMicroBatch as usize] * LAST_UNIT_S;
        m
    }

    /// The best fit over the rows of `subset` (see the [module docs](self)), started at
    /// `anchor` (already rescaled to the window) and at the prior, pulled toward `anchor` by
    /// the ridge in units of `unit`; with its error on `subset` and the rows it drops.
    /// `anchor` itself is the fit to beat.
    pub fn best_fit(
        &self,
        rows: &[Row],
        anchor: &Coefs,
        unit: f64,
        subset: Subset,
    ) -> (Coefs, f64, u32) {
        self.best_fits(rows, anchor, unit, subset)[0]
    }

    /// [`RefitState::best_fit`], and the best fit that keeps `anchor`'s overlap rule.
    pub fn best_fits(
        &self,
        rows: &[Row],
        anchor: &Coefs,
        unit: f64,
        subset: Subset,
    ) -> [(Coefs, f64, u32); 2] {
        // `local-attention` to `all-attention` hides every ring's cost behind more compute:
        // not while a ring kind the plans can use was never measured.
        let hide_more_ok = self.unmeasured_kinds(rows, subset) == 0;
        let prior = self.prior_coefs();
        let from_prior = if self.anchor == prior {
            *anchor
        } else {
            self.rescaled(rows, &prior).0
        };
        let (e, d) = self.error_on(rows, anchor, subset);
        let mut best = (*anchor, e, d);
        let mut best_own = best;
        let own = anchor[Coef::Overlap as usize];
        for phi in [own, 1.0 - own] {
            if phi != own && (self.params.keep_overlap || (phi > own && !hide_more_ok)) {
                continue;
            }
            for start in [anchor, &from_prior] {
                for comm in COMM_STARTS {
                    let c = self.fit_overlap(rows, start, (anchor, unit), phi, comm, subset, 0);
                    let (e, dropped) = self.error_on(rows, &c, subset);
                    if e < best.1 {
                        best = (c, e, dropped);
                    }
                    if phi == own && e < best_own.1 {
                        best_own = (c, e, dropped);
                    }
                }
            }
        }
        [best, best_own]
    }
}

/// Bit `i` set when coefficient `i` of `c` differs from the prior's by more than 1 %.
pub(crate) fn moved(prior: &Coefs, c: &Coefs) -> u32 {
    let mut bits = 0;
    for (i, (&p, &v)) in prior.iter().zip(c).enumerate() {
        let far = if p == 0.0 {
            libm::fabs(v) > 0.01
        } else {
            libm::fabs(v / p - 1.0) > 0.01
        };
        if far {
            bits |= 1 << i;
        }
    }
    bits
}
