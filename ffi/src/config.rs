//! `skrull_config`: the extensible configuration struct, its option constants and presets, and
//! its translation to the core's `Config`.

use core::mem::size_of;

use skrull_core::{
    Chunking, Config, Error, FlopsFormula, ModelShape, Policy, ShardPadding, Synchronisation,
    Victim,
};

use crate::boundary::guard;
use crate::cost::{read_cost_model, skrull_cost_model};
use crate::error::Failure;
pub use crate::shape::skrull_model_shape;
pub use crate::sized::SKRULL_MAX_STRUCT_SIZE;
use crate::sized::{read_sized_narrow, size_class_align};
use crate::status::skrull_status;

/// Policy: the Skrull paper's GDS + DACP (the default, 0).
pub const SKRULL_POLICY_SKRULL: u32 = 0;
/// Policy: the paper's DeepSpeed baseline (consecutive shares, one sharded sequence per
/// micro-batch).
pub const SKRULL_POLICY_DEEPSPEED: u32 = 1;
/// Policy: sample order, next-fit packing under the budget, everything sharded.
pub const SKRULL_POLICY_PACKED: u32 = 2;
/// Policy: the paper's Algorithm 4 (memory-only worst fit with rollback) inside GDS.
pub const SKRULL_POLICY_ROUNDROBIN: u32 = 3;
/// Policy: cost-aware `balanced` (placement, DP balance and micro-batch grouping chosen on the
/// cost model's estimated time).
pub const SKRULL_POLICY_BALANCED: u32 = 4;
/// Policy: ChunkFlow's scheme: every sequence longer than `chunk_size` runs chunked
/// (`SKRULL_CHUNKED`) over the whole CP group in a micro-batch of its own; the others are
/// packed into micro-batches of at most `chunk_size` tokens sharded over the group. Needs
/// `chunk_size` above 0 (`SKRULL_STATUS_INVALID_CHUNKING` otherwise).
pub const SKRULL_POLICY_CHUNKFLOW: u32 = 5;

/// DACP rollback victim: the shortest local sequence (the paper's choice; the default, 0).
pub const SKRULL_VICTIM_SHORTEST: u32 = 0;
/// DACP rollback victim: the longest local sequence.
pub const SKRULL_VICTIM_LONGEST: u32 = 1;

/// FLOPs formula: the paper's `20h^2 S + 4h h_kv S + 4h S^2` per layer (the default, 0).
pub const SKRULL_FLOPS_PAPER: u32 = 0;
/// FLOPs formula: Megatron-LM's count (SwiGLU FFN, causal attention, LM head).
pub const SKRULL_FLOPS_MEGATRON: u32 = 1;

/// Shard padding: a sharded sequence costs each GPU `ceil(len / cp)` tokens (the default, 0).
pub const SKRULL_SHARD_PADDING_NONE: u32 = 0;
/// Shard padding: zigzag chunks padded to a multiple of `2 cp` (TransformerEngine THD); each
/// GPU holds `2 * ceil(len / (2 cp))` tokens.
pub const SKRULL_SHARD_PADDING_ZIGZAG: u32 = 1;

/// Synchronisation: every micro-batch waits for its slowest CP rank (the default, 0).
pub const SKRULL_SYNC_CP_GROUP: u32 = 0;
/// Synchronisation: every micro-batch waits for every GPU of the job (ZeRO-2/3).
pub const SKRULL_SYNC_EVERY_GPU: u32 = 1;
/// Synchronisation: CP ranks meet only in micro-batches holding a sequence that spans several
/// of them, everyone at the step (DDP with gradient accumulation under `no_sync`).
pub const SKRULL_SYNC_SHARDED: u32 = 2;

/// Preset: Qwen2.5-0.5B with the paper's layout (DP 4, CP 8, BucketSize 26K = 26624).
pub const SKRULL_PRESET_QWEN2_5_0_5B: u32 = 0;
/// Preset: Qwen2.5-7B with the paper's layout (DP 4, CP 8, BucketSize 13K = 13312).
pub const SKRULL_PRESET_QWEN2_5_7B: u32 = 1;

