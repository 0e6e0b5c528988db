//! The caller's workspace bytes: their size for a batch, and carving them into the core's
//! workspace slab plus a staging copy of the plan (outputs are copied out only after the
//! scheduler succeeded).

use core::marker::PhantomData;
use core::mem::{align_of, size_of};

use skrull_core::config::{MAX_CP, MAX_DP, MAX_SEQS};
use skrull_core::{MicroBatch, Placement, Word, WorkspaceSizes};

use crate::boundary::guard;
use crate::plan::skrull_sizes;
use crate::status::skrull_status;

/// The strictest alignment of any workspace region (that of `u128`).
const BASE_ALIGN: usize = align_of::<u128>();

/// Byte offsets of every region of a workspace, relative to its aligned base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    n: usize,
    /// Words of the core's workspace slab.
    words: usize,
    dp: usize,
    cp: usize,
    /// Bytes from the aligned base to the end of the last region.
    end: usize,
}

impl Layout {
    /// The layout for `n` sequences on `dp x cp` GPUs; `None` when out of the accepted ranges.
    pub(crate) fn new(n: usize, dp: u32, cp: u32) -> Option<Layout> {
        if n > MAX_SEQS || dp == 0 || dp > MAX_DP || cp == 0 || cp > MAX_CP {
            return None;
        }
        let (dp, cp) = (dp as usize, cp as usize);
        let mut c = Cursor(0);
        let words = WorkspaceSizes::for_any_policy_on(n, dp as u32).words;
        c.skip::<Word>(words); // the core's slab
        c.skip::<Placement>(n);
        c.skip::<MicroBatch>(n);
        c.skip::<u32>(n); // members
        c.skip::<u32>(n * cp); // rank_tokens
        c.skip::<u32>(dp); // micro_batches_per_dp
        Some(Layout {
            n,
            words,
            dp,
            cp,
            end: c.0,
        })
    }

    /// Bytes a caller must lend: the regions plus slack to align any base address.
    pub(crate) fn bytes(&self) -> usize {
        self.end + (BASE_ALIGN - 1)
    }
}

/// Offsets in the layout arithmetic (all bounded: at most 2^16 x 256 x 16 bytes).
struct Cursor(usize);

impl Cursor {
    fn skip<T>(&mut self, count: usize) {
        self.0 = self.0.next_multiple_of(align_of::<T>()) + count * size_of::<T>();
    }
}

/// Hands out disjoint, initialised, typed slices of a caller's byte buffer in order.
pub(crate) struct Carver<'a> {
    base: *mut u8,
    off: usize,
    len: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> Carver<'a> {
    /// Aligns `ptr` up to the workspace alignment.
    ///
    /// # Errors
    /// `WorkspaceTooSmall` when fewer than `needed` bytes remain after aligning.
    ///
    /// # Safety
    /// `ptr` must be non-null and valid for reading and writing `len` bytes (initialised or
    /// not) for `'a`, and nothing else may access them during `'a`.
    pub(crate) unsafe fn new(
        ptr: *mut u8,
        len: usize,
        needed: usize,
    ) -> Result<Self, skrull_status> {
        let pad = ptr.align_offset(BASE_ALIGN);
        match len.checked_sub(pad) {
            Some(room) if pad < BASE_ALIGN && room >= needed => Ok(Carver {
                // SAFETY: `pad <= len`, so the result stays inside the caller's buffer.
                base: unsafe { ptr.add(pad) },
                off: 0,
                len: room,
                _borrow: PhantomData,
            }),
            _ => Err(skrull_status::WorkspaceTooSmall),
        }
    }

    /// The next `count` elements of `T`, each set to `T::default()`.
    ///
    /// # Errors
    /// `WorkspaceTooSmall` if the buffer is exhausted (not reachable after a [`Layout`] size
    /// check).
    pub(crate) fn take<T: Copy + Default>(
        &mut self,
        count: usize,
    ) -> Result<&'a mut [T], skrull_status> {
        let start = self.off.next_multiple_of(align_of::<T>());
        let end = count
            .checked_mul(size_of::<T>())
            .and_then(|b| b.checked_add(start))
            .filter(|&e| e <= self.len)
            .ok_or(skrull_status::WorkspaceTooSmall)?;
        self.off = end;
        // SAFETY: `base` is aligned to BASE_ALIGN >= align_of::<T>() and `start` is a multiple
        // of align_of::<T>(), so `p` is aligned; `start..end` lies inside the caller's buffer
        // (checked against `len`) and is disjoint from every earlier region (offsets only
        // grow); each element is initialised before the slice is formed; the buffer is
        // exclusively ours for 'a (constructor contract).
        unsafe {
            let p = self.base.add(start).cast::<T>();
            for i in 0..count {
                p.add(i).write(T::default());
            }
            Ok(core::slice::from_raw_parts_mut(p, count))
        }
    }
}

