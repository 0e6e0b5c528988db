//! The time model: how long a micro-batch takes on real hardware, for a [`CostModel`] bound to
//! a configuration ([`TimeModel`]).
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
//!   interpolated (in `log2 q`) in an [`AttentionTable`](crate::config::cost::AttentionTable);
//!   a whole sequence adds `local_sequence_s`, the kernel's cost per call where it is called
//!   per sequence.
//! - `T_comm = L·comm_passes·((g−1)·λ + (g−1)/g·ΣS_sharded·kv_bytes/B)` for a ring over `g`
//!   GPUs: ring attention's K/V traffic for every sharded sequence of the micro-batch; the
//!   per-step latency `λ` is paid once per micro-batch because packed sharded sequences ride the
//!   same ring steps. `λ` and `B` are the intra-node values while the ring's GPUs sit in one
//!   node, the inter-node ones once it crosses a node boundary ([`Ring`]).
//! - `T_overlap,r` is the compute that hides the communication: the attention of the sequences
//!   local on `r` ([`Overlap::LocalAttention`], the paper's Eq. 2 and the default), or that plus
//!   the rank's sharded attention ([`Overlap::AllAttention`], ring attention's own pipelining).
//! - `T_fixed = L·kernels_per_layer·kernel_launch + micro_batch_extra`: per-micro-batch launch
//!   overhead, what makes one-sequence micro-batches slow; plus `sharded_sequence_s` for each
//!   sharded sequence the rank holds a share of (the executor's work per sequence; the
//!   per-ring cost is the ring latency of `T_comm`).
//!
//! Micro-batch time is the max over CP ranks, DP-rank time the sum over its micro-batches,
//! iteration time the max over DP ranks plus `iteration_fixed`. The evaluator that applies this
//! to a plan is [`eval`](crate::model::eval). Every default and its source is listed in
//! `docs/cost_model.md`.

use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::cost::{ATTN_POINTS, CostModel, Overlap};
use crate::config::options::{FlopsFormula, ShardPadding};
use crate::config::shape::ModelShape;
use crate::model::flops::FlopsModel;

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
    /// Sharded sequences this rank holds a share of (over the whole CP group or a sub-group):
    /// each costs [`CostModel::sharded_sequence_s`] here.
    pub sharded_sequences: u32,
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
    /// The fixed costs: per micro-batch, and per sharded sequence held here.
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
    fixed_s: f64,
    /// `log2` of the attention table's point lengths.
    attn_logs: [f64; ATTN_POINTS],
}

