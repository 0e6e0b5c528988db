//! An independent checker of a plan as the C ABI writes it (`skrull_schedule()`'s output
//! buffers), trusting nothing but the placements and the lengths.
//!
//! Used by the fuzz harnesses ([`crate::fuzz`]), the C-boundary properties
//! (`tests/c_boundary.rs`) and the bad-input matrix (`tests/bad_input.rs`).

use std::collections::BTreeMap;

use skrull::{skrull_micro_batch, skrull_placement, skrull_summary};
use skrull_core::{Config, MicroBatch, Placement};

/// The output buffers of one successful `skrull_schedule()` call, each at least as long as
/// `skrull_plan_sizes()` says.
pub struct CPlan<'a> {
    /// One placement per sequence.
    pub placements: &'a [skrull_placement],
    /// The micro-batch table.
    pub micro_batches: &'a [skrull_micro_batch],
    /// The sequences of each micro-batch, grouped.
    pub members: &'a [u32],
    /// The tokens of each CP rank, per micro-batch.
    pub rank_tokens: &'a [u32],
    /// The micro-batch count of each DP rank.
    pub per_dp: &'a [u32],
    /// The summary.
    pub summary: &'a skrull_summary,
}

/// Checks a C plan from scratch: every sequence placed exactly once, DP and CP ranks in
/// range, micro-batch indices dense per DP rank, no GPU above BucketSize, `tokens_per_gpu`
/// equal to the local charge (local) or the shard (sharded), the micro-batch table sorted by
/// (DP rank, index) and listing every sequence once under its own micro-batch, recorded loads
/// equal to the recount, the summary equal to the recount and the micro-batch limit held.
/// Returns a description of the first problem.
pub fn check_c_plan(cfg: &Config, lengths: &[u32], p: &CPlan<'_>) -> Result<(), String> {
    let n = lengths.len();
    let (dp, cp, bucket) = (cfg.dp as usize, cfg.cp as usize, u64::from(cfg.bucket));
    let s = p.summary;
    if s.sequences as usize != n {
        return Err(format!(
            "summary.sequences {} for {n} sequences",
            s.sequences
        ));
    }
    let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    if s.total_tokens != total {
        return Err(format!(
            "summary.total_tokens {} != {total}",
            s.total_tokens
        ));
    }
    if s._reserved != 0 {
        return Err("summary._reserved is nonzero".into());
    }
    if p.placements.len() < n || p.members.len() < n || p.per_dp.len() < dp {
        return Err("output buffers shorter than the plan".into());
    }
    let per_dp = &p.per_dp[..dp];
    let mbs = s.micro_batches as usize;
    if mbs > n || mbs > p.micro_batches.len() || mbs * cp > p.rank_tokens.len() {
        return Err(format!("{mbs} micro-batches for {n} sequences"));
    }
    // Micro-batches each DP rank's sequences use: with lockstep every rank declares the
    // most any rank uses (its extra ones empty and unlisted), otherwise its own count.
    let mut used = vec![0u32; dp];
    for pl in &p.placements[..n] {
        if let Some(u) = used.get_mut(pl.dp_rank as usize) {
            *u = (*u).max(pl.micro_batch.saturating_add(1));
        }
    }
    let most = used.iter().copied().max().unwrap_or(0);
    for (d, (&u, &declared)) in used.iter().zip(per_dp).enumerate() {
        let want = if cfg.lockstep { most } else { u };
        if declared != want {
            return Err(format!(
                "dp {d}: declares {declared} micro-batches, uses {u} (lockstep {})",
                cfg.lockstep
            ));
        }
    }
    let listed: u64 = used.iter().map(|&m| u64::from(m)).sum();
    if listed != mbs as u64 {
        return Err(format!(
            "the placements use {listed} micro-batches, summary says {mbs}"
        ));
    }
    if cfg.max_micro_batches != 0 && per_dp.iter().any(|&m| m > cfg.max_micro_batches) {
        return Err("micro-batch limit exceeded".into());
    }
    // Recount from the placements alone.
    let mut load: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
    let mut sharded = 0u32;
    for (i, pl) in p.placements[..n].iter().enumerate() {
        let len = lengths[i];
        if pl.dp_rank as usize >= dp {
            return Err(format!("seq {i}: dp rank {} >= {dp}", pl.dp_rank));
        }
        if pl.micro_batch >= per_dp[pl.dp_rank as usize] {
            return Err(format!(
                "seq {i}: micro-batch {} >= {} declared for dp {}",
                pl.micro_batch, per_dp[pl.dp_rank as usize], pl.dp_rank
            ));
        }
        if pl.cp_rank == -1 {
            sharded += 1;
            let share = cfg.shard_tokens(len);
            if pl.tokens_per_gpu != share {
                return Err(format!(
                    "seq {i}: tokens_per_gpu {} != shard {share}",
                    pl.tokens_per_gpu
                ));
            }
            for r in 0..cp as u32 {
                *load.entry((pl.dp_rank, pl.micro_batch, r)).or_default() += u64::from(share);
            }
        } else if pl.cp_rank >= 0 && (pl.cp_rank as usize) < cp {
            let held = cfg.local_tokens(len);
            if pl.tokens_per_gpu != held {
                return Err(format!(
                    "seq {i}: tokens_per_gpu {} != local charge {held}",
                    pl.tokens_per_gpu
                ));
            }
            *load
                .entry((pl.dp_rank, pl.micro_batch, pl.cp_rank as u32))
                .or_default() += u64::from(held);
        } else {
            return Err(format!("seq {i}: cp rank {} out of range", pl.cp_rank));
        }
    }
    if sharded != s.sharded {
        return Err(format!(
            "{sharded} sequences sharded, summary says {}",
            s.sharded
        ));
    }
    let peak = load.values().copied().max().unwrap_or(0);
    if peak > bucket {
        return Err(format!("a GPU holds {peak} tokens > bucket {bucket}"));
    }
    if u64::from(s.peak_rank_tokens) != peak {
        return Err(format!(
            "summary.peak_rank_tokens {} != {peak}",
            s.peak_rank_tokens
        ));
    }
    // The table: (dp, index) in order, members grouped by micro-batch, loads as recounted.
    let mut seen = vec![false; n];
    let mut g = 0usize;
    let mut offset = 0usize;
    for (d, &count) in used.iter().enumerate() {
        for index in 0..count {
            let mb = p.micro_batches[g];
            if (mb.dp_rank as usize, mb.index) != (d, index) {
                return Err(format!(
                    "table entry {g} is ({}, {}), expected ({d}, {index})",
                    mb.dp_rank, mb.index
                ));
            }
            if mb.count == 0 {
                return Err(format!("table entry {g} is empty"));
            }
            let (first, cnt) = (mb.first as usize, mb.count as usize);
            if first != offset || first + cnt > n {
                return Err(format!(
                    "table entry {g}: members {first}+{cnt} not contiguous"
                ));
            }
            offset += cnt;
            for &m in &p.members[first..first + cnt] {
                let m = m as usize;
                if m >= n || seen[m] {
                    return Err(format!("seq {m} listed twice or out of range"));
                }
                seen[m] = true;
                let pl = p.placements[m];
                if (pl.dp_rank, pl.micro_batch) != (mb.dp_rank, mb.index) {
                    return Err(format!("seq {m} listed under the wrong micro-batch"));
                }
            }
            for r in 0..cp {
                let want = load
                    .get(&(mb.dp_rank, mb.index, r as u32))
                    .copied()
                    .unwrap_or(0);
                let got = u64::from(p.rank_tokens[g * cp + r]);
                if got != want {
                    return Err(format!(
                        "table entry {g} cp {r}: load {got} != recount {want}"
                    ));
                }
            }
            g += 1;
        }
    }
    if let Some(m) = seen.iter().position(|&x| !x) {
        return Err(format!("seq {m} is not listed in any micro-batch"));
    }
    Ok(())
}

