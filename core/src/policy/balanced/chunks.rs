//! Chunking inside `balanced` ([`Config::chunking`] on): once every DP rank's micro-batches
//! are placed, each micro-batch tries running its longest sharded sequences chunked instead
//! ([`Chunking`]: in order on one GPU or an aligned group), and keeps a change only when it
//! lowers the micro-batch's estimated time under the integer cost model and every GPU stays
//! within BucketSize.
//!
//! For each micro-batch, up to [`MAX_TRIES`] chunkable sharded sequences, longest first
//! (ties: input order), each on every aligned group of 1, 2, 4, ... ranks and the whole
//! group (ties: the earlier candidate). The micro-batch time is recomputed from its members'
//! decisions as the evaluator does ([`crate::model::eval`]): per rank the local, sharded and
//! sub-group work and rings, plus the chunked passes of the groups it belongs to. Chunk passes
//! are estimated in integers like the rest of the policy; recomputation is taken as a third
//! of a pass (its forward), the evaluator charges it exactly.

use crate::config::Config;
use crate::config::chunking::Chunking;
use crate::config::cp_group::{CpGroup, Decision, GROUP_LEVELS};
use crate::config::limits::MAX_CP;
use crate::model::fixed::{IntModel, Link};
use crate::model::time::TimeModel;

/// How many sharded sequences of one micro-batch may be tried chunked.
pub const MAX_TRIES: usize = 4;

/// The first code of a chunked decision: a group of `2^l` ranks from `first` is
/// `CHUNK_BASE - (first | l << 9)` (`first < 512`, `l <= 8`), below every [`Decision`] code.
const CHUNK_BASE: i32 = -16_384;

/// A chunked decision's code.
pub(super) fn chunk_code(group: CpGroup) -> i32 {
    let l = group.size.trailing_zeros() as i32;
    CHUNK_BASE - ((group.first as i32 & 0x1FF) | (l << 9))
}

/// The group of a chunked decision's code, `None` for any other code.
#[inline(always)]
pub(super) fn chunk_of_code(code: i32) -> Option<CpGroup> {
    if code > CHUNK_BASE || code <= CHUNK_BASE - (9 << 9) {
        return None;
    }
    let c = CHUNK_BASE - code;
    Some(CpGroup {
        first: (c & 0x1FF) as u32,
        size: 1 << ((c >> 9) & 0xF),
    })
}

/// Per-rank loads of one micro-batch, as the evaluator sums them.
struct Loads {
    local_attn: [u64; MAX_CP as usize],
    sh_attn: [u64; MAX_CP as usize],
    tokens: [u64; MAX_CP as usize],
    chunk: [u64; MAX_CP as usize],
    held: [u64; MAX_CP as usize],
    /// Tokens sharded over each sub-group ring (by [`CpGroup::ring_index`]).
    ring_len: [u64; MAX_CP as usize],
}

/// What the chunking pass needs: the configuration, both forms of the model, the DP rank's
/// whole-group link and the launch cost of one pass.
pub(super) struct Chunker<'m> {
    cfg: &'m Config,
    im: &'m IntModel,
    tm: &'m TimeModel,
    launch_ps: u64,
}

