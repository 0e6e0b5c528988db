//! The fuzz harness: decodes arbitrary bytes into a configuration, a batch and one optional
//! malformation of the call, runs it through the C ABI (`c_abi`) or the Rust API
//! (`rust_api`) and panics on any broken promise.
//!
//! Shared by the fuzz targets (`fuzz/fuzz_targets/`) and `tests/regressions_fuzz.rs`, so every
//! crash input replays as a plain test.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a panic is the report

use core::ffi::c_void;
use core::ptr::{null, null_mut};

use skrull::{
    SKRULL_PRESET_QWEN2_5_0_5B, SKRULL_PRESET_QWEN2_5_7B, skrull_config, skrull_dacp_place,
    skrull_dacp_summary, skrull_plan_buffers, skrull_schedule, skrull_status,
    skrull_workspace_size,
};
use skrull_core::config::{MAX_CP, MAX_DP};
use skrull_core::error::Buffer;
use skrull_core::{
    Config, Error, MicroBatch, Placement, PlanBuffers, PlanSizes, Workspace, WorkspaceSizes,
};

use crate::c_check::{CPlan, check_c_plan, check_rust_plan};
use crate::guarded::{FILL_MB, FILL_P, FILL_S, Guarded};

/// The most sequences one input decodes to (keeps executions fast).
pub const MAX_N: usize = 1024;

/// Reads little-endian integers off the input, giving zeros once it runs out.
pub struct Reader<'a> {
    d: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `d`.
    pub fn new(d: &'a [u8]) -> Self {
        Reader { d }
    }
    /// The bytes left.
    pub fn remaining(&self) -> usize {
        self.d.len()
    }
    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        match self.d.split_first() {
            Some((&b, rest)) => {
                self.d = rest;
                b
            }
            None => 0,
        }
    }
    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
}

/// One selector byte: below 0xF0 it picks from `small`, otherwise a raw `u32` follows.
fn field(r: &mut Reader<'_>, small: &[u32]) -> u32 {
    let s = r.u8();
    if s >= 0xF0 {
        r.u32()
    } else {
        small[s as usize % small.len()]
    }
}

/// At most one malformation of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perturb {
    /// A well-formed call.
    None,
    /// The workspace one byte short (Rust: slice `which % 6` one element short).
    WorkspaceShort(u8),
    /// Output buffer `which % 5` one element short.
    OutputShort(u8),
    /// Pointer `which % 8` NULL: placements, micro_batches, members, rank_tokens, per_dp,
    /// summary, workspace, lengths.
    Null(u8),
    /// `out.struct_size` replaced.
    OutStructSize(u32),
    /// `out._reserved` nonzero.
    OutReserved,
    /// `config.struct_size = 128` with one nonzero byte past the known fields.
    ConfigTail(u8),
    /// `config.struct_size` replaced.
    ConfigStructSize(u32),
    /// The workspace starts at an odd address (allowed: any alignment).
    OddWorkspace,
}

/// A decoded fuzz input.
#[derive(Debug, Clone)]
pub struct Input {
    /// The configuration, as C passes it.
    pub cfg: skrull_config,
    /// The malformation of the call.
    pub perturb: Perturb,
    /// The batch.
    pub lengths: Vec<u32>,
}

