//! The time model: how long a micro-batch takes on real hardware (SPEC section 5), and the
//! least-squares fit that calibrates it from measured samples.
//!
//! Floating point is used here because these are *estimates* that are reported; no scheduling
//! decision reads them. All transcendental functions come from `libm`, so the numbers are the
//! same on every platform.
//!
//! # The model
//!
//! For one CP rank `r` in one micro-batch:
//!
//! ```text
//! t_r = max(T_comm, T_overlap,r) + T_gemm(tokens_r) + T_attn(sharded share) + T_fixed
//! ```
//!
//! - `T_gemm(T) = max(F_lin·T / (peak·gemm_efficiency), weight_passes·W / hbm_bandwidth)`: a
//!   roofline over every token the GPU holds in the micro-batch (`F_lin`: Megatron's linear FLOPs
//!   per token, forward + backward, LM head included; `W`: the weight bytes).
//! - `T_attn(q, S) = 2·h·L·pad(q)·S · (1/eff_fwd(pad(q)) + bwd_ratio/eff_bwd(pad(q)))`: causal
//!   attention of `q` queries against a sequence of `S` keys (whole: `q = S`; shard:
//!   `q` = the tokens the GPU holds), queries padded to `attention_tile`-token tiles, throughput
//!   interpolated (in `log2 q`) in an [`AttentionTable`].
//! - `T_comm = L·comm_passes·((N−1)·ring_step_latency + (N−1)/N·ΣS_sharded·kv_bytes/B)`: ring
//!   attention's K/V traffic for every sharded sequence of the micro-batch; the per-step latency
//!   is paid once per micro-batch because packed sharded sequences ride the same ring steps.
//!   `B` is the intra-node bandwidth while the CP group fits in one node, else the inter-node one.
//! - `T_overlap,r` is the compute that hides the communication: the attention of the sequences
//!   local on `r` ([`Overlap::LocalAttention`], the paper's Eq. 2 and the default), or that plus
//!   the rank's sharded attention ([`Overlap::AllAttention`], ring attention's own pipelining).
//! - `T_fixed = L·kernels_per_layer·kernel_launch + micro_batch_extra`: per-micro-batch launch
//!   overhead, what makes one-sequence micro-batches slow.
//!
//! Micro-batch time is the max over CP ranks, DP-rank time the sum over its micro-batches,
//! iteration time the max over DP ranks plus `iteration_fixed`. The evaluator that applies this
//! to a plan is [`eval`](crate::eval). Every default and its source is listed in
//! `docs/cost_model.md`.

use core::fmt;

use crate::budget::Budget;
use crate::config::{Config, FlopsFormula, ModelShape, ShardPadding};
use crate::flops::FlopsModel;

/// Points in an [`AttentionTable`].
pub const ATTN_POINTS: usize = 6;

/// Attention-kernel throughput (FLOP/s) versus query length, forward and backward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionTable {
    /// Query lengths (tokens), strictly increasing.
    pub seqlen: [u32; ATTN_POINTS],
    /// Forward throughput at each length, FLOP/s (causal FLOPs).
    pub fwd: [f64; ATTN_POINTS],
    /// Backward throughput at each length, FLOP/s (backward FLOPs = `bwd_ratio` x forward).
    pub bwd: [f64; ATTN_POINTS],
}

const T: f64 = 1e12;

impl AttentionTable {
    /// FlashAttention-3 on H100 SXM5, head dim 128, causal forward and backward
    /// (`reference/cost_model.md` section 7.2, third-party transcription of the FA3 paper's
    /// figures).
    pub const FA3_H100_HDIM128: AttentionTable = AttentionTable {
        seqlen: [512, 1024, 2048, 4096, 8192, 16384],
        fwd: [292. * T, 423. * T, 521. * T, 579. * T, 602. * T, 616. * T],
        bwd: [316. * T, 424. * T, 501. * T, 542. * T, 559. * T, 561. * T],
    };

    /// Head dim 64 (Qwen2.5-0.5B): the head-dim-128 table times a ratio that moves
    /// log-linearly from 197/292 at 512 tokens to 473/616 at 16K, the two FA3 head-dim-64
    /// causal-forward values the reference gives; the backward gets the same ratio (no
    /// head-dim-64 backward numbers are published there).
    pub const FA3_H100_HDIM64: AttentionTable =
        Self::FA3_H100_HDIM128.ratio_ramp(197.0 / 292.0, 473.0 / 616.0);

    /// This table times a ratio that moves linearly in `log2(seqlen)` (the points are powers
    /// of two apart) from `first` at the first point to `last` at the last.
    pub const fn ratio_ramp(&self, first: f64, last: f64) -> AttentionTable {
        let mut out = *self;
        let mut i = 0;
        while i < ATTN_POINTS {
            let r = first + (last - first) * (i as f64) / ((ATTN_POINTS - 1) as f64);
            out.fwd[i] = self.fwd[i] * r;
            out.bwd[i] = self.bwd[i] * r;
            i += 1;
        }
        out
    }

    /// Every throughput divided by `k` (attention `k` times slower).
    pub fn slowed(&self, k: f64) -> AttentionTable {
        let mut out = *self;
        for v in out.fwd.iter_mut().chain(out.bwd.iter_mut()) {
            *v /= k;
        }
        out
    }