impl<'m> Chunker<'m> {
    /// The pass for `cfg` (chunking on) and its models.
    pub(super) fn new(cfg: &'m Config, im: &'m IntModel) -> Chunker<'m> {
        let tm = im.time_model();
        let launch_ps = (tm.pass_fixed() * 1e12 + 0.5).clamp(0.0, 1e15) as u64;
        Chunker {
            cfg,
            im,
            tm,
            launch_ps,
        }
    }

    /// Tries chunking the longest sharded members of one micro-batch of DP rank `d`
    /// (`members`; their decisions in `kept`, as [`Decision`] words or chunk codes).
    pub(super) fn improve(&self, d: u32, members: &[u32], lengths: &[u32], kept: &mut [u32]) {
        let chunking = &self.cfg.chunking;
        let mut tried = [u32::MAX; MAX_TRIES];
        let mut best = None;
        for t in 0..MAX_TRIES {
            let Some(seq) = self.next_candidate(members, lengths, kept, &tried) else {
                return;
            };
            tried[t] = seq;
            if best.is_none() {
                best = self.time(d, members, lengths, kept);
            }
            let len = lengths[seq as usize];
            let mut choice = kept[seq as usize];
            for group in chunk_groups(self.cfg.cp) {
                let peak = self.cfg.budget().chunked(chunking, len, group.size);
                if peak > u64::from(self.cfg.bucket) {
                    continue;
                }
                kept[seq as usize] = chunk_code(group) as u32;
                if let Some(time) = self.time(d, members, lengths, kept)
                    && best.is_none_or(|b| time < b)
                {
                    best = Some(time);
                    choice = kept[seq as usize];
                }
            }
            kept[seq as usize] = choice;
        }
    }

    /// The longest chunkable sharded member not tried yet (ties: the lower index).
    fn next_candidate(
        &self,
        members: &[u32],
        lengths: &[u32],
        kept: &[u32],
        tried: &[u32],
    ) -> Option<u32> {
        let mut best: Option<(u32, u32)> = None;
        for &seq in members {
            let len = lengths[seq as usize];
            let word = kept[seq as usize] as i32;
            let sharded = word < 0 && chunk_of_code(word).is_none() && word != i32::MIN;
            if !sharded || !self.cfg.chunking.can_chunk(len) || tried.contains(&seq) {
                continue;
            }
            if best.is_none_or(|(l, s)| len > l || (len == l && seq < s)) {
                best = Some((len, seq));
            }
        }
        best.map(|(_, s)| s)
    }

    /// The micro-batch's estimated time, ps, or `None` when a GPU exceeds BucketSize.
    fn time(&self, d: u32, members: &[u32], lengths: &[u32], kept: &[u32]) -> Option<u64> {
        let cp = self.cfg.cp as usize;
        let im = self.im;
        let mut l = Loads {
            local_attn: [0; MAX_CP as usize],
            sh_attn: [0; MAX_CP as usize],
            tokens: [0; MAX_CP as usize],
            chunk: [0; MAX_CP as usize],
            held: [0; MAX_CP as usize],
            ring_len: [0; MAX_CP as usize],
        };
        let (mut whole_attn, mut whole_tok, mut whole_len) = (0u64, 0u64, 0u64);
        let mut whole_seqs = 0u64;
        for &seq in members {
            let len = lengths[seq as usize];
            let word = kept[seq as usize] as i32;
            if let Some(g) = chunk_of_code(word) {
                self.add_chunked(&mut l, d, g, len);
                continue;
            }
            match Decision::from_code(word) {
                Decision::Local(r) => {
                    let r = r as usize;
                    l.local_attn[r] += im.attn_whole(len);
                    l.tokens[r] += u64::from(im.local(len));
                    l.held[r] += u64::from(im.local(len));
                }
                Decision::Sub(g) => {
                    let share = im.share_in(len, g.size);
                    let attn = im.attention(share, len);
                    for r in g.first as usize..(g.first + g.size) as usize {
                        l.sh_attn[r] += attn;
                        l.tokens[r] += u64::from(share);
                        l.held[r] += u64::from(share);
                        // Its fixed cost, like the chunk passes, adds to the rank's time
                        // outside the overlap window.
                        l.chunk[r] = l.chunk[r].saturating_add(im.seq_fixed());
                    }
                    l.ring_len[g.ring_index(self.cfg.cp)] += u64::from(len);
                }
                Decision::Whole | Decision::Unset => {
                    whole_seqs += 1;
                    whole_attn += im.attn_shard(len);
                    whole_tok += u64::from(im.share(len));
                    whole_len += u64::from(len);
                }
            }
        }
        let whole_comm = im.comm(&im.link(self.tm.group_ring(d)), whole_len);
        let mut slowest = 0u64;
        for r in 0..cp {
            if l.held[r] + whole_tok > u64::from(self.cfg.bucket) {
                return None;
            }
            let comm = whole_comm + self.sub_comm(&l, d, r as u32);
            let t = im.rank(
                l.local_attn[r],
                l.tokens[r] + whole_tok,
                l.sh_attn[r] + whole_attn,
                comm,
                whole_seqs,
            );
            slowest = slowest.max(t.saturating_add(l.chunk[r]));
        }
        Some(slowest)
    }

    /// The sub-group rings through rank `r`.
    fn sub_comm(&self, l: &Loads, d: u32, r: u32) -> u64 {
        let mut comm = 0u64;
        for level in 0..GROUP_LEVELS {
            let size = CpGroup::level_size(level);
            if size >= self.cfg.cp {
                break;
            }
            let ring = CpGroup::around(r, size);
            let len = l.ring_len[ring.ring_index(self.cfg.cp)];
            if len > 0 {
                let link = self.im.link(self.tm.ring(d, ring.first, ring.size));
                comm += self.im.comm(&link, len);
            }
        }
        comm
    }

    /// A chunked sequence on group `g`: its peak held and its passes on every rank.
    fn add_chunked(&self, l: &mut Loads, d: u32, g: CpGroup, len: u32) {
        let peak = self.cfg.budget().chunked(&self.cfg.chunking, len, g.size);
        let link = self.im.link(self.tm.ring(d, g.first, g.size));
        let t = self.passes(len, g.size, &link);
        for r in g.first as usize..(g.first + g.size) as usize {
            l.held[r] += peak;
            l.chunk[r] = l.chunk[r].saturating_add(t);
        }
    }

    /// The chunk passes of a `len`-token sequence on `g` ranks, ps (the integer form of
    /// [`TimeModel::chunked`], recomputation a third of a pass).
    fn passes(&self, len: u32, g: u32, link: &Link) -> u64 {
        let c: &Chunking = &self.cfg.chunking;
        let im = self.im;
        let n = c.count(len);
        let keep = c.keep.clamp(1, n.max(1));
        let mut total = 0u64;
        let mut prefix = 0u32;
        for i in 0..n {
            let t = c.chunk_len(len, i);
            let q = if g == 1 {
                im.local(t)
            } else {
                im.share_in(t, g)
            };
            let attn = im.attention(q, prefix.saturating_mul(2).saturating_add(t));
            let comm = im.comm(link, u64::from(prefix) + u64::from(t));
            let gemm = im.gemm(u64::from(q));
            let pass = if im.all_attention() {
                comm.max(attn) + gemm
            } else {
                comm + gemm + attn
            } + self.launch_ps;
            total = total.saturating_add(pass);
            if i < n - keep {
                total = total.saturating_add(pass / 3);
            }
            prefix = prefix.saturating_add(t);
        }
        total
    }
}

