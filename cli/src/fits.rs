//! The fits `skrull calibrate` runs on a profiler's samples beyond the core's
//! [`fit_compute`](skrull_core::model::fit::fit_compute) and
//! [`fit_collective`](skrull_core::model::fit::fit_collective): the attention-throughput table
//! from packed attention timings, the compute fit over such a measured table, and peak memory
//! against tokens with the BucketSize a memory limit allows. All least squares go through the
//! core's [`least_squares`].

use std::collections::BTreeMap;

use skrull_core::config::MAX_BUCKET;
use skrull_core::config::cost::{ATTN_POINTS, AttentionTable, CostModel};
use skrull_core::model::TimeModel;
use skrull_core::model::fit::{ComputeFit, least_squares};
use skrull_core::{ModelShape, ShardPadding};

use crate::samples::{AttentionSample, MemoryMode, MemorySample};

/// What [`fit_attention`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionFit {
    /// Distinct (tile-padded) lengths measured.
    pub lengths: usize,
    /// Shortest and longest padded length measured.
    pub range: (u32, u32),
    /// Root-mean-square relative error of the table's prediction over the samples.
    pub rms_relative_error: f64,
}

fn padded(len: u32, tile: u32) -> u32 {
    let tile = u64::from(tile.max(1));
    (u64::from(len).div_ceil(tile) * tile).min(u64::from(u32::MAX)) as u32
}

/// Causal FLOPs of one layer's attention forward over a sample, as the time model counts them
/// (queries padded to the tile).
fn sample_flops(shape: &ModelShape, tile: u32, s: &AttentionSample) -> f64 {
    2.0 * f64::from(shape.hidden)
        * f64::from(padded(s.len, tile))
        * f64::from(s.len)
        * f64::from(s.count)
}

/// The attention table of `base` replaced by measured throughput: each sample is one layer's
/// causal attention forward + backward over `count` packed sequences of `len` tokens. With
/// `fwd = bwd = X` the time model charges `F·(1 + bwd_ratio)/X` for `F` forward FLOPs, so each
/// sample gives `X = F·(1 + bwd_ratio)/t` (forward and backward get the same throughput: the
/// samples time them together). Samples are averaged per padded length. Up to six lengths
/// become the table's points (followed by doublings of the longest that keep its value, the
/// table's own clamping); more are resampled at six points log-spaced over the measured
/// range, interpolating the measured curve linearly in `log2` length as the table does.
///
/// # Errors
/// A message when fewer than two distinct padded lengths were measured or a length is too
/// large to extend the table.
pub fn fit_attention(
    base: &CostModel,
    shape: &ModelShape,
    samples: &[AttentionSample],
) -> Result<(AttentionTable, AttentionFit), String> {
    let tile = base.attention_tile;
    let ratio = 1.0 + base.attention_bwd_ratio;
    // Mean seconds per forward FLOP at each padded length.
    let mut per: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
    for s in samples {
        let e = per.entry(padded(s.len, tile)).or_default();
        e.0 += s.seconds / sample_flops(shape, tile, s);
        e.1 += 1;
    }
    if per.len() < 2 {
        return Err(format!(
            "attention fit: needs at least 2 distinct lengths (after padding to the \
             {tile}-token tile), got {}",
            per.len()
        ));
    }
    let curve: Vec<(u32, f64)> = per
        .iter()
        .map(|(&q, &(sum, n))| (q, ratio / (sum / f64::from(n))))
        .collect();
    let (lo, hi) = (curve[0].0, curve[curve.len() - 1].0);
    let mut points = [(0u32, 0.0f64); ATTN_POINTS];
    if curve.len() <= ATTN_POINTS {
        for (i, p) in points.iter_mut().enumerate() {
            *p = match curve.get(i) {
                Some(&c) => c,
                None => {
                    let (q, x) = curve[curve.len() - 1];
                    let k = (i + 1 - curve.len()) as u32;
                    let q = q
                        .checked_mul(1u32 << k)
                        .ok_or("attention fit: lengths too large to extend the table")?;
                    (q, x)
                }
            };
        }
    } else {
        let (l0, l1) = (f64::from(lo).log2(), f64::from(hi).log2());
        let mut prev = 0u32;
        for (i, p) in points.iter_mut().enumerate() {
            let x = l0 + (l1 - l0) * i as f64 / (ATTN_POINTS - 1) as f64;
            let mut q = if i + 1 == ATTN_POINTS {
                hi
            } else {
                x.exp2().round() as u32
            };
            q = q.max(prev + 1).max(lo);
            prev = q;
            *p = (q, interpolate(&curve, q));
        }
    }
    let table = AttentionTable {
        seqlen: points.map(|p| p.0),
        fwd: points.map(|p| p.1),
        bwd: points.map(|p| p.1),
    };
    let mut sq = 0.0;
    for s in samples {
        let (fwd, bwd) = table.throughput(padded(s.len, tile));
        let f = sample_flops(shape, tile, s);
        let pred = f / fwd + base.attention_bwd_ratio * f / bwd;
        sq += ((pred - s.seconds) / s.seconds).powi(2);
    }
    Ok((
        table,
        AttentionFit {
            lengths: curve.len(),
            range: (lo, hi),
            rms_relative_error: (sq / samples.len() as f64).sqrt(),
        },
    ))
}