    /// Forward and backward throughput at `q` query tokens: linear interpolation in `log2 q`
    /// between the table's points, the end values outside them (below the first point the
    /// padding to tiles is the only extra penalty).
    pub fn throughput(&self, q: u32) -> (f64, f64) {
        let first = self.seqlen[0];
        let last = self.seqlen[ATTN_POINTS - 1];
        if q <= first {
            return (self.fwd[0], self.bwd[0]);
        }
        if q >= last {
            return (self.fwd[ATTN_POINTS - 1], self.bwd[ATTN_POINTS - 1]);
        }
        let mut i = 1;
        while i < ATTN_POINTS - 1 && self.seqlen[i] < q {
            i += 1;
        }
        let (x0, x1) = (
            libm::log2(f64::from(self.seqlen[i - 1])),
            libm::log2(f64::from(self.seqlen[i])),
        );
        let w = if x1 > x0 {
            (libm::log2(f64::from(q)) - x0) / (x1 - x0)
        } else {
            1.0
        };
        let lerp = |a: f64, b: f64| a + (b - a) * w;
        (
            lerp(self.fwd[i - 1], self.fwd[i]),
            lerp(self.bwd[i - 1], self.bwd[i]),
        )
    }
}

/// Which compute hides the CP communication of the sharded sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// The attention of the rank's local sequences only (the paper's Eq. 2,
    /// `max(T_comm, T_comp(local)) + T_comp(sharded)`).
    #[default]
    LocalAttention,
    /// Local attention plus the rank's share of sharded attention (ring attention also
    /// pipelines its own transfers behind its block computations).
    AllAttention,
}

impl Overlap {
    /// The option's stable name (`local-attention`, `all-attention`).
    pub fn name(self) -> &'static str {
        match self {
            Overlap::LocalAttention => "local-attention",
            Overlap::AllAttention => "all-attention",
        }
    }

    /// Parses a name given by [`Overlap::name`].
    pub fn from_name(name: &str) -> Option<Overlap> {
        match name {
            "local-attention" => Some(Overlap::LocalAttention),
            "all-attention" => Some(Overlap::AllAttention),
            _ => None,
        }
    }
}

/// Every coefficient of the time model: plain data, settable by the user. The presets
/// ([`CostModel::h100`], [`CostModel::h200`]) are documented, with sources, in
/// `docs/cost_model.md`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Dense BF16 peak of one GPU, FLOP/s.
    pub peak_flops: f64,
    /// Fraction of `peak_flops` that the GEMMs reach when compute-bound.
    pub gemm_efficiency: f64,
    /// HBM bandwidth, bytes/s (the GEMMs' memory-bound leg streams the weights).
    pub hbm_bandwidth: f64,
    /// Bytes per weight (2: BF16).
    pub weight_bytes: f64,
    /// Times the weights stream from HBM per micro-batch (3: forward, input gradient, weight
    /// gradient).
    pub weight_passes: f64,
    /// Attention-kernel throughput versus query length.
    pub attention: AttentionTable,
    /// Query tile the attention kernel pads to (tokens).
    pub attention_tile: u32,
    /// Backward attention FLOPs per forward FLOP (2.5: FlashAttention's five matmuls vs two).
    pub attention_bwd_ratio: f64,
    /// Bytes per K or V element (2: BF16).
    pub kv_element_bytes: f64,
    /// K/V ring passes per layer (3: forward K/V; backward K/V and dK/dV).
    pub comm_passes: f64,
    /// Latency of one ring step, seconds.
    pub ring_step_latency_s: f64,
    /// Per-GPU receive bandwidth while the CP group sits in one node, bytes/s.
    pub intra_node_bandwidth: f64,
    /// Per-GPU receive bandwidth once the CP group spans nodes, bytes/s.
    pub inter_node_bandwidth: f64,
    /// GPUs per node (decides which bandwidth a CP group gets).
    pub gpus_per_node: u32,
    /// Which compute hides the CP communication.
    pub overlap: Overlap,
    /// Kernels launched per layer per micro-batch, forward + backward.
    pub kernels_per_layer: f64,
    /// Launch (dispatch) cost of one kernel, seconds.
    pub kernel_launch_s: f64,
    /// Any other fixed cost per micro-batch, seconds.
    pub micro_batch_extra_s: f64,
    /// Fixed cost per iteration (optimizer step, gradient synchronisation), seconds.
    pub iteration_fixed_s: f64,
}

/// H100 SXM5 dense BF16 peak (FLOP/s).
pub const H100_PEAK_FLOPS: f64 = 989.4e12;
/// H100 SXM5 HBM3 bandwidth (bytes/s).
pub const H100_HBM_BANDWIDTH: f64 = 3.35e12;
/// H200 HBM3e bandwidth (bytes/s).
pub const H200_HBM_BANDWIDTH: f64 = 4.8e12;

/// Skrull Table 5, `all_gather`: (size in MiB, latency in microseconds), the paper's measured
/// collectives on its 32 x H100 testbed. The defaults' ring latency and bandwidth are the
/// [`fit_collective`] of these points (see the tests).
pub const SKRULL_TABLE5_ALL_GATHER: [(f64, f64); 10] = [
    (2., 53.29),
    (4., 72.52),
    (8., 97.86),
    (16., 199.3),
    (32., 286.2),
    (64., 488.6),
    (128., 910.6),
    (256., 1758.4),
    (512., 3416.4),
    (1024., 6467.9),
];

/// Group size assumed for Table 5 (one 8-GPU node; the paper does not say).
pub const TABLE5_GROUP: u32 = 8;

/// Relative-error least-squares fit of [`SKRULL_TABLE5_ALL_GATHER`]: latency of one
/// collective, seconds (rounded; the tests recompute it).
pub const TABLE5_COLLECTIVE_LATENCY_S: f64 = 43.91e-6;
/// The same fit's algorithm bandwidth (collective size / time), bytes/s.
pub const TABLE5_ALGORITHM_BANDWIDTH: f64 = 152.9e9;

