//! `balanced`: a cost-aware policy that plans on the estimated time of the cost model
//! ([`cost`](crate::cost)) instead of FLOPs alone (issue 8; the paper-faithful `skrull`
//! policy stays selectable).
//!
//! # Algorithm
//!
//! 1. **Integer time model.** The H100 preset of [`CostModel`] for the configured model shape
//!    is turned, once per call, into fixed-point picoseconds ([`IntModel`]): GEMM per token and
//!    the weight-streaming floor, ring latency and per-token K/V traffic, the fixed cost per
//!    micro-batch, and the attention cost per (padded query x key) for every query tile of the
//!    FlashAttention table. From there on every decision is integer arithmetic, so the plan is
//!    bit-identical on every rank and platform (the table itself comes from IEEE-754 basic
//!    operations and `libm`, which are reproducible).
//! 2. **DP ranks by estimated time.** Sequences longest-first (ties: input order) into the DP
//!    rank with the least estimated GPU time (ties: lowest rank). A sequence's estimate is the
//!    cheaper of running it whole and `N` times one shard, plus its share of the fixed
//!    micro-batch cost by tokens.
//! 3. **Micro-batches by evaluation.** For each DP rank a small deterministic candidate set is
//!    planned and timed on the integer model, and the fastest kept: a longest-processing-time
//!    grouping on estimated time into `m_min = ceil(tokens / (N·C))` micro-batches under the
//!    per-GPU shard budget, and a packed-style next-fit grouping in sample order (which always
//!    fits with everything sharded). `EXTRA_M` more micro-batch counts can be tried; a
//!    candidate is skipped when `m·T_fixed + Σ work / N` already reaches the best total. (The
//!    strided interleave of GDS and `m_min + 1`, `m_min + 2` were measured and never won on
//!    the paper's rows: docs/balanced.md.)
//! 4. **Placement inside a micro-batch.** Sequences heaviest-first. The `s` heaviest are
//!    sharded, for a few `s` around the point where the next sequence whole would still
//!    outweigh a balanced rank (and `s = K`, everything sharded); the rest go, one by one, to
//!    the CP rank whose estimated time grows least, among the ranks with budget for them.
//!    DACP's rules still enforce memory: a sequence no rank can hold whole is sharded; if its
//!    shard does not fit either, the fullest rank's longest local sequence is sharded
//!    (rollback) and the step retried. Each `s` is timed exactly and the fastest kept.
//!
//! Every step has a fixed candidate count, so the policy runs in
//! `O(n log n + n·N)` per candidate with no allocation, in the caller's workspace and plan
//! buffers. Every time term is clamped at 2^46 ps (about 70 s) so no sum overflows.
//!
//! # Memory
//!
//! No workspace beyond [`WorkspaceSizes::for_batch`](crate::WorkspaceSizes::for_batch): while
//! deciding, the plan buffers that the writer fills last (micro-batch records, members, rank
//! tokens) serve as scratch; the decisions end in the placements, are sorted into plan order in
//! the workspace's key buffer and then written.

use core::cell::Cell;

use heapless::Vec as HVec;

use crate::budget::Budget;
use crate::config::{Config, MAX_CP};
use crate::cost::{ATTN_POINTS, AttentionTable, CostModel, Overlap, TimeModel};
use crate::error::Error;
use crate::gds;
use crate::plan::{MicroBatch, Placement, Plan, PlanBuffers, PlanWriter, SHARDED};
use crate::workspace::Workspace;

/// Fixed-point shift of the per-unit costs (`value_ps << FP`).
const FP: u32 = 16;
/// Largest attention table held on the stack (query tiles between the table's end points).
const MAX_TILES: usize = 256;
/// Extra micro-batch counts tried above the least the token total allows (each pruned by the
/// work bound `m x fixed + work / N` before it is planned).
const EXTRA_M: usize = 0;
/// Most bins of the LPT grouping (its state lives on the stack).
const MAX_BINS: usize = 256;
/// Every per-sequence time term is clamped here (2^46 ps, about 70 s), so that sums over a
/// whole batch (at most 2^16 sequences) stay below 2^62 and never overflow.
const CAP: u64 = 1 << 46;
/// Encoding of "sharded" in the `u32` scratch decisions.
const SH: u32 = u32::MAX;

/// The cost model in integer picoseconds (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct IntModel {
    cp: u32,
    budget: Budget,
    gemm_fp: u64,
    stream_ps: u64,
    comm_lat_ps: u64,
    comm_fp: u64,
    fixed_ps: u64,
    all_attention: bool,
    tile: u64,
    /// Attention ps per (padded query x key) `<< FP` at the table's first point and below.
    unit_lo: u64,
    /// The same at the table's last point and above.
    unit_hi: u64,
    /// Padded query lengths of the first and last table points.
    lo_q: u64,
    hi_q: u64,
    /// Per query tile strictly between `lo_q` and `hi_q`, filled on first use (0: not yet).
    table: [Cell<u64>; MAX_TILES],
    /// Whether the tiles between the end points fit `table` (else `tm` is asked each time).
    use_table: bool,
    curve: Curve,
}

fn to_ps(seconds: f64) -> u64 {
    let v = seconds * 1e12;
    if v.is_finite() && v > 0.0 {
        if v >= 1.8e19 {
            u64::MAX >> 8
        } else {
            (v + 0.5) as u64
        }
    } else {
        0
    }
}

