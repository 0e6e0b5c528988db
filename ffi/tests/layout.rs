//! The layout functions called the way C calls them: the spans, `cu_seqlens`, positions and
//! counts equal the core's for every GPU, the worked example N = 4, S = 10 by hand, and every
//! error leaves every output untouched.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;
use core::ptr::{null, null_mut};

use skrull::*;
use skrull_core::plan::layout::{self, Gpu, LayoutBuffers, LayoutSizes, Span};
use skrull_core::{Plan, PlanParts};
use skrull_kit::c_layout::{GUARD_SPAN, OwnedCLayout};

/// A plan as a C caller holds it after `skrull_schedule()`.
struct Sched {
    cfg: skrull_config,
    lengths: Vec<u32>,
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
}

impl Sched {
    fn new(cfg: skrull_config, lengths: &[u32]) -> Sched {
        let n = lengths.len();
        let mut s = skrull_sizes::default();
        // SAFETY: `s` is a live, aligned skrull_sizes.
        let st = unsafe { skrull_plan_sizes(n, cfg.dp, cfg.cp, &mut s) };
        assert_eq!(st, skrull_status::Ok);
        let mut out = Sched {
            cfg,
            lengths: lengths.to_vec(),
            placements: vec![skrull_placement::default(); s.placements],
            micro_batches: vec![skrull_micro_batch::default(); s.micro_batches],
            members: vec![0; s.members],
            rank_tokens: vec![0; s.rank_tokens],
            per_dp: vec![0; s.micro_batches_per_dp],
            summary: skrull_summary::default(),
        };
        let mut ws = vec![0u8; s.workspace_bytes];
        let bufs = out.buffers();
        // SAFETY: every pointer is a live Vec of the stated length.
        let st = unsafe {
            skrull_schedule(
                &cfg,
                lengths.as_ptr(),
                n,
                ws.as_mut_ptr().cast::<c_void>(),
                ws.len(),
                &bufs,
            )
        };
        assert_eq!(st, skrull_status::Ok);
        out
    }

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
            error: std::ptr::null_mut(),
            ..skrull_plan_buffers::EMPTY
        }
    }

    fn max_sizes(&self) -> skrull_layout_capacity {
        let mut m = skrull_layout_capacity::default();
        // SAFETY: live config and output.
        let st = unsafe { skrull_layout_sizes_max(&self.cfg, self.lengths.len(), &mut m) };
        assert_eq!(st, skrull_status::Ok);
        m
    }

    /// Every GPU of the plan.
    fn gpus(&self) -> Vec<skrull_gpu> {
        let mut v = Vec::new();
        for d in 0..self.cfg.dp {
            for m in 0..self.per_dp[d as usize] {
                for r in 0..self.cfg.cp {
                    v.push(skrull_gpu {
                        dp_rank: d,
                        micro_batch: m,
                        cp_rank: r,
                    });
                }
            }
        }
        v
    }
}

/// Layout output buffers, pre-filled with guard values.
type Outs = OwnedCLayout;

/// Fills `Outs` the way C calls `skrull_layout_fill()`.
trait Fill {
    fn fill(&mut self, s: &mut Sched, gpu: skrull_gpu) -> skrull_status;
    fn fill_with(
        &mut self,
        s: &mut Sched,
        gpu: skrull_gpu,
        out: &skrull_layout_buffers,
    ) -> skrull_status;
}

impl Fill for Outs {
    fn fill(&mut self, s: &mut Sched, gpu: skrull_gpu) -> skrull_status {
        let out = self.buffers();
        self.fill_with(s, gpu, &out)
    }

    fn fill_with(
        &mut self,
        s: &mut Sched,
        gpu: skrull_gpu,
        out: &skrull_layout_buffers,
    ) -> skrull_status {
        let plan = s.buffers();
        // SAFETY: every pointer is a live Vec (or field) of the stated length.
        unsafe {
            skrull_layout_fill(
                &s.cfg,
                s.lengths.as_ptr(),
                s.lengths.len(),
                &plan,
                gpu,
                self.workspace.as_mut_ptr().cast::<c_void>(),
                self.workspace.len(),
                out,
            )
        }
    }
}

