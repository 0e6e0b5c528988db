//! The CP-rank state machine that every placement inside one micro-batch runs: each sequence
//! goes whole to the rank a [`Ledger`]'s rule picks, else sharded over the whole CP group if
//! every rank has room for its share, else a local sequence of the fullest rank is sharded to
//! free memory (a rollback) and the sequence is tried again. A final recount from the
//! decisions alone is authoritative.
//!
//! The rule is the only difference between the policies: DACP picks the rank with the least
//! FLOPs load, then the one with the most room ([`policy::dacp`](crate::policy::dacp));
//! Algorithm 4 (round-robin) the one with the most room; `balanced` the one whose estimated
//! time grows least ([`policy::balanced`](crate::policy::balanced)).
//!
//! Rollbacks are bounded: each turns one local sequence sharded for good, so a micro-batch of
//! `k` sequences takes at most `2k` steps.

use heapless::Vec as HVec;

use crate::config::budget::Budget;
use crate::config::cp_group::{CpGroup, Decision};
use crate::config::limits::MAX_CP;
use crate::config::options::Victim;

/// Where a placement routine reads lengths and records decisions, by position `k` in the
/// processing order.
pub(crate) trait Slots {
    /// Number of sequences.
    fn count(&self) -> usize;
    /// Length of the `k`-th sequence.
    fn len_at(&self, k: usize) -> u32;
    /// The `k`-th sequence (its index in the batch).
    fn seq_at(&self, k: usize) -> u32;
    /// Decision for the `k`-th sequence so far ([`Decision::Unset`] before it is placed).
    fn get(&self, k: usize) -> Decision;
    /// Records the decision for the `k`-th sequence.
    fn set(&mut self, k: usize, d: Decision);
    /// Whether the `k`-th sequence is whole on rank `r` (the rollback's victim search asks
    /// this of every placed sequence; slots that hold codes answer without decoding).
    #[inline(always)]
    fn is_local_on(&self, k: usize, r: usize) -> bool {
        self.get(k).is_local_on(r)
    }
}

/// The per-rank bookkeeping and the rank-choosing rule of one placement policy.
pub(crate) trait Ledger {
    /// Starts a micro-batch on `cp` ranks.
    fn reset(&mut self, cp: usize);
    /// The rank sequence `seq` goes to whole, among the ranks whose room is at least `need`
    /// (its local tokens); `None` when no rank takes it whole.
    fn pick(&self, seq: u32, room: &[i64], need: i64) -> Option<usize>;
    /// Sequence `seq` was placed whole on rank `r`.
    fn local(&mut self, r: usize, seq: u32, len: u32);
    /// Sequence `seq`, whole on rank `r`, is being sharded by a rollback.
    fn unlocal(&mut self, r: usize, seq: u32, len: u32);
    /// Sequence `seq` was sharded over every rank.
    fn shard(&mut self, seq: u32, len: u32);
    /// Whether the micro-batch may stop early, e.g. because it is already slower than a known
    /// alternative (checked after every local placement).
    fn abandon(&self, _r: usize) -> bool {
        false
    }
}

/// Why [`place`] stopped without a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A rollback found no local sequence on the fullest rank, or the recount found a rank
    /// above the budget.
    Failed {
        /// The rank that ran out of room.
        cp_rank: u32,
    },
    /// The ledger gave up ([`Ledger::abandon`]).
    Abandoned,
}

/// Remaining budget of every CP rank in one micro-batch (capacity [`MAX_CP`], built once and
/// reset per micro-batch, never moved while in use).
pub(crate) struct Rooms {
    room: HVec<i64, { MAX_CP as usize }>,
}

impl Rooms {
    /// No ranks yet: call [`Rooms::reset`].
    pub(crate) const fn new() -> Rooms {
        Rooms { room: HVec::new() }
    }

