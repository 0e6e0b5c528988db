//! The per-sequence cost rows `balanced` keeps in the workspace ([`Rows`]), the two forms of a
//! sequence's GPU time ([`forms`], [`work`]), the sharded-prefix sums its lower bounds use
//! ([`Prefix`]) and the cheapest group a sequence may be sharded over ([`cheapest_group`]).

use crate::config::CpGroup;
use crate::kernel::sort::key_index;
use crate::model::fixed::IntModel;

/// The per-sequence costs this policy keeps in the workspace: four words per sequence,
/// together (one cache line fetch reads them all).
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    /// Per sequence: its length in tokens.
    pub(super) lengths: &'a [u32],
    /// Per sequence: whole attention, shard attention, [`work`], and the least of `g` times
    /// one GPU's share and shard attention over the groups it may be sharded over (the whole
    /// group and, with sub-groups, every aligned sub-group its share fits), all in ps.
    pub(super) costs: &'a [[u64; 4]],
}

impl Rows<'_> {
    /// Length of sequence `seq`, tokens.
    #[inline(always)]
    pub(super) fn len(&self, seq: u32) -> u32 {
        self.lengths.get(seq as usize).copied().unwrap_or(0)
    }
    /// Cost word `k` of sequence `seq` (0 past the rows).
    #[inline(always)]
    fn cost(&self, seq: u32, k: usize) -> u64 {
        self.costs.get(seq as usize).map_or(0, |c| c[k & 3])
    }
    /// Whole attention, ps.
    #[inline(always)]
    pub(super) fn aw(&self, seq: u32) -> u64 {
        self.cost(seq, 0)
    }
    /// Shard attention, ps.
    #[inline(always)]
    pub(super) fn ash(&self, seq: u32) -> u64 {
        self.cost(seq, 1)
    }
    /// [`work`], ps.
    #[inline(always)]
    pub(super) fn work(&self, seq: u32) -> u64 {
        self.cost(seq, 2)
    }
    /// The cheapest group's cost ([`cheapest_group`]), ps.
    #[inline(always)]
    pub(super) fn grp(&self, seq: u32) -> u64 {
        self.cost(seq, 3)
    }
}

/// A sequence's GPU time wherever it runs: the cheaper of whole and `N` shards, ps (no fixed
/// cost). Summed over a micro-batch and divided by `N`, a lower bound on its time less the
/// fixed cost.
#[inline]
pub(super) fn work(im: &IntModel, len: u32, aw: u64, ash: u64) -> u64 {
    let (_, whole, sharded) = forms(im, len, aw, ash);
    whole.min(sharded)
}

/// A sequence's share per GPU, and its GPU time run whole on one rank and sharded over all `N`
/// (summed over the ranks, the per-sharded-sequence fixed cost on each), ps, without the fixed
/// cost of the micro-batch.
#[inline(always)]
pub(super) fn forms(im: &IntModel, len: u32, aw: u64, ash: u64) -> (u32, u64, u64) {
    let share = im.share(len);
    let whole = aw + im.gemm_linear(u64::from(im.local(len)));
    let sharded = u64::from(im.cp()) * (ash + im.gemm_linear(u64::from(share)) + im.seq_fixed());
    (share, whole, sharded)
}

/// Sums over sharded members that bound an attempt's time from below.
#[derive(Clone, Copy, Default)]
pub(super) struct Prefix {
    /// Sharded cost less [`work`], summed, ps.
    pub(super) extra: u64,
    /// Tokens.
    pub(super) len: u64,
    /// Shares per GPU.
    pub(super) tok: u64,
    /// Shard attention per GPU, ps.
    pub(super) attn: u64,
    /// Sequences.
    pub(super) seqs: u64,
}

