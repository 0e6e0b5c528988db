//! Configuration: the parallel layout, the token budget, the policy and the model shape, with
//! the limits every value is checked against. The lowest layer: nothing here imports another
//! layer (see `docs/architecture.md`).

pub mod budget;
pub mod chunking;
pub mod cost;
pub mod cp_group;
pub mod default_chunk;
pub mod limits;
pub mod options;
pub mod shape;

pub use chunking::Chunking;
pub use cp_group::CpGroup;

pub use cost::CostModel;
pub use limits::*;
pub use options::{
    FlopsFormula, Policy, RECOMMENDED_POLICY, ShardPadding, Synchronisation, Victim,
};
pub use shape::ModelShape;

use crate::error::{ChunkingField, Error};

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
    /// Chunking (ChunkFlow): whether and how a long sequence may run as consecutive chunks
    /// on one GPU or an aligned group. Off by default; `balanced` chunks a sequence where
    /// its cost model says that is faster, `chunkflow` chunks every sequence longer than a
    /// chunk over the whole CP group.
    pub chunking: Chunking,
    /// How the trainer makes GPUs wait for each other ([`Synchronisation`]): the composition
    /// the evaluator and `balanced` use. [`Synchronisation::EveryGpu`] also makes every DP rank
    /// report the same micro-batch count, as lockstep does. Default: `CpGroup`, the paper's.
    pub sync: Synchronisation,
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
            chunking: Chunking::OFF,
            sync: Synchronisation::CpGroup,
        }
    }

    /// The recommended configuration for a layout and model: [`RECOMMENDED_POLICY`]
    /// (`balanced`) with sub-groups on, every other option as [`Config::new`]. The CLI's
    /// `skrull plan`, the C ABI's `skrull_config_recommended_init` and Python's `Scheduler`
    /// default to it. [`Config::new`] keeps the paper's policy (`skrull`), and the C presets
    /// (`skrull_config_init`, `skrull_config_preset_init`) keep `skrull` with sub-groups off,
    /// so existing callers' plans do not change.
    pub fn recommended(dp: u32, cp: u32, bucket: u32, model: ModelShape) -> Config {
        let mut cfg = Config::new(dp, cp, bucket, model).with_policy(RECOMMENDED_POLICY);
        cfg.subgroups = true;
        cfg
    }

    /// Whether every DP rank runs the same micro-batch count: [`Config::lockstep`], or a
    /// synchronisation that waits for every GPU at every micro-batch.
    #[inline]
    pub fn lockstep_counts(&self) -> bool {
        self.lockstep || self.sync == Synchronisation::EveryGpu
    }

    /// Whether every DP rank reports the same micro-batch count, some of them possibly past
    /// the micro-batches it holds ([`Config::lockstep_counts`] or a fixed
    /// [`Config::micro_batches`]).
    #[inline]
    pub fn uniform_counts(&self) -> bool {
        self.lockstep_counts() || self.micro_batches != 0
    }

    /// Whether the plan's empty micro-batches are filled by splitting: a fixed count, or
    /// [`Config::fill_empty`] with lockstep counts.
    #[inline]
    pub fn fills_empty(&self) -> bool {
        self.micro_batches != 0 || (self.fill_empty && self.lockstep_counts())
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

    /// Checks the chunking settings, and that `chunkflow` has them on.
    fn validate_chunking(&self) -> Result<(), Error> {
        use crate::config::chunking::{MAX_CHUNK_KEEP, STATE_SCALE};
        let c = &self.chunking;
        let (field, value, max) = if self.policy == Policy::ChunkFlow && !c.is_on() {
            (ChunkingField::Size, c.size, 0)
        } else if c.is_on() && !(1..=MAX_CHUNK_KEEP).contains(&c.keep) {
            (ChunkingField::Keep, c.keep, MAX_CHUNK_KEEP)
        } else if c.is_on() && u64::from(c.state_permille) > STATE_SCALE {
            (
                ChunkingField::StatePermille,
                c.state_permille,
                STATE_SCALE as u32,
            )
        } else {
            return Ok(());
        };
        Err(Error::InvalidChunking { field, value, max })
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
            return Err(Error::InvalidDp {
                dp: self.dp,
                max: MAX_DP,
            });
        }
        if self.cp == 0 || self.cp > MAX_CP {
            return Err(Error::InvalidCp {
                cp: self.cp,
                max: MAX_CP,
            });
        }
        if self.bucket == 0 || self.bucket > MAX_BUCKET {
            return Err(Error::InvalidBucket {
                bucket: self.bucket,
                max: MAX_BUCKET,
            });
        }
        if self.pad_multiple == 0 || self.pad_multiple > MAX_PAD_MULTIPLE {
            return Err(Error::InvalidPadMultiple {
                pad_multiple: self.pad_multiple,
                max: MAX_PAD_MULTIPLE,
            });
        }
        self.model.validate()?;
        if let Some(cost) = &self.cost {
            cost.validate()
                .map_err(|e| Error::InvalidCost { field: e.field })?;
        }
        self.validate_chunking()?;
        if self.max_micro_batches != 0 && self.micro_batches > self.max_micro_batches {
            return Err(Error::MicroBatchLimit {
                dp_rank: 0,
                limit: self.max_micro_batches,
                needed: self.micro_batches,
            });
        }
        if self.policy == Policy::Balanced && self.flops != FlopsFormula::default() {
            return Err(Error::Unsupported {
                policy: self.policy.name(),
                option: "flops",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ShapeField;

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
        assert_eq!(c.validate(), Err(Error::InvalidDp { dp: 0, max: MAX_DP }));
        c = ok;
        c.cp = MAX_CP + 1;
        assert_eq!(
            c.validate(),
            Err(Error::InvalidCp {
                cp: MAX_CP + 1,
                max: MAX_CP
            })
        );
        c = ok;
        c.bucket = u32::MAX;
        assert_eq!(
            c.validate(),
            Err(Error::InvalidBucket {
                bucket: u32::MAX,
                max: MAX_BUCKET
            })
        );
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

    /// The range errors carry the limit they broke (`error.rs` imports no limit), and print
    /// the text they printed when the message read the limits itself.
    #[test]
    fn range_errors_print_the_limits_they_carry() {
        use std::string::ToString;
        let ok = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        let text = |c: Config| c.validate().map_err(|e| e.to_string());
        let want = |s: &str| Err(s.to_string());
        assert_eq!(
            text(Config { dp: 0, ..ok }),
            want("DP size 0 is out of range 1..=65536")
        );
        assert_eq!(
            text(Config { cp: 257, ..ok }),
            want("CP size 257 is out of range 1..=256")
        );
        assert_eq!(
            text(Config { bucket: 0, ..ok }),
            want("BucketSize 0 is out of range 1..=2147483647")
        );
        assert_eq!(
            text(Config {
                pad_multiple: 65_537,
                ..ok
            }),
            want("pad multiple 65537 is out of range 1..=65536")
        );
        let balanced = Config {
            flops: FlopsFormula::Megatron,
            ..ok.with_policy(Policy::Balanced)
        };
        assert_eq!(
            text(balanced),
            want("policy balanced does not apply the flops option: leave it at its default")
        );
        let lengths = ok.budget().check_lengths(&[5, u32::MAX]);
        assert_eq!(
            lengths.map(|_| ()).map_err(|e| e.to_string()),
            want("sequence 1 has 4294967295 tokens, the most is 2147483647")
        );
    }

    #[test]
    fn recommended_differs_from_new_in_the_policy_only() {
        let new = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        let rec = Config::recommended(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        assert_eq!(rec.policy, Policy::Balanced);
        assert!(rec.subgroups);
        assert_eq!(
            new.policy,
            Policy::Skrull,
            "Config::new keeps the paper's policy"
        );
        assert_eq!(rec, new.with_policy(RECOMMENDED_POLICY));
        assert_eq!(rec.validate(), Ok(()));
    }

    #[test]
    fn option_names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(Policy::from_name(p.name()), Some(p));
        }
        assert_eq!(Policy::from_name("fifo"), None);
        for v in Victim::ALL {
            assert_eq!(Victim::from_name(v.name()), Some(v));
        }
        for f in FlopsFormula::ALL {
            assert_eq!(FlopsFormula::from_name(f.name()), Some(f));
        }
        for p in ShardPadding::ALL {
            assert_eq!(ShardPadding::from_name(p.name()), Some(p));
        }
        assert_eq!(Victim::ALL[0], Victim::default());
        assert_eq!(FlopsFormula::ALL[0], FlopsFormula::default());
        assert_eq!(ShardPadding::ALL[0], ShardPadding::default());
        assert_eq!(FlopsFormula::from_name("Paper"), None);
        assert_eq!(ShardPadding::from_name(""), None);
    }
}
