//! The evaluator: the estimated iteration time of any plan under a [`CostModel`](crate::CostModel), per
//! micro-batch, per DP rank and per CP rank, with the communication it hides and exposes,
//! the GPUs that break BucketSize, and a lower bound on every budget-respecting plan of the
//! same batch.
//!
//! Like the schedulers it never allocates: the caller lends [`EvalBuffers`] sized by
//! [`EvalSizes`], and the results are views into them. It trusts nothing but the placements
//! (the DP rank, micro-batch index and CP rank of every sequence), so it evaluates plans from
//! any source: [`evaluate`] takes a core [`Plan`], [`evaluate_placements`] a bare placement
//! list such as one parsed from `skrull plan --format json`.
//!
//! # Lower bound
//!
//! [`lower_bound`] is the largest of three bounds, each valid for every plan in which no GPU
//! holds more than BucketSize tokens, under the same model:
//!
//! - **work**: every CP rank's time in a micro-batch is at least its compute plus `T_fixed`
//!   (the overlap term is at least the overlapped compute), and a micro-batch takes at least
//!   the mean of its ranks; so the iteration takes at least the mean DP rank, which is at
//!   least `(Σ_s w(s)/N + M·T_fixed)/k` over the `k` DP ranks that hold sequences, where
//!   `w(s)` is the GPU-seconds of sequence `s` at best — the compute-bound GEMM time of its
//!   `S` tokens plus the cheaper of its whole attention (only if `S <= C`) and `N` shards'
//!   attention with the per-sharded-sequence fixed cost on each of them — and `M >= max(k, ceil(ΣS/(N·C)))` micro-batches (one holds at most `N·C`
//!   tokens); the expression falls as `k` grows, so `k = DP` bounds every plan;
//! - **fixed**: some DP rank runs at least `ceil(M/DP)` micro-batches of at least `T_fixed`;
//! - **longest**: the micro-batch holding sequence `s` takes at least the cheaper of `s`
//!   alone whole (only if `S <= C`) and `s` alone sharded (communication, GEMM and attention
//!   only grow with more sequences), for every `s`.
//!
//! With chunking on ([`Config::chunking`]), a sequence longer than one chunk may also run
//! chunked on any group whose peak fits: that is one more option in `w(s)` and in the
//! single-sequence bound, and it counts one chunk of tokens toward `M`.
//!
//! Plus the per-iteration fixed cost. The value is rounded down by one part in 10⁹ so that
//! floating-point reordering can never lift it above an evaluated time.

use crate::setup::Setup;
use core::fmt;

use crate::config::Config;
use crate::config::cost::InvalidCost;
use crate::config::cp_group::CpGroup;
pub use crate::config::cp_group::GROUP_LEVELS;
use crate::config::limits::{MAX_CP, MAX_SEQ_LEN, MAX_SEQS};
use crate::config::options::Synchronisation;
use crate::error::Error;
use crate::model::time::{RankLoad, Ring, TimeModel};
use crate::plan::{CHUNKED, Placement, Plan, SHARDED};

/// One micro-batch's estimate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MicroBatchTime {
    /// The DP rank that runs it.
    pub dp_rank: u32,
    /// Its index on that DP rank.
    pub index: u32,
    /// When it starts on its DP rank (the sum of the earlier micro-batches), seconds.
    pub start: f64,
    /// Its time: the slowest CP rank's, seconds (0 for an index no sequence uses).
    pub time: f64,
    /// The slowest CP rank.
    pub slowest_cp_rank: u32,
    /// Sequences in it.
    pub sequences: u32,
    /// Sharded sequences in it (over the whole CP group or a sub-group).
    pub sharded: u32,
    /// Of them, sharded over the whole CP group (every rank pays their fixed cost).
    pub sharded_whole: u32,
    /// Chunked sequences in it.
    pub chunked: u32,
    /// The most time one GPU spends recomputing chunks in it, seconds.
    pub chunk_recompute: f64,
    /// Tokens each GPU holds of the sharded sequences.
    pub sharded_tokens: u64,
    /// Tokens of the sharded sequences, whole.
    pub sharded_len: u64,
    /// Attention time of each GPU's shares of the sharded sequences, seconds.
    pub sharded_attention: f64,
    /// CP communication of the sharded sequences, seconds.
    pub comm: f64,
    /// Communication the slowest CP rank cannot hide, seconds.
    pub exposed_comm: f64,
    /// The most tokens one GPU holds.
    pub peak_tokens: u64,
    /// Whether some GPU holds more than BucketSize tokens.
    pub over_budget: bool,
    /// Whether a sequence in it spans several CP ranks (sharded, or chunked on a group): its
    /// ranks then meet in it whatever the synchronisation.
    pub collective: bool,
}

impl MicroBatchTime {
    /// The share of the communication hidden behind compute on the slowest rank (1 without
    /// communication).
    pub fn hidden_fraction(&self) -> f64 {
        if self.comm > 0.0 {
            1.0 - self.exposed_comm / self.comm
        } else {
            1.0
        }
    }
}

/// One CP rank's estimate in one micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RankSlot {
    /// Tokens of the sequences held whole here.
    pub local_tokens: u64,
    /// Attention time of those sequences, seconds.
    pub local_attention: f64,
    /// Every token this GPU holds (local plus shards).
    pub tokens: u64,
    /// GEMM time over those tokens, seconds.
    pub gemm: f64,
    /// Communication this rank cannot hide, seconds.
    pub exposed_comm: f64,
    /// This rank's time in the micro-batch, seconds.
    pub time: f64,
    /// Tokens this GPU holds of sequences sharded over sub-groups it belongs to.
    pub group_tokens: u64,
    /// Attention time of those shards, seconds.
    pub group_attention: f64,
    /// Communication of the sub-group rings through this rank, seconds (each ring is one
    /// more ring-attention call on its ranks, after the whole group's).
    pub group_comm: f64,
    /// Tokens sharded over this rank's sub-group of `2^(l+1)` ranks, per `l`.
    pub group_len: [u64; GROUP_LEVELS],
    /// Sequences sharded over sub-groups this rank belongs to.
    pub group_sequences: u32,
    /// Tokens this GPU holds for the chunked sequences of its groups (their peaks,
    /// [`Budget::chunked`](crate::Budget::chunked)).
    pub chunked_tokens: u64,
    /// Time of those chunked sequences' passes, run after the rest of the micro-batch,
    /// seconds ([`TimeModel::chunked`]).
    pub chunked_time: f64,
    /// Their ring communication not hidden, seconds.
    pub chunked_exposed_comm: f64,
}

/// Which caller buffer of [`EvalBuffers`] was too small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalBuffer {
    /// [`EvalBuffers::micro_batches`].
    MicroBatches,
    /// [`EvalBuffers::ranks`].
    Ranks,
    /// [`EvalBuffers::dp_times`].
    DpTimes,
    /// [`EvalBuffers::dp_offsets`].
    DpOffsets,
}

/// How large each [`EvalBuffers`] slice must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalSizes {
    /// Micro-batch slots: `n` (an index beyond a DP rank's sequence count is refused).
    pub micro_batches: usize,
    /// `n x cp`: one per (micro-batch, CP rank).
    pub ranks: usize,
    /// `dp`.
    pub dp_times: usize,
    /// `dp + 1`.
    pub dp_offsets: usize,
}

