//! The integer form of a [`TimeModel`], which planning decisions read: every time in
//! picoseconds (`u64`), per-unit costs in fixed point (`<< FP`). It is derived from the
//! `TimeModel`'s own functions (GEMM per token, weight streaming, ring latency and per-token
//! traffic, fixed cost, attention per padded query x key), converted once, so planning and
//! evaluation read the same model and every decision is integer arithmetic: the plan is
//! bit-identical on every rank and platform (the conversions use IEEE-754 basic operations and
//! `libm`, which are reproducible).
//!
//! Every time term is clamped at [`CAP`] (2^46 ps, about 70 s), so sums over a whole batch (at
//! most 2^16 sequences) stay below 2^62 and never overflow.

use core::cell::Cell;

use crate::config::budget::Budget;
use crate::config::cost::{ATTN_POINTS, Overlap};
use crate::config::cp_group::{CpGroup, GROUP_LEVELS};
use crate::model::time::{Ring, TimeModel};

/// Fixed-point shift of the per-unit costs (`value_ps << FP`).
const FP: u32 = 16;
/// Query tiles held between the attention table's end points (resolved on first use).
const MAX_TILES: usize = 256;
/// Every time term is clamped here (2^46 ps, about 70 s).
pub const CAP: u64 = 1 << 46;

/// Seconds to picoseconds, rounded; 0 for non-finite or non-positive values.
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

/// Seconds to fixed-point picoseconds (`ps << FP`).
fn to_fp(seconds: f64) -> u64 {
    to_ps(seconds * f64::from(1u32 << FP))
}

/// A ring's cost in integer form: latency per micro-batch and traffic per sharded token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Link {
    latency_ps: u64,
    per_token_fp: u64,
}

/// The coefficients of an [`IntModel`]: everything derived from the [`TimeModel`] once (the
/// costly part), without the per-call tile cache. `Copy` and `Sync`, so a prepared
/// [`Setup`](crate::Setup) holds one and every call builds its [`IntModel`] from it.
#[derive(Debug, Clone, Copy)]
pub struct IntCoeffs {
    tm: TimeModel,
    budget: Budget,
    /// The budget of a sub-group of `2^(l+1)` ranks, per `l` (built once).
    groups: [Budget; GROUP_LEVELS],
    gemm_fp: u64,
    stream_ps: u64,
    fixed_ps: u64,
    /// The fixed cost of one sharded sequence on each GPU of its group, ps.
    seq_fixed_ps: u64,
    /// The cost per whole sequence of calling the attention kernel, ps.
    local_seq_ps: u64,
    all_attention: bool,
    tile: u64,
    /// Attention ps per (padded query x key) `<< FP` at the table's first point and below.
    unit_lo: u64,
    /// The same at the table's last point and above.
    unit_hi: u64,
    /// Padded query lengths of the first and last table points.
    lo_q: u64,
    hi_q: u64,
    /// Whether the tiles between the end points fit the tile cache (else they are computed
    /// each time).
    use_table: bool,
}

/// The attention cost of every query tile of an [`IntCoeffs`] ([`IntCoeffs::tiles`]).
#[derive(Debug, Clone, Copy)]
pub struct Tiles([u64; MAX_TILES]);

/// A [`TimeModel`] in integer picoseconds (see the [module docs](self)): [`IntCoeffs`] plus a
/// cache of attention costs per query tile, filled on first use.
#[derive(Debug, Clone)]
pub struct IntModel {
    c: IntCoeffs,
    /// Per query tile strictly between `lo_q` and `hi_q`, filled on first use (0: not yet).
    table: [Cell<u64>; MAX_TILES],
}

impl core::ops::Deref for IntModel {
    type Target = IntCoeffs;
    #[inline(always)]
    fn deref(&self) -> &IntCoeffs {
        &self.c
    }
}

impl IntCoeffs {
    /// The integer coefficients of `tm`, for the padding rules of `budget`.
    pub fn new(tm: &TimeModel, budget: Budget) -> IntCoeffs {
        let cost = &tm.cost;
        let tile = u64::from(cost.attention_tile.max(1));
        let pad = |q: u32| u64::from(q).div_ceil(tile) * tile;
        let lo_q = pad(cost.attention.seqlen[0]);
        let hi_q = pad(cost.attention.seqlen[ATTN_POINTS - 1]);
        let tiles = (hi_q / tile).saturating_sub(lo_q / tile);
        let unit = |q: u64| to_fp(tm.attention_unit(q.min(u64::from(u32::MAX)) as u32));
        let groups = core::array::from_fn(|l| budget.for_group(CpGroup::level_size(l)));
        IntCoeffs {
            tm: *tm,
            budget,
            groups,
            gemm_fp: to_fp(tm.gemm_compute(1)),
            stream_ps: to_ps(tm.weight_stream()).min(CAP),
            fixed_ps: to_ps(tm.fixed()).min(CAP),
            seq_fixed_ps: to_ps(tm.sequence_fixed()).min(CAP),
            local_seq_ps: to_ps(cost.local_sequence_s).min(CAP),
            all_attention: cost.overlap == Overlap::AllAttention,
            tile,
            unit_lo: unit(lo_q),
            unit_hi: unit(hi_q),
            lo_q,
            hi_q,
            use_table: (tiles as usize) <= MAX_TILES,
        }
    }

