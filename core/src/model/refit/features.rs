//! [`RefitState::observe`]: a plan and its measured times become [`Row`]s.
//!
//! The features of one (micro-batch, GPU) are the prior's time of each term of the rank time
//! (`docs/cost_model.md`, section 1), so that the rank time of a model whose coefficients are
//! `c` (relative to the prior) is
//!
//! ```text
//! comm   = c3·LAT_INTRA + c4·BW_INTRA + c5·LAT_INTER + c6·BW_INTER
//! window = c2·(A_LOCAL + c7·A_SHARDED) + c10·LOCALS
//! t      = c0·FIXED + c1·GEMM + max(comm, window) + c2·(1 − c7)·A_SHARDED + c8·SEQS + c9·LAST
//! ```
//!
//! which with every `c` = 1 (and `c7` the prior's overlap, `c9` 0) is what the evaluator
//! computes. `LAST` is 1 ms on the GPUs of each DP rank's last micro-batch of the step under
//! `Synchronisation::Sharded` (DDP under `no_sync`, which reduces the gradients in that
//! micro-batch's backward): the per-step work a trainer does there, which the evaluator
//! counts once per step (`iteration_fixed_s`). Under the other synchronisations the
//! gradients are reduced outside the micro-batches or in every one, and `LAST` is 0.

use crate::config::limits::MAX_SEQ_LEN;
use crate::config::options::Synchronisation;
use crate::model::refit::{FEATURES, LAST_UNIT_S, RefitError, RefitState, Row};
use crate::model::time::{Ring, TimeModel};
use crate::plan::Placement;

/// Feature index: the fixed cost unit.
pub const FIXED: usize = 0;
/// Feature index: GEMM time.
pub const GEMM: usize = 1;
/// Feature index: attention of the sequences held whole on the GPU.
pub const A_LOCAL: usize = 2;
/// Feature index: attention of the GPU's shards of sharded sequences.
pub const A_SHARDED: usize = 3;
/// Feature index: ring latency of rings inside one node.
pub const LAT_INTRA: usize = 4;
/// Feature index: ring traffic of rings inside one node.
pub const BW_INTRA: usize = 5;
/// Feature index: ring latency of rings across nodes.
pub const LAT_INTER: usize = 6;
/// Feature index: ring traffic of rings across nodes.
pub const BW_INTER: usize = 7;
/// Feature index: the sharded sequences the GPU holds a share of, times the unit of the fixed
/// cost per sharded sequence.
pub const SEQS: usize = 8;
/// Feature index: [`LAST_UNIT_S`] on the GPUs of a DP rank's last micro-batch of the step.
pub const LAST: usize = 9;
/// Feature index: the sequences held whole on the GPU, times the unit of the cost per whole
/// sequence.
pub const LOCALS: usize = 10;

const _: () = assert!(LOCALS + 1 == FEATURES);

/// Whether micro-batch `group` (`micro-batch · dp + DP rank`) of step `step` is held out of
/// the fit: one in `holdout` by a hash of the two (none for `holdout` 0).
pub fn held_out(step: u64, group: u64, holdout: u32) -> bool {
    if holdout == 0 {
        return false;
    }
    // SplitMix64's finaliser: every bit of the step and the group moves the result.
    let mut z = step
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(group.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(0x94d0_49bb_1331_11eb);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.is_multiple_of(u64::from(holdout))
}

/// Which rows of the window a fit or an error reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subset {
    /// Every valid row.
    All,
    /// The rows the fit learns from (not held out).
    Train,
    /// The held-out rows.
    HeldOut,
}

impl Subset {
    /// Whether `row` belongs to this subset.
    pub fn holds(self, row: &Row) -> bool {
        match self {
            Subset::All => true,
            Subset::Train => row.heldout == 0,
            Subset::HeldOut => row.heldout != 0,
        }
    }
}

/// Bit of [`Row::rings`] for the whole CP group's ring.
const WHOLE_RING: u32 = 1 << 7;

/// Adds a sequence of `len` tokens sharded over `ring` to a row's communication terms (the
/// ring's latency once per micro-batch, flagged by `bit`).
fn add_comm(tm: &TimeModel, row: &mut Row, ring: Ring, len: u32, bit: u32) {
    if ring.size <= 1 {
        return;
    }
    let (lat, bw) = if ring.crosses_nodes {
        (LAT_INTER, BW_INTER)
    } else {
        (LAT_INTRA, BW_INTRA)
    };
    if row.rings & bit == 0 {
        row.x[lat] += tm.comm_latency(ring);
        row.rings |= bit;
    }
    row.x[bw] += f64::from(len) * tm.comm_per_token(ring);
}

