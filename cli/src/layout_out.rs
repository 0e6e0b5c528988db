//! `skrull plan --layout DP,MB,CP`: one GPU's execution layout (spans, varlen `cu_seqlens`,
//! position-id ranges, loss weights, and the chunk passes of its chunked sequences) as JSON or
//! a table.

use std::fmt::Write;

use skrull_core::plan::layout::{
    self, ChunkPass, Gpu, Layout, LayoutBuffers, LayoutRing, LayoutSizes, MAX_RINGS, Span,
    WHOLE_CHUNK,
};
use skrull_core::{Config, CpGroup, Plan};

use crate::json::{config_json, shard_label};

/// One GPU's layout in owned vectors, trimmed to what [`layout::fill`] wrote.
#[derive(Debug, Clone, Default)]
pub struct GpuLayout {
    /// Counts, maxima and loss weights.
    pub layout: Layout,
    /// Spans in buffer order: local group, then front and back chunk of each sharded sequence,
    /// then the chunked group (one span per chunk on one GPU, two per chunk on a group).
    pub spans: Vec<Span>,
    /// `cu_seqlens` of the local group.
    pub local_cu_seqlens: Vec<i32>,
    /// Buffer offsets of the local sequences (`cu_seqlens` over padded lengths).
    pub local_cu_seqlens_padded: Vec<i32>,
    /// Global `cu_seqlens` of the sharded group (real lengths).
    pub sharded_cu_seqlens: Vec<i32>,
    /// Global `cu_seqlens` of the sharded group (padded lengths).
    pub sharded_cu_seqlens_padded: Vec<i32>,
    /// This rank's `cu_seqlens` of the sharded group.
    pub rank_cu_seqlens: Vec<i32>,
    /// Position id of every token in the buffer.
    pub positions: Vec<i32>,
    /// The rings of the sharded group (whole group first, then sub-groups).
    pub rings: Vec<LayoutRing>,
    /// The chunk passes of the chunked group, in the order they run (empty without chunking).
    pub chunk_passes: Vec<ChunkPass>,
}

/// Which group of a GPU's buffer a span belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanGroup {
    /// A sequence held whole on this GPU.
    Local,
    /// One zigzag chunk of a sequence sharded over a ring.
    Sharded,
    /// (A piece of) one chunk of a chunked sequence: chunk pass `pass` of
    /// [`GpuLayout::chunk_passes`].
    Chunked {
        /// Index into [`GpuLayout::chunk_passes`].
        pass: usize,
    },
}

impl SpanGroup {
    /// `local`, `sharded` or `chunked`, as the JSON form names the group.
    pub fn name(self) -> &'static str {
        match self {
            SpanGroup::Local => "local",
            SpanGroup::Sharded => "sharded",
            SpanGroup::Chunked { .. } => "chunked",
        }
    }
}

/// Parses `DP,MB,CP` (three whole numbers).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_gpu(s: &str) -> Result<Gpu, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let nums: Result<Vec<u32>, _> = parts.iter().map(|p| p.parse::<u32>()).collect();
    match nums.as_deref() {
        Ok(&[dp_rank, micro_batch, cp_rank]) => Ok(Gpu {
            dp_rank,
            micro_batch,
            cp_rank,
        }),
        _ => Err(format!(
            "--layout: '{s}' is not DP,MB,CP (three whole numbers, e.g. 0,0,0)"
        )),
    }
}

