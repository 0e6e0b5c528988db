//! The layout fuzz harness: plans a batch decoded from fuzz bytes through `skrull_schedule()`,
//! then drives `skrull_layout_sizes_max()`, `skrull_layout_sizes()` and `skrull_layout_fill()`
//! (and the core's `layout::fill`) on the plan as written, or with one plan entry corrupted,
//! for chosen or all GPUs, with or without one malformation of the call, and panics on any
//! broken promise:
//!
//! - C and Rust agree: the same status, and on success the same spans, `cu_seqlens`,
//!   positions and counts. A corrupted plan is `PLAN_INVALID` exactly when the plan arrays no
//!   longer hold a valid plan of the configuration and batch (decided here from the core's
//!   `Plan::from_parts` and the summary), and otherwise is laid out like any plan.
//! - The spans of all CP ranks of a micro-batch tile each of its sequences exactly once: a
//!   local sequence is one span on its CP rank, a sharded one is covered over `[0, P)` (`P`
//!   its padded length) by two chunks per rank, real tokens exactly below its length.
//! - `cu_seqlens` start at 0, are monotone and step by the spans' lengths; the positions equal
//!   the spans' ranges; the counts add up; the charged tokens equal the plan's rank tokens.
//! - Nothing is written outside the buffers (guards on both sides), nothing past the valid
//!   entries, and nothing at all on an error.
//!
//! Input: 16 header bytes, then the `c_abi` format (`harness::decode`: configuration and
//! lengths; its perturbation byte is not used). Header: `[0]` GPU mode (0: every GPU, 1: one
//! GPU from bytes 10..16, 2: every GPU with exactly sized buffers, 3: every GPU without
//! positions), `[1]` corruption kind, `[2..4]` its index, `[4..8]` its value, `[8]` call
//! malformation, `[9]` its argument, `[10..16]` the one GPU (three little-endian u16).
//!
//! Used by `fuzz/fuzz_targets/layout.rs` and replayed by `tests/regressions_fuzz.rs`.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a panic is the report

use core::ffi::c_void;
use core::ptr::null_mut;

use skrull::{
    skrull_config, skrull_gpu, skrull_layout, skrull_layout_buffers, skrull_layout_capacity,
    skrull_layout_fill, skrull_layout_sizes, skrull_layout_sizes_max, skrull_micro_batch,
    skrull_placement, skrull_plan_buffers, skrull_plan_sizes, skrull_schedule, skrull_sizes,
    skrull_span, skrull_status, skrull_summary,
};
use skrull_core::config::{MAX_CP, MAX_DP};
use skrull_core::plan::layout::{self, Gpu, LayoutBuffer, LayoutBuffers, LayoutError, LayoutSizes};
use skrull_core::{Config, MicroBatch, Placement, Plan, PlanParts, ShardPadding};

use super::harness::{Reader, decode};
use crate::guarded::Guarded;

/// At most this many GPUs are laid out per input (whole micro-batches only).
const MAX_GPUS: usize = 256;
/// Position arrays longer than this are skipped (the spans carry the same ranges).
const MAX_POSITIONS: usize = 1 << 18;
/// A plan as a C caller holds it, with the capacities it declares (never above what is
/// allocated: a corruption may only shrink them).
#[derive(Clone, Debug, PartialEq)]
struct Held {
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
    caps: [usize; 5],
    reserved: u32,
}

impl Held {
    fn buffers(&mut self) -> skrull_plan_buffers {
        skrull_plan_buffers {
            struct_size: size_of::<skrull_plan_buffers>() as u32,
            _reserved: self.reserved,
            placements: self.placements.as_mut_ptr(),
            placements_len: self.caps[0],
            micro_batches: self.micro_batches.as_mut_ptr(),
            micro_batches_len: self.caps[1],
            members: self.members.as_mut_ptr(),
            members_len: self.caps[2],
            rank_tokens: self.rank_tokens.as_mut_ptr(),
            rank_tokens_len: self.caps[3],
            micro_batches_per_dp: self.per_dp.as_mut_ptr(),
            micro_batches_per_dp_len: self.caps[4],
            summary: &mut self.summary,
            error: null_mut(),
        }
    }
}