impl CostModel {
    /// H100 SXM5 with the FlashAttention-3 table for head dim 128 (`shape` only chooses the
    /// table: head dim 64 for [`ModelShape::QWEN2_5_0_5B`], 128 otherwise).
    pub fn h100(shape: &ModelShape) -> CostModel {
        let attention = if *shape == ModelShape::QWEN2_5_0_5B {
            AttentionTable::FA3_H100_HDIM64
        } else {
            AttentionTable::FA3_H100_HDIM128
        };
        CostModel {
            attention,
            ..Self::H100_QWEN2_5_7B
        }
    }

    /// H200: the H100 model with 4.8 TB/s HBM (same compute, NVLink and kernels).
    pub fn h200(shape: &ModelShape) -> CostModel {
        CostModel {
            hbm_bandwidth: H200_HBM_BANDWIDTH,
            ..Self::h100(shape)
        }
    }

    /// Looks a preset up by GPU name (`h100`, `h200`).
    pub fn preset(gpu: &str, shape: &ModelShape) -> Option<CostModel> {
        match gpu {
            "h100" => Some(Self::h100(shape)),
            "h200" => Some(Self::h200(shape)),
            _ => None,
        }
    }

    /// The H100 preset for Qwen2.5-7B (head dim 128).
    pub const H100_QWEN2_5_7B: CostModel = CostModel {
        peak_flops: H100_PEAK_FLOPS,
        gemm_efficiency: 0.41,
        hbm_bandwidth: H100_HBM_BANDWIDTH,
        weight_bytes: 2.0,
        weight_passes: 3.0,
        attention: AttentionTable::FA3_H100_HDIM128,
        attention_tile: 128,
        attention_bwd_ratio: 2.5,
        kv_element_bytes: 2.0,
        comm_passes: 3.0,
        ring_step_latency_s: TABLE5_COLLECTIVE_LATENCY_S / (TABLE5_GROUP - 1) as f64,
        intra_node_bandwidth: TABLE5_ALGORITHM_BANDWIDTH * (TABLE5_GROUP - 1) as f64
            / TABLE5_GROUP as f64,
        inter_node_bandwidth: 45e9,
        gpus_per_node: 8,
        overlap: Overlap::LocalAttention,
        kernels_per_layer: 120.0,
        kernel_launch_s: 5e-6,
        micro_batch_extra_s: 0.0,
        iteration_fixed_s: 0.0,
    };

    /// The H100 preset for Qwen2.5-0.5B (head dim 64).
    pub const H100_QWEN2_5_0_5B: CostModel = CostModel {
        attention: AttentionTable::FA3_H100_HDIM64,
        ..Self::H100_QWEN2_5_7B
    };

    /// Checks that every coefficient is finite and in range (rates positive, costs not
    /// negative, the attention table increasing in length).
    ///
    /// # Errors
    /// [`InvalidCost`] naming the first bad field.
    pub fn validate(&self) -> Result<(), InvalidCost> {
        let positive = [
            ("peak_flops", self.peak_flops),
            ("gemm_efficiency", self.gemm_efficiency),
            ("hbm_bandwidth", self.hbm_bandwidth),
            ("intra_node_bandwidth", self.intra_node_bandwidth),
            ("inter_node_bandwidth", self.inter_node_bandwidth),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(InvalidCost { field });
            }
        }
        let non_negative = [
            ("weight_bytes", self.weight_bytes),
            ("weight_passes", self.weight_passes),
            ("attention_bwd_ratio", self.attention_bwd_ratio),
            ("kv_element_bytes", self.kv_element_bytes),
            ("comm_passes", self.comm_passes),
            ("ring_step_latency_s", self.ring_step_latency_s),
            ("kernels_per_layer", self.kernels_per_layer),
            ("kernel_launch_s", self.kernel_launch_s),
            ("micro_batch_extra_s", self.micro_batch_extra_s),
            ("iteration_fixed_s", self.iteration_fixed_s),
        ];
        for (field, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(InvalidCost { field });
            }
        }
        if self.gemm_efficiency > 1.0 {
            return Err(InvalidCost {
                field: "gemm_efficiency",
            });
        }
        if self.attention_tile == 0 {
            return Err(InvalidCost {
                field: "attention_tile",
            });
        }
        if self.gpus_per_node == 0 {
            return Err(InvalidCost {
                field: "gpus_per_node",
            });
        }
        let a = &self.attention;
        for i in 0..ATTN_POINTS {
            if !(a.fwd[i].is_finite() && a.fwd[i] > 0.0 && a.bwd[i].is_finite() && a.bwd[i] > 0.0) {
                return Err(InvalidCost { field: "attention" });
            }
            if a.seqlen[i] == 0 || (i > 0 && a.seqlen[i] <= a.seqlen[i - 1]) {
                return Err(InvalidCost {
                    field: "attention.seqlen",
                });
            }
        }
        Ok(())
    }
}

/// A [`CostModel`] field out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidCost {
    /// The field's name.
    pub field: &'static str,
}

impl fmt::Display for InvalidCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cost model field {} is out of range", self.field)
    }
}

impl core::error::Error for InvalidCost {}

/// What one CP rank does in one micro-batch, as [`TimeModel::rank`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RankLoad {
    /// Tokens of the sequences held whole on this rank.
    pub local_tokens: u64,
    /// Attention time of those sequences, seconds.
    pub local_attention: f64,
    /// Tokens of this rank's shards of the sharded sequences.
    pub sharded_tokens: u64,
    /// Attention time of those shards, seconds.
    pub sharded_attention: f64,
    /// CP communication of the micro-batch, seconds.
    pub comm: f64,
}

/// The time of one CP rank in one micro-batch, split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RankTime {
    /// Total, seconds.
    pub total: f64,
    /// GEMM time over all the rank's tokens.
    pub gemm: f64,
    /// Communication not hidden behind compute.
    pub exposed_comm: f64,
    /// The fixed per-micro-batch cost.
    pub fixed: f64,
}