impl EvalSizes {
    /// Sizes that hold the evaluation of any plan of `n` sequences under `cfg` whose
    /// micro-batch indices on every DP rank stay below that rank's sequence count.
    pub fn for_batch(n: usize, cfg: &Config) -> EvalSizes {
        EvalSizes {
            micro_batches: n,
            ranks: n.saturating_mul(cfg.cp as usize),
            dp_times: cfg.dp as usize,
            dp_offsets: cfg.dp as usize + 1,
        }
    }
}

/// Caller-provided storage for an evaluation (sizes: [`EvalSizes`]).
#[derive(Debug)]
pub struct EvalBuffers<'a> {
    /// One per micro-batch slot, grouped by DP rank, then by index.
    pub micro_batches: &'a mut [MicroBatchTime],
    /// One per (micro-batch slot, CP rank): entry `g * cp + r`.
    pub ranks: &'a mut [RankSlot],
    /// One per DP rank.
    pub dp_times: &'a mut [f64],
    /// Offsets of each DP rank's slots in `micro_batches`.
    pub dp_offsets: &'a mut [u32],
}

/// The first GPU found over BucketSize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetViolation {
    /// Its DP rank.
    pub dp_rank: u32,
    /// The micro-batch index.
    pub micro_batch: u32,
    /// Its CP rank.
    pub cp_rank: u32,
    /// Tokens it holds.
    pub tokens: u64,
}

/// A lower bound on the iteration time of every budget-respecting plan of a batch (see the
/// [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LowerBound {
    /// The bound, seconds: the largest part plus the per-iteration cost, rounded down.
    pub value: f64,
    /// The work bound.
    pub work: f64,
    /// The fixed-cost bound.
    pub fixed: f64,
    /// The single-sequence bound.
    pub longest: f64,
    /// The sequence that gives the single-sequence bound.
    pub longest_seq: usize,
    /// The fewest micro-batches the token total allows.
    pub min_micro_batches: u64,
}

/// The whole-plan summary of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    /// Estimated iteration time, seconds (slowest DP rank plus the per-iteration cost).
    pub iteration_time: f64,
    /// The slowest DP rank.
    pub slowest_dp_rank: u32,
    /// Micro-batches that hold at least one sequence.
    pub micro_batches: u32,
    /// The most micro-batches one DP rank runs.
    pub max_micro_batches_per_dp: u32,
    /// CP communication summed over micro-batches, seconds.
    pub comm: f64,
    /// Communication the slowest CP rank of each micro-batch cannot hide, summed, seconds.
    pub exposed_comm: f64,
    /// The same on the slowest DP rank only (what lengthens the iteration).
    pub critical_exposed_comm: f64,
    /// `1 − exposed_comm / comm` (1 without communication).
    pub hidden_fraction: f64,
    /// The most tokens one GPU holds in one micro-batch.
    pub peak_tokens: u64,
    /// BucketSize of the configuration.
    pub bucket: u32,
    /// (micro-batch, CP rank) pairs over BucketSize: the plan is invalid when this is not 0.
    pub over_budget: u32,
    /// The first of them.
    pub first_over_budget: Option<BudgetViolation>,
    /// Tokens in the batch.
    pub total_tokens: u64,
    /// Tokens of the sharded sequences.
    pub sharded_tokens: u64,
    /// Sharded sequences.
    pub sharded_sequences: u32,
    /// Chunked sequences.
    pub chunked_sequences: u32,
    /// Recomputation of chunked sequences: per micro-batch the most one GPU spends, summed
    /// over micro-batches, seconds.
    pub chunk_recompute: f64,
    /// The lower bound for this batch.
    pub lower_bound: LowerBound,
}

impl Report {
    /// Whether every GPU stays within BucketSize.
    pub fn within_budget(&self) -> bool {
        self.over_budget == 0
    }

    /// Iteration time over the lower bound (1 = provably optimal under the model).
    pub fn gap(&self) -> f64 {
        if self.lower_bound.value > 0.0 {
            self.iteration_time / self.lower_bound.value
        } else {
            1.0
        }
    }
}

/// A finished evaluation: the summary and views into the [`EvalBuffers`].
#[derive(Debug, Clone, Copy)]
pub struct Evaluation<'b> {
    /// The summary.
    pub report: Report,
    /// Every micro-batch slot, grouped by DP rank, then by index.
    pub micro_batches: &'b [MicroBatchTime],
    /// Per (micro-batch slot, CP rank), entry `g * cp + r`.
    pub ranks: &'b [RankSlot],
    /// Time of each DP rank, seconds.
    pub dp_times: &'b [f64],
    cp: usize,
}

impl<'b> Evaluation<'b> {
    /// The CP ranks of micro-batch slot `g`.
    pub fn ranks_of(&self, g: usize) -> &'b [RankSlot] {
        self.ranks
            .get(g * self.cp..(g + 1) * self.cp)
            .unwrap_or(&[])
    }
}

/// Why an evaluation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvalError {
    /// The configuration is invalid.
    Config(Error),
    /// The cost model is invalid.
    Cost(InvalidCost),
    /// The plan's DP/CP sizes differ from the configuration's.
    PlanLayout,
    /// Lengths and placements differ in count, or there are more than `MAX_SEQS`.
    Shape {
        /// Lengths given.
        lengths: usize,
        /// Placements given.
        placements: usize,
    },
    /// A sequence has zero tokens or more than `MAX_SEQ_LEN`.
    Length {
        /// The sequence.
        index: usize,
        /// Its length.
        len: u32,
    },
    /// A sequence's DP rank or CP rank is out of range, or its micro-batch index is not below
    /// its DP rank's sequence count.
    OutOfRange {
        /// The sequence.
        seq: usize,
    },
    /// A caller buffer is too small.
    BufferTooSmall {
        /// Which one.
        buffer: EvalBuffer,
        /// Elements needed.
        needed: usize,
        /// Elements given.
        got: usize,
    },
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EvalError::Config(e) => write!(f, "{e}"),
            EvalError::Cost(e) => write!(f, "{e}"),
            EvalError::PlanLayout => {
                write!(f, "the plan's DP/CP sizes differ from the configuration's")
            }
            EvalError::Shape {
                lengths,
                placements,
            } => write!(
                f,
                "{lengths} lengths but {placements} placements (at most {MAX_SEQS} of each)"
            ),
            EvalError::Length { index, len } => {
                write!(
                    f,
                    "sequence {index} has {len} tokens (1..={MAX_SEQ_LEN} allowed)"
                )
            }
            EvalError::OutOfRange { seq } => write!(
                f,
                "sequence {seq}: DP rank, CP rank or micro-batch index out of range"
            ),
            EvalError::BufferTooSmall {
                buffer,
                needed,
                got,
            } => write!(
                f,
                "buffer {buffer:?} holds {got} elements, {needed} are needed"
            ),
        }
    }
}

impl core::error::Error for EvalError {}

fn check_inputs(setup: &Setup, lengths: &[u32]) -> Result<(), EvalError> {
    setup.cost_model().validate().map_err(EvalError::Cost)?;
    if lengths.len() > MAX_SEQS {
        return Err(EvalError::Shape {
            lengths: lengths.len(),
            placements: lengths.len(),
        });
    }
    for (index, &len) in lengths.iter().enumerate() {
        if len == 0 || len > MAX_SEQ_LEN {
            return Err(EvalError::Length { index, len });
        }
    }
    Ok(())
}