fn to_fp(seconds: f64) -> u64 {
    to_ps(seconds * f64::from(1u32 << FP))
}

/// The attention curve: ps per (padded query x key) at a padded query length, from the
/// FlashAttention table (the same interpolation as [`AttentionTable::throughput`], with the
/// logarithms of the table's points computed once).
#[derive(Debug, Clone)]
struct Curve {
    /// Forward attention FLOPs per (padded query x key), all layers.
    coef: f64,
    bwd_ratio: f64,
    table: AttentionTable,
    log_len: [f64; ATTN_POINTS],
}

impl Curve {
    fn new(cost: &CostModel, tm: &TimeModel) -> Curve {
        let tile = cost.attention_tile.max(1);
        let mut log_len = [0.0; ATTN_POINTS];
        for (l, &q) in log_len.iter_mut().zip(&cost.attention.seqlen) {
            *l = libm::log2(f64::from(q.max(1)));
        }
        Curve {
            coef: tm.attention_flops_fwd(tile, 1) / f64::from(tile),
            bwd_ratio: cost.attention_bwd_ratio,
            table: cost.attention,
            log_len,
        }
    }

    /// Attention ps per (padded query x key) `<< FP` at padded query length `q`.
    fn unit(&self, q: u64) -> u64 {
        let t = &self.table;
        let (fwd, bwd) = if q <= u64::from(t.seqlen[0]) {
            (t.fwd[0], t.bwd[0])
        } else if q >= u64::from(t.seqlen[ATTN_POINTS - 1]) {
            (t.fwd[ATTN_POINTS - 1], t.bwd[ATTN_POINTS - 1])
        } else {
            let mut i = 1;
            while i < ATTN_POINTS - 1 && u64::from(t.seqlen[i]) < q {
                i += 1;
            }
            let (x0, x1) = (self.log_len[i - 1], self.log_len[i]);
            let w = if x1 > x0 {
                (libm::log2(q as f64) - x0) / (x1 - x0)
            } else {
                1.0
            };
            (
                t.fwd[i - 1] + (t.fwd[i] - t.fwd[i - 1]) * w,
                t.bwd[i - 1] + (t.bwd[i] - t.bwd[i - 1]) * w,
            )
        };
        to_fp(self.coef / fwd + self.bwd_ratio * self.coef / bwd)
    }
}

impl IntModel {
    /// Binds `cost` to `cfg` (model shape, CP size, shard padding) in fixed point.
    pub fn new(cost: &CostModel, cfg: &Config) -> IntModel {
        let tm = TimeModel::new(cost, cfg);
        let cp = cfg.cp.max(1);
        let layers = f64::from(cfg.model.layers);
        let (lat, per_token) = if cp > 1 {
            let n = f64::from(cp);
            let bw = if cp <= cost.gpus_per_node {
                cost.intra_node_bandwidth
            } else {
                cost.inter_node_bandwidth
            };
            let kv = 2.0 * f64::from(cfg.model.kv_hidden) * cost.kv_element_bytes;
            (
                layers * cost.comm_passes * (n - 1.0) * cost.ring_step_latency_s,
                layers * cost.comm_passes * ((n - 1.0) / n) * kv / bw,
            )
        } else {
            (0.0, 0.0)
        };
        let tile = u64::from(cost.attention_tile.max(1));
        let pad = |q: u32| u64::from(q).div_ceil(tile) * tile;
        let lo_q = pad(cost.attention.seqlen[0]);
        let hi_q = pad(cost.attention.seqlen[ATTN_POINTS - 1]);
        let tiles = (hi_q / tile).saturating_sub(lo_q / tile);
        let curve = Curve::new(cost, &tm);
        IntModel {
            cp,
            budget: cfg.budget(),
            gemm_fp: to_fp(tm.gemm_compute(1)),
            stream_ps: to_ps(tm.weight_stream()),
            comm_lat_ps: to_ps(lat),
            comm_fp: to_fp(per_token),
            fixed_ps: to_ps(tm.fixed()),
            all_attention: cost.overlap == Overlap::AllAttention,
            tile,
            unit_lo: curve.unit(lo_q),
            unit_hi: curve.unit(hi_q),
            lo_q,
            hi_q,
            table: [const { Cell::new(0) }; MAX_TILES],
            use_table: (tiles as usize) <= MAX_TILES,
            curve,
        }
    }

    /// The H100 preset for `cfg`'s model shape (what the policy plans with).
    pub fn for_config(cfg: &Config) -> IntModel {
        Self::new(&CostModel::h100(&cfg.model), cfg)
    }

    /// Tokens one GPU holds of a sharded sequence.
    #[inline]
    pub fn share(&self, len: u32) -> u32 {
        self.budget.share(len)
    }

    /// Tokens a local sequence occupies on its GPU.
    #[inline]
    pub fn local(&self, len: u32) -> u32 {
        self.budget.local(len)
    }

    /// GEMM time of `tokens` on one GPU (roofline), ps.
    #[inline]
    pub fn gemm(&self, tokens: u64) -> u64 {
        if tokens == 0 {
            return 0;
        }
        self.gemm_linear(tokens).max(self.stream_ps)
    }

