//! The option enums of a configuration (policy, FLOPs formula, rollback victim, shard
//! padding), each with its stable name.

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

impl FlopsFormula {
    /// Every formula, in a fixed order (the C ABI's `SKRULL_FLOPS_*` numbers).
    pub const ALL: [FlopsFormula; 2] = [FlopsFormula::Paper, FlopsFormula::Megatron];

    /// The formula's stable name (`paper`, `megatron`).
    pub fn name(self) -> &'static str {
        match self {
            FlopsFormula::Paper => "paper",
            FlopsFormula::Megatron => "megatron",
        }
    }

    /// Parses a name given by [`FlopsFormula::name`].
    pub fn from_name(name: &str) -> Option<FlopsFormula> {
        Self::ALL.iter().copied().find(|f| f.name() == name)
    }
}

/// Which scheduling policy writes the plan.
///
/// Every option of [`Config`](crate::Config) is honoured by every policy it concerns: the rollback
/// [`Victim`] by the policies that roll back (`skrull`, `roundrobin`, `balanced`; the others
/// never shard a local sequence), the [`FlopsFormula`] by the policies that balance FLOPs
/// (`skrull`, and `roundrobin`'s DP bin-packing). `balanced` balances estimated time, so it
/// rejects a FLOPs formula other than the default ([`Error::Unsupported`](crate::Error::Unsupported)) rather than
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
    /// ChunkFlow's scheme (its Algorithms 1 and 2): every sequence longer than ChunkSize runs
    /// chunked over the whole CP group in a micro-batch of its own; the others are packed
    /// first-fit-decreasing into micro-batches of at most ChunkSize tokens sharded over the
    /// group; micro-batches go to DP ranks by least estimated work (see
    /// [`chunkflow`](crate::policy::chunkflow)). Needs [`Config::chunking`](crate::Config::chunking) on.
    ChunkFlow,
}

impl Policy {
    /// Every policy, in a fixed order.
    pub const ALL: [Policy; 6] = [
        Policy::Skrull,
        Policy::DeepSpeed,
        Policy::Packed,
        Policy::RoundRobin,
        Policy::Balanced,
        Policy::ChunkFlow,
    ];

    /// Whether the policy needs the workspace's per-sequence cost and decision rows
    /// (`balanced`, `chunkflow`), which makes its workspace larger.
    pub fn uses_cost_rows(self) -> bool {
        matches!(self, Policy::Balanced | Policy::ChunkFlow)
    }

    /// The policy's stable name (`skrull`, `deepspeed`, `packed`, `roundrobin`, `balanced`, `chunkflow`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Skrull => "skrull",
            Policy::DeepSpeed => "deepspeed",
            Policy::Packed => "packed",
            Policy::RoundRobin => "roundrobin",
            Policy::Balanced => "balanced",
            Policy::ChunkFlow => "chunkflow",
        }
    }

    /// Parses a name given by [`Policy::name`].
    pub fn from_name(name: &str) -> Option<Policy> {
        Self::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// The policy of [`Config::recommended`](crate::Config::recommended): `balanced`, which beats the best of `skrull`,
/// `packed` and `deepspeed` on every `skrull simulate` row (`docs/balanced.md`).
pub const RECOMMENDED_POLICY: Policy = Policy::Balanced;

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
    /// Every victim, in a fixed order (the C ABI's `SKRULL_VICTIM_*` numbers).
    pub const ALL: [Victim; 2] = [Victim::Shortest, Victim::Longest];

    /// The option's stable name (`shortest`, `longest`).
    pub fn name(self) -> &'static str {
        match self {
            Victim::Shortest => "shortest",
            Victim::Longest => "longest",
        }
    }

    /// Parses a name given by [`Victim::name`].
    pub fn from_name(name: &str) -> Option<Victim> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
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
    /// Every padding, in a fixed order (the C ABI's `SKRULL_SHARD_PADDING_*` numbers).
    pub const ALL: [ShardPadding; 2] = [ShardPadding::None, ShardPadding::Zigzag];

    /// The option's stable name (`none`, `zigzag`).
    pub fn name(self) -> &'static str {
        match self {
            ShardPadding::None => "none",
            ShardPadding::Zigzag => "zigzag",
        }
    }

    /// Parses a name given by [`ShardPadding::name`].
    pub fn from_name(name: &str) -> Option<ShardPadding> {
        Self::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// How the trainer that runs a plan makes its GPUs wait for each other: the composition the
/// evaluator, the simulator and `balanced`'s objective use (`docs/cost_model.md`,
/// "Synchronisation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronisation {
    /// Every micro-batch waits for its slowest CP rank; DP ranks meet at the step (the
    /// paper's composition, and the default).
    #[default]
    CpGroup,
    /// Every micro-batch waits for every GPU of the job (ZeRO-2/3, which reduce gradients at
    /// every backward): the iteration is the sum over micro-batch indices of the slowest GPU,
    /// and every DP rank runs the same micro-batch count (plans are lockstep).
    EveryGpu,
    /// CP ranks meet only in micro-batches that hold a sequence spanning several of them
    /// (sharded, or chunked on a group) and everyone at the step's gradient all-reduce (DDP
    /// with gradient accumulation under `no_sync`, what `SkrullTrainer` runs): a micro-batch
    /// of whole sequences runs on each CP rank at its own pace.
    Sharded,
}

impl Synchronisation {
    /// Every setting, in a fixed order (the C ABI's `SKRULL_SYNC_*` numbers).
    pub const ALL: [Synchronisation; 3] = [
        Synchronisation::CpGroup,
        Synchronisation::EveryGpu,
        Synchronisation::Sharded,
    ];

    /// The setting's stable name (`cp-group`, `every-gpu`, `sharded`).
    pub fn name(self) -> &'static str {
        match self {
            Synchronisation::CpGroup => "cp-group",
            Synchronisation::EveryGpu => "every-gpu",
            Synchronisation::Sharded => "sharded",
        }
    }

    /// Parses a name given by [`Synchronisation::name`].
    pub fn from_name(name: &str) -> Option<Synchronisation> {
        Self::ALL.iter().copied().find(|s| s.name() == name)
    }
}
