//! Sub-group geometry, written once: a [`CpGroup`] is consecutive CP ranks that hold one
//! sequence; a sequence may be sharded over the whole CP group or over an aligned sub-group
//! of `g` ranks (`g` a power of two, `2 <= g < N`, `g` dividing the CP size `N`, the first
//! rank a multiple of `g`: Megatron's hybrid-CP convention). Also the placement decision of
//! one sequence inside a micro-batch (the crate-internal `Decision`) and its compact code for
//! workspace rows.

/// Sub-group sizes a rank can belong to: `2, 4, ..., 128` (a sub-group is smaller than the
/// CP group, which has at most 256 ranks); level `l` holds groups of `2^(l+1)` ranks.
pub const GROUP_LEVELS: usize = 7;

/// Consecutive CP ranks `first..first + size` that hold one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CpGroup {
    /// The first rank.
    pub first: u32,
    /// How many ranks (1: a local sequence).
    pub size: u32,
}

impl CpGroup {
    /// The whole CP group of `cp` ranks.
    #[inline(always)]
    pub const fn whole(cp: u32) -> CpGroup {
        CpGroup { first: 0, size: cp }
    }

    /// The size of the sub-groups of level `l` ([`GROUP_LEVELS`]): `2^(l+1)` ranks.
    #[inline(always)]
    pub const fn level_size(l: usize) -> u32 {
        2u32 << l
    }

    /// The level of sub-groups of `size` ranks (`size = 2^(level+1)`); meaningful for a
    /// power of two of at least 2.
    #[inline(always)]
    pub const fn level_of(size: u32) -> usize {
        (size.trailing_zeros() as usize).wrapping_sub(1)
    }

    /// This sub-group's level ([`CpGroup::level_of`] its size).
    #[inline(always)]
    pub const fn level(&self) -> usize {
        CpGroup::level_of(self.size)
    }

    /// The aligned group of `size` ranks (a power of two) that holds rank `rank`.
    #[inline(always)]
    pub const fn around(rank: u32, size: u32) -> CpGroup {
        CpGroup {
            first: rank & !(size.wrapping_sub(1)),
            size,
        }
    }

    /// The sub-group sizes `g < cp` a sequence may be sharded over in a CP group of `cp`
    /// ranks (powers of two dividing `cp`), smallest first.
    #[inline]
    pub fn sub_sizes(cp: u32) -> impl DoubleEndedIterator<Item = u32> + Clone {
        (0..GROUP_LEVELS)
            .map(CpGroup::level_size)
            .filter(move |&g| g < cp && cp.is_multiple_of(g))
    }

    /// The aligned groups of `size` ranks in a CP group of `cp` ranks, by first rank.
    #[inline]
    pub fn aligned(cp: u32, size: u32) -> impl Iterator<Item = CpGroup> + Clone {
        let size = size.max(1);
        (0..cp / size).map(move |b| CpGroup {
            first: b * size,
            size,
        })
    }

    /// Whether rank `r` is in the group.
    #[inline]
    pub fn contains(&self, r: u32) -> bool {
        r >= self.first && r - self.first < self.size
    }

    /// Whether a sequence may be sharded over this group in a CP group of `cp` ranks: the
    /// whole group, or an aligned block of `g` ranks with `g` a power of two, `2 <= g < cp`,
    /// `g` dividing `cp` and `first` a multiple of `g` (Megatron's hybrid-CP convention).
    pub fn is_valid_shard(&self, cp: u32) -> bool {
        let g = self.size;
        if g == cp {
            return self.first == 0;
        }
        g >= 2
            && g < cp
            && g.is_power_of_two()
            && cp.is_multiple_of(g)
            && self.first.is_multiple_of(g)
            && self.first + g <= cp
    }

    /// Whether a chunked sequence may run on this group in a CP group of `cp` ranks: one GPU
    /// (`size` 1, `first < cp`), the whole group, or a valid sub-group
    /// ([`CpGroup::is_valid_shard`]).
    pub fn is_valid_chunk_group(&self, cp: u32) -> bool {
        if self.size == 1 {
            return self.first < cp;
        }
        self.is_valid_shard(cp)
    }

    /// Where this sub-group's ring sits among all the sub-group rings of a CP group of `cp`
    /// ranks (`cp - 1` slots at most): groups of `g` ranks follow those of every smaller size
    /// (`cp - 2cp/g` of them), by first rank. Meaningful for a valid sub-group.
    #[inline(always)]
    pub(crate) fn ring_index(&self, cp: u32) -> usize {
        let (n, g) = (cp as usize, self.size.max(1) as usize);
        n - 2 * n / g + self.first as usize / g
    }
}