fn config(dp: u32, cp: u32, bucket: u32, policy: u32, padding: u32) -> skrull_config {
    let mut c = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap();
    (c.dp, c.cp, c.bucket_tokens, c.policy, c.shard_padding) = (dp, cp, bucket, policy, padding);
    c
}

/// A deterministic long-tailed batch.
fn batch(seed: u64, n: usize, max: u32) -> Vec<u32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = match state % 10 {
                0 => 1 + (state >> 8) % u64::from(max),
                1..=3 => 1 + (state >> 8) % u64::from(max / 4 + 1),
                _ => 1 + (state >> 8) % 64,
            };
            len.min(u64::from(max)) as u32
        })
        .collect()
}

/// The core's layout of one GPU of the same plan, rebuilt from the C arrays.
fn core_layout(s: &Sched, gpu: skrull_gpu) -> (layout::Layout, Vec<Span>, [Vec<i32>; 6], Vec<i64>) {
    let cfg = s.cfg.to_core().unwrap();
    let n = s.lengths.len();
    let mbs = s.summary.micro_batches as usize;
    let placements: Vec<_> = s.placements[..n]
        .iter()
        .map(|p| skrull_core::Placement {
            dp_rank: p.dp_rank,
            micro_batch: p.micro_batch,
            cp_rank: p.cp_rank,
            ..skrull_core::Placement::default()
        })
        .collect();
    let micro_batches: Vec<_> = s.micro_batches[..mbs]
        .iter()
        .map(|m| skrull_core::MicroBatch {
            dp_rank: m.dp_rank,
            index: m.index,
            first: m.first,
            count: m.count,
        })
        .collect();
    let parts = PlanParts {
        placements: &placements,
        micro_batches: &micro_batches,
        members: &s.members[..n],
        rank_tokens: &s.rank_tokens[..mbs * s.cfg.cp as usize],
        micro_batches_per_dp: &s.per_dp,
        rollbacks: s.summary.rollbacks,
    };
    let setup = skrull_core::Setup::single_use(&cfg).unwrap();
    let plan = Plan::from_parts(&setup, &s.lengths, parts).unwrap();
    let g = Gpu {
        dp_rank: gpu.dp_rank,
        micro_batch: gpu.micro_batch,
        cp_rank: gpu.cp_rank,
    };
    let z = LayoutSizes::for_gpu(&setup, &s.lengths, &plan, g).unwrap();
    let mut spans = vec![Span::default(); z.spans as usize];
    let mut arrays = [
        vec![0; z.local_cu_seqlens as usize],
        vec![0; z.sharded_cu_seqlens as usize],
        vec![0; z.sharded_cu_seqlens as usize],
        vec![0; z.sharded_cu_seqlens as usize],
        vec![0; z.positions as usize],
        vec![0; z.local_cu_seqlens as usize],
    ];
    let mut gather = vec![0i64; z.positions as usize];
    let [a, b, c, d, e, f] = &mut arrays;
    let out = LayoutBuffers {
        spans: &mut spans,
        local_cu_seqlens: a,
        sharded_cu_seqlens: b,
        sharded_cu_seqlens_padded: c,
        rank_cu_seqlens: d,
        positions: e,
        local_cu_seqlens_padded: f,
        gather_index: &mut gather,
        rings: &mut [],
    };
    let l = layout::fill(&setup, &s.lengths, &plan, g, out).unwrap();
    (l, spans, arrays, gather)
}

fn c_span(s: &Span) -> skrull_span {
    skrull_span {
        seq: s.seq,
        chunk: s.chunk,
        offset: s.offset,
        start: s.start,
        len: s.len,
        pad: s.pad,
    }
}

