//! The stable JSON form of a plan (`skrull plan --format json`), and the table form.

use std::fmt::Write;

use skrull_core::{Config, FlopsFormula, Plan};

use crate::args::model_name;

/// The `"config"` object.
pub fn config_json(cfg: &Config) -> String {
    format!(
        "{{\"dp\": {}, \"cp\": {}, \"bucket_tokens\": {}, \"policy\": \"{}\", \"victim\": \"{}\", \
         \"model\": \"{}\", \"flops\": \"{}\", \"max_micro_batches\": {}, \"shard_padding\": \"{}\", \
         \"pad_multiple\": {}, \"pad_local\": {}, \"lockstep\": {}}}",
        cfg.dp,
        cfg.cp,
        cfg.bucket,
        cfg.policy.name(),
        cfg.victim.name(),
        model_name(&cfg.model),
        match cfg.flops {
            FlopsFormula::Paper => "paper",
            FlopsFormula::Megatron => "megatron",
        },
        cfg.max_micro_batches,
        cfg.shard_padding.name(),
        cfg.pad_multiple,
        cfg.pad_local,
        cfg.lockstep
    )
}

/// The whole plan as JSON: config, summary, placements (in input order; `cp = -1` means
/// sharded), micro-batches per DP rank and tokens per (DP rank, micro-batch, CP rank).
pub fn plan_json(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> String {
    let s = plan.summary();
    let mut out = String::with_capacity(64 * lengths.len() + 256);
    let _ = write!(
        out,
        "{{\"config\": {},\n \"summary\": {{\"sequences\": {}, \"total_tokens\": {}, \
         \"micro_batches\": {}, \"sharded\": {}, \"rollbacks\": {}, \"peak_rank_tokens\": {}}},\n",
        config_json(cfg),
        lengths.len(),
        s.total_tokens,
        s.micro_batches,
        s.sharded,
        s.rollbacks,
        s.peak_rank_tokens
    );
    out.push_str(" \"placements\": [");
    for (seq, p) in plan.placements().iter().enumerate() {
        if seq > 0 {
            out.push_str(",\n   ");
        }
        let _ = write!(
            out,
            "{{\"seq\": {seq}, \"len\": {}, \"dp\": {}, \"micro_batch\": {}, \"cp\": {}}}",
            lengths[seq], p.dp_rank, p.micro_batch, p.cp_rank
        );
    }
    out.push_str("],\n \"micro_batches_per_dp\": ");
    push_list(&mut out, plan.micro_batches_per_dp().iter());
    out.push_str(",\n \"rank_tokens\": [");
    let empty = vec![0u32; cfg.cp as usize];
    for (d, &count) in plan.micro_batches_per_dp().iter().enumerate() {
        if d > 0 {
            out.push_str(",\n   ");
        }
        out.push('[');
        for j in 0..count {
            if j > 0 {
                out.push_str(", ");
            }
            // An empty lockstep micro-batch holds no token.
            let tokens = match plan.find(d as u32, j) {
                Some(g) => plan.rank_tokens(g),
                None => &empty[..],
            };
            push_list(&mut out, tokens.iter());
        }
        out.push(']');
    }
    out.push_str("]}\n");
    out
}

fn push_list<'a>(out: &mut String, it: impl Iterator<Item = &'a u32>) {
    out.push('[');
    for (i, v) in it.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{v}");
    }
    out.push(']');
}

/// A human-readable table: one line per micro-batch.
pub fn plan_table(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> String {
    let s = plan.summary();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "policy {} | DP {} x CP {} | BucketSize {} tokens/GPU | {} sequences, {} tokens",
        cfg.policy.name(),
        cfg.dp,
        cfg.cp,
        cfg.bucket,
        lengths.len(),
        s.total_tokens
    );
    let _ = writeln!(
        out,
        "micro-batches per DP rank {:?} | sharded {} | rollbacks {} | peak {} tokens/GPU ({:.1}% of budget)",
        plan.micro_batches_per_dp(),
        s.sharded,
        s.rollbacks,
        s.peak_rank_tokens,
        100.0 * f64::from(s.peak_rank_tokens) / f64::from(cfg.bucket)
    );
    let _ = writeln!(
        out,
        "| DP | MB | seqs | local | sharded | longest | tokens per CP rank |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for (g, mb) in plan.micro_batches().iter().enumerate() {
        let members = plan.members_of(mb);
        let sharded = members
            .iter()
            .filter(|&&q| plan.placements()[q as usize].is_sharded())
            .count();
        let longest = members
            .iter()
            .map(|&q| lengths[q as usize])
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:?} |",
            mb.dp_rank,
            mb.index,
            members.len(),
            members.len() - sharded,
            sharded,
            longest,
            plan.rank_tokens(g)
        );
    }
    out
}
