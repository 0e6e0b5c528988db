//! `balanced`: a cost-aware policy that plans on the estimated time of the configuration's
//! cost model ([`Config::cost_model`], in its integer form [`IntModel`]) instead of FLOPs
//! alone; the paper-faithful `skrull` policy stays selectable.
//!
//! # Algorithm
//!
//! 1. **DP ranks by estimated time.** Sequences longest-first (ties: input order) into the DP
//!    rank with the least estimated GPU time (ties: lowest rank), by the shared LPT kernel. A
//!    sequence's estimate is the cheaper of running it whole and `N` times one shard, plus its
//!    share of the fixed micro-batch cost by tokens.
//! 2. **Micro-batches by evaluation.** For each DP rank a small deterministic candidate set is
//!    planned and timed, and the fastest kept: a longest-processing-time grouping on estimated
//!    time into `m_min = ceil(tokens / (N·C))` micro-batches under the per-GPU shard budget,
//!    and, with one DP rank, `packed`'s next-fit grouping in sample order (which always fits
//!    with everything sharded). A candidate is skipped when `m·T_fixed + Σ work / N` already
//!    reaches the best total. (The strided interleave of GDS and `m_min + 1`, `m_min + 2` were
//!    measured and never won on the paper's rows: `docs/balanced.md`.)
//! 3. **Placement inside a micro-batch.** Sequences heaviest-first. The `s` heaviest are
//!    sharded, for a few `s` around the point where the next sequence whole would still
//!    outweigh a balanced rank (and `s = K`, everything sharded); the rest go through the
//!    shared CP-rank state machine ([`kernel::ranks`](crate::kernel)) with this policy's rule:
//!    the rank whose estimated time grows least, among the ranks with room. The machine's
//!    memory rules apply unchanged: a sequence no rank can hold whole is sharded; if its shard
//!    does not fit either, a local sequence of the fullest rank (the configured
//!    [`Victim`](crate::Victim)) is sharded and the step retried. Each `s` is timed exactly
//!    (its ring crosses nodes or not, by the topology) and the fastest kept. A micro-batch of
//!    one sequence skips the machine: its outcome is fixed (whole on rank 0 if it fits, else
//!    sharded) and is timed in closed form ([`IntModel::slowest`]).
//!
//! Every step has a fixed candidate count, so the policy runs in `O(n log n + n·N)` per
//! candidate, with no allocation: the caller's workspace holds the per-sequence costs and
//! decisions ([`WorkspaceSizes::for_batch`](crate::WorkspaceSizes::for_batch) sizes them for
//! this policy).

use heapless::Vec as HVec;

use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::limits::MAX_CP;
use crate::error::Error;
use crate::kernel::group::{max_strided_sum, next_fit};
use crate::kernel::lpt::{group_by_dp, lpt};
use crate::kernel::ranks::{self, Ledger, Rooms, Slots, Stop, UNSET};
use crate::kernel::sort::{key_index, sort_ascending_radix};
use crate::model::eval::GROUP_LEVELS;
use crate::model::fixed::{CAP, IntModel, Link};
use crate::model::time::Ring;
use crate::plan::{CpGroup, Plan, PlanBuffers, PlanWriter, SHARDED};
use crate::setup::Setup;
use crate::setup::workspace::Scratch;

/// Most bins of the LPT grouping (its state lives on the stack).
const MAX_BINS: usize = 256;

/// The per-sequence costs this policy keeps in the workspace: four words per sequence,
/// together (one cache line fetch reads them all).
#[derive(Clone, Copy)]
struct Rows<'a> {
    lengths: &'a [u32],
    /// Per sequence: whole attention, shard attention, [`work`], and the least of `g` times
    /// one GPU's share and shard attention over the groups it may be sharded over (the whole
    /// group and, with sub-groups, every aligned sub-group its share fits), all in ps.
    costs: &'a [[u64; 4]],
}

impl Rows<'_> {
    #[inline(always)]
    fn len(&self, seq: u32) -> u32 {
        self.lengths.get(seq as usize).copied().unwrap_or(0)
    }
    #[inline(always)]
    fn cost(&self, seq: u32, k: usize) -> u64 {
        self.costs.get(seq as usize).map_or(0, |c| c[k & 3])
    }
    /// Whole attention, ps.
    #[inline(always)]
    fn aw(&self, seq: u32) -> u64 {
        self.cost(seq, 0)
    }
    /// Shard attention, ps.
    #[inline(always)]
    fn ash(&self, seq: u32) -> u64 {
        self.cost(seq, 1)
    }
    /// [`work`], ps.
    #[inline(always)]
    fn work(&self, seq: u32) -> u64 {
        self.cost(seq, 2)
    }
    /// The cheapest group's cost ([`cheapest_group`]), ps.
    #[inline(always)]
    fn grp(&self, seq: u32) -> u64 {
        self.cost(seq, 3)
    }
}

/// A sequence's GPU time wherever it runs: the cheaper of whole and `N` shards, ps (no fixed
/// cost). Summed over a micro-batch and divided by `N`, a lower bound on its time less the
/// fixed cost.
#[inline]
fn work(im: &IntModel, len: u32, aw: u64, ash: u64) -> u64 {
    let (_, whole, sharded) = forms(im, len, aw, ash);
    whole.min(sharded)
}

/// A sequence's share per GPU, and its GPU time run whole on one rank and sharded over all `N`
/// (summed over the ranks), ps, without the fixed cost.
#[inline(always)]
fn forms(im: &IntModel, len: u32, aw: u64, ash: u64) -> (u32, u64, u64) {
    let share = im.share(len);
    let whole = aw + im.gemm_linear(u64::from(im.local(len)));
    let sharded = u64::from(im.cp()) * (ash + im.gemm_linear(u64::from(share)));
    (share, whole, sharded)
}

/// Sums over sharded members that bound an attempt's time from below.
#[derive(Clone, Copy, Default)]
struct Prefix {
    /// Sharded cost less [`work`], summed, ps.
    extra: u64,
    /// Tokens.
    len: u64,
    /// Shares per GPU.
    tok: u64,
    /// Shard attention per GPU, ps.
    attn: u64,
}

impl Prefix {
    /// Adds sequence `seq` sharded; returns its whole time ([`forms`]) and its [`work`], which
    /// the caller's own sums need (each cost word is read once).
    #[inline(always)]
    fn add(&mut self, im: &IntModel, rows: &Rows<'_>, seq: u32) -> (u64, u64) {
        let (len, ash, work) = (rows.len(seq), rows.ash(seq), rows.work(seq));
        let (share, whole, sharded) = forms(im, len, rows.aw(seq), ash);
        self.extra = self.extra.saturating_add(sharded - work);
        self.len += u64::from(len);
        self.tok += u64::from(share);
        self.attn = self.attn.saturating_add(ash);
        (whole, work)
    }
}

/// The least of `g` times one GPU's share and shard attention of a sequence of `len` tokens
/// over the groups it may be sharded over: the whole group, and every sub-group size whose
/// share fits `bucket`, ps.
fn cheapest_group(im: &IntModel, bucket: u32, len: u32) -> u64 {
    let n = im.cp();
    let sizes = (1..8u32)
        .map(|l| 1u32 << l)
        .filter(|&g| g < n && n.is_multiple_of(g));
    core::iter::once(n)
        .chain(sizes)
        .filter_map(|g| {
            let share = im.share_in(len, g);
            let cost = im.attention(share, len) + im.gemm_linear(u64::from(share));
            (share <= bucket).then(|| u64::from(g).saturating_mul(cost))
        })
        .min()
        .unwrap_or(0)
}

/// One micro-batch's members (heaviest first) with their working decisions, for the CP-rank
/// state machine.
struct MemberSlots<'a> {
    members: &'a [u32],
    lengths: &'a [u32],
    /// Decision per member: a CP rank or [`SHARDED`] (as `i32` bits).
    cur: &'a mut [u32],
}

impl Slots for MemberSlots<'_> {
    fn count(&self) -> usize {
        self.members.len()
    }
    fn seq_at(&self, k: usize) -> u32 {
        self.members.get(k).copied().unwrap_or(0)
    }
    fn len_at(&self, k: usize) -> u32 {
        let seq = self.members.get(k).copied().unwrap_or(0) as usize;
        self.lengths.get(seq).copied().unwrap_or(0)
    }
    fn get(&self, k: usize) -> i32 {
        self.cur.get(k).map_or(UNSET, |&v| v as i32)
    }
    fn set(&mut self, k: usize, v: i32) {
        if let Some(c) = self.cur.get_mut(k) {
            *c = v as u32;
        }
    }
}

