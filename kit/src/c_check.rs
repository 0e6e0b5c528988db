//! An independent checker of a plan as the C ABI writes it (`skrull_schedule()`'s output
//! buffers), trusting nothing but the placements and the lengths.
//!
//! Used by the fuzz harnesses ([`crate::fuzz`]), the C-boundary properties
//! (`tests/c_boundary.rs`) and the bad-input matrix (`tests/bad_input.rs`).

use std::collections::BTreeMap;

use skrull::{skrull_cp_group, skrull_micro_batch, skrull_placement, skrull_summary};
use skrull_core::{Config, MicroBatch, Placement, ShardPadding};

use crate::check::{chunk_group_ok, chunked_peak};

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
    /// The CP group of each sequence, when the call was given a `cp_groups` buffer.
    pub cp_groups: Option<&'a [skrull_cp_group]>,
}

/// Tokens each of `g` GPUs holds of a sequence of `len` tokens sharded over them, from the
/// padding rule written out here (not the library's `Budget`): the padded length is a multiple
/// of `lcm(2g, M)` when `g > 1` and the sequence is padded at all (zigzag, or a pad multiple
/// `M > 1`), else of `M`; each GPU holds its even share, rounded up.
pub fn share_over(cfg: &Config, len: u32, g: u32) -> u32 {
    let (g, m) = (u64::from(g.max(1)), u64::from(cfg.pad_multiple.max(1)));
    let padded_at_all = cfg.shard_padding == ShardPadding::Zigzag || m > 1;
    let unit = if g > 1 && padded_at_all {
        let (mut a, mut b) = (2 * g, m);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        2 * g / a * m
    } else {
        m
    };
    let share = (u64::from(len).div_ceil(unit) * unit).div_ceil(g);
    u32::try_from(share).unwrap_or(u32::MAX)
}

/// Whether `(first, size)` is a group a sequence may be sharded over in a CP group of `cp`
/// ranks: the whole group, or (with `subgroups`) an aligned power-of-two block of `2..cp`
/// ranks that divides `cp`. Written out independently of the core's `CpGroup`.
pub fn shard_group_ok(cp: u32, subgroups: bool, first: u32, size: u32) -> bool {
    if size == cp {
        return first == 0;
    }
    subgroups
        && size >= 2
        && size < cp
        && size.is_power_of_two()
        && cp.is_multiple_of(size)
        && first.is_multiple_of(size)
        && first.checked_add(size).is_some_and(|end| end <= cp)
}

