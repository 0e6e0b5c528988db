//! The cost model's coefficients: plain data a user can set or fit ([`CostModel`]), with the
//! hardware and topology presets (H100, H200; 8 GPUs per node) and the attention-kernel
//! efficiency table. [`time`](crate::model::time) binds them to a configuration and computes
//! times; [`fixed`](crate::model::fixed) derives the integer form the planner decides on;
//! [`fit`](crate::model::fit) calibrates them from measured samples. Every default and its
//! source is listed in `docs/cost_model.md`.

use core::fmt;

use crate::config::shape::ModelShape;
pub use crate::error::CostField;

/// Group size assumed for Table 5 (one 8-GPU node; the paper does not say).
pub const TABLE5_GROUP: u32 = 8;

/// Relative-error least-squares fit of the paper's Table 5 all-gather points (`model::fit::SKRULL_TABLE5_ALL_GATHER`): latency of one
/// collective, seconds (rounded; the tests recompute it).
pub const TABLE5_COLLECTIVE_LATENCY_S: f64 = 43.91e-6;
/// The same fit's algorithm bandwidth (collective size / time), bytes/s.
pub const TABLE5_ALGORITHM_BANDWIDTH: f64 = 152.9e9;

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

/// Tera.
const T: f64 = 1e12;

impl AttentionTable {
    /// FlashAttention-3 on H100 SXM5, head dim 128, causal forward and backward
    /// (a third-party transcription of the FA3 paper's
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
        self.throughput_with(q, |i| libm::log2(f64::from(self.seqlen[i])))
    }

    /// `log2` of every point's sequence length, for [`AttentionTable::throughput_logged`].
    pub fn log2_points(&self) -> [f64; ATTN_POINTS] {
        core::array::from_fn(|i| libm::log2(f64::from(self.seqlen[i])))
    }

    /// [`AttentionTable::throughput`] with the points' logarithms computed once
    /// ([`AttentionTable::log2_points`]); the same values, bit for bit.
    pub fn throughput_logged(&self, q: u32, logs: &[f64; ATTN_POINTS]) -> (f64, f64) {
        self.throughput_with(q, |i| logs[i])
    }

    /// The interpolation, with `log2` of point `i`'s length from `log2_at(i)`.
    #[inline]
    fn throughput_with(&self, q: u32, log2_at: impl Fn(usize) -> f64) -> (f64, f64) {
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
        let (x0, x1) = (log2_at(i - 1), log2_at(i));
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
    /// Every overlap, in a fixed order (the C ABI's `SKRULL_OVERLAP_*` numbers).
    pub const ALL: [Overlap; 2] = [Overlap::LocalAttention, Overlap::AllAttention];

    /// The option's stable name (`local-attention`, `all-attention`).
    pub fn name(self) -> &'static str {
        match self {
            Overlap::LocalAttention => "local-attention",
            Overlap::AllAttention => "all-attention",
        }
    }

    /// Parses a name given by [`Overlap::name`].
    pub fn from_name(name: &str) -> Option<Overlap> {
        Self::ALL.iter().copied().find(|o| o.name() == name)
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
    /// Latency of one ring step while the ring stays inside one node, seconds.
    pub ring_step_latency_s: f64,
    /// Latency of one ring step once the ring crosses a node boundary, seconds (a ring is as
    /// slow as its slowest hop).
    pub inter_node_ring_step_latency_s: f64,
    /// Per-GPU receive bandwidth while the ring stays inside one node, bytes/s.
    pub intra_node_bandwidth: f64,
    /// Per-GPU receive bandwidth once the ring crosses a node boundary, bytes/s.
    pub inter_node_bandwidth: f64,
    /// GPUs per node: GPU `g` of the job (DP rank `d`, CP rank `r`: `g = d·N + r`) sits in
    /// node `g / gpus_per_node`, which decides whether a ring crosses nodes.
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
    /// Fixed cost per sharded sequence per micro-batch, paid by every GPU of the group it is
    /// sharded over (the whole CP group or a sub-group) outside the overlap window: the
    /// executor's work per sequence (its zigzag chunks, its K/V gradient), seconds.
    pub sharded_sequence_s: f64,
    /// Fixed cost per sequence held whole on a GPU, per micro-batch, inside the overlap
    /// window with its attention: the attention kernel's cost per call where the kernel is
    /// called once per sequence (the CPU executor's; 0 for a varlen kernel that takes every
    /// sequence of the micro-batch in one call, the presets' FlashAttention), seconds.
    pub local_sequence_s: f64,
}

/// H100 SXM5 dense BF16 peak (FLOP/s).
pub const H100_PEAK_FLOPS: f64 = 989.4e12;
/// H100 SXM5 HBM3 bandwidth (bytes/s).
pub const H100_HBM_BANDWIDTH: f64 = 3.35e12;
/// H200 HBM3e bandwidth (bytes/s).
pub const H200_HBM_BANDWIDTH: f64 = 4.8e12;