/// The measured curve at `q`: linear in `log2` length between its points, its end values
/// outside them.
fn interpolate(curve: &[(u32, f64)], q: u32) -> f64 {
    let first = curve[0];
    let last = curve[curve.len() - 1];
    if q <= first.0 {
        return first.1;
    }
    if q >= last.0 {
        return last.1;
    }
    let i = curve
        .iter()
        .position(|&(l, _)| l >= q)
        .unwrap_or(curve.len() - 1);
    let ((q0, x0), (q1, x1)) = (curve[i - 1], curve[i]);
    let w = (f64::from(q).log2() - f64::from(q0).log2())
        / (f64::from(q1).log2() - f64::from(q0).log2());
    x0 + (x1 - x0) * w
}

/// Fits the fixed cost, the GEMM speed and the level of a measured attention table jointly to
/// whole-model `(length, seconds)` samples and the attention samples the table came from, by
/// least squares on relative error:
///
/// ```text
/// whole model:  t(S) = fixed + gemm_scale·T_gemm(S) + attention_scale·T_attn(S, S)
/// attention:    t    = attention_scale·T_attn,layer(LENGTH) x COUNT
/// ```
///
/// The attention rows hold `attention_scale` near 1 (the table reproduces them), the
/// whole-model rows decide the rest; fitting them together keeps a noisy attention timing
/// from pushing the GEMM term negative, as subtracting it would. Returns `prior` with the GEMM
/// rates divided by `gemm_scale` (the roofline keeps its shape; when the efficiency would pass
/// 1 the excess moves into `peak_flops`), the table divided by `attention_scale` and the fixed
/// cost set as in [`fit_compute`](skrull_core::model::fit::fit_compute) (a negative `fixed`
/// is refitted as 0).
///
/// # Errors
/// A message when the samples do not determine the coefficients (fewer than two distinct
/// whole-model lengths) or a scale is not positive.
pub fn fit_compute_over(
    prior: &CostModel,
    shape: &ModelShape,
    samples: &[(u32, f64)],
    attention: &[AttentionSample],
) -> Result<(CostModel, ComputeFit), String> {
    let tm = TimeModel::for_shape(prior, shape, 1, ShardPadding::None);
    let layers = f64::from(shape.layers);
    // (gemm, attention, seconds) per row: whole-model rows, then attention rows.
    let mut rows: Vec<(f64, f64, f64)> = samples
        .iter()
        .map(|&(s, t)| (tm.gemm(u64::from(s)), tm.attention_whole(s), t))
        .collect();
    rows.extend(attention.iter().map(|a| {
        let per_layer = tm.attention(a.len, a.len) / layers;
        (0.0, per_layer * f64::from(a.count), a.seconds)
    }));
    let is_whole = |i: usize| i < samples.len();
    // Columns scaled to at most 1, so that the singularity test of the normal equations does
    // not mistake a small model's microseconds for zero.
    let g_ref = rows.iter().map(|r| r.0).fold(0.0, f64::max);
    let a_ref = rows.iter().map(|r| r.1).fold(0.0, f64::max);
    let singular = || {
        format!(
            "compute fit: {} whole-model samples do not determine the fixed cost and the GEMM \
             speed (use at least 2 different lengths)",
            samples.len()
        )
    };
    if !(g_ref > 0.0 && a_ref > 0.0) {
        return Err(singular());
    }
    let full = least_squares(rows.iter().enumerate().map(|(i, &(g, a, t))| {
        let one = if is_whole(i) { 1.0 } else { 0.0 };
        ([one, g / g_ref, a / a_ref], t, 1.0 / (t * t))
    }))
    .ok_or_else(singular)?;
    let (fixed, gs, as_) = if full[0] >= 0.0 {
        (full[0], full[1] / g_ref, full[2] / a_ref)
    } else {
        let c = least_squares(
            rows.iter()
                .map(|&(g, a, t)| ([g / g_ref, a / a_ref], t, 1.0 / (t * t))),
        )
        .ok_or_else(singular)?;
        (0.0, c[0] / g_ref, c[1] / a_ref)
    };
    if !(gs.is_finite() && gs > 0.0) {
        return Err(
            "compute fit: the best fit gives a non-positive GEMM scale (the attention timings \
             explain more than the whole-model ones: measure again, with more --repeats)"
                .into(),
        );
    }
    if !(as_.is_finite() && as_ > 0.0) {
        return Err("compute fit: the best fit gives a non-positive attention scale".into());
    }
    let sq: f64 = rows
        .iter()
        .enumerate()
        .filter(|&(i, _)| is_whole(i))
        .map(|(_, &(g, a, t))| ((fixed + gs * g + as_ * a - t) / t).powi(2))
        .sum();
    let mut out = *prior;
    let eff = prior.gemm_efficiency / gs;
    if eff <= 1.0 {
        out.gemm_efficiency = eff;
    } else {
        out.gemm_efficiency = 1.0;
        out.peak_flops = prior.peak_flops * eff;
    }
    out.hbm_bandwidth = prior.hbm_bandwidth / gs;
    out.attention = prior.attention.slowed(as_);
    out.micro_batch_extra_s = 0.0;
    let launches = layers * prior.kernels_per_layer;
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
            rms_relative_error: (sq / samples.len() as f64).sqrt(),
        },
    ))
}