/// Sets [`LAST`] on the GPUs of each DP rank's last micro-batch that holds a sequence (`block`
/// laid out `[micro-batch][dp][cp]`).
fn mark_last_micro_batches(block: &mut [Row], dp: usize, cp: usize) {
    let per_mb = dp * cp;
    if per_mb == 0 {
        return;
    }
    for d in 0..dp {
        let last = block
            .chunks(per_mb)
            .rposition(|mb| mb[d * cp..(d + 1) * cp].iter().any(|r| r.used == 1));
        if let Some(m) = last {
            let base = m * per_mb + d * cp;
            for row in &mut block[base..base + cp] {
                row.x[LAST] = LAST_UNIT_S;
            }
        }
    }
}

impl RefitState {
    /// Checks a step's inputs; returns its measurement count `n_micro_batches x dp x cp`.
    fn check_step(
        &self,
        lengths: &[u32],
        placement: &impl Fn(usize) -> Option<Placement>,
        n_micro_batches: u32,
        times: &[f64],
    ) -> Result<usize, RefitError> {
        let cfg = &self.cfg;
        let per_mb = cfg.dp as usize * cfg.cp as usize;
        let expected = n_micro_batches as usize * per_mb;
        if times.len() != expected {
            return Err(RefitError::Mismatch {
                got: times.len(),
                expected,
            });
        }
        let limit = self.params.max_rows_per_step as usize;
        if expected > limit {
            return Err(RefitError::StepTooLarge {
                needed: expected,
                limit,
            });
        }
        for (index, &len) in lengths.iter().enumerate() {
            if len == 0 || len > MAX_SEQ_LEN {
                return Err(RefitError::Length { index });
            }
            let p = placement(index).ok_or(RefitError::Plan { seq: index })?;
            let cp_ok = p.group_is_valid(cfg.cp)
                && (p.is_sharded()
                    || p.is_chunked()
                    || (p.cp_rank >= 0 && (p.cp_rank as u32) < cfg.cp));
            if p.dp_rank >= cfg.dp || !cp_ok {
                return Err(RefitError::Plan { seq: index });
            }
            if p.micro_batch >= n_micro_batches {
                return Err(RefitError::Mismatch {
                    got: times.len(),
                    expected: (p.micro_batch as usize + 1) * per_mb,
                });
            }
        }
        Ok(expected)
    }

    /// Adds one step to the window: the plan (`placements` of `lengths`, as
    /// [`schedule`](crate::schedule) made it for this state's configuration) and `times`,
    /// the measured forward + backward seconds of every (micro-batch, DP rank, CP rank),
    /// laid out `[micro-batch][dp][cp]` (`times[(m·dp + d)·cp + r]`), `n_micro_batches` at
    /// least the most micro-batches a DP rank runs. Entries of a (micro-batch, DP rank) that
    /// holds no sequence are ignored; a NaN, infinite, zero or negative time is skipped and
    /// counted ([`RefitReport::skipped`](crate::model::refit::RefitReport::skipped)). Once
    /// the window holds `window_steps` steps, the oldest is evicted. Returns the number of
    /// measurements skipped. On error nothing changes.
    ///
    /// # Errors
    /// [`RefitError::Storage`], [`RefitError::Mismatch`], [`RefitError::StepTooLarge`],
    /// [`RefitError::Length`] or [`RefitError::Plan`].
    pub fn observe(
        &mut self,
        rows: &mut [Row],
        lengths: &[u32],
        placements: &[Placement],
        n_micro_batches: u32,
        times: &[f64],
    ) -> Result<u32, RefitError> {
        if placements.len() != lengths.len() {
            return Err(RefitError::Mismatch {
                got: placements.len(),
                expected: lengths.len(),
            });
        }
        let at = |i: usize| placements.get(i).copied();
        self.observe_with(rows, lengths, at, n_micro_batches, times)
    }

    /// [`RefitState::observe`] with sequence `i`'s placement from `placement(i)` (`None`: a
    /// placement the caller could not translate, [`RefitError::Plan`]), for callers that
    /// hold the plan in another form (the C ABI).
    ///
    /// # Errors
    /// As [`RefitState::observe`].
    pub fn observe_with(
        &mut self,
        rows: &mut [Row],
        lengths: &[u32],
        placement: impl Fn(usize) -> Option<Placement>,
        n_micro_batches: u32,
        times: &[f64],
    ) -> Result<u32, RefitError> {
        self.check_storage(rows.len())?;
        let count = self.check_step(lengths, &placement, n_micro_batches, times)?;
        let window = u64::from(self.params.window_steps);
        let slot = (self.steps % window) as usize;
        let cap = self.params.max_rows_per_step as usize;
        let block = &mut rows[slot * cap..slot * cap + count];
        block.fill(Row::default());
        let skipped = self.fill_block(block, lengths, &placement, times);
        self.counts[slot] = count as u32;
        self.skipped[slot] = skipped;
        self.busy[slot] = self.busy_time(block);
        self.step_time[slot] = 0.0;
        self.steps += 1;
        Ok(skipped)
    }

