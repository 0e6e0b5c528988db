//! The candidate groupings of one DP rank's sequences into micro-batches ([`Grouping`],
//! [`group`]), the planning of every micro-batch of a grouping ([`run_grouping`]) and the
//! search that keeps the fastest ([`DpRanks::search`]), staging its decisions in the
//! workspace ([`MarkRows`]).

use heapless::Vec as HVec;

use super::costs::Rows;
use super::placer::Placer;
use super::write::Scratch;
use crate::config::Config;
#[cfg(doc)]
use crate::config::cp_group::Decision;
use crate::error::Error;
use crate::kernel::group::{max_strided_sum, next_fit};
use crate::model::fixed::{IntModel, Link};
use crate::model::time::{Ring, TimeModel};
use crate::plan::Placement;

/// Most bins of the LPT grouping (its state lives on the stack).
const MAX_BINS: usize = 256;

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
        Grouping::Lpt(m) => lpt_bins(im, cfg.bucket, rows, sub, m, set),
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

/// [`Grouping::Lpt`] into `m > 1` bins: sequences longest first into the bin with the least
/// [`work`](super::costs::work) whose shares stay within `bucket`; `set(seq, bin)` records
/// each. `None` when a sequence fits no bin (or `m` exceeds [`MAX_BINS`]).
#[inline(always)]
fn lpt_bins(
    im: &IntModel,
    bucket: u32,
    rows: &Rows<'_>,
    sub: &[u32],
    m: usize,
    mut set: impl FnMut(u32, u32),
) -> Option<usize> {
    if m > MAX_BINS {
        return None;
    }
    // (load, tokens) per bin; only the m bins in use are initialised.
    let mut bins: HVec<(u64, u64), MAX_BINS> = HVec::new();
    for _ in 0..m {
        let _ = bins.push((0, 0));
    }
    let cap = u64::from(bucket);
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

/// The workspace rows `balanced` stages its decisions in (`Workspace::marks`, `4n` words);
/// decisions are [`Decision`] words ([`Decision::to_word`]), never the caller's buffers.
pub(super) struct MarkRows<'a> {
    /// Per sequence: its DP rank (while the DP ranks are assigned), then its micro-batch in
    /// the grouping being tried.
    pub(super) mb_of: &'a mut [u32],
    /// Per sequence: its decision in the fastest grouping so far of its DP rank (its
    /// micro-batch is in the placements).
    pub(super) kept: &'a mut [u32],
    /// Two rows: per sequence its decision in the grouping being tried, and per member of the
    /// micro-batch being placed its working decision.
    work: &'a mut [u32],
}

impl<'a> MarkRows<'a> {
    /// Splits the workspace's `marks` (at least `4n` words: the workspace check guarantees
    /// it) into its rows of `n` words.
    pub(super) fn split(marks: &'a mut [u32], n: usize) -> MarkRows<'a> {
        let marks = marks.get_mut(..4 * n).unwrap_or_default();
        let (mb_of, rest) = marks.split_at_mut(n.min(marks.len()));
        let (kept, work) = rest.split_at_mut(n.min(rest.len()));
        MarkRows { mb_of, kept, work }
    }

    /// The rows as the plan writer's scratch once every DP rank is searched (`base`: at least
    /// `dp + 1` words, each DP rank's micro-batch count then 0, see [`Scratch::base`]):
    /// `mb_of` becomes the order, the two working rows the counts.
    pub(super) fn for_writing<'b>(&'b mut self, base: &'b mut [u32]) -> Scratch<'b> {
        Scratch {
            base,
            order: &mut *self.mb_of,
            counts: &mut *self.work,
            kept: &mut *self.kept,
        }
    }
}

/// Plans every micro-batch of the grouping in `marks.mb_of` (`gather`: at least `sub.len()`
/// words); writes each sequence's decision into the grouping's row and returns the DP rank's
/// total time, or `None` when a micro-batch cannot meet memory or the total reaches `stop`.
#[inline(always)]
fn run_grouping(
    placer: &mut Placer<'_>,
    sub: &[u32],
    m: usize,
    marks: &mut MarkRows<'_>,
    gather: &mut [u32],
    stop: u64,
) -> Option<u64> {
    let k_all = sub.len().min(gather.len());
    let gather = &mut gather[..k_all];
    gather_members(sub, m, marks.mb_of, gather);
    let mb_of = &*marks.mb_of;
    let mb = |s: u32| mb_of.get(s as usize).copied().unwrap_or(u32::MAX);
    let (dec, cur) = {
        let n = mb_of.len().min(marks.work.len());
        marks.work.split_at_mut(n)
    };
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
        let t = placer.micro_batch(members, &mut cur[..k], dec)?;
        total = total.saturating_add(t);
        // Without a best total yet (`stop == u64::MAX`) the grouping always completes, even
        // when its total saturates.
        if stop != u64::MAX && total >= stop {
            return None;
        }
    }
    Some(total)
}

