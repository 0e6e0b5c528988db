//! The independent checker of a plan from the Rust API: trusts nothing but the placements and
//! the lengths, and shares no code with `skrull_core::plan::check`.

use std::collections::{BTreeMap, HashSet};

use skrull_core::{Config, Plan, ShardPadding};

/// Tokens each of `g` GPUs holds of a sequence of `len` tokens sharded over them, written out
/// from the padding rule: padded to `lcm(2g, M)` when `g > 1` and padded at all (zigzag, or a
/// pad multiple `M > 1`), else to `M`, then split evenly (rounding up).
fn share_over(cfg: &Config, len: u32, g: u32) -> u64 {
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
    (u64::from(len).div_ceil(unit) * unit).div_ceil(g)
}

/// The most tokens a sequence of `len` tokens run chunked holds on each GPU of a group of `g`
/// ranks, written out from the rule in `docs/chunking.md` (not the library's `Chunking::peak`):
/// `n = ceil(len / S)` chunks of `S` tokens (the last shorter), `k = clamp(K, 1, n)` kept;
/// alive at once the last `k` chunks (or, when `n > k`, one full recomputed chunk if that is
/// more), each charged what it costs one GPU of the group (its local charge on one GPU, else
/// its share over `g`), plus `ceil(ceil(len * state / 1000) / g)` of K/V state.
pub fn chunked_peak(cfg: &Config, len: u32, g: u32) -> u64 {
    let ch = &cfg.chunking;
    let size = u64::from(ch.size.max(1));
    let len64 = u64::from(len);
    let cost = |t: u64| {
        let t = t as u32;
        if g <= 1 {
            u64::from(cfg.local_tokens(t))
        } else {
            share_over(cfg, t, g)
        }
    };
    let n = len64.div_ceil(size);
    let k = u64::from(ch.keep).clamp(1, n.max(1));
    let chunk = |i: u64| size.min(len64.saturating_sub(i * size));
    let kept: u64 = (n.saturating_sub(k)..n).map(|i| cost(chunk(i))).sum();
    let live = if n > k { kept.max(cost(size)) } else { kept };
    let state = (len64 * u64::from(ch.state_permille)).div_ceil(1000);
    live + state.div_ceil(u64::from(g.max(1)))
}

/// Whether a chunked sequence may run on `(first, size)` in a CP group of `cp` ranks: one GPU,
/// the whole group, or an aligned power-of-two block that divides `cp` (whatever `subgroups`
/// says). Written out independently of the core's `CpGroup`.
pub fn chunk_group_ok(cp: u32, first: u32, size: u32) -> bool {
    if size == 1 {
        return first < cp;
    }
    (size == cp && first == 0)
        || (size >= 2
            && size < cp
            && size.is_power_of_two()
            && cp.is_multiple_of(size)
            && first.is_multiple_of(size)
            && first + size <= cp)
}