    /// Writes the features and times of one step into `block` (checked inputs).
    fn fill_block(
        &self,
        block: &mut [Row],
        lengths: &[u32],
        placement: &impl Fn(usize) -> Option<Placement>,
        times: &[f64],
    ) -> u32 {
        let cfg = &self.cfg;
        let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
        let tm = TimeModel::new(&self.prior, cfg);
        for (i, &len) in lengths.iter().enumerate() {
            let Some(p) = placement(i) else { continue };
            let d = p.dp_rank as usize;
            let base = (p.micro_batch as usize * dp + d) * cp;
            for row in &mut block[base..base + cp] {
                row.used = 1;
            }
            let group = p.group(cfg.cp);
            if p.is_chunked() {
                // Its passes are not modelled yet: the GPUs of its group compose the step
                // (busy time) but are not fitted.
                let first = base + group.first as usize;
                for row in &mut block[first..first + group.size as usize] {
                    row.chunked = 1;
                }
                continue;
            }
            if !p.is_sharded() {
                let row = &mut block[base + group.first as usize];
                row.tokens += u64::from(tm.local_tokens(len));
                row.x[A_LOCAL] += tm.attention(len, len);
                row.x[LOCALS] += self.local_unit;
                continue;
            }
            let share = u64::from(tm.shard_tokens_in(len, group.size));
            let attention = tm.attention_shard_in(len, group.size);
            let ring = tm.ring(p.dp_rank, group.first, group.size);
            let bit = if group.size == cfg.cp {
                WHOLE_RING
            } else {
                1 << (group.size.trailing_zeros() - 1)
            };
            let first = base + group.first as usize;
            for row in &mut block[first..first + group.size as usize] {
                row.tokens += share;
                row.x[A_SHARDED] += attention;
                row.x[SEQS] += self.seq_unit;
                add_comm(&tm, row, ring, len, bit);
            }
        }
        // Only a trainer that reduces the gradients inside the last micro-batch (DDP under
        // `no_sync`, `Synchronisation::Sharded`) pays a per-step cost there.
        if cfg.sync == Synchronisation::Sharded {
            mark_last_micro_batches(block, dp, cp);
        }
        let mut skipped = 0u32;
        let holdout = self.params.holdout;
        for (i, (row, &t)) in block.iter_mut().zip(times).enumerate() {
            if row.used == 0 {
                continue;
            }
            row.heldout = u32::from(held_out(self.steps, (i / cp) as u64, holdout));
            row.step = self.steps;
            row.x[FIXED] = self.fixed_unit;
            row.x[GEMM] = tm.gemm(row.tokens);
            row.time = t;
            if !(t.is_finite() && t > 0.0) {
                row.used = 0;
                skipped += 1;
            } else if row.chunked == 1 {
                skipped += 1;
            }
        }
        skipped
    }

    /// The valid rows of the window, in slot order (a fixed order for a given history), with each row's age in steps.
    pub(crate) fn window<'r>(&self, rows: &'r [Row]) -> impl Iterator<Item = (u64, &'r Row)> {
        self.window_of(rows, Subset::All)
    }

    /// The valid rows of the window in `subset`, as [`RefitState::window`].
    pub(crate) fn window_of<'r>(
        &self,
        rows: &'r [Row],
        subset: Subset,
    ) -> impl Iterator<Item = (u64, &'r Row)> {
        let cap = self.params.max_rows_per_step as usize;
        let last = self.steps.saturating_sub(1);
        let window = self.params.window_steps as usize;
        (0..window).flat_map(move |slot| {
            let count = self.counts[slot] as usize;
            rows.get(slot * cap..slot * cap + count)
                .unwrap_or(&[])
                .iter()
                .filter(move |r| r.fitted() && subset.holds(r))
                .map(move |r| (last.saturating_sub(r.step), r))
        })
    }

    /// The valid rows of the window in `subset`, as [`RefitState::window_of`], each with the
    /// rows of its micro-batch (the `cp` GPUs of one micro-batch of one DP rank).
    pub(crate) fn groups_of<'r>(
        &self,
        rows: &'r [Row],
        subset: Subset,
    ) -> impl Iterator<Item = (u64, &'r Row, &'r [Row])> {
        let cap = self.params.max_rows_per_step as usize;
        let cp = (self.cfg.cp as usize).max(1);
        let last = self.steps.saturating_sub(1);
        let window = self.params.window_steps as usize;
        (0..window).flat_map(move |slot| {
            let count = self.counts[slot] as usize;
            rows.get(slot * cap..slot * cap + count)
                .unwrap_or(&[])
                .chunks(cp)
                .flat_map(move |group| {
                    group
                        .iter()
                        .filter(move |r| r.fitted() && subset.holds(r))
                        .map(move |r| (last.saturating_sub(r.step), r, group))
                })
        })
    }

    /// Steps the window holds and measurements skipped in them.
    pub(crate) fn window_counts(&self) -> (u32, u32) {
        let window = self.params.window_steps as usize;
        let steps = self.steps.min(window as u64) as u32;
        let skipped = self.skipped[..window].iter().sum();
        (steps, skipped)
    }
}
