//! Sub-group sharding through the C ABI, called the way C calls it: `skrull_config.subgroups`,
//! the `cp_groups` output and its read-back, and the layout's rings. Until a policy emits
//! sub-groups, the plans are built by hand: a valid whole-group plan with sharded sequences
//! moved onto aligned sub-groups (their `cp_groups` entry, `tokens_per_gpu`, the micro-batch's
//! `rank_tokens` and the summary's peak rewritten as `skrull_schedule()` would write them).
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;
use core::ptr::null_mut;

use skrull::*;
use skrull_kit::c_layout::OwnedCLayout;

/// A plan as a C caller holds it, with the groups.
struct Held {
    cfg: skrull_config,
    lengths: Vec<u32>,
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
    groups: Vec<skrull_cp_group>,
}

impl Held {
    fn buffers(&mut self) -> skrull_plan_buffers {
        skrull_plan_buffers {
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
            // No groups: NULL (the layout functions then take the whole group).
            cp_groups: if self.groups.is_empty() {
                null_mut()
            } else {
                self.groups.as_mut_ptr()
            },
            cp_groups_len: self.groups.len(),
            ..skrull_plan_buffers::EMPTY
        }
    }

    /// Plans `lengths` under `cfg` (groups passed).
    fn schedule(cfg: skrull_config, lengths: &[u32]) -> Result<Held, skrull_status> {
        let n = lengths.len();
        let mut s = skrull_sizes::default();
        // SAFETY: `s` is a live, aligned skrull_sizes.
        assert_eq!(
            unsafe { skrull_plan_sizes(n, cfg.dp, cfg.cp, &mut s) },
            skrull_status::Ok
        );
        let mut h = Held {
            cfg,
            lengths: lengths.to_vec(),
            placements: vec![skrull_placement::default(); s.placements],
            micro_batches: vec![skrull_micro_batch::default(); s.micro_batches],
            members: vec![0; s.members],
            rank_tokens: vec![0; s.rank_tokens],
            per_dp: vec![0; s.micro_batches_per_dp],
            summary: skrull_summary::default(),
            groups: vec![
                skrull_cp_group {
                    first: 77,
                    size: 77
                };
                s.placements
            ],
        };
        let mut ws = vec![0u8; s.workspace_bytes];
        let out = h.buffers();
        // SAFETY: every pointer is a live Vec of the stated length.
        let st = unsafe {
            skrull_schedule(
                &cfg,
                lengths.as_ptr(),
                n,
                ws.as_mut_ptr().cast::<c_void>(),
                ws.len(),
                &out,
            )
        };
        if st == skrull_status::Ok {
            Ok(h)
        } else {
            Err(st)
        }
    }

    /// Moves sharded sequence `seq` onto the sub-group `first .. first + size`.
    fn regroup(&mut self, seq: usize, first: u32, size: u32) {
        let cp = self.cfg.cp;
        let p = self.placements[seq];
        assert_eq!(p.cp_rank, SKRULL_SHARDED);
        let old = self.groups[seq];
        let g = (0..self.summary.micro_batches as usize)
            .find(|&g| {
                let m = self.micro_batches[g];
                (m.dp_rank, m.index) == (p.dp_rank, p.micro_batch)
            })
            .unwrap();
        let share = share(&self.cfg, self.lengths[seq], size);
        let row = &mut self.rank_tokens[g * cp as usize..(g + 1) * cp as usize];
        for r in old.first..old.first + old.size {
            row[r as usize] -= p.tokens_per_gpu;
        }
        for r in first..first + size {
            row[r as usize] += share;
        }
        self.placements[seq].tokens_per_gpu = share;
        self.groups[seq] = skrull_cp_group { first, size };
        let used = self.summary.micro_batches as usize * cp as usize;
        self.summary.peak_rank_tokens = self.rank_tokens[..used].iter().copied().max().unwrap();
    }
}