/// Everything `skrull_schedule()` needs besides the lengths (version 1: 60 bytes; now 104 on
/// 64-bit targets).
///
/// Initialise it with `skrull_config_init(&c, sizeof c)` or
/// `skrull_config_preset_init(preset, &c, sizeof c)`, then change fields (the version-1
/// `skrull_config_default()` and `skrull_config_preset()` fill only the first 60 bytes). `struct_size` must be `sizeof(skrull_config)` as the caller compiled it: new fields
/// are only ever appended, a library reading an older (smaller) struct uses defaults for the
/// fields it lacks, and a newer (larger) struct is accepted when its unknown trailing bytes are
/// zero. Option fields are plain integers (`SKRULL_POLICY_*` ...), so any value is safe to
/// pass; unknown ones return `SKRULL_STATUS_INVALID_ENUM`.
///
/// Alignment follows `struct_size`: a struct that ends at or before `cost_model` (the first
/// pointer; every field before it is a `uint32_t`, version 1's 60 bytes included) needs only
/// 4-byte alignment, so a program built against the first header may keep it at any 4-byte
/// boundary; one that includes `cost_model` (and any field appended after it) needs
/// `alignof(skrull_config)`, 8 on 64-bit targets. A pointer that is not 4-byte aligned is
/// `SKRULL_STATUS_INVALID_ARG` before `struct_size` is read; one aligned for 4 but not for its
/// size's class is `SKRULL_STATUS_INVALID_ARG` after the size checks.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct skrull_config {
    /// `sizeof(skrull_config)`.
    pub struct_size: u32,
    /// Data-parallel size (model replicas), 1..=65536.
    pub dp: u32,
    /// Context-parallel size N (GPUs sharing one micro-batch), 1..=256.
    pub cp: u32,
    /// BucketSize C: the most tokens one GPU may hold in one micro-batch, 1..=2^31-1.
    pub bucket_tokens: u32,
    /// `SKRULL_POLICY_*`.
    pub policy: u32,
    /// `SKRULL_VICTIM_*`.
    pub victim: u32,
    /// `SKRULL_FLOPS_*`.
    pub flops: u32,
    /// `SKRULL_SHARD_PADDING_*`.
    pub shard_padding: u32,
    /// The most micro-batches one DP rank may run (0: no limit).
    pub max_micro_batches: u32,
    /// The model shape FLOPs are counted for.
    pub model: skrull_model_shape,
    /// Pad multiple `M`, 0..=65536 (0 and 1: none). A sharded sequence is padded to a
    /// multiple of `lcm(2 cp, M)` (of `M` at `cp = 1`) whatever `shard_padding` says, e.g.
    /// `M = 2 cp tp` for Megatron with sequence parallelism; the budget charges the padding.
    /// See `docs/layout.md`.
    pub pad_multiple: u32,
    /// 1: pad local (whole) sequences to a multiple of `pad_multiple` too; 0: do not.
    pub pad_local: u32,
    /// 1: lockstep micro-batches (every DP rank reports the largest micro-batch count; a
    /// rank's extra micro-batches are empty); 0: each rank runs its own count.
    pub lockstep: u32,
    /// The cost model `balanced` plans with (hardware, kernels, topology: GPUs per node and
    /// intra/inter-node ring latency and bandwidth), read during the call; NULL: the H100
    /// preset for `model`. See `skrull_cost_model_preset()`. Every policy validates it
    /// (`SKRULL_STATUS_INVALID_COST_MODEL`), not only `balanced`, which plans with it.
    pub cost_model: *const skrull_cost_model,
    /// 1: a policy may shard a sequence over an aligned sub-group of `g` CP ranks (`g` a power
    /// of two dividing `cp`, starting at a multiple of `g`) instead of the whole group, where
    /// its cost model says that is faster (`balanced` does; the other policies never do). The
    /// caller must then read each sequence's group from `skrull_plan_buffers.cp_groups` (which
    /// becomes required) and run one CP attention call per ring of the layout
    /// (`skrull_layout_buffers.rings`, also required). 0 (what the initialisers write, and the
    /// value for a caller whose `struct_size` ends before this field): every sharded sequence
    /// spans the whole CP group. Other values: `SKRULL_STATUS_INVALID_ENUM`. Added after
    /// version 1.
    pub subgroups: u32,
    /// 1: fill empty lockstep micro-batches. With `lockstep = 1`, a DP rank that needs fewer
    /// micro-batches than the longest rank moves sequences out of its multi-sequence
    /// micro-batches (sequences sharded over the whole CP group first, so the new micro-batch
    /// has tokens on every CP rank; then sub-group shards, then local ones) into new
    /// single-sequence micro-batches appended after its last one, until it runs the same
    /// count. A micro-batch stays empty only when the rank has fewer sequences than the
    /// count. Placements and budgets are kept. 0 (the initialisers, and a caller whose
    /// `struct_size` ends before this field, which then held a zero `_reserved`): off.
    /// Other values: `SKRULL_STATUS_INVALID_ENUM`. Without `lockstep` (and without
    /// `micro_batches`) it changes nothing. Added after version 1. See `docs/algorithms.md`.
    pub fill_empty: u32,
    /// A fixed micro-batch count `G` per DP rank, 0 (off) to 2^32-1: every DP rank reports
    /// exactly `G` in `micro_batches_per_dp`, filled as with `fill_empty` (an empty
    /// micro-batch only where a rank has fewer than `G` sequences), e.g. Hugging Face's
    /// `gradient_accumulation_steps`. A batch that needs more than `G` micro-batches on a DP
    /// rank returns `SKRULL_STATUS_MICRO_BATCH_COUNT` with the smallest `G` that fits in the
    /// error details' `value`. `G` above a nonzero `max_micro_batches` is
    /// `SKRULL_STATUS_MICRO_BATCH_LIMIT`. 0 for a caller whose `struct_size` ends before
    /// this field. Added after version 1.
    pub micro_batches: u32,
    /// ChunkSize: the most tokens of one chunk, 0 (chunking off: what the initialisers write)
    /// to 2^32-1. With chunking on, a policy may run a sequence longer than `chunk_size` as
    /// consecutive chunks of `chunk_size` tokens (the last one shorter) on one GPU or an
    /// aligned CP group: its placement's `cp_rank` is `SKRULL_CHUNKED` (-2) and its group is in
    /// `skrull_plan_buffers.cp_groups`, which becomes required. `SKRULL_POLICY_CHUNKFLOW`
    /// needs it on; `balanced` may chunk; the other policies never do. A caller whose
    /// `struct_size` ends before this field (which then held a zero `_reserved`) gets chunking
    /// off. Added after version 1. See `docs/chunking.md`.
    pub chunk_size: u32,
    /// K: how many chunks of a chunked sequence keep their activations from the forward to the
    /// backward pass (the others are recomputed), 1..=64 with chunking on
    /// (`SKRULL_STATUS_INVALID_CHUNKING` otherwise; not checked with chunking off). The
    /// initialisers write 1, as does a caller whose `struct_size` ends before this field.
    /// Added after version 1.
    pub chunk_keep: u32,
    /// BucketSize tokens the K/V state of one token of a chunked sequence occupies, in
    /// thousandths, 0..=1000 with chunking on (`SKRULL_STATUS_INVALID_CHUNKING` otherwise).
    /// The initialisers write 64 (1/16 of a token, an upper estimate for the Qwen2.5 models),
    /// as does a caller whose `struct_size` ends before this field. Added after version 1.
    pub chunk_state_permille: u32,
    /// `SKRULL_SYNC_*`: how the trainer that runs the plan makes its GPUs wait for each other,
    /// which `balanced` plans for and the evaluator composes: `SKRULL_SYNC_CP_GROUP` (0, what
    /// the initialisers write, and the value for a caller whose `struct_size` ends before this
    /// field: every micro-batch waits for its slowest CP rank, the paper's composition),
    /// `SKRULL_SYNC_EVERY_GPU` (every micro-batch waits for every GPU of the job, as under
    /// ZeRO-2/3; every DP rank then reports the same micro-batch count, as with `lockstep`) or
    /// `SKRULL_SYNC_SHARDED` (CP ranks meet only in micro-batches that hold a sequence spanning
    /// several of them, everyone at the step: DDP under `no_sync`). Other values:
    /// `SKRULL_STATUS_INVALID_ENUM`. With `balanced`, the plan is arranged for it (see
    /// `docs/cost_model.md`, "Synchronisation"); the other policies' plans do not change.
    /// Added after version 1.
    pub sync: u32,
    /// Must be zero (`SKRULL_STATUS_INVALID_ARG` otherwise): room for the next field.
    pub _reserved: u32,
}