/// A [`CostModel`] bound to a model shape and CP layout, with the per-shape constants
/// precomputed. Cheap to build; build one per configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeModel {
    /// The coefficients.
    pub cost: CostModel,
    cp: u32,
    budget: Budget,
    layers: f64,
    gemm_flops_per_token: f64,
    gemm_rate: f64,
    weight_stream_s: f64,
    attn_flops_coef: f64,
    kv_bytes_per_token_layer: f64,
    comm_bandwidth: f64,
    fixed_s: f64,
}

/// Weight count of the GEMMs (Q, K, V, O, FFN per layer; the LM head once).
pub fn gemm_weights(shape: &ModelShape) -> f64 {
    let h = f64::from(shape.hidden);
    let kv = f64::from(shape.kv_hidden);
    let f = f64::from(shape.ffn);
    let mats = if shape.swiglu { 3.0 } else { 2.0 };
    f64::from(shape.layers) * (2.0 * h * h + 2.0 * h * kv + mats * h * f)
        + h * f64::from(shape.vocab)
}

impl TimeModel {
    /// Binds `cost` to `cfg`'s model shape, CP size and shard padding (the FLOPs formula in
    /// `cfg` only steers decisions; time always uses Megatron's hardware count).
    pub fn new(cost: &CostModel, cfg: &Config) -> TimeModel {
        Self::with_budget(cost, &cfg.model, cfg.budget())
    }

    /// Binds `cost` to a model shape and CP layout (no pad multiple).
    pub fn for_shape(cost: &CostModel, shape: &ModelShape, cp: u32, padding: ShardPadding) -> Self {
        Self::with_budget(cost, shape, Budget::with(u32::MAX, cp, padding, 1, false))
    }

    /// Binds `cost` to a model shape and the CP size and padding rules of `budget`.
    pub fn with_budget(cost: &CostModel, shape: &ModelShape, budget: Budget) -> Self {
        let cp = budget.cp();
        let megatron = FlopsModel::new(shape, FlopsFormula::Megatron);
        let layers = f64::from(shape.layers);
        let comm_bandwidth = if cp <= cost.gpus_per_node {
            cost.intra_node_bandwidth
        } else {
            cost.inter_node_bandwidth
        };
        TimeModel {
            cost: *cost,
            cp,
            budget,
            layers,
            gemm_flops_per_token: megatron.linear as f64,
            gemm_rate: cost.peak_flops * cost.gemm_efficiency,
            weight_stream_s: cost.weight_passes * cost.weight_bytes * gemm_weights(shape)
                / cost.hbm_bandwidth,
            attn_flops_coef: 2.0 * f64::from(shape.hidden) * layers,
            kv_bytes_per_token_layer: 2.0 * f64::from(shape.kv_hidden) * cost.kv_element_bytes,
            comm_bandwidth,
            fixed_s: layers * cost.kernels_per_layer * cost.kernel_launch_s
                + cost.micro_batch_extra_s,
        }
    }

    /// The CP size this model is bound to.
    pub fn cp(&self) -> u32 {
        self.cp
    }

    /// Tokens one GPU holds of a sequence sharded over the CP group.
    pub fn shard_tokens(&self, len: u32) -> u32 {
        self.budget.share(len)
    }

    /// Tokens a local sequence occupies on its GPU (padding included).
    pub fn local_tokens(&self, len: u32) -> u32 {
        self.budget.local(len)
    }

    /// GEMM time of `tokens` tokens on one GPU in one micro-batch (roofline; 0 for 0 tokens).
    pub fn gemm(&self, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        self.gemm_compute(tokens).max(self.weight_stream_s)
    }

    /// The compute-bound leg of [`TimeModel::gemm`] alone (a lower bound on it).
    pub fn gemm_compute(&self, tokens: u64) -> f64 {
        self.gemm_flops_per_token * tokens as f64 / self.gemm_rate
    }

    /// The memory-bound leg: streaming the weights `weight_passes` times.
    pub fn weight_stream(&self) -> f64 {
        self.weight_stream_s
    }

    /// Forward FLOPs of causal attention of `queries` (padded to tiles) against a sequence of
    /// `keys` tokens, all layers.
    pub fn attention_flops_fwd(&self, queries: u32, keys: u32) -> f64 {
        let tile = u64::from(self.cost.attention_tile.max(1));
        let q_pad = u64::from(queries).div_ceil(tile) * tile;
        self.attn_flops_coef * q_pad as f64 * f64::from(keys)
    }

    /// Forward + backward attention time of `queries` query tokens of a sequence of `keys`
    /// tokens on one GPU.
    pub fn attention(&self, queries: u32, keys: u32) -> f64 {
        if queries == 0 {
            return 0.0;
        }
        let tile = u64::from(self.cost.attention_tile.max(1));
        let q_pad = (u64::from(queries).div_ceil(tile) * tile).min(u64::from(u32::MAX)) as u32;
        let flops = self.attention_flops_fwd(queries, keys);
        let (fwd, bwd) = self.cost.attention.throughput(q_pad);
        flops / fwd + self.cost.attention_bwd_ratio * flops / bwd
    }

    /// Attention time of a whole sequence on one GPU.
    pub fn attention_whole(&self, len: u32) -> f64 {
        self.attention(len, len)
    }

    /// Attention time of one GPU's shard of a sequence sharded over the CP group.
    pub fn attention_shard(&self, len: u32) -> f64 {
        self.attention(self.shard_tokens(len), len)
    }

    /// CP communication of a micro-batch whose sharded sequences hold `sharded_len` tokens in
    /// all (0 when there are none or CP is 1).
    pub fn comm(&self, sharded_len: u64) -> f64 {
        if sharded_len == 0 || self.cp <= 1 {
            return 0.0;
        }
        let n = f64::from(self.cp);
        let bytes = (n - 1.0) / n * sharded_len as f64 * self.kv_bytes_per_token_layer;
        self.layers
            * self.cost.comm_passes
            * ((n - 1.0) * self.cost.ring_step_latency_s + bytes / self.comm_bandwidth)
    }

