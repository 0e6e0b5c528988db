//! `skrull evaluate`: the estimated iteration time, per-DP-rank times, exposed communication
//! and lower bound of any plan in the `skrull plan --format json` form, whoever produced it.

use std::fmt::Write;

use serde_json::Value;
use skrull_core::model::eval::{Evaluation, Report};
use skrull_core::plan::{CHUNKED, SHARDED};
use skrull_core::{Config, CpGroup, ModelShape, Placement};
use skrull_kit::OwnedEval;

use crate::args::{Flags, model_name, read_lengths};
use crate::config_flags::{config_over, cost_label};

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

/// An optional whole-number field that must fit a `u16` (a CP rank or group size).
fn field_u16(obj: &Value, key: &str, ctx: &str) -> Result<Option<u16>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|v| u16::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| format!("{ctx}: \"{key}\" must be a whole number below 65536")),
    }
}

/// Parses the JSON form of a plan. Placements may come in any order but must name every
/// sequence `0..n` once (`seq`); `dp`, `micro_batch` and `cp` (-1: sharded, -2: chunked) are
/// required, `len` and the `config` object are optional. `cp_first` and `cp_size` name the
/// CP ranks that hold a sharded or chunked sequence (absent: the whole group, as `0` and `0`
/// or `0` and `N` are); for a local sequence on rank `r` they may be absent, `r` and `1`, or
/// `0` and `0`. `kind` (`local`, `sharded`, `chunked`), when given, must agree with `cp`;
/// `chunks` is ignored (it follows from the length and the configuration's ChunkSize). The
/// groups are checked against the CP size later ([`check_groups`]), once flags have had
/// their say.
///
/// # Errors
/// A message naming the bad entry.
pub fn parse_plan(text: &str) -> Result<PlanFile, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("plan: {e}"))?;
    let config = match v.get("config") {
        Some(c) => Some(crate::config_keys::read(c)?),
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
            .filter(|&c| c >= CHUNKED)
            .ok_or_else(|| {
                format!("{ctx}: \"cp\" must be -1 (sharded), -2 (chunked) or a CP rank")
            })?;
        check_kind(p, cp, &ctx)?;
        let first = field_u16(p, "cp_first", &ctx)?;
        let size = field_u16(p, "cp_size", &ctx)?;
        let (cp_first, cp_size) = if cp < 0 {
            (first.unwrap_or(0), size.unwrap_or(0))
        } else {
            // A local sequence names its own rank, or nothing.
            let named = (first.unwrap_or(cp as u16), size.unwrap_or(1));
            let plain = (first.unwrap_or(0), size.unwrap_or(0)) == (0, 0);
            if named != (cp as u16, 1) && !plain {
                return Err(format!(
                    "{ctx}: sequence {seq} is local on CP rank {cp}: \"cp_first\" and \
                     \"cp_size\" must be {cp} and 1 (or absent), not {} and {}",
                    first.unwrap_or(0),
                    size.unwrap_or(0)
                ));
            }
            (0, 0)
        };
        let placement = Placement {
            dp_rank: field_u32(p, "dp", &ctx)?,
            micro_batch: field_u32(p, "micro_batch", &ctx)?,
            cp_rank: cp,
            cp_first,
            cp_size,
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

/// The `kind` a placement's `cp` means.
fn kind_of(cp: i32) -> &'static str {
    match cp {
        SHARDED => "sharded",
        CHUNKED => "chunked",
        _ => "local",
    }
}

/// Checks an optional `kind` field against `cp`.
fn check_kind(p: &Value, cp: i32, ctx: &str) -> Result<(), String> {
    match p.get("kind") {
        None | Some(Value::Null) => Ok(()),
        Some(k) if k.as_str() == Some(kind_of(cp)) => Ok(()),
        Some(k) => Err(format!(
            "{ctx}: \"kind\" {k} does not match \"cp\": {cp} (a {} sequence)",
            kind_of(cp)
        )),
    }
}

/// Checks the group of a chunked placement against `cfg` ([`CpGroup::is_valid_chunk_group`],
/// and chunking on) and names the whole group as the policies do (`cp_first = 0`,
/// `cp_size = N`).
fn check_chunk_group(cfg: &Config, seq: usize, p: &mut Placement) -> Result<(), String> {
    let n = cfg.cp;
    let (first, size) = (u32::from(p.cp_first), u32::from(p.cp_size));
    let ctx = format!("plan: sequence {seq} (cp -2, cp_first {first}, cp_size {size})");
    if !cfg.chunking.is_on() {
        return Err(format!(
            "{ctx}: the sequence is chunked, but chunking is off (the plan's config has no \
             chunk_size; give --chunk-size)"
        ));
    }
    let size = if size == 0 { n } else { size };
    let group = CpGroup { first, size };
    if !group.is_valid_chunk_group(n) {
        return Err(format!(
            "{ctx}: CP ranks {first}-{} are not a valid chunk group of CP {n}: one rank, the \
             whole group, or an aligned power-of-two block",
            first + size - 1
        ));
    }
    p.cp_size = size as u16;
    Ok(())
}

/// Checks every chunked sequence of `lengths` against `cfg`'s ChunkSize: only a sequence
/// longer than one chunk may run chunked.
///
/// # Errors
/// A message naming the sequence, its length and the ChunkSize.
pub fn check_chunks(cfg: &Config, lengths: &[u32], placements: &[Placement]) -> Result<(), String> {
    for (seq, (p, &len)) in placements.iter().zip(lengths).enumerate() {
        if p.is_chunked() && !cfg.chunking.can_chunk(len) {
            return Err(format!(
                "plan: sequence {seq} ({len} tokens) is chunked, but it is not longer than one \
                 chunk (ChunkSize {})",
                cfg.chunking.size
            ));
        }
    }
    Ok(())
}

/// Checks the CP group of every sharded placement against `cfg`, as the core does
/// ([`CpGroup::is_valid_shard`], and no sub-group without [`Config::subgroups`]), and writes
/// whole-group shards as the policies do (`cp_first = cp_size = 0`); a chunked placement's
/// group must be a valid chunk group with chunking on (a missing `cp_size` is the whole
/// group).
///
/// # Errors
/// A message naming the sequence, its group and what a valid group looks like.
pub fn check_groups(cfg: &Config, placements: &mut [Placement]) -> Result<(), String> {
    let n = cfg.cp;
    for (seq, p) in placements.iter_mut().enumerate() {
        if p.cp_rank == CHUNKED {
            check_chunk_group(cfg, seq, p)?;
            continue;
        }
        if p.cp_rank != SHARDED {
            continue;
        }
        let (first, size) = (u32::from(p.cp_first), u32::from(p.cp_size));
        let ctx = format!("plan: sequence {seq} (cp -1, cp_first {first}, cp_size {size})");
        if size == 0 || size == n {
            if first != 0 {
                return Err(format!(
                    "{ctx}: a shard over the whole CP group of {n} ranks starts at rank 0"
                ));
            }
            p.cp_first = 0;
            p.cp_size = 0;
            continue;
        }
        if size == 1 {
            return Err(format!(
                "{ctx}: a group of one rank is not a shard; a sequence held whole on CP rank \
                 {first} is local (\"cp\": {first})"
            ));
        }
        let group = CpGroup { first, size };
        if !group.is_valid_shard(n) {
            let sizes: Vec<String> = (1..8)
                .map(|l| 1u32 << l)
                .filter(|&g| g < n && n.is_multiple_of(g))
                .map(|g| g.to_string())
                .collect();
            let allowed = if sizes.is_empty() {
                format!("CP {n} has no sub-group; cp_size must be 0 or {n} (the whole group)")
            } else {
                format!(
                    "cp_size must be {n} (the whole group) or a sub-group size {} with \
                     cp_first a multiple of it",
                    sizes.join(", ")
                )
            };
            return Err(format!(
                "{ctx}: CP ranks {first}-{} are not a valid group of CP {n}: {allowed}",
                first + size - 1
            ));
        }
        if !cfg.subgroups {
            return Err(format!(
                "{ctx}: the sequence is sharded over the sub-group of CP ranks {first}-{}, but \
                 sub-groups are off (the plan's config or --subgroups off)",
                first + size - 1
            ));
        }
    }
    Ok(())
}

/// Usage text of `skrull evaluate`.
pub const USAGE: &str = "\
skrull evaluate --plan PLAN.json [--lengths FILE|-] [--dp D] [--cp N] [--bucket C]
                [--model M] [--shard-padding none|zigzag] [--gpu h100|h200]
                [--cost-model FILE] [--gpus-per-node 8]
                [--overlap local-attention|all-attention] [--subgroups on|off]
                [--chunk-size C] [--chunk-keep K] [--chunk-state-permille P]
                [--sync cp-group|every-gpu|sharded]
                [--format table|json]

Estimates the iteration time of a plan in the `skrull plan --format json` form (whoever
produced it): per DP rank and micro-batch, the CP communication it hides and exposes, the
GPUs over BucketSize, and the lower bound for the batch. The layout comes from the plan's
config object; flags override it. Lengths come from --lengths or the plan's `len` fields
(both: they must agree).

A sharded placement (cp -1) may name a sub-group of the CP ranks with cp_first and cp_size
(absent: the whole group): g ranks from cp_first, g a power of two below CP that divides it,
cp_first a multiple of g. Each sub-group is one more ring on its ranks. --subgroups off (or
\"subgroups\": false in the plan's config) refuses such plans and drops sub-groups from the
lower bound.

A chunked placement (cp -2) runs its chunks on the GPU or aligned group named by cp_first and
cp_size (absent: the whole group), after the rest of its micro-batch; it needs chunking on
(the plan config's chunk_size, or --chunk-size) and a sequence longer than one chunk. The
report then counts the chunked sequences and their recomputation.";

fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

/// The text report of an evaluation; `subgroup_seqs` of the sharded sequences are sharded
/// over sub-groups of the CP ranks.
pub fn report_text(
    cfg: &Config,
    gpu: &str,
    lengths: &[u32],
    subgroup_seqs: usize,
    ev: &Evaluation<'_>,
) -> String {
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
    let over = if subgroup_seqs > 0 {
        format!(" ({subgroup_seqs} over sub-groups)")
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "sharded:                  {} sequences{over}, {share:.1}% of tokens",
        r.sharded_sequences
    );
    if cfg.chunking.is_on() {
        let _ = writeln!(
            s,
            "chunked:                  {} sequences (ChunkSize {}, K {}), {} ms recomputing",
            r.chunked_sequences,
            cfg.chunking.size,
            cfg.chunking.keep,
            ms(r.chunk_recompute)
        );
    }
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
    // With chunking on, a chunked column after the sharded one.
    let chunking = cfg.chunking.is_on();
    let (head, rule) = if chunking {
        (" chunked |", "---:|")
    } else {
        ("", "")
    };
    let _ = write!(
        s,
        "\n| DP | micro-batch | sequences | sharded |{head} time (ms) | comm (ms) | exposed (ms) \
         | peak tokens |\n|---:|---:|---:|---:|{rule}---:|---:|---:|---:|\n",
    );
    for m in ev.micro_batches.iter().filter(|m| m.sequences > 0) {
        let chunked = if chunking {
            format!(" {} |", m.chunked)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |{chunked} {} | {} | {} | {}{} |",
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

/// The JSON report of an evaluation (`subgroup_seqs` as in [`report_text`]).
pub fn report_json(cfg: &Config, subgroup_seqs: usize, ev: &Evaluation<'_>) -> String {
    let r = &ev.report;
    let lb = r.lower_bound;
    let mbs: Vec<Value> = ev
        .micro_batches
        .iter()
        .enumerate()
        .filter(|(_, m)| m.sequences > 0)
        .map(|(g, m)| {
            let ranks = ev.ranks_of(g);
            let rank_times: Vec<f64> = ranks.iter().map(|r| r.time).collect();
            let rank_tokens: Vec<u64> = ranks.iter().map(|r| r.tokens).collect();
            serde_json::json!({
                "dp": m.dp_rank, "index": m.index, "start_s": m.start, "time_s": m.time,
                "sequences": m.sequences, "sharded": m.sharded, "chunked": m.chunked,
                "chunk_recompute_s": m.chunk_recompute, "comm_s": m.comm,
                "exposed_comm_s": m.exposed_comm, "peak_tokens": m.peak_tokens,
                "slowest_cp_rank": m.slowest_cp_rank, "over_budget": m.over_budget,
                "rank_times_s": rank_times, "rank_tokens": rank_tokens,
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
        "chunked_sequences": r.chunked_sequences, "chunk_recompute_s": r.chunk_recompute,
        "subgroup_sequences": subgroup_seqs, "subgroups": cfg.subgroups,
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
    let mut placements = plan.placements;
    check_groups(&cfg, &mut placements).map_err(|e| format!("{path}: {e}"))?;
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
    check_chunks(&cfg, &lengths, &placements).map_err(|e| format!("{path}: {e}"))?;
    let subgroup_seqs = placements.iter().filter(|p| p.is_subgroup(cfg.cp)).count();
    let mut bufs = OwnedEval::default();
    let ev = bufs
        .evaluate(&cfg, &lengths, &placements)
        .map_err(|e| e.to_string())?;
    match format.as_str() {
        "table" => Ok(report_text(&cfg, &gpu, &lengths, subgroup_seqs, &ev)),
        "json" => Ok(report_json(&cfg, subgroup_seqs, &ev)),
        other => Err(format!("--format: '{other}' is not table|json")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::plan_json;
    use crate::rebuild::RebuiltPlan;
    use skrull_core::{Chunking, Policy};
    use skrull_kit::OwnedBuffers;

    #[test]
    fn plan_json_round_trips_into_placements() {
        let cfg = Config::new(2, 4, 4096, ModelShape::QWEN2_5_7B);
        let lengths = vec![100u32, 9000, 3000, 50, 4096, 12_000, 7];
        let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
        let plan = bufs.schedule(&cfg, &lengths).unwrap();
        let text = plan_json(&cfg, &lengths, &plan);
        let mut parsed = parse_plan(&text).unwrap();
        assert_eq!(parsed.config, Some(cfg));
        assert_eq!(parsed.lengths.as_deref(), Some(&lengths[..]));
        check_groups(&cfg, &mut parsed.placements).unwrap();
        assert_eq!(parsed.placements, plan.placements());
    }

    /// A CP-16 plan with shards over the whole group and over sub-groups of 8, 4 and 2.
    fn subgroup_plan() -> (Config, Vec<u32>, RebuiltPlan) {
        let cfg = Config::new(2, 16, 4096, ModelShape::QWEN2_5_7B);
        let lengths = vec![30_000u32, 16_000, 8000, 3000, 2000, 500, 20_000, 6000, 100];
        let p = |dp_rank, micro_batch, cp_rank, cp_first, cp_size| Placement {
            dp_rank,
            micro_batch,
            cp_rank,
            cp_first,
            cp_size,
        };
        let placements = [
            p(0, 0, -1, 0, 0),
            p(0, 0, -1, 8, 8),
            p(0, 0, -1, 4, 4),
            p(0, 0, -1, 2, 2),
            p(0, 1, 3, 0, 0),
            p(0, 1, -1, 0, 16),
            p(1, 0, -1, 8, 8),
            p(1, 0, -1, 0, 8),
            p(1, 0, 15, 0, 0),
        ];
        let rebuilt = RebuiltPlan::new(&cfg, &lengths, &placements);
        (cfg, lengths, rebuilt)
    }

    #[test]
    fn a_subgroup_plan_round_trips_through_json_and_evaluates_the_same() {
        let (cfg, lengths, rebuilt) = subgroup_plan();
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();
        let text = plan_json(&cfg, &lengths, &plan);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["config"]["subgroups"], true);
        let groups: Vec<(i64, u64, u64)> = v["placements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let f = |k: &str| p[k].as_u64().unwrap();
                (p["cp"].as_i64().unwrap(), f("cp_first"), f("cp_size"))
            })
            .collect();
        assert_eq!(
            groups,
            [
                (-1, 0, 16),
                (-1, 8, 8),
                (-1, 4, 4),
                (-1, 2, 2),
                (3, 3, 1),
                (-1, 0, 16),
                (-1, 8, 8),
                (-1, 0, 8),
                (15, 15, 1)
            ]
        );
        let mut parsed = parse_plan(&text).unwrap();
        check_groups(&cfg, &mut parsed.placements).unwrap();
        assert_eq!(parsed.placements, plan.placements());
        let mut a = OwnedEval::default();
        let mut b = OwnedEval::default();
        let direct = a.evaluate(&cfg, &lengths, plan.placements()).unwrap();
        let read = b.evaluate(&cfg, &lengths, &parsed.placements).unwrap();
        assert_eq!(direct.report, read.report);
        assert_eq!(direct.micro_batches, read.micro_batches);
        // The sub-groups count as rings: every sub-group shard is a sharded sequence.
        assert_eq!(direct.report.sharded_sequences, 7);
        let table = report_text(&cfg, "h100", &lengths, 5, &direct);
        assert!(table.contains("7 sequences (5 over sub-groups)"), "{table}");
        let json: Value = serde_json::from_str(&report_json(&cfg, 5, &direct)).unwrap();
        assert_eq!(json["subgroup_sequences"], 5);
        // serde_json (without `float_roundtrip`) may read a printed float back one ulp off.
        let t = json["iteration_time_s"].as_f64().unwrap();
        assert!((t - direct.report.iteration_time).abs() <= 4.0 * f64::EPSILON * t);
        // Every micro-batch lists its CP ranks' times and tokens; its time is the slowest.
        for m in json["micro_batches"].as_array().unwrap() {
            let times: Vec<f64> = m["rank_times_s"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert_eq!(times.len(), 16);
            assert_eq!(m["rank_tokens"].as_array().unwrap().len(), 16);
            let slowest = times.iter().copied().fold(0.0, f64::max);
            let time = m["time_s"].as_f64().unwrap();
            assert!((slowest - time).abs() <= 4.0 * f64::EPSILON * time, "{m}");
            let at = m["slowest_cp_rank"].as_u64().unwrap() as usize;
            assert!((times[at] - time).abs() <= 4.0 * f64::EPSILON * time, "{m}");
        }
    }

    /// A chunkflow plan and a hand-made one (chunks on one GPU and on a sub-group) go through
    /// JSON and back to the same placements and the same evaluation.
    #[test]
    fn chunked_plans_round_trip_through_json_and_evaluate_the_same() {
        let mut cfg =
            Config::new(2, 8, 8192, ModelShape::QWEN2_5_7B).with_policy(Policy::ChunkFlow);
        cfg.chunking = Chunking::new(4096, 1);
        let lengths = vec![40_000u32, 9000, 3000, 50, 4096, 12_000, 7, 20_000];
        let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
        let plan = bufs.schedule(&cfg, &lengths).unwrap();
        let text = plan_json(&cfg, &lengths, &plan);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["config"]["chunk_size"], 4096);
        assert_eq!(v["summary"]["chunked"], 4);
        let chunked: Vec<(u64, u64, u64, u64)> = v["placements"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == "chunked")
            .map(|p| {
                let f = |k: &str| p[k].as_u64().unwrap();
                assert_eq!(p["cp"], -2);
                (f("len"), f("cp_first"), f("cp_size"), f("chunks"))
            })
            .collect();
        assert_eq!(
            chunked,
            [
                (40_000, 0, 8, 10),
                (9000, 0, 8, 3),
                (12_000, 0, 8, 3),
                (20_000, 0, 8, 5)
            ]
        );
        let mut parsed = parse_plan(&text).unwrap();
        assert_eq!(parsed.config, Some(cfg));
        check_groups(&cfg, &mut parsed.placements).unwrap();
        assert_eq!(parsed.placements, plan.placements());
        let mut a = OwnedEval::default();
        let ev = a.evaluate(&cfg, &lengths, &parsed.placements).unwrap();
        assert_eq!(ev.report.chunked_sequences, 4);
        assert!(ev.report.lower_bound.value <= ev.report.iteration_time);
        let table = report_text(&cfg, "h100", &lengths, 0, &ev);
        assert!(
            table.contains("chunked:                  4 sequences (ChunkSize 4096, K 1)"),
            "{table}"
        );
        assert!(
            table.contains("| sharded | chunked | time (ms) |"),
            "{table}"
        );
        let json: Value = serde_json::from_str(&report_json(&cfg, 0, &ev)).unwrap();
        assert_eq!(json["chunked_sequences"], 4);

        // By hand: 40,000 tokens chunked on CP rank 3 alone, 20,000 on ranks 4-7.
        let p = |micro_batch, cp_rank, cp_first, cp_size| Placement {
            dp_rank: 0,
            micro_batch,
            cp_rank,
            cp_first,
            cp_size,
        };
        let mut cfg = Config::new(1, 8, 13 * 1024, ModelShape::QWEN2_5_7B);
        cfg.chunking = Chunking::new(4096, 1);
        let lengths = [40_000u32, 20_000, 900];
        let placements = [p(0, CHUNKED, 3, 1), p(0, CHUNKED, 4, 4), p(0, 0, 0, 0)];
        let rebuilt = RebuiltPlan::new(&cfg, &lengths, &placements);
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();
        let peak = |len, g| cfg.budget().chunked(&cfg.chunking, len, g) as u32;
        let (one, four) = (peak(40_000, 1), peak(20_000, 4));
        assert_eq!(
            plan.rank_tokens(0),
            &[900, 0, 0, one, four, four, four, four]
        );
        let text = plan_json(&cfg, &lengths, &plan);
        assert!(text.contains("\"cp\": -2, \"cp_first\": 3, \"cp_size\": 1, \"kind\": \"chunked\", \"chunks\": 10}"), "{text}");
        let mut parsed = parse_plan(&text).unwrap();
        check_groups(&cfg, &mut parsed.placements).unwrap();
        assert_eq!(parsed.placements, placements);
        let ev = a.evaluate(&cfg, &lengths, &parsed.placements).unwrap();
        assert_eq!(ev.report.chunked_sequences, 2);
        assert_eq!(ev.report.peak_tokens, u64::from(one.max(four)));
    }

    #[test]
    fn bad_chunked_placements_are_named() {
        let mut cfg = Config::new(1, 8, 8192, ModelShape::QWEN2_5_7B);
        let chunked = |first: u16, size: u16| Placement {
            cp_rank: CHUNKED,
            cp_first: first,
            cp_size: size,
            ..Placement::default()
        };
        let mut p = [chunked(0, 8)];
        let err = check_groups(&cfg, &mut p).unwrap_err();
        assert!(err.contains("chunking is off"), "{err}");
        cfg.chunking = Chunking::new(4096, 1);
        let mut p = [chunked(0, 0), chunked(5, 1), chunked(4, 4)];
        check_groups(&cfg, &mut p).unwrap();
        assert_eq!(p[0].cp_size, 8, "absent: the whole group");
        for (first, size) in [(2, 4), (0, 3), (8, 1), (0, 16)] {
            let err = check_groups(&cfg, &mut [chunked(first, size)]).unwrap_err();
            assert!(err.contains("not a valid chunk group of CP 8"), "{err}");
        }
        let err = check_chunks(&cfg, &[4096], &[chunked(0, 8)]).unwrap_err();
        assert!(
            err.contains("sequence 0 (4096 tokens) is chunked, but it is not longer"),
            "{err}"
        );
        assert!(check_chunks(&cfg, &[4097], &[chunked(0, 8)]).is_ok());
        let kind = |k: &str, cp: i32| {
            parse_plan(&format!(
                r#"{{"placements": [{{"seq": 0, "dp": 0, "micro_batch": 0, "cp": {cp}, "kind": "{k}"}}]}}"#
            ))
        };
        assert!(kind("chunked", -2).is_ok());
        assert!(kind("local", 3).is_ok());
        let err = kind("chunked", -1).unwrap_err();
        assert!(
            err.contains("does not match \"cp\": -1 (a sharded sequence)"),
            "{err}"
        );
    }

    #[test]
    fn bad_groups_are_named() {
        let cfg = Config::new(1, 16, 4096, ModelShape::QWEN2_5_7B);
        let one = |first: u16, size: u16| {
            let mut p = [Placement {
                cp_rank: SHARDED,
                cp_first: first,
                cp_size: size,
                ..Placement::default()
            }];
            check_groups(&cfg, &mut p).map(|()| p[0])
        };
        assert_eq!(one(0, 16).unwrap().cp_size, 0, "whole group normalised");
        assert_eq!(one(0, 0).unwrap().cp_size, 0);
        assert_eq!(one(12, 4).unwrap().cp_first, 12);
        for (first, size, needle) in [
            (4, 0, "starts at rank 0"),
            (8, 16, "starts at rank 0"),
            (3, 1, "is local (\"cp\": 3)"),
            (2, 4, "CP ranks 2-5 are not a valid group of CP 16"),
            (
                0,
                6,
                "a sub-group size 2, 4, 8 with cp_first a multiple of it",
            ),
            (0, 32, "CP ranks 0-31"),
            (16, 8, "CP ranks 16-23"),
        ] {
            let err = one(first, size).unwrap_err();
            assert!(err.contains(needle), "{first} {size}: {err}");
            assert!(err.contains("plan: sequence 0"), "{err}");
        }
        let mut off = cfg;
        off.subgroups = false;
        let mut p = [Placement {
            cp_rank: SHARDED,
            cp_first: 8,
            cp_size: 8,
            ..Placement::default()
        }];
        let err = check_groups(&off, &mut p).unwrap_err();
        assert!(
            err.contains("CP ranks 8-15, but sub-groups are off"),
            "{err}"
        );
        let odd = Config::new(1, 6, 4096, ModelShape::QWEN2_5_7B);
        let mut p = [Placement {
            cp_rank: SHARDED,
            cp_first: 0,
            cp_size: 2,
            ..Placement::default()
        }];
        assert!(check_groups(&odd, &mut p).is_ok(), "2 divides 6");
        p[0].cp_size = 4;
        let err = check_groups(&odd, &mut p).unwrap_err();
        assert!(err.contains("size 2 with"), "{err}");
        let three = Config::new(1, 3, 4096, ModelShape::QWEN2_5_7B);
        p[0].cp_size = 2;
        let err = check_groups(&three, &mut p).unwrap_err();
        assert!(err.contains("CP 3 has no sub-group"), "{err}");
    }

    #[test]
    fn local_placements_name_their_own_rank_or_nothing() {
        let local = |extra: &str| {
            parse_plan(&format!(
                r#"{{"placements": [{{"seq": 0, "dp": 0, "micro_batch": 0, "cp": 5{extra}}}]}}"#
            ))
        };
        for ok in [
            "",
            r#", "cp_first": 5, "cp_size": 1"#,
            r#", "cp_first": 0, "cp_size": 0"#,
            r#", "cp_size": 1"#,
        ] {
            let p = local(ok).unwrap().placements[0];
            assert_eq!((p.cp_rank, p.cp_first, p.cp_size), (5, 0, 0), "{ok}");
        }
        for bad in [r#", "cp_first": 4, "cp_size": 1"#, r#", "cp_size": 2"#] {
            let err = local(bad).unwrap_err();
            assert!(err.contains("local on CP rank 5"), "{bad}: {err}");
        }
        let err = local(r#", "cp_first": 70000"#).unwrap_err();
        assert!(err.contains("below 65536"), "{err}");
        let sharded = parse_plan(
            r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": -1, "cp_size": 4}]}"#,
        )
        .unwrap();
        assert_eq!(sharded.placements[0].cp_size, 4);
        assert_eq!(sharded.placements[0].cp_first, 0);
    }

    #[test]
    fn bad_plans_name_the_entry() {
        assert!(parse_plan("{}").is_err());
        let dup = r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": 0},
                                      {"seq": 0, "dp": 0, "micro_batch": 0, "cp": 0}]}"#;
        assert!(parse_plan(dup).unwrap_err().contains("twice"));
        let bad_cp = r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": -3}]}"#;
        assert!(parse_plan(bad_cp).unwrap_err().contains("\"cp\""));
        let no_len = r#"{"placements": [{"seq": 0, "dp": 0, "micro_batch": 0, "cp": 0}]}"#;
        let p = parse_plan(no_len).unwrap();
        assert_eq!(p.lengths, None);
        assert_eq!(p.config, None);
    }
}