// SAFETY: the only pointer, `cost_model`, is read (never written) during a call, and the
// calling contract already forbids other threads to write to what a call reads; a
// `skrull_config` is plain data otherwise, so sharing or sending one between threads is sound.
unsafe impl Send for skrull_config {}
// SAFETY: as for `Send`.
unsafe impl Sync for skrull_config {}

/// `sizeof(skrull_config)` of ABI version 1, the smallest accepted `struct_size`.
pub const SKRULL_CONFIG_SIZE_V1: u32 = 60;

/// The `struct_size` values below the current size that end on a field boundary: version 1
/// and each appended field. Any other smaller size would cut a field in two.
pub(crate) const CONFIG_SIZES: [usize; 13] = [
    SKRULL_CONFIG_SIZE_V1 as usize,
    core::mem::offset_of!(skrull_config, pad_local),
    core::mem::offset_of!(skrull_config, lockstep),
    core::mem::offset_of!(skrull_config, cost_model),
    core::mem::offset_of!(skrull_config, subgroups),
    core::mem::offset_of!(skrull_config, fill_empty),
    core::mem::offset_of!(skrull_config, micro_batches),
    core::mem::offset_of!(skrull_config, chunk_size),
    core::mem::offset_of!(skrull_config, chunk_keep),
    core::mem::offset_of!(skrull_config, chunk_state_permille),
    core::mem::offset_of!(skrull_config, sync),
    core::mem::offset_of!(skrull_config, _reserved),
    size_of::<skrull_config>(),
];

/// The largest `struct_size` of a `skrull_config` that needs only 4-byte alignment: every field
/// before `cost_model`, the first pointer, is a `uint32_t`. A struct that ends at or before it
/// (version 1's 60 bytes included) may sit at any 4-byte boundary; one that includes
/// `cost_model` (and every field appended after it) needs `alignof(skrull_config)`.
pub(crate) const CONFIG_NARROW_SIZE: usize = core::mem::offset_of!(skrull_config, cost_model);

/// The largest `skrull_config.pad_multiple`.
pub const SKRULL_MAX_PAD_MULTIPLE: u32 = 65_536;

const _: () = assert!(
    size_of::<skrull_config>() == SKRULL_CONFIG_SIZE_V1 as usize + 44 + size_of::<usize>(),
    "skrull_config must have no implicit padding"
);

impl skrull_config {
    /// The C form of a core configuration.
    pub fn from_core(cfg: &Config) -> Self {
        skrull_config {
            struct_size: size_of::<skrull_config>() as u32,
            dp: cfg.dp,
            cp: cfg.cp,
            bucket_tokens: cfg.bucket,
            policy: match cfg.policy {
                Policy::DeepSpeed => SKRULL_POLICY_DEEPSPEED,
                Policy::Packed => SKRULL_POLICY_PACKED,
                Policy::RoundRobin => SKRULL_POLICY_ROUNDROBIN,
                Policy::Balanced => SKRULL_POLICY_BALANCED,
                Policy::ChunkFlow => SKRULL_POLICY_CHUNKFLOW,
                _ => SKRULL_POLICY_SKRULL,
            },
            victim: match cfg.victim {
                Victim::Shortest => SKRULL_VICTIM_SHORTEST,
                Victim::Longest => SKRULL_VICTIM_LONGEST,
            },
            flops: match cfg.flops {
                FlopsFormula::Paper => SKRULL_FLOPS_PAPER,
                FlopsFormula::Megatron => SKRULL_FLOPS_MEGATRON,
            },
            shard_padding: match cfg.shard_padding {
                ShardPadding::None => SKRULL_SHARD_PADDING_NONE,
                ShardPadding::Zigzag => SKRULL_SHARD_PADDING_ZIGZAG,
            },
            max_micro_batches: cfg.max_micro_batches,
            model: skrull_model_shape::from_core(&cfg.model),
            pad_multiple: cfg.pad_multiple,
            pad_local: u32::from(cfg.pad_local),
            lockstep: u32::from(cfg.lockstep),
            // A core configuration's cost model has no C storage to point at: the caller sets
            // this pointer itself (NULL keeps the preset).
            cost_model: core::ptr::null(),
            subgroups: u32::from(cfg.subgroups),
            fill_empty: u32::from(cfg.fill_empty),
            micro_batches: cfg.micro_batches,
            chunk_size: cfg.chunking.size,
            chunk_keep: cfg.chunking.keep,
            chunk_state_permille: cfg.chunking.state_permille,
            sync: Synchronisation::ALL
                .iter()
                .position(|&s| s == cfg.sync)
                .map_or(SKRULL_SYNC_CP_GROUP, |i| i as u32),
            _reserved: 0,
        }
    }