/// Decodes bytes: a mode byte, the configuration fields, one perturbation, then lengths
/// (2 bytes each; 0xFFF0 and above is followed by a raw 4-byte length; in "fit" mode the
/// 2-byte value is folded into `1..=cp x bucket`).
pub fn decode(data: &[u8]) -> Input {
    let mut r = Reader::new(data);
    let mode = r.u8();
    let preset = if mode & 0x80 != 0 {
        SKRULL_PRESET_QWEN2_5_7B
    } else {
        SKRULL_PRESET_QWEN2_5_0_5B
    };
    let mut cfg = skrull_config::preset(preset).expect("presets exist");
    cfg.dp = field(&mut r, &[1, 2, 3, 4, 5, 8, 16, 64]);
    cfg.cp = field(&mut r, &[1, 2, 3, 4, 7, 8, 16, 256]);
    cfg.bucket_tokens = field(
        &mut r,
        &[1, 2, 3, 7, 10, 64, 100, 1000, 4096, 26_624, i32::MAX as u32],
    );
    cfg.policy = field(&mut r, &[0, 1, 2, 3]);
    cfg.victim = field(&mut r, &[0, 1]);
    cfg.flops = field(&mut r, &[0, 1]);
    cfg.shard_padding = field(&mut r, &[0, 1]);
    cfg.max_micro_batches = field(&mut r, &[0, 0, 0, 1, 2, 3, 8]);
    if mode & 0x40 != 0 {
        let m = &mut cfg.model;
        m.hidden = field(&mut r, &[896, 3584, 1, 64, 1 << 16]);
        m.kv_hidden = field(&mut r, &[128, 512, 1, 64]);
        m.ffn = field(&mut r, &[4864, 18_944, 1, 1 << 18]);
        m.layers = field(&mut r, &[24, 28, 1, 1 << 10]);
        m.vocab = field(&mut r, &[151_936, 1, 1 << 22]);
        m.swiglu = field(&mut r, &[0, 1]);
    }
    let perturb = match r.u8() % 16 {
        9 => Perturb::WorkspaceShort(r.u8()),
        10 => Perturb::OutputShort(r.u8()),
        11 => Perturb::Null(r.u8()),
        12 => Perturb::OutStructSize(field(&mut r, &[0, 8, 95, 97, 104, 4096, 4097])),
        13 => Perturb::OutReserved,
        14 => Perturb::ConfigTail(r.u8()),
        15 => Perturb::ConfigStructSize(field(&mut r, &[0, 56, 59, 61, 64, 4096, 4097])),
        8 => Perturb::OddWorkspace,
        _ => Perturb::None,
    };
    let fit = mode & 0x20 != 0;
    let cap = u64::from(cfg.cp.max(1)) * u64::from(cfg.bucket_tokens.max(1));
    let mut lengths = Vec::new();
    while r.remaining() >= 2 && lengths.len() < MAX_N {
        let v = r.u16();
        let len = if v >= 0xFFF0 {
            r.u32()
        } else if fit {
            (1 + u64::from(v) % cap) as u32
        } else {
            u32::from(v)
        };
        lengths.push(len);
    }
    Input {
        cfg,
        perturb,
        lengths,
    }
}

/// Statuses `skrull_schedule()` must never return.
fn assert_valid_schedule_status(st: skrull_status) {
    assert!(
        !matches!(
            st,
            skrull_status::Panic | skrull_status::Internal | skrull_status::DacpFailed
        ),
        "skrull_schedule returned {st:?}"
    );
    assert!(skrull_status::from_u32(st as u32) == Some(st));
}

/// The Rust API's plan for a core configuration: placements, micro-batch counts, table,
/// members and rank tokens, after the independent checker and the core checker passed.
pub type RustPlan = (
    Vec<Placement>,
    Vec<u32>,
    Vec<MicroBatch>,
    Vec<u32>,
    Vec<u32>,
);

/// Plans through the Rust API with exactly sized buffers, checking any plan it returns.
pub fn rust_plan(cfg: &Config, lengths: &[u32]) -> Result<RustPlan, Error> {
    let n = lengths.len();
    cfg.validate()?;
    if n > skrull_core::config::MAX_SEQS {
        return Err(Error::TooManySequences {
            count: n,
            max: skrull_core::config::MAX_SEQS,
        });
    }
    let ps = PlanSizes::for_batch(n, cfg);
    let ws = WorkspaceSizes::for_any_policy(n, cfg);
    let mut placements = vec![Placement::default(); ps.placements];
    let mut micro_batches = vec![MicroBatch::default(); ps.micro_batches];
    let mut members = vec![0u32; ps.members];
    let mut rank_tokens = vec![0u32; ps.rank_tokens];
    let mut per_dp = vec![0u32; ps.micro_batches_per_dp];
    let (mut keys, mut seqs, mut scratch) =
        (vec![0u64; ws.keys], vec![0; ws.seqs], vec![0; ws.scratch]);
    let (mut loads, mut heap, mut start) = (
        vec![0u128; ws.dp_loads],
        vec![0; ws.dp_heap],
        vec![0; ws.dp_start],
    );
    let (mut costs, mut marks) = (vec![0u64; ws.costs], vec![0u32; ws.marks]);
    let mut work = Workspace {
        keys: &mut keys,
        seqs: &mut seqs,
        scratch: &mut scratch,
        dp_loads: &mut loads,
        dp_heap: &mut heap,
        dp_start: &mut start,
        costs: &mut costs,
        marks: &mut marks,
    };
    let out = PlanBuffers {
        placements: &mut placements,
        micro_batches: &mut micro_batches,
        members: &mut members,
        rank_tokens: &mut rank_tokens,
        micro_batches_per_dp: &mut per_dp,
    };
    let plan = skrull_core::schedule(cfg, lengths, &mut work, out)?;
    if let Err(e) = check_rust_plan(cfg, lengths, &plan) {
        panic!("Rust API plan fails the independent check: {e}");
    }
    if let Err(e) = skrull_core::plan::check(cfg, lengths, &plan) {
        panic!("Rust API plan fails the core check: {e:?}");
    }
    let mbs = plan.micro_batches().to_vec();
    let rt: Vec<u32> = (0..mbs.len())
        .flat_map(|g| plan.rank_tokens(g).to_vec())
        .collect();
    Ok((
        plan.placements().to_vec(),
        plan.micro_batches_per_dp().to_vec(),
        mbs,
        plan.members().to_vec(),
        rt,
    ))
}

