//! Calibration: least-squares fits of the cost model to measured samples (`skrull calibrate`
//! and the offline profiler), and the Skrull paper's measured collectives the defaults are
//! fitted to.

use core::fmt;

use crate::config::cost::CostModel;
use crate::config::options::ShardPadding;
use crate::config::shape::ModelShape;
use crate::model::time::TimeModel;

/// Skrull Table 5, `all_gather`: (size in MiB, latency in microseconds), the paper's measured
/// collectives on its 32 x H100 testbed. The defaults' ring latency and bandwidth are the
/// [`fit_collective`] of these points (see the tests).
pub const SKRULL_TABLE5_ALL_GATHER: [(f64, f64); 10] = [
    (2., 53.29),
    (4., 72.52),
    (8., 97.86),
    (16., 199.3),
    (32., 286.2),
    (64., 488.6),
    (128., 910.6),
    (256., 1758.4),
    (512., 3416.4),
    (1024., 6467.9),
];

// The Table 5 fit's results live with the presets they set ([`crate::config::cost`]); the
// tests here recompute them from the points above.
pub use crate::config::cost::{
    TABLE5_ALGORITHM_BANDWIDTH, TABLE5_COLLECTIVE_LATENCY_S, TABLE5_GROUP,
};

/// Why a fit failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FitError {
    /// Fewer samples than coefficients.
    TooFewSamples {
        /// Samples needed.
        needed: usize,
        /// Samples given.
        got: usize,
    },
    /// A sample is not finite or not positive.
    InvalidSample {
        /// Its index.
        index: usize,
    },
    /// The normal equations are singular (for example every sample has the same length).
    Singular,
    /// The best fit is not physical (a rate or scale not positive).
    NonPhysical {
        /// The coefficient.
        what: &'static str,
    },
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FitError::TooFewSamples { needed, got } => {
                write!(f, "the fit needs at least {needed} samples, got {got}")
            }
            FitError::InvalidSample { index } => {
                write!(f, "sample {index} is not a positive, finite measurement")
            }
            FitError::Singular => write!(
                f,
                "the samples do not determine the coefficients (use several different sizes)"
            ),
            FitError::NonPhysical { what } => {
                write!(f, "the best fit gives a non-positive {what}")
            }
        }
    }
}

impl core::error::Error for FitError {}

/// Weighted linear least squares with `P` coefficients: minimises `Σ w·(x·c − y)²` over the
/// rows `(x, y, w)` by solving the `P x P` normal equations with partially pivoted Gaussian
/// elimination on the stack. `None` when they are singular.
pub fn least_squares<const P: usize>(
    rows: impl IntoIterator<Item = ([f64; P], f64, f64)>,
) -> Option<[f64; P]> {
    let mut a = [[0.0f64; P]; P];
    let mut b = [0.0f64; P];
    for (x, y, w) in rows {
        for i in 0..P {
            for j in 0..P {
                a[i][j] += w * x[i] * x[j];
            }
            b[i] += w * x[i] * y;
        }
    }
    // Scale for the singularity test: the largest diagonal entry.
    let scale = (0..P).map(|i| libm::fabs(a[i][i])).fold(0.0, f64::max);
    if scale == 0.0 {
        return None;
    }
    for col in 0..P {
        let mut pivot = col;
        for row in col + 1..P {
            if libm::fabs(a[row][col]) > libm::fabs(a[pivot][col]) {
                pivot = row;
            }
        }
        if libm::fabs(a[pivot][col]) <= 1e-12 * scale {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..P {
            let k = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row][col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= k * p;
            }
            b[row] -= k * b[col];
        }
    }
    let mut c = [0.0f64; P];
    for i in (0..P).rev() {
        let mut s = b[i];
        for j in i + 1..P {
            s -= a[i][j] * c[j];
        }
        c[i] = s / a[i][i];
    }
    c.iter().all(|v| v.is_finite()).then_some(c)
}

/// The result of [`fit_collective`]: `t = latency + size / algorithm_bandwidth`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveFit {
    /// Latency of one collective, seconds.
    pub latency_s: f64,
    /// Collective size over time for large messages, bytes/s.
    pub algorithm_bandwidth: f64,
    /// Root-mean-square relative error of the fit over the samples.
    pub rms_relative_error: f64,
}

impl CollectiveFit {
    /// Writes the fit into `cost` as ring parameters, for collectives measured on a group of
    /// `group` GPUs in one node: a ring collective takes `group − 1` steps, and each GPU
    /// receives `(group − 1)/group` of the collective's size.
    pub fn apply(&self, cost: &mut CostModel, group: u32) {
        let g = f64::from(group.max(2));
        cost.ring_step_latency_s = self.latency_s / (g - 1.0);
        cost.intra_node_bandwidth = self.algorithm_bandwidth * (g - 1.0) / g;
    }
}

