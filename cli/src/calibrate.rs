//! `skrull calibrate`: fit the cost model to measured samples and write it in the cost-model
//! file format (`cost_json`).

use std::fmt::Write;

use serde_json::Value;
use skrull_core::ModelShape;
use skrull_core::config::cost::CostModel;
use skrull_core::model::fit::{CollectiveFit, ComputeFit, fit_collective, fit_compute};

use crate::args::{Flags, model_name, parse_model};
use crate::config_flags::cost_from_flags;
use crate::cost_json::cost_model_json_with;
pub use crate::cost_json::{cost_model_json, parse_cost_model};
use crate::fits::{AttentionFit, MemoryFit, fit_attention, fit_compute_over, fit_memory};
use crate::samples::{AttentionSample, Scope};
pub use crate::samples::{Samples, parse_samples};

/// Usage text of `skrull calibrate`.
pub const USAGE: &str = "\
skrull calibrate --samples CSV [--model qwen2.5-0.5b] [--gpu h100|h200] [--cost-model BASE]
                 [--group 8] [--memory-limit BYTES]

Fits the cost model to measured samples by least squares (relative error) and prints it in
the format --cost-model FILE accepts. `python -m skrull.profile` measures and writes the CSV
(docs/profiling.md). Rows (a header line and # comments are skipped):

  LENGTH,SECONDS                 one forward+backward of the whole model on one LENGTH-token
  compute,LENGTH,SECONDS         sequence, whole on one GPU: fits the fixed cost per
                                 micro-batch and the GEMM and attention speeds (at least 3
                                 lengths; 2 with attention rows)
  layer,TOKENS,SECONDS           the same for one decoder layer, and for the final norm, LM
  head,TOKENS,SECONDS            head and loss: layers x layer + head is a compute sample
  attention,LENGTH,SECONDS[,N]   one layer's causal attention, forward+backward, over N packed
                                 sequences of LENGTH tokens (at least 2 lengths): replaces the
                                 attention table, whose level the compute fit then fits
                                 jointly with the whole-model samples
  collective,BYTES,SECONDS[,GROUP][,intra|inter]
                                 one all-gather of BYTES on GROUP GPUs (default --group), in
                                 one node or across nodes (at least 2 sizes per scope): fits
                                 the ring step latency and bandwidth of that scope
  memory,TOKENS,BYTES[,plain|checkpoint]
                                 peak memory of one GPU for a micro-batch of TOKENS tokens,
                                 with or without activation checkpointing (at least 2 counts
                                 per mode): fits BYTES = a + b x TOKENS, written to the file's
                                 \"_memory\" object with, given --memory-limit (bytes, or 80G),
                                 the BucketSize: the most tokens whose fitted memory fits
  sharded,COUNT,SECONDS[,TOKENS[,GROUP]]
                                 one layer's attention of a micro-batch of COUNT sequences (of
                                 TOKENS tokens) all sharded over a ring of GROUP GPUs (default
                                 --group; at least 2 counts): the slope, less the shards'
                                 attention, times the layers is sharded_sequence_s
  local,COUNT,SECONDS,TOKENS     one layer's attention of COUNT sequences of TOKENS tokens,
                                 each whole on the GPU (at least 2 counts): the slope, less
                                 the sequences' attention, times the layers is
                                 local_sequence_s (the kernel's cost per call, where the
                                 executor calls it per sequence), taken out of the attention
                                 rows before their table is fitted
  step,PARAMETERS,SECONDS        one optimizer step over PARAMETERS parameters: the line at
                                 the model's parameters (one count: proportional) is
                                 iteration_fixed_s

Coefficients without samples keep the base model (--cost-model BASE, else the --gpu preset
for --model).";

/// What [`calibrate`] fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The fitted model.
    pub cost: CostModel,
    /// The compute fit, when compute (or layer and head) samples were given.
    pub compute: Option<ComputeFit>,
    /// Whole-model compute samples composed from `layer` and `head` rows.
    pub composed: usize,
    /// The attention table fit, when attention samples were given.
    pub attention: Option<AttentionFit>,
    /// The intra-node collective fit and its group size.
    pub collective: Option<(CollectiveFit, u32)>,
    /// The inter-node collective fit and its group size.
    pub inter_node: Option<(CollectiveFit, u32)>,
    /// One memory fit per checkpointing mode sampled, plain first.
    pub memory: Vec<MemoryFit>,
    /// The per-sharded-sequence fit (one layer's line), when `sharded` rows were given.
    pub per_sequence: Option<crate::fixed_fits::LineFit>,
    /// The per-step fit, when `step` rows were given.
    pub step: Option<crate::fixed_fits::LineFit>,
    /// The per-whole-sequence fit (one layer's line), when `local` rows were given.
    pub per_local: Option<crate::fixed_fits::LineFit>,
}