    /// A preset: the paper's layout and BucketSize for a Qwen2.5 model, default options, and
    /// whole-group sharding only (`subgroups = 0`: a caller opts in to sub-groups, since it
    /// must then read each sequence's group).
    pub fn preset(preset: u32) -> Option<Self> {
        let cfg = match preset {
            SKRULL_PRESET_QWEN2_5_0_5B => Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B),
            SKRULL_PRESET_QWEN2_5_7B => Config::new(4, 8, 13 * 1024, ModelShape::QWEN2_5_7B),
            _ => return None,
        };
        Some(Self {
            subgroups: 0,
            ..Self::from_core(&cfg)
        })
    }

    /// The recommended preset: the paper's layout and BucketSize for a Qwen2.5 model with the
    /// core's `Config::recommended` options (`balanced`, sub-groups on).
    pub fn recommended(preset: u32) -> Option<Self> {
        let cfg = Self::preset(preset)?.to_core().ok()?;
        Some(Self::from_core(&Config::recommended(
            cfg.dp, cfg.cp, cfg.bucket, cfg.model,
        )))
    }

    /// Translates the option integers into the core's `Config` (not yet range-checked: the
    /// core's `Config::validate` names the first bad number).
    ///
    /// # Errors
    /// `InvalidEnum` for an option integer this library does not know.
    pub fn to_core(&self) -> Result<Config, skrull_status> {
        let bad = skrull_status::InvalidEnum;
        let policy = match self.policy {
            SKRULL_POLICY_SKRULL => Policy::Skrull,
            SKRULL_POLICY_DEEPSPEED => Policy::DeepSpeed,
            SKRULL_POLICY_PACKED => Policy::Packed,
            SKRULL_POLICY_ROUNDROBIN => Policy::RoundRobin,
            SKRULL_POLICY_BALANCED => Policy::Balanced,
            SKRULL_POLICY_CHUNKFLOW => Policy::ChunkFlow,
            _ => return Err(bad),
        };
        let victim = match self.victim {
            SKRULL_VICTIM_SHORTEST => Victim::Shortest,
            SKRULL_VICTIM_LONGEST => Victim::Longest,
            _ => return Err(bad),
        };
        let flops = match self.flops {
            SKRULL_FLOPS_PAPER => FlopsFormula::Paper,
            SKRULL_FLOPS_MEGATRON => FlopsFormula::Megatron,
            _ => return Err(bad),
        };
        let shard_padding = match self.shard_padding {
            SKRULL_SHARD_PADDING_NONE => ShardPadding::None,
            SKRULL_SHARD_PADDING_ZIGZAG => ShardPadding::Zigzag,
            _ => return Err(bad),
        };
        let flag = |v: u32| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad),
        };
        let swiglu = flag(self.model.swiglu)?;
        let m = &self.model;
        let model = ModelShape {
            hidden: m.hidden,
            kv_hidden: m.kv_hidden,
            ffn: m.ffn,
            layers: m.layers,
            vocab: m.vocab,
            swiglu,
        };
        let mut cfg = Config::new(self.dp, self.cp, self.bucket_tokens, model)
            .with_policy(policy)
            .with_victim(victim);
        cfg.flops = flops;
        cfg.shard_padding = shard_padding;
        cfg.max_micro_batches = self.max_micro_batches;
        cfg.pad_multiple = self.pad_multiple.max(1);
        cfg.pad_local = flag(self.pad_local)?;
        cfg.lockstep = flag(self.lockstep)?;
        cfg.subgroups = flag(self.subgroups)?;
        cfg.fill_empty = flag(self.fill_empty)?;
        cfg.micro_batches = self.micro_batches;
        cfg.chunking = Chunking {
            size: self.chunk_size,
            keep: self.chunk_keep,
            state_permille: self.chunk_state_permille,
        };
        cfg.sync = match self.sync {
            SKRULL_SYNC_CP_GROUP => Synchronisation::CpGroup,
            SKRULL_SYNC_EVERY_GPU => Synchronisation::EveryGpu,
            SKRULL_SYNC_SHARDED => Synchronisation::Sharded,
            _ => return Err(bad),
        };
        if self._reserved != 0 {
            return Err(skrull_status::InvalidArg);
        }
        Ok(cfg)
    }
}

