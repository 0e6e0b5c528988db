//! Heap-backed output buffers and workspace of `skrull_schedule()`, as a C caller allocates
//! them: the C-side counterpart of [`crate::OwnedBuffers`].

use core::ffi::c_void;

use skrull::{
    skrull_config, skrull_cp_group, skrull_micro_batch, skrull_placement, skrull_plan_buffers,
    skrull_plan_sizes, skrull_schedule, skrull_sizes, skrull_status, skrull_summary,
};
use skrull_core::Config;

use crate::c_check::CPlan;
use crate::guarded::{FILL, FILL_G, FILL_MB, FILL_P, FILL_S};

/// The output buffers and workspace of one C call, sized by `skrull_plan_sizes()` and
/// pre-filled with fixed patterns (the outputs with the [`crate::guarded`] fill values).
pub struct OwnedCPlan {
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
    cp_groups: Vec<skrull_cp_group>,
    workspace: Vec<u8>,
}

impl OwnedCPlan {
    /// Buffers for `n` sequences under `cfg`'s DP and CP sizes, the workspace filled with
    /// `ws_fill`.
    pub fn new(n: usize, cfg: &Config, ws_fill: u8) -> OwnedCPlan {
        let mut s = skrull_sizes::default();
        // SAFETY: `s` is a live, aligned skrull_sizes.
        let st = unsafe { skrull_plan_sizes(n, cfg.dp, cfg.cp, &mut s) };
        assert_eq!(st, skrull_status::Ok);
        OwnedCPlan {
            placements: vec![FILL_P; s.placements],
            micro_batches: vec![FILL_MB; s.micro_batches],
            members: vec![FILL; s.members],
            rank_tokens: vec![FILL; s.rank_tokens],
            per_dp: vec![FILL; s.micro_batches_per_dp],
            summary: FILL_S,
            // As many as placements (`skrull_sizes` is frozen and has no entry for them).
            cp_groups: vec![FILL_G; s.placements],
            workspace: vec![ws_fill; s.workspace_bytes],
        }
    }

    /// Calls `skrull_schedule()` into these buffers (the CP groups included).
    pub fn schedule(&mut self, cfg: &skrull_config, lengths: &[u32]) -> skrull_status {
        let out = skrull_plan_buffers {
            struct_size: size_of::<skrull_plan_buffers>() as u32,
            _reserved: 0,
            placements: self.placements.as_mut_ptr(),
            placements_len: self.placements.len(),
            micro_batches: self.micro_batches.as_mut_ptr(),
            micro_batches_len: self.micro_batches.len(),
            members: self.members.as_mut_ptr(),
            members_len: self.members.len(),
            rank_tokens: self.rank_tokens.as_mut_ptr(),
            rank_tokens_len: self.rank_tokens.len(),
            micro_batches_per_dp: self.per_dp.as_mut_ptr(),
            micro_batches_per_dp_len: self.per_dp.len(),
            summary: &mut self.summary,
            error: std::ptr::null_mut(),
            cp_groups: self.cp_groups.as_mut_ptr(),
            cp_groups_len: self.cp_groups.len(),
        };
        // SAFETY: every pointer is valid for the length it is given, nothing overlaps.
        unsafe {
            skrull_schedule(
                cfg,
                lengths.as_ptr(),
                lengths.len(),
                self.workspace.as_mut_ptr().cast::<c_void>(),
                self.workspace.len(),
                &out,
            )
        }
    }

    /// The buffers as the checker reads them.
    pub fn plan(&self) -> CPlan<'_> {
        CPlan {
            placements: &self.placements,
            micro_batches: &self.micro_batches,
            members: &self.members,
            rank_tokens: &self.rank_tokens,
            per_dp: &self.per_dp,
            summary: &self.summary,
            cp_groups: Some(&self.cp_groups),
        }
    }

    /// Every output byte (written or not; the workspace excluded), little-endian field by
    /// field.
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for p in &self.placements {
            for x in [p.dp_rank, p.micro_batch, p.cp_rank as u32, p.tokens_per_gpu] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        for m in &self.micro_batches {
            for x in [m.dp_rank, m.index, m.first, m.count] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        for x in self
            .members
            .iter()
            .chain(&self.rank_tokens)
            .chain(&self.per_dp)
        {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for g in &self.cp_groups {
            for x in [g.first, g.size] {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        let s = &self.summary;
        b.extend_from_slice(&s.total_tokens.to_le_bytes());
        for x in [
            s.sequences,
            s.micro_batches,
            s.sharded,
            s.rollbacks,
            s.peak_rank_tokens,
            s._reserved,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b
    }
}