/// A ring over a group of GPUs: how many there are, and whether they span nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ring {
    /// GPUs in the ring (`g`; 1: no communication).
    pub size: u32,
    /// Whether the ring crosses a node boundary.
    pub crosses_nodes: bool,
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
            fixed_s: layers * cost.kernels_per_layer * cost.kernel_launch_s
                + cost.micro_batch_extra_s,
            attn_logs: cost.attention.log2_points(),
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

    /// Tokens each of `g` GPUs holds of a sequence sharded over a group of `g` ranks
    /// ([`TimeModel::shard_tokens`] for `g = N`).
    pub fn shard_tokens_in(&self, len: u32, g: u32) -> u32 {
        if g == self.cp {
            self.budget.share(len)
        } else {
            self.budget.for_group(g).share(len)
        }
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

    /// Seconds of causal attention, forward + backward, per (padded query x key) at padded
    /// query length `q_pad`: the FLOPs of one such pair over the table's throughput there.
    pub fn attention_unit(&self, q_pad: u32) -> f64 {
        let (fwd, bwd) = self
            .cost
            .attention
            .throughput_logged(q_pad, &self.attn_logs);
        let coef = self.attn_flops_coef;
        coef / fwd + self.cost.attention_bwd_ratio * coef / bwd
    }

    /// Forward + backward attention time of `queries` query tokens of a sequence of `keys`
    /// tokens on one GPU: [`TimeModel::attention_unit`] times the padded queries and the keys.
    pub fn attention(&self, queries: u32, keys: u32) -> f64 {
        if queries == 0 {
            return 0.0;
        }
        let tile = u64::from(self.cost.attention_tile.max(1));
        let q_pad = (u64::from(queries).div_ceil(tile) * tile).min(u64::from(u32::MAX)) as u32;
        self.attention_unit(q_pad) * f64::from(q_pad) * f64::from(keys)
    }

    /// Forward-only attention time of `queries` query tokens against `keys` keys (what
    /// recomputing a chunk's attention costs).
    pub fn attention_fwd(&self, queries: u32, keys: u32) -> f64 {
        if queries == 0 {
            return 0.0;
        }
        let tile = u64::from(self.cost.attention_tile.max(1));
        let q_pad = (u64::from(queries).div_ceil(tile) * tile).min(u64::from(u32::MAX)) as u32;
        let (fwd, _) = self
            .cost
            .attention
            .throughput_logged(q_pad, &self.attn_logs);
        self.attn_flops_coef * f64::from(q_pad) * f64::from(keys) / fwd
    }

    /// The kernel-launch part of [`TimeModel::fixed`]: what one more forward and backward
    /// pass over the layers costs in launches (a chunk pass pays it; the per-micro-batch
    /// extra is paid once).
    pub fn pass_fixed(&self) -> f64 {
        self.layers * self.cost.kernels_per_layer * self.cost.kernel_launch_s
    }

    /// Attention time of a whole sequence on one GPU: its kernel time plus the cost per
    /// sequence of calling it ([`CostModel::local_sequence_s`]).
    pub fn attention_whole(&self, len: u32) -> f64 {
        self.attention(len, len) + self.cost.local_sequence_s
    }

    /// Attention time of one GPU's shard of a sequence sharded over the CP group.
    pub fn attention_shard(&self, len: u32) -> f64 {
        self.attention(self.shard_tokens(len), len)
    }

    /// Attention time of one GPU's shard of a sequence sharded over a group of `g` ranks.
    pub fn attention_shard_in(&self, len: u32, g: u32) -> f64 {
        self.attention(self.shard_tokens_in(len, g), len)
    }

    /// The ring of `size` CP ranks from CP rank `first` of DP rank `dp_rank`: GPUs
    /// `dp_rank·N + first ..`, numbered node by node.
    pub fn ring(&self, dp_rank: u32, first: u32, size: u32) -> Ring {
        let gpn = u64::from(self.cost.gpus_per_node.max(1));
        let start = u64::from(dp_rank) * u64::from(self.cp) + u64::from(first);
        let last = start + u64::from(size.max(1)) - 1;
        Ring {
            size,
            crosses_nodes: start / gpn != last / gpn,
        }
    }

    /// The ring of DP rank `dp_rank`'s whole CP group.
    pub fn group_ring(&self, dp_rank: u32) -> Ring {
        self.ring(dp_rank, 0, self.cp)
    }

    /// Latency of one step and per-GPU bandwidth of `ring`.
    fn link(&self, ring: Ring) -> (f64, f64) {
        if ring.crosses_nodes {
            (
                self.cost.inter_node_ring_step_latency_s,
                self.cost.inter_node_bandwidth,
            )
        } else {
            (
                self.cost.ring_step_latency_s,
                self.cost.intra_node_bandwidth,
            )
        }
    }

    /// The latency part of [`TimeModel::comm`]: every ring step of every layer, once per
    /// micro-batch (0 for a ring of one GPU).
    pub fn comm_latency(&self, ring: Ring) -> f64 {
        if ring.size <= 1 {
            return 0.0;
        }
        let (step, _) = self.link(ring);
        self.layers * self.cost.comm_passes * f64::from(ring.size - 1) * step
    }

    /// The bandwidth part of [`TimeModel::comm`] per sharded token, seconds.
    pub fn comm_per_token(&self, ring: Ring) -> f64 {
        if ring.size <= 1 {
            return 0.0;
        }
        let (_, bandwidth) = self.link(ring);
        let g = f64::from(ring.size);
        self.layers * self.cost.comm_passes * (g - 1.0) / g * self.kv_bytes_per_token_layer
            / bandwidth
    }

    /// CP communication of a micro-batch whose sequences sharded over `ring` hold
    /// `sharded_len` tokens in all (0 when there are none or the ring is one GPU).
    pub fn comm(&self, sharded_len: u64, ring: Ring) -> f64 {
        if sharded_len == 0 || ring.size <= 1 {
            return 0.0;
        }
        self.comm_latency(ring) + sharded_len as f64 * self.comm_per_token(ring)
    }

    /// The fixed cost of one micro-batch.
    pub fn fixed(&self) -> f64 {
        self.fixed_s
    }

    /// The fixed cost of one sharded sequence on each GPU of its group, per micro-batch
    /// ([`CostModel::sharded_sequence_s`]).
    pub fn sequence_fixed(&self) -> f64 {
        self.cost.sharded_sequence_s
    }

    /// The time of one CP rank in one micro-batch.
    pub fn rank(&self, load: &RankLoad) -> RankTime {
        let gemm = self.gemm(load.local_tokens + load.sharded_tokens);
        let (window, after) = match self.cost.overlap {
            Overlap::LocalAttention => (load.local_attention, load.sharded_attention),
            Overlap::AllAttention => (load.local_attention + load.sharded_attention, 0.0),
        };
        let overlapped = load.comm.max(window);
        let fixed = if load.sharded_sequences == 0 {
            self.fixed_s
        } else {
            self.fixed_s + f64::from(load.sharded_sequences) * self.cost.sharded_sequence_s
        };
        RankTime {
            total: overlapped + gemm + after + fixed,
            gemm,
            exposed_comm: (load.comm - window).max(0.0),
            fixed,
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

    /// Time of a micro-batch that holds only this sequence, sharded over `ring` (the whole
    /// CP group or a sub-group: its size is the ring's).
    pub fn alone_sharded(&self, len: u32, ring: Ring) -> f64 {
        let g = ring.size.max(1);
        self.rank(&RankLoad {
            sharded_tokens: u64::from(self.shard_tokens_in(len, g)),
            sharded_attention: self.attention_shard_in(len, g),
            comm: self.comm(u64::from(len), ring),
            sharded_sequences: 1,
            ..RankLoad::default()
        })
        .total
    }
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
        let ring = m.group_ring(0);
        assert!(!ring.crosses_nodes);
        assert!(close(m.comm(32768, ring), want, 1e-12));
        assert_eq!(m.comm(0, ring), 0.0);
        let one = tm(ModelShape::QWEN2_5_7B, 1);
        assert_eq!(one.comm(5000, one.group_ring(3)), 0.0);
        // A ring that crosses a node boundary pays the inter-node latency and bandwidth on
        // every step: CP 16 on 8-GPU nodes always does.
        let m16 = tm(ModelShape::QWEN2_5_7B, 16);
        let ring = m16.group_ring(1);
        assert!(ring.crosses_nodes);
        let want = 28.0
            * 3.0
            * (15.0 * c.inter_node_ring_step_latency_s + 15.0 / 16.0 * 1e6 * 2048.0 / 45e9);
        assert!(close(m16.comm(1_000_000, ring), want, 1e-12));
        // CP 4 on 8-GPU nodes: the groups of DP ranks 0 and 1 share node 0, never crossing;
        // CP 3: DP rank 2's group holds GPUs 6, 7, 8 and crosses.
        let m4 = tm(ModelShape::QWEN2_5_7B, 4);
        assert!((0..8).all(|d| !m4.group_ring(d).crosses_nodes));
        let m3 = tm(ModelShape::QWEN2_5_7B, 3);
        let crossing: Vec<u32> = (0..8).filter(|&d| m3.group_ring(d).crosses_nodes).collect();
        assert_eq!(crossing, [2, 5]);
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
            sharded_sequences: 0,
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

    /// The per-sharded-sequence cost is paid once per sequence on the rank, outside the
    /// overlap window (never hidden), and a lone sharded sequence pays it once.
    #[test]
    fn sharded_sequences_pay_their_fixed_cost_outside_the_window() {
        let shape = ModelShape::QWEN2_5_0_5B;
        let mut cost = CostModel::h100(&shape);
        cost.sharded_sequence_s = 0.003;
        let m = TimeModel::for_shape(&cost, &shape, 8, ShardPadding::None);
        let base = tm(shape, 8);
        let load = RankLoad {
            local_tokens: 3000,
            local_attention: 0.010,
            sharded_tokens: 1000,
            sharded_attention: 0.001,
            comm: 0.005,
            sharded_sequences: 2,
        };
        let t = m.rank(&load);
        let want = 0.010 + m.gemm(4000) + 0.001 + m.fixed() + 2.0 * 0.003;
        assert!(close(t.total, want, 1e-12));
        assert!(close(t.fixed, m.fixed() + 0.006, 1e-12));
        assert_eq!(t.exposed_comm, 0.0);
        let ring = m.group_ring(0);
        assert!(close(
            m.alone_sharded(5000, ring),
            base.alone_sharded(5000, ring) + 0.003,
            1e-12
        ));
        assert_eq!(m.alone_whole(5000), base.alone_whole(5000));
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
                        m.alone_sharded(len, m.group_ring(0)),
                        m.attention_whole(len),
                    );
                    assert!(w2 >= w && s2 >= s && a2 >= a, "{len} {cp}");
                    (w, s, a) = (w2, s2, a2);
                    len += 1 + len / 64;
                }
            }
        }
    }
}
