//! [`RefitState::solve`]: what the refit adopts of its fit. A refit must never make a step
//! worse than the model in use would, so a fit is adopted only when
//!
//! 1. its error on the window without the trust region is at most `max_error` (else the
//!    model cannot describe these times: [`Verdict::HighError`]);
//! 2. fitted on the rows not held out and moved at most `trust` times either way from the
//!    model in use per coefficient ([`RefitState::trust_limit`]; a uniform factor over every
//!    coefficient, which changes no plan, is free), it explains the held-out micro-batches
//!    better than the model in use ([`Verdict::NotBetter`] otherwise);
//! 3. and better than the model in use times the window's uniform factor
//!    ([`Verdict::ScaleOnly`] otherwise: it found a scale, not a model).
//!
//! Otherwise the model in use is returned and the report says why. The per-step cost outside
//! the micro-batches is measured, not fitted ([`steps`](crate::model::refit::steps)), and
//! always applied; the returned model's `iteration_fixed_s` adds to it the coefficient's
//! per-step cost inside each DP rank's last micro-batch ([`Coef::LastMicroBatch`]).

use crate::model::refit::features::Subset;
use crate::model::refit::solve::{Coefs, FLOOR, LIN, MAX_SCALE, moved};
use crate::model::refit::{Coef, Refit, RefitError, RefitReport, RefitState, Row, Verdict};

/// The relative improvement of the window's error a fit must show to be adopted (and the
/// most its held-out error may grow).
pub const MARGIN: f64 = 0.01;
/// The absolute part of that margin (an error is a relative rms): exact data leave errors of
/// 1e-16 that rounding alone orders.
pub const MARGIN_ABS: f64 = 1e-9;

/// The bits of the ring-cost coefficients (latencies, times per byte) that `fit` takes
/// above `bounded` (the trust region held them back from going up).
fn costlier_comm(fit: &Coefs, bounded: &Coefs) -> u32 {
    let mut bits = 0;
    for k in [
        Coef::IntraLatency,
        Coef::IntraBandwidth,
        Coef::InterLatency,
        Coef::InterBandwidth,
    ] {
        let k = k as usize;
        if fit[k] > bounded[k] {
            bits |= 1 << k;
        }
    }
    bits
}

/// Whether error `a` is better than `b` by the margin.
fn better(a: f64, b: f64) -> bool {
    a < b * (1.0 - MARGIN) - MARGIN_ABS
}

/// Whether error `a` is no worse than `b` beyond the margin.
fn not_worse(a: f64, b: f64) -> bool {
    a <= b * (1.0 + MARGIN) + MARGIN_ABS
}

impl RefitState {
    /// Holds every scale of `c` within `trust` times either way of `in_use` times `scale`
    /// (the window's uniform factor, which changes no plan); a coefficient that may be 0 is
    /// measured from its floor (its prior's value) when it is below it. The per-step cost of
    /// [`Coef::LastMicroBatch`] is free, like the one outside the micro-batches. Returns the
    /// bits of the coefficients held back.
    pub fn trust_limit(&self, c: &mut Coefs, in_use: &Coefs, scale: f64) -> u32 {
        let rho = self.params.trust;
        let mut bits = 0;
        if rho.is_infinite() {
            return 0;
        }
        for k in LIN {
            if k == Coef::LastMicroBatch as usize {
                // A per-step cost moves no plan (every plan pays it once per step).
                continue;
            }
            let center = in_use[k] * scale;
            let hi = rho * center.max(FLOOR[k] * scale);
            let lo = center / rho;
            if c[k] > hi {
                c[k] = hi;
                bits |= 1 << k;
            } else if c[k] < lo {
                c[k] = lo;
                bits |= 1 << k;
            }
        }
        bits
    }

    /// Fits the window and decides what to adopt (see the [module docs](self)); the state is
    /// not changed. Deterministic: the same history gives the same bits on every platform.
    ///
    /// # Errors
    /// [`RefitError::Storage`] when `rows` is smaller than the window.
    pub fn fit(&self, rows: &[Row]) -> Result<Refit, RefitError> {
        Ok(self.decide(rows)?.0)
    }

