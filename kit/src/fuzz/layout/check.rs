//! The checks of one GPU's layout: the core's layout with exactly sized buffers
//! ([`CoreLayout`]), its own consistency, and the C outputs equal to it.

use skrull::{skrull_layout, skrull_layout_ring, skrull_span};
use skrull_core::plan::layout::{
    self, Gpu, LayoutBuffer, LayoutBuffers, LayoutError, LayoutRing, LayoutSizes, MAX_RINGS,
};
use skrull_core::{Config, Plan};

use super::call::Outs;
use super::padded;
use super::plan::Held;

/// One GPU's layout from the core, with exactly sized buffers.
pub(super) struct CoreLayout {
    l: layout::Layout,
    pub(super) spans: Vec<layout::Span>,
    local_cu: Vec<i32>,
    sharded_cu: Vec<i32>,
    sharded_cu_padded: Vec<i32>,
    rank_cu: Vec<i32>,
    positions: Vec<i32>,
    local_cu_padded: Vec<i32>,
    gather: Vec<i64>,
    /// The rings the core wrote (`l.rings` of them).
    pub(super) rings: Vec<LayoutRing>,
}

impl CoreLayout {
    /// The GPU's rings: 0 without sharded sequences, 1 with only the whole group's.
    pub(super) fn ring_count(&self) -> usize {
        self.l.rings as usize
    }
}

pub(super) fn core_fill(
    cfg: &Config,
    lengths: &[u32],
    plan: &Plan<'_>,
    gpu: Gpu,
    with_positions: bool,
) -> Result<CoreLayout, LayoutError> {
    let z = LayoutSizes::for_gpu(&crate::setup_of(cfg), lengths, plan, gpu)?;
    let npos = if with_positions {
        z.positions as usize
    } else {
        0
    };
    let mut c = CoreLayout {
        l: layout::Layout::default(),
        spans: vec![layout::Span::default(); z.spans as usize],
        local_cu: vec![7; z.local_cu_seqlens as usize],
        sharded_cu: vec![7; z.sharded_cu_seqlens as usize],
        sharded_cu_padded: vec![7; z.sharded_cu_seqlens as usize],
        rank_cu: vec![7; z.sharded_cu_seqlens as usize],
        positions: vec![7; npos],
        local_cu_padded: vec![
            7;
            if with_positions {
                z.local_cu_seqlens as usize
            } else {
                0
            }
        ],
        gather: vec![7; npos],
        rings: Vec::new(),
    };
    // One buffer one short must be BufferTooSmall naming it, with nothing written.
    if z.spans > 0 {
        let mut short = vec![layout::Span::default(); z.spans as usize - 1];
        let r = layout::fill(
            &crate::setup_of(cfg),
            lengths,
            plan,
            gpu,
            LayoutBuffers {
                spans: &mut short,
                local_cu_seqlens: &mut c.local_cu,
                sharded_cu_seqlens: &mut c.sharded_cu,
                sharded_cu_seqlens_padded: &mut c.sharded_cu_padded,
                rank_cu_seqlens: &mut c.rank_cu,
                positions: &mut c.positions,
                local_cu_seqlens_padded: &mut c.local_cu_padded,
                gather_index: &mut c.gather,
                rings: &mut [],
            },
        );
        match r {
            Err(LayoutError::BufferTooSmall {
                buffer: LayoutBuffer::Spans,
                ..
            })
            | Err(LayoutError::Overflow { .. }) => {}
            other => panic!("core fill with short spans gave {other:?}"),
        }
        assert!(short.iter().all(|s| *s == layout::Span::default()));
        assert!(c.local_cu.iter().all(|&x| x == 7), "written on error");
    }
    // Room for every ring (the core writes as many as the GPU has).
    let mut rings = [LayoutRing::default(); MAX_RINGS as usize];
    c.l = layout::fill(
        &crate::setup_of(cfg),
        lengths,
        plan,
        gpu,
        LayoutBuffers {
            spans: &mut c.spans,
            local_cu_seqlens: &mut c.local_cu,
            sharded_cu_seqlens: &mut c.sharded_cu,
            sharded_cu_seqlens_padded: &mut c.sharded_cu_padded,
            rank_cu_seqlens: &mut c.rank_cu,
            positions: &mut c.positions,
            local_cu_seqlens_padded: &mut c.local_cu_padded,
            gather_index: &mut c.gather,
            rings: &mut rings,
        },
    )?;
    assert!(c.l.rings <= MAX_RINGS, "{} rings", c.l.rings);
    c.rings = rings[..c.l.rings as usize].to_vec();
    assert!(
        rings[c.l.rings as usize..]
            .iter()
            .all(|r| *r == LayoutRing::default()),
        "rings written past the count"
    );
    Ok(c)
}