    /// The fixed cost of one micro-batch.
    pub fn fixed(&self) -> f64 {
        self.fixed_s
    }

    /// The time of one CP rank in one micro-batch.
    pub fn rank(&self, load: &RankLoad) -> RankTime {
        let gemm = self.gemm(load.local_tokens + load.sharded_tokens);
        let (window, after) = match self.cost.overlap {
            Overlap::LocalAttention => (load.local_attention, load.sharded_attention),
            Overlap::AllAttention => (load.local_attention + load.sharded_attention, 0.0),
        };
        let overlapped = load.comm.max(window);
        RankTime {
            total: overlapped + gemm + after + self.fixed_s,
            gemm,
            exposed_comm: (load.comm - window).max(0.0),
            fixed: self.fixed_s,
        }
    }

    /// Time of a micro-batch that holds only this sequence, whole on one GPU.
    pub fn alone_whole(&self, len: u32) -> f64 {
        self.rank(&RankLoad {
            local_tokens: u64::from(self.local_tokens(len)),
            local_attention: self.attention_whole(len),
            ..RankLoad::default()
        })
        .total
    }

    /// Time of a micro-batch that holds only this sequence, sharded over the CP group.
    pub fn alone_sharded(&self, len: u32) -> f64 {
        self.rank(&RankLoad {
            sharded_tokens: u64::from(self.shard_tokens(len)),
            sharded_attention: self.attention_shard(len),
            comm: self.comm(u64::from(len)),
            ..RankLoad::default()
        })
        .total
    }
}

// ---------------------------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------------------------

/// Why a fit failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FitError {
    /// Fewer samples than coefficients.
    TooFewSamples {
        /// Samples needed.
        needed: usize,
        /// Samples given.
        got: usize,
    },
    /// A sample is not finite or not positive.
    InvalidSample {
        /// Its index.
        index: usize,
    },
    /// The normal equations are singular (for example every sample has the same length).
    Singular,
    /// The best fit is not physical (a rate or scale not positive).
    NonPhysical {
        /// The coefficient.
        what: &'static str,
    },
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FitError::TooFewSamples { needed, got } => {
                write!(f, "the fit needs at least {needed} samples, got {got}")
            }
            FitError::InvalidSample { index } => {
                write!(f, "sample {index} is not a positive, finite measurement")
            }
            FitError::Singular => write!(
                f,
                "the samples do not determine the coefficients (use several different sizes)"
            ),
            FitError::NonPhysical { what } => {
                write!(f, "the best fit gives a non-positive {what}")
            }
        }
    }
}

impl core::error::Error for FitError {}

/// Weighted linear least squares with `P` coefficients: minimises `Σ w·(x·c − y)²` over the
/// rows `(x, y, w)` by solving the `P x P` normal equations with partially pivoted Gaussian
/// elimination on the stack. `None` when they are singular.
pub fn least_squares<const P: usize>(
    rows: impl IntoIterator<Item = ([f64; P], f64, f64)>,
) -> Option<[f64; P]> {
    let mut a = [[0.0f64; P]; P];
    let mut b = [0.0f64; P];
    for (x, y, w) in rows {
        for i in 0..P {
            for j in 0..P {
                a[i][j] += w * x[i] * x[j];
            }
            b[i] += w * x[i] * y;
        }
    }
    // Scale for the singularity test: the largest diagonal entry.
    let scale = (0..P).map(|i| libm::fabs(a[i][i])).fold(0.0, f64::max);
    if scale == 0.0 {
        return None;
    }
    for col in 0..P {
        let mut pivot = col;
        for row in col + 1..P {
            if libm::fabs(a[row][col]) > libm::fabs(a[pivot][col]) {
                pivot = row;
            }
        }
        if libm::fabs(a[pivot][col]) <= 1e-12 * scale {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..P {
            let k = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row][col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= k * p;
            }
            b[row] -= k * b[col];
        }
    }
    let mut c = [0.0f64; P];
    for i in (0..P).rev() {
        let mut s = b[i];
        for j in i + 1..P {
            s -= a[i][j] * c[j];
        }
        c[i] = s / a[i][i];
    }
    c.iter().all(|v| v.is_finite()).then_some(c)
}

/// The result of [`fit_collective`]: `t = latency + size / algorithm_bandwidth`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveFit {
    /// Latency of one collective, seconds.
    pub latency_s: f64,
    /// Collective size over time for large messages, bytes/s.
    pub algorithm_bandwidth: f64,
    /// Root-mean-square relative error of the fit over the samples.
    pub rms_relative_error: f64,
}

impl CollectiveFit {
    /// Writes the fit into `cost` as ring parameters, for collectives measured on a group of
    /// `group` GPUs in one node: a ring collective takes `group − 1` steps, and each GPU
    /// receives `(group − 1)/group` of the collective's size.
    pub fn apply(&self, cost: &mut CostModel, group: u32) {
        let g = f64::from(group.max(2));
        cost.ring_step_latency_s = self.latency_s / (g - 1.0);
        cost.intra_node_bandwidth = self.algorithm_bandwidth * (g - 1.0) / g;
    }
}

fn check_samples(samples: impl Iterator<Item = (f64, f64)>) -> Result<usize, FitError> {
    let mut n = 0;
    for (index, (x, t)) in samples.enumerate() {
        if !(x.is_finite() && x > 0.0 && t.is_finite() && t > 0.0) {
            return Err(FitError::InvalidSample { index });
        }
        n += 1;
    }
    Ok(n)
}