    /// The compute-bound GEMM leg alone, ps.
    #[inline]
    fn gemm_linear(&self, tokens: u64) -> u64 {
        match tokens.checked_mul(self.gemm_fp) {
            Some(v) => (v >> FP).min(CAP),
            None => CAP,
        }
    }

    /// Attention time of `queries` query tokens against `keys` keys, ps.
    pub fn attention(&self, queries: u32, keys: u32) -> u64 {
        if queries == 0 {
            return 0;
        }
        let q = u64::from(queries).div_ceil(self.tile) * self.tile;
        let unit = if q <= self.lo_q {
            self.unit_lo
        } else if q >= self.hi_q {
            self.unit_hi
        } else {
            let t = ((q - self.lo_q) / self.tile) as usize;
            match t.checked_sub(1).and_then(|i| self.table.get(i)) {
                Some(cell) if self.use_table => {
                    let mut u = cell.get();
                    if u == 0 {
                        u = self.curve.unit(q).max(1);
                        cell.set(u);
                    }
                    u
                }
                _ => self.curve.unit(q),
            }
        };
        let v = (u128::from(q) * u128::from(keys) * u128::from(unit)) >> FP;
        v.min(u128::from(CAP)) as u64
    }

    /// Attention of a whole sequence, ps.
    #[inline]
    pub fn attn_whole(&self, len: u32) -> u64 {
        self.attention(len, len)
    }

    /// Attention of one GPU's shard of a sharded sequence, ps.
    #[inline]
    pub fn attn_shard(&self, len: u32) -> u64 {
        self.attention(self.share(len), len)
    }

    /// CP communication of a micro-batch whose sharded sequences hold `len` tokens, ps.
    #[inline]
    pub fn comm(&self, len: u64) -> u64 {
        if len == 0 || self.cp <= 1 {
            return 0;
        }
        let traffic = (u128::from(len) * u128::from(self.comm_fp)) >> FP;
        self.comm_lat_ps
            .saturating_add(traffic.min(u128::from(CAP)) as u64)
            .min(CAP)
    }

    /// The fixed cost of one micro-batch, ps.
    #[inline]
    pub fn fixed(&self) -> u64 {
        self.fixed_ps
    }

    /// Time of one CP rank: local attention and tokens, the micro-batch's sharded attention
    /// and tokens per rank, and its communication, ps.
    #[inline]
    pub fn rank(&self, local_attn: u64, tokens: u64, sh_attn: u64, comm: u64) -> u64 {
        let (window, after) = if self.all_attention {
            (local_attn + sh_attn, 0)
        } else {
            (local_attn, sh_attn)
        };
        comm.max(window)
            .saturating_add(self.gemm(tokens))
            .saturating_add(after)
            .saturating_add(self.fixed_ps)
    }
}

/// Per-sequence costs cached once per call: whole attention (in the workspace keys, once the
/// sort order is no longer needed) and shard attention (in the scratch micro-batch records).
struct Seqs<'a> {
    lengths: &'a [u32],
    /// Whole attention per sequence, ps.
    aw: &'a [u64],
}

/// The shard attention cached in a scratch record, ps.
#[inline]
fn ash_of(x: &MicroBatch) -> u64 {
    (u64::from(x.count) << 32) | u64::from(x.first)
}

#[inline]
fn set_ash(x: &mut MicroBatch, v: u64) {
    x.first = v as u32;
    x.count = (v >> 32) as u32;
}

/// Per-CP-rank state of one placement attempt.
struct Ranks {
    rb: HVec<i64, { MAX_CP as usize }>,
    attn: HVec<u64, { MAX_CP as usize }>,
    /// Compute-bound GEMM time of the rank's local tokens, ps.
    gl: HVec<u64, { MAX_CP as usize }>,
    tok: HVec<u64, { MAX_CP as usize }>,
    sh_len: u64,
    sh_tok: u64,
    sh_attn: u64,
    comm: u64,
}

impl Ranks {
    fn new(cp: u32, bucket: u32) -> Ranks {
        let mut r = Ranks {
            rb: HVec::new(),
            attn: HVec::new(),
            gl: HVec::new(),
            tok: HVec::new(),
            sh_len: 0,
            sh_tok: 0,
            sh_attn: 0,
            comm: 0,
        };
        for _ in 0..cp.clamp(1, MAX_CP) {
            let _ = r.rb.push(i64::from(bucket));
            let _ = r.attn.push(0);
            let _ = r.gl.push(0);
            let _ = r.tok.push(0);
        }
        r
    }

    fn reset(&mut self, bucket: u32) {
        self.rb.iter_mut().for_each(|b| *b = i64::from(bucket));
        self.attn.iter_mut().for_each(|a| *a = 0);
        self.gl.iter_mut().for_each(|a| *a = 0);
        self.tok.iter_mut().for_each(|t| *t = 0);
        self.sh_len = 0;
        self.sh_tok = 0;
        self.sh_attn = 0;
        self.comm = 0;
    }

    fn shard(&mut self, im: &IntModel, len: u32, ash: u64) {
        self.shard_many(im, u64::from(len), u64::from(im.share(len)), ash);
    }

