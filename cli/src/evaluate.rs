//! `skrull evaluate`: the estimated iteration time, per-DP-rank times, exposed communication
//! and lower bound of any plan in the `skrull plan --format json` form, whoever produced it.

use std::fmt::Write;

use serde_json::Value;
use skrull_core::model::eval::{Evaluation, Report};
use skrull_core::{Config, FlopsFormula, ModelShape, Placement, Policy, ShardPadding, Victim};
use skrull_kit::OwnedEval;

use crate::args::{Flags, config_over, cost_label, model_name, parse_model, read_lengths};

/// A plan read from `skrull plan --format json`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFile {
    /// The configuration the plan records, if any.
    pub config: Option<Config>,
    /// The lengths the plan records (`len` of every placement), if all are present.
    pub lengths: Option<Vec<u32>>,
    /// One placement per sequence, in sequence order.
    pub placements: Vec<Placement>,
}

fn field_u32(obj: &Value, key: &str, ctx: &str) -> Result<u32, String> {
    obj.get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("{ctx}: \"{key}\" must be a whole number"))
}

fn parse_config(c: &Value) -> Result<Config, String> {
    let ctx = "plan config";
    let model = match c.get("model").and_then(Value::as_str) {
        Some(m) => parse_model(m)?,
        None => ModelShape::QWEN2_5_0_5B,
    };
    let mut cfg = Config::new(
        field_u32(c, "dp", ctx)?,
        field_u32(c, "cp", ctx)?,
        field_u32(c, "bucket_tokens", ctx)?,
        model,
    );
    if let Some(p) = c.get("policy").and_then(Value::as_str) {
        cfg.policy = Policy::from_name(p).ok_or_else(|| format!("{ctx}: unknown policy '{p}'"))?;
    }
    if let Some(v) = c.get("victim").and_then(Value::as_str) {
        cfg.victim = Victim::from_name(v).ok_or_else(|| format!("{ctx}: unknown victim '{v}'"))?;
    }
    if let Some(f) = c.get("flops").and_then(Value::as_str) {
        cfg.flops = match f {
            "paper" => FlopsFormula::Paper,
            "megatron" => FlopsFormula::Megatron,
            _ => return Err(format!("{ctx}: unknown flops formula '{f}'")),
        };
    }
    if let Some(p) = c.get("shard_padding").and_then(Value::as_str) {
        cfg.shard_padding = ShardPadding::from_name(p)
            .ok_or_else(|| format!("{ctx}: unknown shard_padding '{p}'"))?;
    }
    if let Some(m) = c.get("max_micro_batches").and_then(Value::as_u64) {
        cfg.max_micro_batches = u32::try_from(m).unwrap_or(0);
    }
    if let Some(m) = c.get("pad_multiple").and_then(Value::as_u64) {
        cfg.pad_multiple =
            u32::try_from(m).map_err(|_| format!("{ctx}: pad_multiple {m} is out of range"))?;
    }
    cfg.pad_local = c.get("pad_local").and_then(Value::as_bool).unwrap_or(false);
    cfg.lockstep = c.get("lockstep").and_then(Value::as_bool).unwrap_or(false);
    Ok(cfg)
}

/// Parses the JSON form of a plan. Placements may come in any order but must name every
/// sequence `0..n` once (`seq`); `dp`, `micro_batch` and `cp` (-1: sharded) are required,
/// `len` and the `config` object are optional.
///
/// # Errors
/// A message naming the bad entry.
pub fn parse_plan(text: &str) -> Result<PlanFile, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("plan: {e}"))?;
    let config = match v.get("config") {
        Some(c) => Some(parse_config(c)?),
        None => None,
    };
    let list = v
        .get("placements")
        .and_then(Value::as_array)
        .ok_or("plan: \"placements\" must be an array")?;
    let n = list.len();
    let mut placements = vec![None; n];
    let mut lengths = vec![None; n];
    for (i, p) in list.iter().enumerate() {
        let ctx = format!("plan placement {i}");
        let seq = field_u32(p, "seq", &ctx)? as usize;
        let cp = p
            .get("cp")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
            .filter(|&c| c >= -1)
            .ok_or_else(|| format!("{ctx}: \"cp\" must be -1 (sharded) or a CP rank"))?;
        let placement = Placement {
            dp_rank: field_u32(p, "dp", &ctx)?,
            micro_batch: field_u32(p, "micro_batch", &ctx)?,
            cp_rank: cp,
            ..Placement::default()
        };
        match placements.get_mut(seq) {
            Some(slot @ None) => *slot = Some(placement),
            _ => {
                return Err(format!(
                    "{ctx}: sequence {seq} is out of range or listed twice"
                ));
            }
        }
        if p.get("len").is_some() {
            lengths[seq] = Some(field_u32(p, "len", &ctx)?);
        }
    }
    let placements: Vec<Placement> = placements
        .into_iter()
        .map(|p| p.unwrap_or_default())
        .collect();
    let lengths = lengths.into_iter().collect::<Option<Vec<u32>>>();
    Ok(PlanFile {
        config,
        lengths,
        placements,
    })
}