/// Computes one GPU's layout of `plan` into exactly sized buffers.
///
/// # Errors
/// The [`layout::LayoutError`] as text.
pub fn compute(
    cfg: &Config,
    lengths: &[u32],
    plan: &Plan<'_>,
    gpu: Gpu,
) -> Result<GpuLayout, String> {
    let s = LayoutSizes::for_gpu(&skrull_kit::setup_of(cfg), lengths, plan, gpu)
        .map_err(|e| e.to_string())?;
    let mut g = GpuLayout {
        spans: vec![Span::default(); s.spans as usize],
        local_cu_seqlens: vec![0; s.local_cu_seqlens as usize],
        local_cu_seqlens_padded: vec![0; s.local_cu_seqlens as usize],
        sharded_cu_seqlens: vec![0; s.sharded_cu_seqlens as usize],
        sharded_cu_seqlens_padded: vec![0; s.sharded_cu_seqlens as usize],
        rank_cu_seqlens: vec![0; s.sharded_cu_seqlens as usize],
        positions: vec![0; s.positions as usize],
        rings: vec![LayoutRing::default(); MAX_RINGS as usize],
        chunk_passes: vec![ChunkPass::default(); s.chunk_passes as usize],
        ..GpuLayout::default()
    };
    let out = LayoutBuffers {
        spans: &mut g.spans,
        local_cu_seqlens: &mut g.local_cu_seqlens,
        local_cu_seqlens_padded: &mut g.local_cu_seqlens_padded,
        sharded_cu_seqlens: &mut g.sharded_cu_seqlens,
        sharded_cu_seqlens_padded: &mut g.sharded_cu_seqlens_padded,
        rank_cu_seqlens: &mut g.rank_cu_seqlens,
        positions: &mut g.positions,
        gather_index: &mut [],
        rings: &mut g.rings,
    };
    g.layout = layout::fill_with_passes(
        &skrull_kit::setup_of(cfg),
        lengths,
        plan,
        gpu,
        out,
        &mut g.chunk_passes,
    )
    .map_err(|e| e.to_string())?;
    g.rings.truncate(g.layout.rings as usize);
    g.chunk_passes.truncate(g.layout.chunk_passes as usize);
    Ok(g)
}

fn push_list<T: std::fmt::Display>(out: &mut String, values: &[T]) {
    out.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{v}");
    }
    out.push(']');
}

impl GpuLayout {
    /// The group of span `i`: the local spans come first, then two per sharded sequence, then
    /// the chunked group's spans, pass after pass.
    pub fn group_of(&self, i: usize) -> SpanGroup {
        let local = self.layout.local_seqs as usize;
        if i < local {
            return SpanGroup::Local;
        }
        if i < local + 2 * self.layout.sharded_seqs as usize {
            return SpanGroup::Sharded;
        }
        let pass = self
            .chunk_passes
            .iter()
            .position(|p| (p.span as usize..(p.span + p.spans) as usize).contains(&i))
            .unwrap_or(self.chunk_passes.len());
        SpanGroup::Chunked { pass }
    }

    /// The ring of span `i` (an index into [`GpuLayout::rings`]), `None` for a local or a
    /// chunked span. The sharded spans come in pairs, ring after ring, in the order of the
    /// sharded `cu_seqlens`.
    pub fn ring_of(&self, i: usize) -> Option<usize> {
        if self.group_of(i) != SpanGroup::Sharded {
            return None;
        }
        let local = self.layout.local_seqs as usize;
        let k = u32::try_from(i.checked_sub(local)? / 2).ok()?;
        self.rings
            .iter()
            .position(|r| k >= r.offset && k - r.offset < r.seqs)
    }

    /// Whether this GPU rides a ring over a sub-group of the CP ranks.
    pub fn has_subgroup_ring(&self, cp: u32) -> bool {
        self.rings.iter().any(|r| r.size < cp)
    }
}

/// The table's group and chunk columns for a span of the chunked group: `chunked` (one GPU)
/// or `chunked 0-7` (the group's ranks), and `3 of 15` (chunk 3 of 15, whole) or
/// `3 of 15 (1/4)` (zigzag piece 1 of the chunk's 4 on the group).
fn chunked_label(pass: Option<&ChunkPass>, s: &Span) -> (String, String) {
    let Some(p) = pass else {
        return ("chunked".to_string(), s.chunk.to_string());
    };
    let label = if p.size <= 1 {
        "chunked".to_string()
    } else {
        format!("chunked {}-{}", p.first, p.first + p.size - 1)
    };
    let chunk = if s.chunk == WHOLE_CHUNK {
        format!("{} of {}", p.index, p.count)
    } else {
        format!("{} of {} ({}/{})", p.index, p.count, s.chunk, 2 * p.size)
    };
    (label, chunk)
}