#[test]
fn every_gpu_equals_the_core_layout() {
    let cases = [
        (1, 4, 24, 12),
        (2, 2, 24, 12),
        (4, 8, 2048, 200),
        (3, 3, 97, 41),
        (2, 1, 64, 30),
    ];
    let mut gpus = 0;
    for (k, &(dp, cp, bucket, n)) in cases.iter().enumerate() {
        for (policy, (padding, options)) in (0..5).flat_map(|p| {
            (0..2).flat_map(move |z| [(z, (0, 0, 0)), (z, (8, 1, 1))].map(|o| (p, o)))
        }) {
            {
                let mut cfg = config(dp, cp, bucket, policy, padding);
                (cfg.pad_multiple, cfg.pad_local, cfg.lockstep) = options;
                let lengths = batch(k as u64 * 8 + u64::from(policy), n, cp * bucket / 2);
                let mut s = Sched::new(cfg, &lengths);
                let max = s.max_sizes();
                assert_eq!(
                    (max.spans, max.local_cu_seqlens, max.positions),
                    (2 * n, n + 1, bucket as usize)
                );
                let mut o = Outs::new(max);
                let mut loss = 0u64;
                for gpu in s.gpus() {
                    let (l, spans, [lc, sc, scp, rc, pos, lcp], gather) = core_layout(&s, gpu);
                    assert_eq!(o.fill(&mut s, gpu), skrull_status::Ok);
                    let c = &o.layout;
                    assert_eq!(
                        (c.dp_rank, c.micro_batch, c.cp_rank),
                        (l.dp_rank, l.micro_batch, l.cp_rank)
                    );
                    assert_eq!(
                        (c.spans, c.tokens, c.pad_tokens),
                        (l.spans, l.tokens, l.pad_tokens)
                    );
                    assert_eq!(
                        (c.local_seqs, c.sharded_seqs),
                        (l.local_seqs, l.sharded_seqs)
                    );
                    assert_eq!(
                        (c.local_tokens, c.sharded_tokens),
                        (l.local_tokens, l.sharded_tokens)
                    );
                    assert_eq!(
                        (c.charged_tokens, c.loss_tokens),
                        (l.charged_tokens, l.loss_tokens)
                    );
                    assert_eq!(c.micro_batch_global, l.micro_batch_global);
                    assert_eq!(
                        [
                            c.local_max_seqlen,
                            c.sharded_max_seqlen,
                            c.sharded_max_seqlen_padded,
                            c.rank_max_seqlen
                        ],
                        [
                            l.local_max_seqlen,
                            l.sharded_max_seqlen,
                            l.sharded_max_seqlen_padded,
                            l.rank_max_seqlen
                        ]
                    );
                    assert_eq!(
                        (c.micro_batch_tokens, c.global_tokens, c._reserved),
                        (l.micro_batch_tokens, l.global_tokens, 0)
                    );
                    let want: Vec<_> = spans.iter().map(c_span).collect();
                    assert_eq!(&o.spans[..spans.len()], &want[..]);
                    assert_eq!(&o.local_cu[..lc.len()], &lc[..]);
                    assert_eq!(&o.sharded_cu[..sc.len()], &sc[..]);
                    assert_eq!(&o.sharded_cu_padded[..scp.len()], &scp[..]);
                    assert_eq!(&o.rank_cu[..rc.len()], &rc[..]);
                    assert_eq!(&o.positions[..pos.len()], &pos[..]);
                    assert_eq!(&o.local_cu_padded[..lcp.len()], &lcp[..]);
                    assert_eq!(&o.gather[..gather.len()], &gather[..]);
                    assert!(o.gather[gather.len()..].iter().all(|&x| x == -7));
                    // Entries past the layout are untouched.
                    assert!(o.spans[spans.len()..].iter().all(|x| *x == GUARD_SPAN));
                    assert!(o.positions[pos.len()..].iter().all(|&x| x == -7));
                    // The exact sizes agree.
                    let mut z = skrull_layout_capacity::default();
                    let plan = s.buffers();
                    // SAFETY: live buffers of the stated lengths.
                    let st = unsafe {
                        skrull_layout_sizes(
                            &s.cfg,
                            s.lengths.as_ptr(),
                            n,
                            &plan,
                            gpu,
                            o.workspace.as_mut_ptr().cast(),
                            o.workspace.len(),
                            &mut z,
                        )
                    };
                    assert_eq!(st, skrull_status::Ok);
                    assert_eq!(
                        (
                            z.spans,
                            z.local_cu_seqlens,
                            z.sharded_cu_seqlens,
                            z.positions
                        ),
                        (spans.len(), lc.len(), sc.len(), pos.len())
                    );
                    assert_eq!(z.workspace_bytes, max.workspace_bytes);
                    loss += u64::from(c.loss_tokens);
                    o = Outs::new(max);
                    gpus += 1;
                }
                assert_eq!(loss, s.summary.total_tokens, "{cfg:?}");
            }
        }
    }
    assert!(gpus > 500);
}

