//! Properties of the per-GPU layout (`skrull_core::plan::layout`) over random plans of every policy
//! and both shard paddings: spans tile every scheduled sequence exactly once, zigzag chunks
//! balance causal work, `cu_seqlens` and position ids agree with the spans, per-GPU tokens
//! match the plan's budget accounting, and loss weights sum to the global token count. With
//! chunking on (policy `chunkflow`, and hand-made plans that chunk sequences on groups of every
//! size), every chunk of every chunked sequence is tiled once by its group, in order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is a test failure

use quickcheck::{Arbitrary, Gen, QuickCheck};
use skrull_core::config::chunking::Chunking;
use skrull_core::plan::layout::{
    self, ChunkPass, Gpu, LOCAL_CHUNK, Layout, LayoutBuffers, LayoutError, LayoutRing, LayoutSizes,
    Span, WHOLE_CHUNK, zigzag_chunk,
};
use skrull_core::plan::{CHUNKED, CpGroup, MicroBatch, PlanParts, SHARDED};
use skrull_core::{Config, ModelShape, Placement, Plan, Policy, Setup, ShardPadding};
use skrull_kit::OwnedBuffers;
use std::sync::atomic::{AtomicU64, Ordering};

/// Chunked sequences laid out by the random test: on one GPU, on a group, by `chunkflow`.
static COVERED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// The prepared setup of a configuration the test knows is valid.
fn setup_of(cfg: &Config) -> Setup {
    Setup::single_use(cfg).expect("a valid test configuration")
}

/// A random batch and configuration whose BucketSize fits every sequence sharded.
#[derive(Debug, Clone)]
struct Case {
    dp: u32,
    cp: u32,
    slack: u32,
    policy: Policy,
    padding: ShardPadding,
    pad_multiple: u32,
    pad_local: bool,
    lockstep: bool,
    /// ChunkSize (0: chunking off unless the policy is `chunkflow`, which gets 48) and K.
    chunk_size: u32,
    keep: u32,
    /// Lay out a hand-made plan instead (with chunking on): one byte per sequence picks its
    /// placement and micro-batch.
    handmade: Option<Vec<u8>>,
    lengths: Vec<u32>,
}

impl Case {
    fn config(&self) -> Config {
        let mut cfg = Config::new(self.dp, self.cp, 1, ModelShape::QWEN2_5_0_5B);
        cfg.policy = self.policy;
        cfg.shard_padding = self.padding;
        cfg.pad_multiple = self.pad_multiple;
        cfg.pad_local = self.pad_local;
        cfg.lockstep = self.lockstep;
        let size = match (self.chunk_size, self.policy) {
            (0, Policy::ChunkFlow) => 48,
            (s, _) => s,
        };
        if size != 0 {
            cfg.chunking = Chunking::new(size, self.keep);
        }
        let budget = cfg.budget();
        let need = self
            .lengths
            .iter()
            .map(|&s| {
                let mut need = u64::from(cfg.shard_tokens(s));
                if cfg.chunking.can_chunk(s) {
                    for g in chunk_group_sizes(cfg.cp) {
                        need = need.max(budget.chunked(&cfg.chunking, s, g));
                    }
                }
                need as u32
            })
            .max()
            .unwrap_or(1);
        cfg.bucket = need + self.slack;
        cfg
    }
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let n = usize::arbitrary(g) % 25;
        let lengths = (0..n)
            .map(|_| {
                let cap = *g.choose(&[8u32, 64, 64, 700]).unwrap_or(&64);
                1 + u32::arbitrary(g) % cap
            })
            .collect();
        Case {
            dp: 1 + u32::arbitrary(g) % 4,
            cp: *g.choose(&[1u32, 2, 3, 4, 4, 8, 8]).unwrap_or(&4),
            slack: *g.choose(&[0u32, 1, 7, 40, 300]).unwrap_or(&0),
            policy: *g.choose(&Policy::ALL).unwrap_or(&Policy::Skrull),
            padding: *g
                .choose(&[ShardPadding::None, ShardPadding::Zigzag])
                .unwrap_or(&ShardPadding::None),
            pad_multiple: *g.choose(&[1u32, 1, 1, 2, 4, 8, 6]).unwrap_or(&1),
            pad_local: bool::arbitrary(g),
            lockstep: bool::arbitrary(g),
            chunk_size: *g.choose(&[0u32, 0, 0, 5, 16, 64, 200]).unwrap_or(&0),
            keep: 1 + u32::arbitrary(g) % 3,
            handmade: bool::arbitrary(g).then(|| (0..n).map(|_| u8::arbitrary(g)).collect()),
            lengths,
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Case>> {
        let base = self.clone();
        Box::new(self.lengths.shrink().filter_map(move |lengths| {
            (!lengths.contains(&0)).then(|| Case {
                lengths,
                ..base.clone()
            })
        }))
    }
}

/// The sizes of the groups a chunked sequence may run on: 1, the powers of two dividing `cp`,
/// and `cp`.
fn chunk_group_sizes(cp: u32) -> Vec<u32> {
    let mut sizes: Vec<u32> = (0..9)
        .map(|k| 1 << k)
        .filter(|&g| g <= cp && cp.is_multiple_of(g))
        .collect();
    if !sizes.contains(&cp) {
        sizes.push(cp);
    }
    sizes
}

/// A plan's arrays, owned.
struct Parts {
    placements: Vec<Placement>,
    micro_batches: Vec<MicroBatch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
}

impl Parts {
    fn plan(&self, cfg: &Config, lengths: &[u32]) -> Plan<'_> {
        let parts = PlanParts {
            placements: &self.placements,
            micro_batches: &self.micro_batches,
            members: &self.members,
            rank_tokens: &self.rank_tokens,
            micro_batches_per_dp: &self.per_dp,
            rollbacks: 0,
        };
        Plan::from_parts(&setup_of(cfg), lengths, parts).expect("a valid hand-made plan")
    }
}

