//! Named regressions of the C ABI: every bug found at the C boundary (by our tests, fuzzing
//! or an outside harness) gets a test here that replays it the way C calls the library. The
//! same cases run from C in `tests/c/regressions.c`.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;

use skrull::*;
use skrull_kit::c_layout::OwnedCLayout;

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

/// Layout output buffers.
type LayoutOut = OwnedCLayout;

/// Layout output buffers sized by `skrull_layout_sizes_max()`, filled with guard values, without
/// the optional outputs (gather index, padded local `cu_seqlens`, rings).
fn layout_out() -> LayoutOut {
    OwnedCLayout::new(layout_capacity()).without_optional()
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
    let mut o = layout_out();
    let out = o.buffers();
    // The untouched plan works: the test fails for the right reason below.
    assert_eq!(fill(&h.buffers(), &out), skrull_status::Ok);
    for reserved in [1, 0x8000_0000, u32::MAX] {
        h.summary._reserved = reserved;
        let mut o = layout_out();
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
    let mut o = layout_out();
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
    let mut o = layout_out();
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

/// A byte buffer aligned to 8, for placing structs at chosen offsets.
#[repr(C, align(8))]
struct Aligned([u8; 512]);

/// A version-1 (60-byte) configuration, DP 2, CP 4, BucketSize 24, copied to `offset` bytes
/// past an 8-byte boundary, as a program built against the first header may place it.
fn v1_config_at(buf: &mut Aligned, offset: usize, size: u32) -> *mut skrull_config {
    let mut c = config();
    c.struct_size = size;
    let p = buf.0.as_mut_ptr().wrapping_add(offset);
    // SAFETY: `size <= sizeof(skrull_config)` bytes of `c` into `buf` at `offset <= 8`.
    unsafe { core::ptr::copy_nonoverlapping((&raw const c).cast::<u8>(), p, size as usize) };
    p.cast()
}

/// Outside harness, round 3: the `cost_model` pointer raised `alignof(skrull_config)` from 4
/// to 8, and the library checked every config pointer against it whatever `struct_size` said,
/// so a version-1 program whose 60-byte config of `uint32_t` sits at a 4-byte boundary got
/// INVALID_ARG from `skrull_config_default`, `skrull_config_preset` and `skrull_schedule`. A
/// struct that ends before `cost_model` needs 4-byte alignment only, in every entry point
/// that takes a config; one that includes the pointer needs 8.
#[test]
fn version_1_config_at_a_4_byte_offset_is_accepted() {
    let narrow = core::mem::offset_of!(skrull_config, cost_model) as u32;
    let mut h = Held::new();
    let cap = layout_capacity();
    for size in [SKRULL_CONFIG_SIZE_V1, 64, 68, narrow] {
        let mut buf = Aligned([0; 512]);
        let c = v1_config_at(&mut buf, 4, size);
        assert_eq!(c as usize % 8, 4);
        let n = LENGTHS.len();
        let mut ws = vec![0u8; schedule_workspace().max(cap.workspace_bytes)];
        // skrull_schedule: the same plan as from the aligned config.
        let mut got = Held::new();
        let before = got.placements.clone();
        got.placements.fill(skrull_placement::default());
        let bufs = got.buffers();
        // SAFETY: `c` holds `size` readable bytes; every buffer is live.
        let st = unsafe {
            skrull_schedule(
                c,
                LENGTHS.as_ptr(),
                n,
                ws.as_mut_ptr().cast(),
                ws.len(),
                &bufs,
            )
        };
        assert_eq!(st, skrull_status::Ok, "struct_size {size}");
        assert_eq!(got.placements, before);
        // skrull_dacp_place.
        let mut ranks = vec![0i32; n];
        let mut ds = skrull_dacp_summary::default();
        // SAFETY: as above.
        let st = unsafe {
            skrull_dacp_place(
                c,
                LENGTHS.as_ptr(),
                n,
                ws.as_mut_ptr().cast(),
                ws.len(),
                ranks.as_mut_ptr(),
                n,
                &mut ds,
            )
        };
        assert_eq!(st, skrull_status::Ok);
        // The three layout functions.
        let mut cap2 = skrull_layout_capacity::default();
        // SAFETY: as above.
        assert_eq!(
            unsafe { skrull_layout_sizes_max(c, n, &mut cap2) },
            skrull_status::Ok
        );
        assert_eq!(cap2, cap);
        let plan = h.buffers();
        // SAFETY: as above.
        let st = unsafe {
            skrull_layout_sizes(
                c,
                LENGTHS.as_ptr(),
                n,
                &plan,
                GPU0,
                ws.as_mut_ptr().cast(),
                ws.len(),
                &mut cap2,
            )
        };
        assert_eq!(st, skrull_status::Ok);
        let mut o = layout_out();
        let out = o.buffers();
        // SAFETY: as above.
        let st = unsafe {
            skrull_layout_fill(
                c,
                LENGTHS.as_ptr(),
                n,
                &plan,
                GPU0,
                ws.as_mut_ptr().cast(),
                ws.len(),
                &out,
            )
        };
        assert_eq!(st, skrull_status::Ok);
    }
    // The four initialisers write the first 60 bytes (or `size`) at a 4-byte offset, and
    // nothing around them.
    /// `skrull_config_preset` for the 7B preset.
    unsafe fn preset_7b(p: *mut skrull_config) -> skrull_status {
        // SAFETY: forwarded contract.
        unsafe { skrull_config_preset(SKRULL_PRESET_QWEN2_5_7B, p) }
    }
    type Init = unsafe fn(*mut skrull_config) -> skrull_status;
    let v1_inits: [(Init, u32); 2] = [
        (|p| unsafe { skrull_config_default(p) }, 26_624),
        (preset_7b, 13_312),
    ];
    for (init, bucket) in v1_inits {
        let mut buf = Aligned([0xEE; 512]);
        let p = buf.0.as_mut_ptr().wrapping_add(4).cast::<skrull_config>();
        // SAFETY: 60 writable bytes at `p`.
        assert_eq!(unsafe { init(p) }, skrull_status::Ok);
        assert_eq!(buf.0[..4], [0xEE; 4]);
        assert!(buf.0[64..].iter().all(|&b| b == 0xEE));
        assert_eq!(buf.0[4..8], 60u32.to_ne_bytes());
        assert_eq!(buf.0[16..20], bucket.to_ne_bytes());
    }
    for size in [60, 64, 68, narrow as usize] {
        let mut buf = Aligned([0xEE; 512]);
        let p = buf.0.as_mut_ptr().wrapping_add(4).cast::<skrull_config>();
        // SAFETY: `size` writable bytes at `p`.
        assert_eq!(
            unsafe { skrull_config_init(p, size) },
            skrull_status::Ok,
            "{size}"
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { skrull_config_preset_init(1, p, size) },
            skrull_status::Ok
        );
        assert!(buf.0[4 + size..].iter().all(|&b| b == 0xEE));
    }
    // A struct that includes `cost_model` needs 8-byte alignment: refused at a 4-byte offset,
    // by the readers and the initialisers, with nothing written.
    let wide = core::mem::size_of::<skrull_config>();
    for size in [narrow as usize + 8, wide] {
        let mut buf = Aligned([0; 512]);
        let c = v1_config_at(&mut buf, 4, size as u32);
        let mut cap2 = skrull_layout_capacity::default();
        // SAFETY: `size` readable bytes at `c`.
        assert_eq!(
            unsafe { skrull_layout_sizes_max(c, 10, &mut cap2) },
            skrull_status::InvalidArg
        );
        let mut buf = Aligned([0xEE; 512]);
        let p = buf.0.as_mut_ptr().wrapping_add(4).cast::<skrull_config>();
        // SAFETY: `size` writable bytes at `p`.
        assert_eq!(
            unsafe { skrull_config_init(p, size) },
            skrull_status::InvalidArg
        );
        assert!(buf.0.iter().all(|&b| b == 0xEE));
    }
    // Not even 4-byte aligned: refused before `struct_size` is read.
    let mut buf = Aligned([0; 512]);
    let c = v1_config_at(&mut buf, 2, 60);
    let mut cap2 = skrull_layout_capacity::default();
    // SAFETY: 60 readable bytes at `c`.
    assert_eq!(
        unsafe { skrull_layout_sizes_max(c, 10, &mut cap2) },
        skrull_status::InvalidArg
    );
    let _ = &mut h;
}

/// `skrull_config_init(&c, 61)` succeeded and wrote a struct whose size every other call
/// refuses (61 cuts the field after version 1). The initialisers now refuse a size that ends
/// inside a field, as every reader does, and write nothing.
#[test]
fn config_init_refuses_a_size_inside_a_field() {
    let full = core::mem::size_of::<skrull_config>();
    for size in [61usize, 62, 63, 65, 73, 79, 81, full - 1] {
        let mut c = config();
        let before = c;
        // SAFETY: `c` is a live, aligned skrull_config of at least `size` bytes.
        assert_eq!(
            unsafe { skrull_config_init(&mut c, size) },
            skrull_status::BadStructSize,
            "{size}"
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { skrull_config_preset_init(0, &mut c, size) },
            skrull_status::BadStructSize
        );
        assert_eq!(c, before);
    }
    // Every size a reader accepts is one the initialisers write, and the other way round.
    for size in 60..=full + 8 {
        let mut c = config();
        // SAFETY: `c` has `sizeof(skrull_config)` bytes; `size` above that writes only them.
        let init = unsafe { skrull_config_init(&mut c, size.min(full)) };
        let mut d = config();
        d.struct_size = size.min(full) as u32;
        let mut cap = skrull_layout_capacity::default();
        // SAFETY: a live, aligned config.
        let read = unsafe { skrull_layout_sizes_max(&d, 1, &mut cap) };
        assert_eq!(init, read, "struct_size {size}");
    }
}

/// Outside harness, round 3: with `error` on an output buffer and an error earlier in the
/// documented order (`dp = 0`; in `skrull_layout_fill`, `gpu.cp_rank >= cp` with the details
/// on `out->spans`), the library returned the earlier status and wrote the 32 bytes of details
/// into the output. The details now go only where they overlap no argument.
#[test]
fn error_details_never_land_in_an_output() {
    let n = LENGTHS.len();
    let mut ws = vec![0u8; schedule_workspace()];
    // skrull_schedule: the details on the placements.
    let mut h = Held::new();
    let mut out = h.buffers();
    let mut store = vec![0x5A5A_5A5A_5A5A_5A5Au64; 2 * n];
    out.placements = store.as_mut_ptr().cast();
    out.error = out.placements.cast();
    let mut c = config();
    c.dp = 0;
    // SAFETY: every buffer is live for its capacity.
    let st = unsafe {
        skrull_schedule(
            &c,
            LENGTHS.as_ptr(),
            n,
            ws.as_mut_ptr().cast(),
            ws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::InvalidDp);
    assert!(
        store.iter().all(|&w| w == 0x5A5A_5A5A_5A5A_5A5A),
        "details written into placements"
    );
    // No earlier problem: INVALID_ARG, still nothing written.
    assert_eq!(
        schedule(&out, ws.as_mut_ptr(), ws.len()),
        skrull_status::InvalidArg
    );
    assert!(store.iter().all(|&w| w == 0x5A5A_5A5A_5A5A_5A5A));
    // Details on the workspace (an argument too) are not written either.
    let mut out = h.buffers();
    let mut wsw = vec![0x5A5A_5A5A_5A5A_5A5Au64; ws.len() / 8 + 1];
    out.error = wsw.as_mut_ptr().cast();
    c.dp = 2;
    c.cp = 0;
    // SAFETY: as above.
    let st = unsafe {
        skrull_schedule(
            &c,
            LENGTHS.as_ptr(),
            n,
            wsw.as_mut_ptr().cast(),
            ws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::InvalidCp);
    assert!(wsw.iter().all(|&w| w == 0x5A5A_5A5A_5A5A_5A5A));

    // skrull_layout_fill: GPU (0, 0, cp) is not in the plan; the details on out->spans.
    let mut o = layout_out();
    let mut spans = vec![0x5A5A_5A5A_5A5A_5A5Au64; o.spans.len() * 3];
    let mut out = o.buffers();
    out.spans = spans.as_mut_ptr().cast();
    let mut plan = h.buffers();
    plan.error = spans.as_mut_ptr().cast();
    let far = skrull_gpu { cp_rank: 4, ..GPU0 };
    let mut lws = vec![0u8; layout_capacity().workspace_bytes];
    // SAFETY: every buffer is live for its capacity.
    let st = unsafe {
        skrull_layout_fill(
            &config(),
            LENGTHS.as_ptr(),
            n,
            &plan,
            far,
            lws.as_mut_ptr().cast(),
            lws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::NoSuchGpu);
    assert!(
        spans.iter().all(|&w| w == 0x5A5A_5A5A_5A5A_5A5A),
        "details written into spans"
    );
    // Control: details of their own are written, with the same status.
    let mut e = skrull_error_info::of_status(skrull_status::Ok);
    plan.error = &mut e;
    // SAFETY: as above.
    let st = unsafe {
        skrull_layout_fill(
            &config(),
            LENGTHS.as_ptr(),
            n,
            &plan,
            far,
            lws.as_mut_ptr().cast(),
            lws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::NoSuchGpu);
    assert_eq!(e.status, skrull_status::NoSuchGpu as u32);
    // The details on the layout record (an output of skrull_layout_fill whose struct the
    // library reads leniently even when `out` itself is refused: here its `_reserved`).
    let mut rec = [0x5A5A_5A5A_5A5A_5A5Au64; 11];
    let mut out = o.buffers();
    out.layout = rec.as_mut_ptr().cast();
    out._reserved = 1;
    plan.error = rec.as_mut_ptr().cast();
    // SAFETY: as above.
    let st = unsafe {
        skrull_layout_fill(
            &config(),
            LENGTHS.as_ptr(),
            n,
            &plan,
            GPU0,
            lws.as_mut_ptr().cast(),
            lws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::InvalidArg);
    assert!(rec.iter().all(|&w| w == 0x5A5A_5A5A_5A5A_5A5A));
}

/// Outside harness, round 3: with `subgroups = 1`, a NULL `cp_groups` was reported
/// (NULL_ARG) before a too-short `micro_batches_per_dp`, which the documented field order puts
/// first (OUTPUT_TOO_SMALL). The groups are checked in their place in the field order.
#[test]
fn cp_groups_are_checked_in_field_order() {
    let n = LENGTHS.len();
    let mut c = config();
    c.subgroups = 1;
    let mut h = Held::new();
    let mut out = h.buffers();
    (out.cp_groups, out.cp_groups_len) = (core::ptr::null_mut(), 0);
    out.micro_batches_per_dp_len = 1;
    let mut ws = vec![0u8; schedule_workspace()];
    // SAFETY: every buffer is live for its capacity.
    let st = unsafe {
        skrull_schedule(
            &c,
            LENGTHS.as_ptr(),
            n,
            ws.as_mut_ptr().cast(),
            ws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::OutputTooSmall);
    out.micro_batches_per_dp_len = 2;
    // SAFETY: as above.
    let st = unsafe {
        skrull_schedule(
            &c,
            LENGTHS.as_ptr(),
            n,
            ws.as_mut_ptr().cast(),
            ws.len(),
            &out,
        )
    };
    assert_eq!(st, skrull_status::NullArg);
}
