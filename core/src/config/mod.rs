//! Configuration: the parallel layout, the token budget, the policy and the model shape, with
//! the limits every value is checked against.

pub mod budget;
pub mod cp_group;

pub use cp_group::CpGroup;

use crate::error::{Error, ShapeField};
use crate::model::cost::CostModel;

/// Largest data-parallel size accepted.
pub const MAX_DP: u32 = 65_536;
/// Largest context-parallel size accepted (DACP keeps per-CP-rank state on the stack).
pub const MAX_CP: u32 = 256;
/// Largest BucketSize (tokens per GPU per micro-batch) accepted: `2^31 - 1`.
pub const MAX_BUCKET: u32 = i32::MAX as u32;
/// Longest sequence accepted, in tokens: `2^31 - 1`.
pub const MAX_SEQ_LEN: u32 = i32::MAX as u32;
/// Most sequences in one global batch.
pub const MAX_SEQS: usize = 65_536;
/// Largest [`Config::pad_multiple`].
pub const MAX_PAD_MULTIPLE: u32 = 65_536;

/// Largest `ModelShape::hidden` (and `kv_hidden`).
pub const MAX_HIDDEN: u32 = 1 << 16;
/// Largest `ModelShape::ffn`.
pub const MAX_FFN: u32 = 1 << 18;
/// Largest `ModelShape::layers`.
pub const MAX_LAYERS: u32 = 1 << 10;
/// Largest `ModelShape::vocab`.
pub const MAX_VOCAB: u32 = 1 << 22;

/// The transformer shape used to count FLOPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Hidden size `h` (equal to query heads x head dim for the supported models).
    pub hidden: u32,
    /// K/V hidden size `h_kv` = KV heads x head dim.
    pub kv_hidden: u32,
    /// FFN (intermediate) width.
    pub ffn: u32,
    /// Number of transformer layers.
    pub layers: u32,
    /// Vocabulary size (0: do not count the LM head).
    pub vocab: u32,
    /// Whether the FFN is gated (SwiGLU: three matrices instead of two).
    pub swiglu: bool,
}

impl ModelShape {
    /// Qwen2.5-0.5B: h 896, 24 layers, 14 Q / 2 KV heads of 64, SwiGLU FFN 4864, vocab 151,936.
    pub const QWEN2_5_0_5B: ModelShape = ModelShape {
        hidden: 896,
        kv_hidden: 128,
        ffn: 4864,
        layers: 24,
        vocab: 151_936,
        swiglu: true,
    };
    /// Qwen2.5-7B: h 3584, 28 layers, 28 Q / 4 KV heads of 128, SwiGLU FFN 18944, vocab 152,064.
    pub const QWEN2_5_7B: ModelShape = ModelShape {
        hidden: 3584,
        kv_hidden: 512,
        ffn: 18_944,
        layers: 28,
        vocab: 152_064,
        swiglu: true,
    };

    /// Looks up a preset by name (`qwen2.5-0.5b`, `qwen2.5-7b`).
    pub fn preset(name: &str) -> Option<ModelShape> {
        match name {
            "qwen2.5-0.5b" => Some(Self::QWEN2_5_0_5B),
            "qwen2.5-7b" => Some(Self::QWEN2_5_7B),
            _ => None,
        }
    }

    /// Checks every field against its limit.
    ///
    /// # Errors
    /// [`Error::InvalidModel`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, value| Err(Error::InvalidModel { field, value });
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            return bad(ShapeField::Hidden, self.hidden);
        }
        if self.kv_hidden == 0 || self.kv_hidden > self.hidden {
            return bad(ShapeField::KvHidden, self.kv_hidden);
        }
        if self.ffn == 0 || self.ffn > MAX_FFN {
            return bad(ShapeField::Ffn, self.ffn);
        }
        if self.layers == 0 || self.layers > MAX_LAYERS {
            return bad(ShapeField::Layers, self.layers);
        }
        if self.vocab > MAX_VOCAB {
            return bad(ShapeField::Vocab, self.vocab);
        }
        Ok(())
    }
}

/// Which FLOPs formula balances the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlopsFormula {
    /// The Skrull paper's per-layer forward count `20h²S + 4h·h_kv·S + 4hS²`, times layers
    /// and 3 for forward + backward.
    #[default]
    Paper,
    /// Megatron-LM's count: Q/K/V/O projections, causal attention `2S²h`, the (SwiGLU) FFN and
    /// the LM head, times 3 for forward + backward.
    Megatron,
}