/// One `skrull_schedule()` call from fuzz bytes: asserts the checker and equality with the
/// Rust API on success, a valid status on failure, untouched guards always and untouched
/// outputs on failure. Returns the status.
pub fn c_abi(data: &[u8]) -> skrull_status {
    let input = decode(data);
    let (c, lengths, perturb) = (input.cfg, input.lengths, input.perturb);
    let n = lengths.len();
    let (dp, cp) = (
        c.dp.clamp(1, MAX_DP) as usize,
        c.cp.clamp(1, MAX_CP) as usize,
    );
    // SAFETY: no preconditions.
    let ws_bytes = unsafe { skrull_workspace_size(n, dp as u32, cp as u32) };

    // The configuration inside a zeroed, aligned 4 KiB + buffer, so any struct_size up to
    // 4097 stays readable.
    let mut cfg_mem = vec![0u64; 4104 / 8 + 1];
    // SAFETY: `cfg_mem` is 8-aligned and larger than a skrull_config.
    unsafe { cfg_mem.as_mut_ptr().cast::<skrull_config>().write(c) };
    let mut must_fail = false;
    match perturb {
        Perturb::ConfigTail(k) => {
            cfg_mem[0] = (cfg_mem[0] & !0xFFFF_FFFF) | 128;
            let bytes = cfg_mem.as_mut_ptr().cast::<u8>();
            // SAFETY: 60 + 67 < 128 < the buffer's size.
            unsafe { bytes.add(60 + usize::from(k) % 68).write(1) };
            must_fail = true;
        }
        Perturb::ConfigStructSize(s) => {
            cfg_mem[0] = (cfg_mem[0] & !0xFFFF_FFFF) | u64::from(s);
            must_fail = !(60..=4096).contains(&s);
        }
        _ => {}
    }

    let mut placements = Guarded::new(n, FILL_P);
    let mut micro_batches = Guarded::new(n, FILL_MB);
    let mut members = Guarded::new(n, 0xDEAD_BEEFu32);
    let mut rank_tokens = Guarded::new(n * cp, 0xDEAD_BEEFu32);
    let mut per_dp = Guarded::new(dp, 0xDEAD_BEEFu32);
    let mut summary = Guarded::new(1, FILL_S);
    let mut workspace = Guarded::new(ws_bytes + 1, 0xA5u8);
    let lens = lengths.clone();

    let mut ws_len = ws_bytes;
    let mut ws_ptr = workspace.ptr();
    let mut lens_ptr = lens.as_ptr();
    let mut out = skrull_plan_buffers {
        struct_size: size_of::<skrull_plan_buffers>() as u32,
        _reserved: 0,
        placements: placements.ptr(),
        placements_len: n,
        micro_batches: micro_batches.ptr(),
        micro_batches_len: n,
        members: members.ptr(),
        members_len: n,
        rank_tokens: rank_tokens.ptr(),
        rank_tokens_len: n * cp,
        micro_batches_per_dp: per_dp.ptr(),
        micro_batches_per_dp_len: dp,
        summary: summary.ptr(),
        error: std::ptr::null_mut(),
    };
    match perturb {
        Perturb::WorkspaceShort(_) => {
            ws_len = ws_len.saturating_sub(1);
            must_fail = ws_bytes > 0;
        }
        Perturb::OddWorkspace => ws_ptr = ws_ptr.wrapping_add(1),
        Perturb::OutputShort(w) => {
            let len = match w % 5 {
                0 => &mut out.placements_len,
                1 => &mut out.micro_batches_len,
                2 => &mut out.members_len,
                3 => &mut out.rank_tokens_len,
                _ => &mut out.micro_batches_per_dp_len,
            };
            if *len > 0 {
                *len -= 1;
                must_fail = true;
            }
        }
        Perturb::Null(w) => match w % 8 {
            0 => {
                out.placements = null_mut();
                must_fail = n > 0;
            }
            1 => {
                out.micro_batches = null_mut();
                must_fail = n > 0;
            }
            2 => {
                out.members = null_mut();
                must_fail = n > 0;
            }
            3 => {
                out.rank_tokens = null_mut();
                must_fail = n > 0;
            }
            4 => {
                out.micro_batches_per_dp = null_mut();
                must_fail = true;
            }
            5 => {
                out.summary = null_mut();
                must_fail = true;
            }
            6 => {
                ws_ptr = null_mut();
                must_fail = true;
            }
            _ => {
                lens_ptr = null();
                must_fail = n > 0;
            }
        },
        Perturb::OutStructSize(s) => {
            out.struct_size = s;
            must_fail = (s as usize) < size_of::<skrull_plan_buffers>() || s > 4096;
        }
        Perturb::OutReserved => {
            out._reserved = 1;
            must_fail = true;
        }
        _ => {}
    }
    // `out` inside a zeroed 4 KiB + buffer too (its struct_size may be up to 4097).
    let mut out_mem = vec![0u64; 4104 / 8 + 1];
    // SAFETY: `out_mem` is 8-aligned and larger than a skrull_plan_buffers.
    unsafe {
        out_mem
            .as_mut_ptr()
            .cast::<skrull_plan_buffers>()
            .write(out)
    };

    // SAFETY: every pointer is NULL or valid for the length it is given; config and out are
    // readable for any struct_size up to 4104 bytes.
    let st = unsafe {
        skrull_schedule(
            cfg_mem.as_ptr().cast::<skrull_config>(),
            lens_ptr,
            n,
            ws_ptr.cast::<c_void>(),
            ws_len,
            out_mem.as_ptr().cast::<skrull_plan_buffers>(),
        )
    };
    assert_valid_schedule_status(st);
    assert_eq!(lens, lengths, "lengths were written");
    workspace.untouched_from(ws_bytes + 1, "workspace");
    if st != skrull_status::Ok {
        placements.untouched_from(0, "placements");
        micro_batches.untouched_from(0, "micro_batches");
        members.untouched_from(0, "members");
        rank_tokens.untouched_from(0, "rank_tokens");
        per_dp.untouched_from(0, "micro_batches_per_dp");
        summary.untouched_from(0, "summary");
        if perturb == Perturb::None || perturb == Perturb::OddWorkspace {
            // A well-formed call fails exactly as the Rust API does.
            let core = c.to_core();
            match core {
                Err(e) => assert_eq!(st, e, "option integer error"),
                Ok(cfg) => {
                    let r = rust_plan(&cfg, &lengths);
                    match r {
                        Ok(_) => panic!("C failed with {st:?}, the Rust API planned"),
                        Err(e) => assert_eq!(st, skrull_status::from(e), "Rust API said {e:?}"),
                    }
                }
            }
        }
        return st;
    }
    assert!(!must_fail, "malformed call {perturb:?} returned OK");
    let cfg = c.to_core().expect("OK implies a valid configuration");
    let s = summary.body()[0];
    let mbs = s.micro_batches as usize;
    placements.untouched_from(n, "placements");
    micro_batches.untouched_from(mbs, "micro_batches");
    members.untouched_from(n, "members");
    rank_tokens.untouched_from(mbs * cp, "rank_tokens");
    per_dp.untouched_from(dp, "micro_batches_per_dp");
    summary.untouched_from(1, "summary");
    let plan = CPlan {
        placements: placements.body(),
        micro_batches: micro_batches.body(),
        members: members.body(),
        rank_tokens: rank_tokens.body(),
        per_dp: per_dp.body(),
        summary: &s,
    };
    if let Err(e) = check_c_plan(&cfg, &lengths, &plan) {
        panic!("C plan fails the checker: {e}");
    }
    let rust = match rust_plan(&cfg, &lengths) {
        Ok(p) => p,
        Err(e) => panic!("C planned, the Rust API failed with {e:?}"),
    };
    assert_eq!(
        rust,
        c_as_rust(&plan, cp),
        "C plan differs from the Rust API's"
    );
    st
}