    /// Every one of `cp` ranks gets `bucket` tokens of room.
    pub(crate) fn reset(&mut self, cp: u32, bucket: u32) {
        let cp = cp.min(MAX_CP) as usize;
        if self.room.len() != cp {
            self.room.clear();
            // Capacity is MAX_CP: the resize cannot fail.
            let _ = self.room.resize(cp, 0);
        }
        self.room.fill(i64::from(bucket));
    }

    /// Room per rank.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[i64] {
        &self.room
    }

    /// The lowest-index rank with the least room, and that room.
    #[inline(always)]
    fn fullest(&self) -> (usize, i64) {
        let mut best = (0, i64::MAX);
        for (r, &x) in self.room.iter().enumerate() {
            if x < best.1 {
                best = (r, x);
            }
        }
        best
    }

    #[inline(always)]
    fn take(&mut self, r: usize, tokens: u32) {
        if let Some(x) = self.room.get_mut(r) {
            *x -= i64::from(tokens);
        }
    }

    #[inline(always)]
    fn give(&mut self, r: usize, tokens: u32) {
        if let Some(x) = self.room.get_mut(r) {
            *x += i64::from(tokens);
        }
    }

    /// Charges `tokens` to every rank of `group`.
    #[inline]
    pub(crate) fn take_group(&mut self, group: CpGroup, tokens: u32) {
        let ranks = self.room.iter_mut().skip(group.first as usize);
        for x in ranks.take(group.size as usize) {
            *x -= i64::from(tokens);
        }
    }

    #[inline(always)]
    fn take_all(&mut self, tokens: u32) {
        for x in self.room.iter_mut() {
            *x -= i64::from(tokens);
        }
    }
}

/// Lowest index of the least value.
#[inline(always)]
pub(crate) fn argmin<T: Copy + PartialOrd>(xs: &[T]) -> usize {
    let Some(&first) = xs.first() else { return 0 };
    let (mut best, mut bv) = (0, first);
    for (r, &x) in xs.iter().enumerate().skip(1) {
        if x < bv {
            best = r;
            bv = x;
        }
    }
    best
}

/// Lowest index of the greatest value.
#[inline(always)]
pub(crate) fn argmax(xs: &[i64]) -> usize {
    let Some(&first) = xs.first() else { return 0 };
    let (mut best, mut bv) = (0, first);
    for (r, &x) in xs.iter().enumerate().skip(1) {
        if x > bv {
            best = r;
            bv = x;
        }
    }
    best
}

/// Shards the first `s` sequences before the placement loop (a policy that decides some
/// shards up front): their shares are charged to every rank at once.
pub(crate) fn shard_first<S: Slots, L: Ledger>(
    slots: &mut S,
    s: usize,
    budget: &Budget,
    rooms: &mut Rooms,
    ledger: &mut L,
) {
    let mut shares = 0u64;
    for k in 0..s.min(slots.count()) {
        let len = slots.len_at(k);
        shares += u64::from(budget.share(len));
        ledger.shard(slots.seq_at(k), len);
        slots.set(k, Decision::Whole);
    }
    // At most 2^16 shares of < 2^32 each: the sum fits i64, and the room may go below zero
    // only as a rollback's would (the recount decides).
    for x in rooms.room.iter_mut() {
        *x -= shares as i64;
    }
}

/// Picks the rollback victim among the sequences placed so far (`0..placed`) that are local
/// on `rank`: the shortest (ties: the first placed) or the longest (ties: the last placed).
fn victim<S: Slots>(slots: &S, placed: usize, rank: usize, rule: Victim) -> Option<usize> {
    let mut best: Option<(usize, u32)> = None;
    for k in 0..placed {
        if !slots.is_local_on(k, rank) {
            continue;
        }
        let len = slots.len_at(k);
        let better = match (best, rule) {
            (None, _) => true,
            (Some((_, b)), Victim::Shortest) => len < b,
            (Some((_, b)), Victim::Longest) => len >= b,
        };
        if better {
            best = Some((k, len));
        }
    }
    best.map(|(k, _)| k)
}

