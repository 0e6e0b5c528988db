//! The chunked group of a GPU's layout: the chunk passes of every chunked sequence
//! ([`CHUNKED`](crate::plan::CHUNKED)) whose group holds the GPU. See the
//! [layout documentation](super#the-chunked-group).

use crate::config::budget::Budget;
use crate::config::chunking::Chunking;
use crate::plan::{CHUNKED, CpGroup};

use super::{Chunk, LayoutError, Span, Totals, Writer, to_u32, zigzag_chunks};

/// [`Span::chunk`](super::Span::chunk) of a whole chunk of a chunked sequence that runs on one
/// GPU (a group of one rank). A chunk sharded over a group of `g > 1` ranks has zigzag pieces
/// instead, numbered `0..2g` as the chunks of a sharded sequence are.
pub const WHOLE_CHUNK: i32 = -2;

/// One chunk pass of a chunked sequence on this GPU: chunk `index` of `count`, the tokens this
/// GPU holds of it (`spans` consecutive [`Span`](super::Span)s from `span`, buffer offsets
/// `offset..offset + tokens`), and the group whose ring runs it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkPass {
    /// The sequence (index into the batch's lengths).
    pub seq: u32,
    /// The chunk `k`, `0..count`: passes run in this order.
    pub index: u32,
    /// Chunks of the sequence ([`Chunking::count`]).
    pub count: u32,
    /// First CP rank of the group that runs the sequence.
    pub first: u32,
    /// Ranks in that group (1: one GPU, no CP communication).
    pub size: u32,
    /// Position of the chunk's first token in its sequence: `k · ChunkSize`.
    pub start: u32,
    /// Real tokens of the chunk ([`Chunking::chunk_len`]), over the whole group.
    pub len: u32,
    /// The chunk's padded length over the whole group: `Budget::local(len)` on one GPU,
    /// `Budget::for_group(size).padded(len)` on a group.
    pub padded: u32,
    /// Index of this GPU's first span of the chunk in [`LayoutBuffers::spans`](super::LayoutBuffers::spans).
    pub span: u32,
    /// Spans of the chunk on this GPU: 1 on one GPU, 2 (front, back piece) on a group.
    pub spans: u32,
    /// Buffer offset of this GPU's first token of the chunk.
    pub offset: u32,
    /// Tokens this GPU holds of the chunk, padding included.
    pub tokens: u32,
}

/// What one GPU holds of one chunk: the chunk's start and real length, its padded length over
/// the group, and the pieces (`(Span::chunk, positions)`; one on one GPU, front and back on a
/// group), their positions in sequence coordinates.
pub(super) struct Pieces {
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) padded: u64,
    pub(super) pieces: [(i32, Chunk); 2],
    pub(super) count: usize,
}

impl Pieces {
    /// Tokens this GPU holds of the chunk, padding included.
    pub(super) fn tokens(&self) -> u64 {
        self.held()
            .map(|(_, c)| u64::from(c.len) + u64::from(c.pad))
            .sum()
    }

    /// Padding tokens among them.
    pub(super) fn pad(&self) -> u64 {
        self.held().map(|(_, c)| u64::from(c.pad)).sum()
    }

    /// The pieces this GPU holds, in buffer order.
    pub(super) fn held(&self) -> impl Iterator<Item = &(i32, Chunk)> {
        self.pieces.iter().take(self.count)
    }
}

/// Chunk `k` of a chunked sequence of `len` tokens on `group`, as rank `rank` (a member of
/// the group) holds it: the whole chunk (local padding) on one GPU; on a group of `g` ranks
/// the zigzag pieces `j` and `2g - 1 - j` (`j = rank - first`) of the chunk sharded over the
/// group, shifted by the chunk's start.
pub(super) fn pieces(
    budget: &Budget,
    chunking: &Chunking,
    len: u32,
    group: CpGroup,
    rank: u32,
    k: u32,
) -> Pieces {
    let start = k.saturating_mul(chunking.size);
    let clen = chunking.chunk_len(len, k);
    if group.size <= 1 {
        let held = budget.local(clen);
        let whole = Chunk {
            start,
            len: clen,
            pad: held - clen,
        };
        return Pieces {
            start,
            len: clen,
            padded: u64::from(held),
            pieces: [(WHOLE_CHUNK, whole), (WHOLE_CHUNK, Chunk::default())],
            count: 1,
        };
    }
    let rb = budget.for_group(group.size);
    let j = rank.saturating_sub(group.first);
    let [front, back] = zigzag_chunks(&rb, clen, j);
    let shift = |c: Chunk| Chunk {
        start: c.start.saturating_add(start),
        ..c
    };
    let back_id = 2 * group.size - 1 - j;
    Pieces {
        start,
        len: clen,
        padded: rb.padded(clen),
        pieces: [(j as i32, shift(front)), (back_id as i32, shift(back))],
        count: 2,
    }
}