    /// Shards sequences of `len` tokens in all, `tok` tokens per GPU, `attn` attention.
    fn shard_many(&mut self, im: &IntModel, len: u64, tok: u64, attn: u64) {
        if len == 0 {
            return;
        }
        let t = i64::try_from(tok).unwrap_or(i64::MAX);
        self.rb.iter_mut().for_each(|b| *b = b.saturating_sub(t));
        self.sh_len += len;
        self.sh_tok += tok;
        self.sh_attn += attn;
        self.comm = im.comm(self.sh_len);
    }

    fn local(&mut self, im: &IntModel, r: usize, len: u32, aw: u64) {
        let len = im.local(len);
        if let (Some(b), Some(a), Some(g), Some(t)) = (
            self.rb.get_mut(r),
            self.attn.get_mut(r),
            self.gl.get_mut(r),
            self.tok.get_mut(r),
        ) {
            *b -= i64::from(len);
            *a += aw;
            *t += u64::from(len);
            *g = im.gemm_linear(*t);
        }
    }

    fn unlocal(&mut self, im: &IntModel, r: usize, len: u32, aw: u64) {
        let len = im.local(len);
        if let (Some(b), Some(a), Some(g), Some(t)) = (
            self.rb.get_mut(r),
            self.attn.get_mut(r),
            self.gl.get_mut(r),
            self.tok.get_mut(r),
        ) {
            *b += i64::from(len);
            *a = a.saturating_sub(aw);
            *t = t.saturating_sub(u64::from(len));
            *g = im.gemm_linear(*t);
        }
    }

    fn min_rb(&self) -> (usize, i64) {
        let mut best = (0, i64::MAX);
        for (r, &b) in self.rb.iter().enumerate() {
            if b < best.1 {
                best = (r, b);
            }
        }
        best
    }

    /// Rank `r`'s time so far, ps.
    #[inline]
    fn rank_time(&self, im: &IntModel, r: usize) -> u64 {
        let a = self.attn.get(r).copied().unwrap_or(0);
        let t = self.tok.get(r).copied().unwrap_or(0);
        im.rank(a, t + self.sh_tok, self.sh_attn, self.comm)
    }

    /// The micro-batch's time: its slowest rank's, ps.
    fn time(&self, im: &IntModel) -> u64 {
        (0..self.rb.len())
            .map(|r| self.rank_time(im, r))
            .max()
            .unwrap_or(0)
    }
}

/// One micro-batch's members, heaviest-first, with a working and a best decision each.
struct MbScratch<'a> {
    /// Members, longest first (ties: higher index first).
    members: &'a [u32],
    /// Working decision per member: CP rank or [`SH`].
    cur: &'a mut [u32],
    /// Best decision per member.
    best: &'a mut [u32],
}

/// Places one attempt that shards the `s` heaviest members; `None` when memory cannot be met
/// or the micro-batch would take at least `bound`.
#[allow(clippy::too_many_arguments)]
fn attempt(
    im: &IntModel,
    cfg: &Config,
    sq: &Seqs<'_>,
    per_seq: &[MicroBatch],
    mb: &mut MbScratch<'_>,
    st: &mut Ranks,
    s: usize,
    bound: u64,
) -> Option<u64> {
    st.reset(cfg.bucket);
    let k = mb.members.len();
    let len_of = |seq: u32| sq.lengths.get(seq as usize).copied().unwrap_or(0);
    let aw_of = |seq: u32| sq.aw.get(seq as usize).copied().unwrap_or(0);
    let ash = |seq: u32| per_seq.get(seq as usize).map_or(0, ash_of);
    let (mut sh_len, mut sh_tok, mut sh_attn) = (0u64, 0u64, 0u64);
    for (i, &seq) in mb.members.iter().enumerate() {
        if i < s {
            let len = len_of(seq);
            sh_len += u64::from(len);
            sh_tok += u64::from(im.share(len));
            sh_attn += ash(seq);
            mb.cur[i] = SH;
        } else {
            mb.cur[i] = SH - 1;
        }
    }
    st.shard_many(im, sh_len, sh_tok, sh_attn);
    for i in s..k {
        let seq = mb.members[i];
        let len = len_of(seq);
        let aw = aw_of(seq);
        let charge = im.local(len);
        let glen = im.gemm_linear(u64::from(charge));
        // Rollbacks are bounded: each turns one local member sharded for good.
        let mut guard = 0usize;
        loop {
            guard += 1;
            if guard > 2 * k + 2 {
                return None;
            }
            let extra = if im.all_attention { st.sh_attn } else { 0 };
            let mut pick: Option<(u64, usize)> = None;
            let need = i64::from(charge);
            let ranks = st.rb.iter().zip(st.attn.iter().zip(&st.gl)).enumerate();
            for (r, (&rb, (&attn, &gl))) in ranks {
                if rb < need {
                    continue;
                }
                let t = st
                    .comm
                    .max(attn.saturating_add(aw).saturating_add(extra))
                    .saturating_add(gl)
                    .saturating_add(glen);
                if pick.is_none_or(|(b, _)| t < b) {
                    pick = Some((t, r));
                }
            }
            if let Some((_, r)) = pick {
                st.local(im, r, len, aw);
                mb.cur[i] = r as u32;
                if st.rank_time(im, r) >= bound {
                    return None;
                }
                break;
            }
            let share = i64::from(im.share(len));
            let (t, low) = st.min_rb();
            if low >= share {
                st.shard(im, len, ash(seq));
                mb.cur[i] = SH;
                break;
            }
            // Rollback: shard the longest local member on the fullest rank.
            let victim = (0..i).find(|&v| mb.cur[v] == t as u32)?;
            let vseq = mb.members[victim];
            st.unlocal(im, t, len_of(vseq), aw_of(vseq));
            st.shard(im, len_of(vseq), ash(vseq));
            mb.cur[victim] = SH;
        }
    }
    // Authoritative recount.
    if st.rb.iter().any(|&b| b < 0) {
        return None;
    }
    let t = st.time(im);
    (t < bound).then_some(t)
}