/// Every region of a carved workspace.
pub(crate) struct Regions<'a> {
    pub(crate) slab: &'a mut [Word],
    pub(crate) placements: &'a mut [Placement],
    pub(crate) micro_batches: &'a mut [MicroBatch],
    pub(crate) members: &'a mut [u32],
    pub(crate) rank_tokens: &'a mut [u32],
    pub(crate) micro_batches_per_dp: &'a mut [u32],
}

impl Layout {
    /// Carves `c` (built for at least [`Layout::end`] bytes) into the regions, in layout order.
    ///
    /// # Errors
    /// `WorkspaceTooSmall` if `c` is shorter than the layout.
    pub(crate) fn carve<'a>(&self, c: &mut Carver<'a>) -> Result<Regions<'a>, skrull_status> {
        let (n, dp, cp) = (self.n, self.dp, self.cp);
        Ok(Regions {
            slab: c.take(self.words)?,
            placements: c.take(n)?,
            micro_batches: c.take(n)?,
            members: c.take(n)?,
            rank_tokens: c.take(n * cp)?,
            micro_batches_per_dp: c.take(dp)?,
        })
    }

    /// Bytes past the aligned base the regions use.
    pub(crate) fn end(&self) -> usize {
        self.end
    }
}

/// Returns the workspace bytes `skrull_schedule()` needs for `n` sequences on a `dp x cp`
/// layout (any alignment of the buffer is accepted: the size includes the slack to align it).
///
/// The same size is enough for `skrull_dacp_place()` with `n` sequences. Returns 0 when `n`,
/// `dp` or `cp` is out of range (see `skrull_plan_sizes()` for the status that says which).
/// The size grows linearly: about `(96 + 4 cp) n + 28 dp` bytes (32 KiB for 256 sequences
/// on DP 4 x CP 8); it fits every policy (`balanced` keeps per-sequence costs in it).
///
/// # Safety
/// None: any values are accepted. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_workspace_size(n: usize, dp: u32, cp: u32) -> usize {
    guard(|| Layout::new(n, dp, cp).map_or(0, |l| l.bytes()))
}