/// `memory(T) = fixed_bytes + bytes_per_token·T`: peak memory of one GPU against the tokens
/// it holds in a micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryFit {
    /// With or without activation checkpointing.
    pub mode: MemoryMode,
    /// Bytes at zero tokens (model states and anything else that does not grow).
    pub fixed_bytes: f64,
    /// Bytes per token held.
    pub bytes_per_token: f64,
    /// Root-mean-square relative error of the fit over its samples.
    pub rms_relative_error: f64,
    /// Samples fitted.
    pub samples: usize,
}

impl MemoryFit {
    /// The BucketSize `limit_bytes` allows: the most tokens `T` with
    /// `fixed_bytes + bytes_per_token·T <= limit_bytes`, at most `MAX_BUCKET`, 0 when not
    /// even one token fits. Non-decreasing in `limit_bytes` (every step is monotone).
    pub fn bucket(&self, limit_bytes: f64) -> u32 {
        let t = ((limit_bytes - self.fixed_bytes) / self.bytes_per_token).floor();
        let mut c = if t.is_nan() || t < 1.0 {
            0
        } else if t >= f64::from(MAX_BUCKET) {
            MAX_BUCKET
        } else {
            t as u32
        };
        // The division may round up onto an integer: step back until the tokens really fit
        // (the memory at `c` tokens grows with `c`, so this stays monotone in the limit).
        while c > 0 && self.bytes_at(c) > limit_bytes {
            c -= 1;
        }
        c
    }

    /// The fitted memory at `tokens` tokens, bytes.
    pub fn bytes_at(&self, tokens: u32) -> f64 {
        self.fixed_bytes + self.bytes_per_token * f64::from(tokens)
    }
}