/// This policy's rule and bookkeeping: estimated time per CP rank, the sharded sequences'
/// totals and their ring communication; a local sequence goes to the rank whose time grows
/// least.
struct TimeLedger<'a> {
    im: &'a IntModel,
    rows: Rows<'a>,
    /// The ring of the DP rank being planned.
    link: Link,
    /// Local attention per rank, ps.
    attn: HVec<u64, { MAX_CP as usize }>,
    /// Local tokens per rank (padding included).
    tok: HVec<u64, { MAX_CP as usize }>,
    /// Compute-bound GEMM time of the local tokens per rank, ps.
    gl: HVec<u64, { MAX_CP as usize }>,
    sh_len: u64,
    sh_tok: u64,
    sh_attn: u64,
    comm: u64,
    /// Stop as soon as a rank reaches this time (the best candidate so far).
    bound: u64,
    /// Sub-group rings: the DP rank being planned (where its rings sit), the links of a
    /// sub-group ring of `2^(l+1)` ranks inside a node and across nodes, and per rank the
    /// shard attention and ring communication of the sub-groups through it (their shares
    /// are in `tok`). `ring_len` holds the tokens sharded over each sub-group ring.
    dp: u32,
    sub_links: [(Link, Link); GROUP_LEVELS],
    sub_attn: HVec<u64, { MAX_CP as usize }>,
    sub_comm: HVec<u64, { MAX_CP as usize }>,
    ring_len: HVec<u64, { MAX_CP as usize }>,
    /// Whether a sub-group holds a sequence in this attempt (else the fast `pick`).
    has_sub: bool,
    /// Whether the DP rank's whole-group ring crosses nodes.
    crosses: bool,
}

impl TimeLedger<'_> {
    /// Rank `r`'s time so far, ps.
    #[inline]
    fn rank_time(&self, r: usize) -> u64 {
        let a = self.attn.get(r).copied().unwrap_or(0);
        let t = self.tok.get(r).copied().unwrap_or(0);
        if self.has_sub {
            let sa = self.sub_attn.get(r).copied().unwrap_or(0);
            let sc = self.sub_comm.get(r).copied().unwrap_or(0);
            self.im
                .rank(a, t + self.sh_tok, self.sh_attn + sa, self.comm + sc)
        } else {
            self.im.rank(a, t + self.sh_tok, self.sh_attn, self.comm)
        }
    }

    /// Where sub-group ring `group` keeps its tokens in `ring_len`: groups of `g` ranks
    /// follow those of every smaller size (`N - 2N/g` of them), by first rank.
    fn ring_index(&self, group: CpGroup) -> usize {
        let n = self.im.cp() as usize;
        let g = group.size as usize;
        n - 2 * n / g + group.first as usize / g
    }

    /// The link of sub-group ring `group` of the DP rank being planned.
    fn sub_link(&self, group: CpGroup) -> Link {
        let level = group.size.trailing_zeros() as usize - 1;
        let crosses = self
            .im
            .time_model()
            .ring(self.dp, group.first, group.size)
            .crosses_nodes;
        self.sub_links.get(level).map_or(
            Link::default(),
            |&(intra, inter)| if crosses { inter } else { intra },
        )
    }

    /// Times of rank `r` if a sequence of `len` tokens were sharded over `group` (a
    /// sub-group through `r`, or the whole group), ps.
    fn rank_time_with(&self, r: usize, group: CpGroup, len: u32, share: u64, attn: u64) -> u64 {
        let a = self.attn.get(r).copied().unwrap_or(0);
        let t = self.tok.get(r).copied().unwrap_or(0);
        let sa = self.sub_attn.get(r).copied().unwrap_or(0);
        let sc = self.sub_comm.get(r).copied().unwrap_or(0);
        if group.size == self.im.cp() {
            let comm = self.im.comm(&self.link, self.sh_len + u64::from(len));
            return self.im.rank(
                a,
                t + self.sh_tok + share,
                self.sh_attn + attn + sa,
                comm + sc,
            );
        }
        let at = self.ring_index(group);
        let held = self.ring_len.get(at).copied().unwrap_or(0);
        let link = self.sub_link(group);
        let grown = self.im.comm(&link, held + u64::from(len)) - self.im.comm(&link, held);
        self.im.rank(
            a,
            t + self.sh_tok + share,
            self.sh_attn + sa + attn,
            self.comm + sc + grown,
        )
    }

    /// Shards sequence `seq` (`len` tokens) over sub-group `group`.
    fn group(&mut self, seq: u32, len: u32, group: CpGroup) {
        let share = u64::from(self.im.share_in(len, group.size));
        let attn = self.im.attention(share as u32, len);
        let _ = seq;
        let at = self.ring_index(group);
        let link = self.sub_link(group);
        let Some(held) = self.ring_len.get_mut(at) else {
            return;
        };
        let before = self.im.comm(&link, *held);
        *held += u64::from(len);
        let grown = self.im.comm(&link, *held) - before;
        for r in group.first as usize..(group.first + group.size) as usize {
            if let (Some(t), Some(g), Some(sa), Some(sc)) = (
                self.tok.get_mut(r),
                self.gl.get_mut(r),
                self.sub_attn.get_mut(r),
                self.sub_comm.get_mut(r),
            ) {
                *t += share;
                *g = self.im.gemm_linear(*t);
                *sa += attn;
                *sc += grown;
            }
        }
        self.has_sub = true;
    }

    /// The micro-batch's time: its slowest rank's, ps.
    fn time(&self) -> u64 {
        if self.has_sub {
            return (0..self.attn.len())
                .map(|r| self.rank_time(r))
                .max()
                .unwrap_or(0);
        }
        // Without sub-groups the ranks differ only in their local attention and tokens.
        self.im
            .slowest(&self.attn, &self.tok, self.sh_tok, self.sh_attn, self.comm)
    }

    fn add_local(&mut self, r: usize, len: u32, aw: u64, sign: bool) {
        let held = u64::from(self.im.local(len));
        if let (Some(a), Some(t), Some(g)) = (
            self.attn.get_mut(r),
            self.tok.get_mut(r),
            self.gl.get_mut(r),
        ) {
            if sign {
                *a += aw;
                *t += held;
            } else {
                *a = a.saturating_sub(aw);
                *t = t.saturating_sub(held);
            }
            *g = self.im.gemm_linear(*t);
        }
    }
}

impl Ledger for TimeLedger<'_> {
    fn reset(&mut self, cp: usize) {
        let cp = cp.min(MAX_CP as usize);
        if self.has_sub {
            for v in [&mut self.sub_attn, &mut self.sub_comm, &mut self.ring_len] {
                v.fill(0);
            }
            self.has_sub = false;
        }
        for v in [&mut self.sub_attn, &mut self.sub_comm, &mut self.ring_len] {
            if v.len() != cp {
                v.clear();
                let _ = v.resize(cp, 0);
            }
        }
        for v in [&mut self.attn, &mut self.tok, &mut self.gl] {
            if v.len() != cp {
                v.clear();
                // Capacity is MAX_CP: the resize cannot fail.
                let _ = v.resize(cp, 0);
            }
            v.fill(0);
        }
        (self.sh_len, self.sh_tok, self.sh_attn, self.comm) = (0, 0, 0, 0);
    }

    #[inline]
    fn pick(&self, seq: u32, room: &[i64], need: i64) -> Option<usize> {
        // The sequence's own GEMM time is the same on every rank, so it is left out of the
        // comparison (adding it to every candidate changes no choice).
        let aw = self.rows.aw(seq);
        let extra = if self.im.all_attention() {
            self.sh_attn
        } else {
            0
        };
        // The rank whose time grows least among those with room (lowest index on ties):
        // every term is below 2^46, so a rank without room can take u64::MAX as its time.
        let (mut best, mut at) = (u64::MAX, usize::MAX);
        if self.has_sub {
            // Sub-group rings through a rank add their communication and, when the window
            // holds all attention, their shard attention.
            for (r, &rb) in room.iter().enumerate() {
                let (attn, gl) = (self.attn[r], self.gl[r]);
                let (sa, sc) = (self.sub_attn[r], self.sub_comm[r]);
                let extra = if self.im.all_attention() {
                    extra + sa
                } else {
                    0
                };
                let t = (self.comm + sc).max(attn + aw + extra) + gl;
                let t = if rb >= need { t } else { u64::MAX };
                if t < best {
                    (best, at) = (t, r);
                }
            }
            return (at != usize::MAX).then_some(at);
        }
        let (comm, base) = (self.comm, aw + extra);
        let ranks = room.iter().zip(self.attn.iter().zip(&self.gl)).enumerate();
        for (r, (&rb, (&attn, &gl))) in ranks {
            let t = comm.max(attn + base) + gl;
            let t = if rb >= need { t } else { u64::MAX };
            if t < best {
                (best, at) = (t, r);
            }
        }
        (at != usize::MAX).then_some(at)
    }

    fn local(&mut self, r: usize, seq: u32, len: u32) {
        let aw = self.rows.aw(seq);
        self.add_local(r, len, aw, true);
    }

    fn unlocal(&mut self, r: usize, seq: u32, len: u32) {
        let aw = self.rows.aw(seq);
        self.add_local(r, len, aw, false);
    }

    fn shard(&mut self, seq: u32, len: u32) {
        self.sh_len += u64::from(len);
        self.sh_tok += u64::from(self.im.share(len));
        self.sh_attn += self.rows.ash(seq);
        self.comm = self.im.comm(&self.link, self.sh_len);
    }

    #[inline]
    fn abandon(&self, r: usize) -> bool {
        // A rank's time stays below 2^63 (at most 2^16 attention terms of at most 2^46 ps
        // each, on either side of the window, plus clamped terms), so with no bound yet
        // (`u64::MAX`) nothing is abandoned, and the comparison is skipped.
        self.bound != u64::MAX && self.rank_time(r) >= self.bound
    }
}

