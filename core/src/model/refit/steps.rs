//! The per-step cost (optimizer step, data loading, the training loop): measured, not fitted,
//! as each step's wall time ([`RefitState::observe_step_time`]) less what its measured
//! micro-batches explain — composed as the evaluator composes them for the configuration's
//! synchronisation (`Config::sync`) — with the weighted median over the window's steps
//! ([`RefitState::iteration_estimate`]). It moves no plan (every plan of a batch pays it), so
//! it needs no trust region.

use crate::config::limits::MAX_CP;
use crate::config::options::Synchronisation;
use crate::model::refit::{RefitError, RefitState, Row};

impl RefitState {
    /// The measured critical path of one observed step's `block` (laid out as
    /// [`RefitState::observe`] reads its times), composed for the configuration's
    /// synchronisation: `CpGroup`, per DP rank the sum over its micro-batches of their
    /// slowest valid GPU, and the slowest DP rank's; `Sharded`, each CP rank's own clock
    /// through micro-batches no ring holds together, levelled at those a ring does; `EveryGpu`,
    /// the sum over micro-batches of the slowest GPU of the job.
    pub(crate) fn busy_time(&self, block: &[Row]) -> f64 {
        let (dp, cp) = (self.cfg.dp as usize, self.cfg.cp as usize);
        let per_mb = dp * cp;
        if per_mb == 0 {
            return 0.0;
        }
        let valid = |r: &&Row| r.used == 1;
        if self.cfg.sync == Synchronisation::EveryGpu {
            return block
                .chunks(per_mb)
                .map(|mb| {
                    mb.iter()
                        .filter(valid)
                        .map(|r| r.time)
                        .fold(0.0f64, f64::max)
                })
                .sum();
        }
        let mut slowest = 0.0f64;
        let mut clocks = [0.0f64; MAX_CP as usize];
        for d in 0..dp {
            let clocks = &mut clocks[..cp];
            clocks.fill(0.0);
            for mb in block.chunks(per_mb) {
                let ranks = mb.get(d * cp..(d + 1) * cp).unwrap_or(&[]);
                let most = ranks
                    .iter()
                    .filter(valid)
                    .map(|r| r.time)
                    .fold(0.0f64, f64::max);
                let ring = ranks.iter().any(|r| r.rings != 0);
                if self.cfg.sync == Synchronisation::Sharded && !ring {
                    for (c, r) in clocks.iter_mut().zip(ranks) {
                        if r.used == 1 {
                            *c += r.time;
                        }
                    }
                } else {
                    let ready = clocks.iter().copied().fold(0.0f64, f64::max);
                    clocks.fill(ready + most);
                }
            }
            slowest = slowest.max(clocks.iter().copied().fold(0.0f64, f64::max));
        }
        slowest
    }

    /// Records the measured wall time of the last observed step (forward, backward, the
    /// optimizer step and everything between, on the slowest GPU), seconds. The per-step cost
    /// is measured from it ([`RefitState::iteration_estimate`]); steps without one do not
    /// count. A later call for the same step replaces the time. A NaN, infinite, zero or
    /// negative time is ignored (the step keeps none): returns whether it was recorded.
    ///
    /// # Errors
    /// [`RefitError::Mismatch`] (`got` 0, `expected` 1) when no step was observed yet.
    pub fn observe_step_time(&mut self, seconds: f64) -> Result<bool, RefitError> {
        if self.steps == 0 {
            return Err(RefitError::Mismatch {
                got: 0,
                expected: 1,
            });
        }
        let slot = ((self.steps - 1) % u64::from(self.params.window_steps)) as usize;
        if !(seconds.is_finite() && seconds > 0.0) {
            self.step_time[slot] = 0.0;
            return Ok(false);
        }
        self.step_time[slot] = seconds;
        Ok(true)
    }

    /// The per-step cost measured over the window: the weighted median (weights
    /// `forgetting^age`) of `max(0, step time − busy time)` over the steps with a step time,
    /// and how many there were; `None` when there were none.
    pub fn iteration_estimate(&self) -> Option<(f64, u32)> {
        let window = u64::from(self.params.window_steps);
        let last = self.steps.saturating_sub(1);
        let steps = self.steps.min(window);
        // At most MAX_WINDOW samples: (overhead, weight), sorted by insertion.
        let mut samples = [(0.0f64, 0.0f64); crate::model::refit::MAX_WINDOW as usize];
        let mut n = 0usize;
        for k in 0..steps {
            let step = last - k;
            let slot = (step % window) as usize;
            if self.step_time[slot] > 0.0 {
                let over = (self.step_time[slot] - self.busy[slot]).max(0.0);
                let mut w = 1.0;
                for _ in 0..k {
                    w *= self.params.forgetting;
                }
                // Insertion sort by overhead (ties keep the newer step first).
                let mut i = n;
                while i > 0 && samples[i - 1].0 > over {
                    samples[i] = samples[i - 1];
                    i -= 1;
                }
                samples[i] = (over, w);
                n += 1;
            }
        }
        if n == 0 {
            return None;
        }
        let total: f64 = samples[..n].iter().map(|s| s.1).sum();
        let mut acc = 0.0;
        for &(v, w) in &samples[..n] {
            acc += w;
            if acc * 2.0 >= total {
                return Some((v, n as u32));
            }
        }
        Some((samples[n - 1].0, n as u32))
    }
}