/// A hand-made plan (chunking on): byte `b` of sequence `i` puts it chunked on a group of any
/// size (a third of the chunkable ones), sharded over the whole group, or local; micro-batch
/// `j` holds up to three consecutive sequences and runs on DP rank `j % dp`. The bucket is
/// raised to the heaviest GPU's charge.
fn handmade(cfg: &mut Config, lengths: &[u32], bytes: &[u8]) -> Parts {
    cfg.lockstep = false;
    let (cp, budget) = (cfg.cp, cfg.budget());
    let sizes = chunk_group_sizes(cp);
    let mut placements = vec![Placement::default(); lengths.len()];
    let mut batches: Vec<Vec<u32>> = Vec::new();
    for (i, &len) in lengths.iter().enumerate() {
        let b = u32::from(bytes.get(i).copied().unwrap_or(0));
        if batches.last().is_none_or(|m| m.len() > (b as usize >> 6)) {
            batches.push(Vec::new());
        }
        batches.last_mut().unwrap().push(i as u32);
        placements[i] = if cfg.chunking.can_chunk(len) && b % 3 == 0 {
            let g = sizes[(b / 3) as usize % sizes.len()];
            Placement {
                cp_rank: CHUNKED,
                cp_first: (g * (b / 7 % (cp / g))) as u16,
                cp_size: g as u16,
                ..Placement::default()
            }
        } else if b % 3 == 1 {
            Placement {
                cp_rank: SHARDED,
                ..Placement::default()
            }
        } else {
            Placement {
                cp_rank: (b / 3 % cp) as i32,
                ..Placement::default()
            }
        };
    }
    let dp = cfg.dp as usize;
    let mut parts = Parts {
        placements,
        micro_batches: Vec::new(),
        members: Vec::new(),
        rank_tokens: Vec::new(),
        per_dp: vec![0; dp],
    };
    for d in 0..dp {
        for (j, batch) in batches.iter().enumerate().skip(d).step_by(dp) {
            let index = (j / dp) as u32;
            parts.micro_batches.push(MicroBatch {
                dp_rank: d as u32,
                index,
                first: parts.members.len() as u32,
                count: batch.len() as u32,
            });
            let mut tokens = vec![0u64; cp as usize];
            for &q in batch {
                let (len, p) = (lengths[q as usize], &mut parts.placements[q as usize]);
                (p.dp_rank, p.micro_batch) = (d as u32, index);
                let group = p.group(cp);
                let charge = if p.is_chunked() {
                    budget.chunked(&cfg.chunking, len, group.size)
                } else if p.is_sharded() {
                    u64::from(budget.share(len))
                } else {
                    u64::from(budget.local(len))
                };
                for r in group.first..group.first + group.size {
                    tokens[r as usize] += charge;
                }
                parts.members.push(q);
            }
            parts.rank_tokens.extend(tokens.iter().map(|&t| t as u32));
            parts.per_dp[d] = index + 1;
        }
    }
    let peak = parts.rank_tokens.iter().copied().max().unwrap_or(0);
    cfg.bucket = cfg.bucket.max(peak);
    parts
}