/// Checks a C plan from scratch: every sequence placed exactly once, DP and CP ranks in
/// range, micro-batch indices dense per DP rank, every group (when `cp_groups` was given; it
/// must be with sub-groups on) `{cp_rank, 1}` for a local sequence and the whole group or an
/// allowed aligned sub-group for a sharded one, a chunked one (`SKRULL_CHUNKED`) only with
/// chunking on, longer than one chunk, on a valid chunk group, no GPU above BucketSize,
/// `tokens_per_gpu` equal to the local charge (local), the share over its group (sharded,
/// recounted with [`share_over`]) or the chunked peak ([`chunked_peak`]), the micro-batch table sorted by
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
        let want = if cfg.micro_batches != 0 {
            cfg.micro_batches
        } else if cfg.lockstep_counts() {
            most
        } else {
            u
        };
        if declared != want {
            return Err(format!(
                "dp {d}: declares {declared} micro-batches, uses {u} (lockstep {}, fixed {})",
                cfg.lockstep, cfg.micro_batches
            ));
        }
    }
    // With filling, a rank runs an empty micro-batch only when each of its micro-batches
    // holds one sequence.
    if cfg.fills_empty() {
        let mut seqs = vec![0u32; dp];
        for pl in &p.placements[..n] {
            if let Some(c) = seqs.get_mut(pl.dp_rank as usize) {
                *c += 1;
            }
        }
        for (d, (&u, &k)) in used.iter().zip(&seqs).enumerate() {
            if u < per_dp[d] && u != k {
                return Err(format!(
                    "dp {d}: runs an empty micro-batch with {k} sequences in {u} micro-batches"
                ));
            }
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
    // Recount from the placements (and their groups) alone.
    if (cfg.subgroups || cfg.chunking.size != 0) && p.cp_groups.is_none() {
        return Err("no cp_groups buffer with sub-groups or chunking on".into());
    }
    if p.cp_groups.is_some_and(|g| g.len() < n) {
        return Err("cp_groups shorter than the plan".into());
    }
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
        let group = p.cp_groups.map(|g| (g[i].first, g[i].size));
        if pl.cp_rank == -1 {
            sharded += 1;
            let (first, size) = group.unwrap_or((0, cp as u32));
            if !shard_group_ok(cp as u32, cfg.subgroups, first, size) {
                return Err(format!(
                    "seq {i}: sharded over CP ranks {first}+{size} of {cp} (sub-groups {})",
                    cfg.subgroups
                ));
            }
            let share = share_over(cfg, len, size);
            if pl.tokens_per_gpu != share {
                return Err(format!(
                    "seq {i}: tokens_per_gpu {} != share {share} over {size} ranks",
                    pl.tokens_per_gpu
                ));
            }
            for r in first..first + size {
                *load.entry((pl.dp_rank, pl.micro_batch, r)).or_default() += u64::from(share);
            }
        } else if pl.cp_rank == -2 {
            let peak = check_chunked(cfg, i, len, pl, group)?;
            let (first, size) = group.unwrap_or((0, cp as u32));
            for r in first..first + size {
                *load.entry((pl.dp_rank, pl.micro_batch, r)).or_default() += peak;
            }
        } else if pl.cp_rank >= 0 && (pl.cp_rank as usize) < cp {
            if group.is_some_and(|g| g != (pl.cp_rank as u32, 1)) {
                return Err(format!(
                    "seq {i}: local on {} in group {group:?}",
                    pl.cp_rank
                ));
            }
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

/// Checks chunked placement `i` (`SKRULL_CHUNKED`) of a `len`-token sequence in `group`:
/// chunking on, longer than one chunk, a valid chunk group, `tokens_per_gpu` its peak
/// ([`chunked_peak`], at most `u32::MAX`). Returns that peak.
fn check_chunked(
    cfg: &Config,
    i: usize,
    len: u32,
    pl: &skrull_placement,
    group: Option<(u32, u32)>,
) -> Result<u64, String> {
    let Some((first, size)) = group else {
        return Err(format!("seq {i}: chunked without a cp_groups entry"));
    };
    if cfg.chunking.size == 0 || len <= cfg.chunking.size {
        return Err(format!(
            "seq {i}: chunked ({len} tokens) with chunk size {}",
            cfg.chunking.size
        ));
    }
    if !chunk_group_ok(cfg.cp, first, size) {
        return Err(format!(
            "seq {i}: chunked on CP ranks {first}+{size} of {}",
            cfg.cp
        ));
    }
    let peak = chunked_peak(cfg, len, size);
    if u64::from(pl.tokens_per_gpu) != peak {
        return Err(format!(
            "seq {i}: tokens_per_gpu {} != chunked peak {peak} over {size} ranks",
            pl.tokens_per_gpu
        ));
    }
    Ok(peak)
}

/// A C placement in the Rust API's type (`tokens_per_gpu` dropped), with its group from
/// `cp_groups` when given: a sub-group sets `cp_first` and `cp_size`, the whole group (of `cp`
/// ranks) and a local sequence leave them 0, as the Rust API writes them; a chunked sequence
/// always names its group.
pub fn core_placement(p: &skrull_placement, group: Option<skrull_cp_group>, cp: u32) -> Placement {
    let mut out = Placement {
        dp_rank: p.dp_rank,
        micro_batch: p.micro_batch,
        cp_rank: p.cp_rank,
        ..Placement::default()
    };
    if let Some(g) = group
        && ((p.cp_rank == -1 && g.size != cp) || p.cp_rank == -2)
    {
        out.cp_first = u16::try_from(g.first).unwrap_or(u16::MAX);
        out.cp_size = u16::try_from(g.size).unwrap_or(u16::MAX);
    }
    out
}

/// The CP group of a Rust API placement, as `skrull_schedule()` writes it: `{cp_rank, 1}`
/// local, `{0, cp}` whole, else `{cp_first, cp_size}`.
pub fn c_group(p: &Placement, cp: u32) -> skrull_cp_group {
    let (first, size) = if p.cp_rank >= 0 {
        (p.cp_rank as u32, 1)
    } else if p.cp_rank == -2 {
        (u32::from(p.cp_first), u32::from(p.cp_size))
    } else if p.cp_size == 0 || u32::from(p.cp_size) == cp {
        (0, cp)
    } else {
        (u32::from(p.cp_first), u32::from(p.cp_size))
    };
    skrull_cp_group { first, size }
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
    let groups: Vec<skrull_cp_group> = plan
        .placements()
        .iter()
        .map(|p| c_group(p, cfg.cp))
        .collect();
    let placements: Vec<skrull_placement> = plan
        .placements()
        .iter()
        .zip(lengths)
        .zip(&groups)
        .map(|((p, &len), g)| skrull_placement {
            dp_rank: p.dp_rank,
            micro_batch: p.micro_batch,
            cp_rank: p.cp_rank,
            tokens_per_gpu: if p.cp_rank == -1 {
                share_over(cfg, len, g.size)
            } else if p.cp_rank == -2 {
                u32::try_from(chunked_peak(cfg, len, g.size)).unwrap_or(u32::MAX)
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
            cp_groups: Some(&groups),
        },
    )
}