/// The links of a sub-group ring of `2^(l+1)` ranks, inside a node and across nodes.
fn sub_links(im: &IntModel, cp: u32) -> [(Link, Link); GROUP_LEVELS] {
    let mut links = [(Link::default(), Link::default()); GROUP_LEVELS];
    for (l, slot) in links.iter_mut().enumerate() {
        let size = 2u32 << l;
        if size < cp {
            let ring = |crosses_nodes| Ring {
                size,
                crosses_nodes,
            };
            *slot = (im.link(ring(false)), im.link(ring(true)));
        }
    }
    links
}

/// Plans one micro-batch attempt that shards its `s` heaviest members first; its time, or
/// `None` when memory cannot be met or it would take at least `ledger.bound`.
fn attempt(
    cfg: &Config,
    budget: &Budget,
    slots: &mut MemberSlots<'_>,
    s: usize,
    rooms: &mut Rooms,
    ledger: &mut TimeLedger<'_>,
) -> Option<u64> {
    rooms.reset(cfg.cp, budget.bucket());
    ledger.reset(cfg.cp as usize);
    ranks::shard_first(slots, s, budget, rooms, ledger);
    match ranks::place(slots, s, budget, cfg.victim, rooms, ledger) {
        Ok(_) => {
            // Without a bound yet any time is kept (a saturated one too).
            let t = ledger.time();
            (ledger.bound == u64::MAX || t < ledger.bound).then_some(t)
        }
        Err(Stop::Failed { .. } | Stop::Abandoned) => None,
    }
}

/// Everything the placement of micro-batches reads, and its state (built once per call).
struct Placer<'a> {
    cfg: &'a Config,
    budget: Budget,
    rooms: Rooms,
    ledger: TimeLedger<'a>,
    /// Whether the shortcuts that change no plan are on: attempts skipped by their lower
    /// bound, and the closed form of a one-sequence micro-batch ([`Placer::lone`]). Always,
    /// except in the tests that check they change no plan.
    shortcuts: bool,
}

impl Placer<'_> {
    /// Plans one micro-batch (`members`, heaviest first): tries a few sharded counts and keeps
    /// the fastest decisions in `best`. Returns its time, or `None` when no attempt meets
    /// memory.
    fn micro_batch(&mut self, members: &[u32], cur: &mut [u32], best: &mut [u32]) -> Option<u64> {
        let (im, rows) = (self.ledger.im, self.ledger.rows);
        let k = members.len();
        let n = u64::from(im.cp());
        // One pass: the members' summed whole cost and work, and the sums a lower bound needs
        // (below) with every member sharded. (Terms are clamped at `CAP`, 2^46 ps, and there are
        // at most 2^16 members: the sums of whole costs cannot overflow.)
        let (mut total, mut work_all) = (0u64, 0u64);
        let mut all = Prefix::default();
        for &seq in members {
            let (whole, work) = all.add(im, &rows, seq);
            total += whole;
            work_all = work_all.saturating_add(work);
        }
        // Members longer than the budget can only run sharded: a prefix (longest first).
        let forced = members
            .iter()
            .take_while(|&&seq| im.local(rows.len(seq)) > self.cfg.bucket)
            .count();
        // The sharded count where the heaviest remaining sequence whole no longer outweighs a
        // balanced rank.
        let mut k0 = 0;
        while k0 < k {
            let seq = members[k0];
            let (_, whole, sharded) = forms(im, rows.len(seq), rows.aw(seq), rows.ash(seq));
            if k0 >= forced && whole.saturating_mul(n) <= total {
                break;
            }
            total = total - whole + sharded;
            k0 += 1;
        }
        let cands = [k0, k0 + 1, k0.saturating_sub(1).max(forced), k];
        // A lower bound on attempt `s`, from two facts about the slowest rank. It is at
        // least the average: every member adds at least the cheaper of whole and sharded to
        // the ranks' summed time (see `work`), the first `s` their sharded cost. And it is at
        // least the ring of the first `s` plus their shares' GEMM (and their attention,
        // when it runs after the window).
        let link = self.ledger.link;
        let lower = |s: usize| {
            let p = if s >= k {
                all
            } else {
                let mut p = Prefix::default();
                for &seq in members.get(..s).unwrap_or(members) {
                    p.add(im, &rows, seq);
                }
                p
            };
            let after = if im.all_attention() { 0 } else { p.attn };
            let ring = im
                .comm(&link, p.len)
                .saturating_add(im.gemm_linear(p.tok))
                .saturating_add(after);
            // The average holds only while no rank's GEMM term reaches the model's clamp
            // (`CAP`): the summed per-member terms, plus one unit of rounding each, stay
            // below it.
            let summed = work_all.saturating_add(p.extra);
            let average = if summed.saturating_add(k as u64) < CAP {
                summed / n.max(1)
            } else {
                0
            };
            im.fixed().saturating_add(average.max(ring))
        };
        // An attempt whose bound reaches the best time so far cannot be kept (ties go to the
        // earlier candidate): it is skipped, and the plan is the one every candidate would
        // give.
        let mut found: Option<u64> = None;
        for (c, &s) in cands.iter().enumerate() {
            if s > k || cands[..c].contains(&s) {
                continue;
            }
            if self.shortcuts && found.is_some_and(|f| lower(s) >= f) {
                continue;
            }
            self.ledger.bound = found.unwrap_or(u64::MAX);
            let t = match members {
                [seq] if self.shortcuts => self.lone(*seq, s, cur),
                _ => {
                    let mut slots = MemberSlots {
                        members,
                        lengths: rows.lengths,
                        cur: &mut *cur,
                    };
                    let (cfg, budget) = (self.cfg, &self.budget);
                    attempt(
                        cfg,
                        budget,
                        &mut slots,
                        s,
                        &mut self.rooms,
                        &mut self.ledger,
                    )
                }
            };
            if let Some(t) = t {
                found = Some(t);
                best.copy_from_slice(cur);
            }
        }
        // A lower bound on a sub-group attempt sharding the first `s` members: as `lower`'s
        // average, with each of those members at its cheapest group (the whole group or a
        // sub-group its share fits: `g` ranks hold its share and its shard attention).
        let lower_groups = |s: usize| {
            let mut summed = work_all;
            for &seq in members.get(..s).unwrap_or(members) {
                summed = summed
                    .saturating_add(rows.grp(seq))
                    .saturating_sub(rows.work(seq));
            }
            if summed.saturating_add(k as u64) < CAP {
                im.fixed().saturating_add(summed / n.max(1))
            } else {
                0
            }
        };
        // Sub-group attempts: the same sharded counts, each sharded member on the group (the
        // whole group or an aligned sub-group) that grows the ranks' time least. Kept only when
        // strictly faster, so a plan without sub-groups is never replaced by an equal one.
        // Only where the whole group's ring crosses nodes: there a sub-group's ring can stay in
        // a node, which is where they pay (inside a node they gained at most 3 % on the
        // measured rows and cost three times the planning time).
        if self.cfg.subgroups && self.cfg.cp >= 4 && self.ledger.crosses {
            // The bounds of the two sharded counts tried, once each.
            let (lower_k0, lower_k) = (lower_groups(k0), lower_groups(k));
            for (c, &s, rule) in cands
                .iter()
                .enumerate()
                .flat_map(|(c, s)| [(c, s, GroupRule::Total), (c, s, GroupRule::Balance)])
            {
                if s == 0 || s > k || cands[..c].contains(&s) || c == 1 || c == 2 {
                    continue;
                }
                let bound = if c == 0 { lower_k0 } else { lower_k };
                if found.is_some_and(|f| bound >= f) {
                    continue;
                }
                self.ledger.bound = found.unwrap_or(u64::MAX);
                let mut slots = MemberSlots {
                    members,
                    lengths: rows.lengths,
                    cur: &mut *cur,
                };
                let (cfg, budget) = (self.cfg, &self.budget);
                let t = attempt_groups(
                    cfg,
                    budget,
                    &mut slots,
                    s,
                    &mut self.rooms,
                    &mut self.ledger,
                    rule,
                );
                if let Some(t) = t
                    && found.is_none_or(|f| t < f)
                {
                    found = Some(t);
                    best.copy_from_slice(cur);
                }
            }
        }
        found
    }

    /// [`attempt`] for a micro-batch of one sequence, in closed form (a DP rank with one
    /// sequence, as when there are as many DP ranks as sequences, would otherwise run the
    /// CP-rank state machine twice for it). With `s = 0` the machine puts the sequence whole
    /// on rank 0 (every rank is empty and ties go to the lowest) if it fits there, else shards
    /// it, as `s = 1` does; a shard that does not fit fails the recount; no rollback can
    /// happen. The time is the machine's: [`IntModel::slowest`] of the ranks it leaves (the
    /// other ranks of a whole placement are empty and never slower). Writes the decision to
    /// `cur[0]`; `None` when memory fails or the time reaches `ledger.bound`, as `attempt`.
    // Out of line: inlined into the candidate loop it slowed every micro-batch, not only the
    // one-sequence ones (1.5 % more instructions with one sequence per DP rank).
    #[inline(never)]
    fn lone(&self, seq: u32, s: usize, cur: &mut [u32]) -> Option<u64> {
        let (im, rows) = (self.ledger.im, self.ledger.rows);
        let len = rows.len(seq);
        let bucket = self.budget.bucket();
        let local = im.local(len);
        let whole = s == 0 && local <= bucket;
        let t = if whole {
            im.slowest(&[rows.aw(seq)], &[u64::from(local)], 0, 0, 0)
        } else {
            let share = im.share(len);
            if share > bucket {
                return None;
            }
            let comm = im.comm(&self.ledger.link, u64::from(len));
            im.slowest(&[0], &[0], u64::from(share), rows.ash(seq), comm)
        };
        if let Some(c) = cur.first_mut() {
            *c = if whole { 0 } else { SHARDED as u32 };
        }
        let bound = self.ledger.bound;
        (bound == u64::MAX || t < bound).then_some(t)
    }
}

