//! The documented order of checks of `skrull_schedule()` (`docs/c_api.md`, "The order of
//! checks", and the function's header comment), walked pair by pair: every problem below is
//! listed in that order, and for each pair of problems that can be made at once, the call must
//! report the one the docs put first. Each problem alone must give its own status (so a pair
//! test cannot pass for the wrong reason), and the error details, when they may be written,
//! must carry the returned status. The same walk covers `skrull_layout_fill()` (its plan,
//! `PLAN_INVALID` and `NO_SUCH_GPU` included), and `DACP_FAILED` gets its place in
//! `skrull_dacp_place()`.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;

use skrull::*;

const N: usize = 10;
const LENGTHS: [u32; N] = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];

/// Where a pointer argument points: its own aligned storage, NULL, or a chosen misalignment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ptr {
    Ok,
    Null,
    /// 2 bytes past an 8-byte boundary: not even 4-byte aligned.
    Odd,
    /// 4 bytes past an 8-byte boundary.
    Four,
}

/// Where the error details go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Details {
    Own,
    Misaligned,
    OnPlacements,
}

/// One `skrull_schedule()` call, described by value; [`Call::run`] lays it out in memory.
#[derive(Clone)]
struct Call {
    cfg: skrull_config,
    cfg_ptr: Ptr,
    cost: Option<skrull_cost_model>,
    cost_ptr: Ptr,
    lengths: Vec<u32>,
    n: usize,
    lengths_ptr: Ptr,
    ws: Ptr,
    ws_size: Option<usize>,
    out: skrull_plan_buffers,
    out_ptr: Ptr,
    null: [bool; 7],
    odd: [bool; 7],
    short: [bool; 7],
    members_on_placements: bool,
    details: Details,
}

/// Buffer indices in field order (the summary last).
const PLACEMENTS: usize = 0;
const PER_DP: usize = 4;
const GROUPS: usize = 5;
const SUMMARY: usize = 6;

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Block([u8; 16]);

/// Aligned backing storage of `bytes` bytes plus room to misalign.
fn storage(bytes: usize) -> Vec<Block> {
    vec![Block([0; 16]); bytes / 16 + 2]
}

fn place<T>(store: &mut [Block], how: Ptr) -> *mut T {
    let base = store.as_mut_ptr().cast::<u8>();
    match how {
        Ptr::Ok => base.cast(),
        Ptr::Null => core::ptr::null_mut(),
        Ptr::Odd => base.wrapping_add(2).cast(),
        Ptr::Four => base.wrapping_add(4).cast(),
    }
}

impl Call {
    fn new() -> Call {
        let mut cfg = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap();
        (cfg.dp, cfg.cp, cfg.bucket_tokens) = (2, 4, 24);
        Call {
            cfg,
            cfg_ptr: Ptr::Ok,
            cost: None,
            cost_ptr: Ptr::Ok,
            lengths: LENGTHS.to_vec(),
            n: N,
            lengths_ptr: Ptr::Ok,
            ws: Ptr::Ok,
            ws_size: None,
            out: skrull_plan_buffers::EMPTY,
            out_ptr: Ptr::Ok,
            null: [false; 7],
            odd: [false; 7],
            short: [false; 7],
            members_on_placements: false,
            details: Details::Own,
        }
    }