/// `(chunk, offset, start, len, pad)` of one span.
type SpanFields = (i32, u32, u32, u32, u32);

/// N = 4, S = 10 through the C ABI, written out by hand (docs/layout.md).
#[test]
fn worked_example_n4_s10() {
    // No padding: chunks [0,2) [2,4) [4,5) [5,6) | [6,7) [7,8) [8,9) [9,10).
    let mut s = Sched::new(config(1, 4, 3, 0, SKRULL_SHARD_PADDING_NONE), &[10]);
    assert_eq!(s.placements[0].cp_rank, SKRULL_SHARDED);
    let want: [[SpanFields; 2]; 4] = [
        [(0, 0, 0, 2, 0), (7, 2, 9, 1, 0)],
        [(1, 0, 2, 2, 0), (6, 2, 8, 1, 0)],
        [(2, 0, 4, 1, 0), (5, 1, 7, 1, 0)],
        [(3, 0, 5, 1, 0), (4, 1, 6, 1, 0)],
    ];
    let positions: [&[i32]; 4] = [&[0, 1, 9], &[2, 3, 8], &[4, 7], &[5, 6]];
    for r in 0..4u32 {
        let max = s.max_sizes();
        let mut o = Outs::new(max);
        let gpu = skrull_gpu {
            dp_rank: 0,
            micro_batch: 0,
            cp_rank: r,
        };
        assert_eq!(o.fill(&mut s, gpu), skrull_status::Ok);
        for (k, &(chunk, offset, start, len, pad)) in want[r as usize].iter().enumerate() {
            let e = skrull_span {
                seq: 0,
                chunk,
                offset,
                start,
                len,
                pad,
            };
            assert_eq!(o.spans[k], e, "rank {r} span {k}");
        }
        let p = positions[r as usize];
        let t = p.len() as i32;
        assert_eq!(&o.positions[..p.len()], p);
        assert_eq!(o.local_cu[0], 0);
        assert_eq!(&o.sharded_cu[..2], &[0, 10]);
        assert_eq!(&o.sharded_cu_padded[..2], &[0, 10]);
        assert_eq!(&o.rank_cu[..2], &[0, t]);
        let l = o.layout;
        assert_eq!(
            (l.tokens, l.pad_tokens, l.loss_tokens),
            (t as u32, 0, t as u32)
        );
        assert_eq!(
            (l.charged_tokens, l.sharded_max_seqlen, l.rank_max_seqlen),
            (3, 10, t)
        );
        assert_eq!((l.micro_batch_tokens, l.global_tokens), (10, 10));
    }
    // Zigzag padding (TransformerEngine THD): P = 16, chunk k = [2k, 2k+2), 10..16 padding.
    let mut s = Sched::new(config(1, 4, 4, 0, SKRULL_SHARD_PADDING_ZIGZAG), &[10]);
    let want: [[SpanFields; 2]; 4] = [
        [(0, 0, 0, 2, 0), (7, 2, 14, 0, 2)],
        [(1, 0, 2, 2, 0), (6, 2, 12, 0, 2)],
        [(2, 0, 4, 2, 0), (5, 2, 10, 0, 2)],
        [(3, 0, 6, 2, 0), (4, 2, 8, 2, 0)],
    ];
    for r in 0..4u32 {
        let mut o = Outs::new(s.max_sizes());
        let gpu = skrull_gpu {
            dp_rank: 0,
            micro_batch: 0,
            cp_rank: r,
        };
        assert_eq!(o.fill(&mut s, gpu), skrull_status::Ok);
        for (k, &(chunk, offset, start, len, pad)) in want[r as usize].iter().enumerate() {
            let e = skrull_span {
                seq: 0,
                chunk,
                offset,
                start,
                len,
                pad,
            };
            assert_eq!(o.spans[k], e, "rank {r} span {k}");
        }
        assert_eq!(&o.sharded_cu[..2], &[0, 10]);
        assert_eq!(&o.sharded_cu_padded[..2], &[0, 16]);
        assert_eq!(&o.rank_cu[..2], &[0, 4]);
        let pad = if r == 3 { 0 } else { 2 };
        let l = o.layout;
        assert_eq!((l.tokens, l.pad_tokens, l.loss_tokens), (4, pad, 4 - pad));
        assert_eq!((l.sharded_max_seqlen_padded, l.rank_max_seqlen), (16, 4));
    }
}