/// `0-15 (whole group)` or `shard 8-15`: the CP ranks of a ring.
fn ring_label(cp: u32, r: &LayoutRing) -> String {
    if r.size >= cp {
        format!("whole group 0-{}", cp.saturating_sub(1))
    } else {
        shard_label(CpGroup {
            first: r.first,
            size: r.size,
        })
    }
}

/// The layout as JSON: config, GPU, token counts, loss weights, spans (which double as the
/// position-id ranges: buffer offsets `offset..offset+len+pad` hold positions
/// `start..start+len+pad`, the last `pad` of them padding; a sharded span's `chunk` counts
/// the `2g` chunks of its ring of `g` ranks, and `ring` indexes `rings`, -1 for a local
/// or chunked span), the varlen metadata of the local and sharded groups, the rings of the
/// sharded group (`first`, `size`, and the `seqs` sequences from `offset` in the sharded
/// `cu_seqlens`: one CP attention call per ring), and the chunked group: its token counts and
/// its chunk passes in the order they run (chunk `index` of `count` of sequence `seq` on the
/// group `first`/`size`, `spans` spans from `span`, `tokens` buffer tokens from `offset`). A
/// chunked span's `chunk` is -2 for a whole chunk on one GPU, else its zigzag piece `0..2g`.
pub fn layout_json(cfg: &Config, g: &GpuLayout) -> String {
    let l = &g.layout;
    let mut out = String::with_capacity(256 + 96 * g.spans.len());
    let _ = write!(
        out,
        "{{\"config\": {},\n \"gpu\": {{\"dp\": {}, \"micro_batch\": {}, \"cp\": {}, \
         \"micro_batch_global\": {}}},\n \"tokens\": {{\"buffer\": {}, \"local\": {}, \
         \"sharded\": {}, \"chunked\": {}, \"padding\": {}, \"charged\": {}, \"bucket\": {}}},\n \
         \"loss\": {{\"tokens\": {}, \"micro_batch_tokens\": {}, \"global_tokens\": {}, \
         \"weight\": {}}},\n",
        config_json(cfg),
        l.dp_rank,
        l.micro_batch,
        l.cp_rank,
        l.micro_batch_global,
        l.tokens,
        l.local_tokens,
        l.sharded_tokens,
        l.chunked_tokens,
        l.pad_tokens,
        l.charged_tokens,
        cfg.bucket,
        l.loss_tokens,
        l.micro_batch_tokens,
        l.global_tokens,
        if l.global_tokens == 0 {
            0.0
        } else {
            f64::from(l.loss_tokens) / l.global_tokens as f64
        }
    );
    out.push_str(" \"spans\": [");
    for (i, s) in g.spans.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n   ");
        }
        let ring = g.ring_of(i).map_or(-1, |k| k as i64);
        let _ = write!(
            out,
            "{{\"seq\": {}, \"group\": \"{}\", \"ring\": {ring}, \"chunk\": {}, \"offset\": {}, \
             \"start\": {}, \"len\": {}, \"pad\": {}}}",
            s.seq,
            g.group_of(i).name(),
            s.chunk,
            s.offset,
            s.start,
            s.len,
            s.pad
        );
    }
    out.push_str("],\n \"position_ranges\": [");
    for (i, s) in g.spans.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "[{}, {}, {}]", s.offset, s.start, s.len + s.pad);
    }
    out.push_str("],\n \"local\": {\"cu_seqlens\": ");
    push_list(&mut out, &g.local_cu_seqlens);
    out.push_str(", \"cu_seqlens_padded\": ");
    push_list(&mut out, &g.local_cu_seqlens_padded);
    let _ = write!(
        out,
        ", \"max_seqlen\": {}}},\n \"sharded\": {{\"cu_seqlens\": ",
        l.local_max_seqlen
    );
    push_list(&mut out, &g.sharded_cu_seqlens);
    out.push_str(", \"cu_seqlens_padded\": ");
    push_list(&mut out, &g.sharded_cu_seqlens_padded);
    out.push_str(", \"rank_cu_seqlens\": ");
    push_list(&mut out, &g.rank_cu_seqlens);
    let _ = write!(
        out,
        ", \"max_seqlen\": {}, \"max_seqlen_padded\": {}, \"rank_max_seqlen\": {}, \
         \"buffer_offset\": {}}},\n \"rings\": [",
        l.sharded_max_seqlen, l.sharded_max_seqlen_padded, l.rank_max_seqlen, l.local_tokens
    );
    for (i, r) in g.rings.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(
            out,
            "{{\"first\": {}, \"size\": {}, \"offset\": {}, \"seqs\": {}}}",
            r.first, r.size, r.offset, r.seqs
        );
    }
    let _ = write!(
        out,
        "],\n \"chunked\": {{\"seqs\": {}, \"tokens\": {}, \"max_pass_tokens\": {}, \
         \"buffer_offset\": {}, \"passes\": [",
        l.chunked_seqs,
        l.chunked_tokens,
        l.chunk_max_tokens,
        l.local_tokens + l.sharded_tokens
    );
    for (i, p) in g.chunk_passes.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n   ");
        }
        let _ = write!(
            out,
            "{{\"seq\": {}, \"index\": {}, \"count\": {}, \"first\": {}, \"size\": {}, \
             \"start\": {}, \"len\": {}, \"padded\": {}, \"span\": {}, \"spans\": {}, \
             \"offset\": {}, \"tokens\": {}}}",
            p.seq,
            p.index,
            p.count,
            p.first,
            p.size,
            p.start,
            p.len,
            p.padded,
            p.span,
            p.spans,
            p.offset,
            p.tokens
        );
    }
    out.push_str("]}}\n");
    out
}

