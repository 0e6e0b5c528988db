//! The fixed costs `skrull calibrate` fits from a profiler's samples beyond the compute,
//! attention, collective and memory fits ([`fits`](crate::fits)): the cost per sharded
//! sequence per micro-batch from `sharded` rows, and the cost per optimizer step from `step`
//! rows (`docs/profiling.md`). Both are straight lines through the core's [`least_squares`],
//! on relative error.

use skrull_core::model::TimeModel;
use skrull_core::model::fit::least_squares;
use skrull_core::{ModelShape, ShardPadding};

use crate::samples::{LocalSample, Samples, ShardedSample};

/// A line `t = intercept + slope·x` fitted to samples, with its rms relative error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFit {
    /// Seconds at `x = 0`.
    pub intercept: f64,
    /// Seconds per unit of `x`.
    pub slope: f64,
    /// Root-mean-square relative error over the samples.
    pub rms_relative_error: f64,
    /// Samples fitted.
    pub samples: usize,
}

/// The least-squares line through `(x, seconds)` on relative error (weights `1/t²`); `x` is
/// scaled to at most 1 for the normal equations. `None` with fewer than two distinct `x`.
fn line(points: &[(f64, f64)]) -> Option<LineFit> {
    let x_max = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let distinct = points.iter().any(|p| p.0 != points[0].0);
    if points.len() < 2 || !distinct || x_max.is_nan() || x_max <= 0.0 {
        return None;
    }
    let rows = points
        .iter()
        .map(|&(x, t)| ([1.0, x / x_max], t, 1.0 / (t * t)));
    let [a, b] = least_squares::<2>(rows)?;
    let slope = b / x_max;
    let sq: f64 = points
        .iter()
        .map(|&(x, t)| ((a + slope * x) / t - 1.0).powi(2))
        .sum();
    Some(LineFit {
        intercept: a,
        slope,
        rms_relative_error: (sq / points.len() as f64).sqrt(),
        samples: points.len(),
    })
}

/// The fixed cost per sharded sequence per micro-batch of the whole model: the slope of one
/// layer's sharded attention against the number of sharded sequences, times the layers. The
/// attention work the samples' sequences add is taken out first (each sample's time less the
/// cost model's attention of its shards, when its rows give the tokens), so the slope is the
/// executor's fixed work per sequence; a slope below 0 (noise) is 0.
///
/// # Errors
/// A message when the rows hold fewer than two distinct sequence counts.
pub fn fit_per_sequence(
    base: &skrull_core::CostModel,
    shape: &ModelShape,
    ring: u32,
    samples: &[ShardedSample],
) -> Result<(f64, LineFit), String> {
    let layers = f64::from(shape.layers.max(1));
    let points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| {
            let g = s.group.unwrap_or(ring).max(2);
            let tm = TimeModel::for_shape(base, shape, g, ShardPadding::None);
            let attention = s.tokens.map_or(0.0, |len| {
                f64::from(s.count) * tm.attention_shard(len) / layers
            });
            let t = (s.seconds - attention).max(s.seconds * 1e-3);
            (f64::from(s.count), t)
        })
        .collect();
    per_count(
        &points,
        layers,
        "sharded fit: needs at least 2 distinct sequence counts (sharded,COUNT,SECONDS)",
    )
}

/// The whole model's cost per counted item from one layer's `(count, seconds)` points: the
/// line's slope (0 when noise makes it negative) times the layers, with the fit; `err` when
/// the points hold fewer than two distinct counts.
fn per_count(points: &[(f64, f64)], layers: f64, err: &str) -> Result<(f64, LineFit), String> {
    let fit = line(points).ok_or(err)?;
    Ok((fit.slope.max(0.0) * layers, fit))
}

/// The cost per whole sequence per micro-batch of the whole model (the attention kernel's
/// cost per call, where the executor calls it per sequence): the slope of one layer's
/// attention of whole sequences against their number, times the layers. The attention work of
/// the rows' sequences is taken out first (the base model's kernel time), so the slope is the
/// work per call; a slope below 0 (noise) is 0.
///
/// # Errors
/// A message when the rows hold fewer than two distinct sequence counts.
pub fn fit_per_local_sequence(
    base: &skrull_core::CostModel,
    shape: &ModelShape,
    samples: &[LocalSample],
) -> Result<(f64, LineFit), String> {
    let layers = f64::from(shape.layers.max(1));
    let tm = TimeModel::for_shape(base, shape, 1, ShardPadding::None);
    let points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| {
            let attention = f64::from(s.count) * tm.attention(s.tokens, s.tokens) / layers;
            let t = (s.seconds - attention).max(s.seconds * 1e-3);
            (f64::from(s.count), t)
        })
        .collect();
    per_count(
        &points,
        layers,
        "local fit: needs at least 2 distinct sequence counts (local,COUNT,SECONDS,TOKENS)",
    )
}