/// Writes the members of every micro-batch of `sub` (by `mb_of`) into `gather`, grouped by
/// micro-batch, heaviest first: `sub` is ascending by (length, index), so reversed: longest
/// first, ties higher index first. `sub` reversed for one micro-batch, a counting sort for up
/// to [`MAX_BINS`], else the positions sorted by (micro-batch, position descending), all
/// giving the same order.
#[inline(always)]
fn gather_members(sub: &[u32], m: usize, mb_of: &[u32], gather: &mut [u32]) {
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
}

/// One DP rank's candidate search: the fastest grouping so far, its micro-batches in the
/// placements and its decisions in `marks.kept`.
struct DpSearch<'c, 'p, 'm> {
    placer: &'c mut Placer<'p>,
    sub: &'c [u32],
    marks: &'c mut MarkRows<'m>,
    /// Scratch for the groupings and the members of each micro-batch.
    gather: &'c mut [u32],
    placements: &'c mut [Placement],
    /// Sum over the rank's sequences of [`work`](super::costs::work) divided by `N`: with
    /// `m x fixed`, a lower bound on any grouping into `m` micro-batches.
    work: u64,
    best: Option<u64>,
    /// The micro-batch count of the fastest grouping so far.
    best_m: usize,
    fewest: usize,
    tried_single: bool,
}

impl DpSearch<'_, '_, '_> {
    /// Plans grouping `g`; keeps it if it is the fastest so far.
    fn try_grouping(&mut self, g: Grouping) {
        let p = &*self.placer;
        let Some(m) = group(
            p.ledger.im,
            p.cfg,
            &p.ledger.rows,
            self.sub,
            g,
            self.marks.mb_of,
            self.gather,
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
        let Some(t) = run_grouping(self.placer, self.sub, m, self.marks, self.gather, stop) else {
            return;
        };
        self.best = Some(t);
        self.best_m = m;
        self.keep();
    }

    /// Keeps the grouping just planned: each sequence's micro-batch into its placement, its
    /// decision into `marks.kept`.
    fn keep(&mut self) {
        let marks = &mut *self.marks;
        // Every row cut to one length: one bounds check per sequence.
        let n = (marks.mb_of.len().min(marks.work.len()))
            .min(marks.kept.len())
            .min(self.placements.len());
        let (Some(pl), Some(mb), Some(dec), Some(kept)) = (
            self.placements.get_mut(..n),
            marks.mb_of.get(..n),
            marks.work.get(..n),
            marks.kept.get_mut(..n),
        ) else {
            return;
        };
        for &s in self.sub {
            let i = s as usize;
            if i < n {
                pl[i].micro_batch = mb[i];
                kept[i] = dec[i];
            }
        }
    }
}

/// The search over every DP rank: the links of a DP rank's ring (its whole CP group, within
/// a node or across nodes) and where each DP rank's ring sits.
pub(super) struct DpRanks<'t> {
    tm: &'t TimeModel,
    /// The whole group's ring inside a node and across nodes.
    links: (Link, Link),
}