/// How [`attempt_groups`] ranks the groups a member may be sharded over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupRule {
    /// The least summed time of every rank, then the least slowest rank.
    Total,
    /// The least slowest-rank time plus average-rank time.
    Balance,
}

/// Like [`attempt`], but each of the `s` heaviest members is sharded over the group of the
/// CP ranks (the whole group, or an aligned sub-group with room for its share) that adds the
/// least to the slowest rank's time plus the average rank's time (so that a second long
/// sequence goes to the other half of the group rather than on top of the first); the rest are
/// placed as in [`attempt`].
fn attempt_groups(
    cfg: &Config,
    budget: &Budget,
    slots: &mut MemberSlots<'_>,
    s: usize,
    rooms: &mut Rooms,
    ledger: &mut TimeLedger<'_>,
    rule: GroupRule,
) -> Option<u64> {
    rooms.reset(cfg.cp, budget.bucket());
    ledger.reset(cfg.cp as usize);
    let n = cfg.cp;
    let im = ledger.im;
    for k in 0..s.min(slots.count()) {
        let (seq, len) = (slots.seq_at(k), slots.len_at(k));
        let now: HVec<u64, { MAX_CP as usize }> =
            (0..n as usize).map(|r| ledger.rank_time(r)).collect();
        // Options: the whole group, then sub-groups largest first (first rank ascending).
        let mut pick: Option<((u64, u64), u64, CpGroup)> = None;
        let whole = CpGroup { first: 0, size: n };
        let sizes = (1..8u32).rev().map(|l| 1u32 << l);
        let subs = sizes
            .filter(|&g| g < n && n.is_multiple_of(g))
            .flat_map(|g| {
                (0..n / g).map(move |b| CpGroup {
                    first: b * g,
                    size: g,
                })
            });
        for group in core::iter::once(whole).chain(subs) {
            let share = im.share_in(len, group.size);
            let room = rooms.as_slice();
            let fits = (group.first..group.first + group.size)
                .all(|r| room.get(r as usize).is_some_and(|&x| x >= i64::from(share)));
            if !fits {
                continue;
            }
            let attn = im.attention(share, len);
            let (mut most, mut sum) = (0u64, 0u64);
            for (r, &t) in now.iter().enumerate() {
                let t = if group.contains(r as u32) {
                    ledger.rank_time_with(r, group, len, u64::from(share), attn)
                } else {
                    t
                };
                most = most.max(t);
                sum = sum.saturating_add(t);
            }
            // Least total time (every rank's), then the least slowest rank; or the slowest
            // rank plus the average one.
            let cost = match rule {
                GroupRule::Total => (sum, most),
                GroupRule::Balance => (most.saturating_add(sum / u64::from(n)), 0),
            };
            if pick.is_none_or(|(c, _, _)| cost < c) {
                pick = Some((cost, most, group));
            }
        }
        let (_, most, group) = pick?;
        // Rank times only grow from here: past the best time so far, give up.
        if ledger.bound != u64::MAX && most >= ledger.bound {
            return None;
        }
        if group.size == n {
            rooms.take_group(group, budget.share(len));
            ledger.shard(seq, len);
            slots.set(k, SHARDED);
        } else {
            rooms.take_group(group, im.share_in(len, group.size));
            ledger.group(seq, len, group);
            slots.set(k, ranks::group_code(group));
        }
    }
    match ranks::place(slots, s, budget, cfg.victim, rooms, ledger) {
        Ok(_) => {
            let t = ledger.time();
            (ledger.bound == u64::MAX || t < ledger.bound).then_some(t)
        }
        Err(Stop::Failed { .. } | Stop::Abandoned) => None,
    }
}

/// How a candidate grouping assigns the DP rank's sequences to micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    /// Micro-batch `j` takes ascending positions `j, j+m, ...` (GDS's interleave).
    Strided(usize),
    /// Longest-processing-time on estimated time into `m` bins under the shard budget.
    Lpt(usize),
    /// Next-fit in sample order under the shard budget (`packed`'s grouping).
    NextFit,
}

/// Writes the grouping's micro-batch of every sequence of `sub` (ascending by length) into
/// `mb_of[seq]` (`scratch`: at least `sub.len()` entries); returns the micro-batch count, or
/// `None` if it breaks memory.
fn group(
    im: &IntModel,
    cfg: &Config,
    rows: &Rows<'_>,
    sub: &[u32],
    g: Grouping,
    mb_of: &mut [u32],
    scratch: &mut [u32],
) -> Option<usize> {
    let cap_all = u64::from(cfg.bucket) * u64::from(cfg.cp);
    let mut set = |s: u32, j: u32| {
        if let Some(x) = mb_of.get_mut(s as usize) {
            *x = j;
        }
    };
    match g {
        Grouping::Strided(m) => {
            if max_strided_sum(sub, rows.lengths, m) > cap_all {
                return None;
            }
            for (p, &s) in sub.iter().enumerate() {
                set(s, (p % m) as u32);
            }
            Some(m)
        }
        Grouping::Lpt(1) => {
            // One bin: it fits exactly when all the shares do.
            let cap = u64::from(cfg.bucket);
            let shares: u64 = sub.iter().map(|&s| u64::from(im.share(rows.len(s)))).sum();
            if shares > cap {
                return None;
            }
            for &s in sub {
                set(s, 0);
            }
            Some(1)
        }
        Grouping::Lpt(m) => {
            if m > MAX_BINS {
                return None;
            }
            // (load, tokens) per bin; only the m bins in use are initialised.
            let mut bins: HVec<(u64, u64), MAX_BINS> = HVec::new();
            for _ in 0..m {
                let _ = bins.push((0, 0));
            }
            let cap = u64::from(cfg.bucket);
            for &s in sub.iter().rev() {
                let len = rows.len(s);
                let share = u64::from(im.share(len));
                let w = rows.work(s);
                let mut pick: Option<(u64, usize)> = None;
                for (j, &(load, tok)) in bins.iter().enumerate() {
                    if tok + share > cap {
                        continue;
                    }
                    if pick.is_none_or(|(b, _)| load < b) {
                        pick = Some((load, j));
                    }
                }
                let (_, j) = pick?;
                if let Some(b) = bins.get_mut(j) {
                    b.0 = b.0.saturating_add(w);
                    b.1 += share;
                }
                set(s, j as u32);
            }
            Some(m)
        }
        Grouping::NextFit => {
            // Sample order is the input order.
            let order = scratch.get_mut(..sub.len())?;
            order.copy_from_slice(sub);
            order.sort_unstable();
            let order: &[u32] = order;
            let mut open = 0u32;
            let count = next_fit(
                &cfg.budget(),
                order.iter().map(|&s| rows.len(s)),
                |k, new_mb| {
                    if let Some(j) = new_mb {
                        open = j;
                    }
                    if let Some(&s) = order.get(k) {
                        set(s, open);
                    }
                },
            );
            Some(count as usize)
        }
    }
}

