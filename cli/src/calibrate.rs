//! `skrull calibrate`: fit the cost model to measured samples, and the cost-model file format
//! that `--cost-model FILE` reads (JSON, every field optional: a missing field keeps the GPU
//! preset's value).

use std::fmt::Write;

use serde_json::Value;
use skrull_core::ModelShape;
use skrull_core::model::cost::{ATTN_POINTS, AttentionTable, CostModel, Overlap};
use skrull_core::model::fit::{CollectiveFit, ComputeFit, fit_collective, fit_compute};

use crate::args::{Flags, model_name, parse_model};

/// Usage text of `skrull calibrate`.
pub const USAGE: &str = "\
skrull calibrate --samples CSV [--model qwen2.5-0.5b] [--gpu h100|h200] [--cost-model BASE]
                 [--group 8]

Fits the cost model to measured samples by least squares (relative error) and prints it in
the format --cost-model FILE accepts. CSV rows (a header line and # comments are skipped):

  LENGTH,SECONDS               one forward+backward of one LENGTH-token sequence, whole on
  compute,LENGTH,SECONDS       one GPU (at least 3 distinct lengths): fits the fixed cost per
                               micro-batch and the GEMM and attention speeds
  collective,BYTES,SECONDS     one all-gather of BYTES on --group GPUs of one node (at least 2
                               sizes): fits the ring step latency and bandwidth

Coefficients without samples keep the base model (--cost-model BASE, else the --gpu preset
for --model).";

/// At most 15 significant digits: JSON readers (serde_json without `float_roundtrip`
/// included) parse those exactly, so a written model reads back bit for bit.
fn num(v: f64) -> String {
    let short = format!("{v:e}");
    let digits = short
        .split('e')
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .count();
    let v = if digits > 15 {
        format!("{v:.14e}").parse::<f64>().unwrap_or(v)
    } else {
        v
    };
    let a = v.abs();
    if v == 0.0 || (1e-3..1e6).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

fn list<T: Copy>(xs: &[T], f: impl Fn(T) -> String) -> String {
    let items: Vec<String> = xs.iter().map(|&x| f(x)).collect();
    format!("[{}]", items.join(", "))
}

/// The cost-model file form of `cost` (JSON; `comment` goes into a `_comment` field).
pub fn cost_model_json(cost: &CostModel, comment: &str) -> String {
    let a = &cost.attention;
    let mut s = String::from("{\n");
    let _ = writeln!(s, "  \"_comment\": {},", Value::from(comment));
    let fields: [(&str, String); 20] = [
        ("peak_flops", num(cost.peak_flops)),
        ("gemm_efficiency", num(cost.gemm_efficiency)),
        ("hbm_bandwidth", num(cost.hbm_bandwidth)),
        ("weight_bytes", num(cost.weight_bytes)),
        ("weight_passes", num(cost.weight_passes)),
        (
            "attention",
            format!(
                "{{\"seqlen\": {}, \"fwd_flops\": {}, \"bwd_flops\": {}}}",
                list(&a.seqlen, |x| x.to_string()),
                list(&a.fwd, num),
                list(&a.bwd, num)
            ),
        ),
        ("attention_tile", cost.attention_tile.to_string()),
        ("attention_bwd_ratio", num(cost.attention_bwd_ratio)),
        ("kv_element_bytes", num(cost.kv_element_bytes)),
        ("comm_passes", num(cost.comm_passes)),
        ("ring_step_latency_s", num(cost.ring_step_latency_s)),
        (
            "inter_node_ring_step_latency_s",
            num(cost.inter_node_ring_step_latency_s),
        ),
        ("intra_node_bandwidth", num(cost.intra_node_bandwidth)),
        ("inter_node_bandwidth", num(cost.inter_node_bandwidth)),
        ("gpus_per_node", cost.gpus_per_node.to_string()),
        ("overlap", format!("\"{}\"", cost.overlap.name())),
        ("kernels_per_layer", num(cost.kernels_per_layer)),
        ("kernel_launch_s", num(cost.kernel_launch_s)),
        ("micro_batch_extra_s", num(cost.micro_batch_extra_s)),
        ("iteration_fixed_s", num(cost.iteration_fixed_s)),
    ];
    for (i, (k, v)) in fields.iter().enumerate() {
        let sep = if i + 1 < fields.len() { "," } else { "" };
        let _ = writeln!(s, "  \"{k}\": {v}{sep}");
    }
    s.push_str("}\n");
    s
}

fn as_f64(key: &str, v: &Value) -> Result<f64, String> {
    v.as_f64()
        .ok_or_else(|| format!("cost model: \"{key}\" must be a number"))
}

fn as_u32(key: &str, v: &Value) -> Result<u32, String> {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| format!("cost model: \"{key}\" must be a whole number"))
}

fn array<const N: usize>(key: &str, v: &Value) -> Result<[f64; N], String> {
    let items = v
        .as_array()
        .filter(|a| a.len() == N)
        .ok_or_else(|| format!("cost model: \"{key}\" must be an array of {N} numbers"))?;
    let mut out = [0.0; N];
    for (o, x) in out.iter_mut().zip(items) {
        *o = as_f64(key, x)?;
    }
    Ok(out)
}

fn parse_attention(v: &Value, base: &AttentionTable) -> Result<AttentionTable, String> {
    let obj = v
        .as_object()
        .ok_or("cost model: \"attention\" must be an object")?;
    let mut t = *base;
    for (k, x) in obj {
        match k.as_str() {
            "seqlen" => {
                let a: [f64; ATTN_POINTS] = array("attention.seqlen", x)?;
                for (o, s) in t.seqlen.iter_mut().zip(a) {
                    if !(s >= 1.0 && s <= f64::from(u32::MAX) && s.fract() == 0.0) {
                        return Err(
                            "cost model: \"attention.seqlen\" must hold token counts".into()
                        );
                    }
                    *o = s as u32;
                }
            }
            "fwd_flops" => t.fwd = array("attention.fwd_flops", x)?,
            "bwd_flops" => t.bwd = array("attention.bwd_flops", x)?,
            _ => return Err(format!("cost model: unknown field \"attention.{k}\"")),
        }
    }
    Ok(t)
}

/// Parses a cost-model file over `base`: every field present replaces `base`'s; fields whose
/// name starts with `_` are comments.
///
/// # Errors
/// A message naming the bad field, or the validation error.
pub fn parse_cost_model(text: &str, base: &CostModel) -> Result<CostModel, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("cost model: {e}"))?;
    let obj = v.as_object().ok_or("cost model: expected a JSON object")?;
    let mut c = *base;
    for (k, x) in obj {
        let key = k.as_str();
        match key {
            _ if key.starts_with('_') => {}
            "peak_flops" => c.peak_flops = as_f64(key, x)?,
            "gemm_efficiency" => c.gemm_efficiency = as_f64(key, x)?,
            "hbm_bandwidth" => c.hbm_bandwidth = as_f64(key, x)?,
            "weight_bytes" => c.weight_bytes = as_f64(key, x)?,
            "weight_passes" => c.weight_passes = as_f64(key, x)?,
            "attention" => c.attention = parse_attention(x, &c.attention)?,
            "attention_tile" => c.attention_tile = as_u32(key, x)?,
            "attention_bwd_ratio" => c.attention_bwd_ratio = as_f64(key, x)?,
            "kv_element_bytes" => c.kv_element_bytes = as_f64(key, x)?,
            "comm_passes" => c.comm_passes = as_f64(key, x)?,
            "ring_step_latency_s" => c.ring_step_latency_s = as_f64(key, x)?,
            "inter_node_ring_step_latency_s" => {
                c.inter_node_ring_step_latency_s = as_f64(key, x)?;
            }
            "intra_node_bandwidth" => c.intra_node_bandwidth = as_f64(key, x)?,
            "inter_node_bandwidth" => c.inter_node_bandwidth = as_f64(key, x)?,
            "gpus_per_node" => c.gpus_per_node = as_u32(key, x)?,
            "overlap" => {
                let name = x.as_str().unwrap_or("");
                c.overlap = Overlap::from_name(name).ok_or_else(|| {
                    "cost model: \"overlap\" must be \"local-attention\" or \"all-attention\""
                        .to_string()
                })?;
            }
            "kernels_per_layer" => c.kernels_per_layer = as_f64(key, x)?,
            "kernel_launch_s" => c.kernel_launch_s = as_f64(key, x)?,
            "micro_batch_extra_s" => c.micro_batch_extra_s = as_f64(key, x)?,
            "iteration_fixed_s" => c.iteration_fixed_s = as_f64(key, x)?,
            _ => return Err(format!("cost model: unknown field \"{key}\"")),
        }
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// The cost model the flags ask for, for `shape` (the H100 preset when no cost flag is
/// given; see [`cost_over`](crate::args::cost_over)).
///
/// # Errors
/// A message naming the unknown GPU, the unreadable file or the bad field.
pub fn cost_from_flags(flags: &Flags, shape: &ModelShape) -> Result<CostModel, String> {
    Ok(crate::args::cost_over(flags, shape, None)?.unwrap_or_else(|| CostModel::h100(shape)))
}

/// Samples read from a calibration CSV.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Samples {
    /// `(length, seconds)`: whole-sequence forward + backward on one GPU.
    pub compute: Vec<(u32, f64)>,
    /// `(bytes, seconds)`: one collective.
    pub collective: Vec<(f64, f64)>,
}

