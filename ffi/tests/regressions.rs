//! Named regressions of the C ABI: every bug found at the C boundary (by our tests, fuzzing
//! or an outside harness) gets a test here that replays it the way C calls the library. The
//! same cases run from C in `tests/c/regressions.c`.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;

use skrull::*;

/// The batch of the report: DP 2, CP 4, BucketSize 24.
const LENGTHS: [u32; 10] = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];

fn config() -> skrull_config {
    let mut c = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap();
    (c.dp, c.cp, c.bucket_tokens) = (2, 4, 24);
    c
}

/// A plan as a C caller holds it after `skrull_schedule()`.
struct Held {
    placements: Vec<skrull_placement>,
    micro_batches: Vec<skrull_micro_batch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
    summary: skrull_summary,
}

impl Held {
    fn new() -> Held {
        let cfg = config();
        let n = LENGTHS.len();
        let mut h = Held {
            placements: vec![skrull_placement::default(); n],
            micro_batches: vec![skrull_micro_batch::default(); n],
            members: vec![0; n],
            rank_tokens: vec![0; n * cfg.cp as usize],
            per_dp: vec![0; cfg.dp as usize],
            summary: skrull_summary::default(),
        };
        let mut ws = vec![0u8; schedule_workspace()];
        let bufs = h.buffers();
        // SAFETY: every pointer is a live Vec of the stated length.
        let st = unsafe {
            skrull_schedule(
                &cfg,
                LENGTHS.as_ptr(),
                n,
                ws.as_mut_ptr().cast(),
                ws.len(),
                &bufs,
            )
        };
        assert_eq!(st, skrull_status::Ok);
        h
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
            ..skrull_plan_buffers::EMPTY
        }
    }
}

fn schedule_workspace() -> usize {
    let c = config();
    // SAFETY: no preconditions.
    unsafe { skrull_workspace_size(LENGTHS.len(), c.dp, c.cp) }
}

fn layout_capacity() -> skrull_layout_capacity {
    let mut cap = skrull_layout_capacity::default();
    // SAFETY: live config and output.
    let st = unsafe { skrull_layout_sizes_max(&config(), LENGTHS.len(), &mut cap) };
    assert_eq!(st, skrull_status::Ok);
    cap
}

/// Layout output buffers sized by `skrull_layout_sizes_max()`, filled with a guard value.
#[derive(Clone, PartialEq, Debug)]
struct LayoutOut {
    spans: Vec<skrull_span>,
    local_cu: Vec<i32>,
    sharded_cu: Vec<i32>,
    sharded_cu_padded: Vec<i32>,
    rank_cu: Vec<i32>,
    positions: Vec<i32>,
    layout: skrull_layout,
}

impl LayoutOut {
    fn new() -> LayoutOut {
        let cap = layout_capacity();
        let span = skrull_span {
            seq: 0xDEAD_BEEF,
            ..skrull_span::default()
        };
        LayoutOut {
            spans: vec![span; cap.spans],
            local_cu: vec![-7; cap.local_cu_seqlens],
            sharded_cu: vec![-7; cap.sharded_cu_seqlens],
            sharded_cu_padded: vec![-7; cap.sharded_cu_seqlens],
            rank_cu: vec![-7; cap.sharded_cu_seqlens],
            positions: vec![-7; cap.positions],
            layout: skrull_layout {
                dp_rank: 0xDEAD_BEEF,
                ..skrull_layout::default()
            },
        }
    }

    fn buffers(&mut self) -> skrull_layout_buffers {
        skrull_layout_buffers {
            spans: self.spans.as_mut_ptr(),
            spans_len: self.spans.len(),
            local_cu_seqlens: self.local_cu.as_mut_ptr(),
            local_cu_seqlens_len: self.local_cu.len(),
            sharded_cu_seqlens: self.sharded_cu.as_mut_ptr(),
            sharded_cu_seqlens_len: self.sharded_cu.len(),
            sharded_cu_seqlens_padded: self.sharded_cu_padded.as_mut_ptr(),
            sharded_cu_seqlens_padded_len: self.sharded_cu_padded.len(),
            rank_cu_seqlens: self.rank_cu.as_mut_ptr(),
            rank_cu_seqlens_len: self.rank_cu.len(),
            positions: self.positions.as_mut_ptr(),
            positions_len: self.positions.len(),
            layout: &mut self.layout,
            ..skrull_layout_buffers::EMPTY
        }
    }
}

const GPU0: skrull_gpu = skrull_gpu {
    dp_rank: 0,
    micro_batch: 0,
    cp_rank: 0,
};

/// `skrull_layout_fill` for GPU (0, 0, 0) with the given plan and output structs.
fn fill(plan: &skrull_plan_buffers, out: &skrull_layout_buffers) -> skrull_status {
    let mut ws = vec![0u8; layout_capacity().workspace_bytes];
    // SAFETY: every pointer of `plan` and `out` is live for its stated capacity (the tests
    // below only ever overstate a capacity in ways the library must refuse before any access).
    unsafe {
        skrull_layout_fill(
            &config(),
            LENGTHS.as_ptr(),
            LENGTHS.len(),
            plan,
            GPU0,
            ws.as_mut_ptr().cast(),
            ws.len(),
            out,
        )
    }
}

