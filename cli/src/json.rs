//! The stable JSON form of a plan (`skrull plan --format json`), and the table form.

use std::fmt::Write;

use skrull_core::{Config, CpGroup, Plan};

/// The `"config"` object ([`config_keys::write`](crate::config_keys::write())).
pub fn config_json(cfg: &Config) -> String {
    crate::config_keys::write(cfg)
}

/// The whole plan as JSON: config, summary, placements (in input order; `cp = -1` means
/// sharded, `cp = -2` chunked; `cp_first` and `cp_size` name the CP ranks that hold the
/// sequence: `r, 1` for a local one, `0, N` for the whole group, else its sub-group or, for a
/// chunked one, the GPU or aligned group that runs its chunks), micro-batches per DP rank and
/// tokens per (DP rank, micro-batch, CP rank). A chunked placement also carries `"kind":
/// "chunked"` and `"chunks"` (how many chunks of the configuration's ChunkSize), and with
/// chunking on the summary counts `"chunked"` sequences; without chunking the text is what it
/// was before chunking existed.
pub fn plan_json(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> String {
    let s = plan.summary();
    let mut out = String::with_capacity(64 * lengths.len() + 256);
    let chunked = if cfg.chunking.is_on() {
        format!(", \"chunked\": {}", s.chunked)
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "{{\"config\": {},\n \"summary\": {{\"sequences\": {}, \"total_tokens\": {}, \
         \"micro_batches\": {}, \"sharded\": {}{chunked}, \"rollbacks\": {}, \
         \"peak_rank_tokens\": {}}},\n",
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
        let group = p.group(cfg.cp);
        let _ = write!(
            out,
            "{{\"seq\": {seq}, \"len\": {}, \"dp\": {}, \"micro_batch\": {}, \"cp\": {}, \
             \"cp_first\": {}, \"cp_size\": {}",
            lengths[seq], p.dp_rank, p.micro_batch, p.cp_rank, group.first, group.size
        );
        if p.is_chunked() {
            let chunks = cfg.chunking.count(lengths[seq]);
            let _ = write!(out, ", \"kind\": \"chunked\", \"chunks\": {chunks}");
        }
        out.push('}');
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

/// `shard 8-15`: the CP ranks of a sub-group shard.
pub fn shard_label(group: CpGroup) -> String {
    format!("shard {}-{}", group.first, group.first + group.size - 1)
}

/// The sharded count of a micro-batch, followed by its sub-group shards when it has any:
/// `3`, or `3 (shard 0-3, shard 8-15 x2)` (the rest span the whole group).
fn sharded_cell(cfg: &Config, plan: &Plan<'_>, members: &[u32]) -> String {
    let placements = plan.placements();
    let sharded = members
        .iter()
        .filter(|&&q| placements[q as usize].is_sharded())
        .count();
    let mut groups: Vec<CpGroup> = members
        .iter()
        .map(|&q| placements[q as usize])
        .filter(|p| p.is_subgroup(cfg.cp))
        .map(|p| p.group(cfg.cp))
        .collect();
    if groups.is_empty() {
        return sharded.to_string();
    }
    groups.sort_by_key(|g| (g.first, g.size));
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < groups.len() {
        let same = groups[i..].iter().take_while(|&&g| g == groups[i]).count();
        let label = shard_label(groups[i]);
        parts.push(if same > 1 {
            format!("{label} x{same}")
        } else {
            label
        });
        i += same;
    }
    format!("{sharded} ({})", parts.join(", "))
}

/// `ranks 0-7` or `rank 3`: the CP ranks of a group.
fn ranks_label(group: CpGroup) -> String {
    if group.size == 1 {
        format!("rank {}", group.first)
    } else {
        format!("ranks {}-{}", group.first, group.first + group.size - 1)
    }
}

/// The chunked sequences of a micro-batch: how many, and the text of its table cell, `0` or
/// `1 (13 chunks on ranks 0-7)`, one part per chunked sequence.
fn chunked_cell(
    cfg: &Config,
    lengths: &[u32],
    plan: &Plan<'_>,
    members: &[u32],
) -> (usize, String) {
    let parts: Vec<String> = members
        .iter()
        .filter(|&&q| plan.placements()[q as usize].is_chunked())
        .map(|&q| {
            let p = plan.placements()[q as usize];
            let chunks = cfg.chunking.count(lengths[q as usize]);
            format!("{chunks} chunks on {}", ranks_label(p.group(cfg.cp)))
        })
        .collect();
    if parts.is_empty() {
        (0, "0".into())
    } else {
        (
            parts.len(),
            format!("{} ({})", parts.len(), parts.join(", ")),
        )
    }
}

/// A human-readable table: one line per micro-batch. The sharded column lists the
/// micro-batch's sub-group shards after its count (see `sharded_cell`); with chunking on, a
/// chunked column lists each chunked sequence's chunk count and ranks.
pub fn plan_table(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> String {
    let s = plan.summary();
    let chunking = cfg.chunking.is_on();
    let in_subgroups = plan
        .placements()
        .iter()
        .filter(|p| p.is_subgroup(cfg.cp))
        .count();
    let sharded = if in_subgroups > 0 {
        format!("{} ({in_subgroups} over sub-groups)", s.sharded)
    } else {
        s.sharded.to_string()
    };
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
    let chunked = if chunking {
        format!(
            " | chunked {} (ChunkSize {}, K {})",
            s.chunked, cfg.chunking.size, cfg.chunking.keep
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "micro-batches per DP rank {:?} | sharded {}{chunked} | rollbacks {} | peak {} tokens/GPU ({:.1}% of budget)",
        plan.micro_batches_per_dp(),
        sharded,
        s.rollbacks,
        s.peak_rank_tokens,
        100.0 * f64::from(s.peak_rank_tokens) / f64::from(cfg.bucket)
    );
    if chunking {
        let _ = writeln!(
            out,
            "| DP | MB | seqs | local | sharded | chunked | longest | tokens per CP rank |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    } else {
        let _ = writeln!(
            out,
            "| DP | MB | seqs | local | sharded | longest | tokens per CP rank |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    }
    for (g, mb) in plan.micro_batches().iter().enumerate() {
        let members = plan.members_of(mb);
        let sharded = members
            .iter()
            .filter(|&&q| plan.placements()[q as usize].is_sharded())
            .count();
        let sharded_text = sharded_cell(cfg, plan, members);
        let (chunked, chunked_text) = chunked_cell(cfg, lengths, plan, members);
        let chunked_text = if chunking {
            format!("{chunked_text} | ")
        } else {
            String::new()
        };
        let longest = members
            .iter()
            .map(|&q| lengths[q as usize])
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {chunked_text}{} | {:?} |",
            mb.dp_rank,
            mb.index,
            members.len(),
            members.len() - sharded - chunked,
            sharded_text,
            longest,
            plan.rank_tokens(g)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rebuild::RebuiltPlan;
    use skrull_core::{ModelShape, Placement};

    #[test]
    fn the_table_lists_sub_group_shards() {
        let cfg = Config::new(1, 16, 8192, ModelShape::QWEN2_5_7B);
        let lengths = [30_000u32, 16_000, 8000, 3000, 2000, 100, 900];
        let p = |micro_batch, cp_rank, cp_first, cp_size| Placement {
            dp_rank: 0,
            micro_batch,
            cp_rank,
            cp_first,
            cp_size,
        };
        let placements = [
            p(0, -1, 0, 0),
            p(0, -1, 8, 8),
            p(0, -1, 8, 8),
            p(0, -1, 0, 4),
            p(1, -1, 0, 0),
            p(1, 3, 0, 0),
            p(1, 12, 0, 0),
        ];
        let rebuilt = RebuiltPlan::new(&cfg, &lengths, &placements);
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();
        let table = plan_table(&cfg, &lengths, &plan);
        assert!(
            table.contains("| sharded 5 (3 over sub-groups) | rollbacks 0 |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 | 0 | 4 | 0 | 4 (shard 0-3, shard 8-15 x2) | 30000 |"),
            "{table}"
        );
        assert!(table.contains("| 0 | 1 | 3 | 2 | 1 | 2000 |"), "{table}");
        let json = plan_json(&cfg, &lengths, &plan);
        assert!(
            json.contains("\"subgroups\": true, \"fill_empty\": false, \"micro_batches\": 0}"),
            "{json}"
        );
        assert!(
            json.contains("\"cp\": -1, \"cp_first\": 8, \"cp_size\": 8}"),
            "{json}"
        );
        assert!(
            json.contains("\"cp\": 12, \"cp_first\": 12, \"cp_size\": 1}"),
            "{json}"
        );
        assert!(
            json.contains("\"cp\": -1, \"cp_first\": 0, \"cp_size\": 16}"),
            "{json}"
        );
        // No sub-group: the table reads as before.
        let whole = RebuiltPlan::new(&cfg, &lengths[4..], &placements[4..]);
        let mut per_dp = whole.plan(&cfg, &lengths[4..]);
        assert!(per_dp.is_err(), "micro-batch 0 is missing");
        let shifted: Vec<Placement> = placements[4..]
            .iter()
            .map(|&q| Placement {
                micro_batch: 0,
                ..q
            })
            .collect();
        let whole = RebuiltPlan::new(&cfg, &lengths[4..], &shifted);
        per_dp = whole.plan(&cfg, &lengths[4..]);
        let table = plan_table(&cfg, &lengths[4..], &per_dp.unwrap());
        assert!(table.contains("| sharded 1 | rollbacks 0 |"), "{table}");
        assert!(table.contains("| 0 | 0 | 3 | 2 | 1 | 2000 |"), "{table}");
        assert_eq!(shard_label(CpGroup { first: 8, size: 8 }), "shard 8-15");
    }

    #[test]
    fn the_table_lists_chunked_sequences_with_their_chunks_and_ranks() {
        let mut cfg = Config::new(1, 8, 13 * 1024, ModelShape::QWEN2_5_7B);
        cfg.chunking = skrull_core::Chunking::new(4096, 2);
        let lengths = [40_000u32, 20_000, 900, 5000];
        let p = |micro_batch, cp_rank, cp_first, cp_size| Placement {
            dp_rank: 0,
            micro_batch,
            cp_rank,
            cp_first,
            cp_size,
        };
        let placements = [
            p(0, -2, 3, 1),
            p(0, -2, 4, 4),
            p(0, 0, 0, 0),
            p(1, -1, 0, 0),
        ];
        let rebuilt = RebuiltPlan::new(&cfg, &lengths, &placements);
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();
        let table = plan_table(&cfg, &lengths, &plan);
        assert!(
            table.contains("| sharded 1 | chunked 2 (ChunkSize 4096, K 2) |"),
            "{table}"
        );
        assert!(
            table.contains("| DP | MB | seqs | local | sharded | chunked | longest |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| 0 | 0 | 3 | 1 | 0 | 2 (10 chunks on rank 3, 5 chunks on ranks 4-7) | 40000 |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| 0 | 1 | 1 | 0 | 1 | 0 | 5000 |"),
            "{table}"
        );
    }
}