/// Parses a calibration CSV (see [`USAGE`]).
///
/// # Errors
/// A message naming the bad line.
pub fn parse_samples(text: &str) -> Result<Samples, String> {
    let mut out = Samples::default();
    for (no, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || {
            format!(
                "line {}: expected LENGTH,SECONDS or KIND,SIZE,SECONDS: '{raw}'",
                no + 1
            )
        };
        let (kind, x, t) = match cells.as_slice() {
            [x, t] => ("compute", *x, *t),
            [k, x, t] => (*k, *x, *t),
            _ => return Err(bad()),
        };
        let (Ok(xv), Ok(tv)) = (x.parse::<f64>(), t.parse::<f64>()) else {
            // A header line (first non-comment line that is not numeric) is skipped.
            if out.compute.is_empty() && out.collective.is_empty() {
                continue;
            }
            return Err(bad());
        };
        if !(xv.is_finite() && xv > 0.0 && tv.is_finite() && tv > 0.0) {
            return Err(format!("line {}: sizes and times must be positive", no + 1));
        }
        match kind {
            "compute" => {
                if xv.fract() != 0.0 || xv > f64::from(u32::MAX) {
                    return Err(format!("line {}: '{x}' is not a token count", no + 1));
                }
                out.compute.push((xv as u32, tv));
            }
            "collective" => out.collective.push((xv, tv)),
            other => {
                return Err(format!(
                    "line {}: unknown kind '{other}' (compute, collective)",
                    no + 1
                ));
            }
        }
    }
    Ok(out)
}