/// Usage text of `skrull evaluate`.
pub const USAGE: &str = "\
skrull evaluate --plan PLAN.json [--lengths FILE|-] [--dp D] [--cp N] [--bucket C]
                [--model M] [--shard-padding none|zigzag] [--gpu h100|h200]
                [--cost-model FILE] [--gpus-per-node 8]
                [--overlap local-attention|all-attention]
                [--format table|json]

Estimates the iteration time of a plan in the `skrull plan --format json` form (whoever
produced it): per DP rank and micro-batch, the CP communication it hides and exposes, the
GPUs over BucketSize, and the lower bound for the batch. The layout comes from the plan's
config object; flags override it. Lengths come from --lengths or the plan's `len` fields
(both: they must agree).";

fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

/// The text report of an evaluation.
pub fn report_text(cfg: &Config, gpu: &str, lengths: &[u32], ev: &Evaluation<'_>) -> String {
    let r: &Report = &ev.report;
    let lb = r.lower_bound;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "plan: {} sequences ({} tokens), DP {} x CP {}, BucketSize {}, model {}, cost model {gpu}",
        lengths.len(),
        r.total_tokens,
        cfg.dp,
        cfg.cp,
        cfg.bucket,
        model_name(&cfg.model)
    );
    let _ = writeln!(s, "estimated iteration time: {} ms", ms(r.iteration_time));
    let _ = writeln!(
        s,
        "lower bound:              {} ms (the plan takes {:.3}x the bound; work {} ms, fixed {} ms, \
         single sequence {} ms, at least {} micro-batches)",
        ms(lb.value),
        r.gap(),
        ms(lb.work),
        ms(lb.fixed),
        ms(lb.longest),
        lb.min_micro_batches
    );
    let per_dp: Vec<String> = ev
        .dp_times
        .iter()
        .enumerate()
        .map(|(d, &t)| {
            let count = ev
                .micro_batches
                .iter()
                .filter(|m| m.dp_rank as usize == d && m.sequences > 0)
                .count();
            format!("{d}: {} ({count} mb)", ms(t))
        })
        .collect();
    let _ = writeln!(s, "per DP rank (ms):         {}", per_dp.join(", "));
    let _ = writeln!(
        s,
        "CP communication:         {} ms in all, {} ms exposed ({:.1}% hidden); {} ms exposed on \
         the slowest DP rank ({})",
        ms(r.comm),
        ms(r.exposed_comm),
        r.hidden_fraction * 100.0,
        ms(r.critical_exposed_comm),
        r.slowest_dp_rank
    );
    let share = if r.total_tokens > 0 {
        r.sharded_tokens as f64 / r.total_tokens as f64 * 100.0
    } else {
        0.0
    };
    let _ = writeln!(
        s,
        "sharded:                  {} sequences, {share:.1}% of tokens",
        r.sharded_sequences
    );
    let _ = writeln!(
        s,
        "peak tokens per GPU:      {} of {} ({:.1}%)",
        r.peak_tokens,
        r.bucket,
        r.peak_tokens as f64 / f64::from(r.bucket.max(1)) * 100.0
    );
    match r.first_over_budget {
        None => {
            let _ = writeln!(s, "BucketSize:               respected");
        }
        Some(v) => {
            let _ = writeln!(
                s,
                "BucketSize:               VIOLATED on {} (micro-batch, GPU) pairs; first: DP {} \
                 micro-batch {} CP rank {} holds {} tokens > {}",
                r.over_budget, v.dp_rank, v.micro_batch, v.cp_rank, v.tokens, r.bucket
            );
        }
    }
    s.push_str(
        "\n| DP | micro-batch | sequences | sharded | time (ms) | comm (ms) | exposed (ms) | peak tokens |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for m in ev.micro_batches.iter().filter(|m| m.sequences > 0) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {}{} |",
            m.dp_rank,
            m.index,
            m.sequences,
            m.sharded,
            ms(m.time),
            ms(m.comm),
            ms(m.exposed_comm),
            m.peak_tokens,
            if m.over_budget { " (over)" } else { "" }
        );
    }
    s
}