/// Plans one micro-batch: tries a few sharded counts and keeps the fastest in `mb.best`.
/// Returns its time, or `None` when no attempt meets memory.
fn place(
    im: &IntModel,
    cfg: &Config,
    sq: &Seqs<'_>,
    per_seq: &[MicroBatch],
    mb: &mut MbScratch<'_>,
    st: &mut Ranks,
) -> Option<u64> {
    let k = mb.members.len();
    let n = u64::from(im.cp);
    let len_of = |seq: u32| sq.lengths.get(seq as usize).copied().unwrap_or(0);
    let whole = |seq: u32| {
        sq.aw.get(seq as usize).copied().unwrap_or(0) + im.gemm_linear(u64::from(len_of(seq)))
    };
    // The sharded count where the heaviest remaining sequence whole no longer outweighs a
    // balanced rank.
    let mut total: u64 = mb.members.iter().map(|&seq| whole(seq)).sum();
    // Members longer than the budget can only run sharded: a prefix (longest first).
    let forced = mb
        .members
        .iter()
        .take_while(|&&seq| im.local(len_of(seq)) > cfg.bucket)
        .count();
    let mut k0 = 0;
    while k0 < k {
        let seq = mb.members[k0];
        let w = whole(seq);
        if k0 >= forced && w.saturating_mul(n) <= total {
            break;
        }
        let share = u64::from(im.share(len_of(seq)));
        let sharded = n * (per_seq.get(seq as usize).map_or(0, ash_of) + im.gemm_linear(share));
        total = total - w + sharded;
        k0 += 1;
    }
    let cands = [k0, k0 + 1, k0.saturating_sub(1).max(forced), k];
    let mut best: Option<u64> = None;
    for (c, &s) in cands.iter().enumerate() {
        if s > k || cands[..c].contains(&s) {
            continue;
        }
        let bound = best.unwrap_or(u64::MAX);
        if let Some(t) = attempt(im, cfg, sq, per_seq, mb, st, s, bound) {
            best = Some(t);
            mb.best.copy_from_slice(mb.cur);
        }
    }
    best
}

/// The plan buffers lent as scratch while deciding.
struct Scratch<'a> {
    /// Per sequence: `dp_rank` = the working grouping's micro-batch, `index` = the
    /// candidate grouping's decision (CP rank or [`SH`]), `first`/`count` = shard attention.
    per_seq: &'a mut [MicroBatch],
    /// Per member of the micro-batch being placed: working decision.
    cur: &'a mut [u32],
    /// Per member: best decision.
    best: &'a mut [u32],
}

/// How a candidate grouping assigns the DP rank's sequences to micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    /// Micro-batch `j` takes ascending positions `j, j+m, ...`.
    Strided(usize),
    /// Longest-processing-time on estimated time into `m` bins under the shard budget.
    Lpt(usize),
    /// Next-fit in sample order under the shard budget.
    NextFit,
}

/// Writes the grouping's micro-batch of every sequence of `sub` (ascending by length) into
/// `per_seq[seq].dp_rank`; returns the micro-batch count, or `None` if it breaks memory.
fn group(
    im: &IntModel,
    cfg: &Config,
    sq: &Seqs<'_>,
    sub: &[u32],
    g: Grouping,
    per_seq: &mut [MicroBatch],
) -> Option<usize> {
    let len_of = |s: u32| sq.lengths.get(s as usize).copied().unwrap_or(0);
    let cap_all = u64::from(cfg.bucket) * u64::from(cfg.cp);
    match g {
        Grouping::Strided(m) => {
            for j in 0..m {
                let sum: u64 = sub
                    .iter()
                    .skip(j)
                    .step_by(m)
                    .map(|&s| u64::from(len_of(s)))
                    .sum();
                if sum > cap_all {
                    return None;
                }
            }
            for (p, &s) in sub.iter().enumerate() {
                if let Some(x) = per_seq.get_mut(s as usize) {
                    x.dp_rank = (p % m) as u32;
                }
            }
            Some(m)
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
                let len = len_of(s);
                let share = u64::from(im.share(len));
                let w = per_seq.get(s as usize).map_or(0, |x| {
                    work(
                        im,
                        len,
                        sq.aw.get(s as usize).copied().unwrap_or(0),
                        ash_of(x),
                    )
                });
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
                if let Some(x) = per_seq.get_mut(s as usize) {
                    x.dp_rank = j as u32;
                }
            }
            Some(m)
        }
        Grouping::NextFit => {
            // Sample order is the input order: mark the rank's sequences, then walk the index
            // range they span.
            if sub.is_empty() {
                return Some(0);
            }
            for &s in sub {
                if let Some(x) = per_seq.get_mut(s as usize) {
                    x.dp_rank = u32::MAX;
                }
            }
            let lo = sub.iter().copied().min().unwrap_or(0);
            let hi = sub.iter().copied().max().unwrap_or(0);
            let mut count = 0usize;
            let mut used = 0u64;
            for s in lo..=hi {
                let Some(x) = per_seq.get_mut(s as usize) else {
                    continue;
                };
                if x.dp_rank != u32::MAX {
                    continue;
                }
                let share = u64::from(im.share(len_of(s)));
                if count == 0 || used + share > u64::from(cfg.bucket) {
                    count += 1;
                    used = 0;
                }
                used += share;
                x.dp_rank = (count - 1) as u32;
            }
            Some(count)
        }
    }
}