/// What [`calibrate`] fitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// The fitted model.
    pub cost: CostModel,
    /// The compute fit, when compute samples were given.
    pub compute: Option<ComputeFit>,
    /// The collective fit, when collective samples were given.
    pub collective: Option<CollectiveFit>,
}

/// Fits `base` to `samples` for `shape`, collectives measured on `group` GPUs.
///
/// # Errors
/// A message from the fit, or when there are no samples at all.
pub fn calibrate(
    base: &CostModel,
    shape: &ModelShape,
    samples: &Samples,
    group: u32,
) -> Result<Calibration, String> {
    if samples.compute.is_empty() && samples.collective.is_empty() {
        return Err("no samples".into());
    }
    let mut cost = *base;
    let mut compute = None;
    let mut collective = None;
    if !samples.compute.is_empty() {
        let (c, fit) =
            fit_compute(&cost, shape, &samples.compute).map_err(|e| format!("compute fit: {e}"))?;
        cost = c;
        compute = Some(fit);
    }
    if !samples.collective.is_empty() {
        let fit =
            fit_collective(&samples.collective).map_err(|e| format!("collective fit: {e}"))?;
        fit.apply(&mut cost, group);
        collective = Some(fit);
    }
    cost.validate().map_err(|e| e.to_string())?;
    Ok(Calibration {
        cost,
        compute,
        collective,
    })
}