/// A C placement in the Rust API's type (`tokens_per_gpu` dropped).
pub fn core_placement(p: &skrull_placement) -> Placement {
    Placement {
        dp_rank: p.dp_rank,
        micro_batch: p.micro_batch,
        cp_rank: p.cp_rank,
        ..Placement::default()
    }
}

/// A C micro-batch record in the Rust API's type.
pub fn core_micro_batch(m: &skrull_micro_batch) -> MicroBatch {
    MicroBatch {
        dp_rank: m.dp_rank,
        index: m.index,
        first: m.first,
        count: m.count,
    }
}

/// Checks a Rust API plan with the same checker: the plan is rewritten in the C records
/// (`tokens_per_gpu` from the placement alone, the summary as the plan states it) and
/// checked from its placements and the lengths.
pub fn check_rust_plan(
    cfg: &Config,
    lengths: &[u32],
    plan: &skrull_core::Plan<'_>,
) -> Result<(), String> {
    let n = lengths.len();
    if plan.placements().len() != n {
        return Err(format!(
            "{} placements for {n} sequences",
            plan.placements().len()
        ));
    }
    let placements: Vec<skrull_placement> = plan
        .placements()
        .iter()
        .zip(lengths)
        .map(|(p, &len)| skrull_placement {
            dp_rank: p.dp_rank,
            micro_batch: p.micro_batch,
            cp_rank: p.cp_rank,
            tokens_per_gpu: if p.cp_rank == -1 {
                cfg.shard_tokens(len)
            } else {
                cfg.local_tokens(len)
            },
        })
        .collect();
    let micro_batches: Vec<skrull_micro_batch> = plan
        .micro_batches()
        .iter()
        .map(|m| skrull_micro_batch {
            dp_rank: m.dp_rank,
            index: m.index,
            first: m.first,
            count: m.count,
        })
        .collect();
    let rank_tokens: Vec<u32> = (0..micro_batches.len())
        .flat_map(|g| plan.rank_tokens(g).to_vec())
        .collect();
    let s = plan.summary();
    if s.micro_batches as usize != micro_batches.len() {
        return Err("summary.micro_batches differs from the table".into());
    }
    let summary = skrull_summary {
        total_tokens: s.total_tokens,
        sequences: n as u32,
        micro_batches: s.micro_batches,
        sharded: s.sharded,
        rollbacks: s.rollbacks,
        peak_rank_tokens: s.peak_rank_tokens,
        _reserved: 0,
    };
    check_c_plan(
        cfg,
        lengths,
        &CPlan {
            placements: &placements,
            micro_batches: &micro_batches,
            members: plan.members(),
            rank_tokens: &rank_tokens,
            per_dp: plan.micro_batches_per_dp(),
            summary: &summary,
        },
    )
}