/// A sequence's GPU time wherever it runs: the cheaper of whole and `N` shards, ps (no fixed
/// cost). Summed over a micro-batch and divided by `N`, a lower bound on its time less the
/// fixed cost.
#[inline]
fn work(im: &IntModel, len: u32, aw: u64, ash: u64) -> u64 {
    let whole = aw + im.gemm_linear(u64::from(len));
    let sharded = u64::from(im.cp) * (ash + im.gemm_linear(u64::from(im.share(len))));
    whole.min(sharded)
}

/// Plans every micro-batch of the grouping in `per_seq[..].dp_rank`; writes each sequence's
/// decision into `per_seq[..].index` and returns the DP rank's total time, or `None` when a
/// micro-batch cannot meet memory or the total reaches `stop`.
#[allow(clippy::too_many_arguments)]
fn run_grouping(
    im: &IntModel,
    cfg: &Config,
    sq: &Seqs<'_>,
    sub: &[u32],
    m: usize,
    sc: &mut Scratch<'_>,
    gather: &mut [u32],
    st: &mut Ranks,
    stop: u64,
) -> Option<u64> {
    let mut total = 0u64;
    // Members of every micro-batch, heaviest first (sub is ascending by (length, index), so
    // reversed: longest first, ties higher index first), grouped by a counting sort.
    let mb_of = |x: &[MicroBatch], s: u32| x.get(s as usize).map_or(0, |x| x.dp_rank as usize);
    let mut off = [0u32; MAX_BINS + 1];
    let counted = m <= MAX_BINS;
    let k_all = sub.len().min(gather.len());
    if !counted {
        // Too many micro-batches for the offsets on the stack: sort the positions in `sub`
        // by (micro-batch, position descending) instead, which gives every micro-batch the
        // same members in the same order as the counting sort, in O(n log n) (a scan of
        // `sub` per micro-batch would be O(m·n)).
        for (p, slot) in gather[..k_all].iter_mut().enumerate() {
            *slot = p as u32;
        }
        let pos_mb = |p: u32| {
            sub.get(p as usize)
                .map_or(usize::MAX, |&s| mb_of(sc.per_seq, s))
        };
        gather[..k_all].sort_unstable_by_key(|&p| (pos_mb(p), core::cmp::Reverse(p)));
        for slot in gather[..k_all].iter_mut() {
            *slot = sub.get(*slot as usize).copied().unwrap_or(0);
        }
    }
    let mut next = 0usize;
    if counted {
        for &s in sub {
            if let Some(o) = off.get_mut(mb_of(sc.per_seq, s) + 1) {
                *o += 1;
            }
        }
        for j in 0..m {
            off[j + 1] += off[j];
        }
        let mut cursor = off;
        for &s in sub.iter().rev() {
            if let Some(c) = cursor.get_mut(mb_of(sc.per_seq, s)) {
                if let Some(slot) = gather.get_mut(*c as usize) {
                    *slot = s;
                }
                *c += 1;
            }
        }
    }
    for j in 0..m {
        let (first, k) = if counted {
            (off[j] as usize, (off[j + 1] - off[j]) as usize)
        } else {
            // The sorted run of micro-batch `j`.
            let first = next;
            while next < k_all && gather.get(next).is_some_and(|&s| mb_of(sc.per_seq, s) == j) {
                next += 1;
            }
            (first, next - first)
        };
        if k == 0 {
            continue;
        }
        let members = gather.get(first..first + k).unwrap_or(&[]);
        let mut mb = MbScratch {
            members,
            cur: &mut sc.cur[..k],
            best: &mut sc.best[..k],
        };
        let t = place(im, cfg, sq, sc.per_seq, &mut mb, st)?;
        total = total.saturating_add(t);
        if total >= stop {
            return None;
        }
        for (i, &s) in members.iter().enumerate() {
            if let Some(x) = sc.per_seq.get_mut(s as usize) {
                x.index = mb.best[i];
            }
        }
    }
    Some(total)
}