/// Evaluates a core [`Plan`] of `lengths` under `cfg` (see [`evaluate_placements`]).
///
/// # Errors
/// [`EvalError::PlanLayout`] when the plan was made for other DP/CP sizes, else as
/// [`evaluate_placements`].
pub fn evaluate<'b>(
    setup: &Setup,
    lengths: &[u32],
    plan: &Plan<'_>,
    out: EvalBuffers<'b>,
) -> Result<Evaluation<'b>, EvalError> {
    let cfg = setup.config();
    if plan.dp() != cfg.dp || plan.cp() != cfg.cp {
        return Err(EvalError::PlanLayout);
    }
    evaluate_placements(setup, lengths, plan.placements(), out)
}

/// Evaluates the plan given by `placements` (one per sequence, in input order) of `lengths`
/// under `cfg` and its cost model ([`Config::cost_model`]). Micro-batches of a DP rank run in index order; an index no
/// sequence uses costs nothing. A GPU over BucketSize is counted in
/// [`Report::over_budget`], not refused. Runs in `O(n + slots x cp)` without allocating.
///
/// # Errors
/// [`EvalError`] for an invalid configuration or cost model, mismatched or bad lengths, a
/// placement out of range, or buffers smaller than [`EvalSizes::for_batch`] needs.
pub fn evaluate_placements<'b>(
    setup: &Setup,
    lengths: &[u32],
    placements: &[Placement],
    out: EvalBuffers<'b>,
) -> Result<Evaluation<'b>, EvalError> {
    check_inputs(setup, lengths)?;
    let cfg = setup.config();
    if placements.len() != lengths.len() {
        return Err(EvalError::Shape {
            lengths: lengths.len(),
            placements: placements.len(),
        });
    }
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    let EvalBuffers {
        micro_batches,
        ranks,
        dp_times,
        dp_offsets,
    } = out;
    short(EvalBuffer::DpTimes, dp, dp_times.len())?;
    short(EvalBuffer::DpOffsets, dp + 1, dp_offsets.len())?;
    let dp_times = &mut dp_times[..dp];
    let offsets = &mut dp_offsets[..dp + 1];
    let n_slots = lay_out_slots(cfg, placements, lengths, dp_times, offsets)?;
    short(EvalBuffer::MicroBatches, n_slots, micro_batches.len())?;
    short(EvalBuffer::Ranks, n_slots * cp, ranks.len())?;
    let mut slots = Slots {
        offsets,
        mbs: &mut micro_batches[..n_slots],
        ranks: &mut ranks[..n_slots * cp],
    };
    slots.clear();
    let tm = setup.time_model();
    let mut report = Report {
        bucket: cfg.bucket,
        ..Report::default()
    };
    accumulate_loads(&tm, cfg, placements, lengths, &mut slots, &mut report);
    time_dp_ranks(&tm, cfg, &mut slots, dp_times, &mut report);
    report.hidden_fraction = if report.comm > 0.0 {
        1.0 - report.exposed_comm / report.comm
    } else {
        1.0
    };
    report.lower_bound = lower_bound_with(&tm, cfg, lengths);
    Ok(Evaluation {
        report,
        micro_batches: slots.mbs,
        ranks: slots.ranks,
        dp_times,
        cp,
    })
}

/// `Err(BufferTooSmall)` when `got < needed`.
fn short(buffer: EvalBuffer, needed: usize, got: usize) -> Result<(), EvalError> {
    if got < needed {
        Err(EvalError::BufferTooSmall {
            buffer,
            needed,
            got,
        })
    } else {
        Ok(())
    }
}

/// Pass 1: checks every placement's ranks and micro-batch index, and lays out the slots:
/// DP rank `d` owns `offsets[d]..offsets[d + 1]`. `counts` (one per DP rank) is scratch.
/// Returns the slot count.
fn lay_out_slots(
    cfg: &Config,
    placements: &[Placement],
    lengths: &[u32],
    counts: &mut [f64],
    offsets: &mut [u32],
) -> Result<usize, EvalError> {
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    // Sequences per DP rank (as counts) and slots per DP rank.
    offsets.fill(0);
    counts.fill(0.0);
    for (seq, p) in placements.iter().enumerate() {
        let d = p.dp_rank as usize;
        let chunk_ok = || lengths.get(seq).is_some_and(|&l| cfg.chunking.can_chunk(l));
        let cp_ok = p.group_is_valid(cfg.cp)
            && (p.cp_rank == SHARDED
                || (p.cp_rank == CHUNKED && chunk_ok())
                || (p.cp_rank >= 0 && (p.cp_rank as usize) < cp));
        if d >= dp || !cp_ok {
            return Err(EvalError::OutOfRange { seq });
        }
        counts[d] += 1.0;
        offsets[d] = offsets[d].max(p.micro_batch.saturating_add(1));
    }
    for (seq, p) in placements.iter().enumerate() {
        // At most one slot per sequence of the rank: keeps the slot count within n.
        if f64::from(p.micro_batch) >= counts[p.dp_rank as usize] {
            return Err(EvalError::OutOfRange { seq });
        }
    }
    let mut total = 0u32;
    for o in offsets.iter_mut().take(dp) {
        let count = *o;
        *o = total;
        total += count;
    }
    offsets[dp] = total;
    Ok(total as usize)
}

/// The laid-out slots of an evaluation: DP rank `d` owns micro-batch slots
/// `offsets[d]..offsets[d + 1]`, slot `g` owns ranks `g * cp..(g + 1) * cp`.
struct Slots<'o, 'b> {
    offsets: &'o [u32],
    mbs: &'b mut [MicroBatchTime],
    ranks: &'b mut [RankSlot],
}

impl Slots<'_, '_> {
    /// Resets every slot: each micro-batch knows its DP rank and index, every rank is
    /// empty.
    fn clear(&mut self) {
        for (d, w) in self.offsets.windows(2).enumerate() {
            for g in w[0]..w[1] {
                self.mbs[g as usize] = MicroBatchTime {
                    dp_rank: d as u32,
                    index: g - w[0],
                    ..MicroBatchTime::default()
                };
            }
        }
        self.ranks.fill(RankSlot::default());
    }
}

/// Pass 2: accumulates every sequence's tokens and attention into its slot (whole on one
/// rank, sharded over the group, or over a sub-group's ranks).
fn accumulate_loads(
    tm: &TimeModel,
    cfg: &Config,
    placements: &[Placement],
    lengths: &[u32],
    slots: &mut Slots<'_, '_>,
    report: &mut Report,
) {
    let cp = cfg.cp as usize;
    let Slots {
        offsets,
        mbs,
        ranks,
    } = slots;
    for (p, &len) in placements.iter().zip(lengths) {
        let g = (offsets[p.dp_rank as usize] + p.micro_batch) as usize;
        let mb = &mut mbs[g];
        mb.sequences += 1;
        report.total_tokens += u64::from(len);
        mb.collective |= p.cp_rank == SHARDED || (p.is_chunked() && p.group(cfg.cp).size > 1);
        if p.is_chunked() {
            add_chunked(tm, cfg, p, len, g, mb, ranks);
            report.chunked_sequences += 1;
        } else if p.is_subgroup(cfg.cp) {
            // One more ring over the sub-group: its ranks hold a larger share each.
            let group = p.group(cfg.cp);
            let level = group.level();
            let share = u64::from(tm.shard_tokens_in(len, group.size));
            let attention = tm.attention_shard_in(len, group.size);
            mb.sharded += 1;
            report.sharded_sequences += 1;
            report.sharded_tokens += u64::from(len);
            let at = g * cp + group.first as usize;
            for slot in &mut ranks[at..at + group.size as usize] {
                slot.group_tokens += share;
                slot.group_attention += attention;
                slot.group_len[level] += u64::from(len);
                slot.group_sequences += 1;
            }
        } else if p.cp_rank == SHARDED {
            mb.sharded += 1;
            mb.sharded_whole += 1;
            mb.sharded_tokens += u64::from(tm.shard_tokens(len));
            mb.sharded_len += u64::from(len);
            mb.sharded_attention += tm.attention_shard(len);
            report.sharded_sequences += 1;
            report.sharded_tokens += u64::from(len);
        } else {
            let slot = &mut ranks[g * cp + p.cp_rank as usize];
            slot.local_tokens += u64::from(tm.local_tokens(len));
            slot.local_attention += tm.attention_whole(len);
        }
    }
}