/// Places the sequences `from..` of `slots`, in order (those before `from` must already be
/// decided and charged, e.g. by [`shard_first`]), and returns the number of rollbacks. `rooms`
/// must have been reset for this micro-batch, and `ledger` with it.
///
/// Every sequence must fit sharded (`budget.share(len) <= bucket`, checked up front by the
/// caller).
///
/// # Errors
/// [`Stop::Failed`] when a rollback finds no local sequence on the fullest rank or the final
/// recount finds a rank above the budget; [`Stop::Abandoned`] when the ledger gives up.
pub(crate) fn place<S: Slots, L: Ledger>(
    slots: &mut S,
    from: usize,
    budget: &Budget,
    victim_rule: Victim,
    rooms: &mut Rooms,
    ledger: &mut L,
) -> Result<u32, Stop> {
    let count = slots.count();
    let mut rollbacks = 0u32;
    let mut i = from;
    // Every decision for 0..i is set before it is read (the victim search and the recount
    // read only placed sequences), so no clearing pass is needed. Each pass either places
    // sequence i or turns one local sequence sharded for good: at most 2 x count passes.
    while i < count {
        let (seq, len) = (slots.seq_at(i), slots.len_at(i));
        let need = budget.local(len);
        if let Some(r) = ledger.pick(seq, rooms.as_slice(), i64::from(need)) {
            rooms.take(r, need);
            ledger.local(r, seq, len);
            slots.set(i, Decision::Local(r as u32));
            if ledger.abandon(r) {
                return Err(Stop::Abandoned);
            }
            i += 1;
            continue;
        }
        let (t, low) = rooms.fullest();
        let share = budget.share(len);
        if low >= i64::from(share) {
            rooms.take_all(share);
            ledger.shard(seq, len);
            slots.set(i, Decision::Whole);
            i += 1;
            continue;
        }
        // Roll back: shard one local sequence of the fullest rank (it frees its whole length
        // there and costs every rank its share), then retry sequence i.
        let Some(v) = victim(slots, i, t, victim_rule) else {
            return Err(Stop::Failed { cp_rank: t as u32 });
        };
        let (vseq, vlen) = (slots.seq_at(v), slots.len_at(v));
        rooms.give(t, budget.local(vlen));
        ledger.unlocal(t, vseq, vlen);
        rooms.take_all(budget.share(vlen));
        ledger.shard(vseq, vlen);
        slots.set(v, Decision::Whole);
        rollbacks += 1;
    }
    recount(slots, budget)?;
    Ok(rollbacks)
}

/// The authoritative check: recomputes every rank's tokens from the decisions alone (its
/// local sequences plus every sharded sequence's share).
pub(crate) fn recount<S: Slots>(slots: &S, budget: &Budget) -> Result<(), Stop> {
    let mut tokens: HVec<u64, { MAX_CP as usize }> = HVec::new();
    for _ in 0..budget.cp().min(MAX_CP) {
        let _ = tokens.push(0);
    }
    let mut shared = 0u64;
    for k in 0..slots.count() {
        let len = slots.len_at(k);
        match slots.get(k) {
            Decision::Whole => shared += u64::from(budget.share(len)),
            Decision::Sub(group) => {
                let share = u64::from(budget.for_group(group.size).share(len));
                let ranks = tokens.iter_mut().skip(group.first as usize);
                ranks.take(group.size as usize).for_each(|t| *t += share);
            }
            Decision::Local(r) => {
                if let Some(t) = tokens.get_mut(r as usize) {
                    *t += u64::from(budget.local(len));
                }
            }
            // Only placed sequences are recounted; an unset one holds nothing.
            Decision::Unset => {}
        }
    }
    match tokens
        .iter()
        .position(|&t| t + shared > u64::from(budget.bucket()))
    {
        Some(r) => Err(Stop::Failed { cp_rank: r as u32 }),
        None => Ok(()),
    }
}