/// Reads and translates a caller's configuration, range-checking every value.
///
/// # Errors
/// `NullArg`, `InvalidArg`, `BadStructSize`, `InvalidEnum`, or the core's configuration
/// errors (`InvalidDp` ...).
///
/// # Safety
/// As [`read_sized`].
pub(crate) unsafe fn read_config(ptr: *const skrull_config) -> Result<Config, Failure> {
    // SAFETY: forwarded caller contract.
    let cfg = unsafe { read_config_unchecked(ptr) }?;
    cfg.validate().map_err(config_failure)?;
    Ok(cfg)
}

/// The failure of a configuration that `Config::validate` refused. A `MICRO_BATCH_LIMIT` found
/// in the configuration alone (a fixed `micro_batches` above `max_micro_batches`) names no DP
/// rank: its `index` is -1, unlike a batch's, which names the first DP rank over the limit.
pub(crate) fn config_failure(e: Error) -> Failure {
    let mut f = Failure::from(e);
    if let Error::MicroBatchLimit { .. } = e {
        f.info.index = -1;
    }
    f
}

/// [`read_config`] without the range checks of `Config::validate` (the struct, its option
/// integers and its cost model are still checked).
///
/// # Errors
/// As [`read_config`], except the core's configuration errors.
///
/// # Safety
/// As [`read_config`].
pub(crate) unsafe fn read_config_unchecked(ptr: *const skrull_config) -> Result<Config, Failure> {
    let default =
        skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).ok_or(skrull_status::Internal)?;
    // SAFETY: forwarded caller contract.
    let c = unsafe { read_sized_narrow(ptr, &CONFIG_SIZES, CONFIG_NARROW_SIZE, default) }?;
    let mut cfg = c.to_core()?;
    // SAFETY: forwarded caller contract (the pointer, unless NULL, is a readable cost model).
    cfg.cost = unsafe { read_cost_model(c.cost_model) }?;
    Ok(cfg)
}

/// Fills the first `out_size` bytes of `*out` with the defaults (the Qwen2.5-0.5B preset: DP
/// 4, CP 8, BucketSize 26624, policy skrull, victim shortest, paper FLOPs, no shard padding,
/// no pad multiple, no lockstep, no micro-batch limit, the H100 cost model, no sub-groups) and sets
/// `struct_size = min(out_size, sizeof(skrull_config))`. Call it as
/// `skrull_config_init(&cfg, sizeof cfg)`: a program built against an older, smaller header
/// then gets exactly the fields it has, and a newer library never writes past them.
///
/// Returns, first problem first: `SKRULL_STATUS_NULL_ARG` for a NULL `out`;
/// `SKRULL_STATUS_INVALID_ARG` when it is not 4-byte aligned; `SKRULL_STATUS_BAD_STRUCT_SIZE`
/// when `out_size` is below version 1 (60 bytes) or, below `sizeof(skrull_config)`, ends
/// inside a field (61, say: the sizes every other call accepts are the only ones written);
/// `SKRULL_STATUS_INVALID_ARG` when `out` is not aligned for the size's class (see
/// `skrull_config`: 4 bytes up to `offsetof(skrull_config, cost_model)`, else
/// `alignof(skrull_config)`). On error nothing is written.
///
/// # Safety
/// Unless NULL, `out` must be valid for writing `out_size` bytes. Safe to call from any
/// thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_config_init(
    out: *mut skrull_config,
    out_size: usize,
) -> skrull_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { write_preset(SKRULL_PRESET_QWEN2_5_0_5B, out, out_size) })
}

/// Fills the first `out_size` bytes of `*out` with a preset (`SKRULL_PRESET_*`: the paper's
/// layout and BucketSize for that model, default options), as [`skrull_config_init`] does
/// with the defaults.
///
/// Returns the statuses of `skrull_config_init()`, then `SKRULL_STATUS_INVALID_ENUM` for an
/// unknown preset; on error nothing is written.
///
/// # Safety
/// As [`skrull_config_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_config_preset_init(
    preset: u32,
    out: *mut skrull_config,
    out_size: usize,
) -> skrull_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { write_preset(preset, out, out_size) })
}

/// Fills the first `out_size` bytes of `*out` with the recommended preset: the layout and
/// BucketSize of `preset` (`SKRULL_PRESET_*`) with the options the CLI and the Python package
/// default to, `SKRULL_POLICY_BALANCED` and `subgroups = 1` (so the caller must read each
/// sharded sequence's `cp_first`/`cp_size`). `skrull_config_init()` and
/// `skrull_config_preset_init()` keep the paper's `SKRULL_POLICY_SKRULL` with `subgroups = 0`.
/// A struct too small to hold `subgroups` gets the library's default for it (off).
///
/// Returns the statuses of `skrull_config_preset_init()`; on error nothing is written.
///
/// # Safety
/// As [`skrull_config_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_config_recommended_init(
    preset: u32,
    out: *mut skrull_config,
    out_size: usize,
) -> skrull_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { write_config(skrull_config::recommended(preset), out, out_size) })
}