fn check_samples(samples: impl Iterator<Item = (f64, f64)>) -> Result<usize, FitError> {
    let mut n = 0;
    for (index, (x, t)) in samples.enumerate() {
        if !(x.is_finite() && x > 0.0 && t.is_finite() && t > 0.0) {
            return Err(FitError::InvalidSample { index });
        }
        n += 1;
    }
    Ok(n)
}

fn rms_relative(residuals: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut s, mut n) = (0.0, 0usize);
    for (pred, meas) in residuals {
        let r = (pred - meas) / meas;
        s += r * r;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        libm::sqrt(s / n as f64)
    }
}

/// Fits `t = latency + bytes / bandwidth` to measured collectives `(bytes, seconds)` by
/// least squares on relative error (weights `1/t²`, so small messages, where the latency
/// lives, count as much as large ones).
///
/// # Errors
/// [`FitError`] for fewer than two samples, a bad sample, sizes that are all equal, or a
/// non-positive latency or bandwidth.
pub fn fit_collective(samples: &[(f64, f64)]) -> Result<CollectiveFit, FitError> {
    let n = check_samples(samples.iter().copied())?;
    if n < 2 {
        return Err(FitError::TooFewSamples { needed: 2, got: n });
    }
    let c = least_squares(
        samples
            .iter()
            .map(|&(bytes, t)| ([1.0, bytes], t, 1.0 / (t * t))),
    )
    .ok_or(FitError::Singular)?;
    if c[1] <= 0.0 {
        return Err(FitError::NonPhysical { what: "bandwidth" });
    }
    if c[0] < 0.0 {
        return Err(FitError::NonPhysical { what: "latency" });
    }
    let rms = rms_relative(samples.iter().map(|&(b, t)| (c[0] + c[1] * b, t)));
    Ok(CollectiveFit {
        latency_s: c[0],
        algorithm_bandwidth: 1.0 / c[1],
        rms_relative_error: rms,
    })
}

/// The result of [`fit_compute`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeFit {
    /// Fitted fixed cost per micro-batch, seconds.
    pub fixed_s: f64,
    /// Measured GEMM time over the prior model's (the new model's GEMMs are this much slower).
    pub gemm_scale: f64,
    /// Measured attention time over the prior model's.
    pub attention_scale: f64,
    /// Root-mean-square relative error of the fit over the samples.
    pub rms_relative_error: f64,
}