/// One GPU's layout, trimmed to what `fill` wrote.
struct Owned {
    l: Layout,
    spans: Vec<Span>,
    local_cu: Vec<i32>,
    local_cu_padded: Vec<i32>,
    sharded_cu: Vec<i32>,
    sharded_cu_padded: Vec<i32>,
    rank_cu: Vec<i32>,
    positions: Vec<i32>,
    gather: Vec<i64>,
    passes: Vec<ChunkPass>,
}

/// Fills one GPU's layout into buffers of `max` sizes (allocated once per batch, as a C caller
/// would), then trims them.
fn layout_of(cfg: &Config, lengths: &[u32], plan: &Plan<'_>, gpu: Gpu, max: LayoutSizes) -> Owned {
    let mut spans = vec![Span::default(); max.spans as usize];
    let mut local_cu = vec![-1; max.local_cu_seqlens as usize];
    let mut sharded_cu = vec![-1; max.sharded_cu_seqlens as usize];
    let mut sharded_cu_padded = vec![-1; max.sharded_cu_seqlens as usize];
    let mut rank_cu = vec![-1; max.sharded_cu_seqlens as usize];
    let mut positions = vec![-1; max.positions as usize];
    let mut local_cu_padded = vec![-1; max.local_cu_seqlens as usize];
    let mut gather = vec![-2; max.positions as usize];
    let mut passes = vec![ChunkPass::default(); max.chunk_passes as usize];
    let out = LayoutBuffers {
        spans: &mut spans,
        local_cu_seqlens: &mut local_cu,
        sharded_cu_seqlens: &mut sharded_cu,
        sharded_cu_seqlens_padded: &mut sharded_cu_padded,
        rank_cu_seqlens: &mut rank_cu,
        positions: &mut positions,
        local_cu_seqlens_padded: &mut local_cu_padded,
        gather_index: &mut gather,
        rings: &mut [LayoutRing::default(); 8],
    };
    let l = layout::fill_with_passes(&setup_of(cfg), lengths, plan, gpu, out, &mut passes)
        .expect("layout of an existing GPU");
    let exact = LayoutSizes::for_gpu(&setup_of(cfg), lengths, plan, gpu).expect("sizes");
    spans.truncate(exact.spans as usize);
    local_cu.truncate(exact.local_cu_seqlens as usize);
    local_cu_padded.truncate(exact.local_cu_seqlens as usize);
    gather.truncate(exact.positions as usize);
    sharded_cu.truncate(exact.sharded_cu_seqlens as usize);
    sharded_cu_padded.truncate(exact.sharded_cu_seqlens as usize);
    rank_cu.truncate(exact.sharded_cu_seqlens as usize);
    positions.truncate(exact.positions as usize);
    passes.truncate(exact.chunk_passes as usize);
    Owned {
        l,
        spans,
        local_cu,
        local_cu_padded,
        sharded_cu,
        sharded_cu_padded,
        rank_cu,
        positions,
        gather,
        passes,
    }
}

/// Causal attention work of real tokens at positions `start..start + len`: a query at
/// position `p` attends to `p + 1` keys.
fn causal_work(start: u64, len: u64) -> u64 {
    len * start + len * (len + 1) / 2
}

fn monotone_from_zero(cu: &[i32]) -> bool {
    cu.first() == Some(&0) && cu.windows(2).all(|w| w[0] <= w[1])
}

