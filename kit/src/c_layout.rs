//! `OwnedCLayout`: the output buffers of `skrull_layout_fill()` on the heap, as a C caller
//! holds them, pre-filled with guard values so a test sees every element the library wrote
//! (and every one it must not have).

use core::ptr::null_mut;

use skrull::{
    skrull_layout, skrull_layout_buffers, skrull_layout_capacity, skrull_layout_ring, skrull_span,
};

/// The guard every `cu_seqlens`, position and gather element starts as.
pub const GUARD_INT: i32 = -7;
/// The guard every span starts as.
pub const GUARD_SPAN: skrull_span = skrull_span {
    seq: 0xDEAD_BEEF,
    chunk: -7,
    offset: 0xDEAD_BEEF,
    start: 0xDEAD_BEEF,
    len: 0xDEAD_BEEF,
    pad: 0xDEAD_BEEF,
};
/// The guard the ring count starts as.
pub const GUARD_RINGS_COUNT: u32 = 0xDEAD;
/// The byte the workspace starts as.
pub const WORKSPACE_FILL: u8 = 0xA5;

/// One GPU's layout outputs and workspace, sized by a [`skrull_layout_capacity`].
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedCLayout {
    /// `spans`.
    pub spans: Vec<skrull_span>,
    /// `local_cu_seqlens`.
    pub local_cu: Vec<i32>,
    /// `local_cu_seqlens_padded` (empty: not passed).
    pub local_cu_padded: Vec<i32>,
    /// `sharded_cu_seqlens`.
    pub sharded_cu: Vec<i32>,
    /// `sharded_cu_seqlens_padded`.
    pub sharded_cu_padded: Vec<i32>,
    /// `rank_cu_seqlens`.
    pub rank_cu: Vec<i32>,
    /// `positions`.
    pub positions: Vec<i32>,
    /// `gather_index` (empty: not passed).
    pub gather: Vec<i64>,
    /// `rings` (empty: NULL).
    pub rings: Vec<skrull_layout_ring>,
    /// `*rings_count`, passed only when [`OwnedCLayout::with_rings`] asked for rings.
    pub rings_count: u32,
    /// Whether `rings` and `rings_count` are passed.
    pub ring_outputs: bool,
    /// The `skrull_layout` header.
    pub layout: skrull_layout,
    /// The workspace (passed to the call separately, not in [`OwnedCLayout::buffers`]).
    pub workspace: Vec<u8>,
}

impl OwnedCLayout {
    /// Every output of `cap`'s capacities (`gather_index` and `local_cu_seqlens_padded`
    /// included, no rings), filled with the guards above.
    pub fn new(cap: skrull_layout_capacity) -> OwnedCLayout {
        OwnedCLayout {
            spans: vec![GUARD_SPAN; cap.spans],
            local_cu: vec![GUARD_INT; cap.local_cu_seqlens],
            local_cu_padded: vec![GUARD_INT; cap.local_cu_seqlens],
            sharded_cu: vec![GUARD_INT; cap.sharded_cu_seqlens],
            sharded_cu_padded: vec![GUARD_INT; cap.sharded_cu_seqlens],
            rank_cu: vec![GUARD_INT; cap.sharded_cu_seqlens],
            positions: vec![GUARD_INT; cap.positions],
            gather: vec![i64::from(GUARD_INT); cap.positions],
            rings: Vec::new(),
            rings_count: GUARD_RINGS_COUNT,
            ring_outputs: false,
            layout: skrull_layout {
                dp_rank: 0xDEAD_BEEF,
                _reserved: 0xDEAD_BEEF,
                global_tokens: 0xDEAD_BEEF,
                ..skrull_layout::default()
            },
            workspace: vec![WORKSPACE_FILL; cap.workspace_bytes],
        }
    }

    /// The same with `rings` ring entries and the ring count passed (`rings = 0`: a NULL
    /// `rings` array with a count pointer).
    pub fn with_rings(mut self, rings: usize) -> OwnedCLayout {
        self.rings = vec![skrull_layout_ring::default(); rings];
        self.ring_outputs = true;
        self
    }

    /// The same without the optional `gather_index` and `local_cu_seqlens_padded` outputs
    /// (passed as NULL).
    pub fn without_optional(mut self) -> OwnedCLayout {
        self.gather = Vec::new();
        self.local_cu_padded = Vec::new();
        self
    }

    /// Everything but the workspace (whose contents are unspecified after a call), for
    /// comparing outputs.
    pub fn outputs(&self) -> OwnedCLayout {
        OwnedCLayout {
            workspace: Vec::new(),
            ..self.clone()
        }
    }

    /// The `skrull_layout_buffers` that point at these outputs (an empty optional array is
    /// NULL). The pointers live as long as `self` is neither moved nor resized.
    pub fn buffers(&mut self) -> skrull_layout_buffers {
        fn or_null<T>(v: &mut [T]) -> *mut T {
            if v.is_empty() {
                null_mut()
            } else {
                v.as_mut_ptr()
            }
        }
        let (rings, rings_count) = if self.ring_outputs {
            (or_null(&mut self.rings), &raw mut self.rings_count)
        } else {
            (null_mut(), null_mut())
        };
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
            gather_index: or_null(&mut self.gather),
            gather_index_len: self.gather.len(),
            local_cu_seqlens_padded: or_null(&mut self.local_cu_padded),
            local_cu_seqlens_padded_len: self.local_cu_padded.len(),
            rings,
            rings_len: if self.ring_outputs {
                self.rings.len()
            } else {
                0
            },
            rings_count,
            ..skrull_layout_buffers::EMPTY
        }
    }
}
