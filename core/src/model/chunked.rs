//! The time of a chunked sequence ([`Chunking`]): its chunks run one after another, each a
//! forward and backward pass over the layers, on one GPU or sharded over an aligned ring.
//!
//! For chunk `i` of `t_i` tokens after `P_i = i·ChunkSize` earlier tokens, on a ring of `g`
//! GPUs each holding `q_i = share_g(t_i)` of its queries:
//!
//! ```text
//! attention_i = T_attn(q_i, 2·P_i + t_i)           (causal over the prefix and itself)
//! comm_i      = T_comm(P_i + t_i, ring)              (the ring passes the whole K/V so far)
//! pass_i      = max(comm_i, window_i) + T_gemm(q_i) + after_i + T_launch
//! ```
//!
//! with the overlap rule of [`Overlap`]: the chunk's attention hides communication only
//! under [`Overlap::AllAttention`] (under the default it runs after, as a shard's does).
//! `T_attn(q, 2P + t)` counts the causal pairs exactly: over equal chunks the sum is the whole
//! sequence's `T_attn(S, S)` work, at the chunk's (lower) kernel efficiency. The first
//! `n - K` chunks are recomputed in the backward pass: their forward again (a third of the
//! GEMM FLOPs, the forward attention, one of the `comm_passes` ring passes and a third of
//! the launches). The passes add up: a chunked sequence's time on its GPUs is the sum.

use crate::config::chunking::Chunking;
use crate::config::cost::Overlap;
use crate::model::time::{Ring, TimeModel};

/// The time of one chunked sequence on each GPU of its ring, seconds, split into parts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChunkedTime {
    /// Every pass and recomputation, in order.
    pub total: f64,
    /// GEMM time of the passes (recomputation not included).
    pub gemm: f64,
    /// Attention time of the passes (recomputation not included).
    pub attention: f64,
    /// Ring communication of the passes (0 on one GPU).
    pub comm: f64,
    /// Communication not hidden behind the chunks' attention.
    pub exposed_comm: f64,
    /// Recomputing the forward of the first `n - K` chunks.
    pub recompute: f64,
    /// Chunks (passes).
    pub chunks: u32,
}

impl TimeModel {
    /// The time of one chunked sequence on each GPU of its ring (see [`ChunkedTime`] and the
    /// [module docs](self)).
    pub fn chunked(&self, len: u32, chunking: &Chunking, ring: Ring) -> ChunkedTime {
        time(self, len, chunking, ring)
    }
}

/// [`TimeModel::chunked`]: the time of a `len`-token sequence chunked by `chunking` on
/// `ring` (its size is the group's).
fn time(tm: &TimeModel, len: u32, chunking: &Chunking, ring: Ring) -> ChunkedTime {
    let g = ring.size.max(1);
    let n = chunking.count(len);
    let keep = chunking.keep.clamp(1, n.max(1));
    let all_attention = tm.cost.overlap == Overlap::AllAttention;
    let passes = tm.cost.comm_passes.max(1.0);
    let launch = tm.pass_fixed();
    let mut out = ChunkedTime {
        chunks: n,
        ..ChunkedTime::default()
    };
    let mut prefix = 0u32;
    for i in 0..n {
        let t = chunking.chunk_len(len, i);
        let q = if g == 1 {
            tm.local_tokens(t)
        } else {
            tm.shard_tokens_in(t, g)
        };
        let keys = prefix.saturating_mul(2).saturating_add(t);
        let attention = tm.attention(q, keys);
        let comm = tm.comm(u64::from(prefix) + u64::from(t), ring);
        let gemm = tm.gemm(u64::from(q));
        let (window, after) = if all_attention {
            (attention, 0.0)
        } else {
            (0.0, attention)
        };
        out.total += comm.max(window) + gemm + after + launch;
        out.gemm += gemm;
        out.attention += attention;
        out.comm += comm;
        out.exposed_comm += (comm - window).max(0.0);
        if i < n - keep {
            let gemm_fwd = (tm.gemm_compute(u64::from(q)) / 3.0)
                .max(tm.weight_stream() / tm.cost.weight_passes.max(1.0));
            let redo = tm.attention_fwd(q, keys) + gemm_fwd + comm / passes + launch / 3.0;
            out.recompute += redo;
            out.total += redo;
        }
        prefix = prefix.saturating_add(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cost::CostModel;
    use crate::config::options::ShardPadding;
    use crate::config::shape::ModelShape;

    fn tm(cp: u32) -> TimeModel {
        let shape = ModelShape::QWEN2_5_7B;
        TimeModel::for_shape(&CostModel::h100(&shape), &shape, cp, ShardPadding::None)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-300)
    }

    #[test]
    fn chunk_attention_adds_up_to_the_whole_causal_work() {
        let m = tm(1);
        let one = m.ring(0, 0, 1);
        // Equal chunks of 4,096 at one efficiency point: Σ q·(2P + q) = S².
        let c = Chunking::new(4096, 4);
        let t = m.chunked(16_384, &c, one);
        assert_eq!(t.chunks, 4);
        let unit = m.attention_unit(4096);
        assert!(close(t.attention, unit * 16_384.0 * 16_384.0));
        assert_eq!(t.comm, 0.0);
        // K >= n: nothing recomputed; the passes add up.
        assert_eq!(t.recompute, 0.0);
        let want = t.attention + 4.0 * m.gemm(4096) + 4.0 * m.pass_fixed();
        assert!(close(t.total, want));
    }

    #[test]
    fn recomputation_is_the_forward_of_the_first_n_minus_k_chunks() {
        let m = tm(1);
        let one = m.ring(0, 0, 1);
        let kept = m.chunked(16_384, &Chunking::new(4096, 4), one);
        let k1 = m.chunked(16_384, &Chunking::new(4096, 1), one);
        let mut want = 0.0;
        for i in 0..3u32 {
            want += m.attention_fwd(4096, (2 * i + 1) * 4096)
                + (m.gemm_compute(4096) / 3.0).max(m.weight_stream() / 3.0)
                + m.pass_fixed() / 3.0;
        }
        assert!(close(k1.recompute, want));
        assert!(close(k1.total, kept.total + want));
        // Recomputation costs time: chunking is never free.
        assert!(k1.total > kept.total);
    }

    #[test]
    fn a_ring_carries_the_prefix_of_every_chunk() {
        let m = tm(8);
        let ring = m.ring(0, 0, 4);
        let t = m.chunked(8192, &Chunking::new(4096, 2), ring);
        let want = m.comm(4096, ring) + m.comm(8192, ring);
        assert!(close(t.comm, want));
        // Under the default overlap nothing hides it.
        assert!(close(t.exposed_comm, want));
    }
}