/// Each GPU's tokens of a sequence sharded over `g` ranks (no pad multiple): `ceil(len / g)`,
/// or with zigzag padding (and `g > 1`) two chunks of `ceil(len / 2g)`.
fn share(cfg: &skrull_config, len: u32, g: u32) -> u32 {
    if cfg.shard_padding == SKRULL_SHARD_PADDING_ZIGZAG && g > 1 {
        2 * len.div_ceil(2 * g)
    } else {
        len.div_ceil(g)
    }
}

/// The padded length of a sequence sharded over `g` ranks: a multiple of `2g` with zigzag
/// padding, the length itself without.
fn padded(cfg: &skrull_config, len: u32, g: u32) -> u32 {
    if cfg.shard_padding == SKRULL_SHARD_PADDING_ZIGZAG && g > 1 {
        len.div_ceil(2 * g) * 2 * g
    } else {
        len
    }
}

fn config(cp: u32, bucket: u32, padding: u32, subgroups: u32) -> skrull_config {
    let mut c = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap();
    (c.dp, c.cp, c.bucket_tokens) = (1, cp, bucket);
    (c.policy, c.shard_padding, c.subgroups) = (SKRULL_POLICY_PACKED, padding, subgroups);
    c
}

/// One GPU's layout outputs.
type Outs = OwnedCLayout;

/// `h`'s layout outputs sized by `skrull_layout_sizes_max()` with `rings` ring entries (and
/// the ring count passed), without the gather index and padded local `cu_seqlens`.
fn outs(h: &Held, rings: usize) -> Outs {
    let mut m = skrull_layout_capacity::default();
    // SAFETY: live config and output.
    let st = unsafe { skrull_layout_sizes_max(&h.cfg, h.lengths.len(), &mut m) };
    assert_eq!(st, skrull_status::Ok);
    OwnedCLayout::new(m).without_optional().with_rings(rings)
}

/// The layout calls on `Outs`, the way C makes them.
trait Calls {
    fn fill_with(
        &mut self,
        h: &mut Held,
        plan: &skrull_plan_buffers,
        gpu: skrull_gpu,
    ) -> skrull_status;
    fn fill(&mut self, h: &mut Held, gpu: skrull_gpu) -> skrull_status;
    fn sizes(&mut self, h: &mut Held, gpu: skrull_gpu) -> skrull_status;
}

impl Calls for Outs {
    fn fill_with(
        &mut self,
        h: &mut Held,
        plan: &skrull_plan_buffers,
        gpu: skrull_gpu,
    ) -> skrull_status {
        let out = self.buffers();
        // SAFETY: every pointer is a live Vec (or field) of the stated length.
        unsafe {
            skrull_layout_fill(
                &h.cfg,
                h.lengths.as_ptr(),
                h.lengths.len(),
                plan,
                gpu,
                self.workspace.as_mut_ptr().cast::<c_void>(),
                self.workspace.len(),
                &out,
            )
        }
    }

    fn fill(&mut self, h: &mut Held, gpu: skrull_gpu) -> skrull_status {
        let plan = h.buffers();
        self.fill_with(h, &plan, gpu)
    }

    fn sizes(&mut self, h: &mut Held, gpu: skrull_gpu) -> skrull_status {
        let plan = h.buffers();
        let mut z = skrull_layout_capacity::default();
        // SAFETY: as above.
        unsafe {
            skrull_layout_sizes(
                &h.cfg,
                h.lengths.as_ptr(),
                h.lengths.len(),
                &plan,
                gpu,
                self.workspace.as_mut_ptr().cast::<c_void>(),
                self.workspace.len(),
                &mut z,
            )
        }
    }
}

/// DP 1 x CP 8, everything sharded (`packed`), then sequence 0 moved onto ranks 4..8, 1 onto
/// 4..6 and 2 onto 0..4; 3 and 4 stay on the whole group.
fn hand_built(padding: u32) -> Held {
    let lengths = [40, 21, 17, 50, 9];
    let mut h = Held::schedule(config(8, 64, padding, 1), &lengths).unwrap();
    assert_eq!(h.summary.micro_batches, 1);
    assert!(
        h.placements[..5]
            .iter()
            .all(|p| p.cp_rank == SKRULL_SHARDED)
    );
    assert!(h.groups[..5].iter().all(|g| (g.first, g.size) == (0, 8)));
    h.regroup(0, 4, 4);
    h.regroup(1, 4, 2);
    h.regroup(2, 0, 4);
    h
}

