//! `balanced`'s rule and bookkeeping for the CP-rank state machine ([`TimeLedger`]): the
//! estimated time of every CP rank of one micro-batch, with the sharded sequences' totals
//! and their rings, sub-group rings included ([`sub_links`]).

use heapless::Vec as HVec;

use super::costs::Rows;
use crate::config::cp_group::{CpGroup, GROUP_LEVELS};
use crate::config::limits::MAX_CP;
use crate::kernel::ranks::Ledger;
use crate::model::fixed::{IntModel, Link};
use crate::model::time::Ring;

/// This policy's rule and bookkeeping: estimated time per CP rank, the sharded sequences'
/// totals and their ring communication; a local sequence goes to the rank whose time grows
/// least.
pub(super) struct TimeLedger<'a> {
    /// The integer cost model.
    pub(super) im: &'a IntModel,
    /// The per-sequence cost rows.
    pub(super) rows: Rows<'a>,
    /// The ring of the DP rank being planned.
    pub(super) link: Link,
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
    /// Sequences sharded over the whole group (each costs its fixed cost on every rank).
    sh_seqs: u64,
    /// Stop as soon as a rank reaches this time (the best candidate so far).
    pub(super) bound: u64,
    /// Sub-group rings: the DP rank being planned (where its rings sit), the links of a
    /// sub-group ring of `2^(l+1)` ranks inside a node and across nodes, and per rank the
    /// shard attention and ring communication of the sub-groups through it (their shares
    /// are in `tok`). `ring_len` holds the tokens sharded over each sub-group ring.
    pub(super) dp: u32,
    sub_links: [(Link, Link); GROUP_LEVELS],
    sub_attn: HVec<u64, { MAX_CP as usize }>,
    sub_comm: HVec<u64, { MAX_CP as usize }>,
    /// Per rank, the sequences sharded over sub-groups through it.
    sub_seqs: HVec<u64, { MAX_CP as usize }>,
    ring_len: HVec<u64, { MAX_CP as usize }>,
    /// Whether a sub-group holds a sequence in this attempt (else the fast `pick`).
    has_sub: bool,
    /// Whether the DP rank's whole-group ring crosses nodes.
    pub(super) crosses: bool,
}

impl<'a> TimeLedger<'a> {
    /// An empty ledger over `im` and the cost `rows` for a CP group of `cp` ranks, with the
    /// sub-group ring links ([`sub_links`]); [`Ledger::reset`] sizes it for a micro-batch.
    // Inlined: built in place in the caller's frame (out of line, its rows were zeroed by a
    // 6 KiB memset per call).
    #[inline(always)]
    pub(super) fn new(im: &'a IntModel, rows: Rows<'a>, cp: u32) -> TimeLedger<'a> {
        TimeLedger {
            im,
            rows,
            link: Link::default(),
            attn: HVec::new(),
            tok: HVec::new(),
            gl: HVec::new(),
            sh_len: 0,
            sh_tok: 0,
            sh_attn: 0,
            comm: 0,
            sh_seqs: 0,
            bound: u64::MAX,
            dp: 0,
            sub_links: sub_links(im, cp),
            sub_attn: HVec::new(),
            sub_comm: HVec::new(),
            sub_seqs: HVec::new(),
            ring_len: HVec::new(),
            has_sub: false,
            crosses: false,
        }
    }
}