/// Fits the compute coefficients to measured `(length, seconds)` samples: each the time of
/// one forward + backward of one sequence of `length` tokens, whole on one GPU (the paper's
/// offline profiling). The model keeps its shape (roofline, tile padding, attention curve)
/// and fits three levels by least squares on relative error:
///
/// ```text
/// t(S) = fixed + gemm_scale·T_gemm(S) + attention_scale·T_attn(S, S)
/// ```
///
/// and returns `prior` with the GEMM rates divided by `gemm_scale`, the attention table
/// divided by `attention_scale`, and the fixed cost set to `fixed` (as kernel launch time;
/// `micro_batch_extra_s` becomes 0). A negative `fixed` is refitted as 0.
///
/// # Errors
/// [`FitError`] for fewer than three samples, a bad sample, too few distinct lengths, or a
/// non-positive scale.
pub fn fit_compute(
    prior: &CostModel,
    shape: &ModelShape,
    samples: &[(u32, f64)],
) -> Result<(CostModel, ComputeFit), FitError> {
    let n = check_samples(samples.iter().map(|&(s, t)| (f64::from(s), t)))?;
    if n < 3 {
        return Err(FitError::TooFewSamples { needed: 3, got: n });
    }
    let tm = TimeModel::for_shape(prior, shape, 1, ShardPadding::None);
    let terms = |s: u32| (tm.gemm(u64::from(s)), tm.attention_whole(s));
    let full = least_squares(samples.iter().map(|&(s, t)| {
        let (g, a) = terms(s);
        ([1.0, g, a], t, 1.0 / (t * t))
    }))
    .ok_or(FitError::Singular)?;
    let (fixed, gs, as_) = if full[0] >= 0.0 {
        (full[0], full[1], full[2])
    } else {
        let c = least_squares(samples.iter().map(|&(s, t)| {
            let (g, a) = terms(s);
            ([g, a], t, 1.0 / (t * t))
        }))
        .ok_or(FitError::Singular)?;
        (0.0, c[0], c[1])
    };
    if gs.is_nan() || gs <= 0.0 {
        return Err(FitError::NonPhysical { what: "GEMM scale" });
    }
    if as_.is_nan() || as_ <= 0.0 {
        return Err(FitError::NonPhysical {
            what: "attention scale",
        });
    }
    let rms = rms_relative(samples.iter().map(|&(s, t)| {
        let (g, a) = terms(s);
        (fixed + gs * g + as_ * a, t)
    }));
    let mut out = *prior;
    out.gemm_efficiency = prior.gemm_efficiency / gs;
    out.hbm_bandwidth = prior.hbm_bandwidth / gs;
    out.attention = prior.attention.slowed(as_);
    out.micro_batch_extra_s = 0.0;
    let launches = f64::from(shape.layers) * prior.kernels_per_layer;
    if launches > 0.0 {
        out.kernel_launch_s = fixed / launches;
    } else {
        out.micro_batch_extra_s = fixed;
    }
    Ok((
        out,
        ComputeFit {
            fixed_s: fixed,
            gemm_scale: gs,
            attention_scale: as_,
            rms_relative_error: rms,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        libm::fabs(a - b) <= rel * libm::fabs(b).max(1e-300)
    }

    #[test]
    fn least_squares_recovers_an_exact_line_and_plane() {
        let c = least_squares((1..6).map(|x| {
            let x = f64::from(x);
            ([1.0, x], 3.0 + 2.0 * x, 1.0)
        }))
        .unwrap();
        assert!(close(c[0], 3.0, 1e-12) && close(c[1], 2.0, 1e-12));
        let pts: Vec<_> = (0..20)
            .map(|i| {
                let (x, y) = (f64::from(i % 5), f64::from(i / 5));
                ([1.0, x, y], 1.0 - 0.5 * x + 4.0 * y, 1.0)
            })
            .collect();
        let c = least_squares(pts).unwrap();
        assert!(close(c[0], 1.0, 1e-9) && close(c[1], -0.5, 1e-9) && close(c[2], 4.0, 1e-9));
        assert_eq!(least_squares([([1.0, 1.0], 2.0, 1.0); 4]), None);
        assert_eq!(least_squares::<2>([]), None);
    }

    #[test]
    fn defaults_are_the_fit_of_skrull_table5() {
        let samples: Vec<(f64, f64)> = SKRULL_TABLE5_ALL_GATHER
            .iter()
            .map(|&(mib, us)| (mib * 1_048_576.0, us * 1e-6))
            .collect();
        let fit = fit_collective(&samples).unwrap();
        std::println!("{fit:?}");
        assert!(close(fit.latency_s, TABLE5_COLLECTIVE_LATENCY_S, 2e-3));
        assert!(close(
            fit.algorithm_bandwidth,
            TABLE5_ALGORITHM_BANDWIDTH,
            2e-3
        ));
        let mut c = CostModel::H100_QWEN2_5_7B;
        fit.apply(&mut c, TABLE5_GROUP);
        assert!(close(
            c.ring_step_latency_s,
            CostModel::H100_QWEN2_5_7B.ring_step_latency_s,
            2e-3
        ));
        assert!(close(
            c.intra_node_bandwidth,
            CostModel::H100_QWEN2_5_7B.intra_node_bandwidth,
            2e-3
        ));
        assert!(fit_collective(&samples[..1]).is_err());
        assert_eq!(
            fit_collective(&[(1.0, 1.0), (-1.0, 2.0)]),
            Err(FitError::InvalidSample { index: 1 })
        );
    }

    #[test]
    fn fit_compute_recovers_a_known_model() {
        let shape = ModelShape::QWEN2_5_7B;
        let prior = CostModel::h100(&shape);
        // "Measured" from a model with 1.3x slower GEMMs, 0.8x attention and 40 ms fixed.
        let mut truth = prior;
        truth.gemm_efficiency /= 1.3;
        truth.hbm_bandwidth /= 1.3;
        truth.attention = truth.attention.slowed(0.8);
        truth.micro_batch_extra_s = 0.04 - 28.0 * 120.0 * 5e-6;
        let t = TimeModel::for_shape(&truth, &shape, 1, ShardPadding::None);
        let samples: Vec<(u32, f64)> = [64u32, 512, 1000, 2048, 4096, 8192, 16384, 32768]
            .iter()
            .map(|&s| (s, t.alone_whole(s)))
            .collect();
        let (fitted, fit) = fit_compute(&prior, &shape, &samples).unwrap();
        assert!(close(fit.gemm_scale, 1.3, 1e-6), "{fit:?}");
        assert!(close(fit.attention_scale, 0.8, 1e-6), "{fit:?}");
        assert!(close(fit.fixed_s, 0.04, 1e-6), "{fit:?}");
        assert!(fit.rms_relative_error < 1e-9);
        let f = TimeModel::for_shape(&fitted, &shape, 1, ShardPadding::None);
        for &(s, want) in &samples {
            assert!(close(f.alone_whole(s), want, 1e-6));
        }
        assert_eq!(
            fit_compute(&prior, &shape, &samples[..2]),
            Err(FitError::TooFewSamples { needed: 3, got: 2 })
        );
        assert_eq!(
            fit_compute(&prior, &shape, &[(100, 1.0), (100, 1.0), (100, 1.0)]),
            Err(FitError::Singular)
        );
    }
}
