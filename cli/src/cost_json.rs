//! The cost-model file format that `--cost-model FILE` reads and `skrull calibrate` writes
//! (JSON, every field optional: a missing field keeps the base model's value).

use std::fmt::Write;

use serde_json::Value;
use skrull_core::config::cost::{ATTN_POINTS, AttentionTable, CostModel, Overlap};

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
    cost_model_json_with(cost, comment, &[])
}

/// [`cost_model_json`] with more fields after the comment: `(name, JSON text)`; names start
/// with `_`, so readers of the file skip them.
pub fn cost_model_json_with(cost: &CostModel, comment: &str, extra: &[(&str, String)]) -> String {
    let a = &cost.attention;
    let mut s = String::from("{\n");
    let _ = writeln!(s, "  \"_comment\": {},", Value::from(comment));
    for (k, v) in extra {
        debug_assert!(k.starts_with('_'));
        let _ = writeln!(s, "  \"{k}\": {v},");
    }
    let fields: [(&str, String); 22] = [
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
        ("sharded_sequence_s", num(cost.sharded_sequence_s)),
        ("local_sequence_s", num(cost.local_sequence_s)),
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
            "sharded_sequence_s" => c.sharded_sequence_s = as_f64(key, x)?,
            "local_sequence_s" => c.local_sequence_s = as_f64(key, x)?,
            _ => return Err(format!("cost model: unknown field \"{key}\"")),
        }
    }
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::ModelShape;

    #[test]
    fn cost_model_files_round_trip_exactly() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            let mut c = CostModel::h200(&shape);
            c.overlap = Overlap::AllAttention;
            c.iteration_fixed_s = 0.123_456_789;
            c.sharded_sequence_s = 0.004_567_891_234_5;
            c.local_sequence_s = 0.000_712_345_678_9;
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
            assert_eq!(back.sharded_sequence_s, c.sharded_sequence_s);
            assert_eq!(back.local_sequence_s, c.local_sequence_s);
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
}