/// One ring step across nodes (InfiniBand NDR through NCCL's proxy): about 2x the intra-node
/// step of the Table 5 fit; an assumption to calibrate (`docs/cost_model.md`).
pub const INTER_NODE_RING_STEP_LATENCY_S: f64 = 12.5e-6;

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

    /// The same machine `k` times slower: every time it predicts (GEMMs, attention, ring
    /// latency and traffic, launches, the fixed costs per micro-batch, per iteration and per
    /// sharded sequence) multiplied by `k`, the overlap rule unchanged. A refit that finds
    /// only a uniform factor ([`Verdict::ScaleOnly`](crate::model::refit::Verdict)) describes
    /// this model: it changes no plan, only the predicted seconds.
    ///
    /// # Errors
    /// [`InvalidCost`] for a `k` not finite or not above 0, or a result out of range.
    pub fn slowed(&self, k: f64) -> Result<CostModel, InvalidCost> {
        if !(k.is_finite() && k > 0.0) {
            return Err(InvalidCost {
                field: CostField::PeakFlops,
            });
        }
        let m = CostModel {
            peak_flops: self.peak_flops / k,
            hbm_bandwidth: self.hbm_bandwidth / k,
            attention: self.attention.slowed(k),
            ring_step_latency_s: self.ring_step_latency_s * k,
            inter_node_ring_step_latency_s: self.inter_node_ring_step_latency_s * k,
            intra_node_bandwidth: self.intra_node_bandwidth / k,
            inter_node_bandwidth: self.inter_node_bandwidth / k,
            kernel_launch_s: self.kernel_launch_s * k,
            micro_batch_extra_s: self.micro_batch_extra_s * k,
            iteration_fixed_s: self.iteration_fixed_s * k,
            sharded_sequence_s: self.sharded_sequence_s * k,
            local_sequence_s: self.local_sequence_s * k,
            ..*self
        };
        m.validate()?;
        Ok(m)
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
        inter_node_ring_step_latency_s: INTER_NODE_RING_STEP_LATENCY_S,
        intra_node_bandwidth: TABLE5_ALGORITHM_BANDWIDTH * (TABLE5_GROUP - 1) as f64
            / TABLE5_GROUP as f64,
        inter_node_bandwidth: 45e9,
        gpus_per_node: 8,
        overlap: Overlap::LocalAttention,
        kernels_per_layer: 120.0,
        kernel_launch_s: 5e-6,
        micro_batch_extra_s: 0.0,
        iteration_fixed_s: 0.0,
        sharded_sequence_s: 0.0,
        local_sequence_s: 0.0,
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
            (CostField::PeakFlops, self.peak_flops),
            (CostField::GemmEfficiency, self.gemm_efficiency),
            (CostField::HbmBandwidth, self.hbm_bandwidth),
            (CostField::IntraNodeBandwidth, self.intra_node_bandwidth),
            (CostField::InterNodeBandwidth, self.inter_node_bandwidth),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(InvalidCost { field });
            }
        }
        let non_negative = [
            (CostField::WeightBytes, self.weight_bytes),
            (CostField::WeightPasses, self.weight_passes),
            (CostField::AttentionBwdRatio, self.attention_bwd_ratio),
            (CostField::KvElementBytes, self.kv_element_bytes),
            (CostField::CommPasses, self.comm_passes),
            (CostField::RingStepLatencyS, self.ring_step_latency_s),
            (
                CostField::InterNodeRingStepLatencyS,
                self.inter_node_ring_step_latency_s,
            ),
            (CostField::KernelsPerLayer, self.kernels_per_layer),
            (CostField::KernelLaunchS, self.kernel_launch_s),
            (CostField::MicroBatchExtraS, self.micro_batch_extra_s),
            (CostField::IterationFixedS, self.iteration_fixed_s),
            (CostField::ShardedSequenceS, self.sharded_sequence_s),
            (CostField::LocalSequenceS, self.local_sequence_s),
        ];
        for (field, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(InvalidCost { field });
            }
        }
        if self.gemm_efficiency > 1.0 {
            return Err(InvalidCost {
                field: CostField::GemmEfficiency,
            });
        }
        if self.attention_tile == 0 {
            return Err(InvalidCost {
                field: CostField::AttentionTile,
            });
        }
        if self.gpus_per_node == 0 {
            return Err(InvalidCost {
                field: CostField::GpusPerNode,
            });
        }
        let a = &self.attention;
        for i in 0..ATTN_POINTS {
            if !(a.fwd[i].is_finite() && a.fwd[i] > 0.0) {
                return Err(InvalidCost {
                    field: CostField::AttentionFwdFlops,
                });
            }
            if !(a.bwd[i].is_finite() && a.bwd[i] > 0.0) {
                return Err(InvalidCost {
                    field: CostField::AttentionBwdFlops,
                });
            }
            if a.seqlen[i] == 0 || (i > 0 && a.seqlen[i] <= a.seqlen[i - 1]) {
                return Err(InvalidCost {
                    field: CostField::AttentionSeqlen,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for CostField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A [`CostModel`] field out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidCost {
    /// The field.
    pub field: CostField,
}

impl fmt::Display for InvalidCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cost model field {} is out of range", self.field)
    }
}

impl core::error::Error for InvalidCost {}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        libm::fabs(a - b) <= rel * libm::fabs(b).max(1e-300)
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
                field: CostField::AttentionSeqlen
            })
        );
        bad = CostModel::H100_QWEN2_5_7B;
        bad.kernel_launch_s = f64::NAN;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn cost_field_names_and_numbers_round_trip() {
        use std::string::ToString;
        for (i, f) in CostField::ALL.into_iter().enumerate() {
            assert_eq!(CostField::from_name(f.name()), Some(f));
            assert_eq!(f.number() as usize, i + 1);
        }
        assert_eq!(CostField::Overlap.number(), 18);
        assert_eq!(CostField::from_name("attention_seqlen"), None);
        assert_eq!(
            InvalidCost {
                field: CostField::AttentionSeqlen
            }
            .to_string(),
            "cost model field attention.seqlen is out of range"
        );
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
        let logs = t.log2_points();
        for q in [
            1,
            511,
            512,
            513,
            700,
            1024,
            3072,
            9000,
            16383,
            16384,
            1 << 20,
        ] {
            assert_eq!(t.throughput_logged(q, &logs), t.throughput(q), "{q}");
        }
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
}