/// Checks one GPU's layout on its own: counts, `cu_seqlens`, positions, membership.
pub(super) fn check_gpu(cfg: &Config, lengths: &[u32], h: &Held, gpu: Gpu, c: &CoreLayout) {
    let l = &c.l;
    let (cp, r) = (cfg.cp, gpu.cp_rank);
    assert_eq!(
        (l.dp_rank, l.micro_batch, l.cp_rank),
        (gpu.dp_rank, gpu.micro_batch, r)
    );
    assert_eq!(l.spans as usize, c.spans.len());
    assert_eq!(l.spans, l.local_seqs + 2 * l.sharded_seqs);
    assert_eq!(l.tokens, l.local_tokens + l.sharded_tokens);
    assert_eq!(l.loss_tokens, l.tokens - l.pad_tokens);
    if l.micro_batch_global == layout::NO_MICRO_BATCH {
        // An empty lockstep micro-batch: past the DP rank's listed ones, within its count.
        assert!(
            cfg.uniform_counts(),
            "an empty micro-batch without lockstep or a fixed count"
        );
        let listed = h
            .micro_batches
            .iter()
            .filter(|m| m.dp_rank == gpu.dp_rank)
            .count();
        assert!((gpu.micro_batch as usize) >= listed);
        assert!(gpu.micro_batch < h.per_dp[gpu.dp_rank as usize]);
        assert_eq!(
            (l.spans, l.tokens, l.loss_tokens, l.charged_tokens, l.rings),
            (0, 0, 0, 0, 0)
        );
        assert!(c.spans.is_empty() && c.positions.is_empty() && c.gather.is_empty());
        for cu in [&c.local_cu, &c.sharded_cu, &c.sharded_cu_padded, &c.rank_cu] {
            assert_eq!(cu.as_slice(), &[0]);
        }
        return;
    }
    let g = l.micro_batch_global as usize;
    assert_eq!(
        l.charged_tokens,
        h.rank_tokens[g * cp as usize + r as usize]
    );
    assert!(l.charged_tokens <= cfg.bucket);
    assert_eq!(l.global_tokens, h.summary.total_tokens);
    let mut at = 0u64;
    let (mut pads, mut local_max, mut rank_max) = (0u64, 0u32, 0u32);
    for (k, s) in c.spans.iter().enumerate() {
        let p = &h.placements[s.seq as usize];
        assert_eq!((p.dp_rank, p.micro_batch), (gpu.dp_rank, gpu.micro_batch));
        assert_eq!(u64::from(s.offset), at, "span {k} not contiguous");
        let len = lengths[s.seq as usize];
        if k < l.local_seqs as usize {
            // With `pad_local` a local sequence is padded to the pad multiple.
            let m = cfg.pad_multiple.max(1);
            let local_pad = if cfg.pad_local {
                len.div_ceil(m) * m - len
            } else {
                0
            };
            assert_eq!((s.chunk, s.start, s.len, s.pad), (-1, 0, len, local_pad));
            assert_eq!(p.cp_rank, r as i32);
            assert_eq!(c.local_cu[k + 1] - c.local_cu[k], len as i32);
            local_max = local_max.max(len);
        } else {
            let j = k - l.local_seqs as usize;
            // Its group's ranks, and this rank's index among them.
            let (first, g) = h.group(s.seq as usize, cp);
            assert!(
                r >= first && r - first < g,
                "span {k}: rank {r} not in {first}+{g}"
            );
            let want = if j.is_multiple_of(2) {
                r - first
            } else {
                2 * g - 1 - (r - first)
            };
            assert_eq!(s.chunk, want as i32, "span {k}");
            assert_eq!(p.cp_rank, -1);
            // Real tokens end by the length; padding only after it.
            assert!(s.len == 0 || u64::from(s.start) + u64::from(s.len) <= u64::from(len));
            if s.pad > 0 {
                assert!(u64::from(s.start) + u64::from(s.len) >= u64::from(len));
            }
            if j % 2 == 1 {
                let prev = &c.spans[k - 1];
                assert_eq!(prev.seq, s.seq);
                let q = j / 2;
                let part = prev.len + prev.pad + s.len + s.pad;
                assert_eq!(c.rank_cu[q + 1] - c.rank_cu[q], part as i32);
                assert_eq!(c.sharded_cu[q + 1] - c.sharded_cu[q], len as i32);
                let pl = padded(cfg, len, g) as i32;
                assert_eq!(c.sharded_cu_padded[q + 1] - c.sharded_cu_padded[q], pl);
                rank_max = rank_max.max(part);
            }
        }
        pads += u64::from(s.pad);
        if !c.positions.is_empty() {
            for i in 0..s.len + s.pad {
                assert_eq!(
                    c.positions[(at + u64::from(i)) as usize],
                    (s.start + i) as i32
                );
            }
        }
        at += u64::from(s.len) + u64::from(s.pad);
    }
    assert_eq!(at, u64::from(l.tokens));
    assert_eq!(pads, u64::from(l.pad_tokens));
    assert_eq!(c.local_cu.first(), Some(&0));
    // Real lengths: the local tokens less the local padding.
    let local_real: u64 = c.spans[..l.local_seqs as usize]
        .iter()
        .map(|s| u64::from(s.len))
        .sum();
    assert_eq!(c.local_cu.last(), Some(&(local_real as i32)));
    assert_eq!(c.rank_cu.first(), Some(&0));
    assert_eq!(c.rank_cu.last(), Some(&(l.sharded_tokens as i32)));
    for cu in [&c.sharded_cu, &c.sharded_cu_padded] {
        assert_eq!(cu.first(), Some(&0));
        assert!(
            cu.windows(2).all(|w| w[0] <= w[1]),
            "cu_seqlens not monotone"
        );
    }
    assert_eq!(l.local_max_seqlen, local_max as i32);
    assert_eq!(l.rank_max_seqlen, rank_max as i32);
    let sharded = c.spans[l.local_seqs as usize..].iter().step_by(2);
    let longest = sharded
        .clone()
        .map(|s| lengths[s.seq as usize])
        .max()
        .unwrap_or(0);
    assert_eq!(l.sharded_max_seqlen, longest as i32);
    let longest_padded = sharded
        .map(|s| padded(cfg, lengths[s.seq as usize], h.group(s.seq as usize, cp).1))
        .max()
        .unwrap_or(0);
    assert_eq!(
        i64::from(l.sharded_max_seqlen_padded),
        longest_padded as i64
    );
    check_rings(cfg, h, gpu, c);
}