/// The collective fit of one scope's samples, and their common group size.
fn fit_scope(
    samples: &Samples,
    scope: Scope,
    group: u32,
) -> Result<Option<(CollectiveFit, u32)>, String> {
    let rows: Vec<_> = samples
        .collective
        .iter()
        .filter(|c| c.scope == scope)
        .collect();
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let default = match scope {
        Scope::Intra => Some(group),
        Scope::Inter => None,
    };
    let g = first.group.or(default).ok_or(
        "inter-node collective rows need their group size (collective,BYTES,SECONDS,GROUP,inter)",
    )?;
    if rows.iter().any(|c| c.group.or(default) != Some(g)) {
        return Err(format!(
            "the {} collective rows mix group sizes: fit one group at a time",
            scope.name()
        ));
    }
    // Sizes scaled to at most 1: the singularity test of the normal equations compares
    // their diagonal entries, and bytes squared dwarf the latency's column.
    let b_ref = rows.iter().map(|c| c.bytes).fold(0.0, f64::max);
    let points: Vec<(f64, f64)> = rows.iter().map(|c| (c.bytes / b_ref, c.seconds)).collect();
    let mut fit =
        fit_collective(&points).map_err(|e| format!("{} collective fit: {e}", scope.name()))?;
    fit.algorithm_bandwidth *= b_ref;
    Ok(Some((fit, g)))
}

/// Fits `base` to `samples` for `shape`: intra-node collectives without a group cell were
/// measured on `group` GPUs. In order: the attention table from `attention` rows; the compute
/// fit on `compute` rows plus the whole-model samples composed from `layer` and `head` rows
/// (over the measured table when there is one, else the core's three-coefficient fit); the
/// ring parameters from each scope's collectives; a memory line per checkpointing mode. The
/// cost per whole sequence (`local` rows) comes first and is taken out of the attention rows.
///
/// # Errors
/// A message from a fit, or when there are no samples at all.
pub fn calibrate(
    base: &CostModel,
    shape: &ModelShape,
    samples: &Samples,
    group: u32,
) -> Result<Calibration, String> {
    if samples.is_empty() {
        return Err("no samples".into());
    }
    let mut cost = *base;
    let mut per_local = None;
    if !samples.local.is_empty() {
        let (s, fit) = crate::fixed_fits::fit_per_local_sequence(&cost, shape, &samples.local)?;
        cost.local_sequence_s = s;
        per_local = Some(fit);
    }
    // The attention rows' kernel time: each row less its sequences' cost per call.
    let per_call = cost.local_sequence_s / f64::from(shape.layers.max(1));
    let kernel: Vec<AttentionSample> = samples
        .attention
        .iter()
        .map(|a| AttentionSample {
            seconds: (a.seconds - f64::from(a.count) * per_call).max(a.seconds * 1e-3),
            ..*a
        })
        .collect();
    let mut attention = None;
    if !kernel.is_empty() {
        let (table, fit) = fit_attention(&cost, shape, &kernel)?;
        cost.attention = table;
        attention = Some(fit);
    }
    let whole = samples.whole_model(shape.layers, shape.vocab)?;
    let mut compute = None;
    if !whole.is_empty() {
        let (c, fit) = if attention.is_some() {
            fit_compute_over(&cost, shape, &whole, &kernel)?
        } else {
            fit_compute(&cost, shape, &whole).map_err(|e| format!("compute fit: {e}"))?
        };
        cost = c;
        compute = Some(fit);
    }
    let collective = fit_scope(samples, Scope::Intra, group)?;
    if let Some((fit, g)) = collective {
        fit.apply(&mut cost, g);
    }
    let inter_node = fit_scope(samples, Scope::Inter, group)?;
    if let Some((fit, g)) = inter_node {
        let g = f64::from(g);
        cost.inter_node_ring_step_latency_s = fit.latency_s / (g - 1.0);
        cost.inter_node_bandwidth = fit.algorithm_bandwidth * (g - 1.0) / g;
    }
    let memory = fit_memory(&samples.memory)?;
    let mut per_sequence = None;
    if !samples.sharded.is_empty() {
        let (s, fit) = crate::fixed_fits::fit_per_sequence(&cost, shape, group, &samples.sharded)?;
        cost.sharded_sequence_s = s;
        per_sequence = Some(fit);
    }
    let mut step = None;
    if !samples.step.is_empty() {
        let (s, fit) = crate::fixed_fits::fit_step(shape, samples)?;
        cost.iteration_fixed_s = s;
        step = Some(fit);
    }
    cost.validate().map_err(|e| e.to_string())?;
    Ok(Calibration {
        cost,
        compute,
        composed: whole.len() - samples.compute.len(),
        attention,
        collective,
        inter_node,
        memory,
        per_sequence,
        step,
        per_local,
    })
}