#[test]
fn positions_can_be_skipped() {
    let mut s = Sched::new(config(1, 2, 14, 0, 0), &[3, 20, 2, 4]);
    let mut o = Outs::new(s.max_sizes());
    let gpu = skrull_gpu::default();
    let mut out = o.buffers();
    out.positions = null_mut();
    out.positions_len = 0;
    assert_eq!(o.fill_with(&mut s, gpu, &out), skrull_status::Ok);
    assert!(o.positions.iter().all(|&p| p == -7));
    assert!(o.layout.tokens > 0);
    // A NULL positions pointer with a nonzero length is an error, as everywhere.
    out.positions_len = 4;
    let before = o.outputs();
    assert_eq!(o.fill_with(&mut s, gpu, &out), skrull_status::NullArg);
    assert_eq!(o.outputs(), before);
}

/// Runs `skrull_layout_fill` with one thing broken and checks the status and that no output
/// changed.
fn expect(
    s: &mut Sched,
    edit_plan: impl FnOnce(&mut skrull_plan_buffers),
    edit_out: impl FnOnce(&mut skrull_layout_buffers, &mut Vec<u8>),
    gpu: skrull_gpu,
    want: skrull_status,
) {
    let mut o = Outs::new(s.max_sizes());
    let mut out = o.buffers();
    let mut ws = std::mem::take(&mut o.workspace);
    edit_out(&mut out, &mut ws);
    let before = o.outputs();
    let mut plan = s.buffers();
    edit_plan(&mut plan);
    // SAFETY: every pointer is live with the stated length, or deliberately NULL/short.
    let st = unsafe {
        skrull_layout_fill(
            &s.cfg,
            s.lengths.as_ptr(),
            s.lengths.len(),
            &plan,
            gpu,
            ws.as_mut_ptr().cast(),
            ws.len(),
            &out,
        )
    };
    assert_eq!(st, want);
    if want == skrull_status::Ok {
        assert_ne!(o.outputs(), before);
    } else {
        assert_eq!(o.outputs(), before, "outputs changed on {want:?}");
    }
}