/// The C plan in the Rust API's types (for equality).
pub fn c_as_rust(p: &CPlan<'_>, cp: usize) -> RustPlan {
    let n = p.summary.sequences as usize;
    let mbs = p.summary.micro_batches as usize;
    (
        p.placements[..n]
            .iter()
            .map(|x| Placement {
                dp_rank: x.dp_rank,
                micro_batch: x.micro_batch,
                cp_rank: x.cp_rank,
            })
            .collect(),
        p.per_dp.to_vec(),
        p.micro_batches[..mbs]
            .iter()
            .map(|m| MicroBatch {
                dp_rank: m.dp_rank,
                index: m.index,
                first: m.first,
                count: m.count,
            })
            .collect(),
        p.members[..n].to_vec(),
        p.rank_tokens[..mbs * cp].to_vec(),
    )
}

/// One Rust API call from fuzz bytes: `schedule` with possibly one short buffer, then
/// `dacp::place` on the whole batch as one micro-batch, and `skrull_dacp_place` with it.
pub fn rust_api(data: &[u8]) {
    let input = decode(data);
    let Ok(cfg) = input.cfg.to_core() else {
        return;
    };
    let lengths = &input.lengths;
    let n = lengths.len();
    // Buffers are sized from clamped values so an invalid layout cannot allocate absurdly.
    let sized = Config {
        dp: cfg.dp.clamp(1, MAX_DP),
        cp: cfg.cp.clamp(1, MAX_CP),
        ..cfg
    };
    let ps = PlanSizes::for_batch(n, &sized);
    let wsz = WorkspaceSizes::for_any_policy(n, &sized);
    let mut sizes = [
        ps.placements,
        ps.micro_batches,
        ps.members,
        ps.rank_tokens,
        ps.micro_batches_per_dp,
        wsz.keys,
        wsz.seqs,
        wsz.scratch,
        wsz.dp_loads,
        wsz.dp_heap,
        wsz.dp_start,
    ];
    let mut short: Option<usize> = None;
    match input.perturb {
        Perturb::OutputShort(w) => short = Some(usize::from(w % 5)),
        Perturb::WorkspaceShort(w) => short = Some(5 + usize::from(w % 6)),
        _ => {}
    }
    if let Some(k) = short {
        if sizes[k] > 0 {
            sizes[k] -= 1;
        } else {
            short = None;
        }
    }
    let mut placements = vec![Placement::default(); sizes[0]];
    let mut micro_batches = vec![MicroBatch::default(); sizes[1]];
    let mut members = vec![0u32; sizes[2]];
    let mut rank_tokens = vec![0u32; sizes[3]];
    let mut per_dp = vec![0u32; sizes[4]];
    let mut keys = vec![0u64; sizes[5]];
    let (mut seqs, mut scratch) = (vec![0u32; sizes[6]], vec![0u32; sizes[7]]);
    let mut loads = vec![0u128; sizes[8]];
    let (mut heap, mut start) = (vec![0u32; sizes[9]], vec![0u32; sizes[10]]);
    let (mut costs, mut marks) = (vec![0u64; wsz.costs], vec![0u32; wsz.marks]);
    let mut work = Workspace {
        keys: &mut keys,
        seqs: &mut seqs,
        scratch: &mut scratch,
        dp_loads: &mut loads,
        dp_heap: &mut heap,
        dp_start: &mut start,
        costs: &mut costs,
        marks: &mut marks,
    };
    let out = PlanBuffers {
        placements: &mut placements,
        micro_batches: &mut micro_batches,
        members: &mut members,
        rank_tokens: &mut rank_tokens,
        micro_batches_per_dp: &mut per_dp,
    };
    let pre = cfg
        .validate()
        .and_then(|()| cfg.budget().check_lengths(lengths).map(|_| ()));
    let r = skrull_core::schedule(&cfg, lengths, &mut work, out);
    match (&r, pre, short) {
        (Err(e), Err(p), _) => assert_eq!(*e, p, "the first error must be reported"),
        (Ok(_), Err(p), _) => panic!("planned although {p:?}"),
        (
            Err(Error::BufferTooSmall {
                buffer,
                needed,
                got,
            }),
            Ok(()),
            Some(k),
        ) => {
            let want = [
                Buffer::Placements,
                Buffer::MicroBatches,
                Buffer::Members,
                Buffer::RankTokens,
                Buffer::MicroBatchesPerDp,
            ];
            let b = want.get(k).copied().unwrap_or(Buffer::Workspace);
            assert_eq!((*buffer, *needed, *got), (b, sizes[k] + 1, sizes[k]));
        }
        (r, Ok(()), Some(k)) => panic!("buffer {k} one short gave {r:?}"),
        (Err(Error::MicroBatchLimit { .. }), Ok(()), None) => {
            assert_ne!(cfg.max_micro_batches, 0, "limit error without a limit");
        }
        (Err(e), Ok(()), None) => panic!("valid call failed with {e:?}"),
        (Ok(plan), Ok(()), None) => {
            if let Err(e) = check_rust_plan(&cfg, lengths, plan) {
                panic!("plan fails the independent check: {e}");
            }
            if let Err(e) = skrull_core::plan::check(&cfg, lengths, plan) {
                panic!("plan fails the core check: {e:?}");
            }
        }
    }
    dacp_both(&cfg, lengths);
}