/// Fills `*out` with every buffer size `skrull_schedule()` needs for `n` sequences on a
/// `dp x cp` layout.
///
/// Returns `SKRULL_STATUS_NULL_ARG` for a NULL `out`, `SKRULL_STATUS_TOO_MANY_SEQUENCES`,
/// `SKRULL_STATUS_INVALID_DP` or `SKRULL_STATUS_INVALID_CP` for out-of-range values; on error
/// nothing is written.
///
/// # Safety
/// Unless NULL, `out` must be valid for writing one `skrull_sizes` and aligned for it. Safe to
/// call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_plan_sizes(
    n: usize,
    dp: u32,
    cp: u32,
    out: *mut skrull_sizes,
) -> skrull_status {
    guard(|| {
        if out.is_null() {
            return skrull_status::NullArg;
        }
        if !out.is_aligned() {
            return skrull_status::InvalidArg;
        }
        if dp == 0 || dp > MAX_DP {
            return skrull_status::InvalidDp;
        }
        if cp == 0 || cp > MAX_CP {
            return skrull_status::InvalidCp;
        }
        let Some(layout) = Layout::new(n, dp, cp) else {
            return skrull_status::TooManySequences;
        };
        let sizes = skrull_sizes {
            workspace_bytes: layout.bytes(),
            placements: n,
            micro_batches: n,
            members: n,
            rank_tokens: n * cp as usize,
            micro_batches_per_dp: dp as usize,
        };
        // SAFETY: non-null and aligned (checked), writable (caller contract).
        unsafe { out.write(sizes) };
        skrull_status::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_covers_every_region_at_every_misalignment() {
        for (n, dp, cp) in [(0, 1, 1), (1, 1, 1), (10, 2, 4), (37, 3, 7), (5, 8, 256)] {
            let layout = Layout::new(n, dp, cp).unwrap();
            let bytes = layout.bytes();
            // SAFETY: only integers are read and written.
            assert_eq!(unsafe { skrull_workspace_size(n, dp, cp) }, bytes);
            let mut backing = vec![0u128; bytes / 16 + 2];
            for shift in 0..16 {
                let ptr = backing.as_mut_ptr().cast::<u8>().wrapping_add(shift);
                // SAFETY: `bytes` bytes from `ptr` lie inside `backing` (two spare u128).
                let mut c = unsafe { Carver::new(ptr, bytes, layout.end()) }.unwrap();
                let r = layout.carve(&mut c).unwrap();
                assert_eq!(r.rank_tokens.len(), n * cp as usize);
                assert_eq!(r.micro_batches_per_dp.len(), dp as usize);
                let words = WorkspaceSizes::for_any_policy_on(n, dp).words;
                assert_eq!(r.slab.len(), words);
                assert!(r.slab.as_ptr().is_aligned());
                // One byte less must not fit at the worst alignment.
                if ptr.align_offset(BASE_ALIGN) == BASE_ALIGN - 1 {
                    // SAFETY: as above.
                    assert!(unsafe { Carver::new(ptr, bytes - 1, layout.end()) }.is_err());
                }
            }
        }
    }

    #[test]
    fn out_of_range_layouts_have_no_size() {
        // SAFETY: only integers are read.
        unsafe {
            assert_eq!(skrull_workspace_size(MAX_SEQS + 1, 1, 1), 0);
            assert_eq!(skrull_workspace_size(1, 0, 1), 0);
            assert_eq!(skrull_workspace_size(1, 1, MAX_CP + 1), 0);
            assert!(skrull_workspace_size(MAX_SEQS, MAX_DP, MAX_CP) > 0);
        }
    }

    #[test]
    fn plan_sizes_statuses() {
        let mut s = skrull_sizes::default();
        // SAFETY: `s` is a live, aligned skrull_sizes.
        unsafe {
            assert_eq!(skrull_plan_sizes(10, 2, 4, &mut s), skrull_status::Ok);
            assert_eq!(s.rank_tokens, 40);
            assert_eq!(s.micro_batches_per_dp, 2);
            let before = s;
            assert_eq!(
                skrull_plan_sizes(10, 0, 4, &mut s),
                skrull_status::InvalidDp
            );
            assert_eq!(
                skrull_plan_sizes(10, 2, 0, &mut s),
                skrull_status::InvalidCp
            );
            assert_eq!(
                skrull_plan_sizes(MAX_SEQS + 1, 2, 4, &mut s),
                skrull_status::TooManySequences
            );
            assert_eq!(s, before);
            assert_eq!(
                skrull_plan_sizes(1, 1, 1, core::ptr::null_mut()),
                skrull_status::NullArg
            );
        }
    }
}