/// Where one sequence of a micro-batch goes, as the CP-rank state machine
/// ([`kernel::ranks`](crate::kernel)) and the policies decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not placed yet.
    Unset,
    /// Whole on this CP rank.
    Local(u32),
    /// Sharded over the whole CP group.
    Whole,
    /// Sharded over this aligned sub-group (a valid one, [`CpGroup::is_valid_shard`]).
    Sub(CpGroup),
}

/// [`Decision::Unset`]'s code.
const UNSET_CODE: i32 = i32::MIN;
/// [`Decision::Whole`]'s code: `Placement::cp_rank` of a sequence sharded over the whole
/// group ([`SHARDED`](crate::plan::SHARDED)).
const WHOLE_CODE: i32 = -1;

impl Decision {
    /// The decision as one `i32` (in workspace rows as its bits): a local rank is itself
    /// (`>= 0`), the whole group `-1` (as `Placement::cp_rank`), a sub-group of `2^l` ranks
    /// from `first` is `-2 - (first | l << 9)` (`first < 512`, `l < 8`), unset is `i32::MIN`.
    #[inline(always)]
    pub(crate) fn to_code(self) -> i32 {
        match self {
            Decision::Unset => UNSET_CODE,
            Decision::Local(r) => r as i32,
            Decision::Whole => WHOLE_CODE,
            Decision::Sub(g) => {
                let l = g.size.trailing_zeros() as i32;
                -2 - ((g.first as i32 & 0x1FF) | (l << 9))
            }
        }
    }

    /// The decision a code made by [`Decision::to_code`] stands for.
    #[inline(always)]
    pub(crate) fn from_code(code: i32) -> Decision {
        if code >= 0 {
            Decision::Local(code as u32)
        } else if code == WHOLE_CODE {
            Decision::Whole
        } else {
            Decision::sub_of_code(code).map_or(Decision::Unset, Decision::Sub)
        }
    }

    /// The sub-group of a code if it is a [`Decision::Sub`]'s, else `None` (one comparison
    /// for the other decisions, whose codes are themselves: a rank or `-1`).
    #[inline(always)]
    pub(crate) fn sub_of_code(code: i32) -> Option<CpGroup> {
        if code >= WHOLE_CODE || code == UNSET_CODE {
            return None;
        }
        let c = -2 - code;
        Some(CpGroup {
            first: (c & 0x1FF) as u32,
            size: 1 << ((c >> 9) & 0x7),
        })
    }

    /// [`Decision::to_code`] as the bits of a `u32` workspace word.
    #[inline(always)]
    pub(crate) fn to_word(self) -> u32 {
        self.to_code() as u32
    }

    /// The decision of a workspace word written by [`Decision::to_word`].
    #[inline(always)]
    pub(crate) fn from_word(word: u32) -> Decision {
        Decision::from_code(word as i32)
    }

    /// Whether a word written by [`Decision::to_word`] is [`Decision::Local`]`(r)`, without
    /// decoding it (every other decision's code is negative).
    #[inline(always)]
    pub(crate) fn word_is_local_on(word: u32, r: usize) -> bool {
        word as usize == r && word <= i32::MAX as u32
    }

    /// Whether the sequence is whole on rank `r`.
    #[inline(always)]
    pub(crate) fn is_local_on(self, r: usize) -> bool {
        matches!(self, Decision::Local(x) if x as usize == r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_decision_round_trips_through_its_code() {
        assert_eq!(
            Decision::from_code(Decision::Unset.to_code()),
            Decision::Unset
        );
        assert_eq!(Decision::Whole.to_code(), crate::plan::SHARDED);
        for r in [0u32, 1, 7, 255] {
            let d = Decision::Local(r);
            assert_eq!(Decision::from_word(d.to_word()), d);
        }
        for cp in 1..=256u32 {
            for g in CpGroup::sub_sizes(cp) {
                for group in CpGroup::aligned(cp, g) {
                    assert!(group.is_valid_shard(cp));
                    let d = Decision::Sub(group);
                    assert!(d.to_code() < -1 && d.to_code() != i32::MIN);
                    assert_eq!(Decision::from_code(d.to_code()), d);
                }
            }
        }
    }

    #[test]
    fn ring_indices_are_dense_and_distinct() {
        for cp in [4u32, 8, 16, 64, 256] {
            let mut seen = std::vec![false; cp as usize];
            for g in CpGroup::sub_sizes(cp) {
                for group in CpGroup::aligned(cp, g) {
                    assert_eq!(CpGroup::around(group.first + g - 1, g), group);
                    assert_eq!(CpGroup::level_size(group.level()), g);
                    let at = group.ring_index(cp);
                    assert!(!seen[at], "{cp} {group:?}");
                    seen[at] = true;
                }
            }
            assert_eq!(seen.iter().filter(|&&s| s).count(), cp as usize - 2);
        }
    }
}