fn rms_relative(residuals: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut s, mut n) = (0.0, 0usize);
    for (pred, meas) in residuals {
        let r = (pred - meas) / meas;
        s += r * r;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        libm::sqrt(s / n as f64)
    }
}

/// Fits `t = latency + bytes / bandwidth` to measured collectives `(bytes, seconds)` by
/// least squares on relative error (weights `1/t²`, so small messages, where the latency
/// lives, count as much as large ones).
///
/// # Errors
/// [`FitError`] for fewer than two samples, a bad sample, sizes that are all equal, or a
/// non-positive latency or bandwidth.
pub fn fit_collective(samples: &[(f64, f64)]) -> Result<CollectiveFit, FitError> {
    let n = check_samples(samples.iter().copied())?;
    if n < 2 {
        return Err(FitError::TooFewSamples { needed: 2, got: n });
    }
    let c = least_squares(
        samples
            .iter()
            .map(|&(bytes, t)| ([1.0, bytes], t, 1.0 / (t * t))),
    )
    .ok_or(FitError::Singular)?;
    if c[1] <= 0.0 {
        return Err(FitError::NonPhysical { what: "bandwidth" });
    }
    if c[0] < 0.0 {
        return Err(FitError::NonPhysical { what: "latency" });
    }
    let rms = rms_relative(samples.iter().map(|&(b, t)| (c[0] + c[1] * b, t)));
    Ok(CollectiveFit {
        latency_s: c[0],
        algorithm_bandwidth: 1.0 / c[1],
        rms_relative_error: rms,
    })
}

/// The result of [`fit_compute`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeFit {
    /// Fitted fixed cost per micro-batch, seconds.
    pub fixed_s: f64,
    /// Measured GEMM time over the prior model's (the new model's GEMMs are this much slower).
    pub gemm_scale: f64,
    /// Measured attention time over the prior model's.
    pub attention_scale: f64,
    /// Root-mean-square relative error of the fit over the samples.
    pub rms_relative_error: f64,
}