/// LPT over DP ranks by estimated time; writes `placements[seq].dp_rank` and caches each
/// sequence's whole attention (`dp_rank`/`index`, moved later) and shard attention
/// (`first`/`count`) in `per_seq`.
fn assign_dp(
    im: &IntModel,
    cfg: &Config,
    keys: &[u64],
    loads: &mut [u128],
    placements: &mut [Placement],
    per_seq: &mut [MicroBatch],
) {
    loads.fill(0);
    let per_mb = u64::from(cfg.bucket)
        .saturating_mul(u64::from(cfg.cp))
        .max(1);
    let mut end = keys.len();
    while end > 0 {
        let len = (keys[end - 1] >> 32) as u32;
        let mut start = end - 1;
        while start > 0 && (keys[start - 1] >> 32) as u32 == len {
            start -= 1;
        }
        let aw = im.attn_whole(len);
        let ash = im.attn_shard(len);
        let w = u128::from(work(im, len, aw, ash))
            + u128::from(im.fixed()) * u128::from(len) / u128::from(per_mb);
        for &key in &keys[start..end] {
            // Lowest load, lowest rank on ties (linear: dp is small in practice).
            let mut best = 0usize;
            for (d, &l) in loads.iter().enumerate() {
                if l < loads[best] {
                    best = d;
                }
            }
            loads[best] += w;
            let seq = gds::key_index(key);
            if let Some(p) = placements.get_mut(seq) {
                p.dp_rank = best as u32;
            }
            if let Some(x) = per_seq.get_mut(seq) {
                x.dp_rank = aw as u32;
                x.index = (aw >> 32) as u32;
                set_ash(x, ash);
            }
        }
        end = start;
    }
}