impl TimeLedger<'_> {
    /// Rank `r`'s time so far, ps.
    #[inline]
    pub(super) fn rank_time(&self, r: usize) -> u64 {
        let a = self.attn.get(r).copied().unwrap_or(0);
        let t = self.tok.get(r).copied().unwrap_or(0);
        if self.has_sub {
            let sa = self.sub_attn.get(r).copied().unwrap_or(0);
            let sc = self.sub_comm.get(r).copied().unwrap_or(0);
            let ss = self.sub_seqs.get(r).copied().unwrap_or(0);
            self.im.rank(
                a,
                t + self.sh_tok,
                self.sh_attn + sa,
                self.comm + sc,
                self.sh_seqs + ss,
            )
        } else {
            self.im
                .rank(a, t + self.sh_tok, self.sh_attn, self.comm, self.sh_seqs)
        }
    }

    /// Where sub-group ring `group` keeps its tokens in `ring_len`
    /// ([`CpGroup::ring_index`]).
    #[inline(always)]
    fn ring_index(&self, group: CpGroup) -> usize {
        group.ring_index(self.im.cp())
    }

    /// The link of sub-group ring `group` of the DP rank being planned.
    fn sub_link(&self, group: CpGroup) -> Link {
        let level = group.level();
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

    /// The communication term of every rank of `group` if a sequence of `len` tokens were
    /// sharded over it (the whole group, or a sub-group), ps: the same for each of its ranks,
    /// so a caller computes it once per group. Each rank adds its own sub-group rings' term
    /// in [`TimeLedger::rank_time_in`].
    #[inline]
    pub(super) fn group_comm(&self, group: CpGroup, len: u32) -> u64 {
        if group.size == self.im.cp() {
            return self.im.comm(&self.link, self.sh_len + u64::from(len));
        }
        let at = self.ring_index(group);
        let held = self.ring_len.get(at).copied().unwrap_or(0);
        let link = self.sub_link(group);
        let grown = self.im.comm(&link, held + u64::from(len)) - self.im.comm(&link, held);
        self.comm + grown
    }

    /// Time of rank `r` if a sequence were sharded over a group through `r` that adds `share`
    /// tokens and `attn` attention to each of its ranks, with the group's communication term
    /// `comm` ([`TimeLedger::group_comm`]), ps.
    #[inline(always)]
    pub(super) fn rank_time_in(&self, r: usize, share: u64, attn: u64, comm: u64) -> u64 {
        let a = self.attn.get(r).copied().unwrap_or(0);
        let t = self.tok.get(r).copied().unwrap_or(0);
        let sa = self.sub_attn.get(r).copied().unwrap_or(0);
        let sc = self.sub_comm.get(r).copied().unwrap_or(0);
        let ss = self.sub_seqs.get(r).copied().unwrap_or(0);
        self.im.rank(
            a,
            t + self.sh_tok + share,
            self.sh_attn + attn + sa,
            comm + sc,
            self.sh_seqs + ss + 1,
        )
    }

    /// Shards sequence `seq` (`len` tokens) over sub-group `group`.
    pub(super) fn group(&mut self, seq: u32, len: u32, group: CpGroup) {
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
            if let (Some(t), Some(g), Some(sa), Some(sc), Some(ss)) = (
                self.tok.get_mut(r),
                self.gl.get_mut(r),
                self.sub_attn.get_mut(r),
                self.sub_comm.get_mut(r),
                self.sub_seqs.get_mut(r),
            ) {
                *t += share;
                *g = self.im.gemm_linear(*t);
                *sa += attn;
                *sc += grown;
                *ss += 1;
            }
        }
        self.has_sub = true;
    }

    /// The micro-batch's time: its slowest rank's, ps.
    pub(super) fn time(&self) -> u64 {
        if self.has_sub {
            return (0..self.attn.len())
                .map(|r| self.rank_time(r))
                .max()
                .unwrap_or(0);
        }
        // Without sub-groups the ranks differ only in their local attention and tokens.
        self.im.slowest(
            &self.attn,
            &self.tok,
            self.sh_tok,
            self.sh_attn,
            self.comm,
            self.sh_seqs,
        )
    }

    /// Adds (`sign`) or removes a local sequence of `len` tokens and whole attention `aw`
    /// on rank `r`.
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
            for v in [
                &mut self.sub_attn,
                &mut self.sub_comm,
                &mut self.sub_seqs,
                &mut self.ring_len,
            ] {
                v.fill(0);
            }
            self.has_sub = false;
        }
        for v in [
            &mut self.sub_attn,
            &mut self.sub_comm,
            &mut self.sub_seqs,
            &mut self.ring_len,
        ] {
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
        self.sh_seqs = 0;
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
                // The fixed cost of the sub-group sequences through this rank (the whole
                // group's is every rank's, so it changes no choice).
                let t = (self.comm + sc).max(attn + aw + extra)
                    + gl
                    + self.im.seqs_fixed(self.sub_seqs[r]);
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
        self.sh_seqs += 1;
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
pub(super) fn sub_links(im: &IntModel, cp: u32) -> [(Link, Link); GROUP_LEVELS] {
    let mut links = [(Link::default(), Link::default()); GROUP_LEVELS];
    for (l, slot) in links.iter_mut().enumerate() {
        let size = CpGroup::level_size(l);
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