/// `skrull_layout_sizes` for GPU (0, 0, 0) writing into `out`.
fn sizes(plan: &skrull_plan_buffers, out: *mut skrull_layout_capacity) -> skrull_status {
    let mut ws = vec![0u8; layout_capacity().workspace_bytes];
    // SAFETY: as in `fill`; `out` is live.
    unsafe {
        skrull_layout_sizes(
            &config(),
            LENGTHS.as_ptr(),
            LENGTHS.len(),
            plan,
            GPU0,
            ws.as_mut_ptr().cast(),
            ws.len(),
            out,
        )
    }
}

/// Outside harness: the layout functions accepted a plan whose `summary._reserved` is 1
/// (`skrull_layout_fill` for GPU (0,0,0) returned OK). The summary `skrull_schedule()` writes
/// always has `_reserved == 0`, so anything else is a corrupted plan: `PLAN_INVALID` from both
/// layout functions, with no output written.
#[test]
fn layout_rejects_a_summary_with_nonzero_reserved() {
    let mut h = Held::new();
    assert_eq!(h.summary._reserved, 0);
    let mut o = LayoutOut::new();
    let out = o.buffers();
    // The untouched plan works: the test fails for the right reason below.
    assert_eq!(fill(&h.buffers(), &out), skrull_status::Ok);
    for reserved in [1, 0x8000_0000, u32::MAX] {
        h.summary._reserved = reserved;
        let mut o = LayoutOut::new();
        let before = o.clone();
        let out = o.buffers();
        assert_eq!(fill(&h.buffers(), &out), skrull_status::PlanInvalid);
        assert_eq!(o, before, "outputs written with _reserved = {reserved}");
        let mut cap = skrull_layout_capacity::default();
        assert_eq!(sizes(&h.buffers(), &mut cap), skrull_status::PlanInvalid);
        assert_eq!(cap, skrull_layout_capacity::default());
    }
    // The other reserved input fields the layout calls read: each parameter struct's
    // `_reserved` (INVALID_ARG, as in skrull_schedule()).
    h.summary._reserved = 0;
    let mut plan = h.buffers();
    plan._reserved = 1;
    let mut o = LayoutOut::new();
    let out = o.buffers();
    assert_eq!(fill(&plan, &out), skrull_status::InvalidArg);
    let mut cap = skrull_layout_capacity::default();
    assert_eq!(sizes(&plan, &mut cap), skrull_status::InvalidArg);
    let mut out = o.buffers();
    out._reserved = 1;
    assert_eq!(fill(&h.buffers(), &out), skrull_status::InvalidArg);
}

/// One `skrull_schedule()` call with the report's batch.
fn schedule(out: &skrull_plan_buffers, ws: *mut u8, ws_size: usize) -> skrull_status {
    // SAFETY: every pointer of `out` is live for its capacity unless the capacity is one the
    // library must refuse before any access; `ws` is live for the bytes a call may use.
    unsafe {
        skrull_schedule(
            &config(),
            LENGTHS.as_ptr(),
            LENGTHS.len(),
            ws.cast::<c_void>(),
            ws_size,
            out,
        )
    }
}