    /// Runs the call; returns its status and the details' status when they were written.
    fn run(&self) -> (skrull_status, Option<u32>) {
        let (dp, cp) = (2usize, 4usize);
        // Outputs: capacities for the well-formed call.
        let counts = [N, N, N, N * cp, dp, N];
        let sizes = [16, 16, 4, 4, 4, 8];
        let mut stores: Vec<Vec<Block>> = counts
            .iter()
            .zip(sizes)
            .map(|(&c, s)| storage(c * s + 64))
            .collect();
        let mut summary = storage(64);
        let mut ptrs: [*mut u8; 6] = [core::ptr::null_mut(); 6];
        for k in 0..6 {
            let how = if self.null[k] {
                Ptr::Null
            } else if self.odd[k] {
                Ptr::Odd
            } else {
                Ptr::Ok
            };
            ptrs[k] = place(&mut stores[k], how);
        }
        let lens_cap: [usize; 6] = core::array::from_fn(|k| counts[k] - usize::from(self.short[k]));
        let summary_how = if self.null[SUMMARY] {
            Ptr::Null
        } else if self.odd[SUMMARY] {
            Ptr::Four
        } else {
            Ptr::Ok
        };
        let mut details_store = storage(64);
        let mut out = self.out;
        out.placements = ptrs[0].cast();
        out.placements_len = lens_cap[0];
        out.micro_batches = ptrs[1].cast();
        out.micro_batches_len = lens_cap[1];
        out.members = if self.members_on_placements {
            ptrs[0].cast()
        } else {
            ptrs[2].cast()
        };
        out.members_len = lens_cap[2];
        out.rank_tokens = ptrs[3].cast();
        out.rank_tokens_len = lens_cap[3];
        out.micro_batches_per_dp = ptrs[4].cast();
        out.micro_batches_per_dp_len = lens_cap[4];
        out.cp_groups = ptrs[5].cast();
        out.cp_groups_len = if self.null[GROUPS] { 0 } else { lens_cap[5] };
        out.summary = place(&mut summary, summary_how);
        out.error = match self.details {
            Details::Own => place(&mut details_store, Ptr::Ok),
            Details::Misaligned => place(&mut details_store, Ptr::Four),
            Details::OnPlacements => ptrs[0].cast(),
        };
        // The structs, each in its own storage at the chosen alignment.
        let mut cost_store = storage(512);
        let mut cfg = self.cfg;
        if let Some(m) = self.cost {
            let p = place::<skrull_cost_model>(&mut cost_store, self.cost_ptr);
            // SAFETY: `p` has 512 bytes of room; bytewise copy.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (&raw const m).cast::<u8>(),
                    p.cast::<u8>(),
                    size_of::<skrull_cost_model>(),
                )
            };
            cfg.cost_model = p;
        }
        let mut cfg_store = storage(512);
        let cfg_p = place::<skrull_config>(&mut cfg_store, self.cfg_ptr);
        if !cfg_p.is_null() {
            // SAFETY: 512 bytes of room; bytewise copy.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (&raw const cfg).cast::<u8>(),
                    cfg_p.cast::<u8>(),
                    size_of::<skrull_config>(),
                )
            };
        }
        let mut out_store = storage(512);
        let out_p = place::<skrull_plan_buffers>(&mut out_store, self.out_ptr);
        if !out_p.is_null() {
            // SAFETY: as above.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (&raw const out).cast::<u8>(),
                    out_p.cast::<u8>(),
                    size_of::<skrull_plan_buffers>(),
                )
            };
        }
        let mut len_store = storage(self.lengths.len() * 4 + 16);
        let len_p = place::<u32>(&mut len_store, self.lengths_ptr);
        if !len_p.is_null() {
            // SAFETY: as above.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.lengths.as_ptr().cast::<u8>(),
                    len_p.cast::<u8>(),
                    4 * self.lengths.len(),
                )
            };
        }
        // SAFETY: no preconditions.
        let ws_bytes = unsafe { skrull_workspace_size(N, dp as u32, cp as u32) };
        let mut ws_store = storage(ws_bytes);
        let ws_p = place::<c_void>(&mut ws_store, self.ws);
        let ws_size = self.ws_size.unwrap_or(ws_bytes);
        // SAFETY: every pointer is NULL or valid for what it declares, except declared ranges
        // the library must refuse before any access (a huge workspace size, n above the
        // limit with lengths read only for n <= the buffer).
        let st = unsafe { skrull_schedule(cfg_p, len_p, self.n, ws_p, ws_size, out_p) };
        let written = match self.details {
            Details::Own => {
                // SAFETY: the details storage is live and aligned.
                let e = unsafe { out.error.read() };
                (e.status != 0).then_some(e.status)
            }
            _ => None,
        };
        (st, written)
    }
}

/// One problem: its name, the status it alone causes, what it changes, and the "slot" it
/// occupies (two problems of one slot cannot be made at once).
struct Problem {
    name: &'static str,
    status: skrull_status,
    slot: &'static str,
    apply: fn(&mut Call),
}

macro_rules! p {
    ($name:literal, $status:ident, $slot:literal, $apply:expr) => {
        Problem {
            name: $name,
            status: skrull_status::$status,
            slot: $slot,
            apply: $apply,
        }
    };
}