/// Fits `memory(T) = a + b·T` (least squares on relative error) to the samples of each mode
/// present, plain first.
///
/// # Errors
/// A message naming the mode whose samples have fewer than two distinct token counts or give
/// a non-positive slope.
pub fn fit_memory(samples: &[MemorySample]) -> Result<Vec<MemoryFit>, String> {
    let mut out = Vec::new();
    for mode in [MemoryMode::Plain, MemoryMode::Checkpoint] {
        let rows: Vec<&MemorySample> = samples.iter().filter(|s| s.mode == mode).collect();
        if rows.is_empty() {
            continue;
        }
        // Tokens scaled to at most 1 (see `fit_compute_over`).
        let t_ref = rows.iter().map(|s| f64::from(s.tokens)).fold(0.0, f64::max);
        let c = least_squares(rows.iter().map(|s| {
            (
                [1.0, f64::from(s.tokens) / t_ref],
                s.bytes,
                1.0 / (s.bytes * s.bytes),
            )
        }))
        .ok_or_else(|| {
            format!(
                "memory fit ({}): needs at least 2 different token counts",
                mode.name()
            )
        })?;
        let c = [c[0], c[1] / t_ref];
        if !(c[1].is_finite() && c[1] > 0.0) {
            return Err(format!(
                "memory fit ({}): memory does not grow with tokens (slope {:e} bytes/token)",
                mode.name(),
                c[1]
            ));
        }
        let sq: f64 = rows
            .iter()
            .map(|s| ((c[0] + c[1] * f64::from(s.tokens) - s.bytes) / s.bytes).powi(2))
            .sum();
        out.push(MemoryFit {
            mode,
            fixed_bytes: c[0],
            bytes_per_token: c[1],
            rms_relative_error: (sq / rows.len() as f64).sqrt(),
            samples: rows.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{QuickCheck, TestResult};

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    fn att(len: u32, count: u32, seconds: f64) -> AttentionSample {
        AttentionSample {
            len,
            count,
            seconds,
        }
    }

    #[test]
    fn attention_table_reproduces_measured_throughput() {
        let shape = ModelShape::QWEN2_5_0_5B;
        let base = CostModel::h100(&shape);
        // Throughput 1e12 at 128, 2e12 at 256, 4e12 at 512 (forward FLOPs per second, with
        // the backward's 2.5x counted in).
        let x = |q: u32| 1e12 * f64::from(q / 128);
        let t = |len: u32, count: u32| {
            let f = 2.0 * 896.0 * f64::from(len) * f64::from(len) * f64::from(count);
            f * 3.5 / x(len)
        };
        let samples = [
            att(128, 4, t(128, 4)),
            att(256, 2, t(256, 2)),
            att(512, 1, t(512, 1)),
            att(512, 1, t(512, 1) * 1.2),
            att(512, 1, t(512, 1) * 0.8),
        ];
        let (table, fit) = fit_attention(&base, &shape, &samples).unwrap();
        assert_eq!(table.seqlen, [128, 256, 512, 1024, 2048, 4096]);
        assert!(close(table.fwd[0], 1e12, 1e-12) && close(table.bwd[1], 2e12, 1e-12));
        // The 512 samples average their seconds per FLOP: (1.2 + 0.8) / 2 = 1.
        assert!(close(table.fwd[2], 4e12, 1e-12) && close(table.fwd[5], 4e12, 1e-12));
        assert_eq!((fit.lengths, fit.range), (3, (128, 512)));
        // Relative errors of the mean against 1.2x and 0.8x: -1/6 and +1/4.
        let rms = ((1.0 / 36.0 + 1.0 / 16.0) / 5.0f64).sqrt();
        assert!(close(fit.rms_relative_error, rms, 1e-9), "{fit:?}");
        let mut m = base;
        m.attention = table;
        assert_eq!(m.validate(), Ok(()));
        // Lengths pad to the tile: 100 and 128 are one length, too few for a table.
        let e = fit_attention(&base, &shape, &[att(100, 1, 1.0), att(128, 1, 1.0)]).unwrap_err();
        assert!(e.contains("at least 2 distinct lengths"), "{e}");
    }

    #[test]
    fn many_attention_lengths_are_resampled_on_the_measured_curve() {
        let shape = ModelShape::QWEN2_5_7B;
        let base = CostModel::h100(&shape);
        // Throughput linear in log2 length: exact under resampling.
        let x = |q: u32| 1e14 * f64::from(q).log2();
        let samples: Vec<AttentionSample> = (7..=15)
            .map(|k| {
                let len = 1u32 << k;
                let f = 2.0 * 3584.0 * f64::from(len) * f64::from(len);
                att(len, 1, f * 3.5 / x(len))
            })
            .collect();
        let (table, fit) = fit_attention(&base, &shape, &samples).unwrap();
        assert_eq!(table.seqlen[0], 128);
        assert_eq!(table.seqlen[5], 32768);
        assert!(table.seqlen.windows(2).all(|w| w[0] < w[1]));
        for (q, v) in table.seqlen.iter().zip(table.fwd) {
            assert!(close(v, x(*q), 1e-9), "{q}: {v}");
        }
        assert_eq!(fit.lengths, 9);
        assert!(fit.rms_relative_error < 1e-9, "{fit:?}");
    }

    /// One layer's attention over `count` packed sequences of `len` tokens under `t`.
    fn layer_attention(t: &TimeModel, layers: f64, len: u32, count: u32) -> AttentionSample {
        att(
            len,
            count,
            t.attention(len, len) / layers * f64::from(count),
        )
    }

    #[test]
    fn compute_fit_over_a_measured_table_recovers_a_known_model() {
        let shape = ModelShape::QWEN2_5_0_5B;
        let mut prior = CostModel::h100(&shape);
        prior.attention = prior.attention.slowed(3.0);
        let mut truth = prior;
        truth.gemm_efficiency /= 40.0;
        truth.hbm_bandwidth /= 40.0;
        truth.attention = truth.attention.slowed(1.1);
        truth.kernel_launch_s = 0.25 / (24.0 * truth.kernels_per_layer);
        let t = TimeModel::for_shape(&truth, &shape, 1, ShardPadding::None);
        let samples: Vec<(u32, f64)> = [256u32, 512, 1024, 2048]
            .iter()
            .map(|&s| (s, t.alone_whole(s)))
            .collect();
        let attention: Vec<AttentionSample> = [(256u32, 8u32), (512, 4), (2048, 1)]
            .iter()
            .map(|&(len, count)| layer_attention(&t, 24.0, len, count))
            .collect();
        let (fitted, fit) = fit_compute_over(&prior, &shape, &samples, &attention).unwrap();
        assert!(close(fit.gemm_scale, 40.0, 1e-6), "{fit:?}");
        assert!(close(fit.fixed_s, 0.25, 1e-6), "{fit:?}");
        assert!(close(fit.attention_scale, 1.1, 1e-6), "{fit:?}");
        assert!(fit.rms_relative_error < 1e-9);
        assert!(close(fitted.gemm_efficiency, truth.gemm_efficiency, 1e-6));
        assert!(close(fitted.attention.fwd[2], truth.attention.fwd[2], 1e-6));
        let e = fit_compute_over(&prior, &shape, &samples[..1], &attention).unwrap_err();
        assert!(e.contains("at least 2 different lengths"), "{e}");
    }

    #[test]
    fn inflated_attention_timings_lower_the_attention_level_not_the_gemm_term() {
        // Whole-model steps where attention is most of the time, and attention timings 1.5x
        // slower than the attention inside those steps (a noisy machine): subtracting them
        // would leave a negative GEMM term; the joint fit splits the difference instead.
        let shape = ModelShape::QWEN2_5_0_5B;
        let prior = CostModel::h100(&shape);
        let t = TimeModel::for_shape(&prior, &shape, 1, ShardPadding::None);
        let samples: Vec<(u32, f64)> = [8192u32, 16384, 32768]
            .iter()
            .map(|&s| (s, t.alone_whole(s)))
            .collect();
        let gemm_share = t.gemm(32768) / t.alone_whole(32768);
        assert!(gemm_share < 0.5, "{gemm_share}");
        let attention: Vec<AttentionSample> = [8192u32, 16384, 32768]
            .iter()
            .map(|&len| {
                let a = layer_attention(&t, 24.0, len, 1);
                att(len, 1, a.seconds * 1.5)
            })
            .collect();
        let (_, fit) = fit_compute_over(&prior, &shape, &samples, &attention).unwrap();
        assert!(fit.gemm_scale > 0.0, "{fit:?}");
        assert!(
            fit.attention_scale > 1.0 && fit.attention_scale < 1.5,
            "{fit:?}"
        );
    }

    #[test]
    fn compute_fit_moves_efficiency_above_one_into_the_peak() {
        let shape = ModelShape::QWEN2_5_7B;
        let prior = CostModel::h100(&shape);
        // A GPU 4x faster than the prior's peak: the fitted efficiency would be 1.64.
        let mut truth = prior;
        truth.peak_flops *= 4.0;
        truth.hbm_bandwidth *= 4.0;
        let t = TimeModel::for_shape(&truth, &shape, 1, ShardPadding::None);
        let samples: Vec<(u32, f64)> = [4096u32, 8192, 16384]
            .iter()
            .map(|&s| (s, t.alone_whole(s)))
            .collect();
        let (f, fit) = fit_compute_over(&prior, &shape, &samples, &[]).unwrap();
        assert!(close(fit.gemm_scale, 0.25, 1e-6), "{fit:?}");
        assert_eq!(f.gemm_efficiency, 1.0);
        assert!(close(f.peak_flops, 4.0 * 0.41 * prior.peak_flops, 1e-6));
        assert_eq!(f.validate(), Ok(()));
        let tf = TimeModel::for_shape(&f, &shape, 1, ShardPadding::None);
        for &(s, want) in &samples {
            assert!(close(tf.alone_whole(s), want, 1e-6));
        }
    }

    fn mem(tokens: u32, bytes: f64, mode: MemoryMode) -> MemorySample {
        MemorySample {
            tokens,
            bytes,
            mode,
        }
    }

    #[test]
    fn memory_fit_recovers_a_line_per_mode_and_its_bucket() {
        let line = |a: f64, b: f64, mode| {
            [512u32, 1024, 4096]
                .iter()
                .map(move |&t| mem(t, a + b * f64::from(t), mode))
        };
        let samples: Vec<MemorySample> = line(8e9, 2e6, MemoryMode::Checkpoint)
            .chain(line(8e9, 5e6, MemoryMode::Plain))
            .collect();
        let fits = fit_memory(&samples).unwrap();
        assert_eq!(fits.len(), 2);
        assert_eq!(fits[0].mode, MemoryMode::Plain);
        assert!(close(fits[0].fixed_bytes, 8e9, 1e-9) && close(fits[0].bytes_per_token, 5e6, 1e-9));
        assert!(close(fits[1].bytes_per_token, 2e6, 1e-9) && fits[1].samples == 3);
        // 80 GB: (80e9 - 8e9) / 5e6 = 14,400 tokens plain, 36,000 checkpointed.
        assert_eq!(fits[0].bucket(80e9 + 1.0), 14_400);
        assert_eq!(fits[1].bucket(80e9 + 1.0), 36_000);
        assert_eq!(fits[0].bucket(8e9), 0);
        assert_eq!(fits[0].bucket(1e30), MAX_BUCKET);
        let e = fit_memory(&[mem(512, 1e9, MemoryMode::Plain)]).unwrap_err();
        assert!(e.contains("2 different token counts"), "{e}");
        let e = fit_memory(&[
            mem(512, 2e9, MemoryMode::Checkpoint),
            mem(1024, 1e9, MemoryMode::Checkpoint),
        ])
        .unwrap_err();
        assert!(
            e.contains("checkpoint") && e.contains("does not grow"),
            "{e}"
        );
    }

    #[test]
    fn bucket_is_monotone_in_the_memory_limit() {
        fn prop(a: u32, b: u16, l1: u64, l2: u64) -> TestResult {
            let fit = MemoryFit {
                mode: MemoryMode::Plain,
                fixed_bytes: f64::from(a) * 1e3,
                bytes_per_token: f64::from(b) + 0.5,
                rms_relative_error: 0.0,
                samples: 2,
            };
            let (lo, hi) = (l1.min(l2) as f64, l1.max(l2) as f64);
            let (c_lo, c_hi) = (fit.bucket(lo), fit.bucket(hi));
            let fits = |c: u32, l: f64| c == 0 || fit.bytes_at(c) <= l;
            TestResult::from_bool(c_lo <= c_hi && fits(c_lo, lo) && fits(c_hi, hi))
        }
        QuickCheck::new().quickcheck(prop as fn(u32, u16, u64, u64) -> TestResult);
    }
}