/// Every GPU of the hand-built plan: rings, chunk indices, cu_seqlens per ring, and the
/// spans of the group's ranks tiling each sequence exactly once.
fn lay_out_every_gpu(padding: u32) {
    let mut h = hand_built(padding);
    let mut o = outs(&h, SKRULL_MAX_RINGS as usize);
    let cp = 8u32;
    // cover[seq] = (start, end, rank) of every span.
    let mut cover: Vec<Vec<(u32, u32, u32)>> = vec![Vec::new(); 5];
    for r in 0..cp {
        let gpu = skrull_gpu {
            dp_rank: 0,
            micro_batch: 0,
            cp_rank: r,
        };
        assert_eq!(o.fill(&mut h, gpu), skrull_status::Ok, "rank {r}");
        let l = o.layout;
        // The rings: the whole group (3 and 4), then the sub-groups holding rank r.
        let mut want = vec![(0, 8, 2)];
        if r >= 4 {
            want.push((4, 4, 1));
        } else {
            want.push((0, 4, 1));
        }
        if (4..6).contains(&r) {
            want.push((4, 2, 1));
        }
        assert_eq!(o.rings_count as usize, want.len(), "rank {r}");
        let mut offset = 0;
        for (k, &(first, size, seqs)) in want.iter().enumerate() {
            let ring = o.rings[k];
            assert_eq!(
                (ring.first, ring.size, ring.offset, ring.seqs),
                (first, size, offset, seqs),
                "rank {r} ring {k}"
            );
            // The ring's slices of the sharded cu_seqlens, and its sequences' chunks.
            for q in offset..offset + seqs {
                let front = o.spans[(l.local_seqs + 2 * q) as usize];
                let back = o.spans[(l.local_seqs + 2 * q + 1) as usize];
                let seq = front.seq as usize;
                assert_eq!(back.seq, front.seq);
                assert_eq!((h.groups[seq].first, h.groups[seq].size), (first, size));
                let j = r - first;
                assert_eq!(front.chunk, j as i32);
                assert_eq!(back.chunk, (2 * size - 1 - j) as i32);
                let len = h.lengths[seq] as i32;
                let q = q as usize;
                assert_eq!(o.sharded_cu[q + 1] - o.sharded_cu[q], len);
                let part = (front.len + front.pad + back.len + back.pad) as i32;
                assert_eq!(o.rank_cu[q + 1] - o.rank_cu[q], part);
            }
            offset += seqs;
        }
        assert_eq!(offset, l.sharded_seqs);
        // Rings past the count are not written.
        assert!(
            o.rings[want.len()..]
                .iter()
                .all(|x| *x == skrull_layout_ring::default())
        );
        assert_eq!(l.charged_tokens, h.rank_tokens[r as usize]);
        for s in &o.spans[..l.spans as usize] {
            cover[s.seq as usize].push((s.start, s.start + s.len + s.pad, r));
        }
        o.rings
            .iter_mut()
            .for_each(|x| *x = skrull_layout_ring::default());
    }
    // Every sequence: two chunks on each rank of its group, none elsewhere, tiling [0, P).
    for (seq, ranges) in cover.iter_mut().enumerate() {
        let g = h.groups[seq];
        assert_eq!(ranges.len(), 2 * g.size as usize, "seq {seq}");
        assert!(
            ranges
                .iter()
                .all(|&(_, _, r)| r >= g.first && r < g.first + g.size)
        );
        for r in g.first..g.first + g.size {
            assert_eq!(
                ranges.iter().filter(|x| x.2 == r).count(),
                2,
                "seq {seq} rank {r}"
            );
        }
        ranges.sort_unstable();
        let mut at = 0;
        for &(start, end, _) in ranges.iter() {
            assert_eq!(start, at, "seq {seq}");
            at = end;
        }
        assert_eq!(at, padded(&h.cfg, h.lengths[seq], g.size), "seq {seq}");
    }
}