/// Checks a plan from scratch: every sequence exactly once, ranks in range (a chunked
/// sequence: chunking on, longer than one chunk, a valid group charged [`chunked_peak`] on
/// each GPU), micro-batch indices dense per DP rank, every GPU at most BucketSize, every
/// micro-batch at most C x N tokens (a chunked sequence counted at its peak on each GPU of its
/// group), the recorded token loads equal to the recount. Returns a description of the first problem.
pub fn independent_check(cfg: &Config, lengths: &[u32], plan: &Plan<'_>) -> Result<(), String> {
    let n = lengths.len();
    let (dp, cp, c) = (cfg.dp, cfg.cp, u64::from(cfg.bucket));
    if plan.placements().len() != n {
        return Err(format!(
            "{} placements for {n} sequences",
            plan.placements().len()
        ));
    }
    // Recount from placements only.
    let mut gpu: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
    let mut mb_total: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let mut used_mbs: BTreeMap<u32, HashSet<u32>> = BTreeMap::new();
    for (i, p) in plan.placements().iter().enumerate() {
        if p.dp_rank >= dp {
            return Err(format!("seq {i}: dp rank {} >= {dp}", p.dp_rank));
        }
        let len = u64::from(lengths[i]);
        used_mbs.entry(p.dp_rank).or_default().insert(p.micro_batch);
        // A chunked sequence holds only its peak on each GPU of its group at a time (it may
        // be longer than C x N): it is added below.
        if p.cp_rank != -2 {
            *mb_total.entry((p.dp_rank, p.micro_batch)).or_default() += len;
        }
        if p.cp_rank == -1 {
            // The whole group (cp_size 0 or N) or an aligned power-of-two sub-group.
            let (first, size) = match u32::from(p.cp_size) {
                0 => (0, cp),
                g => (u32::from(p.cp_first), g),
            };
            let aligned = size == cp && first == 0
                || (size >= 2
                    && size < cp
                    && size.is_power_of_two()
                    && cp % size == 0
                    && first % size == 0
                    && first + size <= cp);
            if !aligned || (!cfg.subgroups && size != cp) {
                return Err(format!("seq {i}: bad CP group {first}+{size} of {cp}"));
            }
            let share = share_over(cfg, lengths[i], size);
            for r in first..first + size {
                *gpu.entry((p.dp_rank, p.micro_batch, r)).or_default() += share;
            }
        } else if p.cp_rank == -2 {
            // Chunked: chunking on, longer than one chunk, on a valid group it charges its
            // peak on every GPU.
            let (first, size) = (u32::from(p.cp_first), u32::from(p.cp_size));
            if cfg.chunking.size == 0 || lengths[i] <= cfg.chunking.size {
                return Err(format!(
                    "seq {i}: chunked ({} tokens) with chunk size {}",
                    lengths[i], cfg.chunking.size
                ));
            }
            if !chunk_group_ok(cp, first, size) {
                return Err(format!("seq {i}: bad chunk group {first}+{size} of {cp}"));
            }
            let peak = chunked_peak(cfg, lengths[i], size);
            *mb_total.entry((p.dp_rank, p.micro_batch)).or_default() += peak * u64::from(size);
            for r in first..first + size {
                *gpu.entry((p.dp_rank, p.micro_batch, r)).or_default() += peak;
            }
        } else if p.cp_first != 0 || p.cp_size != 0 {
            return Err(format!("seq {i}: a local sequence names a CP group"));
        } else if p.cp_rank >= 0 && (p.cp_rank as u32) < cp {
            *gpu.entry((p.dp_rank, p.micro_batch, p.cp_rank as u32))
                .or_default() += u64::from(cfg.local_tokens(lengths[i]));
        } else {
            return Err(format!("seq {i}: cp rank {} out of range", p.cp_rank));
        }
    }
    for (&(d, m, r), &t) in &gpu {
        if t > c {
            return Err(format!("dp {d} mb {m} cp {r}: {t} tokens > bucket {c}"));
        }
    }
    for (&(d, m), &t) in &mb_total {
        if t > c * u64::from(cp) {
            return Err(format!("dp {d} mb {m}: {t} tokens > C x N"));
        }
    }
    // Micro-batch indices of each DP rank are 0..count, and count matches the plan (with
    // lockstep: every rank declares the most any rank uses; with a fixed count, that count).
    // With filling, a rank that declares more than it uses holds one sequence in each.
    let most = (0..dp)
        .map(|d| used_mbs.get(&d).map_or(0, HashSet::len) as u32)
        .max()
        .unwrap_or(0);
    for d in 0..dp {
        let used = used_mbs.get(&d).map_or(0, HashSet::len) as u32;
        let declared = plan.micro_batches_per_dp()[d as usize];
        let expected = if cfg.micro_batches != 0 {
            cfg.micro_batches
        } else if cfg.lockstep_counts() {
            most
        } else {
            used
        };
        if declared != expected {
            return Err(format!(
                "dp {d}: {used} micro-batches used, {declared} declared"
            ));
        }
        let seqs = plan.placements().iter().filter(|p| p.dp_rank == d).count() as u32;
        if cfg.fills_empty() && used < declared && used != seqs {
            return Err(format!(
                "dp {d}: an empty micro-batch with {seqs} sequences in {used} micro-batches"
            ));
        }
        if let Some(set) = used_mbs.get(&d)
            && (0..used).any(|m| !set.contains(&m))
        {
            return Err(format!("dp {d}: micro-batch indices are not dense"));
        }
    }
    // The grouped view lists every sequence once, under its own micro-batch, with the loads
    // the recount gives.
    let mut seen = vec![false; n];
    for (g, mb) in plan.micro_batches().iter().enumerate() {
        for &s in plan.members_of(mb) {
            let s = s as usize;
            if s >= n || seen[s] {
                return Err(format!("seq {s} listed twice or out of range"));
            }
            seen[s] = true;
            let p = plan.placements()[s];
            if (p.dp_rank, p.micro_batch) != (mb.dp_rank, mb.index) {
                return Err(format!("seq {s} listed under the wrong micro-batch"));
            }
        }
        for r in 0..cp {
            let want = gpu.get(&(mb.dp_rank, mb.index, r)).copied().unwrap_or(0);
            if u64::from(plan.rank_tokens(g)[r as usize]) != want {
                return Err(format!(
                    "micro-batch {g} cp {r}: recorded load differs from recount"
                ));
            }
        }
    }
    if let Some(s) = seen.iter().position(|&x| !x) {
        return Err(format!("seq {s} is not listed in any micro-batch"));
    }
    if cfg.max_micro_batches != 0
        && plan
            .micro_batches_per_dp()
            .iter()
            .any(|&m| m > cfg.max_micro_batches)
    {
        return Err("micro-batch limit exceeded".into());
    }
    Ok(())
}