    /// [`RefitState::fit`], and an adopted fit becomes the model in use: the next fit starts
    /// from it, is pulled toward it and is judged against it. A coefficient the window no
    /// longer identifies (say, the inter-node bandwidth once the plans stop crossing nodes)
    /// stays where the last adopted fit put it. Deterministic: the same sequence of calls
    /// gives the same bits.
    ///
    /// # Errors
    /// As [`RefitState::fit`].
    pub fn solve(&mut self, rows: &[Row]) -> Result<Refit, RefitError> {
        let (r, unit, outside) = self.decide(rows)?;
        if r.report.adopted {
            self.unit = unit;
        }
        self.anchor = r.report.coefficients;
        self.iteration_fixed = outside;
        Ok(r)
    }

    /// The fit within the rules: the best fit, refitted with the coefficients the trust
    /// region holds back at its bounds (a constraint of the fit, not a clip of its
    /// solution: a clipped member of a traded pair would leave its partner wrong), over the
    /// rows of `fit_on`; then that fit clipped to the trust region, and the model in use with
    /// only the held-back coefficients moved. Records `error_unlimited` and `limited` in
    /// `report`. `(scale, unit)`: the window's uniform factor and the ridge's unit.
    fn constrained_fit(
        &self,
        rows: &[Row],
        in_use: &Coefs,
        anchor: &Coefs,
        (scale, unit): (f64, f64),
        fit_on: Subset,
        report: &mut RefitReport,
    ) -> [Coefs; 3] {
        let [best, own] = self.best_fits(rows, anchor, unit, fit_on);
        let (mut fit, e, _) = best;
        report.error_unlimited = e;
        let mut bounded = fit;
        report.limited = self.trust_limit(&mut bounded, in_use, scale);
        let o = Coef::Overlap as usize;
        if fit[o] != in_use[o] {
            let up = costlier_comm(&fit, &bounded);
            if report.limited & !up == 0 {
                // A switch of the rule may take its ring costs up beyond the trust region
                // (the safe way: a costlier ring is planned less, and a ring cost held below
                // what the window asks, then hidden behind more compute by the new rule, is
                // how a switch doubled a step), never down.
                for k in LIN {
                    if up >> k & 1 == 1 {
                        bounded[k] = fit[k];
                    }
                }
                report.limited = 0;
            } else {
                // A switch of the overlap rule is a move no trust region bounds: not on top
                // of another coefficient the trust region still holds back. The best fit
                // under the rule in use goes on instead.
                fit = own.0;
                bounded = fit;
                report.limited = self.trust_limit(&mut bounded, in_use, scale);
            }
        }
        let phi = fit[o];
        // The model in use (times the window's uniform factor) with only the held-back
        // coefficients moved to their bounds: the smallest move the fit asks for.
        let mut partial = *in_use;
        for k in LIN {
            partial[k] *= scale;
            if report.limited >> k & 1 == 1 {
                partial[k] = bounded[k];
            }
        }
        partial[Coef::Overlap as usize] = phi;
        if report.limited != 0 {
            let mut target = *anchor;
            for k in LIN {
                if report.limited >> k & 1 == 1 {
                    target[k] = bounded[k];
                }
            }
            let pins = report.limited;
            fit = self.fit_overlap(
                rows,
                &bounded,
                (&target, unit),
                phi,
                (1.0, 1.0),
                fit_on,
                pins,
            );
            self.trust_limit(&mut fit, in_use, scale);
        }
        [fit, bounded, partial]
    }

    /// [`RefitState::fit`], the ridge's unit of the next fit when it is adopted, and the
    /// per-step cost measured outside the micro-batches.
    fn decide(&self, rows: &[Row]) -> Result<(Refit, f64, f64), RefitError> {
        let (mut r, unit) = self.decide_fit(rows)?;
        let outside = r.report.iteration_fixed_s;
        r.report.iteration_fixed_s = r.model.iteration_fixed_s;
        Ok((r, unit, outside))
    }