/// A chunked sequence of `len` tokens at `p` in slot `g`: each GPU of its group holds its
/// peak and runs its passes ([`TimeModel::chunked`] on the group's ring); the ring's
/// communication counts once in the micro-batch's total.
fn add_chunked(
    tm: &TimeModel,
    cfg: &Config,
    p: &Placement,
    len: u32,
    g: usize,
    mb: &mut MicroBatchTime,
    ranks: &mut [RankSlot],
) {
    let cp = cfg.cp as usize;
    let group = p.group(cfg.cp);
    let ring = tm.ring(p.dp_rank, group.first, group.size);
    let t = tm.chunked(len, &cfg.chunking, ring);
    let peak = cfg.budget().chunked(&cfg.chunking, len, group.size);
    mb.chunked += 1;
    mb.comm += t.comm;
    mb.chunk_recompute = mb.chunk_recompute.max(t.recompute);
    let at = g * cp + group.first as usize;
    for slot in &mut ranks[at..at + group.size as usize] {
        slot.chunked_tokens += peak;
        slot.chunked_time += t.total;
        slot.chunked_exposed_comm += t.exposed_comm;
    }
}

/// Pass 3: every DP rank's time (its micro-batches in index order, composed as
/// [`Config::sync`] says), the slowest one, and the communication sums. With uniform counts a
/// DP rank also runs empty micro-batches up to the longest rank's count (or the fixed count),
/// each costing the fixed launch cost.
///
/// - `CpGroup`: a micro-batch takes its slowest CP rank; a DP rank's time is the sum.
/// - `Sharded`: each CP rank keeps its own clock through micro-batches of whole sequences;
///   a collective micro-batch starts when the last of its DP rank's CP ranks is ready and
///   ends for all of them with its slowest; a DP rank's time is its last rank's clock.
/// - `EveryGpu`: micro-batch `m` starts on every GPU when the slowest GPU of the job has
///   finished micro-batch `m - 1`: the iteration is the sum over `m` of the slowest DP
///   rank's micro-batch `m` (an index a rank does not use costs the fixed launch cost), and
///   every DP rank finishes then.
fn time_dp_ranks(
    tm: &TimeModel,
    cfg: &Config,
    slots: &mut Slots<'_, '_>,
    dp_times: &mut [f64],
    report: &mut Report,
) {
    let (dp, cp) = (cfg.dp as usize, cfg.cp as usize);
    let Slots {
        offsets,
        mbs,
        ranks,
    } = slots;
    let longest = (0..dp)
        .map(|d| offsets[d + 1] - offsets[d])
        .max()
        .unwrap_or(0)
        .max(cfg.micro_batches);
    let mut slowest = (0.0f64, 0usize);
    let mut clocks = [0.0f64; MAX_CP as usize];
    for d in 0..dp {
        let mut clock = 0.0f64;
        let clocks = &mut clocks[..cp];
        clocks.fill(0.0);
        let mut critical_exposed = 0.0f64;
        let mut used = 0u32;
        for g in offsets[d] as usize..offsets[d + 1] as usize {
            let mb = &mut mbs[g];
            mb.start = clock;
            if mb.sequences == 0 {
                continue;
            }
            used += 1;
            let slots = &mut ranks[g * cp..(g + 1) * cp];
            time_micro_batch(tm, cfg, d as u32, mb, slots, report);
            if cfg.sync == Synchronisation::Sharded {
                if mb.collective {
                    let ready = clocks.iter().copied().fold(0.0, f64::max);
                    mb.start = ready;
                    clocks.fill(ready + mb.time);
                } else {
                    mb.start = clocks.iter().copied().fold(f64::INFINITY, f64::min);
                    for (c, slot) in clocks.iter_mut().zip(slots.iter()) {
                        *c += slot.time;
                    }
                }
                clock = clocks.iter().copied().fold(0.0, f64::max);
            } else {
                clock += mb.time;
            }
            critical_exposed += mb.exposed_comm;
            report.comm += mb.comm;
            report.exposed_comm += mb.exposed_comm;
            report.peak_tokens = report.peak_tokens.max(mb.peak_tokens);
        }
        if cfg.uniform_counts() {
            let empty = longest - (offsets[d + 1] - offsets[d]);
            clock += f64::from(empty) * tm.fixed();
        }
        dp_times[d] = clock;
        report.micro_batches += used;
        report.max_micro_batches_per_dp = report.max_micro_batches_per_dp.max(used);
        if d == 0 || clock > slowest.0 {
            slowest = (clock, d);
            report.critical_exposed_comm = critical_exposed;
        }
    }
    report.slowest_dp_rank = slowest.1 as u32;
    let mut iteration = slowest.0;
    if cfg.sync == Synchronisation::EveryGpu {
        iteration = every_gpu(tm, offsets, mbs, longest);
        dp_times.fill(iteration);
    }
    report.iteration_time = iteration + tm.cost.iteration_fixed_s;
}

/// The `EveryGpu` composition: the sum over micro-batch indices of the slowest DP rank's
/// micro-batch at that index (the fixed launch cost where a rank has none, or an empty one);
/// each micro-batch's `start` becomes the time its index starts on every GPU.
fn every_gpu(tm: &TimeModel, offsets: &[u32], mbs: &mut [MicroBatchTime], longest: u32) -> f64 {
    let dp = offsets.len() - 1;
    let mut start = 0.0f64;
    for m in 0..longest {
        let mut step = 0.0f64;
        for d in 0..dp {
            let g = offsets[d] + m;
            let t = if g < offsets[d + 1] && mbs[g as usize].sequences > 0 {
                mbs[g as usize].time
            } else {
                tm.fixed()
            };
            step = step.max(t);
            if g < offsets[d + 1] {
                mbs[g as usize].start = start;
            }
        }
        start += step;
    }
    start
}