/// Every problem, in the documented order.
fn problems() -> Vec<Problem> {
    vec![
        // 1. The configuration: pointer, struct size, size-class alignment,
        //    option integers, the cost model struct, then the ranges.
        p!("config NULL", NullArg, "cfg_ptr", |c| c.cfg_ptr = Ptr::Null),
        p!("config not 4-aligned", InvalidArg, "cfg_ptr", |c| c
            .cfg_ptr =
            Ptr::Odd),
        p!("config struct_size 61", BadStructSize, "cfg_size", |c| c
            .cfg
            .struct_size =
            61),
        p!(
            "config with cost_model at 4 mod 8",
            InvalidArg,
            "cfg_ptr",
            |c| c.cfg_ptr = Ptr::Four
        ),
        p!("policy 99", InvalidEnum, "policy", |c| c.cfg.policy = 99),
        p!("swiglu 2", InvalidEnum, "-", |c| c.cfg.model.swiglu = 2),
        p!("subgroups 2", InvalidEnum, "subgroups", |c| c
            .cfg
            .subgroups =
            2),
        p!("fill_empty 2", InvalidEnum, "-", |c| c.cfg.fill_empty = 2),
        p!("cost model not 4-aligned", InvalidArg, "cost_ptr", |c| {
            c.cost.get_or_insert_with(cost);
            c.cost_ptr = Ptr::Odd;
        }),
        p!(
            "cost model struct_size 1",
            BadStructSize,
            "cost_size",
            |c| {
                c.cost.get_or_insert_with(cost).struct_size = 1;
            }
        ),
        p!("cost model at 4 mod 8", InvalidArg, "cost_ptr", |c| {
            c.cost.get_or_insert_with(cost);
            c.cost_ptr = Ptr::Four;
        }),
        p!("cost model overlap 7", InvalidEnum, "-", |c| {
            c.cost.get_or_insert_with(cost).overlap = 7;
        }),
        p!("dp 0", InvalidDp, "-", |c| c.cfg.dp = 0),
        p!("cp 0", InvalidCp, "-", |c| c.cfg.cp = 0),
        p!("bucket 0", InvalidBucket, "-", |c| c.cfg.bucket_tokens = 0),
        p!("pad_multiple 65537", InvalidPadMultiple, "-", |c| c
            .cfg
            .pad_multiple =
            65_537),
        p!("hidden 0", InvalidModel, "-", |c| c.cfg.model.hidden = 0),
        p!("gemm_efficiency 2", InvalidCostModel, "-", |c| {
            c.cost.get_or_insert_with(cost).gemm_efficiency = 2.0;
        }),
        p!("chunk_keep 0", InvalidChunking, "-", |c| {
            (c.cfg.chunk_size, c.cfg.chunk_keep) = (64, 0);
        }),
        p!(
            "fixed count 3 above a limit of 2",
            MicroBatchLimit,
            "-",
            |c| {
                (c.cfg.micro_batches, c.cfg.max_micro_batches) = (3, 2);
            }
        ),
        p!(
            "balanced with Megatron FLOPs",
            UnsupportedOption,
            "policy",
            |c| {
                (c.cfg.policy, c.cfg.flops) = (SKRULL_POLICY_BALANCED, SKRULL_FLOPS_MEGATRON);
            }
        ),
        // 2. The plan-buffers struct.
        p!("out NULL", NullArg, "out_ptr", |c| c.out_ptr = Ptr::Null),
        p!("out not 4-aligned", InvalidArg, "out_ptr", |c| c.out_ptr =
            Ptr::Odd),
        p!("out struct_size 97", BadStructSize, "out_size", |c| c
            .out
            .struct_size =
            97),
        p!("out at 4 mod 8", InvalidArg, "out_ptr", |c| c.out_ptr =
            Ptr::Four),
        p!("out _reserved", InvalidArg, "-", |c| c.out._reserved = 1),
        // 3. The batch size, the lengths pointer, the workspace.
        p!("n above 65536", TooManySequences, "n", |c| c.n = 65_537),
        p!("lengths NULL", NullArg, "len_ptr", |c| c.lengths_ptr =
            Ptr::Null),
        p!("lengths misaligned", InvalidArg, "len_ptr", |c| c
            .lengths_ptr =
            Ptr::Odd),
        p!("workspace NULL", NullArg, "ws", |c| c.ws = Ptr::Null),
        p!("workspace short", WorkspaceTooSmall, "ws", |c| c.ws_size =
            Some(100)),
        // 4. The summary pointer, then each output buffer in field order.
        p!("summary NULL", NullArg, "summary", |c| c.null[SUMMARY] =
            true),
        p!("summary misaligned", InvalidArg, "summary", |c| c.odd
            [SUMMARY] =
            true),
        p!("placements NULL", NullArg, "placements", |c| c.null
            [PLACEMENTS] =
            true),
        p!("placements misaligned", InvalidArg, "placements", |c| c
            .odd[PLACEMENTS] =
            true),
        p!("placements short", OutputTooSmall, "-", |c| c.short
            [PLACEMENTS] =
            true),
        p!("members short", OutputTooSmall, "-", |c| c.short[2] = true),
        p!("micro_batches_per_dp short", OutputTooSmall, "-", |c| c
            .short[PER_DP] =
            true),
        p!("cp_groups NULL with subgroups", NullArg, "subgroups", |c| {
            c.cfg.subgroups = 1;
            c.null[GROUPS] = true;
        }),
        p!("cp_groups NULL with chunking", NullArg, "subgroups", |c| {
            c.cfg.chunk_size = 64;
            c.null[GROUPS] = true;
        }),
        p!("cp_groups short", OutputTooSmall, "-", |c| c.short
            [GROUPS] =
            true),
        // 5. The workspace's declared range, overlaps, the error details.
        p!("workspace size SIZE_MAX", InvalidArg, "ws", |c| c.ws_size =
            Some(usize::MAX)),
        p!("members on placements", InvalidArg, "members", |c| c
            .members_on_placements =
            true),
        p!("details misaligned", InvalidArg, "details", |c| c.details =
            Details::Misaligned),
        p!("details on placements", InvalidArg, "details", |c| c
            .details =
            Details::OnPlacements),
        // 6. The batch, first offending sequence in input order; then the micro-batch limit.
        p!("sequence 3 empty", EmptySequence, "-", |c| c.lengths[3] = 0),
        p!("sequence 5 above 2^31 - 1", LengthOutOfRange, "-", |c| c
            .lengths[5] =
            u32::MAX),
        p!("sequence 7 too long", SequenceTooLong, "-", |c| c.lengths
            [7] =
            1 << 20),
        p!("micro-batch limit 1", MicroBatchLimit, "-", |c| {
            (c.cfg.max_micro_batches, c.cfg.bucket_tokens) = (1, 8);
        }),
        p!("fixed count 1", MicroBatchCount, "-", |c| {
            (c.cfg.micro_batches, c.cfg.bucket_tokens) = (1, 8);
        }),
    ]
}