/// Checks one GPU's layout on its own.
fn check_gpu(cfg: &Config, lengths: &[u32], plan: &Plan<'_>, o: &Owned) {
    let l = &o.l;
    let n_local = l.local_seqs as usize;
    let n_sharded = n_local + 2 * l.sharded_seqs as usize;
    assert!(o.spans.len() >= n_sharded);
    // Spans pack the buffer without gap: local group first, then pairs of chunks.
    let mut next = 0u32;
    for (i, s) in o.spans.iter().enumerate() {
        assert_eq!(s.offset, next, "span {i} of {:?}", o.spans);
        next += s.len + s.pad;
        assert_eq!(i < n_local, s.chunk == LOCAL_CHUNK);
        let len = lengths[s.seq as usize];
        if s.chunk == LOCAL_CHUNK {
            assert_eq!(
                (s.start, s.len, s.pad),
                (0, len, cfg.local_tokens(len) - len)
            );
        } else if i < n_sharded {
            let k = (i - n_local) % 2;
            let want = if k == 0 {
                l.cp_rank
            } else {
                2 * cfg.cp - 1 - l.cp_rank
            };
            assert_eq!(s.chunk as u32, want);
            assert_eq!(o.spans[n_local + (i - n_local) / 2 * 2].seq, s.seq);
            if cfg.shard_padding == ShardPadding::None && cfg.pad_multiple == 1 {
                assert_eq!(s.pad, 0);
            }
        }
    }
    assert_eq!(next, l.tokens);
    assert_eq!(
        l.tokens,
        l.local_tokens + l.sharded_tokens + l.chunked_tokens
    );
    assert_eq!(
        l.pad_tokens,
        o.spans.iter().map(|s| s.pad).sum::<u32>(),
        "padding per GPU"
    );
    assert_eq!(l.loss_tokens, l.tokens - l.pad_tokens);
    // cu_seqlens: monotone, from 0, ending at the group's (and so the buffer's) token count.
    for cu in [
        &o.local_cu,
        &o.local_cu_padded,
        &o.sharded_cu,
        &o.sharded_cu_padded,
        &o.rank_cu,
    ] {
        assert!(monotone_from_zero(cu), "{cu:?}");
    }
    assert_eq!(o.local_cu.len(), n_local + 1);
    assert_eq!(*o.local_cu_padded.last().unwrap() as u32, l.local_tokens);
    assert_eq!(*o.rank_cu.last().unwrap() as u32, l.sharded_tokens);
    assert_eq!(
        *o.local_cu_padded.last().unwrap() + *o.rank_cu.last().unwrap(),
        (l.tokens - l.chunked_tokens) as i32
    );
    for (i, s) in o.spans[..n_local].iter().enumerate() {
        assert_eq!((o.local_cu[i + 1] - o.local_cu[i]) as u32, s.len);
        assert_eq!(
            (o.local_cu_padded[i + 1] - o.local_cu_padded[i]) as u32,
            s.len + s.pad
        );
        assert_eq!(o.local_cu_padded[i] as u32, s.offset);
    }
    let mut local_max = 0;
    for s in &o.spans[..n_local] {
        local_max = local_max.max(s.len as i32);
    }
    assert_eq!(l.local_max_seqlen, local_max);
    let mut rank_max = 0;
    for (k, pair) in o.spans[n_local..n_sharded].chunks(2).enumerate() {
        let seq_len = lengths[pair[0].seq as usize];
        let part = pair.iter().map(|s| s.len + s.pad).sum::<u32>();
        rank_max = rank_max.max(part as i32);
        assert_eq!((o.rank_cu[k + 1] - o.rank_cu[k]) as u32, part);
        assert_eq!((o.sharded_cu[k + 1] - o.sharded_cu[k]) as u32, seq_len);
        assert_eq!(
            (o.sharded_cu_padded[k + 1] - o.sharded_cu_padded[k]) as u64,
            cfg.budget().padded(seq_len)
        );
        if cfg.shard_padding == ShardPadding::Zigzag {
            // TE's per-rank offsets: the padded global offsets divided by N.
            assert_eq!(o.rank_cu[k + 1], o.sharded_cu_padded[k + 1] / cfg.cp as i32);
        }
    }
    assert_eq!(l.rank_max_seqlen, rank_max);
    let chunk_charge = check_chunked_group(cfg, lengths, plan, o, n_sharded);
    // Position ids match the spans; the gather index points every real token at its place
    // in the DP rank's stream (its sequences in plan order) and marks padding.
    assert_eq!(o.positions.len() as u32, l.tokens);
    let stream = layout::dp_sequences(plan, l.dp_rank);
    let base = |seq: u32| -> i64 {
        let at = stream
            .iter()
            .position(|&q| q == seq)
            .expect("in the stream");
        stream[..at]
            .iter()
            .map(|&q| i64::from(lengths[q as usize]))
            .sum()
    };
    for s in &o.spans {
        for i in 0..s.len + s.pad {
            let at = (s.offset + i) as usize;
            assert_eq!(o.positions[at], (s.start + i) as i32);
            let want = if i < s.len {
                base(s.seq) + i64::from(s.start + i)
            } else {
                -1
            };
            assert_eq!(o.gather[at], want);
        }
    }
    // Tokens match the plan's budget accounting (the chunked group is charged its peak).
    let g = l.micro_batch_global as usize;
    let charged = plan.rank_tokens(g)[l.cp_rank as usize];
    assert_eq!(l.charged_tokens, charged);
    assert!(l.tokens - l.chunked_tokens <= cfg.bucket);
    // Each sharded sequence of padded length P takes floor or ceil(P/N) here (exactly P/N
    // with zigzag padding); the charge is ceil(P/N).
    let budget = cfg.budget();
    let slack: u32 = o.spans[n_local..n_sharded]
        .chunks(2)
        .map(|p| {
            let padded = budget.padded(lengths[p[0].seq as usize]) as u32;
            let width = p[0].len + p[0].pad + p[1].len + p[1].pad;
            assert!(width == padded / cfg.cp || width == padded.div_ceil(cfg.cp));
            if cfg.shard_padding == ShardPadding::Zigzag && cfg.cp > 1 {
                assert_eq!(width, padded / cfg.cp, "zigzag: equal shares");
            }
            padded.div_ceil(cfg.cp) - width
        })
        .sum();
    assert_eq!(
        u64::from(l.tokens - l.chunked_tokens + slack) + chunk_charge,
        u64::from(charged)
    );
}

