//! Integer FLOPs of one sequence, forward + backward, as `linear·S + quadratic·S²`.
//!
//! # Overflow
//! Both coefficients fit `u64` for every shape [`ModelShape::validate`] accepts
//! (`linear < 2^50`, `quadratic < 2^30`). With `S < 2^31` one sequence costs less than
//! `2^81 + 2^92 < 2^93` FLOPs, and a batch of [`MAX_SEQS`](crate::config::limits::MAX_SEQS) `= 2^16`
//! sequences less than `2^109`: every sum in `u128` is exact, so overflow is impossible.

use crate::config::options::FlopsFormula;
use crate::config::shape::ModelShape;

/// Precomputed coefficients: `flops(S) = linear·S + quadratic·S²` (forward + backward, all layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlopsModel {
    /// FLOPs per token that do not depend on the sequence length (projections, FFN, LM head).
    pub linear: u64,
    /// FLOPs per squared token (attention scores and values).
    pub quadratic: u64,
}

impl FlopsModel {
    /// The coefficients of `formula` for `shape` (which must have passed
    /// [`ModelShape::validate`]; out-of-range shapes saturate rather than overflow).
    pub fn new(shape: &ModelShape, formula: FlopsFormula) -> FlopsModel {
        let h = u64::from(shape.hidden);
        let kv = u64::from(shape.kv_hidden);
        let f = u64::from(shape.ffn);
        let l = u64::from(shape.layers);
        let v = u64::from(shape.vocab);
        // forward + backward = 3 x forward.
        let (per_layer_linear, per_layer_quadratic, head) = match formula {
            // Paper, per layer forward: 20 h^2 S + 4 h h_kv S + 4 h S^2.
            FlopsFormula::Paper => (
                (20u64.saturating_mul(h).saturating_mul(h))
                    .saturating_add(4u64.saturating_mul(h).saturating_mul(kv)),
                4u64.saturating_mul(h),
                0u64,
            ),
            // Megatron: QKV+O 4Sh^2 + 4S h h_kv, MLP (4 or 6) S h f, causal attention 2 S^2 h,
            // LM head 2 S h V once.
            FlopsFormula::Megatron => {
                let mlp = if shape.swiglu { 6u64 } else { 4u64 };
                (
                    (4u64.saturating_mul(h).saturating_mul(h))
                        .saturating_add(4u64.saturating_mul(h).saturating_mul(kv))
                        .saturating_add(mlp.saturating_mul(h).saturating_mul(f)),
                    2u64.saturating_mul(h),
                    2u64.saturating_mul(h).saturating_mul(v),
                )
            }
        };
        FlopsModel {
            linear: 3u64.saturating_mul(l.saturating_mul(per_layer_linear).saturating_add(head)),
            quadratic: 3u64.saturating_mul(l).saturating_mul(per_layer_quadratic),
        }
    }

    /// FLOPs of one whole sequence of `len` tokens, forward + backward.
    #[inline]
    pub fn of(&self, len: u32) -> u128 {
        let s = u128::from(len);
        u128::from(self.linear) * s + u128::from(self.quadratic) * s * s
    }

    /// One CP rank's share of a sequence sharded over `cp` ranks (balanced zigzag sharding):
    /// `flops(S) / cp`, rounded down.
    #[inline]
    pub fn shard(&self, len: u32, cp: u32) -> u128 {
        self.of(len) / u128::from(cp.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::limits::{
        MAX_FFN, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ_LEN, MAX_SEQS, MAX_VOCAB,
    };

    #[test]
    fn megatron_coefficients_match_reference_numbers() {
        // cost_model.md: 2.96 GFLOP per token linear and 1.29e5 s^2 attention for 0.5B.
        let m = FlopsModel::new(&ModelShape::QWEN2_5_0_5B, FlopsFormula::Megatron);
        assert_eq!(m.linear, 2_963_767_296);
        assert_eq!(m.quadratic, 129_024);
        // 7B: 42.4 GFLOP per token, 6.02e5 s^2.
        let m7 = FlopsModel::new(&ModelShape::QWEN2_5_7B, FlopsFormula::Megatron);
        assert_eq!(m7.linear / 100_000_000, 424);
        assert_eq!(m7.quadratic, 602_112);
    }

    #[test]
    fn paper_formula_by_hand() {
        let m = FlopsModel::new(&ModelShape::QWEN2_5_0_5B, FlopsFormula::Paper);
        // 3 * 24 * (20 * 896^2 + 4 * 896 * 128) and 3 * 24 * 4 * 896.
        assert_eq!(m.linear, 3 * 24 * (20 * 896 * 896 + 4 * 896 * 128));
        assert_eq!(m.quadratic, 3 * 24 * 4 * 896);
        assert_eq!(
            m.of(1000),
            u128::from(m.linear) * 1000 + u128::from(m.quadratic) * 1_000_000
        );
        assert_eq!(m.shard(1000, 8), m.of(1000) / 8);
    }

    #[test]
    fn largest_shape_and_length_cannot_overflow_a_full_batch() {
        let big = ModelShape {
            hidden: MAX_HIDDEN,
            kv_hidden: MAX_HIDDEN,
            ffn: MAX_FFN,
            layers: MAX_LAYERS,
            vocab: MAX_VOCAB,
            swiglu: true,
        };
        assert!(big.validate().is_ok());
        for formula in [FlopsFormula::Paper, FlopsFormula::Megatron] {
            let m = FlopsModel::new(&big, formula);
            assert!(m.linear < 1 << 50 && m.quadratic < 1 << 30, "{m:?}");
            let one = m.of(MAX_SEQ_LEN);
            assert!(one < 1u128 << 93);
            let batch = one
                .checked_mul(MAX_SEQS as u128)
                .expect("batch sum fits u128");
            assert!(batch < 1u128 << 109);
        }
    }

    #[test]
    fn flops_grow_strictly_with_length() {
        let m = FlopsModel::new(&ModelShape::QWEN2_5_7B, FlopsFormula::Paper);
        let mut prev = 0;
        for s in [1u32, 2, 3, 100, 4096, 1 << 20, MAX_SEQ_LEN] {
            assert!(m.of(s) > prev);
            prev = m.of(s);
        }
    }
}
