//! The "measured" side of the online refit, for the simulator, the tests and the fuzz
//! targets: the per-GPU times a plan takes under a truth model, laid out as
//! [`RefitState::observe`](skrull_core::model::refit::RefitState::observe) reads them, and
//! seeded measurement noise (log-normal jitter, stragglers).

use skrull_core::model::eval::EvalError;
use skrull_core::{Config, Placement};

use crate::eval::OwnedEval;
use crate::sample::{Rng, standard_normal};

/// The time of every (micro-batch, DP rank, CP rank) of `placements` of `lengths` under
/// `cfg`'s cost model (the truth), laid out `[micro-batch][dp][cp]`, and the micro-batch
/// count. A (micro-batch, DP rank) that holds no sequence reads NaN (not measured).
///
/// # Errors
/// Whatever the evaluator returns.
pub fn rank_times(
    eval: &mut OwnedEval,
    cfg: &Config,
    lengths: &[u32],
    placements: &[Placement],
) -> Result<(Vec<f64>, u32), EvalError> {
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    let e = eval.evaluate(cfg, lengths, placements)?;
    let n_mb = e
        .micro_batches
        .iter()
        .map(|m| m.index + 1)
        .max()
        .unwrap_or(0);
    let mut times = vec![f64::NAN; n_mb as usize * dp * cp];
    for (g, mb) in e.micro_batches.iter().enumerate() {
        if mb.sequences == 0 {
            continue;
        }
        let base = (mb.index as usize * dp + mb.dp_rank as usize) * cp;
        for (r, slot) in e.ranks_of(g).iter().enumerate() {
            times[base + r] = slot.time;
        }
    }
    Ok((times, n_mb))
}

/// Multiplies every finite time by `exp(sigma·z)`, `z ~ N(0, 1)` (log-normal noise), and with
/// probability `1/straggler_every` per (micro-batch, DP rank) makes one of its GPUs
/// `straggler` times slower (0: no stragglers). Returns the stragglers made.
pub fn perturb(
    times: &mut [f64],
    cp: usize,
    rng: &mut Rng,
    sigma: f64,
    straggler_every: u64,
    straggler: f64,
) -> u32 {
    let mut made = 0;
    for group in times.chunks_mut(cp.max(1)) {
        if group.iter().all(|t| !t.is_finite()) {
            continue;
        }
        for t in group.iter_mut() {
            *t *= libm::exp(sigma * standard_normal(rng));
        }
        if straggler_every > 0 && rng.below(straggler_every) == 0 {
            let r = rng.below(group.len() as u64) as usize;
            group[r] *= straggler;
            made += 1;
        }
    }
    made
}