    /// Every attention tile between the table's end points, computed now (the values a call
    /// would compute on first use, so plans are the same): the starting tile cache of a setup
    /// that plans many batches ([`IntModel::with_tiles`]).
    pub fn tiles(&self) -> Tiles {
        let mut table = [0; MAX_TILES];
        if self.use_table {
            let tiles = ((self.hi_q - self.lo_q) / self.tile) as usize;
            for (i, slot) in table.iter_mut().enumerate().take(tiles.saturating_sub(1)) {
                let q = self.lo_q + (i as u64 + 1) * self.tile;
                *slot = to_fp(self.tm.attention_unit(q as u32)).max(1);
            }
        }
        Tiles(table)
    }
}

impl IntModel {
    /// The integer form of `tm`, for the padding rules of `budget`.
    pub fn new(tm: &TimeModel, budget: Budget) -> IntModel {
        IntModel::from_coeffs(IntCoeffs::new(tm, budget))
    }

    /// The model of prepared coefficients, with an empty tile cache.
    #[inline]
    pub fn from_coeffs(c: IntCoeffs) -> IntModel {
        IntModel {
            c,
            table: [const { Cell::new(0) }; MAX_TILES],
        }
    }

    /// The model of prepared coefficients, with the tile cache filled from `tiles`.
    #[inline]
    pub fn with_tiles(c: IntCoeffs, tiles: &Tiles) -> IntModel {
        IntModel {
            c,
            table: core::array::from_fn(|i| Cell::new(tiles.0[i])),
        }
    }

    /// The time model this was derived from.
    pub fn time_model(&self) -> &TimeModel {
        &self.tm
    }

    /// CP size.
    #[inline]
    pub fn cp(&self) -> u32 {
        self.budget.cp()
    }

    /// Tokens one GPU holds of a sharded sequence.
    #[inline]
    pub fn share(&self, len: u32) -> u32 {
        self.budget.share(len)
    }

    /// Tokens each of `g` GPUs holds of a sequence sharded over a group of `g` ranks
    /// ([`IntModel::share`] when `g` is the CP size).
    #[inline]
    pub fn share_in(&self, len: u32, g: u32) -> u32 {
        if g == self.cp() {
            return self.share(len);
        }
        match self.groups.get(CpGroup::level_of(g)) {
            Some(b) if g.is_power_of_two() => b.share(len),
            _ => self.budget.for_group(g).share(len),
        }
    }

    /// Tokens a local sequence occupies on its GPU.
    #[inline]
    pub fn local(&self, len: u32) -> u32 {
        self.budget.local(len)
    }