    /// [`RefitState::decide`] with the report's `iteration_fixed_s` the cost outside the
    /// micro-batches.
    fn decide_fit(&self, rows: &[Row]) -> Result<(Refit, f64), RefitError> {
        self.check_storage(rows.len())?;
        let prior = self.prior_coefs();
        let in_use = self.anchor;
        let (steps, skipped) = self.window_counts();
        let n = self.window(rows).count() as u32;
        let heldout_rows = self.window_of(rows, Subset::HeldOut).count() as u32;
        let (error_prior, _) = self.error(rows, &prior);
        let (error_in_use, dropped) = self.error(rows, &in_use);
        let (iteration, step_times) = match self.iteration_estimate() {
            Some((v, k)) => (v, k),
            None => (self.iteration_fixed, 0),
        };
        let mut report = RefitReport {
            kept_prior: in_use == prior,
            steps,
            rows: n,
            dropped,
            skipped,
            moved: moved(&prior, &in_use),
            error_prior,
            error_fit: error_in_use,
            coefficients: in_use,
            adopted: false,
            verdict: Verdict::NoData,
            limited: 0,
            raised: 0,
            scale: 1.0,
            error_heldout_in_use: 0.0,
            error_heldout_fit: 0.0,
            error_unlimited: error_in_use,
            heldout_rows,
            step_times,
            iteration_fixed_s: iteration,
        };
        let mut model = self.model_with_step(&in_use, iteration);
        if n == 0 {
            return Ok((Refit { model, report }, self.unit));
        }
        // Fit on the micro-batches not held out; judge on the held-out ones (with `holdout` 0,
        // everything is fitted and judged in-sample).
        let train = n - heldout_rows;
        let (fit_on, judge_on) = if self.params.holdout == 0 {
            (Subset::All, Subset::All)
        } else if heldout_rows > 0 && train > 0 {
            (Subset::Train, Subset::HeldOut)
        } else {
            // Nothing to judge a fit on yet (or nothing to fit): keep the model in use.
            report.verdict = Verdict::Unvalidated;
            return Ok((Refit { model, report }, self.unit));
        };
        let scale = self.median_ratio(rows, &in_use);
        report.scale = scale;
        let (anchor, s) = self.rescaled(rows, &in_use);
        let unit = (self.unit * s).clamp(1.0 / MAX_SCALE, MAX_SCALE);
        let candidates =
            self.constrained_fit(rows, &in_use, &anchor, (scale, unit), fit_on, &mut report);
        let mut scaled = in_use;
        for k in LIN {
            scaled[k] *= scale;
        }
        self.clamp(&mut scaled);
        let e_in_use = self.error_on(rows, &in_use, judge_on).0;
        // The whole window: a fit must explain it better than the model in use, and better
        // than the model in use times the window's uniform factor, without explaining the
        // held-out micro-batches worse. Of the three candidates (the fit within the trust
        // region, the unconstrained fit clipped to it, the model in use with only the held-back
        // coefficients moved) the one that explains the window best among those that qualify.
        let w_in_use = self.error(rows, &in_use).0;
        let w_scaled = self.error(rows, &scaled).0;
        let mut chosen: Option<(f64, f64, Coefs, u32)> = None;
        let mut first = None;
        for mut c in candidates {
            self.clamp(&mut c);
            let raised = self.pessimistic(rows, &mut c, Subset::All);
            let e = self.error_on(rows, &c, judge_on).0;
            let w = self.error(rows, &c).0;
            first.get_or_insert((e, w, c, raised));
            let ok =
                not_worse(e, e_in_use) && better(w, w_in_use) && self.model(&c).validate().is_ok();
            if ok && chosen.is_none_or(|(_, best, _, _)| w < best) {
                chosen = Some((e, w, c, raised));
            }
        }
        let (e_fit, w_fit, fit, raised) =
            chosen.or(first).unwrap_or((e_in_use, w_in_use, in_use, 0));
        report.raised = raised;
        report.error_heldout_in_use = e_in_use;
        report.error_heldout_fit = e_fit;
        report.verdict = if report.error_unlimited > self.params.max_error {
            Verdict::HighError
        } else if chosen.is_none() {
            Verdict::NotBetter
        } else if !better(w_fit, w_scaled) {
            Verdict::ScaleOnly
        } else {
            Verdict::Adopted
        };
        if report.verdict != Verdict::Adopted {
            // The model in use, its hidden ring costs at the most the window allows (which
            // changes no prediction of the window).
            let mut kept = in_use;
            report.raised = self.pessimistic(rows, &mut kept, Subset::All);
            if report.raised != 0 {
                model = self.model_with_step(&kept, iteration);
                report.coefficients = kept;
                report.kept_prior = kept == prior;
                report.moved = moved(&prior, &kept);
                report.error_fit = self.error(rows, &kept).0;
            }
            return Ok((Refit { model, report }, self.unit));
        }
        let (e, dropped) = self.error(rows, &fit);
        model = self.model_with_step(&fit, iteration);
        report.adopted = true;
        report.kept_prior = fit == prior;
        report.error_fit = e;
        report.dropped = dropped;
        report.coefficients = fit;
        report.moved = moved(&prior, &fit);
        Ok((Refit { model, report }, unit))
    }
}