impl Prefix {
    /// Adds sequence `seq` sharded; returns its whole time ([`forms`]) and its [`work`], which
    /// the caller's own sums need (each cost word is read once).
    #[inline(always)]
    pub(super) fn add(&mut self, im: &IntModel, rows: &Rows<'_>, seq: u32) -> (u64, u64) {
        let (len, ash, work) = (rows.len(seq), rows.ash(seq), rows.work(seq));
        let (share, whole, sharded) = forms(im, len, rows.aw(seq), ash);
        self.extra = self.extra.saturating_add(sharded - work);
        self.len += u64::from(len);
        self.tok += u64::from(share);
        self.attn = self.attn.saturating_add(ash);
        self.seqs += 1;
        (whole, work)
    }
}

/// The least of `g` times one GPU's share, shard attention and per-sharded-sequence fixed cost
/// of a sequence of `len` tokens over the groups it may be sharded over: the whole group, and
/// every sub-group size whose share fits `bucket`, ps.
pub(super) fn cheapest_group(im: &IntModel, bucket: u32, len: u32) -> u64 {
    let n = im.cp();
    core::iter::once(n)
        .chain(CpGroup::sub_sizes(n))
        .filter_map(|g| {
            let share = im.share_in(len, g);
            let cost = im.attention(share, len) + im.gemm_linear(u64::from(share)) + im.seq_fixed();
            (share <= bucket).then(|| u64::from(g).saturating_mul(cost))
        })
        .min()
        .unwrap_or(0)
}

/// The LPT weight of a sequence over DP ranks: its [`work`] plus its share of the fixed
/// micro-batch cost by tokens.
#[derive(Clone, Copy)]
pub(super) struct Weight {
    /// The fixed cost of a micro-batch, ps.
    fixed: u64,
    /// Tokens of one full micro-batch (`C x N`, at least 1).
    per_mb: u64,
}

impl Weight {
    /// The weight of `cfg`'s micro-batches under `im`.
    pub(super) fn new(im: &IntModel, bucket: u32, cp: u32) -> Weight {
        let per_mb = u64::from(bucket).saturating_mul(u64::from(cp)).max(1);
        Weight {
            fixed: im.fixed(),
            per_mb,
        }
    }

    /// The weight of a sequence of `len` tokens and work `w`.
    #[inline(always)]
    pub(super) fn of(&self, len: u32, w: u64) -> u128 {
        let by_tokens = match self.fixed.checked_mul(u64::from(len)) {
            Some(x) => u128::from(x / self.per_mb),
            None => u128::from(self.fixed) * u128::from(len) / u128::from(self.per_mb),
        };
        u128::from(w) + by_tokens
    }
}

/// Fills the cost rows of every sequence, once per distinct length (`keys`: the sort keys,
/// ascending by length; `subs`: whether sub-groups are tried, else the cheapest-group word is
/// 0). Returns the sum of the sequences' [`Weight`]s, which bounds the LPT's loads.
// Inlined (one caller), as before the split.
#[inline(always)]
pub(super) fn fill(
    im: &IntModel,
    bucket: u32,
    subs: bool,
    weight: Weight,
    keys: &[u64],
    costs: &mut [[u64; 4]],
) -> u128 {
    let mut total = 0u128;
    // The previous length's whole attention, shard attention, work, cheapest group and
    // weight, in plain locals (every length is at least 1, so 0 means none yet).
    let mut prev = 0u32;
    let (mut a, mut s, mut w, mut c, mut wt) = (0u64, 0u64, 0u64, 0u64, 0u128);
    for &key in keys {
        let len = (key >> 32) as u32;
        if len != prev {
            (a, s) = (im.attn_whole(len), im.attn_shard(len));
            c = if subs {
                cheapest_group(im, bucket, len)
            } else {
                0
            };
            w = work(im, len, a, s);
            wt = weight.of(len, w);
            prev = len;
        }
        let seq = key_index(key);
        if let Some(x) = costs.get_mut(seq) {
            *x = [a, s, w, c];
        }
        total += wt;
    }
    total
}