/// Counts one chunked sequence of `len` tokens on `group` into rank `rank`'s totals.
pub(super) fn measure(
    t: &mut Totals,
    budget: &Budget,
    chunking: &Chunking,
    len: u32,
    group: CpGroup,
    rank: u32,
) {
    let n = chunking.count(len);
    t.chunked_seqs += 1;
    t.chunk_passes += u64::from(n);
    t.charged += budget.chunked(chunking, len, group.size);
    for k in 0..n {
        let p = pieces(budget, chunking, len, group, rank, k);
        let tokens = p.tokens();
        t.chunked_spans += p.count as u64;
        t.chunked_tokens += tokens;
        t.pad_tokens += p.pad();
        t.chunk_max = t.chunk_max.max(tokens);
        t.chunked_max_pos = t.chunked_max_pos.max(u64::from(p.start) + p.padded);
    }
}

/// Writes the chunked group of rank `rank`: for every chunked sequence of the micro-batch
/// whose group holds the rank, in plan order, its chunks in order (their spans through `w`,
/// one [`ChunkPass`] each into `passes` unless it is empty).
///
/// # Errors
/// [`LayoutError::PlanMismatch`] as [`members`].
pub(super) fn write(
    w: &mut Writer<'_>,
    passes: &mut [ChunkPass],
    members: impl Iterator<Item = Result<(u32, i32, CpGroup, u32), LayoutError>>,
    ctx: (&Budget, &Chunking, u64, u32),
) -> Result<(), LayoutError> {
    let (budget, chunking, mut base, rank) = ctx;
    let mut n_passes = 0usize;
    for member in members {
        let (seq, cp_rank, group, len) = member?;
        if cp_rank == CHUNKED && group.contains(rank) {
            let count = chunking.count(len);
            for k in 0..count {
                let p = pieces(budget, chunking, len, group, rank, k);
                let (span, offset) = (w.n_spans as u32, w.offset);
                for &(id, c) in p.held() {
                    let s = Span {
                        seq,
                        chunk: id,
                        offset: w.offset,
                        start: c.start,
                        len: c.len,
                        pad: c.pad,
                    };
                    w.push(s, base);
                }
                if let Some(slot) = passes.get_mut(n_passes) {
                    *slot = ChunkPass {
                        seq,
                        index: k,
                        count,
                        first: group.first,
                        size: group.size,
                        start: p.start,
                        len: p.len,
                        padded: to_u32(p.padded),
                        span,
                        spans: p.count as u32,
                        offset,
                        tokens: w.offset - offset,
                    };
                }
                n_passes += 1;
            }
        }
        base += u64::from(len);
    }
    Ok(())
}