/// The workspace rows one DP rank's search writes.
struct Marks<'a> {
    /// Per sequence: its micro-batch in the grouping being tried.
    mb_of: &'a mut [u32],
    /// Per sequence: its decision in the grouping being tried (a CP rank or [`SHARDED`]).
    dec: &'a mut [u32],
    /// Per member of the micro-batch being placed: working decision.
    cur: &'a mut [u32],
    /// Per member: best decision.
    best: &'a mut [u32],
    /// Members grouped by micro-batch, heaviest first (also scratch for the groupings).
    gather: &'a mut [u32],
}

/// Plans every micro-batch of the grouping in `marks.mb_of`; writes each sequence's decision
/// into `marks.dec` and returns the DP rank's total time, or `None` when a micro-batch cannot
/// meet memory or the total reaches `stop`.
fn run_grouping(
    placer: &mut Placer<'_>,
    sub: &[u32],
    m: usize,
    marks: &mut Marks<'_>,
    stop: u64,
) -> Option<u64> {
    // Members of every micro-batch, heaviest first (sub is ascending by (length, index), so
    // reversed: longest first, ties higher index first), grouped by micro-batch: `sub`
    // reversed for one micro-batch, a counting sort for up to MAX_BINS, else the positions
    // sorted by (micro-batch, position descending), all giving the same order.
    let k_all = sub.len().min(marks.gather.len());
    let gather = &mut marks.gather[..k_all];
    let mb_of = &*marks.mb_of;
    let mb = |s: u32| mb_of.get(s as usize).copied().unwrap_or(u32::MAX);
    if m == 1 {
        for (slot, &s) in gather.iter_mut().zip(sub.iter().rev()) {
            *slot = s;
        }
    } else if m <= MAX_BINS {
        let mut start = [0u32; MAX_BINS + 1];
        for &s in sub {
            if let Some(c) = start.get_mut(mb(s) as usize + 1) {
                *c += 1;
            }
        }
        for j in 0..m {
            start[j + 1] += start[j];
        }
        for &s in sub.iter().rev() {
            if let Some(c) = start.get_mut(mb(s) as usize) {
                if let Some(slot) = gather.get_mut(*c as usize) {
                    *slot = s;
                }
                *c += 1;
            }
        }
    } else {
        for (p, slot) in gather.iter_mut().enumerate() {
            *slot = p as u32;
        }
        let pos_mb = |p: u32| sub.get(p as usize).map_or(u32::MAX, |&s| mb(s));
        gather.sort_unstable_by_key(|&p| (pos_mb(p), core::cmp::Reverse(p)));
        for slot in gather.iter_mut() {
            *slot = sub.get(*slot as usize).copied().unwrap_or(0);
        }
    }
    let mut total = 0u64;
    let mut next = 0usize;
    for j in 0..m as u32 {
        let first = next;
        while next < k_all && gather.get(next).is_some_and(|&s| mb(s) == j) {
            next += 1;
        }
        let k = next - first;
        if k == 0 {
            continue;
        }
        let members = gather.get(first..next).unwrap_or(&[]);
        let t = placer.micro_batch(members, &mut marks.cur[..k], &mut marks.best[..k])?;
        total = total.saturating_add(t);
        // Without a best total yet (`stop == u64::MAX`) the grouping always completes, even
        // when its total saturates.
        if stop != u64::MAX && total >= stop {
            return None;
        }
        for (&s, &d) in members.iter().zip(marks.best.iter()) {
            if let Some(x) = marks.dec.get_mut(s as usize) {
                *x = d;
            }
        }
    }
    Some(total)
}

/// One DP rank's candidate search: the fastest grouping so far, in the placements.
struct DpSearch<'a, 'c> {
    placer: &'c mut Placer<'a>,
    sub: &'a [u32],
    marks: Marks<'c>,
    placements: &'c mut [crate::plan::Placement],
    /// Sum over the rank's sequences of [`work`] divided by `N`: with `m x fixed`, a lower
    /// bound on any grouping into `m` micro-batches.
    work: u64,
    best: Option<u64>,
    fewest: usize,
    tried_single: bool,
}

impl DpSearch<'_, '_> {
    /// Plans grouping `g`; keeps it in the placements if it is the fastest so far.
    fn try_grouping(&mut self, g: Grouping) {
        let p = &*self.placer;
        let Some(m) = group(
            p.ledger.im,
            p.cfg,
            &p.ledger.rows,
            self.sub,
            g,
            self.marks.mb_of,
            self.marks.gather,
        ) else {
            return;
        };
        // LPT and next-fit bins keep every GPU's shards within budget, and one sequence per
        // micro-batch always fits: those counts are feasible plans.
        let surely_fits = !matches!(g, Grouping::Strided(_)) || m == self.sub.len();
        if surely_fits {
            self.fewest = self.fewest.min(m);
        }
        let limit = p.cfg.max_micro_batches as usize;
        if limit != 0 && m > limit {
            return;
        }
        if m == 1 {
            // Every one-micro-batch grouping is the same grouping.
            if self.tried_single {
                return;
            }
            self.tried_single = true;
        }
        let stop = self.best.unwrap_or(u64::MAX);
        if stop != u64::MAX
            && (m as u64)
                .saturating_mul(p.ledger.im.fixed())
                .saturating_add(self.work)
                >= stop
        {
            return;
        }
        let Some(t) = run_grouping(self.placer, self.sub, m, &mut self.marks, stop) else {
            return;
        };
        self.best = Some(t);
        for &s in self.sub {
            let i = s as usize;
            if let (Some(pl), Some(&mb), Some(&dec)) = (
                self.placements.get_mut(i),
                self.marks.mb_of.get(i),
                self.marks.dec.get(i),
            ) {
                pl.micro_batch = mb;
                pl.cp_rank = dec as i32;
            }
        }
    }
}

/// Runs the `balanced` policy and writes the plan.
///
/// # Errors
/// [`Error::MicroBatchLimit`] when no candidate fits `cfg.max_micro_batches`, or
/// [`Error::DacpFailed`] (defensive: one sequence per micro-batch always fits sharded).
pub(crate) fn schedule<'b>(
    setup: &Setup,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    out: PlanBuffers<'b>,
    total_tokens: u64,
) -> Result<Plan<'b>, Error> {
    plan_with(setup, lengths, ws, out, total_tokens, true)
}