/// Outside harness: overlap was checked on what a call writes, not on the declared
/// capacities, so `placements_len = 2n` whose spare half lies on `members` was accepted, and
/// so was `placements_len = SIZE_MAX`. The declared capacities are the caller's promise of
/// memory the call may use: their ranges must not overlap, and a range that does not fit the
/// address space is INVALID_ARG, in skrull_schedule, skrull_dacp_place, skrull_layout_sizes
/// and skrull_layout_fill alike.
#[test]
fn overlap_is_checked_on_declared_capacities() {
    let n = LENGTHS.len();
    let mut ws_vec = vec![0u8; schedule_workspace()];
    let (ws, wsl) = (ws_vec.as_mut_ptr(), ws_vec.len());

    // skrull_schedule: placements of capacity 2n, members on its spare half.
    let mut h = Held::new();
    let mut shared = vec![skrull_placement::default(); 2 * n];
    let mut out = h.buffers();
    out.placements = shared.as_mut_ptr();
    out.members = out.placements.wrapping_add(n).cast::<u32>();
    out.placements_len = n; // control: declared ranges disjoint
    assert_eq!(schedule(&out, ws, wsl), skrull_status::Ok);
    out.placements_len = 2 * n;
    assert_eq!(schedule(&out, ws, wsl), skrull_status::InvalidArg);
    // Capacities whose byte range wraps or exceeds PTRDIFF_MAX.
    for cap in [usize::MAX, usize::MAX / 16, isize::MAX as usize / 16 + 1] {
        let mut out = h.buffers();
        out.placements_len = cap;
        assert_eq!(schedule(&out, ws, wsl), skrull_status::InvalidArg, "{cap}");
        let mut out = h.buffers();
        out.rank_tokens_len = cap;
        assert_eq!(schedule(&out, ws, wsl), skrull_status::InvalidArg, "{cap}");
    }
    assert_eq!(
        schedule(&h.buffers(), ws, usize::MAX),
        skrull_status::InvalidArg
    );
    // The workspace's declared size reaching into an output.
    let mut big = vec![0u32; wsl / 4 + n + 4];
    let bp = big.as_mut_ptr().cast::<u8>();
    let off = wsl.next_multiple_of(4);
    let mut out = h.buffers();
    out.members = bp.wrapping_add(off).cast::<u32>();
    assert_eq!(schedule(&out, bp, off), skrull_status::Ok);
    assert_eq!(schedule(&out, bp, off + 1), skrull_status::InvalidArg);

    // skrull_dacp_place: cp_ranks of capacity 2n, the summary on its spare half.
    let mut ranks = vec![0i32; 2 * n + 2];
    let rp = ranks.as_mut_ptr();
    let dacp = |len: usize, summary: *mut skrull_dacp_summary| {
        let mut ws = vec![0u8; schedule_workspace()];
        // SAFETY: `rp` is live for `len` elements except in the refused cases, `summary` is a
        // live, aligned skrull_dacp_summary.
        unsafe {
            skrull_dacp_place(
                &config(),
                LENGTHS.as_ptr(),
                n,
                ws.as_mut_ptr().cast(),
                ws.len(),
                rp,
                len,
                summary,
            )
        }
    };
    let summary = rp.wrapping_add(n).cast::<skrull_dacp_summary>();
    assert_eq!(dacp(n, summary), skrull_status::Ok);
    assert_eq!(dacp(2 * n, summary), skrull_status::InvalidArg);
    let mut own = skrull_dacp_summary::default();
    assert_eq!(dacp(usize::MAX, &mut own), skrull_status::InvalidArg);

    // skrull_layout_sizes: `out` inside the spare capacity of the plan's members.
    let mut members = vec![0u64; n / 2 + 1 + 8];
    let mp = members.as_mut_ptr().cast::<u32>();
    // SAFETY: `members` holds at least n u32.
    unsafe { core::ptr::copy_nonoverlapping(h.members.as_ptr(), mp, n) };
    let spare = members.as_mut_ptr().wrapping_add(n / 2 + 1);
    let cap_out = spare.cast::<skrull_layout_capacity>();
    let mut plan = h.buffers();
    plan.members = mp;
    plan.members_len = n; // control
    assert_eq!(sizes(&plan, cap_out), skrull_status::Ok);
    plan.members_len = 2 * (n / 2 + 1 + 8);
    assert_eq!(sizes(&plan, cap_out), skrull_status::InvalidArg);
    let mut plan = h.buffers();
    plan.members_len = usize::MAX;
    let mut cap = skrull_layout_capacity::default();
    assert_eq!(sizes(&plan, &mut cap), skrull_status::InvalidArg);

    // skrull_layout_fill: spans of capacity 2 x cap.spans, positions on its spare half.
    let cap = layout_capacity();
    let mut o = LayoutOut::new();
    let mut spans = vec![skrull_span::default(); 2 * cap.spans];
    let mut out = o.buffers();
    out.spans = spans.as_mut_ptr();
    out.positions = out.spans.wrapping_add(cap.spans).cast::<i32>();
    assert!(cap.spans * size_of::<skrull_span>() >= cap.positions * 4);
    out.spans_len = cap.spans; // control
    assert_eq!(fill(&h.buffers(), &out), skrull_status::Ok);
    out.spans_len = 2 * cap.spans;
    assert_eq!(fill(&h.buffers(), &out), skrull_status::InvalidArg);
    let mut out = o.buffers();
    out.positions_len = usize::MAX;
    assert_eq!(fill(&h.buffers(), &out), skrull_status::InvalidArg);
    // An output inside the spare capacity of a plan input (inputs may share; outputs not).
    let mut plan = h.buffers();
    plan.members = mp;
    let mut out = o.buffers();
    out.local_cu_seqlens = spare.cast::<i32>();
    out.local_cu_seqlens_len = 2 * 8;
    assert!(cap.local_cu_seqlens <= 16);
    plan.members_len = n; // control
    assert_eq!(fill(&plan, &out), skrull_status::Ok);
    plan.members_len = 2 * (n / 2 + 1 + 8);
    assert_eq!(fill(&plan, &out), skrull_status::InvalidArg);
    // Plan arrays whose declared capacity wraps.
    let mut plan = h.buffers();
    plan.rank_tokens_len = usize::MAX;
    let out = o.buffers();
    assert_eq!(fill(&plan, &out), skrull_status::InvalidArg);
}