fn cost() -> skrull_cost_model {
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

/// Whether the details may be written for this call: the plan-buffers struct is read and the
/// details struct is its own.
fn details_readable(c: &Call) -> bool {
    // A declared range that reaches far (the whole address space above the workspace, 65,537
    // lengths) may cover the details' own storage: then they are rightly not written.
    c.ws_size != Some(usize::MAX)
        && c.n == N
        && c.out_ptr == Ptr::Ok
        && c.out.struct_size == skrull_plan_buffers::EMPTY.struct_size
        && c.out._reserved == 0
        && c.details == Details::Own
}

#[test]
fn every_problem_alone_gives_its_status() {
    let (st, _) = Call::new().run();
    assert_eq!(st, skrull_status::Ok, "the base call must succeed");
    for p in problems() {
        let mut c = Call::new();
        (p.apply)(&mut c);
        let (st, details) = c.run();
        assert_eq!(st, p.status, "{}", p.name);
        if details_readable(&c) {
            assert_eq!(details, Some(st as u32), "{}: details", p.name);
        }
    }
}

#[test]
fn each_pair_reports_the_problem_documented_first() {
    let all = problems();
    let mut pairs = 0;
    for (i, first) in all.iter().enumerate() {
        for second in &all[i + 1..] {
            if first.slot != "-" && first.slot == second.slot {
                continue;
            }
            let mut c = Call::new();
            (second.apply)(&mut c);
            (first.apply)(&mut c);
            let (st, details) = c.run();
            assert_eq!(
                st, first.status,
                "{} + {}: got {st:?}, the docs put {} ({:?}) first",
                first.name, second.name, first.name, first.status
            );
            if details_readable(&c) {
                assert_eq!(
                    details,
                    Some(st as u32),
                    "{} + {}: details",
                    first.name,
                    second.name
                );
            }
            pairs += 1;
        }
    }
    assert!(pairs > 900, "{pairs} pairs");
}

/// One `skrull_layout_fill()` call on the plan of the base batch, described by value.
#[derive(Clone)]
struct Fill {
    cfg: skrull_config,
    cfg_null: bool,
    n: usize,
    lengths_null: bool,
    ws: Ptr,
    ws_size: Option<usize>,
    plan_null: bool,
    plan_reserved: u32,
    plan_size: Option<u32>,
    summary_null: bool,
    summary_reserved: u32,
    placements_null: bool,
    placements_short: bool,
    corrupt: bool,
    gpu: skrull_gpu,
    out_null: bool,
    out_reserved: u32,
    out_size: Option<u32>,
    layout_null: bool,
    spans_short: bool,
    spans_on_members: bool,
    details_on_positions: bool,
}

impl Fill {
    fn new() -> Fill {
        Fill {
            cfg: Call::new().cfg,
            cfg_null: false,
            n: N,
            lengths_null: false,
            ws: Ptr::Ok,
            ws_size: None,
            plan_null: false,
            plan_reserved: 0,
            plan_size: None,
            summary_null: false,
            summary_reserved: 0,
            placements_null: false,
            placements_short: false,
            corrupt: false,
            gpu: skrull_gpu {
                dp_rank: 0,
                micro_batch: 0,
                cp_rank: 1,
            },
            out_null: false,
            out_reserved: 0,
            out_size: None,
            layout_null: false,
            spans_short: false,
            spans_on_members: false,
            details_on_positions: false,
        }
    }

    fn run(&self) -> (skrull_status, Option<u32>) {
        let base = Call::new().cfg;
        let (dp, cp) = (2usize, 4usize);
        let mut placements = vec![skrull_placement::default(); N];
        let mut micro_batches = vec![skrull_micro_batch::default(); N];
        // Room after the first N members for the spans of the overlap problem.
        let mut members = vec![0u32; N + 130];
        let mut rank_tokens = vec![0u32; N * cp];
        let mut per_dp = vec![0u32; dp];
        let mut summary = skrull_summary::default();
        let mut error = skrull_error_info::of_status(skrull_status::Ok);
        let mut plan = skrull_plan_buffers {
            placements: placements.as_mut_ptr(),
            placements_len: N,
            micro_batches: micro_batches.as_mut_ptr(),
            micro_batches_len: N,
            members: members.as_mut_ptr(),
            members_len: N,
            rank_tokens: rank_tokens.as_mut_ptr(),
            rank_tokens_len: N * cp,
            micro_batches_per_dp: per_dp.as_mut_ptr(),
            micro_batches_per_dp_len: dp,
            summary: &mut summary,
            ..skrull_plan_buffers::EMPTY
        };
        // SAFETY: no preconditions.
        let mut ws = storage(unsafe { skrull_workspace_size(N, dp as u32, cp as u32) });
        // SAFETY: every pointer is live for its stated length.
        let st = unsafe {
            skrull_schedule(
                &base,
                LENGTHS.as_ptr(),
                N,
                ws.as_mut_ptr().cast(),
                ws.len() * 16,
                &plan,
            )
        };
        assert_eq!(st, skrull_status::Ok);
        // Edits go through the pointers the plan holds (the arrays stay borrowed by them).
        // SAFETY: both point into live, writable storage of the plan.
        unsafe {
            (*plan.summary)._reserved = self.summary_reserved;
            if self.corrupt {
                (*plan.placements.add(3)).micro_batch += 7;
            }
        }
        plan._reserved = self.plan_reserved;
        plan.struct_size = self.plan_size.unwrap_or(plan.struct_size);
        if self.summary_null {
            plan.summary = core::ptr::null_mut();
        }
        if self.placements_null {
            plan.placements = core::ptr::null_mut();
        }
        if self.placements_short {
            plan.placements_len = N - 1;
        }
        let mut cap = skrull_layout_capacity::default();
        // SAFETY: live config and output.
        let st = unsafe { skrull_layout_sizes_max(&base, N, &mut cap) };
        assert_eq!(st, skrull_status::Ok);
        let mut spans = vec![skrull_span::default(); cap.spans];
        let mut cu: Vec<Vec<i32>> = (0..4).map(|_| vec![0; cap.local_cu_seqlens]).collect();
        let mut positions = vec![0i32; cap.positions + 8];
        let mut rec = skrull_layout::default();
        let mut out = skrull_layout_buffers {
            spans: spans.as_mut_ptr(),
            spans_len: if self.spans_short { 0 } else { cap.spans },
            local_cu_seqlens: cu[0].as_mut_ptr(),
            local_cu_seqlens_len: cap.local_cu_seqlens,
            sharded_cu_seqlens: cu[1].as_mut_ptr(),
            sharded_cu_seqlens_len: cap.sharded_cu_seqlens,
            sharded_cu_seqlens_padded: cu[2].as_mut_ptr(),
            sharded_cu_seqlens_padded_len: cap.sharded_cu_seqlens,
            rank_cu_seqlens: cu[3].as_mut_ptr(),
            rank_cu_seqlens_len: cap.sharded_cu_seqlens,
            positions: positions.as_mut_ptr(),
            positions_len: cap.positions,
            layout: &mut rec,
            ..skrull_layout_buffers::EMPTY
        };
        out._reserved = self.out_reserved;
        out.struct_size = self.out_size.unwrap_or(out.struct_size);
        if self.layout_null {
            out.layout = core::ptr::null_mut();
        }
        if self.spans_on_members {
            // The spans' declared range reaches into the plan's members (an input).
            out.spans = members.as_mut_ptr().wrapping_add(N).cast();
            assert!(out.spans_len * 24 <= (members.len() - N) * 4);
            plan.members_len = members.len();
        }
        plan.error = if self.details_on_positions {
            positions.as_mut_ptr().cast()
        } else {
            &mut error
        };
        let mut lws = storage(cap.workspace_bytes);
        let ws_p = place::<c_void>(&mut lws, self.ws);
        let cfg: *const skrull_config = if self.cfg_null {
            core::ptr::null()
        } else {
            &self.cfg
        };
        let lens = if self.lengths_null {
            core::ptr::null()
        } else {
            LENGTHS.as_ptr()
        };
        let plan_p: *const skrull_plan_buffers = if self.plan_null {
            core::ptr::null()
        } else {
            &plan
        };
        let out_p: *const skrull_layout_buffers = if self.out_null {
            core::ptr::null()
        } else {
            &out
        };
        let ws_size = self.ws_size.unwrap_or(cap.workspace_bytes);
        // SAFETY: every pointer is NULL or live for what it declares, except the declared
        // ranges the library must refuse before any access.
        let st = unsafe {
            skrull_layout_fill(cfg, lens, self.n, plan_p, self.gpu, ws_p, ws_size, out_p)
        };
        let readable = !self.plan_null
            && self.plan_reserved == 0
            && self.plan_size.is_none()
            && !self.details_on_positions
            && self.ws_size != Some(usize::MAX)
            && self.n == N;
        (st, (readable && error.status != 0).then_some(error.status))
    }
}

struct FillProblem {
    name: &'static str,
    status: skrull_status,
    slot: &'static str,
    apply: fn(&mut Fill),
}

macro_rules! f {
    ($name:literal, $status:ident, $slot:literal, $apply:expr) => {
        FillProblem {
            name: $name,
            status: skrull_status::$status,
            slot: $slot,
            apply: $apply,
        }
    };
}

/// The problems of `skrull_layout_fill()`, in the documented order.
fn fill_problems() -> Vec<FillProblem> {
    vec![
        f!("config NULL", NullArg, "-", |f| f.cfg_null = true),
        f!("policy 99", InvalidEnum, "-", |f| f.cfg.policy = 99),
        f!("dp 0", InvalidDp, "-", |f| f.cfg.dp = 0),
        f!("plan NULL", NullArg, "-", |f| f.plan_null = true),
        f!("plan struct_size 97", BadStructSize, "-", |f| f.plan_size =
            Some(97)),
        f!("plan _reserved", InvalidArg, "-", |f| f.plan_reserved = 1),
        f!("out NULL", NullArg, "-", |f| f.out_null = true),
        f!("out struct_size 113", BadStructSize, "-", |f| f.out_size =
            Some(113)),
        f!("out _reserved", InvalidArg, "-", |f| f.out_reserved = 1),
        f!("n above 65536", TooManySequences, "-", |f| f.n = 65_537),
        f!("lengths NULL", NullArg, "-", |f| f.lengths_null = true),
        f!("workspace NULL", NullArg, "ws", |f| f.ws = Ptr::Null),
        f!("workspace short", WorkspaceTooSmall, "ws", |f| f.ws_size =
            Some(10)),
        f!("summary NULL", NullArg, "summary", |f| f.summary_null =
            true),
        f!("summary _reserved", PlanInvalid, "summary", |f| f
            .summary_reserved =
            1),
        f!("placements NULL", NullArg, "placements", |f| f
            .placements_null =
            true),
        f!(
            "placements below the summary",
            PlanInvalid,
            "placements",
            |f| { f.placements_short = true }
        ),
        f!("workspace size SIZE_MAX", InvalidArg, "ws", |f| f.ws_size =
            Some(usize::MAX)),
        f!("a corrupted placement", PlanInvalid, "-", |f| f.corrupt =
            true),
        f!("cp_rank = cp", NoSuchGpu, "-", |f| f.gpu.cp_rank = 4),
        f!("out->layout NULL", NullArg, "-", |f| f.layout_null = true),
        f!("spans short", OutputTooSmall, "spans", |f| f.spans_short =
            true),
        f!("spans on the plan's members", InvalidArg, "spans", |f| f
            .spans_on_members =
            true),
        f!("details on positions", InvalidArg, "-", |f| f
            .details_on_positions =
            true),
    ]
}

#[test]
fn layout_fill_walks_its_documented_order() {
    assert_eq!(
        Fill::new().run().0,
        skrull_status::Ok,
        "the base call must succeed"
    );
    let all = fill_problems();
    for p in &all {
        let mut f = Fill::new();
        (p.apply)(&mut f);
        let (st, details) = f.run();
        assert_eq!(st, p.status, "{}", p.name);
        if let Some(d) = details {
            assert_eq!(d, st as u32, "{}: details", p.name);
        }
    }
    let mut pairs = 0;
    for (i, first) in all.iter().enumerate() {
        for second in &all[i + 1..] {
            if first.slot != "-" && first.slot == second.slot {
                continue;
            }
            let mut f = Fill::new();
            (second.apply)(&mut f);
            (first.apply)(&mut f);
            let (st, details) = f.run();
            assert_eq!(
                st, first.status,
                "{} + {}: the docs put {} first",
                first.name, second.name, first.name
            );
            if let Some(d) = details {
                assert_eq!(d, st as u32, "{} + {}: details", first.name, second.name);
            }
            pairs += 1;
        }
    }
    assert!(pairs > 250, "{pairs} pairs");
}

/// `skrull_dacp_place()`: `DACP_FAILED` comes last, after the configuration, the pointers and
/// the batch's own errors.
#[test]
fn dacp_failed_comes_after_everything_else() {
    let run = |cfg: &skrull_config, lengths: &[u32], summary_null: bool| {
        // SAFETY: no preconditions.
        let mut ws = storage(unsafe { skrull_workspace_size(lengths.len(), 2, 4) });
        let mut ranks = vec![0i32; lengths.len()];
        let mut summary = skrull_dacp_summary::default();
        let s: *mut skrull_dacp_summary = if summary_null {
            core::ptr::null_mut()
        } else {
            &mut summary
        };
        // SAFETY: every pointer is NULL or live for its stated length.
        unsafe {
            skrull_dacp_place(
                cfg,
                lengths.as_ptr(),
                lengths.len(),
                ws.as_mut_ptr().cast(),
                ws.len() * 16,
                ranks.as_mut_ptr(),
                ranks.len(),
                s,
            )
        }
    };
    let cfg = Call::new().cfg;
    // Two sequences of 90 tokens: each fits sharded (23 per rank), together they do not.
    let full = [90, 90, 1];
    assert_eq!(run(&cfg, &full, false), skrull_status::DacpFailed);
    assert_eq!(run(&cfg, &[90, 90, 0], false), skrull_status::EmptySequence);
    assert_eq!(
        run(&cfg, &[90, 90, 1 << 20], false),
        skrull_status::SequenceTooLong
    );
    assert_eq!(run(&cfg, &full, true), skrull_status::NullArg);
    let mut bad = cfg;
    bad.dp = 0;
    assert_eq!(run(&bad, &full, false), skrull_status::InvalidDp);
    bad = cfg;
    bad.max_micro_batches = 1;
    assert_eq!(run(&bad, &full, false), skrull_status::DacpFailed);
}