/// DACP alone on the whole batch as one micro-batch, through the Rust API and the C ABI:
/// the same decision, loads within the budget, and only the documented errors.
fn dacp_both(cfg: &Config, lengths: &[u32]) {
    let n = lengths.len();
    let mut order = vec![0u32; n];
    let mut ranks = vec![7i32; n];
    let r = skrull_core::policy::dacp::place(cfg, lengths, &mut order, &mut ranks);
    let c = skrull_config::from_core(cfg);
    let (dp, cp) = (cfg.dp.clamp(1, MAX_DP), cfg.cp.clamp(1, MAX_CP));
    // SAFETY: no preconditions.
    let wsb = unsafe { skrull_workspace_size(n, dp, cp) };
    let mut ws = vec![0u8; wsb];
    let mut c_ranks = Guarded::new(n, 7i32);
    let mut sum = Guarded::new(
        1,
        skrull_dacp_summary {
            sharded: 0xDEAD_BEEF,
            rollbacks: 0xDEAD_BEEF,
        },
    );
    // SAFETY: every pointer is valid for the length it is given.
    let st = unsafe {
        skrull_dacp_place(
            &c,
            lengths.as_ptr(),
            n,
            ws.as_mut_ptr().cast::<c_void>(),
            wsb,
            c_ranks.ptr(),
            n,
            sum.ptr(),
        )
    };
    assert!(
        !matches!(st, skrull_status::Panic | skrull_status::Internal),
        "skrull_dacp_place returned {st:?}"
    );
    match r {
        Ok(o) => {
            assert_eq!(st, skrull_status::Ok);
            assert_eq!(c_ranks.body(), &ranks[..], "C and Rust DACP differ");
            let s = sum.body()[0];
            assert_eq!((s.sharded, s.rollbacks), (o.sharded, o.rollbacks));
            c_ranks.untouched_from(n, "cp_ranks");
            sum.untouched_from(1, "dacp summary");
            let mut load = vec![0u64; cfg.cp as usize];
            let mut sharded = 0;
            for (k, &rk) in ranks.iter().enumerate() {
                if rk == -1 {
                    sharded += 1;
                    load.iter_mut()
                        .for_each(|l| *l += u64::from(cfg.shard_tokens(lengths[k])));
                } else {
                    assert!(rk >= 0 && (rk as u32) < cfg.cp, "cp rank {rk} out of range");
                    load[rk as usize] += u64::from(lengths[k]);
                }
            }
            assert_eq!(sharded, o.sharded);
            assert!(
                load.iter().all(|&l| l <= u64::from(cfg.bucket)),
                "DACP exceeded the budget"
            );
        }
        Err(e) => {
            assert!(
                !matches!(e, Error::BufferTooSmall { .. }),
                "exact buffers reported too small: {e:?}"
            );
            assert_eq!(
                st,
                skrull_status::from(e),
                "C and Rust DACP fail differently"
            );
            c_ranks.untouched_from(0, "cp_ranks");
            sum.untouched_from(0, "dacp summary");
        }
    }
}