#[test]
fn a_hand_built_sub_group_plan_is_laid_out_ring_by_ring() {
    lay_out_every_gpu(SKRULL_SHARD_PADDING_NONE);
    lay_out_every_gpu(SKRULL_SHARD_PADDING_ZIGZAG);
}

#[test]
fn schedule_writes_the_groups_and_requires_them_with_sub_groups() {
    let lengths = [40, 3, 50, 2];
    // Without sub-groups the groups are optional, and written when given.
    let h = Held::schedule(config(8, 64, 0, 0), &lengths).unwrap();
    for (p, g) in h.placements.iter().zip(&h.groups) {
        let want = if p.cp_rank == SKRULL_SHARDED {
            (0, 8)
        } else {
            (p.cp_rank as u32, 1)
        };
        assert_eq!((g.first, g.size), want);
    }
    // With them: required.
    let mut h = Held::schedule(config(8, 64, 0, 1), &lengths).unwrap();
    let before = h.placements.clone();
    let cfg = h.cfg;
    let mut ws = vec![0u8; 1 << 16];
    let mut run = |out: &skrull_plan_buffers| {
        // SAFETY: every pointer is live for its declared capacity.
        unsafe {
            skrull_schedule(
                &cfg,
                lengths.as_ptr(),
                lengths.len(),
                ws.as_mut_ptr().cast::<c_void>(),
                ws.len(),
                out,
            )
        }
    };
    let mut out = h.buffers();
    out.cp_groups = null_mut();
    out.cp_groups_len = 0;
    assert_eq!(run(&out), skrull_status::NullArg);
    let mut out = h.buffers();
    out.cp_groups_len = 3;
    assert_eq!(run(&out), skrull_status::OutputTooSmall);
    let mut out = h.buffers();
    out.struct_size = core::mem::offset_of!(skrull_plan_buffers, cp_groups) as u32;
    assert_eq!(run(&out), skrull_status::NullArg);
    let mut out = h.buffers();
    out.cp_groups = out.placements.cast();
    assert_eq!(run(&out), skrull_status::InvalidArg);
    assert_eq!(h.placements, before);
    // subgroups = 2 is not a flag.
    let mut bad = cfg;
    bad.subgroups = 2;
    assert_eq!(
        Held::schedule(bad, &lengths).err(),
        Some(skrull_status::InvalidEnum)
    );
}

#[test]
fn a_bad_group_is_plan_invalid() {
    let gpu = skrull_gpu::default();
    let check = |edit: &dyn Fn(&mut Held), want: skrull_status, what: &str| {
        let mut h = hand_built(SKRULL_SHARD_PADDING_NONE);
        edit(&mut h);
        let mut o = outs(&h, SKRULL_MAX_RINGS as usize);
        assert_eq!(o.sizes(&mut h, gpu), want, "{what}: sizes");
        assert_eq!(o.fill(&mut h, gpu), want, "{what}: fill");
        if want != skrull_status::Ok {
            assert_eq!(o.rings_count, 0xDEAD, "{what}: written on error");
            assert!(o.rings.iter().all(|x| *x == skrull_layout_ring::default()));
        }
    };
    check(&|_| {}, skrull_status::Ok, "as built");
    // Misaligned (2 + 4 is not a multiple of 4), too large, not a power of two, empty.
    for (first, size) in [(2, 4), (8, 4), (0, 3), (0, 0), (0, 16), (4, 1)] {
        check(
            &|h| h.groups[0] = skrull_cp_group { first, size },
            skrull_status::PlanInvalid,
            &format!("group {first}+{size}"),
        );
    }
    // A local sequence's group must be its own rank.
    check(
        &|h| {
            h.groups[2] = skrull_cp_group { first: 0, size: 8 };
            h.placements[2].cp_rank = 0;
        },
        skrull_status::PlanInvalid,
        "local in a group",
    );
    // tokens_per_gpu must be the share over the group.
    check(
        &|h| h.placements[0].tokens_per_gpu = share(&h.cfg, 40, 8),
        skrull_status::PlanInvalid,
        "whole-group share on a sub-group",
    );
    // A sub-group in a configuration without sub-groups.
    check(
        &|h| h.cfg.subgroups = 0,
        skrull_status::PlanInvalid,
        "sub-group without subgroups",
    );
    // Without the groups every sharded sequence spans the whole group: the loads then differ.
    check(
        &|h| h.groups.clear(),
        skrull_status::PlanInvalid,
        "groups dropped",
    );
    // Fewer groups than sequences.
    let mut h = hand_built(SKRULL_SHARD_PADDING_NONE);
    let mut plan = h.buffers();
    plan.cp_groups_len = 4;
    let mut o = outs(&h, 8);
    assert_eq!(o.fill_with(&mut h, &plan, gpu), skrull_status::PlanInvalid);
    // A whole-group plan read without its groups is fine.
    let mut h = Held::schedule(config(8, 64, 0, 1), &[40, 3, 50, 2]).unwrap();
    let mut plan = h.buffers();
    (plan.cp_groups, plan.cp_groups_len) = (null_mut(), 0);
    let mut o = outs(&h, 8);
    assert_eq!(o.fill_with(&mut h, &plan, gpu), skrull_status::Ok);
}