/// The ring table of one GPU: one ring per group holding a sharded sequence of this GPU, the
/// whole group first, then sub-groups strictly largest first, each containing this rank,
/// their blocks tiling the sharded group in order, and each sequence in its group's block.
fn check_rings(cfg: &Config, h: &Held, gpu: Gpu, c: &CoreLayout) {
    let l = &c.l;
    let (cp, r) = (cfg.cp, gpu.cp_rank);
    if l.sharded_seqs == 0 {
        assert!(c.rings.is_empty(), "rings without sharded sequences");
        return;
    }
    let mut next = 0u32;
    let mut last_size = u32::MAX;
    for (k, ring) in c.rings.iter().enumerate() {
        assert!(ring.size < last_size, "ring {k}: sizes not decreasing");
        last_size = ring.size;
        assert!(ring.size == cp || (ring.size >= 2 && ring.size.is_power_of_two()));
        assert!(ring.first.is_multiple_of(ring.size) && ring.first + ring.size <= cp);
        assert!(
            r >= ring.first && r - ring.first < ring.size,
            "ring {k} misses rank {r}"
        );
        assert_eq!(ring.offset, next, "ring {k}: not contiguous");
        assert!(ring.seqs >= 1, "ring {k} is empty");
        for q in ring.offset..ring.offset + ring.seqs {
            let span = c.spans[(l.local_seqs + 2 * q) as usize];
            let group = h.group(span.seq as usize, cp);
            assert_eq!(group, (ring.first, ring.size), "ring {k}: seq {}", span.seq);
        }
        next += ring.seqs;
    }
    assert_eq!(next, l.sharded_seqs, "rings do not cover the sharded group");
}