/// Everything one DP rank's candidate search reads and writes.
struct DpSearch<'a, 'c> {
    im: &'a IntModel,
    cfg: &'a Config,
    sq: &'a Seqs<'a>,
    sub: &'a [u32],
    sc: Scratch<'c>,
    gather: &'c mut [u32],
    st: Ranks,
    placements: &'c mut [Placement],
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
        let Some(m) = group(self.im, self.cfg, self.sq, self.sub, g, self.sc.per_seq) else {
            return;
        };
        // LPT and next-fit bins keep every GPU's shards within budget, and one sequence per
        // micro-batch always fits: those counts are feasible plans.
        let surely_fits = !matches!(g, Grouping::Strided(_)) || m == self.sub.len();
        if surely_fits {
            self.fewest = self.fewest.min(m);
        }
        let limit = self.cfg.max_micro_batches as usize;
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
        if (m as u64)
            .saturating_mul(self.im.fixed())
            .saturating_add(self.work)
            >= stop
        {
            return;
        }
        let Some(t) = run_grouping(
            self.im,
            self.cfg,
            self.sq,
            self.sub,
            m,
            &mut self.sc,
            self.gather,
            &mut self.st,
            stop,
        ) else {
            return;
        };
        self.best = Some(t);
        for &s in self.sub {
            if let (Some(p), Some(x)) = (
                self.placements.get_mut(s as usize),
                self.sc.per_seq.get(s as usize),
            ) {
                p.micro_batch = x.dp_rank;
                p.cp_rank = if x.index == SH {
                    SHARDED
                } else {
                    x.index as i32
                };
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
    cfg: &Config,
    lengths: &[u32],
    ws: &mut Workspace<'_>,
    out: PlanBuffers<'b>,
    total_tokens: u64,
) -> Result<Plan<'b>, Error> {
    let n = lengths.len();
    let dp = cfg.dp as usize;
    let im = IntModel::for_config(cfg);
    let PlanBuffers {
        placements,
        micro_batches,
        members,
        rank_tokens,
        micro_batches_per_dp,
    } = out;
    let per_seq = &mut micro_batches[..n];
    gds::sort_ascending(lengths, &mut ws.keys[..n]);
    assign_dp(
        &im,
        cfg,
        &ws.keys[..n],
        &mut ws.dp_loads[..dp],
        placements,
        per_seq,
    );
    {
        let pl: &[Placement] = placements;
        gds::group_by_dp(ws, n, dp, |s| pl.get(s).map_or(0, |p| p.dp_rank));
    }
    // The sort order is spent: the keys now cache each sequence's whole attention.
    for (key, x) in ws.keys[..n].iter_mut().zip(per_seq.iter()) {
        *key = (u64::from(x.index) << 32) | u64::from(x.dp_rank);
    }
    let Workspace {
        keys,
        seqs,
        scratch,
        dp_start,
        ..
    } = ws;
    let cap = u64::from(cfg.bucket) * u64::from(cfg.cp);
    let mut st = Some(Ranks::new(cfg.cp, cfg.bucket));
    {
        let sq = Seqs {
            lengths,
            aw: &keys[..n],
        };
        for d in 0..dp {
            let (a, b) = (dp_start[d] as usize, dp_start[d + 1] as usize);
            let sub = &seqs[a..b];
            let k = sub.len();
            if k == 0 {
                continue;
            }
            let sum: u64 = sub.iter().map(|&s| u64::from(lengths[s as usize])).sum();
            let work_sum: u64 = sub
                .iter()
                .map(|&s| {
                    let x = &per_seq[s as usize];
                    work(&im, lengths[s as usize], keys[s as usize], ash_of(x))
                })
                .sum();
            let m_min = (sum.div_ceil(cap).max(1) as usize).min(k);
            let mut search = DpSearch {
                im: &im,
                cfg,
                sq: &sq,
                sub,
                sc: Scratch {
                    per_seq: &mut per_seq[..],
                    cur: &mut rank_tokens[..n],
                    best: &mut members[..n],
                },
                gather: &mut scratch[..n],
                st: st.take().unwrap_or_else(|| Ranks::new(cfg.cp, cfg.bucket)),
                placements: &mut *placements,
                work: work_sum / u64::from(cfg.cp.max(1)),
                best: None,
                fewest: usize::MAX,
                tried_single: false,
            };
            search.try_grouping(Grouping::Lpt(m_min));
            if dp == 1 {
                // The packed-style grouping. With one DP rank it is `packed`'s own grouping,
                // so `balanced` never plans worse than `packed` there; with more it never won
                // on the measured rows (docs/balanced.md) and cost a third of the latency.
                search.try_grouping(Grouping::NextFit);
            }
            for m in m_min + 1..=(m_min + EXTRA_M).min(k) {
                // Pruned by the work bound unless more micro-batches could still win.
                search.try_grouping(Grouping::Lpt(m));
            }
            if search.best.is_none() {
                // Rare (a micro-batch limit, or budgets so tight that the shard-budget bins
                // do not fit): grow m as GDS does, with its strided interleave too, up to one
                // sequence per micro-batch, which always fits sharded.
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
            st = Some(search.st);
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
    }
    // Plan order: (DP rank, micro-batch, sequence), with the decision in the low bits.
    for (i, (key, p)) in keys[..n].iter_mut().zip(placements.iter()).enumerate() {
        let cp = if p.cp_rank == SHARDED {
            0
        } else {
            p.cp_rank as u64 + 1
        };
        *key = (u64::from(p.dp_rank) << 48)
            | (u64::from(p.micro_batch & 0xFFFF) << 32)
            | ((i as u64 & 0xFFFF) << 16)
            | cp;
    }
    keys[..n].sort_unstable();
    let mut w = PlanWriter::new(
        PlanBuffers {
            placements,
            micro_batches,
            members,
            rank_tokens,
            micro_batches_per_dp,
        },
        cfg,
        total_tokens,
    );
    for d in 0..dp {
        w.set_count(d as u32, 0);
    }
    let mut open: Option<(u64, u64)> = None;
    let mut count = 0u32;
    for &key in &keys[..n] {
        let (d, m) = (key >> 48, (key >> 32) & 0xFFFF);
        let seq = ((key >> 16) & 0xFFFF) as u32;
        let cp = key & 0xFFFF;
        if open.map(|(od, _)| od) != Some(d) {
            count = 0;
        }
        if open != Some((d, m)) {
            w.open(d as u32, count);
            count += 1;
            w.set_count(d as u32, count);
            open = Some((d, m));
        }
        let cp_rank = if cp == 0 { SHARDED } else { (cp - 1) as i32 };
        w.push(
            seq,
            lengths.get(seq as usize).copied().unwrap_or(0),
            cp_rank,
        );
    }
    Ok(w.finish(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelShape, Policy, ShardPadding, Victim};
    use crate::plan::{self};
    use crate::test_support::OwnedPlan;

    use std::vec;
    use std::vec::Vec;

    /// Plans `lengths` with `balanced`, checks it with `plan::check`, and returns
    /// (placements, micro-batches per DP rank).
    fn run(cfg: &Config, lengths: &[u32]) -> Result<(Vec<Placement>, Vec<u32>), Error> {
        let cfg = cfg.with_policy(Policy::Balanced);
        // Garbage in every buffer: the policy must not depend on their contents.
        let mut bufs = OwnedPlan::filled(lengths.len(), &cfg, 1);
        let plan = bufs.schedule(&cfg, lengths)?;
        assert_eq!(plan::check(&cfg, lengths, &plan), Ok(()), "{lengths:?}");
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

    /// The integer model tracks the floating-point one it is built from.
    #[test]
    fn integer_model_tracks_the_float_model() {
        for model in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            for cp in [1u32, 8, 16] {
                let cfg = Config::new(1, cp, 13 * 1024, model);
                let cost = CostModel::h100(&model);
                let tm = TimeModel::new(&cost, &cfg);
                let im = IntModel::new(&cost, &cfg);
                let close = |a: u64, b: f64| {
                    let b = b * 1e12;
                    (a as f64 - b).abs() <= 1e-4 * b + 2.0
                };
                for len in [1u32, 100, 511, 513, 1000, 3000, 8191, 20_000, 100_000] {
                    assert!(close(im.attn_whole(len), tm.attention_whole(len)), "{len}");
                    assert!(close(im.attn_shard(len), tm.attention_shard(len)), "{len}");
                    assert!(close(im.gemm(u64::from(len)), tm.gemm(u64::from(len))));
                    assert!(close(im.comm(u64::from(len)), tm.comm(u64::from(len))));
                }
                assert!(close(im.fixed(), tm.fixed()));
            }
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

    /// Against the evaluator: on long-tail batches `balanced` is never slower than `packed`
    /// or `skrull` by more than the integer model's rounding.
    #[test]
    fn not_slower_than_skrull_or_packed_on_long_tail_batches() {
        use crate::eval::{EvalBuffers, EvalSizes, MicroBatchTime, RankSlot, evaluate_placements};
        let mut rng = Rng(7);
        let cfg = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        let cost = CostModel::h100(&cfg.model);
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
                &cost,
                &c,
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