#[test]
fn every_layout_error_leaves_outputs_untouched() {
    let cfg = config(2, 4, 24, 0, 0);
    let lengths = [12, 40, 7, 33, 25, 3, 18, 9, 21, 30, 2, 16];
    let mut s = Sched::new(cfg, &lengths);
    let g0 = skrull_gpu::default();
    let ok_plan = |_: &mut skrull_plan_buffers| {};
    let ok_out = |_: &mut skrull_layout_buffers, _: &mut Vec<u8>| {};
    expect(&mut s, ok_plan, ok_out, g0, skrull_status::Ok);
    // No such GPU.
    for gpu in [
        skrull_gpu { dp_rank: 2, ..g0 },
        skrull_gpu { cp_rank: 4, ..g0 },
        skrull_gpu {
            micro_batch: s.per_dp[0],
            ..g0
        },
    ] {
        expect(&mut s, ok_plan, ok_out, gpu, skrull_status::NoSuchGpu);
    }
    // Short or missing buffers.
    let short: [fn(&mut skrull_layout_buffers, &mut Vec<u8>); 6] = [
        |o, _| o.spans_len = 1,
        |o, _| o.local_cu_seqlens_len = 0,
        |o, _| o.rank_cu_seqlens_len = 1,
        |o, _| o.positions_len = 1,
        |o, _| o.sharded_cu_seqlens_padded_len = 0,
        |o, _| o.sharded_cu_seqlens = null_mut(),
    ];
    for (k, edit) in short.into_iter().enumerate() {
        let want = if k == 5 {
            skrull_status::NullArg
        } else {
            skrull_status::OutputTooSmall
        };
        expect(&mut s, ok_plan, edit, g0, want);
    }
    expect(
        &mut s,
        ok_plan,
        |o, _| o.layout = null_mut(),
        g0,
        skrull_status::NullArg,
    );
    expect(
        &mut s,
        ok_plan,
        |o, _| o._reserved = 1,
        g0,
        skrull_status::InvalidArg,
    );
    expect(
        &mut s,
        ok_plan,
        |o, _| o.struct_size = 8,
        g0,
        skrull_status::BadStructSize,
    );
    // Overlapping outputs.
    expect(
        &mut s,
        ok_plan,
        |o, _| o.rank_cu_seqlens = o.sharded_cu_seqlens,
        g0,
        skrull_status::InvalidArg,
    );
    expect(
        &mut s,
        ok_plan,
        |o, _| {
            o.positions = o.local_cu_seqlens;
            o.positions_len = o.local_cu_seqlens_len;
        },
        g0,
        skrull_status::InvalidArg,
    );
    // The workspace.
    expect(
        &mut s,
        ok_plan,
        |_, w| w.truncate(10),
        g0,
        skrull_status::WorkspaceTooSmall,
    );
    // A plan that is not the plan of this configuration and batch.
    let corrupt: [fn(&mut skrull_plan_buffers); 7] = [
        // SAFETY (each): the pointers are live Vecs of at least the touched index.
        |p| unsafe { (*p.placements.add(3)).cp_rank = 9 },
        |p| unsafe { (*p.placements.add(3)).tokens_per_gpu += 1 },
        |p| unsafe { *p.members.add(1) = *p.members },
        |p| unsafe { *p.rank_tokens += 1 },
        |p| unsafe { (*p.micro_batches).count += 1 },
        |p| unsafe { (*p.summary).total_tokens += 1 },
        |p| p.members_len = 3,
    ];
    for edit in corrupt {
        let mut fresh = Sched::new(cfg, &lengths);
        expect(&mut fresh, edit, ok_out, g0, skrull_status::PlanInvalid);
    }
    let mut fresh = Sched::new(cfg, &lengths);
    // SAFETY: the summary pointer is live.
    expect(
        &mut fresh,
        |p| unsafe { (*p.summary).sequences = 11 },
        ok_out,
        g0,
        skrull_status::PlanInvalid,
    );
    expect(
        &mut s,
        |p| p.summary = null_mut(),
        ok_out,
        g0,
        skrull_status::NullArg,
    );
    expect(
        &mut s,
        |p| p.members = null_mut(),
        ok_out,
        g0,
        skrull_status::NullArg,
    );
    expect(
        &mut s,
        |p| p._reserved = 2,
        ok_out,
        g0,
        skrull_status::InvalidArg,
    );
    // A workspace that overlaps an input.
    let mut o = Outs::new(s.max_sizes());
    let out = o.buffers();
    let mut plan = s.buffers();
    let needed = s.max_sizes().workspace_bytes;
    let mut big = vec![0u32; needed / 4 + 64];
    plan.members = big.as_mut_ptr();
    plan.members_len = big.len();
    big[..12].copy_from_slice(&s.members[..12]);
    // SAFETY: live buffers; the workspace deliberately is the members array.
    let st = unsafe {
        skrull_layout_fill(
            &s.cfg,
            s.lengths.as_ptr(),
            12,
            &plan,
            g0,
            big.as_mut_ptr().cast(),
            needed,
            &out,
        )
    };
    assert_eq!(st, skrull_status::InvalidArg);
    // Another batch than the plan's.
    s.lengths[1] += 1;
    expect(&mut s, ok_plan, ok_out, g0, skrull_status::PlanInvalid);
}