    /// Whether the overlap window also holds the sharded attention
    /// ([`Overlap::AllAttention`]).
    #[inline]
    pub fn all_attention(&self) -> bool {
        self.all_attention
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
    pub fn gemm_linear(&self, tokens: u64) -> u64 {
        match tokens.checked_mul(self.gemm_fp) {
            Some(v) => (v >> FP).min(CAP),
            None => CAP,
        }
    }

    /// Attention ps per (padded query x key) `<< FP` at padded query length `q`.
    #[inline]
    fn unit(&self, q: u64) -> u64 {
        if q <= self.lo_q {
            return self.unit_lo;
        }
        if q >= self.hi_q {
            return self.unit_hi;
        }
        let t = ((q - self.lo_q) / self.tile) as usize;
        let slot = t
            .checked_sub(1)
            .and_then(|i| self.table.get(i))
            .filter(|_| self.use_table);
        match slot {
            Some(cell) if cell.get() != 0 => cell.get(),
            _ => self.unit_between(q, slot),
        }
    }

    /// [`IntModel::unit`] strictly between the table's end points, from the float model; kept
    /// in the tile's table `slot` when there is one (out of line: each tile is computed once).
    #[cold]
    #[inline(never)]
    fn unit_between(&self, q: u64, slot: Option<&Cell<u64>>) -> u64 {
        let u = to_fp(self.tm.attention_unit(q as u32)).max(1);
        if let Some(cell) = slot {
            cell.set(u);
        }
        u
    }

    /// Attention time of `queries` query tokens against `keys` keys, ps.
    #[inline]
    pub fn attention(&self, queries: u32, keys: u32) -> u64 {
        if queries == 0 {
            return 0;
        }
        let q = u64::from(queries).div_ceil(self.tile) * self.tile;
        let unit = self.unit(q);
        // Usually the product fits u64; the u128 form gives the same value when it does not.
        match q
            .checked_mul(u64::from(keys))
            .and_then(|qk| qk.checked_mul(unit))
        {
            Some(v) => (v >> FP).min(CAP),
            None => {
                let v = (u128::from(q) * u128::from(keys) * u128::from(unit)) >> FP;
                v.min(u128::from(CAP)) as u64
            }
        }
    }

    /// Attention of a whole sequence, with the cost per sequence of calling the kernel, ps.
    #[inline]
    pub fn attn_whole(&self, len: u32) -> u64 {
        self.attention(len, len)
            .saturating_add(self.local_seq_ps)
            .min(CAP)
    }

    /// Attention of one GPU's shard of a sharded sequence, ps.
    #[inline]
    pub fn attn_shard(&self, len: u32) -> u64 {
        self.attention(self.share(len), len)
    }

    /// The integer cost of `ring` (resolve it once per micro-batch or DP rank).
    pub fn link(&self, ring: Ring) -> Link {
        Link {
            latency_ps: to_ps(self.tm.comm_latency(ring)).min(CAP),
            per_token_fp: to_fp(self.tm.comm_per_token(ring)),
        }
    }

    /// CP communication over `link` of a micro-batch whose sharded sequences hold `len`
    /// tokens, ps.
    #[inline]
    pub fn comm(&self, link: &Link, len: u64) -> u64 {
        if len == 0 || link.per_token_fp == 0 && link.latency_ps == 0 {
            return 0;
        }
        let traffic = (u128::from(len) * u128::from(link.per_token_fp)) >> FP;
        link.latency_ps
            .saturating_add(traffic.min(u128::from(CAP)) as u64)
            .min(CAP)
    }

    /// The fixed cost of one micro-batch, ps.
    #[inline]
    pub fn fixed(&self) -> u64 {
        self.fixed_ps
    }

    /// The fixed cost of one sharded sequence on each GPU of its group, ps.
    #[inline]
    pub fn seq_fixed(&self) -> u64 {
        self.seq_fixed_ps
    }

    /// The fixed cost of `count` sharded sequences on one GPU, ps (clamped at [`CAP`]).
    #[inline(always)]
    pub fn seqs_fixed(&self, count: u64) -> u64 {
        count.saturating_mul(self.seq_fixed_ps).min(CAP)
    }

    /// Time of one CP rank: local attention and tokens, the micro-batch's sharded attention
    /// and tokens per rank, its communication, and the sharded sequences it holds a share of
    /// (`seqs`), ps: `max(comm, window) + gemm(tokens) + after + fixed + seqs·seq_fixed`, the
    /// window holding the local attention (and, with [`Overlap::AllAttention`], the sharded
    /// attention too), `after` the sharded attention that runs past the window.
    #[inline]
    pub fn rank(&self, local_attn: u64, tokens: u64, sh_attn: u64, comm: u64, seqs: u64) -> u64 {
        let (in_window, after) = self.split(sh_attn);
        self.finish(self.busy(local_attn, tokens, in_window, comm), after)
            .saturating_add(self.seqs_fixed(seqs))
    }

    /// The slowest of the ranks whose local attention and local tokens are `attn[r]` and
    /// `tok[r]`, beside a micro-batch's shared sharded tokens, sharded attention,
    /// communication and sharded sequences: the greatest [`IntModel::rank`] over them (0 for
    /// no ranks), computed with the terms every rank shares added once.
    pub fn slowest(
        &self,
        attn: &[u64],
        tok: &[u64],
        sh_tok: u64,
        sh_attn: u64,
        comm: u64,
        seqs: u64,
    ) -> u64 {
        if attn.is_empty() {
            return 0;
        }
        let (in_window, after) = self.split(sh_attn);
        // Saturating additions of non-negative terms commute with the maximum: the terms every
        // rank shares are added once, after it.
        let most = attn.iter().zip(tok).fold(0u64, |m, (&a, &t)| {
            m.max(self.busy(a, t + sh_tok, in_window, comm))
        });
        self.finish(most, after)
            .saturating_add(self.seqs_fixed(seqs))
    }

    /// The sharded attention inside the overlap window and after it.
    #[inline(always)]
    fn split(&self, sh_attn: u64) -> (u64, u64) {
        if self.all_attention {
            (sh_attn, 0)
        } else {
            (0, sh_attn)
        }
    }

    /// A rank's window (its communication or its attention, whichever is longer) and GEMM.
    #[inline(always)]
    fn busy(&self, local_attn: u64, tokens: u64, in_window: u64, comm: u64) -> u64 {
        comm.max(local_attn + in_window)
            .saturating_add(self.gemm(tokens))
    }

    /// A rank's time from its [`IntModel::busy`] part: plus the attention after the window
    /// and the fixed cost.
    #[inline(always)]
    fn finish(&self, busy: u64, after: u64) -> u64 {
        busy.saturating_add(after).saturating_add(self.fixed_ps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::cost::CostModel;
    use crate::config::options::ShardPadding;
    use crate::config::shape::ModelShape;

    /// `rank` and `slowest` against the rank time written out from its definition: `slowest`
    /// is the greatest over the ranks, with both overlap windows, empty and saturated terms.
    #[test]
    fn slowest_is_the_greatest_rank() {
        use crate::config::cost::Overlap;
        let shape = ModelShape::QWEN2_5_0_5B;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |bits: u32| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (64 - bits)
        };
        for overlap in [Overlap::LocalAttention, Overlap::AllAttention] {
            let cfg = Config::new(2, 8, 1 << 20, shape);
            let mut cost = CostModel::h100(&shape);
            cost.overlap = overlap;
            let im = IntModel::new(&TimeModel::new(&cost, &cfg), cfg.budget());
            assert_eq!(im.slowest(&[], &[], 5, 5, 5, 5), 0);
            for case in 0..if cfg!(miri) { 100 } else { 2000 } {
                let ranks = 1 + (case % 8);
                // Terms up to CAP (2^46) and, every tenth case, tokens past the GEMM clamp.
                let wide = if case % 10 == 0 { 40 } else { 20 };
                let attn: std::vec::Vec<u64> = (0..ranks).map(|_| next(46)).collect();
                let tok: std::vec::Vec<u64> = (0..ranks).map(|_| next(wide)).collect();
                let (sh_tok, sh_attn, comm) = (next(wide), next(46), next(46));
                // The rank time by its definition, one rank at a time.
                let rank = |a: u64, t: u64| {
                    let (window, after) = match overlap {
                        Overlap::AllAttention => (a + sh_attn, 0),
                        Overlap::LocalAttention => (a, sh_attn),
                    };
                    comm.max(window)
                        .saturating_add(im.gemm(t))
                        .saturating_add(after)
                        .saturating_add(im.fixed())
                };
                let want = (0..ranks)
                    .map(|r| rank(attn[r], tok[r] + sh_tok))
                    .max()
                    .unwrap();
                assert_eq!(
                    im.rank(attn[0], tok[0] + sh_tok, sh_attn, comm, 0),
                    rank(attn[0], tok[0] + sh_tok)
                );
                assert_eq!(im.slowest(&attn, &tok, sh_tok, sh_attn, comm, 0), want);
            }
        }
    }

    /// The integer model agrees with the float model it is derived from, to rounding, on
    /// every term.
    #[test]
    fn integer_terms_match_the_time_model() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            for (cp, padding) in [(8, ShardPadding::None), (16, ShardPadding::Zigzag)] {
                let mut cfg = Config::new(2, cp, 1 << 20, shape);
                cfg.shard_padding = padding;
                let tm = TimeModel::new(&CostModel::h100(&shape), &cfg);
                let im = IntModel::new(&tm, cfg.budget());
                // A kernel called per sequence: every whole sequence pays the call.
                let per_call = CostModel {
                    local_sequence_s: 3e-4,
                    ..CostModel::h100(&shape)
                };
                let tm_call = TimeModel::new(&per_call, &cfg);
                let im_call = IntModel::new(&tm_call, cfg.budget());
                let close = |ps: u64, s: f64| {
                    let want = s * 1e12;
                    (ps as f64 - want).abs() <= 1e-6 * want.abs() + 2.0
                };
                for len in [1u32, 100, 777, 4096, 30_000, 200_000] {
                    assert!(close(im.attn_whole(len), tm.attention_whole(len)), "{len}");
                    let whole = tm_call.attention_whole(len);
                    assert_eq!(whole, tm.attention_whole(len) + 3e-4);
                    assert!(close(im_call.attn_whole(len), whole), "{len}");
                    assert!(close(im.attn_shard(len), tm.attention_shard(len)), "{len}");
                    assert!(close(im.gemm(u64::from(len)), tm.gemm(u64::from(len))));
                    for d in 0..2 {
                        let ring = tm.group_ring(d);
                        let link = im.link(ring);
                        assert!(close(
                            im.comm(&link, u64::from(len)),
                            tm.comm(u64::from(len), ring)
                        ));
                    }
                }
                assert!(close(im.fixed(), tm.fixed()));
            }
        }
    }
}