/// Which scheduling policy writes the plan.
///
/// Every option of [`Config`] is honoured by every policy it concerns: the rollback
/// [`Victim`] by the policies that roll back (`skrull`, `roundrobin`, `balanced`; the others
/// never shard a local sequence), the [`FlopsFormula`] by the policies that balance FLOPs
/// (`skrull`, and `roundrobin`'s DP bin-packing). `balanced` balances estimated time, so it
/// rejects a FLOPs formula other than the default ([`Error::Unsupported`]) rather than
/// ignore it. The module of each policy is listed in the crate documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Policy {
    /// The paper: GDS (LPT over DP ranks, strided micro-batches) + DACP.
    #[default]
    Skrull,
    /// The paper's baseline: BatchSize consecutive sequences per DP rank, one sequence per
    /// micro-batch, every sequence sharded.
    DeepSpeed,
    /// Sample order, equal counts per DP rank, next-fit packing under the budget, all sharded.
    Packed,
    /// The paper's case-study Algorithm 4 (memory-only worst fit with rollback, sample order)
    /// inside GDS.
    RoundRobin,
    /// Cost-aware: DP ranks, micro-batch grouping and local/sharded placement chosen on the
    /// cost model's estimated time, evaluated over a small deterministic candidate set (see
    /// [`balanced`](crate::policy::balanced)).
    Balanced,
}

impl Policy {
    /// Every policy, in a fixed order.
    pub const ALL: [Policy; 5] = [
        Policy::Skrull,
        Policy::DeepSpeed,
        Policy::Packed,
        Policy::RoundRobin,
        Policy::Balanced,
    ];

    /// The policy's stable name (`skrull`, `deepspeed`, `packed`, `roundrobin`, `balanced`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Skrull => "skrull",
            Policy::DeepSpeed => "deepspeed",
            Policy::Packed => "packed",
            Policy::RoundRobin => "roundrobin",
            Policy::Balanced => "balanced",
        }
    }

    /// Parses a name given by [`Policy::name`].
    pub fn from_name(name: &str) -> Option<Policy> {
        Self::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// Which local sequence a DACP rollback shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Victim {
    /// The shortest local sequence on the rank (the paper's choice).
    #[default]
    Shortest,
    /// The longest one: frees the most memory per rollback.
    Longest,
}

impl Victim {
    /// The option's stable name (`shortest`, `longest`).
    pub fn name(self) -> &'static str {
        match self {
            Victim::Shortest => "shortest",
            Victim::Longest => "longest",
        }
    }

    /// Parses a name given by [`Victim::name`].
    pub fn from_name(name: &str) -> Option<Victim> {
        match name {
            "shortest" => Some(Victim::Shortest),
            "longest" => Some(Victim::Longest),
            _ => None,
        }
    }
}

/// How a sharded sequence is cut over the CP group, which decides the tokens each GPU holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardPadding {
    /// Uneven zigzag chunks, no padding: each GPU holds at most `ceil(S / N)` tokens.
    #[default]
    None,
    /// Zigzag chunks padded to a multiple of `2N` (TransformerEngine's THD layout): each GPU
    /// holds exactly `2 * ceil(S / 2N)` tokens, padding included, and the budget charges it.
    Zigzag,
}

impl ShardPadding {
    /// The option's stable name (`none`, `zigzag`).
    pub fn name(self) -> &'static str {
        match self {
            ShardPadding::None => "none",
            ShardPadding::Zigzag => "zigzag",
        }
    }

    /// Parses a name given by [`ShardPadding::name`].
    pub fn from_name(name: &str) -> Option<ShardPadding> {
        match name {
            "none" => Some(ShardPadding::None),
            "zigzag" => Some(ShardPadding::Zigzag),
            _ => None,
        }
    }
}

