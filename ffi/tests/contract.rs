//! One test per sentence of the contract that round 3 of the outside review found silent or
//! stale, and that the header and `docs/` now state (`skrull_span.pad`, `local_max_seqlen`, the
//! cost model under every policy, a falling throughput column, `NO_SUCH_GPU` details, the two
//! chunks of a sharded sequence at CP 1).
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use skrull::*;
use skrull_kit::c_layout::OwnedCLayout;

fn config(dp: u32, cp: u32, bucket: u32) -> skrull_config {
    let mut c = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap();
    (c.dp, c.cp, c.bucket_tokens) = (dp, cp, bucket);
    c
}

/// A plan as a caller holds it.
struct Held {
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    groups: Vec<skrull_cp_group>,
    summary: skrull_summary,
    error: skrull_error_info,
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
            error: &mut self.error,
            cp_groups: self.groups.as_mut_ptr(),
            cp_groups_len: self.groups.len(),
            ..skrull_plan_buffers::EMPTY
        }
    }
}

/// Plans `lengths` under `c`: the status and the held plan (with the details).
fn schedule(c: &skrull_config, lengths: &[u32]) -> (skrull_status, Held) {
    let n = lengths.len();
    let (dp, cp) = (c.dp.clamp(1, 65_536) as usize, c.cp.clamp(1, 256) as usize);
    let mut h = Held {
        placements: vec![skrull_placement::default(); n],
        micro_batches: vec![skrull_micro_batch::default(); n],
        members: vec![0; n],
        rank_tokens: vec![0; n * cp],
        per_dp: vec![0; dp],
        groups: vec![skrull_cp_group::default(); n],
        summary: skrull_summary::default(),
        error: skrull_error_info::of_status(skrull_status::Ok),
    };
    // SAFETY: no preconditions.
    let mut ws = vec![0u8; unsafe { skrull_workspace_size(n, dp as u32, cp as u32) }];
    let bufs = h.buffers();
    // SAFETY: every pointer is a live Vec of its stated length.
    let st = unsafe {
        skrull_schedule(
            c,
            lengths.as_ptr(),
            n,
            ws.as_mut_ptr().cast(),
            ws.len(),
            &bufs,
        )
    };
    (st, h)
}

/// One GPU's layout: the status, the spans written, the record, the padded local cu_seqlens.
fn layout(
    c: &skrull_config,
    lengths: &[u32],
    h: &mut Held,
    gpu: skrull_gpu,
) -> (skrull_status, Vec<skrull_span>, skrull_layout, Vec<i32>) {
    let n = lengths.len();
    let mut cap = skrull_layout_capacity::default();
    // SAFETY: live config and output.
    assert_eq!(
        unsafe { skrull_layout_sizes_max(c, n, &mut cap) },
        skrull_status::Ok
    );
    let mut o = OwnedCLayout::new(cap).with_rings(SKRULL_MAX_RINGS as usize);
    o.gather = Vec::new();
    let out = o.buffers();
    let plan = h.buffers();
    // SAFETY: every pointer is live for its stated length.
    let st = unsafe {
        skrull_layout_fill(
            c,
            lengths.as_ptr(),
            n,
            &plan,
            gpu,
            o.workspace.as_mut_ptr().cast(),
            o.workspace.len(),
            &out,
        )
    };
    let rec = o.layout;
    o.spans.truncate(rec.spans as usize);
    o.local_cu_padded.truncate(rec.local_seqs as usize + 1);
    (st, o.spans, rec, o.local_cu_padded)
}

/// `skrull_span.pad` comes from `pad_local` (a local sequence) and from a pad multiple (a
/// sharded one), not only from zigzag padding; `local_max_seqlen` is the real maximum.
#[test]
fn span_pad_comes_from_pad_local_and_pad_multiple() {
    let mut c = config(1, 2, 12);
    (c.pad_multiple, c.pad_local) = (4, 1);
    assert_eq!(c.shard_padding, SKRULL_SHARD_PADDING_NONE);
    let lengths = [13, 3];
    let (st, mut h) = schedule(&c, &lengths);
    assert_eq!(st, skrull_status::Ok);
    assert_eq!(h.placements[0].cp_rank, SKRULL_SHARDED);
    let r = h.placements[1].cp_rank as u32;
    let gpu = skrull_gpu {
        dp_rank: 0,
        micro_batch: h.placements[1].micro_batch,
        cp_rank: r,
    };
    let (st, spans, rec, local_padded) = layout(&c, &lengths, &mut h, gpu);
    assert_eq!(st, skrull_status::Ok);
    // The local 3-token sequence: one span of 3 real tokens and 1 of padding.
    let local = spans.iter().find(|s| s.chunk == -1).unwrap();
    assert_eq!((local.seq, local.len, local.pad), (1, 3, 1));
    // local_max_seqlen: the real longest local sequence, 3, not the padded 4.
    assert_eq!(rec.local_max_seqlen, 3);
    assert_eq!(local_padded, vec![0, 4]);
    // The sharded 13 tokens, padded to 16 by the pad multiple alone (no zigzag padding):
    // the padding shows in the spans of the ranks that hold the last chunk.
    let mut pad = 0;
    for rank in 0..2 {
        let gpu = skrull_gpu {
            dp_rank: 0,
            micro_batch: h.placements[0].micro_batch,
            cp_rank: rank,
        };
        let (st, spans, _, _) = layout(&c, &lengths, &mut h, gpu);
        assert_eq!(st, skrull_status::Ok);
        pad += spans
            .iter()
            .filter(|s| s.seq == 0)
            .map(|s| s.pad)
            .sum::<u32>();
    }
    assert_eq!(pad, 3);
}