/// Fits the compute coefficients to measured `(length, seconds)` samples: each the time of
/// one forward + backward of one sequence of `length` tokens, whole on one GPU (the paper's
/// offline profiling). The model keeps its shape (roofline, tile padding, attention curve)
/// and fits three levels by least squares on relative error:
///
/// ```text
/// t(S) = fixed + gemm_scale·T_gemm(S) + attention_scale·T_attn(S, S)
/// ```
///
/// and returns `prior` with the GEMM rates divided by `gemm_scale`, the attention table
/// divided by `attention_scale`, and the fixed cost set to `fixed` (as kernel launch time;
/// `micro_batch_extra_s` becomes 0). A negative `fixed` is refitted as 0.
///
/// # Errors
/// [`FitError`] for fewer than three samples, a bad sample, too few distinct lengths, or a
/// non-positive scale.
pub fn fit_compute(
    prior: &CostModel,
    shape: &ModelShape,
    samples: &[(u32, f64)],
) -> Result<(CostModel, ComputeFit), FitError> {
    let n = check_samples(samples.iter().map(|&(s, t)| (f64::from(s), t)))?;
    if n < 3 {
        return Err(FitError::TooFewSamples { needed: 3, got: n });
    }
    let tm = TimeModel::for_shape(prior, shape, 1, ShardPadding::None);
    let terms = |s: u32| (tm.gemm(u64::from(s)), tm.attention_whole(s));
    let full = least_squares(samples.iter().map(|&(s, t)| {
        let (g, a) = terms(s);
        ([1.0, g, a], t, 1.0 / (t * t))
    }))
    .ok_or(FitError::Singular)?;
    let (fixed, gs, as_) = if full[0] >= 0.0 {
        (full[0], full[1], full[2])
    } else {
        let c = least_squares(samples.iter().map(|&(s, t)| {
            let (g, a) = terms(s);
            ([g, a], t, 1.0 / (t * t))
        }))
        .ok_or(FitError::Singular)?;
        (0.0, c[0], c[1])
    };
    if gs.is_nan() || gs <= 0.0 {
        return Err(FitError::NonPhysical { what: "GEMM scale" });
    }
    if as_.is_nan() || as_ <= 0.0 {
        return Err(FitError::NonPhysical {
            what: "attention scale",
        });
    }
    let rms = rms_relative(samples.iter().map(|&(s, t)| {
        let (g, a) = terms(s);
        (fixed + gs * g + as_ * a, t)
    }));
    let mut out = *prior;
    out.gemm_efficiency = prior.gemm_efficiency / gs;
    out.hbm_bandwidth = prior.hbm_bandwidth / gs;
    out.attention = prior.attention.slowed(as_);
    out.micro_batch_extra_s = 0.0;
    let launches = f64::from(shape.layers) * prior.kernels_per_layer;
    if launches > 0.0 {
        out.kernel_launch_s = fixed / launches;
    } else {
        out.micro_batch_extra_s = fixed;
    }
    Ok((
        out,
        ComputeFit {
            fixed_s: fixed,
            gemm_scale: gs,
            attention_scale: as_,
            rms_relative_error: rms,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        libm::fabs(a - b) <= rel * libm::fabs(b).max(1e-300)
    }

    fn tm(shape: ModelShape, cp: u32) -> TimeModel {
        TimeModel::for_shape(&CostModel::h100(&shape), &shape, cp, ShardPadding::None)
    }

    #[test]
    fn presets_validate_and_pick_the_head_dim_table() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            assert_eq!(CostModel::h100(&shape).validate(), Ok(()));
            assert_eq!(CostModel::h200(&shape).validate(), Ok(()));
        }
        assert_eq!(
            CostModel::h100(&ModelShape::QWEN2_5_0_5B),
            CostModel::H100_QWEN2_5_0_5B
        );
        assert_eq!(
            CostModel::preset("h200", &ModelShape::QWEN2_5_7B).map(|c| c.hbm_bandwidth),
            Some(4.8e12)
        );
        assert_eq!(CostModel::preset("a100", &ModelShape::QWEN2_5_7B), None);
        let mut bad = CostModel::H100_QWEN2_5_7B;
        bad.attention.seqlen[3] = 1;
        assert_eq!(
            bad.validate(),
            Err(InvalidCost {
                field: "attention.seqlen"
            })
        );
        bad = CostModel::H100_QWEN2_5_7B;
        bad.kernel_launch_s = f64::NAN;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn head_dim_64_table_hits_both_reference_endpoints() {
        let t = AttentionTable::FA3_H100_HDIM64;
        assert!(close(t.fwd[0], 197e12, 1e-12));
        assert!(close(t.fwd[5], 473e12, 1e-12));
        // The middle point: ratio halfway in log2 between the two endpoint ratios... at i = 2
        // it is 2/5 of the way.
        let r = 197.0 / 292.0 + (473.0 / 616.0 - 197.0 / 292.0) * 0.4;
        assert!(close(t.fwd[2], 521e12 * r, 1e-12));
        assert!(close(t.bwd[2], 501e12 * r, 1e-12));
    }

    #[test]
    fn attention_throughput_interpolates_in_log_length_and_clamps() {
        let t = AttentionTable::FA3_H100_HDIM128;
        assert_eq!(t.throughput(128), (292e12, 316e12));
        assert_eq!(t.throughput(512), (292e12, 316e12));
        assert_eq!(t.throughput(1 << 20), (616e12, 561e12));
        // 3072 = 2^11.585: 58.5 % of the way from 2K to 4K.
        let (f, b) = t.throughput(3072);
        let w = libm::log2(1.5);
        assert!(close(f, 521e12 + (579e12 - 521e12) * w, 1e-12));
        assert!(close(b, 501e12 + (542e12 - 501e12) * w, 1e-12));
        assert!(close(t.throughput(1024).0, 423e12, 1e-12));
    }

    #[test]
    fn gemm_is_a_roofline_by_hand() {
        let m = tm(ModelShape::QWEN2_5_7B, 8);
        let flops = FlopsModel::new(&ModelShape::QWEN2_5_7B, FlopsFormula::Megatron).linear as f64;
        let rate = 989.4e12 * 0.41;
        // 7B: 28 (2h² + 2h·h_kv + 3hf) + hV weights, 2 bytes, 3 passes, 3.35 TB/s.
        let (h, kv, f) = (3584.0, 512.0, 18944.0);
        let w = 28.0 * (2.0 * h * h + 2.0 * h * kv + 3.0 * h * f) + h * 152_064.0;
        assert!(close(gemm_weights(&ModelShape::QWEN2_5_7B), w, 1e-15));
        let stream = 3.0 * 2.0 * w / 3.35e12;
        assert!(close(m.weight_stream(), stream, 1e-12));
        assert_eq!(m.gemm(0), 0.0);
        assert_eq!(m.gemm(1), stream);
        assert!(close(m.gemm(10_000), flops * 10_000.0 / rate, 1e-12));
        // Crossover near stream·rate/flops ≈ 123 tokens.
        let cross = stream * rate / flops;
        assert!((100.0..150.0).contains(&cross), "{cross}");
    }

    #[test]
    fn attention_time_by_hand_with_tile_padding() {
        let m = tm(ModelShape::QWEN2_5_7B, 8);
        // Whole 4096: 2·3584·28 · 4096 · 4096 forward FLOPs at 579 fwd, ×2.5 at 542 bwd.
        let fl = 2.0 * 3584.0 * 28.0 * 4096.0 * 4096.0;
        let want = fl / 579e12 + 2.5 * fl / 542e12;
        assert!(close(m.attention_whole(4096), want, 1e-12));
        // 100 queries pad to 128 and run at the 512-token throughput.
        let fl = 2.0 * 3584.0 * 28.0 * 128.0 * 100.0;
        assert!(close(
            m.attention_whole(100),
            fl / 292e12 + 2.5 * fl / 316e12,
            1e-12
        ));
        // Shard of 8000 over 8: 1000 queries pad to 1024, against 8000 keys.
        let fl = 2.0 * 3584.0 * 28.0 * 1024.0 * 8000.0;
        assert!(close(
            m.attention_shard(8000),
            fl / 423e12 + 2.5 * fl / 424e12,
            1e-12
        ));
        assert_eq!(m.attention(0, 10), 0.0);
    }

    #[test]
    fn comm_by_hand() {
        let m = tm(ModelShape::QWEN2_5_7B, 8);
        let c = CostModel::H100_QWEN2_5_7B;
        // 32K sharded over 8, 7B: 28 layers x 3 passes x (7 steps + 7/8 · 32768 · 2048 B / B).
        let want = 28.0
            * 3.0
            * (7.0 * c.ring_step_latency_s + 7.0 / 8.0 * 32768.0 * 2048.0 / c.intra_node_bandwidth);
        assert!(close(m.comm(32768), want, 1e-12));
        assert_eq!(m.comm(0), 0.0);
        assert_eq!(tm(ModelShape::QWEN2_5_7B, 1).comm(5000), 0.0);
        // Crossing a node switches to the inter-node bandwidth.
        let m16 = tm(ModelShape::QWEN2_5_7B, 16);
        let want = 28.0 * 3.0 * (15.0 * c.ring_step_latency_s + 15.0 / 16.0 * 1e6 * 2048.0 / 45e9);
        assert!(close(m16.comm(1_000_000), want, 1e-12));
        // The reference's worked example: 7B, 32K, c = 8: 58.7 MB forward per layer.
        let fwd_layer = 7.0 / 8.0 * 32768.0 * 2048.0;
        assert!(close(fwd_layer, 58.72e6, 1e-3));
    }

    #[test]
    fn rank_time_composes_the_terms() {
        let m = tm(ModelShape::QWEN2_5_0_5B, 8);
        let load = RankLoad {
            local_tokens: 3000,
            local_attention: 0.002,
            sharded_tokens: 1000,
            sharded_attention: 0.001,
            comm: 0.005,
        };
        let t = m.rank(&load);
        assert!(close(
            t.total,
            0.005 + m.gemm(4000) + 0.001 + m.fixed(),
            1e-12
        ));
        assert!(close(t.exposed_comm, 0.003, 1e-12));
        assert!(close(m.fixed(), 24.0 * 120.0 * 5e-6, 1e-12));
        let mut all = m;
        all.cost.overlap = Overlap::AllAttention;
        let t = all.rank(&load);
        assert!(close(t.total, 0.005 + m.gemm(4000) + m.fixed(), 1e-12));
        assert!(close(t.exposed_comm, 0.002, 1e-12));
    }

    #[test]
    fn a_longer_sequence_never_gets_cheaper() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            for cp in [1, 2, 8, 16] {
                let m = tm(shape, cp);
                let (mut w, mut s, mut a) = (0.0, 0.0, 0.0);
                let mut len = 1u32;
                while len < 600_000 {
                    let (w2, s2, a2) = (
                        m.alone_whole(len),
                        m.alone_sharded(len),
                        m.attention_whole(len),
                    );
                    assert!(w2 >= w && s2 >= s && a2 >= a, "{len} {cp}");
                    (w, s, a) = (w2, s2, a2);
                    len += 1 + len / 64;
                }
            }
        }
    }

    #[test]
    fn least_squares_recovers_an_exact_line_and_plane() {
        let c = least_squares((1..6).map(|x| {
            let x = f64::from(x);
            ([1.0, x], 3.0 + 2.0 * x, 1.0)
        }))
        .unwrap();
        assert!(close(c[0], 3.0, 1e-12) && close(c[1], 2.0, 1e-12));
        let pts: Vec<_> = (0..20)
            .map(|i| {
                let (x, y) = (f64::from(i % 5), f64::from(i / 5));
                ([1.0, x, y], 1.0 - 0.5 * x + 4.0 * y, 1.0)
            })
            .collect();
        let c = least_squares(pts).unwrap();
        assert!(close(c[0], 1.0, 1e-9) && close(c[1], -0.5, 1e-9) && close(c[2], 4.0, 1e-9));
        assert_eq!(least_squares([([1.0, 1.0], 2.0, 1.0); 4]), None);
        assert_eq!(least_squares::<2>([]), None);
    }

    #[test]
    fn defaults_are_the_fit_of_skrull_table5() {
        let samples: Vec<(f64, f64)> = SKRULL_TABLE5_ALL_GATHER
            .iter()
            .map(|&(mib, us)| (mib * 1_048_576.0, us * 1e-6))
            .collect();
        let fit = fit_collective(&samples).unwrap();
        std::println!("{fit:?}");
        assert!(close(fit.latency_s, TABLE5_COLLECTIVE_LATENCY_S, 2e-3));
        assert!(close(
            fit.algorithm_bandwidth,
            TABLE5_ALGORITHM_BANDWIDTH,
            2e-3
        ));
        let mut c = CostModel::H100_QWEN2_5_7B;
        fit.apply(&mut c, TABLE5_GROUP);
        assert!(close(
            c.ring_step_latency_s,
            CostModel::H100_QWEN2_5_7B.ring_step_latency_s,
            2e-3
        ));
        assert!(close(
            c.intra_node_bandwidth,
            CostModel::H100_QWEN2_5_7B.intra_node_bandwidth,
            2e-3
        ));
        assert!(fit_collective(&samples[..1]).is_err());
        assert_eq!(
            fit_collective(&[(1.0, 1.0), (-1.0, 2.0)]),
            Err(FitError::InvalidSample { index: 1 })
        );
    }

    #[test]
    fn fit_compute_recovers_a_known_model() {
        let shape = ModelShape::QWEN2_5_7B;
        let prior = CostModel::h100(&shape);
        // "Measured" from a model with 1.3x slower GEMMs, 0.8x attention and 40 ms fixed.
        let mut truth = prior;
        truth.gemm_efficiency /= 1.3;
        truth.hbm_bandwidth /= 1.3;
        truth.attention = truth.attention.slowed(0.8);
        truth.micro_batch_extra_s = 0.04 - 28.0 * 120.0 * 5e-6;
        let t = TimeModel::for_shape(&truth, &shape, 1, ShardPadding::None);
        let samples: Vec<(u32, f64)> = [64u32, 512, 1000, 2048, 4096, 8192, 16384, 32768]
            .iter()
            .map(|&s| (s, t.alone_whole(s)))
            .collect();
        let (fitted, fit) = fit_compute(&prior, &shape, &samples).unwrap();
        assert!(close(fit.gemm_scale, 1.3, 1e-6), "{fit:?}");
        assert!(close(fit.attention_scale, 0.8, 1e-6), "{fit:?}");
        assert!(close(fit.fixed_s, 0.04, 1e-6), "{fit:?}");
        assert!(fit.rms_relative_error < 1e-9);
        let f = TimeModel::for_shape(&fitted, &shape, 1, ShardPadding::None);
        for &(s, want) in &samples {
            assert!(close(f.alone_whole(s), want, 1e-6));
        }
        assert_eq!(
            fit_compute(&prior, &shape, &samples[..2]),
            Err(FitError::TooFewSamples { needed: 3, got: 2 })
        );
        assert_eq!(
            fit_compute(&prior, &shape, &[(100, 1.0), (100, 1.0), (100, 1.0)]),
            Err(FitError::Singular)
        );
    }
}