/// [`schedule`], with the shortcuts that change no plan on or off ([`Placer::shortcuts`]).
fn plan_with<'b>(
    setup: &Setup,
    lengths: &[u32],
    ws: &mut Scratch<'_>,
    out: PlanBuffers<'b>,
    total_tokens: u64,
    shortcuts: bool,
) -> Result<Plan<'b>, Error> {
    let cfg = setup.config();
    let n = lengths.len();
    let dp = cfg.dp as usize;
    let budget = setup.budget();
    let im = setup.int_model();
    let tm = *im.time_model();
    sort_ascending_radix(lengths, ws.keys, ws.seqs, ws.scratch);
    // Per-sequence costs, once per distinct length: whole and shard attention, and work.
    // (The workspace check guarantees 4n words; the fallback is never taken.)
    let (costs, _) = ws
        .costs
        .get_mut(..4 * n)
        .unwrap_or_default()
        .as_chunks_mut::<4>();
    // Sub-groups are tried only on DP ranks whose ring crosses nodes (see `micro_batch`); the
    // pattern of crossings repeats within `gpus_per_node` DP ranks.
    let crossing =
        (0..cfg.dp.min(tm.cost.gpus_per_node.max(1))).any(|d| tm.group_ring(d).crosses_nodes);
    let subs = cfg.subgroups && cfg.cp >= 4 && crossing;
    let per_mb = u64::from(cfg.bucket)
        .saturating_mul(u64::from(cfg.cp))
        .max(1);
    // The LPT weight of a sequence: its work plus its share of the fixed micro-batch cost
    // by tokens; `total` bounds their sum.
    let weight = |len: u32, w: u64| {
        let by_tokens = match im.fixed().checked_mul(u64::from(len)) {
            Some(x) => u128::from(x / per_mb),
            None => u128::from(im.fixed()) * u128::from(len) / u128::from(per_mb),
        };
        u128::from(w) + by_tokens
    };
    let mut total = 0u128;
    // (length, whole attention, shard attention, work, cheapest group, weight) of the
    // previous length.
    let mut prev: Option<(u32, u64, u64, u64, u64, u128)> = None;
    for &key in &ws.keys[..n] {
        let len = (key >> 32) as u32;
        let (a, s, w, c, wt) = match prev {
            Some((l, a, s, w, c, wt)) if l == len => (a, s, w, c, wt),
            _ => {
                let (a, s) = (im.attn_whole(len), im.attn_shard(len));
                let c = if subs {
                    cheapest_group(&im, cfg.bucket, len)
                } else {
                    0
                };
                let w = work(&im, len, a, s);
                (a, s, w, c, weight(len, w))
            }
        };
        prev = Some((len, a, s, w, c, wt));
        let seq = key_index(key);
        if let Some(x) = costs.get_mut(seq) {
            *x = [a, s, w, c];
        }
        total += wt;
    }
    // DP ranks by LPT on that weight.
    let (mb_of, rest) = ws.marks.split_at_mut(n);
    let (dec, rest) = rest.split_at_mut(n);
    let (cur, best) = rest.split_at_mut(n);
    lpt(
        &ws.keys[..n],
        &mut ws.dp_loads[..dp],
        ws.dp_heap,
        total,
        |len, seq| weight(len, costs.get(seq).map_or(0, |c| c[2])),
        |seq, bin| {
            if let Some(x) = mb_of.get_mut(seq) {
                *x = bin;
            }
        },
    );
    // The DP ranks are in `mb_of` until the groupings need it: move them into the
    // placements.
    let PlanBuffers {
        placements,
        micro_batches,
        members,
        rank_tokens,
        micro_batches_per_dp,
    } = out;
    for (p, &d) in placements.iter_mut().zip(mb_of.iter()) {
        p.dp_rank = d;
    }
    {
        let pl: &[crate::plan::Placement] = placements;
        group_by_dp(&ws.keys[..n], dp, ws.dp_start, ws.dp_heap, ws.seqs, |s| {
            pl.get(s).map_or(0, |p| p.dp_rank)
        });
    }
    let cap = u64::from(cfg.bucket) * u64::from(cfg.cp);
    let rows = Rows {
        lengths,
        costs: &*costs,
    };
    let mut placer = Placer {
        cfg,
        budget,
        shortcuts,
        rooms: Rooms::new(),
        ledger: TimeLedger {
            im: &im,
            rows,
            link: Link::default(),
            attn: HVec::new(),
            tok: HVec::new(),
            gl: HVec::new(),
            sh_len: 0,
            sh_tok: 0,
            sh_attn: 0,
            comm: 0,
            bound: u64::MAX,
            dp: 0,
            sub_links: sub_links(&im, cfg.cp),
            sub_attn: HVec::new(),
            sub_comm: HVec::new(),
            ring_len: HVec::new(),
            has_sub: false,
            crosses: false,
        },
    };
    // A DP rank's ring is its whole CP group, within a node or across nodes: two links.
    let group = tm.group_ring(0);
    let links = (
        im.link(Ring {
            crosses_nodes: false,
            ..group
        }),
        im.link(Ring {
            crosses_nodes: true,
            ..group
        }),
    );
    for d in 0..dp {
        let (a, b) = (ws.dp_start[d] as usize, ws.dp_start[d + 1] as usize);
        let sub = &ws.seqs[a..b];
        let k = sub.len();
        if k == 0 {
            continue;
        }
        let sum: u64 = sub.iter().map(|&s| u64::from(lengths[s as usize])).sum();
        let work_sum: u64 = sub.iter().map(|&s| rows.work(s)).sum();
        let m_min = (sum.div_ceil(cap).max(1) as usize).min(k);
        let ring = tm.group_ring(d as u32);
        placer.ledger.link = if ring.crosses_nodes { links.1 } else { links.0 };
        placer.ledger.dp = d as u32;
        placer.ledger.crosses = ring.crosses_nodes;
        let mut search = DpSearch {
            placer: &mut placer,
            sub,
            marks: Marks {
                mb_of: &mut *mb_of,
                dec: &mut *dec,
                cur: &mut *cur,
                best: &mut *best,
                gather: &mut *ws.scratch,
            },
            placements: &mut *placements,
            work: work_sum / u64::from(cfg.cp.max(1)),
            best: None,
            fewest: usize::MAX,
            tried_single: false,
        };
        search.try_grouping(Grouping::Lpt(m_min));
        if dp == 1 {
            // The packed-style grouping. With one DP rank it is `packed`'s own grouping, so
            // `balanced` never plans worse than `packed` there; with more it never won on the
            // measured rows (docs/balanced.md) and cost a third of the latency.
            search.try_grouping(Grouping::NextFit);
        }
        if search.best.is_none() {
            // Rare (a micro-batch limit, or budgets so tight that the shard-budget bins do not
            // fit): grow m as GDS does, with its strided interleave too, up to one sequence
            // per micro-batch, which always fits sharded.
            let top = match cfg.max_micro_batches {
                0 => k,
                limit => k.min(limit as usize),
            };
            let mut m = m_min;
            while search.best.is_none() && m <= top {
                search.try_grouping(Grouping::Lpt(m));
                search.try_grouping(Grouping::Strided(m));
                m += 1;
            }
            if search.best.is_none() {
                search.try_grouping(Grouping::Strided(k));
            }
        }
        let found = search.best.is_some();
        let fewest = search.fewest;
        if !found {
            if cfg.max_micro_batches != 0 && fewest != usize::MAX {
                return Err(Error::MicroBatchLimit {
                    dp_rank: d as u32,
                    limit: cfg.max_micro_batches,
                    needed: fewest as u32,
                });
            }
            return Err(Error::DacpFailed { cp_rank: 0 });
        }
    }
    let out = PlanBuffers {
        placements,
        micro_batches,
        members,
        rank_tokens,
        micro_batches_per_dp,
    };
    let (order, rest) = ws.marks.split_at_mut(n);
    let (cps, counts) = rest.split_at_mut(n);
    let scratch = (&mut *ws.dp_start, order, counts, cps);
    Ok(write_plan(cfg, lengths, scratch, out, total_tokens))
}