/// Parses a byte count: a whole number, or a number with a binary suffix `K`, `M`, `G` or `T`
/// (optionally followed by `iB` or `B`: `80G`, `80GiB` and `80GB` all mean 80 x 2^30).
pub fn parse_bytes(s: &str) -> Option<f64> {
    let s = s.trim();
    let body = s
        .strip_suffix("iB")
        .or_else(|| s.strip_suffix('B'))
        .unwrap_or(s);
    let (digits, mult) = match body.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return None,
            };
            (&body[..i], m)
        }
        _ => (body, 1),
    };
    let v: f64 = digits.parse().ok()?;
    let bytes = v * mult as f64;
    (bytes.is_finite() && bytes >= 0.0 && !digits.is_empty()).then_some(bytes)
}

/// The `_memory` object of a calibrated model file: each mode's line and, with a limit, its
/// BucketSize.
fn memory_json(fits: &[MemoryFit], limit: Option<f64>) -> Value {
    let mut obj = serde_json::Map::new();
    obj.insert("limit_bytes".into(), limit.map_or(Value::Null, Value::from));
    for f in fits {
        let bucket = limit.map_or(Value::Null, |l| Value::from(f.bucket(l)));
        obj.insert(
            f.mode.name().into(),
            serde_json::json!({
                "fixed_bytes": f.fixed_bytes,
                "bytes_per_token": f.bytes_per_token,
                "rms_relative_error": f.rms_relative_error,
                "samples": f.samples,
                "bucket_tokens": bucket,
            }),
        );
    }
    Value::Object(obj)
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
    let limit = flags
        .get("--memory-limit")
        .map(|v| parse_bytes(v).ok_or_else(|| format!("--memory-limit: '{v}' is not a byte count")))
        .transpose()?;
    flags.finish()?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let samples = parse_samples(&text).map_err(|e| format!("{path}: {e}"))?;
    if limit.is_some() && samples.memory.is_empty() {
        return Err(format!(
            "--memory-limit given but {path} has no memory samples"
        ));
    }
    let cal = calibrate(&base, &shape, &samples, group)?;
    let mut comment = format!(
        "skrull calibrate: {} compute, {} layer, {} head, {} attention, {} collective, {} \
         memory, {} sharded and {} step samples from {path}, model {}",
        samples.compute.len(),
        samples.layer.len(),
        samples.head.len(),
        samples.attention.len(),
        samples.collective.len(),
        samples.memory.len(),
        samples.sharded.len(),
        samples.step.len(),
        model_name(&shape)
    );
    if let Some(f) = cal.attention {
        let _ = write!(
            comment,
            "; attention table measured at {} lengths ({} to {} tokens), rms relative error \
             {:.1}%",
            f.lengths,
            f.range.0,
            f.range.1,
            f.rms_relative_error * 100.0
        );
    }
    if let Some(f) = cal.compute {
        let _ = write!(
            comment,
            "; compute fit ({} whole-model samples, {} of them layers x {} + head): fixed {:.3} \
             ms per micro-batch, GEMM x{:.3}",
            cal.composed + samples.compute.len(),
            cal.composed,
            shape.layers,
            f.fixed_s * 1e3,
            f.gemm_scale
        );
        let attention = if cal.attention.is_some() {
            format!(
                "the base model's time, attention x{:.3} the measured table's",
                f.attention_scale
            )
        } else {
            format!(
                "and attention x{:.3} the base model's time",
                f.attention_scale
            )
        };
        let _ = write!(
            comment,
            " {attention}, rms relative error {:.1}%",
            f.rms_relative_error * 100.0
        );
    }
    for (name, fit) in [
        ("collective", cal.collective),
        ("inter-node collective", cal.inter_node),
    ] {
        if let Some((f, g)) = fit {
            let _ = write!(
                comment,
                "; {name} fit on {g} GPUs: {:.1} us + bytes / {:.3} GB/s, rms relative error \
                 {:.1}%",
                f.latency_s * 1e6,
                f.algorithm_bandwidth / 1e9,
                f.rms_relative_error * 100.0
            );
        }
    }
    for f in &cal.memory {
        let _ = write!(
            comment,
            "; memory ({}): {:.3} GiB + {:.1} KiB per token, rms relative error {:.1}%",
            f.mode.name(),
            f.fixed_bytes / GIB,
            f.bytes_per_token / 1024.0,
            f.rms_relative_error * 100.0
        );
        if let Some(l) = limit {
            let _ = write!(
                comment,
                ", BucketSize {} under {:.3} GiB",
                f.bucket(l),
                l / GIB
            );
        }
    }
    if let Some(f) = cal.per_sequence {
        let _ = write!(
            comment,
            "; per sharded sequence: {:.3} ms per layer ({} samples, rms relative error \
             {:.1}%), {:.3} ms per micro-batch",
            f.slope * 1e3,
            f.samples,
            f.rms_relative_error * 100.0,
            cal.cost.sharded_sequence_s * 1e3
        );
    }
    if let Some(f) = cal.per_local {
        let _ = write!(
            comment,
            "; per whole sequence: {:.3} ms per layer ({} samples, rms relative error {:.1}%), \
             {:.3} ms per micro-batch",
            f.slope * 1e3,
            f.samples,
            f.rms_relative_error * 100.0,
            cal.cost.local_sequence_s * 1e3
        );
    }
    if let Some(f) = cal.step {
        let _ = write!(
            comment,
            "; per step: {:.3} ms + {:.3} ms per million parameters ({} samples, rms relative \
             error {:.1}%), {:.3} ms at {:.0}M parameters",
            f.intercept * 1e3,
            f.slope * 1e9,
            f.samples,
            f.rms_relative_error * 100.0,
            cal.cost.iteration_fixed_s * 1e3,
            crate::fixed_fits::parameters(&shape) / 1e6
        );
    }
    let extra = if cal.memory.is_empty() {
        Vec::new()
    } else {
        vec![("_memory", memory_json(&cal.memory, limit).to_string())]
    };
    Ok(cost_model_json_with(&cal.cost, &comment, &extra))
}

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