#[test]
fn rings_are_required_with_sub_groups_and_sized_per_gpu() {
    let gpu = |r| skrull_gpu {
        dp_rank: 0,
        micro_batch: 0,
        cp_rank: r,
    };
    let mut h = hand_built(SKRULL_SHARD_PADDING_NONE);
    // NULL with sub-groups: NULL_ARG, even on a GPU whose rings would fit.
    let mut o = outs(&h, 0);
    assert_eq!(o.fill(&mut h, gpu(0)), skrull_status::NullArg);
    // Rank 4 has three rings, rank 0 two: capacity 2 fits one, not the other.
    let mut o = outs(&h, 2);
    assert_eq!(o.fill(&mut h, gpu(0)), skrull_status::Ok);
    assert_eq!(o.rings_count, 2);
    let mut o = outs(&h, 2);
    assert_eq!(o.fill(&mut h, gpu(4)), skrull_status::OutputTooSmall);
    assert_eq!(o.rings_count, 0xDEAD);
    // Misaligned rings_count.
    let mut o = outs(&h, 8);
    let mut out = o.buffers();
    out.rings_count = out.rings_count.cast::<u8>().wrapping_add(1).cast();
    let plan = h.buffers();
    // SAFETY: every pointer is live; the misaligned one is refused before any access.
    let st = unsafe {
        skrull_layout_fill(
            &h.cfg,
            h.lengths.as_ptr(),
            h.lengths.len(),
            &plan,
            gpu(0),
            o.workspace.as_mut_ptr().cast::<c_void>(),
            o.workspace.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::InvalidArg);
    // Without sub-groups: rings optional; when given, the whole group's ring is written.
    let mut h = Held::schedule(config(8, 64, 0, 0), &[40, 3, 50, 2]).unwrap();
    let mut o = outs(&h, 0);
    assert_eq!(o.fill(&mut h, gpu(0)), skrull_status::Ok);
    assert_eq!(o.rings_count, 1);
    let mut o = outs(&h, 1);
    assert_eq!(o.fill(&mut h, gpu(0)), skrull_status::Ok);
    assert_eq!((o.rings[0].first, o.rings[0].size), (0, 8));
    assert_eq!(
        (o.rings[0].offset, o.rings[0].seqs),
        (0, o.layout.sharded_seqs)
    );
    // A struct that ends before the rings: fine without sub-groups.
    let mut o = outs(&h, 1);
    let mut out = o.buffers();
    out.struct_size = core::mem::offset_of!(skrull_layout_buffers, rings) as u32;
    let plan = h.buffers();
    // SAFETY: as above.
    let st = unsafe {
        skrull_layout_fill(
            &h.cfg,
            h.lengths.as_ptr(),
            h.lengths.len(),
            &plan,
            gpu(0),
            o.workspace.as_mut_ptr().cast::<c_void>(),
            o.workspace.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::Ok);
    assert_eq!(o.rings_count, 0xDEAD);
    assert_eq!(o.rings[0], skrull_layout_ring::default());
}