/// Writes the decisions in `out.placements` (DP rank, micro-batch, CP rank per sequence) as
/// the plan, in plan order: (DP rank, micro-batch, sequence), empty micro-batches dropped.
/// A counting sort by micro-batch: `base` (at least `dp + 1`), `order` and `cps` (at least
/// `n`) and `counts` (at least `n + 1`) are scratch.
fn write_plan<'b>(
    cfg: &Config,
    lengths: &[u32],
    scratch: (&mut [u32], &mut [u32], &mut [u32], &mut [u32]),
    out: PlanBuffers<'b>,
    total_tokens: u64,
) -> Plan<'b> {
    let (base, order, counts, cps) = scratch;
    let n = lengths.len();
    let dp = cfg.dp as usize;
    // Micro-batch slots per DP rank (its highest micro-batch + 1; every micro-batch index is
    // below its rank's sequence count, so the slots total at most n), then their offsets.
    base.fill(0);
    for p in out.placements.iter() {
        if let Some(b) = base.get_mut(p.dp_rank as usize) {
            *b = (*b).max(p.micro_batch + 1);
        }
    }
    let mut slots = 0u32;
    for b in base.iter_mut().take(dp + 1) {
        let c = *b;
        *b = slots;
        slots += c;
    }
    let slot = |p: &crate::plan::Placement| {
        base.get(p.dp_rank as usize)
            .map_or(0, |&b| b + p.micro_batch) as usize
    };
    let counts = counts.get_mut(..slots as usize + 1).unwrap_or(&mut []);
    counts.fill(0);
    for p in out.placements.iter() {
        if let Some(c) = counts.get_mut(slot(p) + 1) {
            *c += 1;
        }
    }
    for j in 1..counts.len() {
        counts[j] += counts[j - 1];
    }
    // Stable: within a micro-batch, sequences stay in index order.
    for (i, p) in out.placements.iter().enumerate() {
        if let Some(c) = counts.get_mut(slot(p)) {
            if let Some(o) = order.get_mut(*c as usize) {
                *o = i as u32;
            }
            *c += 1;
        }
    }
    // The writer takes the placement buffer: keep the CP ranks.
    for (c, p) in cps.iter_mut().zip(out.placements.iter()) {
        *c = p.cp_rank as u32;
    }
    let mut w = PlanWriter::new(out, cfg, total_tokens);
    let mut start = 0usize;
    for d in 0..dp {
        let (a, b) = (base[d] as usize, base[d + 1] as usize);
        let mut count = 0u32;
        for &end in counts.get(a..b).unwrap_or(&[]) {
            let end = end as usize;
            if end > start {
                w.open(d as u32, count);
                count += 1;
                for &seq in order.get(start..end).unwrap_or(&[]) {
                    let cp = cps.get(seq as usize).map_or(SHARDED, |&c| c as i32);
                    let len = lengths.get(seq as usize).copied().unwrap_or(0);
                    match ranks::decode_group(cp) {
                        Some(g) => w.push_in(seq, len, SHARDED, g.first, g.size),
                        None => w.push(seq, len, cp),
                    }
                }
                start = end;
            }
        }
        w.set_count(d as u32, count);
    }
    w.finish(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::options::{Policy, ShardPadding, Victim};
    use crate::config::shape::ModelShape;
    use crate::plan::Placement;
    use crate::plan::{self};
    use crate::test_support::OwnedPlan;
    use crate::test_support::setup_of;

    use std::vec;
    use std::vec::Vec;

    /// Plans `lengths` with `balanced`, checks it with `plan::check`, and returns
    /// (placements, micro-batches per DP rank).
    fn run(cfg: &Config, lengths: &[u32]) -> Result<(Vec<Placement>, Vec<u32>), Error> {
        let cfg = cfg.with_policy(Policy::Balanced);
        // Garbage in every buffer: the policy must not depend on their contents.
        let mut bufs = OwnedPlan::filled(lengths.len(), &cfg, 1);
        let plan = bufs.schedule(&cfg, lengths)?;
        assert_eq!(
            plan::check(&setup_of(&cfg), lengths, &plan),
            Ok(()),
            "{lengths:?}"
        );
        Ok((
            plan.placements().to_vec(),
            plan.micro_batches_per_dp().to_vec(),
        ))
    }

    const EXAMPLE: [u32; 9] = [1, 2, 2, 3, 4, 6, 9, 14, 30];

    /// A tiny deterministic generator (SplitMix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// A long-tail batch: mostly under 2K, a few long ones up to the sharded limit.
    fn long_tail(rng: &mut Rng, n: usize, max: u32) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let r = rng.next();
                if r.is_multiple_of(16) {
                    1 + (r >> 8) as u32 % max
                } else {
                    1 + (r >> 8) as u32 % 2048.min(max)
                }
            })
            .collect()
    }

    #[test]
    fn paper_examples_give_valid_plans() {
        // Example 1 (C = 24) fits one micro-batch; Example 2 (C = 20) needs two.
        let (_, per_dp) = run(&Config::new(1, 4, 24, ModelShape::QWEN2_5_0_5B), &EXAMPLE).unwrap();
        assert_eq!(per_dp, [1]);
        let (_, per_dp) = run(&Config::new(1, 4, 20, ModelShape::QWEN2_5_0_5B), &EXAMPLE).unwrap();
        assert_eq!(per_dp, [2]);
    }

    /// Worked example: one 17K sequence among short ones on CP 8. Kept whole it would be four
    /// times its sharded time while seven GPUs idle, so `balanced` shards it and keeps the
    /// short ones local, spread over the CP ranks.
    #[test]
    fn a_dominating_sequence_is_sharded_and_short_ones_stay_local() {
        let cfg = Config::new(1, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        let mut lengths = vec![17_000u32];
        lengths.extend([900u32; 24]);
        let (p, per_dp) = run(&cfg, &lengths).unwrap();
        assert_eq!(per_dp, [1]);
        assert_eq!(p[0].cp_rank, SHARDED);
        assert!(p[1..].iter().all(|x| x.cp_rank >= 0));
        let mut per_rank = [0u32; 8];
        for x in &p[1..] {
            per_rank[x.cp_rank as usize] += 1;
        }
        assert_eq!(per_rank, [3; 8]);
    }

    #[test]
    fn awkward_batches_are_valid() {
        let m = ModelShape::QWEN2_5_7B;
        let cases: [(Config, Vec<u32>); 7] = [
            (Config::new(4, 2, 100, m), vec![]),
            (Config::new(4, 2, 100, m), vec![5, 7]),
            (Config::new(1, 4, 24, m), vec![96]),
            (Config::new(3, 1, 10, m), vec![10; 7]),
            (Config::new(2, 8, 26 * 1024, m), vec![8 * 26 * 1024; 5]),
            (Config::new(2, 3, 7, m), vec![1, 21, 7, 7, 3, 20, 2, 19]),
            (Config::new(5, 16, 64, m), vec![1; 33]),
        ];
        for (cfg, lengths) in &cases {
            let (p, per_dp) = run(cfg, lengths).unwrap();
            assert_eq!(p.len(), lengths.len());
            assert_eq!(per_dp.len(), cfg.dp as usize);
        }
    }

    #[test]
    fn random_batches_are_valid_and_deterministic() {
        let mut rng = Rng(42);
        for i in 0..300 {
            let dp = [1u32, 2, 3, 4, 8][i % 5];
            let cp = [1u32, 2, 4, 7, 8, 16][i % 6];
            let bucket = [7u32, 64, 1000, 4096, 13 * 1024][i % 5];
            let model = [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B][i % 2];
            let mut cfg = Config::new(dp, cp, bucket, model)
                .with_victim([Victim::Shortest, Victim::Longest][i % 2]);
            if i % 3 == 0 {
                cfg.shard_padding = ShardPadding::Zigzag;
            }
            let max = (1..=cp * bucket)
                .rev()
                .find(|&s| cfg.shard_tokens(s) <= bucket)
                .unwrap_or(1);
            let n = (rng.next() % 150) as usize;
            let lengths = long_tail(&mut rng, n, max);
            let a = run(&cfg, &lengths).unwrap();
            let b = run(&cfg, &lengths).unwrap();
            assert_eq!(a, b, "{cfg:?} {lengths:?}");
        }
    }

    #[test]
    fn the_micro_batch_limit_is_an_error_naming_the_rank() {
        let mut cfg = Config::new(1, 4, 20, ModelShape::QWEN2_5_0_5B);
        cfg.max_micro_batches = 1;
        assert_eq!(
            run(&cfg, &EXAMPLE).unwrap_err(),
            Error::MicroBatchLimit {
                dp_rank: 0,
                limit: 1,
                needed: 2
            }
        );
        cfg.max_micro_batches = 2;
        assert!(run(&cfg, &EXAMPLE).is_ok());
    }

    /// Plans with the lower-bound skipping of attempts on and off; both must give the same
    /// placements and micro-batch counts.
    fn same_with_and_without_shortcuts(cfg: &Config, lengths: &[u32]) {
        let cfg = cfg.with_policy(Policy::Balanced);
        let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
        let mut got = Vec::new();
        for shortcuts in [true, false] {
            let mut bufs = OwnedPlan::filled(lengths.len(), &cfg, 3);
            let (mut ws, out) = bufs.parts();
            let setup = Setup::new(&cfg).unwrap();
            let mut rows = ws.carve(lengths.len(), cfg.dp as usize, true).unwrap();
            let plan = plan_with(&setup, lengths, &mut rows, out, total, shortcuts).unwrap();
            assert_eq!(plan::check(&setup_of(&cfg), lengths, &plan), Ok(()));
            got.push((
                plan.placements().to_vec(),
                plan.micro_batches_per_dp().to_vec(),
            ));
        }
        let differ = got[0]
            .0
            .iter()
            .zip(&got[1].0)
            .filter(|(a, b)| a != b)
            .count();
        assert!(
            got[0] == got[1],
            "{differ} placements differ with the shortcuts on: {cfg:?}"
        );
    }

    /// Regression: skipping attempts by their lower bound once changed a plan on a batch whose
    /// time terms reach the integer model's clamp (lengths up to 2^31 on a 1.8G-token budget:
    /// a rank's clamped GEMM time is below the per-member sum the bound averaged). Skipping
    /// must never change a plan, saturated or not.
    #[test]
    fn skipping_attempts_by_their_bound_never_changes_a_plan() {
        let mut rng = Rng(2676);
        let mut cfg = Config::new(11, 2, 1_817_347_190, ModelShape::QWEN2_5_7B);
        cfg.shard_padding = ShardPadding::Zigzag;
        let huge: Vec<u32> = (0..2467)
            .map(|_| 1 + (rng.next() % (1 << 31)) as u32)
            .filter(|&l| cfg.budget().fits_sharded(l))
            .collect();
        same_with_and_without_shortcuts(&cfg, &huge);
        for i in 0..40 {
            let dp = [1u32, 2, 4][i % 3];
            let cp = [2u32, 8, 16][i % 3];
            let cfg = Config::new(dp, cp, 26 * 1024, ModelShape::QWEN2_5_0_5B);
            let lengths = long_tail(&mut rng, 64 + i * 7, cp * 26 * 1024);
            same_with_and_without_shortcuts(&cfg, &lengths);
        }
    }

    /// The closed form of a one-sequence micro-batch ([`Placer::lone`]) gives the state
    /// machine's plan: batches with one sequence per DP rank and mixed ones, every CP size
    /// from 1 to 16, both shard paddings, pad multiples and padded local sequences, both
    /// overlap windows, sub-groups on, free and saturated cost models, and budgets from the
    /// tightest (sequences that fit only sharded) to roomy.
    #[test]
    fn one_sequence_micro_batches_in_closed_form_match_the_state_machine() {
        use crate::config::cost::CostModel;
        use crate::config::cost::Overlap;
        let mut rng = Rng(4242);
        let shape = ModelShape::QWEN2_5_0_5B;
        let cases = if cfg!(miri) { 4 } else { 160 };
        let mut compared = 0;
        for i in 0..cases {
            let n = 1 + (rng.next() % 40) as usize;
            let cp = 1 + (i % 16) as u32;
            let lengths: Vec<u32> = (0..n).map(|_| 1 + (rng.next() % 5000) as u32).collect();
            let longest = lengths.iter().copied().max().unwrap_or(1);
            let bucket = match i % 4 {
                0 => longest.div_ceil(cp) + 64,
                1 => longest / 2 + 64,
                _ => longest + (rng.next() % 4000) as u32,
            };
            // One sequence per DP rank, or about four.
            let dp = if i % 3 == 0 { n.div_ceil(4) } else { n } as u32;
            let mut cost = CostModel::h100(&shape);
            match i % 5 {
                1 => cost.overlap = Overlap::AllAttention,
                2 => cost.kernel_launch_s = 1000.0,
                3 => {
                    cost.ring_step_latency_s = 0.0;
                    cost.inter_node_ring_step_latency_s = 0.0;
                }
                _ => {}
            }
            let mut cfg = Config::new(dp, cp, bucket, shape).with_cost(cost);
            cfg.shard_padding = [ShardPadding::None, ShardPadding::Zigzag][i % 2];
            cfg.pad_multiple = [1, 1, 8, 24][(i / 2) % 4];
            cfg.pad_local = i % 7 == 0;
            cfg.subgroups = i % 2 == 1;
            if cfg.validate().is_err() || !lengths.iter().all(|&l| cfg.budget().fits_sharded(l)) {
                continue;
            }
            same_with_and_without_shortcuts(&cfg, &lengths);
            compared += 1;
        }
        assert!(compared * 4 >= cases * 3, "{compared} of {cases}");
    }

    /// Regression (fuzz `rust_api`, a caller cost model with a 1,000 s kernel launch): the
    /// fixed cost of a micro-batch saturated the search's sums, so every grouping looked no
    /// better than "no plan yet" and the policy returned `DacpFailed`. Absurd models must
    /// still give a valid plan.
    #[test]
    fn saturated_cost_models_still_plan() {
        use crate::config::cost::CostModel;
        let lengths = [1u32, 45, 73, 73, 73, 9, 1, 1, 81, 105, 41, 70, 37, 1];
        let shape = ModelShape::QWEN2_5_0_5B;
        let edits: [fn(&mut CostModel); 4] = [
            |c| c.kernel_launch_s = 1000.0,
            |c| c.micro_batch_extra_s = 1e9,
            |c| c.ring_step_latency_s = 1e6,
            |c| c.hbm_bandwidth = 1e-3,
        ];
        for edit in edits {
            let mut cost = CostModel::h100(&shape);
            edit(&mut cost);
            for (dp, cp, bucket) in [(1, 16, 7), (2, 4, 64), (1, 1, 200)] {
                let cfg = Config::new(dp, cp, bucket, shape).with_cost(cost);
                run(&cfg, &lengths).unwrap();
            }
        }
    }

    /// Sub-groups on CP 16 (rings across two 8-GPU nodes): plans stay valid, use sub-groups on
    /// long-sequence batches, and are never slower under the evaluator than the same policy
    /// without them; inside a node (CP 8) they are not tried.
    #[test]
    fn subgroups_are_never_slower_and_only_where_rings_cross_nodes() {
        use crate::model::eval::{
            EvalBuffers, EvalSizes, MicroBatchTime, RankSlot, evaluate_placements,
        };
        let time = |cfg: &Config, lengths: &[u32]| {
            let (p, _) = run(cfg, lengths).unwrap();
            let es = EvalSizes::for_batch(lengths.len(), cfg);
            let mut a = vec![MicroBatchTime::default(); es.micro_batches];
            let mut b = vec![RankSlot::default(); es.ranks];
            let mut d = vec![0.0; es.dp_times];
            let mut o = vec![0u32; es.dp_offsets];
            let out = EvalBuffers {
                micro_batches: &mut a,
                ranks: &mut b,
                dp_times: &mut d,
                dp_offsets: &mut o,
            };
            let ev = evaluate_placements(&setup_of(cfg), lengths, &p, out).unwrap();
            assert!(ev.report.within_budget());
            let subs = p.iter().filter(|x| x.is_subgroup(cfg.cp)).count();
            (ev.report.iteration_time, subs)
        };
        let mut rng = Rng(14);
        let mut used = 0;
        for i in 0..12 {
            let (dp, model, bucket) = [
                (2, ModelShape::QWEN2_5_7B, 13 * 1024),
                (1, ModelShape::QWEN2_5_0_5B, 26 * 1024),
            ][i % 2];
            let on = Config::new(dp, 16, bucket, model);
            let off = Config {
                subgroups: false,
                ..on
            };
            let lengths = long_tail(&mut rng, 40, 16 * bucket);
            if cfg!(miri) && i != 7 {
                continue; // miri plans one batch that uses a sub-group (each takes ~30 s there)
            }
            let (t_on, subs) = time(&on, &lengths);
            let (t_off, none) = time(&off, &lengths);
            assert_eq!(none, 0);
            assert!(t_on <= t_off * (1.0 + 1e-9), "{t_on} > {t_off}");
            used += subs;
            let inside = Config::new(2, 8, bucket, model);
            let fit: Vec<u32> = lengths.iter().map(|&l| l.min(8 * bucket)).collect();
            assert_eq!(time(&inside, &fit).1, 0);
        }
        assert!(used > 0, "no batch used a sub-group");
    }

    /// Against the evaluator: on long-tail batches `balanced` is never slower than `packed`
    /// or `skrull` by more than the integer model's rounding.
    #[test]
    fn not_slower_than_skrull_or_packed_on_long_tail_batches() {
        use crate::model::eval::{
            EvalBuffers, EvalSizes, MicroBatchTime, RankSlot, evaluate_placements,
        };
        let mut rng = Rng(7);
        let cfg = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        let time = |policy: Policy, lengths: &[u32]| {
            let c = cfg.with_policy(policy);
            let n = lengths.len();
            let mut bufs = OwnedPlan::new(n, &c);
            let plan = bufs.schedule(&c, lengths).unwrap();
            let es = EvalSizes::for_batch(n, &c);
            let mut a = vec![MicroBatchTime::default(); es.micro_batches];
            let mut b = vec![RankSlot::default(); es.ranks];
            let mut d = vec![0.0; es.dp_times];
            let mut o = vec![0u32; es.dp_offsets];
            let ev = evaluate_placements(
                &setup_of(&c),
                lengths,
                plan.placements(),
                EvalBuffers {
                    micro_batches: &mut a,
                    ranks: &mut b,
                    dp_times: &mut d,
                    dp_offsets: &mut o,
                },
            )
            .unwrap();
            assert!(ev.report.within_budget());
            ev.report.iteration_time
        };
        let (mut ours, mut theirs) = (0.0, 0.0);
        for _ in 0..10 {
            let lengths = long_tail(&mut rng, 256, 8 * 26 * 1024);
            let b = time(Policy::Balanced, &lengths);
            let best = time(Policy::Packed, &lengths).min(time(Policy::Skrull, &lengths));
            ours += b;
            theirs += best;
        }
        assert!(ours * 1.1 < theirs, "{ours} vs {theirs}");
    }
}