impl<'t> DpRanks<'t> {
    /// The rings of `tm`'s DP ranks, timed by `im`.
    pub(super) fn new(tm: &'t TimeModel, im: &IntModel) -> DpRanks<'t> {
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
        DpRanks { tm, links }
    }

    /// Searches DP rank `d`'s groupings of its sequences `sub`: an LPT grouping into the
    /// fewest micro-batches the tokens allow, `packed`'s next-fit with one DP rank, and, only
    /// when neither fits, growing counts. Keeps the fastest in the placements and
    /// `marks.kept`, and returns its micro-batch count (0 without sequences): every kept
    /// micro-batch index is below it.
    ///
    /// # Errors
    /// [`Error::MicroBatchLimit`] when no grouping fits `cfg.max_micro_batches`, else
    /// [`Error::DacpFailed`] when none fits at all.
    // Inlined (one caller): out of line it cost up to 4 % more instructions with one sequence
    // per DP rank.
    #[inline(always)]
    pub(super) fn search(
        &self,
        placer: &mut Placer<'_>,
        d: u32,
        sub: &[u32],
        marks: &mut MarkRows<'_>,
        gather: &mut [u32],
        placements: &mut [Placement],
    ) -> Result<usize, Error> {
        let k = sub.len();
        if k == 0 {
            return Ok(0);
        }
        let cfg = placer.cfg;
        let rows = placer.ledger.rows;
        let cap = u64::from(cfg.bucket) * u64::from(cfg.cp);
        let sum: u64 = sub.iter().map(|&s| u64::from(rows.len(s))).sum();
        let work_sum: u64 = sub.iter().map(|&s| rows.work(s)).sum();
        let m_min = (sum.div_ceil(cap).max(1) as usize).min(k);
        let ring = self.tm.group_ring(d);
        placer.ledger.link = if ring.crosses_nodes {
            self.links.1
        } else {
            self.links.0
        };
        placer.ledger.dp = d;
        placer.ledger.crosses = ring.crosses_nodes;
        let mut search = DpSearch {
            placer,
            sub,
            marks,
            gather,
            placements,
            work: work_sum / u64::from(cfg.cp.max(1)),
            best: None,
            best_m: 0,
            fewest: usize::MAX,
            tried_single: false,
        };
        search.try_grouping(Grouping::Lpt(m_min));
        if cfg.dp == 1 {
            // The packed-style grouping. With one DP rank it is `packed`'s own grouping, so
            // `balanced` never plans worse than `packed` there; with more it never won on the
            // measured rows (docs/balanced.md) and cost a third of the latency.
            search.try_grouping(Grouping::NextFit);
        }
        if search.placer.ledger.im.seq_fixed() > 0 && m_min < k {
            // Sharded sequences cost a fixed cost each: a grouping with one more micro-batch
            // may keep more of them whole (the shard-budget bins of the fewest micro-batches
            // can leave no rank room for them), and so may GDS's interleave.
            search.try_grouping(Grouping::Lpt(m_min + 1));
            search.try_grouping(Grouping::Strided(m_min));
            search.try_grouping(Grouping::Strided(m_min + 1));
        }
        if search.best.is_none() {
            search.grow(m_min);
        }
        if search.best.is_some() {
            return Ok(search.best_m);
        }
        if cfg.max_micro_batches != 0 && search.fewest != usize::MAX {
            return Err(Error::MicroBatchLimit {
                dp_rank: d,
                limit: cfg.max_micro_batches,
                needed: search.fewest as u32,
            });
        }
        Err(Error::DacpFailed { cp_rank: 0 })
    }
}

impl DpSearch<'_, '_, '_> {
    /// The rare fallback (a micro-batch limit, or budgets so tight that the shard-budget bins
    /// do not fit): grows `m` from `m_min` as GDS does, with its strided interleave too, up
    /// to one sequence per micro-batch, which always fits sharded.
    fn grow(&mut self, m_min: usize) {
        let k = self.sub.len();
        let top = match self.placer.cfg.max_micro_batches {
            0 => k,
            limit => k.min(limit as usize),
        };
        let mut m = m_min;
        while self.best.is_none() && m <= top {
            self.try_grouping(Grouping::Lpt(m));
            self.try_grouping(Grouping::Strided(m));
            m += 1;
        }
        if self.best.is_none() {
            self.try_grouping(Grouping::Strided(k));
        }
    }
}
