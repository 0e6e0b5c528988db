//! The one error type of the core: every way a request can be refused, with the numbers the
//! caller needs to fix it.

use core::fmt;

/// Which caller-provided buffer was too small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Buffer {
    /// `PlanBuffers::placements`.
    Placements,
    /// `PlanBuffers::micro_batches`.
    MicroBatches,
    /// `PlanBuffers::members`.
    Members,
    /// `PlanBuffers::rank_tokens`.
    RankTokens,
    /// `PlanBuffers::micro_batches_per_dp`.
    MicroBatchesPerDp,
    /// The [`Workspace`](crate::Workspace) slab (its sizes count 16-byte words).
    Workspace,
}

/// A [`CostModel`](crate::config::cost::CostModel) field, as validation errors name it. The order is the C ABI's
/// `skrull_cost_model` field order, and [`CostField::number`] (the 1-based position) is the
/// number the C error details report, so every surface names a field the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CostField {
    /// `attention_tile`.
    AttentionTile,
    /// `peak_flops`.
    PeakFlops,
    /// `gemm_efficiency`.
    GemmEfficiency,
    /// `hbm_bandwidth`.
    HbmBandwidth,
    /// `weight_bytes`.
    WeightBytes,
    /// `weight_passes`.
    WeightPasses,
    /// `attention.seqlen`.
    AttentionSeqlen,
    /// `attention.fwd_flops`.
    AttentionFwdFlops,
    /// `attention.bwd_flops`.
    AttentionBwdFlops,
    /// `attention_bwd_ratio`.
    AttentionBwdRatio,
    /// `kv_element_bytes`.
    KvElementBytes,
    /// `comm_passes`.
    CommPasses,
    /// `ring_step_latency_s`.
    RingStepLatencyS,
    /// `inter_node_ring_step_latency_s`.
    InterNodeRingStepLatencyS,
    /// `intra_node_bandwidth`.
    IntraNodeBandwidth,
    /// `inter_node_bandwidth`.
    InterNodeBandwidth,
    /// `gpus_per_node`.
    GpusPerNode,
    /// `overlap`.
    Overlap,
    /// `kernels_per_layer`.
    KernelsPerLayer,
    /// `kernel_launch_s`.
    KernelLaunchS,
    /// `micro_batch_extra_s`.
    MicroBatchExtraS,
    /// `iteration_fixed_s`.
    IterationFixedS,
    /// `sharded_sequence_s`.
    ShardedSequenceS,
    /// `local_sequence_s`.
    LocalSequenceS,
}

impl CostField {
    /// Every field, in the C struct's order.
    pub const ALL: [CostField; 24] = [
        CostField::AttentionTile,
        CostField::PeakFlops,
        CostField::GemmEfficiency,
        CostField::HbmBandwidth,
        CostField::WeightBytes,
        CostField::WeightPasses,
        CostField::AttentionSeqlen,
        CostField::AttentionFwdFlops,
        CostField::AttentionBwdFlops,
        CostField::AttentionBwdRatio,
        CostField::KvElementBytes,
        CostField::CommPasses,
        CostField::RingStepLatencyS,
        CostField::InterNodeRingStepLatencyS,
        CostField::IntraNodeBandwidth,
        CostField::InterNodeBandwidth,
        CostField::GpusPerNode,
        CostField::Overlap,
        CostField::KernelsPerLayer,
        CostField::KernelLaunchS,
        CostField::MicroBatchExtraS,
        CostField::IterationFixedS,
        CostField::ShardedSequenceS,
        CostField::LocalSequenceS,
    ];