/// Everything a policy needs besides the lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Data-parallel size: model replicas, each running its micro-batches in turn.
    pub dp: u32,
    /// Context-parallel size N: GPUs that share one micro-batch.
    pub cp: u32,
    /// BucketSize C: the most tokens one GPU may hold in one micro-batch.
    pub bucket: u32,
    /// The policy that writes the plan.
    pub policy: Policy,
    /// The DACP rollback victim.
    pub victim: Victim,
    /// The most micro-batches a DP rank may run (0: no limit).
    pub max_micro_batches: u32,
    /// The model shape that FLOPs are counted for.
    pub model: ModelShape,
    /// The FLOPs formula.
    pub flops: FlopsFormula,
    /// How sharded sequences are cut (and so what they cost each GPU).
    pub shard_padding: ShardPadding,
    /// Pad multiple `M` (1: none): a sharded sequence is padded to a multiple of
    /// `lcm(2N, M)` (of `M` when `N = 1`), whatever [`Config::shard_padding`] says, and
    /// with [`Config::pad_local`] a local one to a multiple of `M`. Megatron with sequence
    /// parallelism wants `M = 2·cp·tp`; FP8 recipes `lcm(2·cp·tp, 16)`. See
    /// [`Budget`](crate::config::budget::Budget) for the exact rule; the budget charges the padding.
    pub pad_multiple: u32,
    /// Whether local (whole) sequences are padded to a multiple of [`Config::pad_multiple`] too.
    pub pad_local: bool,
    /// Lockstep micro-batches: every DP rank reports the same micro-batch count (the largest
    /// any rank needs); a rank's extra micro-batches are empty. Trainers whose micro-batch loop
    /// count is global (Megatron, verl) need this.
    pub lockstep: bool,
    /// Whether a policy may shard a sequence over an aligned sub-group of `g` CP ranks (`g` a
    /// power of two dividing the CP size, [`CpGroup`]) instead of the
    /// whole group, where its cost model says that is faster. `balanced` uses it; the paper's
    /// policies and the baselines only ever use 1 and N. Default: on (the C ABI: off unless
    /// the caller sets it, because the caller must then read each placement's group).
    pub subgroups: bool,
    /// Fill empty lockstep micro-batches: with [`Config::lockstep`], a DP rank that needs
    /// fewer micro-batches than the longest rank splits its multi-sequence micro-batches
    /// (moving a sequence, sharded ones first, into a new micro-batch of its own) until it
    /// runs the same count with none empty. A
    /// micro-batch stays empty only when the rank has fewer sequences than that count.
    /// Trainers whose collators cannot take an empty micro-batch (Hugging Face, TRL,
    /// Megatron's packing) need this. Without lockstep or [`Config::micro_batches`] it
    /// changes nothing.
    pub fill_empty: bool,
    /// A fixed micro-batch count `G` per DP rank (0: none). Every DP rank reports exactly
    /// `G` micro-batches, filled as with [`Config::fill_empty`] (empty only where a rank has
    /// fewer than `G` sequences); a plan that needs more than `G` on some rank is refused
    /// with [`Error::MicroBatchCount`], which names the smallest `G` that fits. Hugging
    /// Face's `gradient_accumulation_steps` is such a count.
    pub micro_batches: u32,
    /// The cost model that plans (`balanced`) and evaluates: hardware, kernels and topology
    /// (GPUs per node, intra- and inter-node ring latency and bandwidth). `None`: the H100
    /// preset for [`Config::model`] ([`Config::cost_model`]).
    pub cost: Option<CostModel>,
}

impl Config {
    /// A configuration with the default policy (`skrull`), victim (`shortest`), no micro-batch
    /// limit and the paper's FLOPs formula.
    pub fn new(dp: u32, cp: u32, bucket: u32, model: ModelShape) -> Config {
        Config {
            dp,
            cp,
            bucket,
            policy: Policy::default(),
            victim: Victim::default(),
            max_micro_batches: 0,
            model,
            flops: FlopsFormula::default(),
            shard_padding: ShardPadding::default(),
            pad_multiple: 1,
            pad_local: false,
            lockstep: false,
            subgroups: true,
            fill_empty: false,
            micro_batches: 0,
            cost: None,
        }
    }

    /// Whether every DP rank reports the same micro-batch count, some of them possibly past
    /// the micro-batches it holds ([`Config::lockstep`] or a fixed [`Config::micro_batches`]).
    #[inline]
    pub fn uniform_counts(&self) -> bool {
        self.lockstep || self.micro_batches != 0
    }

    /// Whether the plan's empty micro-batches are filled by splitting: a fixed count, or
    /// [`Config::fill_empty`] with lockstep.
    #[inline]
    pub fn fills_empty(&self) -> bool {
        self.micro_batches != 0 || (self.fill_empty && self.lockstep)
    }

    /// The cost model this configuration plans and evaluates with: [`Config::cost`], or the
    /// H100 preset for the model shape.
    pub fn cost_model(&self) -> CostModel {
        self.cost.unwrap_or_else(|| CostModel::h100(&self.model))
    }

    /// The same configuration with another cost model.
    pub fn with_cost(mut self, cost: CostModel) -> Config {
        self.cost = Some(cost);
        self
    }

    /// The same configuration with another policy.
    pub fn with_policy(mut self, policy: Policy) -> Config {
        self.policy = policy;
        self
    }

    /// The same configuration with another rollback victim.
    pub fn with_victim(mut self, victim: Victim) -> Config {
        self.victim = victim;
        self
    }