/// The version-1 initialiser: `skrull_config_init(out, 60)`. It writes the first 60 bytes
/// only (what a program built against the first header has) and sets `struct_size = 60`, so
/// the library ignores every field added since (`pad_multiple`, `pad_local`, `lockstep`,
/// `cost_model`, `subgroups`, `fill_empty`, `micro_batches`, `chunk_size`, `chunk_keep`,
/// `chunk_state_permille`, `sync`): new code calls `skrull_config_init(&cfg, sizeof cfg)`
/// instead.
///
/// `out` needs 4-byte alignment only (a version-1 struct of `uint32_t` fields, which a program
/// may place at any 4-byte boundary).
///
/// # Safety
/// Unless NULL, `out` must be valid for writing 60 bytes. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_config_default(out: *mut skrull_config) -> skrull_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe {
        write_preset(
            SKRULL_PRESET_QWEN2_5_0_5B,
            out,
            SKRULL_CONFIG_SIZE_V1 as usize,
        )
    })
}

/// The version-1 preset initialiser: `skrull_config_preset_init(preset, out, 60)` (see
/// `skrull_config_default()`).
///
/// # Safety
/// Unless NULL, `out` must be valid for writing 60 bytes. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_config_preset(
    preset: u32,
    out: *mut skrull_config,
) -> skrull_status {
    // SAFETY: forwarded caller contract.
    guard(|| unsafe { write_preset(preset, out, SKRULL_CONFIG_SIZE_V1 as usize) })
}

/// Writes the first `min(size, sizeof)` bytes of a preset, with that `struct_size`.
///
/// # Safety
/// Unless NULL, `out` must be valid for writing `size` bytes.
unsafe fn write_preset(preset: u32, out: *mut skrull_config, size: usize) -> skrull_status {
    // SAFETY: forwarded caller contract.
    unsafe { write_config(skrull_config::preset(preset), out, size) }
}