#[test]
fn null_arguments_and_sizes_errors() {
    let mut s = Sched::new(config(1, 2, 14, 0, 0), &[3, 20, 2, 4]);
    let plan = s.buffers();
    let mut o = Outs::new(s.max_sizes());
    let out = o.buffers();
    let mut z = skrull_layout_capacity::default();
    let ws = o.workspace.as_mut_ptr().cast::<c_void>();
    let wl = o.workspace.len();
    let g = skrull_gpu::default();
    let (cfg, len) = (&s.cfg as *const skrull_config, s.lengths.as_ptr());
    // SAFETY (all below): pointers are live or deliberately NULL.
    unsafe {
        assert_eq!(
            skrull_layout_sizes_max(null(), 4, &mut z),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes_max(cfg, 4, null_mut()),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes_max(cfg, 65537, &mut z),
            skrull_status::TooManySequences
        );
        let mut bad = s.cfg;
        bad.cp = 0;
        assert_eq!(
            skrull_layout_sizes_max(&bad, 4, &mut z),
            skrull_status::InvalidCp
        );
        assert_eq!(z, skrull_layout_capacity::default());
        assert_eq!(
            skrull_layout_sizes(cfg, len, 4, null(), g, ws, wl, &mut z),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes(cfg, null(), 4, &plan, g, ws, wl, &mut z),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes(cfg, len, 4, &plan, g, ws, wl, null_mut()),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes(cfg, len, 4, &plan, g, null_mut(), wl, &mut z),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes(cfg, len, 3, &plan, g, ws, wl, &mut z),
            skrull_status::PlanInvalid
        );
        let far = skrull_gpu { cp_rank: 2, ..g };
        assert_eq!(
            skrull_layout_sizes(cfg, len, 4, &plan, far, ws, wl, &mut z),
            skrull_status::NoSuchGpu
        );
        assert_eq!(z, skrull_layout_capacity::default());
        assert_eq!(
            skrull_layout_fill(null(), len, 4, &plan, g, ws, wl, &out),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_fill(cfg, len, 4, &plan, g, ws, wl, null()),
            skrull_status::NullArg
        );
        assert_eq!(
            skrull_layout_sizes(cfg, len, 4, &plan, g, ws, wl, &mut z),
            skrull_status::Ok
        );
        assert_eq!(z.workspace_bytes, wl);
    }
}

#[test]
fn int32_overflow_is_layout_overflow() {
    // Two sequences of 2^31 - 2 tokens sharded in one micro-batch: the global cu_seqlens
    // reach 2^32 - 4.
    let max = i32::MAX as u32;
    let mut s = Sched::new(
        config(1, 2, max, SKRULL_POLICY_PACKED, 0),
        &[max - 1, max - 1],
    );
    let mut m = s.max_sizes();
    m.positions = 0; // do not allocate 2^31 position ids
    let mut o = Outs::new(m);
    let mut out = o.buffers();
    out.positions = null_mut();
    let before = o.outputs();
    assert_eq!(
        o.fill_with(&mut s, skrull_gpu::default(), &out),
        skrull_status::LayoutOverflow
    );
    assert_eq!(o.outputs(), before);
}

#[test]
fn status_strings_name_the_layout_statuses() {
    for (code, word) in [(30, "plan"), (31, "GPU"), (32, "INT32_MAX")] {
        // SAFETY: returns a static NUL-terminated string.
        let msg = unsafe { std::ffi::CStr::from_ptr(skrull_status_str(code)) };
        assert!(msg.to_str().unwrap().contains(word), "{msg:?}");
    }
}

/// Every GPU's micro-batches through one `skrull_layout_fill_many` call.
fn fill_many(s: &mut Sched, gpus: &[skrull_gpu], outs: &mut [Outs]) -> skrull_status {
    let bufs: Vec<skrull_layout_buffers> = outs.iter_mut().map(Outs::buffers).collect();
    let ptrs: Vec<*const skrull_layout_buffers> = bufs.iter().map(|b| b as *const _).collect();
    let mut ws = vec![0xA5u8; s.max_sizes().workspace_bytes];
    let plan = s.buffers();
    // SAFETY: every pointer is a live Vec (or field) of the stated length.
    unsafe {
        skrull_layout_fill_many(
            &s.cfg,
            s.lengths.as_ptr(),
            s.lengths.len(),
            &plan,
            gpus.as_ptr(),
            gpus.len(),
            ws.as_mut_ptr().cast::<c_void>(),
            ws.len(),
            ptrs.as_ptr(),
        )
    }
}