/// Runs `skrull calibrate`; returns the cost-model file to print.
///
/// # Errors
/// A message that names the offending value.
pub fn run(flags: &Flags) -> Result<String, String> {
    let path = flags.get("--samples").ok_or("--samples CSV is required")?;
    let shape = parse_model(flags.get("--model").unwrap_or("qwen2.5-0.5b"))?;
    shape.validate().map_err(|e| e.to_string())?;
    let base = cost_from_flags(flags, &shape)?;
    let group = flags.tokens("--group", 8)?;
    if group < 2 {
        return Err("--group must be at least 2".into());
    }
    flags.finish()?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let samples = parse_samples(&text).map_err(|e| format!("{path}: {e}"))?;
    let cal = calibrate(&base, &shape, &samples, group)?;
    let mut comment = format!(
        "skrull calibrate: {} compute and {} collective samples from {path}, model {}",
        samples.compute.len(),
        samples.collective.len(),
        model_name(&shape)
    );
    if let Some(f) = cal.compute {
        let _ = write!(
            comment,
            "; compute fit: fixed {:.3} ms per micro-batch, GEMM x{:.3}, attention x{:.3} the \
             base model's time, rms relative error {:.1}%",
            f.fixed_s * 1e3,
            f.gemm_scale,
            f.attention_scale,
            f.rms_relative_error * 100.0
        );
    }
    if let Some(f) = cal.collective {
        let _ = write!(
            comment,
            "; collective fit: {:.1} us + bytes / {:.1} GB/s, rms relative error {:.1}%",
            f.latency_s * 1e6,
            f.algorithm_bandwidth / 1e9,
            f.rms_relative_error * 100.0
        );
    }
    Ok(cost_model_json(&cal.cost, &comment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_model_files_round_trip_exactly() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            let mut c = CostModel::h200(&shape);
            c.overlap = Overlap::AllAttention;
            c.iteration_fixed_s = 0.123_456_789;
            let text = cost_model_json(&c, "test \"quoted\"");
            let base = CostModel::h100(&ModelShape::QWEN2_5_7B);
            let back = parse_cost_model(&text, &base).unwrap();
            // Written to 15 significant digits: the first trip rounds, every later one is exact.
            let again = parse_cost_model(&cost_model_json(&back, ""), &base).unwrap();
            assert_eq!(again, back);
            assert_eq!(back.overlap, c.overlap);
            let rel = |a: f64, b: f64| ((a - b) / b).abs();
            for i in 0..6 {
                assert!(rel(back.attention.fwd[i], c.attention.fwd[i]) < 1e-14);
                assert!(rel(back.attention.bwd[i], c.attention.bwd[i]) < 1e-14);
            }
            assert!(rel(back.ring_step_latency_s, c.ring_step_latency_s) < 1e-14);
            assert_eq!(back.iteration_fixed_s, c.iteration_fixed_s);
            assert_eq!(back.peak_flops, c.peak_flops);
        }
    }

    #[test]
    fn partial_files_keep_the_base_and_bad_fields_are_named() {
        let base = CostModel::h100(&ModelShape::QWEN2_5_7B);
        let c = parse_cost_model("{\"gemm_efficiency\": 0.5, \"_note\": 1}", &base).unwrap();
        assert_eq!(c.gemm_efficiency, 0.5);
        assert_eq!(c.peak_flops, base.peak_flops);
        let e = parse_cost_model("{\"gemm_eficiency\": 0.5}", &base).unwrap_err();
        assert!(e.contains("gemm_eficiency"), "{e}");
        let e = parse_cost_model("{\"gemm_efficiency\": 2}", &base).unwrap_err();
        assert!(e.contains("gemm_efficiency"), "{e}");
        let e = parse_cost_model("{\"attention\": {\"fwd_flops\": [1, 2]}}", &base).unwrap_err();
        assert!(e.contains("attention.fwd_flops"), "{e}");
        assert!(parse_cost_model("[1]", &base).is_err());
    }

    #[test]
    fn samples_parse_with_header_comments_and_kinds() {
        let s = parse_samples(
            "length,seconds\n# c\n1024,0.01\ncompute,2048, 0.02\ncollective,1e6,5e-5\n",
        )
        .unwrap();
        assert_eq!(s.compute, vec![(1024, 0.01), (2048, 0.02)]);
        assert_eq!(s.collective, vec![(1e6, 5e-5)]);
        assert!(parse_samples("1024,0.01\nx,y\n").is_err());
        assert!(parse_samples("1024,-1\n").is_err());
        assert!(parse_samples("gpu,1,1\n").is_err());
        assert!(parse_samples("1.5,1\n").is_err());
    }
}