/// One non-empty micro-batch on DP rank `d`: its communication, every CP rank's time
/// (`ranks` are its slots), the slowest rank, and the GPUs over BucketSize (counted in
/// `report`).
fn time_micro_batch(
    tm: &TimeModel,
    cfg: &Config,
    d: u32,
    mb: &mut MicroBatchTime,
    ranks: &mut [RankSlot],
    report: &mut Report,
) {
    mb.comm = tm.comm(mb.sharded_len, tm.group_ring(d));
    let whole_comm = mb.comm;
    let mut best = (f64::NEG_INFINITY, 0usize);
    for (r, slot) in ranks.iter_mut().enumerate() {
        // The sub-group rings through this rank; each counts once in the micro-batch's
        // total, at its first rank.
        slot.group_comm = 0.0;
        for (level, &len) in slot.group_len.iter().enumerate() {
            if len == 0 {
                continue;
            }
            let ring = CpGroup::around(r as u32, CpGroup::level_size(level));
            let c = tm.comm(len, tm.ring(d, ring.first, ring.size));
            slot.group_comm += c;
            if ring.first == r as u32 {
                mb.comm += c;
            }
        }
        let load = RankLoad {
            local_tokens: slot.local_tokens,
            local_attention: slot.local_attention,
            sharded_tokens: mb.sharded_tokens + slot.group_tokens,
            sharded_attention: mb.sharded_attention + slot.group_attention,
            comm: whole_comm + slot.group_comm,
            sharded_sequences: mb.sharded_whole + slot.group_sequences,
        };
        let mut t = tm.rank(&load);
        slot.tokens = slot.local_tokens + mb.sharded_tokens + slot.group_tokens;
        if slot.chunked_time > 0.0 {
            // The chunked passes run after the rest of the micro-batch.
            t.total += slot.chunked_time;
            t.exposed_comm += slot.chunked_exposed_comm;
            slot.tokens += slot.chunked_tokens;
        }
        slot.gemm = t.gemm;
        slot.exposed_comm = t.exposed_comm;
        slot.time = t.total;
        if t.total > best.0 {
            best = (t.total, r);
        }
        mb.peak_tokens = mb.peak_tokens.max(slot.tokens);
        if slot.tokens > u64::from(cfg.bucket) {
            mb.over_budget = true;
            report.over_budget += 1;
            if report.first_over_budget.is_none() {
                report.first_over_budget = Some(BudgetViolation {
                    dp_rank: d,
                    micro_batch: mb.index,
                    cp_rank: r as u32,
                    tokens: slot.tokens,
                });
            }
        }
    }
    mb.time = best.0;
    mb.slowest_cp_rank = best.1 as u32;
    report.chunk_recompute += mb.chunk_recompute;
    mb.exposed_comm = ranks[best.1].exposed_comm;
}

/// The lower bound on the iteration time of every budget-respecting plan of `lengths` under
/// `cfg` and its cost model (see the [module docs](self)).
///
/// # Errors
/// [`EvalError`] for an invalid configuration, cost model or length.
pub fn lower_bound(setup: &Setup, lengths: &[u32]) -> Result<LowerBound, EvalError> {
    check_inputs(setup, lengths)?;
    Ok(lower_bound_with(
        &setup.time_model(),
        setup.config(),
        lengths,
    ))
}

/// The cheapest ring a sequence sharded over a whole CP group can ride: an in-node one when
/// any DP rank's group fits a node.
fn cheapest_group_ring(tm: &TimeModel, cfg: &Config) -> Ring {
    // The pattern of node crossings repeats every `gpus_per_node` DP ranks at most.
    let period = cfg.dp.min(tm.cost.gpus_per_node.max(1));
    let crosses = (0..period).all(|d| tm.group_ring(d).crosses_nodes);
    Ring {
        size: cfg.cp,
        crosses_nodes: crosses,
    }
}

/// The cheapest ring of an aligned sub-group of `g` ranks: an in-node one when some DP
/// rank has such a block inside a node.
fn cheapest_subgroup_ring(tm: &TimeModel, cfg: &Config, g: u32) -> Ring {
    let period = cfg.dp.min(tm.cost.gpus_per_node.max(1));
    let crosses =
        (0..period).all(|d| (0..cfg.cp / g.max(1)).all(|b| tm.ring(d, b * g, g).crosses_nodes));
    Ring {
        size: g,
        crosses_nodes: crosses,
    }
}

/// The sub-group sizes `g < N` a sequence may be sharded over under `cfg` (powers of two
/// dividing the CP size), smallest first; none without [`Config::subgroups`].
fn subgroup_sizes(cfg: &Config) -> impl Iterator<Item = u32> + '_ {
    CpGroup::sub_sizes(cfg.cp).filter(move |_| cfg.subgroups)
}

/// The cheapest GPU-seconds of attention and the cheapest time alone of a `len`-token
/// sequence chunked on any group whose peak fits BucketSize: one GPU, every aligned
/// sub-group (on its cheapest ring, `sub_rings`), the whole group (`ring`). Infinite when none
/// fits.
fn chunked_options(
    tm: &TimeModel,
    cfg: &Config,
    len: u32,
    ring: Ring,
    sub_rings: &[Ring; GROUP_LEVELS],
) -> (f64, f64) {
    let budget = cfg.budget();
    let mut best = (f64::INFINITY, f64::INFINITY);
    let one = Ring {
        size: 1,
        crosses_nodes: false,
    };
    // Sub-group rings are prepared only with sub-groups on (chunk groups do not need them).
    let subs = CpGroup::sub_sizes(cfg.cp).map(|g| {
        let r = sub_rings[CpGroup::level_of(g)];
        if r.size == g {
            r
        } else {
            cheapest_subgroup_ring(tm, cfg, g)
        }
    });
    let rings = core::iter::once(one)
        .chain(subs)
        .chain(core::iter::once(ring).filter(|_| cfg.cp > 1));
    for r in rings {
        if budget.chunked(&cfg.chunking, len, r.size) > u64::from(cfg.bucket) {
            continue;
        }
        let t = tm.chunked(len, &cfg.chunking, r);
        best.0 = best.0.min(f64::from(r.size) * t.attention);
        best.1 = best.1.min(t.total + tm.fixed());
    }
    best
}

