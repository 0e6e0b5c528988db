//! One `skrull_layout_fill()` call: the output buffers between guards ([`Outs`]), the
//! malformation applied to the call ([`Malform`]) and the status it must then return.

use core::ffi::c_void;
use core::ptr::null_mut;

use skrull::{
    skrull_config, skrull_gpu, skrull_layout, skrull_layout_buffers, skrull_layout_fill,
    skrull_layout_ring, skrull_span, skrull_status,
};

use super::plan::Held;
use crate::guarded::{FILL, FILL_R, Guarded};

/// A malformation of one layout call, and the stage of the documented order it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Malform {
    None,
    /// Checked right after the plan struct (before the plan is read).
    PlanReserved,
    OutReserved,
    OutStructSize(u32),
    /// Checked before the plan is validated.
    WorkspaceShort,
    /// Any alignment is fine.
    OddWorkspace,
    /// Checked last, after NO_SUCH_GPU and LAYOUT_OVERFLOW. Buffer `which % 7`: spans, the
    /// four `cu_seqlens`, positions (OutputNull: the layout record), rings.
    OutputShort(u8),
    OutputNull(u8),
    CapacityHuge(u8),
    /// `spans` declared twice as long, its spare half lying on `positions`.
    SpansSpareOnPositions,
    /// `local_cu_seqlens` inside the declared (unused) capacity of the plan's `members`.
    OutputInPlanSpare,
}

pub(super) fn malform(code: u8, arg: u8) -> Malform {
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
pub(super) struct Outs {
    pub(super) spans: Guarded<skrull_span>,
    pub(super) local_cu: Guarded<i32>,
    pub(super) sharded_cu: Guarded<i32>,
    pub(super) sharded_cu_padded: Guarded<i32>,
    pub(super) rank_cu: Guarded<i32>,
    pub(super) positions: Guarded<i32>,
    pub(super) local_cu_padded: Guarded<i32>,
    pub(super) gather: Guarded<i64>,
    pub(super) layout: Guarded<skrull_layout>,
    pub(super) rings: Guarded<skrull_layout_ring>,
    pub(super) rings_count: Guarded<u32>,
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
    pub(super) fn new(
        spans: usize,
        local: usize,
        sharded: usize,
        positions: usize,
        rings: usize,
    ) -> Outs {
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
            rings: Guarded::new(rings, FILL_R),
            rings_count: Guarded::new(1, FILL),
        }
    }
    pub(super) fn untouched(&self, what: &str) {
        self.spans.untouched_from(0, what);
        self.local_cu.untouched_from(0, what);
        self.sharded_cu.untouched_from(0, what);
        self.sharded_cu_padded.untouched_from(0, what);
        self.rank_cu.untouched_from(0, what);
        self.positions.untouched_from(0, what);
        self.local_cu_padded.untouched_from(0, what);
        self.gather.untouched_from(0, what);
        self.layout.untouched_from(0, what);
        self.rings.untouched_from(0, what);
        self.rings_count.untouched_from(0, what);
    }
    pub(super) fn reset(&mut self) {
        self.spans.reset();
        self.local_cu.reset();
        self.sharded_cu.reset();
        self.sharded_cu_padded.reset();
        self.rank_cu.reset();
        self.positions.reset();
        self.local_cu_padded.reset();
        self.gather.reset();
        self.layout.reset();
        self.rings.reset();
        self.rings_count.reset();
    }
}

/// One `skrull_layout_fill` call with `m` applied; returns the status. Without sub-groups a
/// rings capacity of 0 passes no rings buffer (NULL), as such a caller may ([`rings_passed`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn c_fill(
    c: &skrull_config,
    lengths: &[u32],
    h: &mut Held,
    gpu: skrull_gpu,
    o: &mut Outs,
    caps: [usize; 5],
    ws_bytes: usize,
    m: Malform,
    spare: &mut Vec<u32>,
) -> skrull_status {
    let [nspans, nlocal, nsharded, npos, nrings] = caps;
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
        rings: if rings_passed(c, nrings, Malform::None) {
            o.rings.ptr()
        } else {
            null_mut()
        },
        rings_len: nrings,
        rings_count: o.rings_count.ptr(),
        ..skrull_layout_buffers::EMPTY
    };
    let mut plan = h.buffers();
    let which = |w: u8| usize::from(w) % 7;
    let huge = |w: u8| usize::from(w) % 6;
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
                5 => &mut out.positions_len,
                _ => &mut out.rings_len,
            };
            *len = len.saturating_sub(1);
        }
        Malform::OutputNull(w) => match which(w) {
            0 => out.spans = null_mut(),
            1 => out.local_cu_seqlens = null_mut(),
            2 => out.sharded_cu_seqlens = null_mut(),
            3 => out.sharded_cu_seqlens_padded = null_mut(),
            4 => out.rank_cu_seqlens = null_mut(),
            5 => out.layout = null_mut(),
            _ => out.rings = null_mut(),
        },
        Malform::CapacityHuge(w) => match huge(w) {
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

/// Whether a call with rings capacity `nrings` and malformation `m` passes a rings buffer:
/// always with sub-groups (they require it), otherwise when it has room for one, unless `m`
/// makes it NULL.
pub(super) fn rings_passed(c: &skrull_config, nrings: usize, m: Malform) -> bool {
    let nulled = matches!(m, Malform::OutputNull(w) if w % 7 == 6);
    (nrings > 0 || c.subgroups == 1) && !nulled
}

/// The statuses `skrull_layout_fill` may return for a call with malformation `m`, given the
/// status `clean` of the same call without it, the capacities `lens` it passes (spans, the
/// four `cu_seqlens`, positions, rings) and the elements `needed` of each, and whether the
/// configuration has sub-groups (the rings are then required).
pub(super) fn expected(
    clean: skrull_status,
    m: Malform,
    lens: [usize; 7],
    needed: [usize; 7],
    spare_applied: bool,
    subgroups: bool,
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
            let w = usize::from(w) % 7;
            // A rings buffer of capacity 0 is NULL here (skipped); one element less is then
            // still 0.
            if lens[w] > 0 && lens[w] - 1 < needed[w] {
                S::OutputTooSmall
            } else {
                S::Ok
            }
        }
        // NULL with a nonzero capacity (layout: always required; rings: with sub-groups).
        Malform::OutputNull(w) => {
            let w = usize::from(w) % 7;
            if w == 5 || lens[w] > 0 || (w == 6 && subgroups) {
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