#[test]
fn fill_many_equals_one_fill_per_gpu() {
    let mut checked = 0;
    for (k, (policy, padding, lockstep)) in [(0, 0, 0), (4, 1, 1), (2, 1, 0), (3, 0, 1), (4, 0, 0)]
        .into_iter()
        .enumerate()
    {
        let mut cfg = config(2, 4, 96, policy, padding);
        cfg.lockstep = lockstep;
        cfg.fill_empty = lockstep;
        let mut s = Sched::new(cfg, &batch(40 + k as u64, 30, 300));
        let m = s.max_sizes();
        for d in 0..cfg.dp {
            for r in 0..cfg.cp {
                let gpus: Vec<skrull_gpu> = (0..s.per_dp[d as usize])
                    .map(|mb| skrull_gpu {
                        dp_rank: d,
                        micro_batch: mb,
                        cp_rank: r,
                    })
                    .collect();
                let mut many = vec![Outs::new(m); gpus.len()];
                assert_eq!(fill_many(&mut s, &gpus, &mut many), skrull_status::Ok);
                for (gpu, got) in gpus.iter().zip(&many) {
                    let mut one = Outs::new(m);
                    assert_eq!(one.fill(&mut s, *gpu), skrull_status::Ok);
                    assert_eq!(got.outputs(), one.outputs(), "{gpu:?}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 40, "{checked}");
}

#[test]
fn fill_many_checks_every_gpu_before_writing_anything() {
    let mut s = Sched::new(config(2, 2, 64, 0, 0), &batch(7, 20, 120));
    let m = s.max_sizes();
    let untouched = Outs::new(m).outputs();
    let gpu = |d, mb, r| skrull_gpu {
        dp_rank: d,
        micro_batch: mb,
        cp_rank: r,
    };
    // The last GPU does not exist: nothing is written, not even the first GPU's layout.
    let gpus = [gpu(0, 0, 0), gpu(1, 0, 1), gpu(0, 0, 2)];
    let mut outs = vec![Outs::new(m); 3];
    assert_eq!(
        fill_many(&mut s, &gpus, &mut outs),
        skrull_status::NoSuchGpu
    );
    assert!(outs.iter().all(|o| o.outputs() == untouched));
    // The second GPU's positions buffer is too short: the same.
    let gpus = [gpu(0, 0, 0), gpu(1, 0, 1)];
    let mut outs = vec![Outs::new(m); 2];
    outs[1].positions.clear();
    assert_eq!(
        fill_many(&mut s, &gpus, &mut outs),
        skrull_status::OutputTooSmall
    );
    assert!(outs[0].outputs() == untouched);
    // No GPU: the plan is still validated, nothing is written.
    assert_eq!(fill_many(&mut s, &[], &mut []), skrull_status::Ok);
    s.members[0] = s.members[1];
    assert_eq!(fill_many(&mut s, &[], &mut []), skrull_status::PlanInvalid);
}

#[test]
fn fill_many_null_arrays_and_overlaps_are_refused() {
    let mut s = Sched::new(config(1, 2, 64, 2, 0), &batch(9, 12, 100));
    let m = s.max_sizes();
    let plan = s.buffers();
    let mut ws = vec![0u8; m.workspace_bytes];
    let mut gpus = vec![
        skrull_gpu {
            dp_rank: 0,
            micro_batch: 0,
            cp_rank: 0,
        };
        m.positions
    ];
    let mut out = Outs::new(m);
    let good = out.buffers();
    let call = |gpus: *const skrull_gpu,
                count: usize,
                outs: *const *const skrull_layout_buffers,
                ws: &mut Vec<u8>| {
        // SAFETY: the pointers are NULL or live arrays of `count` elements.
        unsafe {
            skrull_layout_fill_many(
                &s.cfg,
                s.lengths.as_ptr(),
                s.lengths.len(),
                &plan,
                gpus,
                count,
                ws.as_mut_ptr().cast::<c_void>(),
                ws.len(),
                outs,
            )
        }
    };
    let ptrs = [&good as *const skrull_layout_buffers];
    assert_eq!(
        call(null(), 1, ptrs.as_ptr(), &mut ws),
        skrull_status::NullArg
    );
    assert_eq!(
        call(gpus.as_ptr(), 1, null(), &mut ws),
        skrull_status::NullArg
    );
    let with_null = [null()];
    assert_eq!(
        call(gpus.as_ptr(), 1, with_null.as_ptr(), &mut ws),
        skrull_status::NullArg
    );
    assert_eq!(call(null(), 0, null(), &mut ws), skrull_status::Ok);
    assert_eq!(
        call(gpus.as_ptr(), 1, ptrs.as_ptr(), &mut ws),
        skrull_status::Ok
    );
    // An output that overlaps the GPU list is refused before anything is written.
    let mut bad = good;
    bad.positions = gpus.as_mut_ptr().cast::<i32>();
    bad.positions_len = m.positions;
    let ptrs = [&bad as *const skrull_layout_buffers];
    assert_eq!(
        call(gpus.as_ptr(), 1, ptrs.as_ptr(), &mut ws),
        skrull_status::InvalidArg
    );
}