/// [`lower_bound`] with a prepared [`TimeModel`] and unchecked inputs. With
/// [`Config::subgroups`] every sub-group a sequence may be sharded over counts as an option.
pub fn lower_bound_with(tm: &TimeModel, cfg: &Config, lengths: &[u32]) -> LowerBound {
    let ring = cheapest_group_ring(tm, cfg);
    let n_cp = f64::from(cfg.cp.max(1));
    let n_dp = f64::from(cfg.dp.max(1));
    let bucket = cfg.bucket;
    let budget = cfg.budget();
    let mut sub_rings = [Ring::default(); GROUP_LEVELS];
    for g in subgroup_sizes(cfg) {
        sub_rings[CpGroup::level_of(g)] = cheapest_subgroup_ring(tm, cfg, g);
    }
    let mut work = 0.0f64;
    let mut total = 0u64;
    let mut longest = (0.0f64, 0usize);
    for (s, &len) in lengths.iter().enumerate() {
        let fits_whole = len <= bucket;
        // A sharded sequence also costs its fixed cost on every GPU of its group.
        let seq_fixed = tm.sequence_fixed();
        let mut sharded_attn = n_cp * (tm.attention_shard(len) + seq_fixed);
        let mut sharded_alone = tm.alone_sharded(len, ring);
        for g in subgroup_sizes(cfg) {
            if budget.for_group(g).share(len) <= bucket {
                let attn = tm.attention_shard_in(len, g) + seq_fixed;
                sharded_attn = sharded_attn.min(f64::from(g) * attn);
                let sub = sub_rings[CpGroup::level_of(g)];
                sharded_alone = sharded_alone.min(tm.alone_sharded(len, sub));
            }
        }
        if cfg.chunking.can_chunk(len) {
            // Chunked on any group it fits: its attention over the group's GPUs, and its
            // passes alone after an empty main pass. It holds at least one chunk's tokens.
            let (attn, alone) = chunked_options(tm, cfg, len, ring, &sub_rings);
            sharded_attn = sharded_attn.min(attn);
            sharded_alone = sharded_alone.min(alone);
            total += u64::from(cfg.chunking.size);
        } else {
            total += u64::from(len);
        }
        let attn = if fits_whole {
            tm.attention_whole(len).min(sharded_attn)
        } else {
            sharded_attn
        };
        work += tm.gemm_compute(u64::from(len)) + attn;
        let alone = if fits_whole {
            tm.alone_whole(len).min(sharded_alone)
        } else {
            sharded_alone
        };
        if alone > longest.0 {
            longest = (alone, s);
        }
    }
    let per_mb = u64::from(cfg.cp.max(1)) * u64::from(bucket.max(1));
    let min_mbs = total.div_ceil(per_mb);
    // With k DP ranks holding sequences, T >= (work/N + T_fixed·max(k, M))/k, which falls
    // as k grows: k = DP is the weakest case.
    let work_bound = (work / n_cp + tm.fixed() * (min_mbs.max(u64::from(cfg.dp)) as f64)) / n_dp;
    let fixed_bound = tm.fixed() * min_mbs.div_ceil(u64::from(cfg.dp.max(1))) as f64;
    let best = work_bound.max(fixed_bound).max(longest.0);
    let value = if lengths.is_empty() {
        0.0
    } else {
        (best + tm.cost.iteration_fixed_s) * (1.0 - 1e-9)
    };
    LowerBound {
        value,
        work: work_bound,
        fixed: fixed_bound,
        longest: longest.0,
        longest_seq: longest.1,
        min_micro_batches: min_mbs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::chunking::Chunking;
    use crate::config::cost::CostModel;
    use crate::config::options::Policy;
    use crate::config::shape::ModelShape;
    use crate::test_support::OwnedPlan;
    use crate::test_support::setup_of;

    use std::vec;
    use std::vec::Vec;

    struct Bufs {
        mbs: Vec<MicroBatchTime>,
        ranks: Vec<RankSlot>,
        dp: Vec<f64>,
        off: Vec<u32>,
    }

    impl Bufs {
        fn new(n: usize, cfg: &Config) -> Bufs {
            let s = EvalSizes::for_batch(n, cfg);
            Bufs {
                mbs: vec![MicroBatchTime::default(); s.micro_batches],
                ranks: vec![RankSlot::default(); s.ranks],
                dp: vec![0.0; s.dp_times],
                off: vec![0; s.dp_offsets],
            }
        }
        fn out(&mut self) -> EvalBuffers<'_> {
            EvalBuffers {
                micro_batches: &mut self.mbs,
                ranks: &mut self.ranks,
                dp_times: &mut self.dp,
                dp_offsets: &mut self.off,
            }
        }
    }

    fn plan_placements(cfg: &Config, lengths: &[u32]) -> Vec<Placement> {
        let mut bufs = OwnedPlan::new(lengths.len(), cfg);
        bufs.schedule(cfg, lengths).unwrap().placements().to_vec()
    }

    fn cfg() -> Config {
        Config::new(2, 4, 8192, ModelShape::QWEN2_5_0_5B)
    }

    #[test]
    fn deepspeed_time_is_the_sum_of_sharded_sequence_times() {
        let cfg =
            Config::new(1, 8, 26 * 1024, ModelShape::QWEN2_5_7B).with_policy(Policy::DeepSpeed);
        let lengths = [100u32, 5000, 70_000, 1, 2048, 33_333];
        let placements = plan_placements(&cfg, &lengths);
        let mut b = Bufs::new(lengths.len(), &cfg);
        let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
        let tm = TimeModel::new(&cfg.cost_model(), &cfg);
        let want: f64 = lengths
            .iter()
            .map(|&s| tm.alone_sharded(s, tm.group_ring(0)))
            .sum();
        assert!(
            (ev.report.iteration_time - want).abs() <= 1e-12 * want,
            "{} {want}",
            ev.report.iteration_time
        );
        assert_eq!(ev.report.micro_batches, 6);
        assert_eq!(ev.report.sharded_sequences, 6);
        assert!(ev.report.within_budget());
        assert!(ev.report.iteration_time >= ev.report.lower_bound.value);
        // DP = 2: each rank's consecutive share, and the iteration is the slower one.
        let cfg2 = Config { dp: 2, ..cfg };
        let placements = plan_placements(&cfg2, &lengths);
        let mut b = Bufs::new(lengths.len(), &cfg2);
        let ev = evaluate_placements(&setup_of(&cfg2), &lengths, &placements, b.out()).unwrap();
        let a: f64 = lengths[..3]
            .iter()
            .map(|&s| tm.alone_sharded(s, tm.group_ring(0)))
            .sum();
        let c: f64 = lengths[3..]
            .iter()
            .map(|&s| tm.alone_sharded(s, tm.group_ring(0)))
            .sum();
        assert!((ev.dp_times[0] - a).abs() <= 1e-12 * a);
        assert!((ev.dp_times[1] - c).abs() <= 1e-12 * c);
        assert_eq!(ev.report.iteration_time, a.max(c));
    }

    #[test]
    fn a_hand_built_micro_batch_by_hand() {
        // DP 1, CP 4: one micro-batch with 1000 local on rank 0, 300 local on rank 2, and a
        // sharded 8000.
        let cfg = Config::new(1, 4, 8192, ModelShape::QWEN2_5_0_5B);
        let lengths = [1000u32, 300, 8000];
        let p = |cp_rank| Placement {
            dp_rank: 0,
            micro_batch: 0,
            cp_rank,
            ..Placement::default()
        };
        let placements = [p(0), p(2), p(SHARDED)];
        let cost = CostModel::h100(&cfg.model);
        let tm = TimeModel::new(&cost, &cfg);
        let mut b = Bufs::new(3, &cfg);
        let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
        let comm = tm.comm(8000, tm.group_ring(0));
        let sh = tm.attention_shard(8000);
        let r0 = comm.max(tm.attention_whole(1000)) + tm.gemm(3000) + sh + tm.fixed();
        let r1 = comm + tm.gemm(2000) + sh + tm.fixed();
        let r2 = comm.max(tm.attention_whole(300)) + tm.gemm(2300) + sh + tm.fixed();
        let ranks = ev.ranks_of(0);
        assert_eq!(ranks[0].time, r0);
        assert_eq!(ranks[1].time, r1);
        assert_eq!(ranks[2].time, r2);
        assert_eq!(ranks[3].time, r1);
        assert_eq!(ev.report.iteration_time, r0.max(r1).max(r2));
        assert_eq!(ev.micro_batches[0].peak_tokens, 3000);
        assert_eq!(ev.report.sharded_tokens, 8000);
        assert_eq!(ev.report.total_tokens, 9300);
        let mb = ev.micro_batches[0];
        assert_eq!(mb.comm, comm);
        assert!(mb.hidden_fraction() >= 0.0 && mb.hidden_fraction() <= 1.0);
    }

    /// Each synchronisation's composition against a schedule composed by hand from the
    /// per-(micro-batch, CP rank) times. DP 2 x CP 2: DP rank 0 runs two micro-batches of
    /// whole sequences whose heavy ranks alternate, then one with a sharded sequence; DP rank
    /// 1 runs one micro-batch of whole sequences.
    #[test]
    fn each_synchronisation_composes_the_hand_computed_schedule() {
        let lengths = [6000u32, 500, 400, 5000, 8000, 3000, 200];
        let p = |dp_rank, micro_batch, cp_rank| Placement {
            dp_rank,
            micro_batch,
            cp_rank,
            ..Placement::default()
        };
        let placements = [
            p(0, 0, 0),
            p(0, 0, 1),
            p(0, 1, 0),
            p(0, 1, 1),
            p(0, 2, SHARDED),
            p(1, 0, 0),
            p(1, 0, 1),
        ];
        let eval = |sync| {
            let mut cfg = Config::new(2, 2, 8192, ModelShape::QWEN2_5_0_5B);
            cfg.sync = sync;
            let mut b = Bufs::new(lengths.len(), &cfg);
            let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
            let t: Vec<[f64; 2]> = (0..ev.micro_batches.len())
                .map(|g| [ev.ranks_of(g)[0].time, ev.ranks_of(g)[1].time])
                .collect();
            (ev.report.iteration_time, ev.dp_times.to_vec(), t)
        };
        let fixed = TimeModel::new(
            &CostModel::h100(&ModelShape::QWEN2_5_0_5B),
            &Config::new(2, 2, 8192, ModelShape::QWEN2_5_0_5B),
        )
        .cost
        .iteration_fixed_s;
        let max = |x: [f64; 2]| x[0].max(x[1]);
        // Slots: DP 0's micro-batches 0, 1, 2, then DP 1's micro-batch 0.
        let (it, dp_times, t) = eval(Synchronisation::CpGroup);
        let dp0 = max(t[0]) + max(t[1]) + max(t[2]);
        let dp1 = max(t[3]);
        assert_eq!(dp_times, [dp0, dp1]);
        assert_eq!(it, dp0.max(dp1) + fixed);
        // Sharded: each rank's own clock through micro-batches 0 and 1, then the sharded one
        // starts when both are ready and ends with its slower rank.
        let (it_s, dp_times_s, t_s) = eval(Synchronisation::Sharded);
        assert_eq!(
            t_s, t,
            "the per-rank times do not depend on the composition"
        );
        let ready = (t[0][0] + t[1][0]).max(t[0][1] + t[1][1]);
        let dp0_s = ready + max(t[2]);
        assert_eq!(dp_times_s, [dp0_s, dp1]);
        assert_eq!(it_s, dp0_s.max(dp1) + fixed);
        // The heavy ranks alternate, so not waiting inside micro-batches 0 and 1 saves time.
        assert!(it_s < it);
        // EveryGpu: index by index, the slowest GPU of the job; DP 1 has no micro-batch 1 or
        // 2 (lockstep counts: each costs the fixed launch cost).
        let (it_e, dp_times_e, t_e) = eval(Synchronisation::EveryGpu);
        assert_eq!(t_e, t);
        let tm = TimeModel::new(
            &CostModel::h100(&ModelShape::QWEN2_5_0_5B),
            &Config::new(2, 2, 8192, ModelShape::QWEN2_5_0_5B),
        );
        let every =
            max(t[0]).max(max(t[3])) + max(t[1]).max(tm.fixed()) + max(t[2]).max(tm.fixed());
        assert_eq!(dp_times_e, [every, every]);
        assert_eq!(it_e, every + fixed);
        assert!(it_e >= it);
    }

    /// A sequence chunked over a group of several ranks holds them together as a sharded one
    /// does (its chunks' state is exchanged over their ring): under `Sharded` its micro-batch
    /// starts when the last rank is ready; chunked on one GPU it waits for no one.
    #[test]
    fn a_chunk_group_is_a_collective_and_a_chunk_on_one_gpu_is_not() {
        let lengths = [6000u32, 500, 9000];
        let run = |group: u16| {
            let mut cfg = Config::new(1, 2, 8192, ModelShape::QWEN2_5_0_5B);
            cfg.sync = Synchronisation::Sharded;
            cfg.chunking = Chunking::new(4096, 1);
            let p = |micro_batch, cp_rank, cp_first, cp_size| Placement {
                dp_rank: 0,
                micro_batch,
                cp_rank,
                cp_first,
                cp_size,
            };
            let placements = [p(0, 0, 0, 0), p(0, 1, 0, 0), p(1, CHUNKED, 0, group)];
            let mut b = Bufs::new(3, &cfg);
            let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
            let t = |g: usize, r: usize| ev.ranks_of(g)[r].time;
            let (a, c) = ([t(0, 0), t(0, 1)], [t(1, 0), t(1, 1)]);
            (ev.micro_batches[1].collective, ev.dp_times[0], a, c)
        };
        let (collective, time, a, c) = run(2);
        assert!(collective);
        assert_eq!(time, a[0].max(a[1]) + c[0].max(c[1]));
        let (collective, time, a, c) = run(1);
        assert!(!collective);
        assert_eq!(time, (a[0] + c[0]).max(a[1] + c[1]));
    }

    /// Every GPU of a sharded sequence's group pays its fixed cost once: the whole group's
    /// on every rank, a sub-group's on its ranks only, nothing for a local sequence.
    #[test]
    fn sharded_sequences_cost_their_fixed_cost_on_their_group() {
        let mut cfg = Config::new(1, 4, 8192, ModelShape::QWEN2_5_0_5B);
        let mut cost = CostModel::h100(&cfg.model);
        cost.sharded_sequence_s = 0.004;
        cfg = cfg.with_cost(cost);
        let lengths = [1000u32, 8000, 6000, 4000];
        let at = |cp_rank, cp_first, cp_size| Placement {
            dp_rank: 0,
            micro_batch: 0,
            cp_rank,
            cp_first,
            cp_size,
        };
        // Local on rank 0, two over the whole group, one over ranks 2..4.
        let placements = [
            at(0, 0, 0),
            at(SHARDED, 0, 0),
            at(SHARDED, 0, 0),
            at(SHARDED, 2, 2),
        ];
        let tm = TimeModel::new(&cost, &cfg);
        let mut b = Bufs::new(4, &cfg);
        let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
        let mut zero = cost;
        zero.sharded_sequence_s = 0.0;
        let mut b0 = Bufs::new(4, &cfg);
        let cfg0 = cfg.with_cost(zero);
        let ev0 = evaluate_placements(&setup_of(&cfg0), &lengths, &placements, b0.out()).unwrap();
        let paid: Vec<f64> = (0..4)
            .map(|r| ev.ranks_of(0)[r].time - ev0.ranks_of(0)[r].time)
            .collect();
        for (r, want) in [(0, 0.008), (1, 0.008), (2, 0.012), (3, 0.012)] {
            assert!((paid[r] - want).abs() < 1e-12, "rank {r}: {}", paid[r]);
        }
        assert_eq!(ev.micro_batches[0].sharded, 3);
        assert_eq!(ev.micro_batches[0].sharded_whole, 2);
        assert_eq!(ev.ranks_of(0)[2].group_sequences, 1);
        assert!(ev.report.iteration_time >= ev.report.lower_bound.value);
        // A lone sharded sequence meets its bound with its fixed cost in it.
        let lone = lower_bound(&setup_of(&cfg), &[30_000]).unwrap();
        let want = tm.alone_sharded(30_000, tm.group_ring(0));
        assert!(lone.value <= want && lone.value >= want * (1.0 - 1e-8));
    }

    #[test]
    fn a_plan_over_budget_is_flagged() {
        let cfg = Config::new(1, 2, 1000, ModelShape::QWEN2_5_0_5B);
        let lengths = [900u32, 200, 1500];
        let placements = [
            Placement {
                dp_rank: 0,
                micro_batch: 0,
                cp_rank: 0,
                ..Placement::default()
            },
            Placement {
                dp_rank: 0,
                micro_batch: 0,
                cp_rank: 0,
                ..Placement::default()
            },
            Placement {
                dp_rank: 0,
                micro_batch: 1,
                cp_rank: 1,
                ..Placement::default()
            },
        ];
        let mut b = Bufs::new(3, &cfg);
        let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
        assert!(!ev.report.within_budget());
        assert_eq!(ev.report.over_budget, 2);
        assert_eq!(
            ev.report.first_over_budget,
            Some(BudgetViolation {
                dp_rank: 0,
                micro_batch: 0,
                cp_rank: 0,
                tokens: 1100
            })
        );
        assert!(ev.micro_batches[0].over_budget && ev.micro_batches[1].over_budget);
        assert_eq!(ev.report.peak_tokens, 1500);
    }

    #[test]
    fn bad_placements_are_refused() {
        let cfg = cfg();
        let mut b = Bufs::new(2, &cfg);
        let ok = Placement::default();
        let lens = [10u32, 20];
        let bad_dp = Placement { dp_rank: 2, ..ok };
        assert_eq!(
            evaluate_placements(&setup_of(&cfg), &lens, &[ok, bad_dp], b.out()).unwrap_err(),
            EvalError::OutOfRange { seq: 1 }
        );
        let bad_cp = Placement { cp_rank: 4, ..ok };
        assert!(evaluate_placements(&setup_of(&cfg), &lens, &[bad_cp, ok], b.out()).is_err());
        let sparse = Placement {
            micro_batch: 5,
            ..ok
        };
        assert_eq!(
            evaluate_placements(&setup_of(&cfg), &lens, &[ok, sparse], b.out()).unwrap_err(),
            EvalError::OutOfRange { seq: 1 }
        );
        assert!(matches!(
            evaluate_placements(&setup_of(&cfg), &[10], &[ok, ok], b.out()),
            Err(EvalError::Shape { .. })
        ));
        assert_eq!(
            evaluate_placements(&setup_of(&cfg), &[10, 0], &[ok, ok], b.out()).unwrap_err(),
            EvalError::Length { index: 1, len: 0 }
        );
        let mut small = Bufs::new(0, &cfg);
        assert!(matches!(
            evaluate_placements(&setup_of(&cfg), &lens, &[ok, ok], small.out()),
            Err(EvalError::BufferTooSmall {
                buffer: EvalBuffer::MicroBatches,
                ..
            })
        ));
        // A gap in the indices is allowed and costs nothing.
        let gap = Placement {
            micro_batch: 1,
            ..ok
        };
        let third = Placement {
            micro_batch: 2,
            ..ok
        };
        let mut b3 = Bufs::new(3, &cfg);
        let ev =
            evaluate_placements(&setup_of(&cfg), &[1, 2, 3], &[ok, third, ok], b3.out()).unwrap();
        assert_eq!(ev.micro_batches[1].time, 0.0);
        assert_eq!(ev.report.micro_batches, 2);
        let _ = gap;
    }

    #[test]
    fn every_policy_is_at_least_the_lower_bound_on_a_long_tail_batch() {
        // Under miri 100 sequences, two of them long (256 took over a minute there).
        let lengths: Vec<u32> = (0..if cfg!(miri) { 100 } else { 256u32 })
            .map(|i| {
                if i % 50 == 7 {
                    60_000 + i * 100
                } else {
                    50 + (i * 7919) % 3000
                }
            })
            .collect();
        let models = [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B];
        // Under miri one model (each takes over a minute there).
        for model in models.into_iter().take(if cfg!(miri) { 1 } else { 2 }) {
            let base = Config::new(4, 8, 26 * 1024, model);
            let lb = lower_bound(&setup_of(&base), &lengths).unwrap();
            assert!(lb.value > 0.0 && lb.min_micro_batches >= 1);
            for policy in Policy::ALL {
                let mut cfg = base.with_policy(policy);
                if policy == Policy::ChunkFlow {
                    cfg.chunking = Chunking::new(16_384, 1);
                }
                let placements = plan_placements(&cfg, &lengths);
                let mut b = Bufs::new(lengths.len(), &cfg);
                let ev =
                    evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
                assert!(ev.report.within_budget());
                if !cfg.chunking.is_on() {
                    assert_eq!(ev.report.lower_bound, lb);
                }
                let lb = ev.report.lower_bound;
                assert!(ev.report.iteration_time >= lb.value, "{policy:?}");
                assert!(ev.report.gap() >= 1.0);
            }
        }
    }

    #[test]
    fn chunked_plans_are_at_least_their_bound_and_a_lone_chunked_sequence_meets_it() {
        let mut rng = crate::test_support::SplitMix64::new(2024);
        for _ in 0..if cfg!(miri) { 5 } else { 200 } {
            let model =
                [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B][rng.below_mod(2) as usize];
            let cp = [1, 2, 8, 16][rng.below_mod(4) as usize];
            let bucket = 2048 + rng.below_mod(16_384) as u32;
            let mut cfg = Config::new(1 + rng.below_mod(3) as u32, cp, bucket, model)
                .with_policy(Policy::ChunkFlow);
            cfg.chunking = Chunking::new(
                512 + rng.below_mod(u64::from(bucket)) as u32,
                1 + rng.below_mod(3) as u32,
            );
            let n = 1 + rng.below_mod(40) as usize;
            let longest = u64::from(bucket) * u64::from(cp);
            let lengths: Vec<u32> = (0..n).map(|_| 1 + rng.below_mod(longest) as u32).collect();
            let mut owned = OwnedPlan::new(n, &cfg);
            let Ok(plan) = owned.schedule(&cfg, &lengths) else {
                continue;
            };
            let placements = plan.placements().to_vec();
            let mut b = Bufs::new(n, &cfg);
            let ev = evaluate_placements(&setup_of(&cfg), &lengths, &placements, b.out()).unwrap();
            assert!(ev.report.within_budget(), "{cfg:?} {lengths:?}");
            assert!(
                ev.report.iteration_time >= ev.report.lower_bound.value,
                "{cfg:?} {lengths:?}"
            );
            assert_eq!(ev.report.chunked_sequences, plan.summary().chunked);
        }
        // One 100K sequence chunked over 8 GPUs of 13K: the evaluator charges exactly its
        // passes after an empty main pass; the bound is no more.
        let mut cfg =
            Config::new(1, 8, 13 * 1024, ModelShape::QWEN2_5_7B).with_policy(Policy::ChunkFlow);
        cfg.chunking = Chunking::new(8192, 1);
        let tm = TimeModel::new(&cfg.cost_model(), &cfg);
        let alone = tm.chunked(100_000, &cfg.chunking, tm.ring(0, 0, 8)).total + tm.fixed();
        let lb = lower_bound(&setup_of(&cfg), &[100_000]).unwrap();
        let placements = plan_placements(&cfg, &[100_000]);
        assert!(placements[0].is_chunked());
        let mut b = Bufs::new(1, &cfg);
        let ev = evaluate_placements(&setup_of(&cfg), &[100_000], &placements, b.out()).unwrap();
        let want = alone + tm.cost.iteration_fixed_s;
        assert!((ev.report.iteration_time - want).abs() <= 1e-12 * want);
        assert!(lb.value <= want);
        assert!(ev.report.chunk_recompute > 0.0);
    }

    #[test]
    fn a_single_sequence_meets_its_bound() {
        let cfg = Config::new(1, 8, 4096, ModelShape::QWEN2_5_7B);
        let cost = CostModel::h100(&cfg.model);
        let tm = TimeModel::new(&cost, &cfg);
        for len in [1u32, 4096, 4097, 32768] {
            let lb = lower_bound(&setup_of(&cfg), &[len]).unwrap();
            let best = if len <= 4096 {
                tm.alone_whole(len)
                    .min(tm.alone_sharded(len, tm.group_ring(0)))
            } else {
                tm.alone_sharded(len, tm.group_ring(0))
            };
            assert!(lb.value <= best && lb.value >= best * (1.0 - 1e-8), "{len}");
        }
        assert_eq!(lower_bound(&setup_of(&cfg), &[]).unwrap().value, 0.0);
    }
}