/// Writes the first `min(size, sizeof)` bytes of `config` (`None`: an unknown preset, checked
/// after the pointer and the size), with that `struct_size`.
///
/// # Safety
/// Unless NULL, `out` must be valid for writing `size` bytes.
unsafe fn write_config(
    config: Option<skrull_config>,
    out: *mut skrull_config,
    size: usize,
) -> skrull_status {
    if out.is_null() {
        return skrull_status::NullArg;
    }
    if !out.cast::<u32>().is_aligned() {
        return skrull_status::InvalidArg;
    }
    let n = size.min(size_of::<skrull_config>());
    // A size that ends inside a field is refused here as by every call that reads the struct.
    if size < SKRULL_CONFIG_SIZE_V1 as usize || !CONFIG_SIZES.contains(&n) {
        return skrull_status::BadStructSize;
    }
    if !(out as usize).is_multiple_of(size_class_align::<skrull_config>(n, CONFIG_NARROW_SIZE)) {
        return skrull_status::InvalidArg;
    }
    let Some(mut cfg) = config else {
        return skrull_status::InvalidEnum;
    };
    cfg.struct_size = n as u32;
    // SAFETY: `n` bytes are readable at `cfg` (a whole struct) and writable at `out` (at most
    // `size`, caller contract); distinct objects. Every field in the first `n` bytes is an
    // integer or a pointer, so a prefix is a valid partial struct for the caller.
    unsafe {
        core::ptr::copy_nonoverlapping((&raw const cfg).cast::<u8>(), out.cast::<u8>(), n);
    }
    skrull_status::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_cfg() -> skrull_config {
        skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap()
    }

    #[test]
    fn presets_translate_to_the_core_presets() {
        // Sub-group sharding is off through the C ABI unless the caller asks for it.
        let c_preset = |cfg: Config| Config {
            subgroups: false,
            ..cfg
        };
        let c = default_cfg().to_core().unwrap();
        assert_eq!(
            c,
            c_preset(Config::new(4, 8, 26_624, ModelShape::QWEN2_5_0_5B))
        );
        let c7 = skrull_config::preset(SKRULL_PRESET_QWEN2_5_7B)
            .unwrap()
            .to_core()
            .unwrap();
        assert_eq!(
            c7,
            c_preset(Config::new(4, 8, 13_312, ModelShape::QWEN2_5_7B))
        );
        assert_eq!(skrull_config::preset(2), None);
    }

    #[test]
    fn the_recommended_preset_is_the_cores() {
        for (preset, bucket, model) in [
            (SKRULL_PRESET_QWEN2_5_0_5B, 26_624, ModelShape::QWEN2_5_0_5B),
            (SKRULL_PRESET_QWEN2_5_7B, 13_312, ModelShape::QWEN2_5_7B),
        ] {
            let c = skrull_config::recommended(preset).unwrap();
            assert_eq!(c.policy, SKRULL_POLICY_BALANCED);
            assert_eq!(c.subgroups, 1);
            assert_eq!(c.to_core(), Ok(Config::recommended(4, 8, bucket, model)));
            let mut out = skrull_config::preset(SKRULL_PRESET_QWEN2_5_0_5B).unwrap();
            // SAFETY: `out` is a whole struct.
            let status = unsafe {
                skrull_config_recommended_init(preset, &mut out, size_of::<skrull_config>())
            };
            assert_eq!((status, out), (skrull_status::Ok, c));
        }
        assert_eq!(skrull_config::recommended(2), None);
        let mut out = default_cfg();
        // SAFETY: `out` is a whole struct.
        let status = unsafe { skrull_config_recommended_init(2, &mut out, size_of_val(&out)) };
        assert_eq!((status, out), (skrull_status::InvalidEnum, default_cfg()));
        // SAFETY: NULL is refused before anything is read.
        let status = unsafe { skrull_config_recommended_init(0, core::ptr::null_mut(), 300) };
        assert_eq!(status, skrull_status::NullArg);
    }

    /// The C option numbers are the positions in the core's `ALL` lists, both ways.
    #[test]
    fn option_numbers_follow_the_cores_lists() {
        let base = default_cfg();
        for (i, p) in Policy::ALL.into_iter().enumerate() {
            let c = skrull_config::from_core(&base.to_core().unwrap().with_policy(p));
            assert_eq!(c.policy as usize, i);
            assert_eq!(c.to_core().map(|c| c.policy), Ok(p));
        }
        for (i, v) in Victim::ALL.into_iter().enumerate() {
            let c = skrull_config::from_core(&base.to_core().unwrap().with_victim(v));
            assert_eq!(c.victim as usize, i);
        }
        for (i, f) in FlopsFormula::ALL.into_iter().enumerate() {
            let mut core = base.to_core().unwrap();
            core.flops = f;
            assert_eq!(skrull_config::from_core(&core).flops as usize, i);
        }
        for (i, p) in ShardPadding::ALL.into_iter().enumerate() {
            let mut core = base.to_core().unwrap();
            core.shard_padding = p;
            assert_eq!(skrull_config::from_core(&core).shard_padding as usize, i);
        }
    }

    #[test]
    fn every_option_round_trips() {
        for p in 0..6 {
            for v in 0..2 {
                for f in 0..2 {
                    for s in 0..2 {
                        let mut c = default_cfg();
                        (c.policy, c.victim, c.flops, c.shard_padding) = (p, v, f, s);
                        c.max_micro_batches = 7;
                        let core = c.to_core().unwrap();
                        assert_eq!(skrull_config::from_core(&core), c);
                    }
                }
            }
        }
    }

    #[test]
    fn out_of_range_options_are_invalid_enum() {
        let edits: [fn(&mut skrull_config); 7] = [
            |c| c.policy = 6,
            |c| c.victim = 2,
            |c| c.flops = u32::MAX,
            |c| c.shard_padding = 2,
            |c| c.model.swiglu = 2,
            |c| c.subgroups = 2,
            |c| c.fill_empty = 2,
        ];
        for edit in edits {
            let mut c = default_cfg();
            edit(&mut c);
            assert_eq!(c.to_core(), Err(skrull_status::InvalidEnum));
        }
    }

    #[test]
    fn subgroups_are_opt_in_and_round_trip() {
        assert_eq!(default_cfg().subgroups, 0);
        assert!(!default_cfg().to_core().unwrap().subgroups);
        let mut c = default_cfg();
        c.subgroups = 1;
        let core = c.to_core().unwrap();
        assert!(core.subgroups);
        assert_eq!(skrull_config::from_core(&core), c);
        // A caller whose struct ends before `subgroups` (80 bytes on 64-bit) gets them off,
        // whatever the bytes past its struct hold; one that ends right after it is read whole.
        let off = core::mem::offset_of!(skrull_config, subgroups) as u32;
        for (size, want) in [(off, false), (off + 4, true)] {
            let mut c = default_cfg();
            (c.struct_size, c.subgroups) = (size, 1);
            // SAFETY: a live, aligned skrull_config (larger than `size`).
            let cfg = unsafe { read_config(&c) }.map_err(|f| f.status).unwrap();
            assert_eq!(cfg.subgroups, want, "struct_size {size}");
        }
        // A size that cuts `subgroups` (or `fill_empty`) in two is refused.
        for size in [off + 2, off + 6] {
            let mut c = default_cfg();
            c.struct_size = size;
            // SAFETY: as above.
            let r = unsafe { read_config(&c) }.map_err(|f| f.status);
            assert_eq!(r, Err(skrull_status::BadStructSize), "struct_size {size}");
        }
    }

    #[test]
    fn fill_empty_and_micro_batches_round_trip_and_default_off_for_older_callers() {
        let mut c = default_cfg();
        assert_eq!((c.fill_empty, c.micro_batches), (0, 0));
        (c.fill_empty, c.micro_batches, c.lockstep) = (1, 6, 1);
        let core = c.to_core().unwrap();
        assert!(core.fill_empty && core.lockstep);
        assert_eq!(core.micro_batches, 6);
        assert_eq!(skrull_config::from_core(&core), c);
        // The previous struct ended with `subgroups` and a zero `_reserved` (88 bytes on
        // 64-bit): that word is now `fill_empty`, so such a caller gets filling off and no
        // fixed count, whatever lies past its struct.
        let old = core::mem::offset_of!(skrull_config, micro_batches) as u32;
        let mut c = default_cfg();
        (c.struct_size, c.fill_empty, c.micro_batches) = (old, 0, 9);
        // SAFETY: a live, aligned skrull_config (larger than `old`).
        let cfg = unsafe { read_config(&c) }.map_err(|f| f.status).unwrap();
        assert_eq!((cfg.fill_empty, cfg.micro_batches), (false, 0));
        // A size that cuts `micro_batches` in two is refused.
        c.struct_size = old + 2;
        // SAFETY: as above.
        let r = unsafe { read_config(&c) }.map_err(|f| f.status);
        assert_eq!(r, Err(skrull_status::BadStructSize));
    }

    #[test]
    fn chunking_round_trips_and_defaults_off_for_older_callers() {
        let mut c = default_cfg();
        assert_eq!(
            (c.chunk_size, c.chunk_keep, c.chunk_state_permille),
            (0, 1, 64)
        );
        assert_eq!(c.to_core().unwrap().chunking, Chunking::OFF);
        (c.chunk_size, c.chunk_keep, c.chunk_state_permille) = (4096, 2, 100);
        c.policy = SKRULL_POLICY_CHUNKFLOW;
        let core = c.to_core().unwrap();
        assert_eq!(core.policy, Policy::ChunkFlow);
        let want = Chunking {
            state_permille: 100,
            ..Chunking::new(4096, 2)
        };
        assert_eq!(core.chunking, want);
        assert_eq!(skrull_config::from_core(&core), c);
        // The previous struct ended with `micro_batches` and a zero `_reserved` (96 bytes on
        // 64-bit), which is now `chunk_size`: such a caller gets chunking off. One that ends
        // after `chunk_size` gets the default K and state charge, whatever lies past it.
        let at = |f: usize| f as u32;
        let sizes = [
            (
                at(core::mem::offset_of!(skrull_config, chunk_size)),
                Chunking::OFF,
            ),
            (
                at(core::mem::offset_of!(skrull_config, chunk_keep)),
                Chunking::new(4096, 1),
            ),
            (
                at(core::mem::offset_of!(skrull_config, chunk_state_permille)),
                Chunking::new(4096, 2),
            ),
        ];
        for (size, want) in sizes {
            let mut c = default_cfg();
            (c.struct_size, c.chunk_size, c.chunk_keep) = (size, 4096, 2);
            c.chunk_state_permille = 100;
            // SAFETY: a live, aligned skrull_config (larger than `size`).
            let cfg = unsafe { read_config(&c) }.map_err(|f| f.status).unwrap();
            assert_eq!(cfg.chunking, want, "struct_size {size}");
        }
        // Bad values come from the core's validation.
        for (size, keep, state) in [(4096, 0, 64), (4096, 65, 64), (4096, 1, 1001), (0, 1, 64)] {
            let mut c = default_cfg();
            (c.chunk_size, c.chunk_keep, c.chunk_state_permille) = (size, keep, state);
            c.policy = SKRULL_POLICY_CHUNKFLOW;
            // SAFETY: as above.
            let r = unsafe { read_config(&c) }.map_err(|f| f.status);
            assert_eq!(
                r,
                Err(skrull_status::InvalidChunking),
                "{size} {keep} {state}"
            );
        }
    }

    #[test]
    fn struct_size_rules() {
        let c = default_cfg();
        // SAFETY: `c` is a live, aligned skrull_config.
        assert!(unsafe { read_config(&c) }.map_err(|f| f.status).is_ok());
        for bad in [0, 4, SKRULL_CONFIG_SIZE_V1 - 1, SKRULL_MAX_STRUCT_SIZE + 1] {
            let mut c = default_cfg();
            c.struct_size = bad;
            // SAFETY: as above; the size is rejected before any byte past 4 is read.
            let r = unsafe { read_config(&c) }.map_err(|f| f.status);
            assert_eq!(r, Err(skrull_status::BadStructSize));
        }
        // A newer, larger struct: accepted when its tail is zero, rejected otherwise.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Newer {
            base: skrull_config,
            extra: u64,
        }
        let mut n = Newer {
            base: default_cfg(),
            extra: 0,
        };
        n.base.struct_size = size_of::<Newer>() as u32;
        let p = (&raw const n).cast::<skrull_config>();
        // SAFETY: `p` points to `struct_size` readable bytes.
        assert!(unsafe { read_config(p) }.map_err(|f| f.status).is_ok());
        n.extra = 1;
        let p = (&raw const n).cast::<skrull_config>();
        // SAFETY: as above.
        let r = unsafe { read_config(p) };
        assert_eq!(r.map_err(|f| f.status), Err(skrull_status::BadStructSize));
        // SAFETY: NULL is allowed.
        let null = unsafe { read_config(core::ptr::null()) };
        assert_eq!(null.map_err(|f| f.status), Err(skrull_status::NullArg));
    }

    #[test]
    fn config_errors_come_from_the_core() {
        let mut c = default_cfg();
        c.dp = 0;
        // SAFETY: live, aligned struct.
        let r = unsafe { read_config(&c) };
        assert_eq!(r.map_err(|f| f.status), Err(skrull_status::InvalidDp));
        c = default_cfg();
        c.model.kv_hidden = c.model.hidden + 1;
        // SAFETY: as above.
        let r = unsafe { read_config(&c) };
        assert_eq!(r.map_err(|f| f.status), Err(skrull_status::InvalidModel));
    }

    #[test]
    fn default_and_preset_write_only_on_success() {
        let mut out = default_cfg();
        out.dp = 99;
        let before = out;
        // SAFETY: `out` is a live, aligned, writable skrull_config.
        let s = unsafe { skrull_config_preset(9, &mut out) };
        assert_eq!(s, skrull_status::InvalidEnum);
        assert_eq!(out, before);
        // SAFETY: as above.
        let s = unsafe { skrull_config_default(&mut out) };
        assert_eq!(s, skrull_status::Ok);
        // The version-1 initialiser sets the version-1 size.
        let want = skrull_config {
            struct_size: SKRULL_CONFIG_SIZE_V1,
            ..default_cfg()
        };
        assert_eq!(out, want);
        // SAFETY: as above.
        let s = unsafe { skrull_config_init(&mut out, size_of::<skrull_config>()) };
        assert_eq!(s, skrull_status::Ok);
        assert_eq!(out, default_cfg());
        // SAFETY: NULL is allowed.
        let s = unsafe { skrull_config_default(core::ptr::null_mut()) };
        assert_eq!(s, skrull_status::NullArg);
    }
}