    /// The token budget of this configuration: what each placement costs a GPU.
    #[inline]
    pub fn budget(&self) -> crate::config::budget::Budget {
        crate::config::budget::Budget::new(self)
    }

    /// Tokens each GPU holds of a sequence of `len` tokens sharded over the CP group
    /// ([`Budget::share`](crate::config::budget::Budget::share); builds the budget on every call, so
    /// hot loops should hold a [`Config::budget`] instead).
    #[inline]
    pub fn shard_tokens(&self, len: u32) -> u32 {
        self.budget().share(len)
    }

    /// Tokens a local sequence of `len` tokens costs its rank
    /// ([`Budget::local`](crate::config::budget::Budget::local)).
    #[inline]
    pub fn local_tokens(&self, len: u32) -> u32 {
        self.budget().local(len)
    }

    /// Checks the layout, the budget and the model shape.
    ///
    /// # Errors
    /// [`Error::InvalidDp`], [`Error::InvalidCp`], [`Error::InvalidBucket`],
    /// [`Error::InvalidPadMultiple`], [`Error::InvalidModel`], [`Error::InvalidCost`],
    /// [`Error::Unsupported`] (an option the policy does not apply, see [`Policy`]) or
    /// [`Error::MicroBatchLimit`] (a fixed [`Config::micro_batches`] above a nonzero
    /// [`Config::max_micro_batches`]: every DP rank would need more than the limit).
    pub fn validate(&self) -> Result<(), Error> {
        if self.dp == 0 || self.dp > MAX_DP {
            return Err(Error::InvalidDp { dp: self.dp });
        }
        if self.cp == 0 || self.cp > MAX_CP {
            return Err(Error::InvalidCp { cp: self.cp });
        }
        if self.bucket == 0 || self.bucket > MAX_BUCKET {
            return Err(Error::InvalidBucket {
                bucket: self.bucket,
            });
        }
        if self.pad_multiple == 0 || self.pad_multiple > MAX_PAD_MULTIPLE {
            return Err(Error::InvalidPadMultiple {
                pad_multiple: self.pad_multiple,
            });
        }
        self.model.validate()?;
        if let Some(cost) = &self.cost {
            cost.validate()
                .map_err(|e| Error::InvalidCost { field: e.field })?;
        }
        if self.max_micro_batches != 0 && self.micro_batches > self.max_micro_batches {
            return Err(Error::MicroBatchLimit {
                dp_rank: 0,
                limit: self.max_micro_batches,
                needed: self.micro_batches,
            });
        }
        if self.policy == Policy::Balanced && self.flops != FlopsFormula::default() {
            return Err(Error::Unsupported {
                policy: self.policy,
                option: "flops",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_resolve_by_name() {
        assert_eq!(
            ModelShape::preset("qwen2.5-0.5b"),
            Some(ModelShape::QWEN2_5_0_5B)
        );
        assert_eq!(
            ModelShape::preset("qwen2.5-7b"),
            Some(ModelShape::QWEN2_5_7B)
        );
        assert_eq!(ModelShape::preset("gpt-2"), None);
        assert!(ModelShape::QWEN2_5_0_5B.validate().is_ok());
        assert!(ModelShape::QWEN2_5_7B.validate().is_ok());
    }

    #[test]
    fn each_out_of_range_value_names_itself() {
        let ok = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok;
        c.dp = 0;
        assert_eq!(c.validate(), Err(Error::InvalidDp { dp: 0 }));
        c = ok;
        c.cp = MAX_CP + 1;
        assert_eq!(c.validate(), Err(Error::InvalidCp { cp: MAX_CP + 1 }));
        c = ok;
        c.bucket = u32::MAX;
        assert_eq!(c.validate(), Err(Error::InvalidBucket { bucket: u32::MAX }));
        c = ok;
        c.model.kv_hidden = c.model.hidden + 1;
        assert_eq!(
            c.validate(),
            Err(Error::InvalidModel {
                field: ShapeField::KvHidden,
                value: 897
            })
        );
        c = ok;
        c.model.layers = 0;
        assert_eq!(
            c.validate(),
            Err(Error::InvalidModel {
                field: ShapeField::Layers,
                value: 0
            })
        );
    }

    #[test]
    fn policy_and_victim_names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(Policy::from_name(p.name()), Some(p));
        }
        assert_eq!(Policy::from_name("fifo"), None);
        for v in [Victim::Shortest, Victim::Longest] {
            assert_eq!(Victim::from_name(v.name()), Some(v));
        }
    }
}