    /// The field's stable name (the [`CostModel`](crate::config::cost::CostModel) field; `attention.seqlen` and the like for
    /// the attention table's arrays).
    pub fn name(self) -> &'static str {
        match self {
            CostField::AttentionTile => "attention_tile",
            CostField::PeakFlops => "peak_flops",
            CostField::GemmEfficiency => "gemm_efficiency",
            CostField::HbmBandwidth => "hbm_bandwidth",
            CostField::WeightBytes => "weight_bytes",
            CostField::WeightPasses => "weight_passes",
            CostField::AttentionSeqlen => "attention.seqlen",
            CostField::AttentionFwdFlops => "attention.fwd_flops",
            CostField::AttentionBwdFlops => "attention.bwd_flops",
            CostField::AttentionBwdRatio => "attention_bwd_ratio",
            CostField::KvElementBytes => "kv_element_bytes",
            CostField::CommPasses => "comm_passes",
            CostField::RingStepLatencyS => "ring_step_latency_s",
            CostField::InterNodeRingStepLatencyS => "inter_node_ring_step_latency_s",
            CostField::IntraNodeBandwidth => "intra_node_bandwidth",
            CostField::InterNodeBandwidth => "inter_node_bandwidth",
            CostField::GpusPerNode => "gpus_per_node",
            CostField::Overlap => "overlap",
            CostField::KernelsPerLayer => "kernels_per_layer",
            CostField::KernelLaunchS => "kernel_launch_s",
            CostField::MicroBatchExtraS => "micro_batch_extra_s",
            CostField::IterationFixedS => "iteration_fixed_s",
            CostField::ShardedSequenceS => "sharded_sequence_s",
            CostField::LocalSequenceS => "local_sequence_s",
        }
    }

    /// Parses a name given by [`CostField::name`].
    pub fn from_name(name: &str) -> Option<CostField> {
        Self::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The 1-based position of the field in [`CostField::ALL`] (the C struct's order).
    pub fn number(self) -> u32 {
        // Fewer than 2^32 fields: the position fits.
        Self::ALL
            .iter()
            .position(|&f| f == self)
            .map_or(0, |i| i as u32 + 1)
    }
}

/// Which chunking setting is out of range (`Config::chunking`); [`ChunkingField::number`]
/// is the number the C error details report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkingField {
    /// `Chunking::size`: 0 (off) where the `chunkflow` policy needs a chunk size.
    Size,
    /// `Chunking::keep`: outside `1..=max`.
    Keep,
    /// `Chunking::state_permille`: above `max`.
    StatePermille,
}

impl ChunkingField {
    /// The field's name (`chunk_size`, `chunk_keep`, `chunk_state_permille`).
    pub fn name(self) -> &'static str {
        match self {
            ChunkingField::Size => "chunk_size",
            ChunkingField::Keep => "chunk_keep",
            ChunkingField::StatePermille => "chunk_state_permille",
        }
    }

    /// Its 1-based number in the C details' `field`.
    pub fn number(self) -> u32 {
        match self {
            ChunkingField::Size => 1,
            ChunkingField::Keep => 2,
            ChunkingField::StatePermille => 3,
        }
    }
}

/// Which model-shape field is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShapeField {
    /// `ModelShape::hidden`.
    Hidden,
    /// `ModelShape::kv_hidden`.
    KvHidden,
    /// `ModelShape::ffn`.
    Ffn,
    /// `ModelShape::layers`.
    Layers,
    /// `ModelShape::vocab`.
    Vocab,
}

