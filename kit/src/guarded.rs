//! Guarded buffers: `len` elements between [`GUARD`] guard elements on each side, everything
//! set to a fill value first, so a test can tell that a call wrote nothing outside its buffers,
//! nothing past what it reports, and nothing at all on an error. Also the fill values the tests
//! and fuzz harnesses use for plan records (values no plan contains).

use core::fmt::Debug;

use skrull_core::{MicroBatch, Placement};

/// Guard elements on each side of every buffer.
pub const GUARD: usize = 8;

/// `len` elements with [`GUARD`] guard elements on each side; everything starts as `fill` (or
/// the given contents, for inputs).
#[derive(Debug, Clone)]
pub struct Guarded<T: Copy + PartialEq + Debug> {
    v: Vec<T>,
    len: usize,
    fill: T,
}

impl<T: Copy + PartialEq + Debug> Guarded<T> {
    /// `len` elements and the guards, all `fill`.
    pub fn new(len: usize, fill: T) -> Self {
        Guarded {
            v: vec![fill; len + 2 * GUARD],
            len,
            fill,
        }
    }

    /// The elements `data` between guards of `fill`.
    pub fn with(data: &[T], fill: T) -> Self {
        let mut g = Guarded::new(data.len(), fill);
        g.v[GUARD..GUARD + data.len()].copy_from_slice(data);
        g
    }

    /// A pointer to the first element (past the front guard).
    pub fn ptr(&mut self) -> *mut T {
        self.v[GUARD..].as_mut_ptr()
    }

    /// The `len` elements.
    pub fn body(&self) -> &[T] {
        &self.v[GUARD..GUARD + self.len]
    }

    /// The `len` elements, mutable.
    pub fn body_mut(&mut self) -> &mut [T] {
        &mut self.v[GUARD..GUARD + self.len]
    }

    /// Sets everything, guards included, back to the fill value.
    pub fn reset(&mut self) {
        let fill = self.fill;
        self.v.iter_mut().for_each(|x| *x = fill);
    }

    /// Asserts the guards are intact and nothing was written from element `from` on; `what`
    /// names the buffer in the message.
    pub fn untouched_from(&self, from: usize, what: &str) {
        let fill = self.fill;
        assert!(
            self.v[..GUARD].iter().all(|&x| x == fill),
            "{what}: front guard written"
        );
        assert!(
            self.v[GUARD + from.min(self.len)..]
                .iter()
                .all(|&x| x == fill),
            "{what}: written from element {from} on (or the back guard)"
        );
    }

    /// Asserts the guards are intact (for inputs and workspaces, whose body may differ).
    pub fn guards_intact(&self, what: &str) {
        self.untouched_from(self.len, what);
    }
}

/// The fill word of `u32` output buffers.
pub const FILL: u32 = 0xDEAD_BEEF;

/// The fill value of a Rust [`Placement`].
pub const FILL_RP: Placement = Placement {
    dp_rank: FILL,
    micro_batch: FILL,
    cp_rank: -7,
    cp_first: 0xBEEF,
    cp_size: 0xBEEF,
};

/// The fill value of a Rust [`MicroBatch`].
pub const FILL_RMB: MicroBatch = MicroBatch {
    dp_rank: FILL,
    index: FILL,
    first: FILL,
    count: FILL,
};

#[cfg(feature = "ffi")]
pub use c_fill::{FILL_E, FILL_G, FILL_MB, FILL_P, FILL_R, FILL_S};

/// The fill values of the C plan records.
#[cfg(feature = "ffi")]
mod c_fill {
    use skrull::{
        skrull_cp_group, skrull_error_info, skrull_layout_ring, skrull_micro_batch,
        skrull_placement, skrull_summary,
    };

    use super::FILL;

    /// The fill value of a C `skrull_placement`.
    pub const FILL_P: skrull_placement = skrull_placement {
        dp_rank: FILL,
        micro_batch: FILL,
        cp_rank: -7,
        tokens_per_gpu: FILL,
    };

    /// The fill value of a C `skrull_micro_batch`.
    pub const FILL_MB: skrull_micro_batch = skrull_micro_batch {
        dp_rank: FILL,
        index: FILL,
        first: FILL,
        count: FILL,
    };

    /// The fill value of a C `skrull_summary`.
    pub const FILL_S: skrull_summary = skrull_summary {
        total_tokens: 0xDEAD_BEEF_DEAD_BEEF,
        sequences: FILL,
        micro_batches: FILL,
        sharded: FILL,
        rollbacks: FILL,
        peak_rank_tokens: FILL,
        _reserved: FILL,
    };

    /// The fill value of a C `skrull_cp_group`.
    pub const FILL_G: skrull_cp_group = skrull_cp_group {
        first: FILL,
        size: FILL,
    };

    /// The fill value of a C `skrull_layout_ring`.
    pub const FILL_R: skrull_layout_ring = skrull_layout_ring {
        first: FILL,
        size: FILL,
        offset: FILL,
        seqs: FILL,
    };

    /// The fill value of a C `skrull_error_info`.
    pub const FILL_E: skrull_error_info = skrull_error_info {
        status: FILL,
        field: FILL,
        index: -7,
        value: 0xDEAD_BEEF_DEAD_BEEF,
        limit: 0xDEAD_BEEF_DEAD_BEEF,
    };
}