/// Plans through the C ABI with exactly sized buffers.
fn schedule(c: &skrull_config, lengths: &[u32]) -> Result<Held, skrull_status> {
    let n = lengths.len();
    let (dp, cp) = (c.dp.clamp(1, MAX_DP), c.cp.clamp(1, MAX_CP));
    let mut sz = skrull_sizes::default();
    // SAFETY: `sz` is a live, aligned skrull_sizes.
    let st = unsafe { skrull_plan_sizes(n, dp, cp, &mut sz) };
    assert_eq!(st, skrull_status::Ok);
    let mut h = Held {
        placements: vec![skrull_placement::default(); sz.placements],
        micro_batches: vec![skrull_micro_batch::default(); sz.micro_batches],
        members: vec![0; sz.members],
        rank_tokens: vec![0; sz.rank_tokens],
        per_dp: vec![0; sz.micro_batches_per_dp],
        summary: skrull_summary::default(),
        caps: [
            sz.placements,
            sz.micro_batches,
            sz.members,
            sz.rank_tokens,
            sz.micro_batches_per_dp,
        ],
        reserved: 0,
    };
    let mut ws = vec![0u8; sz.workspace_bytes];
    let out = h.buffers();
    // SAFETY: every pointer is a live Vec of the stated capacity.
    let st = unsafe {
        skrull_schedule(
            c,
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

/// The plan entries converted to the core's types, when the counts, capacities, summary
/// fields and `tokens_per_gpu` are what a plan of `cfg` and `lengths` has (otherwise the
/// layout functions must answer `PLAN_INVALID`).
struct Staged {
    placements: Vec<Placement>,
    micro_batches: Vec<MicroBatch>,
}

fn stage(cfg: &Config, lengths: &[u32], h: &Held) -> Option<Staged> {
    let n = lengths.len();
    let s = &h.summary;
    let mbs = s.micro_batches as usize;
    if s.sequences as usize != n || mbs > n || s._reserved != 0 {
        return None;
    }
    let counts = [n, mbs, n, mbs * cfg.cp as usize, cfg.dp as usize];
    if counts.iter().zip(h.caps).any(|(&c, cap)| c > cap) {
        return None;
    }
    let placements = h.placements[..n]
        .iter()
        .zip(lengths)
        .map(|(p, &len)| {
            let want = if p.cp_rank == -1 {
                cfg.shard_tokens(len)
            } else {
                len
            };
            (p.tokens_per_gpu == want).then_some(Placement {
                dp_rank: p.dp_rank,
                micro_batch: p.micro_batch,
                cp_rank: p.cp_rank,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let micro_batches = h.micro_batches[..mbs]
        .iter()
        .map(|m| MicroBatch {
            dp_rank: m.dp_rank,
            index: m.index,
            first: m.first,
            count: m.count,
        })
        .collect();
    Some(Staged {
        placements,
        micro_batches,
    })
}

/// The core's view of the staged plan, if `Plan::from_parts` accepts it and its recount
/// matches the summary.
fn core_plan<'a>(
    cfg: &Config,
    lengths: &'a [u32],
    h: &'a Held,
    st: &'a Staged,
) -> Option<Plan<'a>> {
    let (n, cp, dp) = (lengths.len(), cfg.cp as usize, cfg.dp as usize);
    let mbs = st.micro_batches.len();
    let parts = PlanParts {
        placements: &st.placements,
        micro_batches: &st.micro_batches,
        members: &h.members[..n],
        rank_tokens: &h.rank_tokens[..mbs * cp],
        micro_batches_per_dp: &h.per_dp[..dp],
        rollbacks: h.summary.rollbacks,
    };
    let plan = Plan::from_parts(cfg, lengths, parts).ok()?;
    let s = plan.summary();
    let c = &h.summary;
    let same = (
        s.total_tokens,
        s.micro_batches,
        s.sharded,
        s.peak_rank_tokens,
    ) == (
        c.total_tokens,
        c.micro_batches,
        c.sharded,
        c.peak_rank_tokens,
    );
    same.then_some(plan)
}

/// Edits one entry of the plan (kind 0: none). Returns whether anything changed.
fn corrupt(h: &mut Held, kind: u8, index: u16, value: u32) -> bool {
    let before = h.clone();
    let i = usize::from(index);
    let pick = |len: usize| (len > 0).then(|| i % len);
    let (np, nm, nk, nt, nd) = (
        h.placements.len(),
        h.micro_batches.len(),
        h.members.len(),
        h.rank_tokens.len(),
        h.per_dp.len(),
    );
    let s = &mut h.summary;
    match kind % 24 {
        1..=4 | 21 => {
            if let Some(k) = pick(np) {
                let p = &mut h.placements[k];
                match kind % 24 {
                    1 => p.dp_rank = value % 8,
                    2 => p.micro_batch = value % 8,
                    3 => p.cp_rank = (value % 10) as i32 - 1,
                    4 => p.tokens_per_gpu = value,
                    _ => p.cp_rank = -1,
                }
            }
        }
        5..=8 => {
            if let Some(k) = pick(nm) {
                let m = &mut h.micro_batches[k];
                match kind % 24 {
                    5 => m.dp_rank = value % 8,
                    6 => m.index = value % 8,
                    7 => m.first = value % 64,
                    _ => m.count = value % 64,
                }
            }
        }
        9 | 22 => {
            if let Some(k) = pick(nk) {
                let m = &mut h.members[k];
                *m = if kind % 24 == 9 {
                    value % 1100
                } else {
                    m.wrapping_add(1)
                };
            }
        }
        // Two members swapped (may stay a valid plan: the order inside a micro-batch).
        10 if nk > 1 => h.members.swap(i % nk, value as usize % nk),
        11 | 23 => {
            if let Some(k) = pick(nt) {
                let t = &mut h.rank_tokens[k];
                *t = if kind % 24 == 11 {
                    value
                } else {
                    t.wrapping_sub(1)
                };
            }
        }
        12 => {
            if let Some(k) = pick(nd) {
                h.per_dp[k] = value % 8;
            }
        }
        13 => s.total_tokens = u64::from(value),
        14 => s.sequences = value % 1100,
        15 => s.micro_batches = value % 1100,
        16 => s.sharded = value % 1100,
        17 => s.rollbacks = value,
        18 => s.peak_rank_tokens = value,
        // The outside harness's report: a nonzero reserved field in the summary.
        19 => s._reserved = value | 1,
        // A capacity below the allocation (may drop below what the summary says).
        20 => {
            let k = i % 5;
            h.caps[k] = h.caps[k].saturating_sub(value as usize % 3);
        }
        _ => {}
    }
    *h != before
}

/// A malformation of one layout call, and the stage of the documented order it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Malform {
    None,
    /// Checked right after the plan struct (before the plan is read).
    PlanReserved,
    OutReserved,
    OutStructSize(u32),
    /// Checked before the plan is validated.
    WorkspaceShort,
    /// Any alignment is fine.
    OddWorkspace,
    /// Checked last, after NO_SUCH_GPU and LAYOUT_OVERFLOW.
    OutputShort(u8),
    OutputNull(u8),
    CapacityHuge(u8),
    /// `spans` declared twice as long, its spare half lying on `positions`.
    SpansSpareOnPositions,
    /// `local_cu_seqlens` inside the declared (unused) capacity of the plan's `members`.
    OutputInPlanSpare,
}

fn malform(code: u8, arg: u8) -> Malform {
    match code % 16 {
        1 => Malform::PlanReserved,
        2 => Malform::OutReserved,
        3 => Malform::OutStructSize([0, 8, 111, 4097][usize::from(arg % 4)]),
        4 => Malform::WorkspaceShort,
        5 => Malform::OddWorkspace,
        6 | 7 => Malform::OutputShort(arg),
        8 => Malform::OutputNull(arg),
        9 => Malform::CapacityHuge(arg),
        10 => Malform::SpansSpareOnPositions,
        11 => Malform::OutputInPlanSpare,
        _ => Malform::None,
    }
}

/// The independent padded length of a sharded sequence.
fn padded(cfg: &Config, len: u32) -> u64 {
    let two_n = 2 * u64::from(cfg.cp);
    match cfg.shard_padding {
        ShardPadding::Zigzag => u64::from(len).div_ceil(two_n) * two_n,
        _ => u64::from(len),
    }
}

const FILL_SPAN: skrull_span = skrull_span {
    seq: 0xDEAD_BEEF,
    chunk: -7,
    offset: 0xDEAD_BEEF,
    start: 0xDEAD_BEEF,
    len: 0xDEAD_BEEF,
    pad: 0xDEAD_BEEF,
};
const FILL_I: i32 = -0x2152_4111;

/// The C output buffers of one GPU, between guards.
struct Outs {
    spans: Guarded<skrull_span>,
    local_cu: Guarded<i32>,
    sharded_cu: Guarded<i32>,
    sharded_cu_padded: Guarded<i32>,
    rank_cu: Guarded<i32>,
    positions: Guarded<i32>,
    local_cu_padded: Guarded<i32>,
    gather: Guarded<i64>,
    layout: Guarded<skrull_layout>,
}

fn fill_layout() -> skrull_layout {
    skrull_layout {
        dp_rank: 0xDEAD_BEEF,
        _reserved: 0xDEAD_BEEF,
        global_tokens: 0xDEAD_BEEF,
        ..skrull_layout::default()
    }
}

impl Outs {
    fn new(spans: usize, local: usize, sharded: usize, positions: usize) -> Outs {
        Outs {
            // Twice the spans: room for a spare half (`SpansSpareOnPositions`).
            spans: Guarded::new(2 * spans + 8, FILL_SPAN),
            local_cu: Guarded::new(local, FILL_I),
            sharded_cu: Guarded::new(sharded, FILL_I),
            sharded_cu_padded: Guarded::new(sharded, FILL_I),
            rank_cu: Guarded::new(sharded, FILL_I),
            positions: Guarded::new(positions, FILL_I),
            local_cu_padded: Guarded::new(local, FILL_I),
            gather: Guarded::new(positions, i64::from(FILL_I)),
            layout: Guarded::new(1, fill_layout()),
        }
    }
    fn untouched(&self, what: &str) {
        self.spans.untouched_from(0, what);
        self.local_cu.untouched_from(0, what);
        self.sharded_cu.untouched_from(0, what);
        self.sharded_cu_padded.untouched_from(0, what);
        self.rank_cu.untouched_from(0, what);
        self.positions.untouched_from(0, what);
        self.local_cu_padded.untouched_from(0, what);
        self.gather.untouched_from(0, what);
        self.layout.untouched_from(0, what);
    }
    fn reset(&mut self) {
        self.spans.reset();
        self.local_cu.reset();
        self.sharded_cu.reset();
        self.sharded_cu_padded.reset();
        self.rank_cu.reset();
        self.positions.reset();
        self.local_cu_padded.reset();
        self.gather.reset();
        self.layout.reset();
    }
}

/// One GPU's layout from the core, with exactly sized buffers.
struct CoreLayout {
    l: layout::Layout,
    spans: Vec<layout::Span>,
    local_cu: Vec<i32>,
    sharded_cu: Vec<i32>,
    sharded_cu_padded: Vec<i32>,
    rank_cu: Vec<i32>,
    positions: Vec<i32>,
    local_cu_padded: Vec<i32>,
    gather: Vec<i64>,
}

fn core_fill(
    cfg: &Config,
    lengths: &[u32],
    plan: &Plan<'_>,
    gpu: Gpu,
    with_positions: bool,
) -> Result<CoreLayout, LayoutError> {
    let z = LayoutSizes::for_gpu(cfg, lengths, plan, gpu)?;
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
    };
    // One buffer one short must be BufferTooSmall naming it, with nothing written.
    if z.spans > 0 {
        let mut short = vec![layout::Span::default(); z.spans as usize - 1];
        let r = layout::fill(
            cfg,
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
    c.l = layout::fill(
        cfg,
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
        },
    )?;
    Ok(c)
}

/// Checks one GPU's layout on its own: counts, `cu_seqlens`, positions, membership.
fn check_gpu(cfg: &Config, lengths: &[u32], h: &Held, gpu: Gpu, c: &CoreLayout) {
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
            assert_eq!((s.chunk, s.start, s.len, s.pad), (-1, 0, len, 0));
            assert_eq!(p.cp_rank, r as i32);
            assert_eq!(c.local_cu[k + 1] - c.local_cu[k], len as i32);
            local_max = local_max.max(len);
        } else {
            let j = k - l.local_seqs as usize;
            let want = if j.is_multiple_of(2) {
                r
            } else {
                2 * cp - 1 - r
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
                let pl = padded(cfg, len) as i32;
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
    assert_eq!(c.local_cu.last(), Some(&(l.local_tokens as i32)));
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
    let longest = sharded.map(|s| lengths[s.seq as usize]).max().unwrap_or(0);
    assert_eq!(l.sharded_max_seqlen, longest as i32);
    let longest_padded = if longest == 0 {
        0
    } else {
        padded(cfg, longest)
    };
    assert_eq!(
        i64::from(l.sharded_max_seqlen_padded),
        longest_padded as i64
    );
}

/// Checks that the C outputs equal the core's layout and nothing else was written.
fn check_c_equals_core(o: &Outs, c: &CoreLayout, with_positions: bool) {
    let l = &c.l;
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

/// One `skrull_layout_fill` call with `m` applied; returns the status.
#[allow(clippy::too_many_arguments)]
fn c_fill(
    c: &skrull_config,
    lengths: &[u32],
    h: &mut Held,
    gpu: skrull_gpu,
    o: &mut Outs,
    caps: [usize; 4],
    ws_bytes: usize,
    m: Malform,
    spare: &mut Vec<u32>,
) -> skrull_status {
    let [nspans, nlocal, nsharded, npos] = caps;
    // One spare byte for `OddWorkspace`, one sentinel after it.
    let mut ws = vec![0x5Au8; ws_bytes + 2];
    let mut ws_ptr = ws.as_mut_ptr();
    let mut ws_len = ws_bytes;
    let mut out = skrull_layout_buffers {
        struct_size: size_of::<skrull_layout_buffers>() as u32,
        _reserved: 0,
        spans: o.spans.ptr(),
        spans_len: nspans,
        local_cu_seqlens: o.local_cu.ptr(),
        local_cu_seqlens_len: nlocal,
        sharded_cu_seqlens: o.sharded_cu.ptr(),
        sharded_cu_seqlens_len: nsharded,
        sharded_cu_seqlens_padded: o.sharded_cu_padded.ptr(),
        sharded_cu_seqlens_padded_len: nsharded,
        rank_cu_seqlens: o.rank_cu.ptr(),
        rank_cu_seqlens_len: nsharded,
        positions: if npos == 0 {
            null_mut()
        } else {
            o.positions.ptr()
        },
        positions_len: npos,
        layout: o.layout.ptr(),
        gather_index: if npos == 0 {
            null_mut()
        } else {
            o.gather.ptr()
        },
        gather_index_len: npos,
        local_cu_seqlens_padded: if npos == 0 {
            null_mut()
        } else {
            o.local_cu_padded.ptr()
        },
        local_cu_seqlens_padded_len: if npos == 0 { 0 } else { nlocal },
    };
    let mut plan = h.buffers();
    let which = |w: u8| usize::from(w) % 6;
    match m {
        Malform::None | Malform::SpansSpareOnPositions | Malform::OutputInPlanSpare => {}
        Malform::PlanReserved => plan._reserved = 1,
        Malform::OutReserved => out._reserved = 1,
        Malform::OutStructSize(s) => out.struct_size = s,
        Malform::WorkspaceShort => ws_len -= 1,
        Malform::OddWorkspace => ws_ptr = ws_ptr.wrapping_add(1),
        Malform::OutputShort(w) => {
            let len = match which(w) {
                0 => &mut out.spans_len,
                1 => &mut out.local_cu_seqlens_len,
                2 => &mut out.sharded_cu_seqlens_len,
                3 => &mut out.sharded_cu_seqlens_padded_len,
                4 => &mut out.rank_cu_seqlens_len,
                _ => &mut out.positions_len,
            };
            *len = len.saturating_sub(1);
        }
        Malform::OutputNull(w) => match which(w) {
            0 => out.spans = null_mut(),
            1 => out.local_cu_seqlens = null_mut(),
            2 => out.sharded_cu_seqlens = null_mut(),
            3 => out.sharded_cu_seqlens_padded = null_mut(),
            4 => out.rank_cu_seqlens = null_mut(),
            _ => out.layout = null_mut(),
        },
        Malform::CapacityHuge(w) => match which(w) {
            0 => out.spans_len = usize::MAX,
            1 => out.local_cu_seqlens_len = usize::MAX / 2,
            2 => out.sharded_cu_seqlens_len = usize::MAX / 4 + 1,
            3 => plan.members_len = usize::MAX,
            4 => plan.placements_len = usize::MAX / 16 + 1,
            _ => out.positions_len = usize::MAX / 4,
        },
    }
    if m == Malform::SpansSpareOnPositions {
        // The spans buffer has room for 2 * nspans + 8; positions go on its spare half.
        let room = (nspans + 8) * size_of::<skrull_span>() / 4;
        if npos > 0 && npos <= room {
            out.spans_len = 2 * nspans + 8;
            out.positions = o.spans.ptr().wrapping_add(nspans).cast::<i32>();
        }
    }
    if m == Malform::OutputInPlanSpare {
        // members copied into a larger buffer whose spare capacity holds local_cu_seqlens.
        let n = lengths.len();
        spare.clear();
        spare.extend_from_slice(&h.members[..n.min(h.members.len())]);
        spare.resize(n + nlocal + 1, 0);
        plan.members = spare.as_mut_ptr();
        plan.members_len = spare.len();
        out.local_cu_seqlens = spare.as_mut_ptr().wrapping_add(n + 1).cast::<i32>();
    }
    // SAFETY: every pointer is live for its declared capacity, except capacities and NULLs the
    // library must refuse before any access, and the deliberate overlaps (inside one live
    // allocation, refused before any write).
    let st = unsafe {
        skrull_layout_fill(
            c,
            lengths.as_ptr(),
            lengths.len(),
            &plan,
            gpu,
            ws_ptr.cast::<c_void>(),
            ws_len,
            &out,
        )
    };
    assert!(
        !matches!(st, skrull_status::Panic | skrull_status::Internal),
        "skrull_layout_fill returned {st:?} ({m:?})"
    );
    assert_eq!(ws[ws_bytes + 1], 0x5A, "workspace written past its end");
    st
}

/// The statuses `skrull_layout_fill` may return for a call with malformation `m`, given the
/// status `clean` of the same call without it, the capacities `lens` it passes (spans, the
/// four `cu_seqlens`, positions) and the elements `needed` of each.
fn expected(
    clean: skrull_status,
    m: Malform,
    lens: [usize; 6],
    needed: [usize; 6],
    spare_applied: bool,
) -> skrull_status {
    use skrull_status as S;
    match m {
        Malform::None | Malform::OddWorkspace => clean,
        Malform::PlanReserved | Malform::OutReserved => S::InvalidArg,
        Malform::OutStructSize(_) => S::BadStructSize,
        Malform::WorkspaceShort => S::WorkspaceTooSmall,
        // Plan capacities are read before the plan is validated (the plan is uncorrupted).
        Malform::CapacityHuge(w) if matches!(w % 6, 3 | 4) => S::InvalidArg,
        // Everything else is checked after NO_SUCH_GPU and LAYOUT_OVERFLOW.
        _ if clean != S::Ok => clean,
        Malform::OutputShort(w) => {
            let w = usize::from(w) % 6;
            if lens[w] > 0 && lens[w] - 1 < needed[w] {
                S::OutputTooSmall
            } else {
                S::Ok
            }
        }
        // NULL with a nonzero capacity (layout: always required).
        Malform::OutputNull(w) => {
            let w = usize::from(w) % 6;
            if w == 5 || lens[w] > 0 {
                S::NullArg
            } else {
                S::Ok
            }
        }
        // Positions NULL (skipped) with a nonzero capacity is NULL_ARG, not a huge range.
        Malform::CapacityHuge(w) if w % 6 == 5 && lens[5] == 0 => S::NullArg,
        Malform::CapacityHuge(_) | Malform::OutputInPlanSpare => S::InvalidArg,
        Malform::SpansSpareOnPositions => {
            if spare_applied {
                S::InvalidArg
            } else {
                S::Ok
            }
        }
    }
}

/// What one input exercised (for tests that pin a seed to what it is named after).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Run {
    /// `skrull_schedule()`'s status.
    pub schedule: Option<skrull_status>,
    /// A plan entry was edited.
    pub corrupted: bool,
    /// The (possibly edited) plan is a valid plan of the configuration and batch.
    pub plan_valid: bool,
    /// `skrull_layout_fill()`'s status for each GPU tried, in order.
    pub fills: Vec<skrull_status>,
    /// Every GPU of the plan was laid out and the tiling checked.
    pub tiled: bool,
}

/// Runs the layout harness on fuzz bytes.
pub fn layout(data: &[u8]) -> Run {
    let mut run = Run::default();
    let mut r = Reader::new(data);
    let mode = r.u8() % 4;
    let (kind, index, value) = (r.u8(), r.u16(), r.u32());
    let m = malform(r.u8(), r.u8());
    let one = Gpu {
        dp_rank: u32::from(r.u16()),
        micro_batch: u32::from(r.u16()),
        cp_rank: u32::from(r.u16()),
    };
    let input = decode(data.get(16..).unwrap_or(&[]));
    let (c, lengths) = (input.cfg, input.lengths);
    let n = lengths.len();

    // The maximum sizes: the configuration's errors exactly as skrull_schedule reports them.
    let mut cap = skrull_layout_capacity::default();
    // SAFETY: live config and output.
    let st_max = unsafe { skrull_layout_sizes_max(&c, n, &mut cap) };
    let held = schedule(&c, &lengths);
    run.schedule = Some(held.as_ref().err().copied().unwrap_or(skrull_status::Ok));
    let mut h = match held {
        Ok(h) => h,
        Err(st) => {
            if matches!(
                st,
                skrull_status::InvalidEnum
                    | skrull_status::InvalidDp
                    | skrull_status::InvalidCp
                    | skrull_status::InvalidBucket
                    | skrull_status::InvalidModel
            ) {
                assert_eq!(st_max, st, "sizes_max and schedule disagree on the config");
                assert_eq!(cap, skrull_layout_capacity::default());
            }
            return run;
        }
    };
    assert_eq!(st_max, skrull_status::Ok);
    let cfg = c.to_core().expect("planned, so valid");
    let max = LayoutSizes::max_for(n, &cfg);
    assert_eq!(
        (
            cap.spans,
            cap.local_cu_seqlens,
            cap.sharded_cu_seqlens,
            cap.positions
        ),
        (
            max.spans as usize,
            max.local_cu_seqlens as usize,
            max.sharded_cu_seqlens as usize,
            max.positions as usize
        )
    );
    let corrupted = corrupt(&mut h, kind, index, value);
    // The core's view borrows a copy; the C calls get pointers into `h` (which they only read).
    let frozen = h.clone();
    let staged = stage(&cfg, &lengths, &frozen);
    let plan = staged
        .as_ref()
        .and_then(|st| core_plan(&cfg, &lengths, &frozen, st));
    if !corrupted {
        assert!(
            plan.is_some(),
            "the plan skrull_schedule wrote is not valid"
        );
    }
    run.corrupted = corrupted;
    run.plan_valid = plan.is_some();

    // The GPUs: one from the bytes, or whole micro-batches of the plan (up to MAX_GPUS).
    let mut gpus = Vec::new();
    if mode == 1 || plan.is_none() {
        gpus.push(one);
        gpus.push(Gpu::default());
    } else if let Some(p) = &plan {
        for mb in p.micro_batches() {
            if gpus.len() + cfg.cp as usize > MAX_GPUS {
                break;
            }
            for rank in 0..cfg.cp {
                gpus.push(Gpu {
                    dp_rank: mb.dp_rank,
                    micro_batch: mb.index,
                    cp_rank: rank,
                });
            }
        }
    }

    // Coverage per sequence over all laid-out GPUs: (start, end) position ranges.
    let mut cover: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(); n];
    let mut spare = Vec::new();
    let mut laid_out = 0usize;
    for (k, &gpu) in gpus.iter().enumerate() {
        let cg = skrull_gpu {
            dp_rank: gpu.dp_rank,
            micro_batch: gpu.micro_batch,
            cp_rank: gpu.cp_rank,
        };
        // The exact sizes, from C and from the core.
        let mut z = skrull_layout_capacity::default();
        let mut ws = vec![0u8; cap.workspace_bytes];
        let pb = h.buffers();
        // SAFETY: live buffers of their declared capacities.
        let st_sizes = unsafe {
            skrull_layout_sizes(
                &c,
                lengths.as_ptr(),
                n,
                &pb,
                cg,
                ws.as_mut_ptr().cast(),
                ws.len(),
                &mut z,
            )
        };
        let want_sizes = match &plan {
            None => Err(skrull_status::PlanInvalid),
            Some(p) => LayoutSizes::for_gpu(&cfg, &lengths, p, gpu).map_err(skrull_status::from),
        };
        match want_sizes {
            Ok(s) => {
                assert_eq!(st_sizes, skrull_status::Ok);
                assert_eq!(
                    (
                        z.spans,
                        z.local_cu_seqlens,
                        z.sharded_cu_seqlens,
                        z.positions
                    ),
                    (
                        s.spans as usize,
                        s.local_cu_seqlens as usize,
                        s.sharded_cu_seqlens as usize,
                        s.positions as usize
                    )
                );
                assert_eq!(z.workspace_bytes, cap.workspace_bytes);
                assert!(s.spans <= max.spans && s.positions <= max.positions);
            }
            Err(e) => {
                assert_eq!(st_sizes, e, "skrull_layout_sizes vs the core");
                assert_eq!(z, skrull_layout_capacity::default());
            }
        }

        // Buffer sizes for this call: the maxima or the exact sizes; positions within reason.
        let exact = st_sizes == skrull_status::Ok && mode == 2;
        let pick = |mx: usize, ex: usize| if exact { ex } else { mx };
        let nspans = pick(cap.spans, z.spans);
        let nlocal = pick(cap.local_cu_seqlens, z.local_cu_seqlens);
        let nsharded = pick(cap.sharded_cu_seqlens, z.sharded_cu_seqlens);
        let mut npos = if cap.positions <= MAX_POSITIONS && !exact {
            cap.positions
        } else {
            z.positions
        };
        let with_positions = mode != 3 && npos > 0 && npos <= MAX_POSITIONS;
        if !with_positions {
            npos = 0;
        }
        let mut o = Outs::new(nspans, nlocal, nsharded, npos);
        // One malformed call per input (the first GPU); those that swap in plan capacities
        // only on the plan as written (a corruption may have shrunk one).
        let plan_edit = matches!(m, Malform::OutputInPlanSpare)
            || matches!(m, Malform::CapacityHuge(w) if matches!(w % 6, 3 | 4));
        let mcall = if k == 0 && !(corrupted && plan_edit) {
            m
        } else {
            Malform::None
        };
        let st = c_fill(
            &c,
            &lengths,
            &mut h,
            cg,
            &mut o,
            [nspans, nlocal, nsharded, npos],
            cap.workspace_bytes,
            mcall,
            &mut spare,
        );
        let core = plan
            .as_ref()
            .map(|p| core_fill(&cfg, &lengths, p, gpu, with_positions));
        let clean = match &core {
            None => skrull_status::PlanInvalid,
            Some(Ok(_)) => skrull_status::Ok,
            Some(Err(e)) => skrull_status::from(*e),
        };
        let lens = [nspans, nlocal, nsharded, nsharded, nsharded, npos];
        let zs = z.sharded_cu_seqlens;
        let needed = [
            z.spans,
            z.local_cu_seqlens,
            zs,
            zs,
            zs,
            npos.min(z.positions),
        ];
        let spare_applied = npos > 0 && npos <= (nspans + 8) * size_of::<skrull_span>() / 4;
        let want = expected(clean, mcall, lens, needed, spare_applied);
        assert_eq!(st, want, "skrull_layout_fill ({mcall:?}, gpu {gpu:?})");
        run.fills.push(st);
        if st != skrull_status::Ok {
            o.untouched(&format!("{st:?}"));
            continue;
        }
        let core = core
            .expect("OK implies a plan")
            .expect("OK implies a layout");
        check_c_equals_core(&o, &core, with_positions);
        check_gpu(&cfg, &lengths, &h, gpu, &core);
        for s in &core.spans {
            let end = u64::from(s.start) + u64::from(s.len) + u64::from(s.pad);
            cover[s.seq as usize].push((u64::from(s.start), end, gpu.cp_rank));
        }
        laid_out += 1;
        o.reset();
    }

    // Tiling: when every GPU of the plan was laid out, each sequence is covered exactly once.
    let Some(p) = &plan else { return run };
    let all = p.micro_batches().len() * cfg.cp as usize;
    if mode == 1 || laid_out != all || gpus.len() != all {
        return run;
    }
    for (seq, ranges) in cover.iter_mut().enumerate() {
        let len = lengths[seq];
        let pl = &h.placements[seq];
        if pl.cp_rank != -1 {
            assert_eq!(
                ranges.len(),
                1,
                "local sequence {seq} laid out {} times",
                ranges.len()
            );
            assert_eq!(ranges[0], (0, u64::from(len), pl.cp_rank as u32));
            continue;
        }
        assert_eq!(ranges.len(), 2 * cfg.cp as usize, "sharded {seq}: spans");
        ranges.sort_unstable();
        let mut at = 0u64;
        for &(start, end, _) in ranges.iter() {
            assert_eq!(start, at, "sharded {seq}: gap or overlap at {at}");
            at = end;
        }
        assert_eq!(at, padded(&cfg, len), "sharded {seq}: covered {at}");
    }
    run.tiled = true;
    run
}