/// Checks the chunked group (spans from `first`) against the chunk passes: passes in plan
/// order, each sequence's chunks in order, spans and offsets consecutive, each chunk laid out
/// as the layout documentation says. Returns what the budget charged for it.
fn check_chunked_group(
    cfg: &Config,
    lengths: &[u32],
    plan: &Plan<'_>,
    o: &Owned,
    first: usize,
) -> u64 {
    let (l, c, budget) = (&o.l, &cfg.chunking, cfg.budget());
    assert_eq!(o.passes.len(), l.chunk_passes as usize);
    let members = plan.members_of(&plan.micro_batches()[l.micro_batch_global as usize]);
    let mine: Vec<u32> = members
        .iter()
        .copied()
        .filter(|&q| {
            let p = plan.placements()[q as usize];
            p.is_chunked() && p.group(cfg.cp).contains(l.cp_rank)
        })
        .collect();
    assert_eq!(mine.len() as u32, l.chunked_seqs);
    let mut want = Vec::new();
    for &q in &mine {
        want.extend((0..c.count(lengths[q as usize])).map(|k| (q, k)));
    }
    let got: Vec<(u32, u32)> = o.passes.iter().map(|p| (p.seq, p.index)).collect();
    assert_eq!(
        got, want,
        "chunked sequences in plan order, chunks in order"
    );
    let (mut span, mut offset, mut most) = (first as u32, l.local_tokens + l.sharded_tokens, 0);
    for p in &o.passes {
        let len = lengths[p.seq as usize];
        let group = plan.placements()[p.seq as usize].group(cfg.cp);
        assert_eq!(
            (p.first, p.size, p.count),
            (group.first, group.size, c.count(len))
        );
        assert_eq!(
            (p.start, p.len),
            (p.index * c.size, c.chunk_len(len, p.index))
        );
        assert_eq!((p.span, p.offset), (span, offset));
        let spans = &o.spans[span as usize..(span + p.spans) as usize];
        assert_eq!(spans.iter().map(|s| s.len + s.pad).sum::<u32>(), p.tokens);
        assert!(spans.iter().all(|s| s.seq == p.seq));
        if group.size == 1 {
            assert_eq!((p.spans, p.padded), (1, cfg.local_tokens(p.len)));
            assert_eq!(
                (spans[0].chunk, spans[0].start, spans[0].len, spans[0].pad),
                (WHOLE_CHUNK, p.start, p.len, p.padded - p.len)
            );
        } else {
            let rb = budget.for_group(group.size);
            assert_eq!((p.spans, u64::from(p.padded)), (2, rb.padded(p.len)));
            let j = l.cp_rank - group.first;
            for (s, id) in spans.iter().zip([j, 2 * group.size - 1 - j]) {
                let z = zigzag_chunk(&rb, p.len, id);
                assert_eq!(
                    (s.chunk, s.start, s.len, s.pad),
                    (id as i32, p.start + z.start, z.len, z.pad)
                );
            }
        }
        span += p.spans;
        offset += p.tokens;
        most = most.max(p.tokens);
    }
    assert_eq!((span as usize, offset), (o.spans.len(), l.tokens));
    assert_eq!(l.chunk_max_tokens, most);
    mine.iter()
        .map(|&q| {
            let g = plan.placements()[q as usize].group(cfg.cp).size;
            budget.chunked(c, lengths[q as usize], g)
        })
        .sum()
}

