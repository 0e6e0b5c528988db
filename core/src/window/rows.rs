//! The window's storage: one slab of `u64` words the caller lends, carved into rows on every
//! call ([`Layout`], [`Rows`]).

use zerocopy::{FromBytes, IntoBytes};

use super::WindowParams;

use super::cost::LOAD_WORDS;

/// [`Rows::meta`] word: sequences of the batch.
pub(super) const COUNT: usize = 0;
/// Position of its first sample.
pub(super) const FIRST: usize = 1;
/// Its non-outliers' [`Load`](super::cost::Load) (what runs now whatever the decision).
pub(super) const BASE: usize = 2;
/// All its sequences' load (a later batch, as the current step assumes it runs).
pub(super) const ALL: usize = BASE + LOAD_WORDS;
/// Per-batch words kept in [`Rows::meta`], per slot.
pub(super) const META: usize = ALL + LOAD_WORDS;

/// Bit 31 of a stored length marks an outlier (lengths are below 2^31).
pub(super) const OUTLIER_BIT: u32 = 1 << 31;

/// Element counts of the rows (`s` slots of `b` sequences, a queue of `q`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) s: usize,
    pub(super) b: usize,
    pub(super) q: usize,
}

impl Layout {
    pub(super) fn of(p: &WindowParams) -> Layout {
        Layout {
            s: p.max_delay as usize + 1,
            b: p.batch_capacity as usize,
            q: p.queue_capacity(),
        }
    }

    /// Words of the `u64` rows, in carving order.
    fn wide(&self) -> [usize; 10] {
        let (s, b, q) = (self.s, self.b, self.q);
        [
            s * b, // alone
            s * b, // work
            META * s,
            q,              // q_pos
            q,              // q_origin
            q,              // q_len
            q,              // q_alone
            q,              // q_work
            LOAD_WORDS * s, // acc
            b + q,          // out_pos
        ]
    }

    /// Elements of the `u32` rows, in carving order.
    fn narrow(&self) -> [usize; 4] {
        let (s, b, q) = (self.s, self.b, self.q);
        [s * b, q + b, q + b, b + q] // lens, cand, dec, out_len
    }

    /// Words of the whole slab.
    pub(super) fn words(&self) -> usize {
        let wide: usize = self.wide().iter().sum();
        let narrow: usize = self.narrow().iter().sum();
        wide + narrow.div_ceil(2)
    }
}

/// The rows of one call.
pub(super) struct Rows<'a> {
    /// Per slot and sequence (`slot * b + i`): alone and work, ps; length with
    /// [`OUTLIER_BIT`].
    pub(super) alone: &'a mut [u64],
    pub(super) work: &'a mut [u64],
    pub(super) lens: &'a mut [u32],
    /// Per slot, [`META`] words (`slot * META + COUNT`, ...).
    pub(super) meta: &'a mut [u64],
    /// The queue, in position order: position, origin step, length, alone, work.
    pub(super) q_pos: &'a mut [u64],
    pub(super) q_origin: &'a mut [u64],
    pub(super) q_len: &'a mut [u64],
    pub(super) q_alone: &'a mut [u64],
    pub(super) q_work: &'a mut [u64],
    /// Per slot, during a step: its load with the candidates sent there so far
    /// ([`LOAD_WORDS`] words each).
    pub(super) acc: &'a mut [u64],
    /// A step's candidates (queue entries, then the current batch's outliers as
    /// `q + index`) and their decisions (0: now, else the slot), by candidate id.
    pub(super) cand: &'a mut [u32],
    pub(super) dec: &'a mut [u32],
    /// The last step's samples: positions and lengths.
    pub(super) out_pos: &'a mut [u64],
    pub(super) out_len: &'a mut [u32],
}

/// Carves `words` (at least [`Layout::words`] long: checked by the caller) into [`Rows`];
/// `None` when it is too short.
pub(super) fn carve<'a>(lay: &Layout, words: &'a mut [u64]) -> Option<Rows<'a>> {
    let words = words.get_mut(..lay.words())?;
    let w = lay.wide();
    let (alone, rest) = words.split_at_mut(w[0]);
    let (work, rest) = rest.split_at_mut(w[1]);
    let (meta, rest) = rest.split_at_mut(w[2]);
    let (q_pos, rest) = rest.split_at_mut(w[3]);
    let (q_origin, rest) = rest.split_at_mut(w[4]);
    let (q_len, rest) = rest.split_at_mut(w[5]);
    let (q_alone, rest) = rest.split_at_mut(w[6]);
    let (q_work, rest) = rest.split_at_mut(w[7]);
    let (acc, rest) = rest.split_at_mut(w[8]);
    let (out_pos, rest) = rest.split_at_mut(w[9]);
    let n = lay.narrow();
    let bytes = rest.as_mut_bytes();
    let (lens, bytes) = bytes.split_at_mut(n[0] * 4);
    let (cand, bytes) = bytes.split_at_mut(n[1] * 4);
    let (dec, bytes) = bytes.split_at_mut(n[2] * 4);
    let (out_len, _) = bytes.split_at_mut(n[3] * 4);
    Some(Rows {
        alone,
        work,
        lens: <[u32]>::mut_from_bytes(lens).ok()?,
        meta,
        q_pos,
        q_origin,
        q_len,
        q_alone,
        q_work,
        acc,
        cand: <[u32]>::mut_from_bytes(cand).ok()?,
        dec: <[u32]>::mut_from_bytes(dec).ok()?,
        out_pos,
        out_len: <[u32]>::mut_from_bytes(out_len).ok()?,
    })
}

/// Queue entry `i` (position, origin step, length) read from `words` without carving; `None`
/// past the slab.
pub(super) fn queued(lay: &Layout, words: &[u64], i: usize) -> Option<(u64, u64, u64)> {
    let w = lay.wide();
    let at = w[0] + w[1] + w[2] + i;
    Some((
        *words.get(at)?,
        *words.get(at + w[3])?,
        *words.get(at + w[3] + w[4])?,
    ))
}