#[cfg(test)]
mod tests {
    use super::*;

    /// The cost per whole sequence is fitted from `local` rows and taken out of the attention
    /// rows: a kernel called per sequence (0.1 ms per call per layer) gives the base model's
    /// attention table back, and the whole-sequence time of the calibrated model is the
    /// kernel's plus the cost per call.
    #[test]
    fn the_cost_per_call_is_fitted_and_taken_out_of_the_attention_rows() {
        use crate::samples::LocalSample;
        use skrull_core::ShardPadding;
        use skrull_core::model::TimeModel;
        let shape = ModelShape::QWEN2_5_0_5B;
        let base = CostModel::h100(&shape);
        let tm = TimeModel::for_shape(&base, &shape, 1, ShardPadding::None);
        let layers = f64::from(shape.layers);
        let per_call = 1e-4;
        let row =
            |count: u32, len: u32| f64::from(count) * (tm.attention(len, len) / layers + per_call);
        let samples = Samples {
            attention: [512u32, 1024, 2048, 4096, 8192, 16384]
                .iter()
                .map(|&len| AttentionSample {
                    len,
                    count: 4,
                    seconds: row(4, len),
                })
                .collect(),
            local: [1u32, 8, 64]
                .iter()
                .map(|&count| LocalSample {
                    count,
                    seconds: row(count, 16),
                    tokens: 16,
                })
                .collect(),
            ..Samples::default()
        };
        let cal = calibrate(&base, &shape, &samples, 8).unwrap();
        let got = cal.cost.local_sequence_s;
        assert!((got / (per_call * layers) - 1.0).abs() < 1e-6, "{got}");
        let fitted = TimeModel::for_shape(&cal.cost, &shape, 1, ShardPadding::None);
        for len in [512u32, 4096, 16384] {
            let want = tm.attention(len, len) + per_call * layers;
            let rel = fitted.attention_whole(len) / want - 1.0;
            assert!(rel.abs() < 1e-3, "{len}: {rel}");
        }
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("1024"), Some(1024.0));
        assert_eq!(parse_bytes("80G"), Some(80.0 * GIB));
        assert_eq!(parse_bytes("80GiB"), Some(80.0 * GIB));
        assert_eq!(parse_bytes("1.5k"), Some(1536.0));
        assert_eq!(parse_bytes("2TB"), Some(2.0 * 1024.0 * GIB));
        for bad in ["", "G", "-1", "80X", "eighty", "1e400"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