/// Checks that the C outputs equal the core's layout and nothing else was written (the rings
/// only when `with_rings`: a caller without sub-groups may skip them).
pub(super) fn check_c_equals_core(
    o: &Outs,
    c: &CoreLayout,
    with_positions: bool,
    with_rings: bool,
) {
    let l = &c.l;
    assert_eq!(o.rings_count.body()[0], l.rings, "rings_count");
    o.rings_count.untouched_from(1, "rings_count");
    if with_rings {
        let want: Vec<skrull_layout_ring> = c
            .rings
            .iter()
            .map(|r| skrull_layout_ring {
                first: r.first,
                size: r.size,
                offset: r.offset,
                seqs: r.seqs,
            })
            .collect();
        assert_eq!(&o.rings.body()[..want.len()], &want[..], "C rings differ");
        o.rings.untouched_from(want.len(), "rings");
    } else {
        o.rings.untouched_from(0, "rings (skipped)");
    }
    let want: Vec<skrull_span> = c
        .spans
        .iter()
        .map(|s| skrull_span {
            seq: s.seq,
            chunk: s.chunk,
            offset: s.offset,
            start: s.start,
            len: s.len,
            pad: s.pad,
        })
        .collect();
    assert_eq!(&o.spans.body()[..want.len()], &want[..], "C spans differ");
    o.spans.untouched_from(want.len(), "spans");
    for (g, v, what) in [
        (&o.local_cu, &c.local_cu, "local_cu_seqlens"),
        (&o.sharded_cu, &c.sharded_cu, "sharded_cu_seqlens"),
        (
            &o.sharded_cu_padded,
            &c.sharded_cu_padded,
            "sharded_cu_seqlens_padded",
        ),
        (&o.rank_cu, &c.rank_cu, "rank_cu_seqlens"),
    ] {
        assert_eq!(&g.body()[..v.len()], &v[..], "C {what} differ");
        g.untouched_from(v.len(), what);
    }
    if with_positions {
        assert_eq!(&o.positions.body()[..c.positions.len()], &c.positions[..]);
        o.positions.untouched_from(c.positions.len(), "positions");
        assert_eq!(&o.gather.body()[..c.gather.len()], &c.gather[..]);
        o.gather.untouched_from(c.gather.len(), "gather_index");
        let n = c.local_cu_padded.len();
        assert_eq!(&o.local_cu_padded.body()[..n], &c.local_cu_padded[..]);
        o.local_cu_padded
            .untouched_from(n, "local_cu_seqlens_padded");
    } else {
        o.positions.untouched_from(0, "positions (skipped)");
        o.gather.untouched_from(0, "gather_index (skipped)");
        o.local_cu_padded
            .untouched_from(0, "local_cu_seqlens_padded (skipped)");
    }
    let cl = o.layout.body()[0];
    let mirror = skrull_layout {
        dp_rank: l.dp_rank,
        micro_batch: l.micro_batch,
        cp_rank: l.cp_rank,
        micro_batch_global: l.micro_batch_global,
        local_seqs: l.local_seqs,
        sharded_seqs: l.sharded_seqs,
        spans: l.spans,
        local_tokens: l.local_tokens,
        sharded_tokens: l.sharded_tokens,
        tokens: l.tokens,
        pad_tokens: l.pad_tokens,
        charged_tokens: l.charged_tokens,
        local_max_seqlen: l.local_max_seqlen,
        sharded_max_seqlen: l.sharded_max_seqlen,
        sharded_max_seqlen_padded: l.sharded_max_seqlen_padded,
        rank_max_seqlen: l.rank_max_seqlen,
        loss_tokens: l.loss_tokens,
        _reserved: 0,
        micro_batch_tokens: l.micro_batch_tokens,
        global_tokens: l.global_tokens,
    };
    assert_eq!(cl, mirror, "C layout record differs");
    o.layout.untouched_from(1, "layout");
}