/// Why a configuration, a batch or a buffer was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The DP size is 0 or larger than [`MAX_DP`](crate::config::limits::MAX_DP).
    InvalidDp {
        /// The value given.
        dp: u32,
        /// The largest DP size accepted ([`MAX_DP`](crate::config::limits::MAX_DP)).
        max: u32,
    },
    /// The CP size is 0 or larger than [`MAX_CP`](crate::config::limits::MAX_CP).
    InvalidCp {
        /// The value given.
        cp: u32,
        /// The largest CP size accepted ([`MAX_CP`](crate::config::limits::MAX_CP)).
        max: u32,
    },
    /// The BucketSize is 0 or larger than [`MAX_BUCKET`](crate::config::limits::MAX_BUCKET).
    InvalidBucket {
        /// The value given.
        bucket: u32,
        /// The largest BucketSize accepted
        /// ([`MAX_BUCKET`](crate::config::limits::MAX_BUCKET)).
        max: u32,
    },
    /// The pad multiple is 0 or larger than
    /// [`MAX_PAD_MULTIPLE`](crate::config::limits::MAX_PAD_MULTIPLE).
    InvalidPadMultiple {
        /// The value given.
        pad_multiple: u32,
        /// The largest pad multiple accepted
        /// ([`MAX_PAD_MULTIPLE`](crate::config::limits::MAX_PAD_MULTIPLE)).
        max: u32,
    },
    /// A cost-model coefficient is out of range (not finite, negative, a zero rate, ...).
    InvalidCost {
        /// The field ([`CostField::name`](CostField::name) names it).
        field: CostField,
    },
    /// The policy does not apply an option that is set away from its default (the FLOPs
    /// formula of a policy that balances estimated time, not FLOPs).
    Unsupported {
        /// The policy's name ([`Policy::name`](crate::config::options::Policy::name)).
        policy: &'static str,
        /// The option (`flops`).
        option: &'static str,
    },
    /// A model-shape field is 0 or above its documented limit.
    InvalidModel {
        /// The offending field.
        field: ShapeField,
        /// The value given.
        value: u32,
    },
    /// The batch holds more sequences than [`MAX_SEQS`](crate::config::limits::MAX_SEQS).
    TooManySequences {
        /// Sequences given.
        count: usize,
        /// The most a batch may hold.
        max: usize,
    },
    /// A sequence has zero tokens.
    EmptySequence {
        /// Its index in the input.
        index: usize,
    },
    /// A sequence is longer than [`MAX_SEQ_LEN`](crate::config::limits::MAX_SEQ_LEN).
    LengthOutOfRange {
        /// Its index in the input.
        index: usize,
        /// Its length.
        len: u32,
        /// The longest length accepted
        /// ([`MAX_SEQ_LEN`](crate::config::limits::MAX_SEQ_LEN)).
        max: u32,
    },
    /// A sequence cannot fit even sharded: its per-GPU share
    /// ([`Budget::share`](crate::config::budget::Budget::share)) exceeds the BucketSize.
    SequenceTooLong {
        /// Its index in the input.
        index: usize,
        /// Its length.
        len: u32,
        /// The smallest BucketSize that would hold its shard: its per-GPU share.
        needed_bucket: u32,
    },
    /// A caller buffer is shorter than this batch needs.
    BufferTooSmall {
        /// Which buffer.
        buffer: Buffer,
        /// Elements needed.
        needed: usize,
        /// Elements given.
        got: usize,
    },
    /// A DP rank needs more micro-batches than `Config::max_micro_batches` allows.
    MicroBatchLimit {
        /// The DP rank that needs more.
        dp_rank: u32,
        /// The configured limit.
        limit: u32,
        /// The number of micro-batches that rank needs.
        needed: u32,
    },
    /// A DP rank needs more micro-batches than the fixed count `Config::micro_batches`.
    MicroBatchCount {
        /// The first DP rank that needs the most.
        dp_rank: u32,
        /// The configured count.
        count: u32,
        /// The smallest fixed count that fits this batch: the most micro-batches any DP rank
        /// needs.
        needed: u32,
    },
    /// A chunking setting is out of range ([`Chunking::is_valid`](crate::config::chunking::Chunking::is_valid)),
    /// or the `chunkflow` policy runs with chunking off (`Size`, value 0).
    InvalidChunking {
        /// The first setting at fault.
        field: ChunkingField,
        /// Its value.
        value: u32,
        /// Its bound: the most it may be (`Keep`, `StatePermille`), or 0 for a size that must
        /// not be 0.
        max: u32,
    },
    /// A sequence chunked over the whole CP group would hold more than BucketSize tokens on a
    /// GPU ([`Chunking::peak`](crate::config::chunking::Chunking::peak)): a smaller ChunkSize or
    /// K fits it.
    ChunkOverBudget {
        /// Its index in the input.
        index: usize,
        /// Its length.
        len: u32,
        /// Tokens it would hold on each GPU.
        peak: u64,
    },
    /// No ChunkSize fits ([`Config::default_chunk_size`](crate::Config::default_chunk_size)):
    /// even one-token chunks of the longest sequence hold more than BucketSize tokens on each
    /// GPU of the group, because of the K/V state of the whole sequence.
    NoChunkSize {
        /// The longest sequence the chunk size was sized for.
        longest: u32,
        /// The GPUs its chunks run on.
        group: u32,
        /// Tokens it holds on each of them with one-token chunks: the least any ChunkSize gives.
        peak: u64,
    },
    /// DACP could not place a micro-batch within the budget (only reachable through
    /// [`dacp::place`](crate::policy::dacp::place) on a batch that GDS would have split).
    DacpFailed {
        /// The CP rank that ran out of budget with no local sequence left to shard.
        cp_rank: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::InvalidDp { dp, max } => write!(f, "DP size {dp} is out of range 1..={max}"),
            Error::InvalidCp { cp, max } => write!(f, "CP size {cp} is out of range 1..={max}"),
            Error::InvalidBucket { bucket, max } => {
                write!(f, "BucketSize {bucket} is out of range 1..={max}")
            }
            Error::InvalidPadMultiple { pad_multiple, max } => {
                write!(f, "pad multiple {pad_multiple} is out of range 1..={max}")
            }
            Error::InvalidCost { field } => {
                write!(f, "cost model field {field} is out of range")
            }
            Error::Unsupported { policy, option } => write!(
                f,
                "policy {policy} does not apply the {option} option: leave it at its default"
            ),
            Error::InvalidModel { field, value } => {
                write!(f, "model shape field {field:?} = {value} is out of range")
            }
            Error::TooManySequences { count, max } => {
                write!(f, "batch has {count} sequences, the most is {max}")
            }
            Error::EmptySequence { index } => write!(f, "sequence {index} has zero tokens"),
            Error::LengthOutOfRange { index, len, max } => {
                write!(f, "sequence {index} has {len} tokens, the most is {max}")
            }
            Error::SequenceTooLong {
                index,
                len,
                needed_bucket,
            } => write!(
                f,
                "sequence {index} ({len} tokens) cannot fit even sharded: it needs a BucketSize \
                 of at least {needed_bucket} (or the chunkflow policy, which runs it chunked)"
            ),
            Error::BufferTooSmall {
                buffer,
                needed,
                got,
            } => {
                write!(
                    f,
                    "buffer {buffer:?} holds {got} elements, {needed} are needed"
                )
            }
            Error::MicroBatchLimit {
                dp_rank,
                limit,
                needed,
            } => write!(
                f,
                "DP rank {dp_rank} needs {needed} micro-batches, the limit is {limit}"
            ),
            Error::MicroBatchCount {
                dp_rank,
                count,
                needed,
            } => write!(
                f,
                "DP rank {dp_rank} needs {needed} micro-batches, more than the fixed count \
                 {count}: a count of at least {needed} fits this batch"
            ),
            Error::InvalidChunking {
                field: ChunkingField::Size,
                ..
            } => write!(
                f,
                "the chunkflow policy needs chunking on: set a chunk_size"
            ),
            Error::InvalidChunking { field, value, max } => write!(
                f,
                "{} = {value} is out of range (at most {max}, chunk_keep at least 1)",
                field.name()
            ),
            Error::ChunkOverBudget { index, len, peak } => write!(
                f,
                "sequence {index} ({len} tokens) chunked over the CP group holds {peak} tokens \
                 per GPU, over the BucketSize: use a smaller chunk size or keep"
            ),
            Error::NoChunkSize {
                longest,
                group,
                peak,
            } => write!(
                f,
                "no chunk size fits: a {longest}-token sequence chunked on {group} GPU(s) holds                  at least {peak} tokens per GPU (its K/V state with one-token chunks), over the                  BucketSize: give a chunk size, lower the state charge or K, or raise the                  BucketSize"
            ),
            Error::DacpFailed { cp_rank } => write!(
                f,
                "DACP found no local sequence to shard on CP rank {cp_rank}: the micro-batch \
                 does not fit"
            ),
        }
    }
}

impl core::error::Error for Error {}