/// The parameters the per-step cost is extrapolated to: every GEMM weight (the LM head once)
/// and the embedding.
pub fn parameters(shape: &ModelShape) -> f64 {
    skrull_core::model::time::gemm_weights(shape) + f64::from(shape.hidden) * f64::from(shape.vocab)
}

/// The fixed cost per optimizer step of the whole model: the line of `step` rows (one
/// optimizer step over a number of parameters) at [`parameters`], 0 when that is below 0;
/// with one parameter count only, the mean time scaled to the model's parameters.
///
/// # Errors
/// A message when there are no rows.
pub fn fit_step(shape: &ModelShape, samples: &Samples) -> Result<(f64, LineFit), String> {
    let rows = &samples.step;
    let fit = match line(rows) {
        Some(f) => f,
        None if !rows.is_empty() => {
            let n = rows.len() as f64;
            let per = rows.iter().map(|&(p, t)| t / p).sum::<f64>() / n;
            LineFit {
                intercept: 0.0,
                slope: per,
                rms_relative_error: 0.0,
                samples: rows.len(),
            }
        }
        None => return Err("step fit: no step,PARAMETERS,SECONDS rows".into()),
    };
    Ok((
        (fit.intercept + fit.slope * parameters(shape)).max(0.0),
        fit,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::CostModel;

    #[test]
    fn a_line_through_exact_points_is_recovered() {
        let f = line(&[(1.0, 0.011), (2.0, 0.014), (4.0, 0.020), (8.0, 0.032)]).unwrap();
        assert!((f.intercept - 0.008).abs() < 1e-12 && (f.slope - 0.003).abs() < 1e-12);
        assert!(f.rms_relative_error < 1e-12);
        assert!(line(&[(1.0, 0.01), (1.0, 0.02)]).is_none());
    }

    #[test]
    fn the_per_sequence_cost_is_the_slope_times_the_layers() {
        let shape = ModelShape::QWEN2_5_0_5B;
        let base = CostModel::h100(&shape);
        // 3 ms per sequence per layer beyond the attention of its shards, 5 ms fixed.
        let tm = TimeModel::for_shape(&base, &shape, 2, ShardPadding::None);
        let layers = f64::from(shape.layers);
        let rows: Vec<ShardedSample> = [1u32, 2, 4, 8]
            .iter()
            .map(|&count| ShardedSample {
                count,
                seconds: 0.005 + f64::from(count) * (0.003 + tm.attention_shard(256) / layers),
                tokens: Some(256),
                group: None,
            })
            .collect();
        let (per_seq, fit) = fit_per_sequence(&base, &shape, 2, &rows).unwrap();
        assert!((per_seq - 0.003 * layers).abs() < 1e-9, "{per_seq} {fit:?}");
        assert!(fit_per_sequence(&base, &shape, 2, &rows[..1]).is_err());
    }

    #[test]
    fn the_per_whole_sequence_cost_is_the_slope_times_the_layers() {
        let shape = ModelShape::QWEN2_5_0_5B;
        let base = CostModel::h100(&shape);
        // 0.2 ms per call per layer beyond the kernel time of its sequence, 1 ms fixed.
        let tm = TimeModel::for_shape(&base, &shape, 1, ShardPadding::None);
        let layers = f64::from(shape.layers);
        let rows: Vec<LocalSample> = [1u32, 4, 16, 64]
            .iter()
            .map(|&count| LocalSample {
                count,
                seconds: 0.001 + f64::from(count) * (0.0002 + tm.attention(16, 16) / layers),
                tokens: 16,
            })
            .collect();
        let (per_seq, fit) = fit_per_local_sequence(&base, &shape, &rows).unwrap();
        assert!(
            (per_seq - 0.0002 * layers).abs() < 1e-9,
            "{per_seq} {fit:?}"
        );
        assert!(fit_per_local_sequence(&base, &shape, &rows[..1]).is_err());
    }

    #[test]
    fn the_step_cost_is_the_line_at_the_models_parameters() {
        let shape = ModelShape::QWEN2_5_0_5B;
        let samples = Samples {
            step: vec![(1e6, 0.002 + 1e6 * 1e-9), (4e6, 0.002 + 4e6 * 1e-9)],
            ..Samples::default()
        };
        let (t, _) = fit_step(&shape, &samples).unwrap();
        assert!(
            (t - (0.002 + parameters(&shape) * 1e-9)).abs() < 1e-9,
            "{t}"
        );
        assert!(fit_step(&shape, &Samples::default()).is_err());
        let one = Samples {
            step: vec![(1e6, 0.003)],
            ..Samples::default()
        };
        let (t, _) = fit_step(&shape, &one).unwrap();
        assert!((t - 0.003 * parameters(&shape) / 1e6).abs() < 1e-12);
    }
}