/// The layout as a human-readable table: one line per span, then the varlen metadata. A GPU
/// that rides a sub-group ring labels those spans with the ring's ranks (`shard 8-15`) and
/// their chunk within the ring's `2g` (`3/8`), and gets a line per ring.
pub fn layout_table(cfg: &Config, g: &GpuLayout) -> String {
    let l = &g.layout;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "GPU DP {} / micro-batch {} / CP {} (global micro-batch {}) | shard padding {} | CP {}",
        l.dp_rank,
        l.micro_batch,
        l.cp_rank,
        l.micro_batch_global,
        cfg.shard_padding.name(),
        cfg.cp
    );
    let chunked = if l.chunked_tokens > 0 {
        format!(" + chunked {}", l.chunked_tokens)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "buffer {} tokens = local {} + sharded {}{chunked} (padding {}) | charged {} of \
         BucketSize {}",
        l.tokens, l.local_tokens, l.sharded_tokens, l.pad_tokens, l.charged_tokens, cfg.bucket
    );
    let _ = writeln!(
        out,
        "loss: {} real tokens here, {} in the micro-batch, {} in the global batch (weight {:.6})",
        l.loss_tokens,
        l.micro_batch_tokens,
        l.global_tokens,
        if l.global_tokens == 0 {
            0.0
        } else {
            f64::from(l.loss_tokens) / l.global_tokens as f64
        }
    );
    let _ = writeln!(
        out,
        "| group | seq | chunk | buffer offsets | positions | real | pad |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for (i, s) in g.spans.iter().enumerate() {
        let n = s.len + s.pad;
        let ring = g.ring_of(i).and_then(|k| g.rings.get(k));
        let group = g.group_of(i);
        let (label, chunk) = match (group, ring) {
            (SpanGroup::Chunked { pass }, _) => chunked_label(g.chunk_passes.get(pass), s),
            (SpanGroup::Local, _) => (group.name().to_string(), "-".to_string()),
            (_, Some(r)) if r.size < cfg.cp => {
                (ring_label(cfg.cp, r), format!("{}/{}", s.chunk, 2 * r.size))
            }
            _ => (group.name().to_string(), s.chunk.to_string()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}..{} | {}..{} | {} | {} |",
            label,
            s.seq,
            chunk,
            s.offset,
            s.offset + n,
            s.start,
            s.start + n,
            s.len,
            s.pad
        );
    }
    let _ = writeln!(
        out,
        "local:   cu_seqlens {:?} max_seqlen {} | cu_seqlens_padded {:?}",
        g.local_cu_seqlens, l.local_max_seqlen, g.local_cu_seqlens_padded
    );
    let _ = writeln!(
        out,
        "sharded: cu_seqlens {:?} max_seqlen {} | cu_seqlens_padded {:?} max_seqlen_padded {}",
        g.sharded_cu_seqlens,
        l.sharded_max_seqlen,
        g.sharded_cu_seqlens_padded,
        l.sharded_max_seqlen_padded
    );
    let _ = writeln!(
        out,
        "         rank_cu_seqlens {:?} rank_max_seqlen {} (buffer offset {})",
        g.rank_cu_seqlens, l.rank_max_seqlen, l.local_tokens
    );
    if l.chunked_seqs > 0 {
        let _ = writeln!(
            out,
            "chunked: {} sequences as {} passes, run in order after the local and sharded \
             groups | {} tokens from buffer offset {}, at most {} per pass (ChunkSize {}, K {})",
            l.chunked_seqs,
            l.chunk_passes,
            l.chunked_tokens,
            l.local_tokens + l.sharded_tokens,
            l.chunk_max_tokens,
            cfg.chunking.size,
            cfg.chunking.keep
        );
    }
    if g.has_subgroup_ring(cfg.cp) {
        let rings: Vec<String> = g
            .rings
            .iter()
            .map(|r| {
                format!(
                    "{}: sequences {}..{}",
                    ring_label(cfg.cp, r),
                    r.offset,
                    r.offset + r.seqs
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "rings:   {} (one CP attention call per ring, on its ranks, over its part of the \
             sharded cu_seqlens)",
            rings.join(" | ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::{ModelShape, ShardPadding};
    use skrull_kit::OwnedBuffers;

    #[test]
    fn parses_three_numbers() {
        assert_eq!(
            parse_gpu("1, 2,3"),
            Ok(Gpu {
                dp_rank: 1,
                micro_batch: 2,
                cp_rank: 3
            })
        );
        for bad in ["1,2", "1,2,3,4", "a,b,c", "-1,0,0", ""] {
            assert!(parse_gpu(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rings_and_ring_relative_chunks() {
        let mut cfg = Config::new(1, 8, 1024, ModelShape::QWEN2_5_0_5B);
        cfg.shard_padding = ShardPadding::Zigzag;
        let lengths = [1600u32, 800, 400, 100, 50];
        let p = |cp_rank, cp_first, cp_size| skrull_core::Placement {
            cp_rank,
            cp_first,
            cp_size,
            ..skrull_core::Placement::default()
        };
        let placements = [
            p(-1, 0, 0),
            p(-1, 4, 4),
            p(-1, 4, 2),
            p(5, 0, 0),
            p(-1, 0, 2),
        ];
        let rebuilt = crate::rebuild::RebuiltPlan::new(&cfg, &lengths, &placements);
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();
        let g = compute(&cfg, &lengths, &plan, parse_gpu("0,0,5").unwrap()).unwrap();
        let ring = |first, size, offset, seqs| LayoutRing {
            first,
            size,
            offset,
            seqs,
        };
        assert_eq!(
            g.rings,
            [ring(0, 8, 0, 1), ring(4, 4, 1, 1), ring(4, 2, 2, 1)]
        );
        assert_eq!(
            (0..g.spans.len()).map(|i| g.ring_of(i)).collect::<Vec<_>>(),
            [None, Some(0), Some(0), Some(1), Some(1), Some(2), Some(2)]
        );
        let v: serde_json::Value = serde_json::from_str(&layout_json(&cfg, &g)).unwrap();
        assert_eq!(
            v["rings"],
            serde_json::json!([
                {"first": 0, "size": 8, "offset": 0, "seqs": 1},
                {"first": 4, "size": 4, "offset": 1, "seqs": 1},
                {"first": 4, "size": 2, "offset": 2, "seqs": 1}
            ])
        );
        let chunks: Vec<(i64, i64)> = v["spans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["ring"].as_i64().unwrap(), s["chunk"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            chunks,
            [(-1, -1), (0, 5), (0, 10), (1, 1), (1, 6), (2, 1), (2, 2)]
        );
        let table = layout_table(&cfg, &g);
        for needle in [
            "| local | 3 | - |",
            "| sharded | 0 | 5 |",
            "| sharded | 0 | 10 |",
            "| shard 4-7 | 1 | 1/8 |",
            "| shard 4-7 | 1 | 6/8 |",
            "| shard 4-5 | 2 | 1/4 |",
            "| shard 4-5 | 2 | 2/4 |",
            "rings:   whole group 0-7: sequences 0..1 | shard 4-7: sequences 1..2 | \
             shard 4-5: sequences 2..3 (",
        ] {
            assert!(table.contains(needle), "{needle}\n{table}");
        }
        // Rank 0 holds only the whole group's shard and the pair 0-1's.
        let g0 = compute(&cfg, &lengths, &plan, parse_gpu("0,0,0").unwrap()).unwrap();
        assert_eq!(g0.rings, [ring(0, 8, 0, 1), ring(0, 2, 1, 1)]);
        // Without a sub-group ring the table has no rings line; the JSON always lists them.
        let whole = Config::new(1, 4, 4, ModelShape::QWEN2_5_0_5B);
        let mut bufs = OwnedBuffers::for_batch(1, &whole);
        let plan = bufs.schedule(&whole, &[10]).unwrap();
        let g = compute(&whole, &[10], &plan, parse_gpu("0,0,1").unwrap()).unwrap();
        assert_eq!(g.rings, [ring(0, 4, 0, 1)]);
        assert!(!layout_table(&whole, &g).contains("rings:"));
    }

    #[test]
    fn chunked_group_lists_its_passes_in_json_and_table() {
        // Sequence 0 (600 tokens) runs as 3 chunks of 256 on CP rank 1 alone, sequence 1
        // (1,000 tokens) as 4 chunks on the pair 2-3, sequence 2 (100) whole on rank 1.
        let mut cfg = Config::new(1, 4, 1024, ModelShape::QWEN2_5_0_5B);
        cfg.chunking = skrull_core::Chunking::new(256, 1);
        let lengths = [600u32, 1000, 100];
        let p = |cp_rank, cp_first, cp_size| skrull_core::Placement {
            cp_rank,
            cp_first,
            cp_size,
            ..skrull_core::Placement::default()
        };
        let placements = [p(-2, 1, 1), p(-2, 2, 2), p(1, 1, 1)];
        let rebuilt = crate::rebuild::RebuiltPlan::new(&cfg, &lengths, &placements);
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();

        let g = compute(&cfg, &lengths, &plan, parse_gpu("0,0,1").unwrap()).unwrap();
        assert_eq!(
            (
                g.layout.local_seqs,
                g.layout.chunked_seqs,
                g.layout.chunk_passes
            ),
            (1, 1, 3)
        );
        let passes: Vec<(u32, u32, u32, u32, u32)> = g
            .chunk_passes
            .iter()
            .map(|c| (c.index, c.start, c.len, c.offset, c.tokens))
            .collect();
        assert_eq!(
            passes,
            [
                (0, 0, 256, 100, 256),
                (1, 256, 256, 356, 256),
                (2, 512, 88, 612, 88)
            ]
        );
        assert_eq!(
            (0..g.spans.len())
                .map(|i| g.group_of(i))
                .collect::<Vec<_>>(),
            [
                SpanGroup::Local,
                SpanGroup::Chunked { pass: 0 },
                SpanGroup::Chunked { pass: 1 },
                SpanGroup::Chunked { pass: 2 }
            ]
        );
        assert!((0..g.spans.len()).all(|i| g.ring_of(i).is_none()));
        let v: serde_json::Value = serde_json::from_str(&layout_json(&cfg, &g)).unwrap();
        assert_eq!(v["tokens"]["chunked"], 600);
        assert_eq!(v["tokens"]["buffer"], 700);
        assert_eq!(v["chunked"]["seqs"], 1);
        assert_eq!(v["chunked"]["buffer_offset"], 100);
        assert_eq!(v["chunked"]["max_pass_tokens"], 256);
        assert_eq!(v["chunked"]["passes"][2]["len"], 88);
        assert_eq!(v["chunked"]["passes"][2]["count"], 3);
        assert_eq!(v["spans"][3]["group"], "chunked");
        assert_eq!(v["spans"][3]["chunk"], -2);
        assert_eq!(v["spans"][3]["ring"], -1);
        assert_eq!(v["spans"][0]["group"], "local");
        let table = layout_table(&cfg, &g);
        for needle in [
            "buffer 700 tokens = local 100 + sharded 0 + chunked 600 (padding 0)",
            "| local | 2 | - | 0..100 | 0..100 | 100 | 0 |",
            "| chunked | 0 | 0 of 3 | 100..356 | 0..256 | 256 | 0 |",
            "| chunked | 0 | 2 of 3 | 612..700 | 512..600 | 88 | 0 |",
            "chunked: 1 sequences as 3 passes, run in order after the local and sharded groups \
             | 600 tokens from buffer offset 100, at most 256 per pass (ChunkSize 256, K 1)",
        ] {
            assert!(table.contains(needle), "{needle}\n{table}");
        }

        // Rank 3 holds zigzag pieces 1 and 2 of each of sequence 1's four chunks.
        let g = compute(&cfg, &lengths, &plan, parse_gpu("0,0,3").unwrap()).unwrap();
        assert_eq!((g.layout.chunked_seqs, g.layout.chunk_passes), (1, 4));
        assert_eq!(g.spans.len(), 8);
        assert!(
            g.chunk_passes
                .iter()
                .all(|c| (c.first, c.size, c.spans) == (2, 2, 2))
        );
        assert_eq!(
            g.spans.iter().map(|s| s.chunk).collect::<Vec<_>>(),
            [1, 2, 1, 2, 1, 2, 1, 2]
        );
        let table = layout_table(&cfg, &g);
        assert!(
            table.contains("| chunked 2-3 | 1 | 0 of 4 (1/4) |"),
            "{table}"
        );
        assert!(
            table.contains("| chunked 2-3 | 1 | 3 of 4 (2/4) |"),
            "{table}"
        );
        // Rank 0 runs nothing: no chunked group, and the JSON still has its (empty) object.
        let g = compute(&cfg, &lengths, &plan, parse_gpu("0,0,0").unwrap()).unwrap();
        assert!(g.chunk_passes.is_empty() && g.spans.is_empty());
        assert!(!layout_table(&cfg, &g).contains("chunked:"));
        let v: serde_json::Value = serde_json::from_str(&layout_json(&cfg, &g)).unwrap();
        assert_eq!(v["chunked"]["passes"], serde_json::json!([]));
    }

    #[test]
    fn json_parses_and_carries_the_worked_example() {
        let mut cfg = Config::new(1, 4, 4, ModelShape::QWEN2_5_0_5B);
        cfg.shard_padding = ShardPadding::Zigzag;
        let lengths = [10];
        let mut bufs = OwnedBuffers::for_batch(1, &cfg);
        let plan = bufs.schedule(&cfg, &lengths).unwrap();
        let gpu = parse_gpu("0,0,1").unwrap();
        let g = compute(&cfg, &lengths, &plan, gpu).unwrap();
        let v: serde_json::Value = serde_json::from_str(&layout_json(&cfg, &g)).unwrap();
        assert_eq!(v["gpu"]["cp"], 1);
        assert_eq!(v["tokens"]["buffer"], 4);
        assert_eq!(v["tokens"]["padding"], 2);
        assert_eq!(v["loss"]["tokens"], 2);
        assert_eq!(v["spans"][1]["start"], 12);
        assert_eq!(v["spans"][1]["pad"], 2);
        assert_eq!(v["position_ranges"][1], serde_json::json!([2, 12, 2]));
        assert_eq!(v["sharded"]["cu_seqlens"], serde_json::json!([0, 10]));
        assert_eq!(
            v["sharded"]["cu_seqlens_padded"],
            serde_json::json!([0, 16])
        );
        assert_eq!(v["sharded"]["rank_cu_seqlens"], serde_json::json!([0, 4]));
        assert_eq!(v["local"]["cu_seqlens"], serde_json::json!([0]));
        let table = layout_table(&cfg, &g);
        assert!(
            table.contains("| sharded | 0 | 6 | 2..4 | 12..14 | 0 | 2 |"),
            "{table}"
        );
        let err = compute(&cfg, &lengths, &plan, parse_gpu("0,1,0").unwrap()).unwrap_err();
        assert!(err.contains("runs 1 micro-batches"), "{err}");
    }
}