/// For one sequence of `len` tokens chunked on any group of a CP group of `cp` ranks: the
/// most chunk passes, spans and tokens one GPU holds of it.
pub(super) fn worst_case(
    budget: &Budget,
    chunking: &Chunking,
    len: u32,
    cp: u32,
) -> (u64, u64, u64) {
    let n = chunking.count(len);
    if n == 0 {
        return (0, 0, 0);
    }
    let last = chunking.chunk_len(len, n - 1);
    let full = u64::from(n - 1);
    let mut tokens = full * u64::from(budget.local(chunking.size)) + u64::from(budget.local(last));
    let mut g = 2;
    while g <= cp {
        if cp.is_multiple_of(g) {
            let rb = budget.for_group(g);
            let on_g = full * u64::from(rb.share(chunking.size)) + u64::from(rb.share(last));
            tokens = tokens.max(on_g);
        }
        g *= 2;
    }
    let spans = if cp > 1 {
        2 * u64::from(n)
    } else {
        u64::from(n)
    };
    (u64::from(n), spans, tokens)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{gpu, layout_of, span};
    use super::super::{LOCAL_CHUNK, LayoutSizes};
    use super::*;
    use crate::config::Config;
    use crate::config::options::Policy;
    use crate::config::shape::ModelShape;
    use crate::plan::{MicroBatch, Placement, Plan, PlanParts};
    use crate::test_support::{OwnedPlan, setup_of};
    use std::vec;

    fn pass(index: u32, start: u32, len: u32, span: u32, offset: u32, tokens: u32) -> ChunkPass {
        ChunkPass {
            seq: 0,
            index,
            count: 3,
            first: 0,
            size: 2,
            start,
            len,
            padded: len,
            span,
            spans: 2,
            offset,
            tokens,
        }
    }

    /// `chunkflow` at CP 2, ChunkSize 4: the 10-token sequence runs as chunks of 4, 4 and 2
    /// tokens over both ranks, each zigzag-sharded like a 4- (or 2-) token sequence (pieces
    /// of 1 token; the last chunk's back pieces are empty), positions shifted by 4 and 8.
    #[test]
    fn worked_example_cp2_chunks_of_4() {
        let mut cfg = Config::new(1, 2, 5, ModelShape::QWEN2_5_0_5B).with_policy(Policy::ChunkFlow);
        cfg.chunking = Chunking::new(4, 1);
        let lengths = [10];
        let mut st = OwnedPlan::new(1, &cfg);
        let plan = st.schedule(&cfg, &lengths).unwrap();
        assert!(plan.placements()[0].is_chunked());
        let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, 0));
        assert_eq!(
            o.spans,
            vec![
                span(0, 0, 0, 0, 1, 0),
                span(0, 3, 1, 3, 1, 0),
                span(0, 0, 2, 4, 1, 0),
                span(0, 3, 3, 7, 1, 0),
                span(0, 0, 4, 8, 1, 0),
                span(0, 3, 5, 10, 0, 0),
            ]
        );
        assert_eq!(o.positions, vec![0, 3, 4, 7, 8]);
        assert_eq!(o.gather, vec![0, 3, 4, 7, 8]);
        assert_eq!(
            o.passes,
            vec![
                pass(0, 0, 4, 0, 0, 2),
                pass(1, 4, 4, 2, 2, 2),
                pass(2, 8, 2, 4, 4, 1)
            ]
        );
        let l = o.layout;
        assert_eq!(
            (l.chunked_seqs, l.chunk_passes, l.chunked_tokens),
            (1, 3, 5)
        );
        assert_eq!((l.tokens, l.loss_tokens, l.chunk_max_tokens), (5, 5, 2));
        assert_eq!((l.local_seqs, l.sharded_seqs, l.rings), (0, 0, 0));
        // Charged the peak: a full chunk's share (2) and half the state (1).
        assert_eq!(l.charged_tokens, 3);
        let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, 1));
        assert_eq!(o.positions, vec![1, 2, 5, 6, 9]);
        assert_eq!(o.layout.loss_tokens, 5);
    }

    /// A hand-made plan chunking 10 tokens on rank 1 alone (ChunkSize 4), next to a local
    /// 3-token sequence there: the chunked group follows the local group, one whole chunk per
    /// span ([`WHOLE_CHUNK`]); the gather index follows the stream (10 tokens, then 3).
    #[test]
    fn chunk_on_one_gpu_follows_the_local_group() {
        let mut cfg = Config::new(1, 2, 8, ModelShape::QWEN2_5_0_5B);
        cfg.chunking = Chunking::new(4, 1);
        let lengths = [10, 3];
        let placements = [
            Placement {
                cp_rank: CHUNKED,
                cp_first: 1,
                cp_size: 1,
                ..Placement::default()
            },
            Placement {
                cp_rank: 1,
                ..Placement::default()
            },
        ];
        let mbs = [MicroBatch {
            dp_rank: 0,
            index: 0,
            first: 0,
            count: 2,
        }];
        // Rank 1: 3 local + the chunked peak (a full chunk, 4, and the state, 1).
        let parts = PlanParts {
            placements: &placements,
            micro_batches: &mbs,
            members: &[0, 1],
            rank_tokens: &[0, 8],
            micro_batches_per_dp: &[1],
            rollbacks: 0,
        };
        let plan = Plan::from_parts(&setup_of(&cfg), &lengths, parts).unwrap();
        let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, 1));
        assert_eq!(
            o.spans,
            vec![
                span(1, LOCAL_CHUNK, 0, 0, 3, 0),
                span(0, WHOLE_CHUNK, 3, 0, 4, 0),
                span(0, WHOLE_CHUNK, 7, 4, 4, 0),
                span(0, WHOLE_CHUNK, 11, 8, 2, 0),
            ]
        );
        assert_eq!(o.gather, vec![10, 11, 12, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(o.passes[2].offset, 11);
        assert_eq!((o.passes[2].span, o.passes[2].spans), (3, 1));
        let l = o.layout;
        assert_eq!((l.local_tokens, l.chunked_tokens, l.tokens), (3, 10, 13));
        assert_eq!((l.charged_tokens, l.loss_tokens), (8, 13));
        let o = layout_of(&cfg, &lengths, &plan, gpu(0, 0, 0));
        assert_eq!((o.layout.tokens, o.layout.chunked_seqs), (0, 0));
        // A short chunk-pass slice is refused; an empty one skips the passes.
        let s = LayoutSizes::for_gpu(&setup_of(&cfg), &lengths, &plan, gpu(0, 0, 1)).unwrap();
        assert_eq!((s.chunk_passes, s.spans, s.positions), (3, 4, 13));
        assert!(matches!(
            s.check_passes(&[ChunkPass::default(); 2]),
            Err(LayoutError::BufferTooSmall {
                buffer: super::super::LayoutBuffer::ChunkPasses,
                got: 2,
                ..
            })
        ));
        assert_eq!(s.check_passes(&[]), Ok(()));
        // `max_for` bounds it with chunking on.
        let max = LayoutSizes::max_for(2, &cfg);
        assert!(max.spans >= s.spans && max.positions >= s.positions);
        assert!(max.chunk_passes >= s.chunk_passes);
    }
}