fn prop(case: Case) {
    let mut cfg = case.config();
    let lengths = &case.lengths;
    let n = lengths.len();
    let mut bufs = OwnedBuffers::for_batch(n, &cfg);
    let parts = match &case.handmade {
        Some(bytes) if cfg.chunking.is_on() => Some(handmade(&mut cfg, lengths, bytes)),
        _ => None,
    };
    let cfg = cfg;
    let plan = match &parts {
        Some(parts) => parts.plan(&cfg, lengths),
        None => bufs.schedule_no_grow(&cfg, lengths).expect("the case fits"),
    };
    let max = LayoutSizes::max_for(n, &cfg);
    // With chunking on `max_for` is a (huge) bound: lay out with the exact sizes instead.
    let sizes = |gpu: Gpu| {
        if !cfg.chunking.is_on() {
            return max;
        }
        let s = LayoutSizes::for_gpu(&setup_of(&cfg), lengths, &plan, gpu).unwrap();
        assert!(s.spans <= max.spans && s.positions <= max.positions);
        assert!(s.chunk_passes <= max.chunk_passes && s.chunk_passes <= s.spans);
        s
    };
    let cp = cfg.cp;
    // Chunked sequences: (rank, pass, its spans) of every chunk pass seen.
    let mut passes_seen: Vec<Vec<(u32, ChunkPass, Vec<Span>)>> = vec![Vec::new(); n];
    let two_n = 2 * cp as usize;
    let global: u64 = lengths.iter().map(|&s| u64::from(s)).sum();
    let mut loss_sum = 0u64;
    // Where each sequence was seen: (local spans, chunk spans).
    let mut local_seen = vec![0u32; n];
    let mut chunks: Vec<Vec<Option<(u32, Span)>>> = vec![vec![None; two_n]; n];
    for mb in plan.micro_batches() {
        let mut mb_loss = 0u64;
        let mut mb_tokens = None;
        for r in 0..cp {
            let gpu = Gpu {
                dp_rank: mb.dp_rank,
                micro_batch: mb.index,
                cp_rank: r,
            };
            let o = layout_of(&cfg, lengths, &plan, gpu, sizes(gpu));
            check_gpu(&cfg, lengths, &plan, &o);
            for p in &o.passes {
                let spans = o.spans[p.span as usize..(p.span + p.spans) as usize].to_vec();
                passes_seen[p.seq as usize].push((r, *p, spans));
            }
            let n_sharded = (o.l.local_seqs + 2 * o.l.sharded_seqs) as usize;
            assert_eq!(o.l.global_tokens, global);
            assert_eq!(
                *mb_tokens.get_or_insert(o.l.micro_batch_tokens),
                o.l.micro_batch_tokens
            );
            mb_loss += u64::from(o.l.loss_tokens);
            for (i, s) in o.spans.iter().enumerate() {
                let q = s.seq as usize;
                let p = plan.placements()[q];
                assert_eq!((p.dp_rank, p.micro_batch), (mb.dp_rank, mb.index));
                if i >= n_sharded {
                    assert!(p.is_chunked());
                } else if s.chunk == LOCAL_CHUNK {
                    assert_eq!(p.cp_rank, r as i32);
                    local_seen[q] += 1;
                } else {
                    assert!(p.is_sharded());
                    let slot = &mut chunks[q][s.chunk as usize];
                    assert!(slot.is_none(), "chunk held twice");
                    *slot = Some((r, *s));
                }
            }
        }
        assert_eq!(Some(mb_loss), mb_tokens, "a micro-batch's real tokens");
        loss_sum += mb_loss;
        // A GPU outside the CP group does not exist.
        let bad = Gpu {
            dp_rank: mb.dp_rank,
            micro_batch: mb.index,
            cp_rank: cp,
        };
        assert!(matches!(
            LayoutSizes::for_gpu(&setup_of(&cfg), lengths, &plan, bad),
            Err(LayoutError::NoSuchGpu { .. })
        ));
    }
    assert_eq!(
        loss_sum, global,
        "loss weights sum to the global token count"
    );
    // Lockstep: micro-batches past a DP rank's listed ones are valid and empty.
    for (d, &count) in plan.micro_batches_per_dp().iter().enumerate() {
        for m in 0..count {
            if plan.find(d as u32, m).is_some() {
                continue;
            }
            assert!(
                cfg.lockstep,
                "only lockstep declares unlisted micro-batches"
            );
            for r in 0..cp {
                let gpu = Gpu {
                    dp_rank: d as u32,
                    micro_batch: m,
                    cp_rank: r,
                };
                let o = layout_of(&cfg, lengths, &plan, gpu, sizes(gpu));
                assert_eq!(o.l.micro_batch_global, layout::NO_MICRO_BATCH);
                assert_eq!((o.l.tokens, o.l.spans, o.l.loss_tokens), (0, 0, 0));
                assert_eq!((o.local_cu, o.rank_cu), (vec![0], vec![0]));
            }
        }
    }
    for (d, &count) in plan.micro_batches_per_dp().iter().enumerate() {
        let bad = Gpu {
            dp_rank: d as u32,
            micro_batch: count,
            cp_rank: 0,
        };
        assert!(matches!(
            LayoutSizes::for_gpu(&setup_of(&cfg), lengths, &plan, bad),
            Err(LayoutError::NoSuchGpu { micro_batches, .. }) if micro_batches == count
        ));
    }
    // Every scheduled sequence is tiled exactly once: whole on its rank, by its 2N chunks, or
    // chunk by chunk over its group.
    for (q, &len) in lengths.iter().enumerate() {
        let placement = plan.placements()[q];
        if placement.is_chunked() {
            assert_eq!(local_seen[q], 0);
            assert!(chunks[q].iter().all(Option::is_none));
            check_chunk_tiling(&cfg, len, placement.group(cp), &passes_seen[q]);
            let g1 = usize::from(placement.group(cp).size > 1);
            COVERED[g1].fetch_add(1, Ordering::Relaxed);
            if cfg.policy == Policy::ChunkFlow && parts.is_none() {
                COVERED[2].fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        assert!(passes_seen[q].is_empty());
        if !placement.is_sharded() {
            assert_eq!(local_seen[q], 1, "local sequence {q} held once");
            assert!(chunks[q].iter().all(Option::is_none));
            continue;
        }
        assert_eq!(local_seen[q], 0);
        let padded = cfg.budget().padded(len);
        let mut next = 0u64;
        let (mut real, mut pad) = (0u64, 0u64);
        let mut heaviest = 0u64;
        let (mut work_real, mut work_padded) = (vec![0u64; cp as usize], vec![0u64; cp as usize]);
        for (k, slot) in chunks[q].iter().enumerate() {
            let (r, s) = slot.expect("every chunk held");
            let owner = if k < cp as usize { k } else { two_n - 1 - k };
            assert_eq!(r as usize, owner, "chunk {k} on rank {owner}");
            assert_eq!(u64::from(s.start), next, "no gap, no overlap");
            assert_eq!(s, {
                let c = zigzag_chunk(&cfg.budget(), len, k as u32);
                Span {
                    start: c.start,
                    len: c.len,
                    pad: c.pad,
                    ..s
                }
            });
            // Real tokens come first; padding only past the end of the sequence.
            assert_eq!(
                u64::from(s.len),
                u64::from(len)
                    .saturating_sub(next)
                    .min(u64::from(s.len + s.pad))
            );
            next += u64::from(s.len + s.pad);
            real += u64::from(s.len);
            pad += u64::from(s.pad);
            let width = u64::from(s.len + s.pad);
            work_real[owner] += causal_work(u64::from(s.start), u64::from(s.len));
            work_padded[owner] += causal_work(u64::from(s.start), width);
            heaviest = heaviest.max(causal_work(u64::from(s.start), width));
        }
        assert_eq!(
            (next, real, pad),
            (padded, u64::from(len), padded - u64::from(len))
        );
        // Zigzag balance: the spread of causal work over ranks is within one chunk's work.
        let spread = |w: &[u64]| w.iter().max().unwrap() - w.iter().min().unwrap();
        assert!(
            spread(&work_real) <= heaviest,
            "S {len} N {cp} {:?}: {work_real:?} vs {heaviest}",
            cfg.shard_padding
        );
        if cfg.shard_padding == ShardPadding::Zigzag {
            assert_eq!(spread(&work_padded), 0, "padded chunks balance exactly");
        }
    }
}

/// The chunk passes of one chunked sequence of `len` tokens on `group`, over all its GPUs:
/// every rank of the group (and no other) runs every chunk once; each chunk's pieces tile
/// its padded range from its start, real tokens first.
fn check_chunk_tiling(
    cfg: &Config,
    len: u32,
    group: CpGroup,
    seen: &[(u32, ChunkPass, Vec<Span>)],
) {
    let c = &cfg.chunking;
    let n = c.count(len);
    assert_eq!(
        seen.len() as u32,
        n * group.size,
        "every rank of the group runs every chunk"
    );
    let mut real = 0u64;
    for k in 0..n {
        let mut pieces: Vec<Span> = Vec::new();
        let mut ranks: Vec<u32> = Vec::new();
        for (r, p, spans) in seen.iter().filter(|(_, p, _)| p.index == k) {
            ranks.push(*r);
            pieces.extend(spans);
            assert_eq!(p.start, k * c.size);
        }
        ranks.sort_unstable();
        assert_eq!(
            ranks,
            (group.first..group.first + group.size).collect::<Vec<_>>()
        );
        pieces.sort_unstable_by_key(|s| (s.start, s.len + s.pad));
        let (start, clen) = (k * c.size, c.chunk_len(len, k));
        let mut at = start;
        for s in pieces.iter().filter(|s| s.len + s.pad > 0) {
            assert_eq!(s.start, at, "chunk {k}: gap or overlap");
            // Real tokens come first, padding only past the chunk's end.
            assert_eq!(s.len, (start + clen).saturating_sub(at).min(s.len + s.pad));
            at += s.len + s.pad;
            real += u64::from(s.len);
        }
        let padded = seen.iter().find(|(_, p, _)| p.index == k).unwrap().1.padded;
        assert_eq!(at - start, padded);
    }
    assert_eq!(real, u64::from(len), "every real token once");
}

#[test]
#[cfg_attr(miri, ignore = "3,000 random plans: hours under miri")]
fn layout_properties_hold_on_random_plans() {
    QuickCheck::new()
        .tests(3000)
        .max_tests(6000)
        .quickcheck(prop as fn(Case));
    let covered = COVERED.each_ref().map(|c| c.load(Ordering::Relaxed));
    assert!(
        covered.iter().all(|&c| c >= 20),
        "chunked sequences (one GPU, group, chunkflow): {covered:?}"
    );
}

/// Chunk-level balance on its own, over many more lengths than the plans above reach.
#[test]
#[cfg_attr(miri, ignore = "64,000 chunkings: too slow under miri")]
fn zigzag_balance_over_all_small_lengths() {
    for padding in [ShardPadding::None, ShardPadding::Zigzag] {
        for cp in 1..=16u32 {
            let budget = skrull_core::config::budget::Budget::with(1, cp, padding, 1, false);
            for len in 1..=2000u32 {
                let mut work = vec![0u64; cp as usize];
                let mut heaviest = 0;
                for k in 0..2 * cp {
                    let c = zigzag_chunk(&budget, len, k);
                    let owner = if k < cp { k } else { 2 * cp - 1 - k };
                    let w = causal_work(u64::from(c.start), u64::from(c.len));
                    work[owner as usize] += w;
                    heaviest =
                        heaviest.max(causal_work(u64::from(c.start), u64::from(c.len + c.pad)));
                }
                let spread = work.iter().max().unwrap() - work.iter().min().unwrap();
                assert!(spread <= heaviest, "{padding:?} N {cp} S {len}");
            }
        }
    }
}