fn cost_preset() -> skrull_cost_model {
    let mut m = core::mem::MaybeUninit::<skrull_cost_model>::zeroed();
    // SAFETY: a live, aligned, writable cost model.
    let st = unsafe {
        skrull_cost_model_preset(
            SKRULL_GPU_H100,
            core::ptr::null(),
            m.as_mut_ptr(),
            size_of::<skrull_cost_model>(),
        )
    };
    assert_eq!(st, skrull_status::Ok);
    // SAFETY: initialised by the preset.
    unsafe { m.assume_init() }
}

const BATCH: [u32; 10] = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];

/// Every policy validates the caller's cost model, not only `balanced`, which plans with it.
#[test]
fn every_policy_rejects_an_invalid_cost_model() {
    let mut m = cost_preset();
    m.gemm_efficiency = 2.0;
    for policy in 0..5 {
        let mut c = config(2, 4, 24);
        c.policy = policy;
        c.cost_model = &m;
        let (st, h) = schedule(&c, &BATCH);
        assert_eq!(st, skrull_status::InvalidCostModel, "policy {policy}");
        assert_eq!(h.error.field, 3, "gemm_efficiency is field 3");
        // The same policy with the valid preset plans.
        let good = cost_preset();
        c.cost_model = &good;
        assert_eq!(schedule(&c, &BATCH).0, skrull_status::Ok, "policy {policy}");
    }
}

/// A falling throughput column is accepted (only `attention_seqlen` must increase strictly);
/// a non-increasing `attention_seqlen` is refused.
#[test]
fn a_falling_throughput_column_is_accepted() {
    let mut m = cost_preset();
    m.attention_fwd_flops.reverse();
    m.attention_bwd_flops.reverse();
    assert!(m.attention_fwd_flops[0] > m.attention_fwd_flops[5]);
    let mut c = config(2, 4, 24);
    c.policy = SKRULL_POLICY_BALANCED;
    c.cost_model = &m;
    assert_eq!(schedule(&c, &BATCH).0, skrull_status::Ok);
    let mut bad = cost_preset();
    bad.attention_seqlen[3] = bad.attention_seqlen[2];
    c.cost_model = &bad;
    let (st, h) = schedule(&c, &BATCH);
    assert_eq!(st, skrull_status::InvalidCostModel);
    assert_eq!(h.error.field, 7, "attention_seqlen is field 7");
}

/// `NO_SUCH_GPU` details: `field` names the coordinate at fault (1 DP rank, 2 micro-batch, 3
/// CP rank), `index` is the DP rank, `value` the micro-batch, `limit` the micro-batches that DP
/// rank runs (0 for a DP rank at or above `dp`).
#[test]
fn no_such_gpu_details_name_the_coordinate() {
    let c = config(2, 4, 24);
    let (st, mut h) = schedule(&c, &BATCH);
    assert_eq!(st, skrull_status::Ok);
    let runs = h.per_dp[1];
    let cases = [
        ((5, 0, 0), (1, 5, 0, 0)),
        (
            (1, runs + 2, 0),
            (2, 1, u64::from(runs) + 2, u64::from(runs)),
        ),
        ((1, 0, 4), (3, 1, 0, u64::from(runs))),
        // DP rank and CP rank both out of range: the DP rank is named.
        ((2, 0, 9), (1, 2, 0, 0)),
    ];
    for ((d, m, r), (field, index, value, limit)) in cases {
        h.error = skrull_error_info::of_status(skrull_status::Ok);
        let gpu = skrull_gpu {
            dp_rank: d,
            micro_batch: m,
            cp_rank: r,
        };
        let (st, ..) = layout(&c, &BATCH, &mut h, gpu);
        assert_eq!(st, skrull_status::NoSuchGpu);
        let e = h.error;
        assert_eq!(
            (e.field, e.index, e.value, e.limit),
            (field, index, value, limit),
            "gpu ({d}, {m}, {r})"
        );
    }
}

/// At CP 1 a sharded sequence is still cut into its two chunks, both on rank 0: chunk 0 is the
/// first `ceil(P / 2)` positions and chunk 1 the last `floor(P / 2)`, `P` the padded length:
/// zigzag padding pads nothing at CP 1, a pad multiple `M` pads to a multiple of `M`, and the
/// padding sits at the end of chunk 1.
#[test]
fn cp1_sharded_sequence_is_cut_in_two_chunks() {
    let plain = [(0, 0, 4, 0), (1, 4, 3, 0), (0, 0, 5, 0), (1, 5, 5, 0)];
    let padded = [(0, 0, 4, 0), (1, 4, 3, 1), (0, 0, 6, 0), (1, 6, 4, 2)];
    for (zigzag, multiple, want) in [
        (SKRULL_SHARD_PADDING_NONE, 0, plain),
        (SKRULL_SHARD_PADDING_ZIGZAG, 0, plain),
        (SKRULL_SHARD_PADDING_NONE, 4, padded),
    ] {
        let mut c = config(1, 1, 100);
        (c.policy, c.shard_padding, c.pad_multiple) = (SKRULL_POLICY_PACKED, zigzag, multiple);
        let lengths = [7, 10];
        let (st, mut h) = schedule(&c, &lengths);
        assert_eq!(st, skrull_status::Ok);
        assert!(h.placements.iter().all(|p| p.cp_rank == SKRULL_SHARDED));
        let (st, spans, rec, _) = layout(&c, &lengths, &mut h, skrull_gpu::default());
        assert_eq!(st, skrull_status::Ok);
        assert_eq!(rec.sharded_seqs, 2);
        let got: Vec<_> = spans
            .iter()
            .map(|s| (s.chunk, s.start, s.len, s.pad))
            .collect();
        assert_eq!(got, want, "shard padding {zigzag}, pad multiple {multiple}");
    }
}