/// The JSON report of an evaluation.
pub fn report_json(cfg: &Config, ev: &Evaluation<'_>) -> String {
    let r = &ev.report;
    let lb = r.lower_bound;
    let mbs: Vec<Value> = ev
        .micro_batches
        .iter()
        .filter(|m| m.sequences > 0)
        .map(|m| {
            serde_json::json!({
                "dp": m.dp_rank, "index": m.index, "start_s": m.start, "time_s": m.time,
                "sequences": m.sequences, "sharded": m.sharded, "comm_s": m.comm,
                "exposed_comm_s": m.exposed_comm, "peak_tokens": m.peak_tokens,
                "slowest_cp_rank": m.slowest_cp_rank, "over_budget": m.over_budget,
            })
        })
        .collect();
    let v = serde_json::json!({
        "dp": cfg.dp, "cp": cfg.cp, "bucket_tokens": cfg.bucket, "model": model_name(&cfg.model),
        "iteration_time_s": r.iteration_time,
        "lower_bound_s": lb.value,
        "lower_bound_parts_s": {"work": lb.work, "fixed": lb.fixed, "single_sequence": lb.longest},
        "dp_times_s": ev.dp_times,
        "slowest_dp_rank": r.slowest_dp_rank,
        "comm_s": r.comm, "exposed_comm_s": r.exposed_comm,
        "critical_exposed_comm_s": r.critical_exposed_comm,
        "hidden_fraction": r.hidden_fraction,
        "total_tokens": r.total_tokens, "sharded_tokens": r.sharded_tokens,
        "sharded_sequences": r.sharded_sequences,
        "peak_tokens": r.peak_tokens, "within_budget": r.within_budget(),
        "over_budget_pairs": r.over_budget,
        "micro_batches": mbs,
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

/// Runs `skrull evaluate`; returns the text to print.
///
/// # Errors
/// A message that names the offending value.
pub fn run(flags: &Flags) -> Result<String, String> {
    let path = flags.get("--plan").ok_or("--plan PLAN.json is required")?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let plan = parse_plan(&text).map_err(|e| format!("{path}: {e}"))?;
    // The plan's configuration (the paper's defaults when it records none), flags on top.
    let base = plan
        .config
        .unwrap_or_else(|| Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B));
    let cfg = config_over(flags, base)?;
    let lengths = match (flags.get("--lengths"), &plan.lengths) {
        (Some(f), recorded) => {
            let l = read_lengths(f)?;
            if let Some(r) = recorded
                && *r != l
            {
                return Err(format!(
                    "{f}: the lengths differ from the plan's `len` fields"
                ));
            }
            l
        }
        (None, Some(l)) => l.clone(),
        (None, None) => {
            return Err("the plan has no `len` fields: give --lengths FILE".into());
        }
    };
    let gpu = cost_label(flags);
    let format = flags.get("--format").unwrap_or("table").to_string();
    flags.finish()?;
    let mut bufs = OwnedEval::default();
    let ev = bufs
        .evaluate(&cfg, &lengths, &plan.placements)
        .map_err(|e| e.to_string())?;
    match format.as_str() {
        "table" => Ok(report_text(&cfg, &gpu, &lengths, &ev)),
        "json" => Ok(report_json(&cfg, &ev)),
        other => Err(format!("--format: '{other}' is not table|json")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::plan_json;
    use skrull_kit::OwnedBuffers;

    #[test]
    fn plan_json_round_trips_into_placements() {
        let cfg = Config::new(2, 4, 4096, ModelShape::QWEN2_5_7B);
        let lengths = vec![100u32, 9000, 3000, 50, 4096, 12_000, 7];
        let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
        let plan = bufs.schedule(&cfg, &lengths).unwrap();
        let text = plan_json(&cfg, &lengths, &plan);
        let parsed = parse_plan(&text).unwrap();
        assert_eq!(parsed.config, Some(cfg));
        assert_eq!(parsed.lengths.as_deref(), Some(&lengths[..]));
        assert_eq!(parsed.placements, plan.placements());
    }

    #[test]
    fn bad_plans_name_the_entry() {
        assert!(parse_plan("{}").is_err());
        let dup = r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": 0},
                                      {"seq": 0, "dp": 0, "micro_batch": 0, "cp": 0}]}"#;
        assert!(parse_plan(dup).unwrap_err().contains("twice"));
        let bad_cp = r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": -2}]}"#;
        assert!(parse_plan(bad_cp).unwrap_err().contains("\"cp\""));
        let no_len = r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": 0}]}"#;
        let p = parse_plan(no_len).unwrap();
        assert_eq!(p.lengths, None);
        assert_eq!(p.config, None);
    }
}