/// The groups a chunked sequence may run on in a CP group of `cp` ranks: every aligned group
/// of 1, 2, 4, ... ranks (powers of two dividing `cp`), then the whole group.
fn chunk_groups(cp: u32) -> impl Iterator<Item = CpGroup> {
    let ones = (0..cp).map(|r| CpGroup { first: r, size: 1 });
    let subs = CpGroup::sub_sizes(cp).flat_map(move |g| CpGroup::aligned(cp, g));
    let whole = core::iter::once(CpGroup::whole(cp)).filter(move |_| cp > 1);
    ones.chain(subs).chain(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_codes_round_trip_and_never_read_as_another_decision() {
        for cp in [1u32, 2, 8, 16, 256] {
            for g in chunk_groups(cp) {
                assert!(g.is_valid_chunk_group(cp));
                let code = chunk_code(g);
                assert_eq!(chunk_of_code(code), Some(g));
                assert!(code < CHUNK_BASE + 1);
            }
        }
        for code in [-1, 0, 5, i32::MIN, -2, -4097] {
            assert_eq!(chunk_of_code(code), None);
        }
        for cp in [4u32, 16, 256] {
            for g in CpGroup::sub_sizes(cp) {
                for group in CpGroup::aligned(cp, g) {
                    assert_eq!(chunk_of_code(Decision::Sub(group).to_code()), None);
                }
            }
        }
    }
}
