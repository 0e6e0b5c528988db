/*
 * The per-GPU layout through the C ABI: the worked example N = 4, S = 10 written out by hand
 * (both shard paddings), and on random plans of every policy that the spans of all CP ranks
 * of a micro-batch tile every one of its sequences exactly once (padding accounted), that
 * cu_seqlens are monotone and end at the group's token count, that position ids match the
 * spans, and that the loss tokens of all GPUs add up to the global token count. Errors leave
 * every output untouched.
 */
#include "common.h"
#include "rng.h"

static skrull_config config(uint32_t dp, uint32_t cp, uint32_t bucket, uint32_t policy,
                            uint32_t padding) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = dp;
    c.cp = cp;
    c.bucket_tokens = bucket;
    c.policy = policy;
    c.shard_padding = padding;
    return c;
}

/* Every layout buffer, sized once with skrull_layout_sizes_max(). */
typedef struct {
    skrull_layout_capacity cap;
    guarded spans, local_cu, sharded_cu, sharded_cu_padded, rank_cu, positions, layout,
        workspace;
    skrull_layout_buffers bufs;
} layout_store;

static void layout_init(layout_store *l, const skrull_config *cfg, size_t n) {
    if (skrull_layout_sizes_max(cfg, n, &l->cap) != SKRULL_STATUS_OK) {
        fprintf(stderr, "skrull_layout_sizes_max failed\n");
        exit(2);
    }
    l->spans = guarded_alloc(l->cap.spans * sizeof(skrull_span));
    l->local_cu = guarded_alloc(l->cap.local_cu_seqlens * sizeof(int32_t));
    l->sharded_cu = guarded_alloc(l->cap.sharded_cu_seqlens * sizeof(int32_t));
    l->sharded_cu_padded = guarded_alloc(l->cap.sharded_cu_seqlens * sizeof(int32_t));
    l->rank_cu = guarded_alloc(l->cap.sharded_cu_seqlens * sizeof(int32_t));
    l->positions = guarded_alloc(l->cap.positions * sizeof(int32_t));
    l->layout = guarded_alloc(sizeof(skrull_layout));
    l->workspace = guarded_alloc(l->cap.workspace_bytes);
    memset(&l->bufs, 0, sizeof l->bufs);
    l->bufs.struct_size = sizeof l->bufs;
    l->bufs.spans = (skrull_span *)l->spans.data;
    l->bufs.spans_len = l->cap.spans;
    l->bufs.local_cu_seqlens = (int32_t *)l->local_cu.data;
    l->bufs.local_cu_seqlens_len = l->cap.local_cu_seqlens;
    l->bufs.sharded_cu_seqlens = (int32_t *)l->sharded_cu.data;
    l->bufs.sharded_cu_seqlens_len = l->cap.sharded_cu_seqlens;
    l->bufs.sharded_cu_seqlens_padded = (int32_t *)l->sharded_cu_padded.data;
    l->bufs.sharded_cu_seqlens_padded_len = l->cap.sharded_cu_seqlens;
    l->bufs.rank_cu_seqlens = (int32_t *)l->rank_cu.data;
    l->bufs.rank_cu_seqlens_len = l->cap.sharded_cu_seqlens;
    l->bufs.positions = (int32_t *)l->positions.data;
    l->bufs.positions_len = l->cap.positions;
    l->bufs.layout = (skrull_layout *)l->layout.data;
}

static void layout_free(layout_store *l) {
    free(l->spans.base);
    free(l->local_cu.base);
    free(l->sharded_cu.base);
    free(l->sharded_cu_padded.base);
    free(l->rank_cu.base);
    free(l->positions.base);
    free(l->layout.base);
    free(l->workspace.base);
}

static skrull_status layout_fill(layout_store *l, const skrull_config *cfg,
                                 const uint32_t *lengths, size_t n, const plan_store *s,
                                 skrull_gpu gpu) {
    return skrull_layout_fill(cfg, lengths, n, &s->bufs, gpu, l->workspace.data,
                              l->cap.workspace_bytes, &l->bufs);
}

/* Whether every output (not the workspace) still holds only the guard pattern. */
static int layout_untouched(const layout_store *l) {
    const guarded *g[] = {&l->spans,   &l->local_cu,  &l->sharded_cu, &l->sharded_cu_padded,
                          &l->rank_cu, &l->positions, &l->layout};
    for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) {
        for (size_t i = 0; i < g[k]->bytes + 2 * GUARD; i++) {
            if (g[k]->base[i] != PATTERN) {
                return 0;
            }
        }
    }
    return 1;
}

static int layout_guards_intact(const layout_store *l) {
    return guards_intact(&l->spans) && guards_intact(&l->local_cu) &&
           guards_intact(&l->sharded_cu) && guards_intact(&l->sharded_cu_padded) &&
           guards_intact(&l->rank_cu) && guards_intact(&l->positions) &&
           guards_intact(&l->layout) && guards_intact(&l->workspace);
}

/* One span by hand: chunk, buffer offset, first position, real tokens, padding. */
typedef struct {
    int32_t chunk;
    uint32_t offset, start, len, pad;
} want_span;

static int span_is(const skrull_span *s, uint32_t seq, want_span w) {
    return s->seq == seq && s->chunk == w.chunk && s->offset == w.offset &&
           s->start == w.start && s->len == w.len && s->pad == w.pad;
}

/*
 * N = 4, S = 10, no padding. q = 10 / 8 = 1, R = 10 % 8 = 2: chunks 0 and 1 get 2 tokens,
 * the others 1. Chunks 0..7 cover [0,2) [2,4) [4,5) [5,6) [6,7) [7,8) [8,9) [9,10); rank r
 * holds chunks r and 7 - r:
 *
 *   position  0 1 | 2 3 | 4 | 5 | 6 | 7 | 8 | 9
 *   rank       0  |  1  | 2 | 3 | 3 | 2 | 1 | 0
 */
static void worked_example_unpadded(void) {
    const uint32_t lengths[] = {10};
    const want_span want[4][2] = {
        {{0, 0, 0, 2, 0}, {7, 2, 9, 1, 0}},
        {{1, 0, 2, 2, 0}, {6, 2, 8, 1, 0}},
        {{2, 0, 4, 1, 0}, {5, 1, 7, 1, 0}},
        {{3, 0, 5, 1, 0}, {4, 1, 6, 1, 0}},
    };
    const int32_t positions[4][3] = {{0, 1, 9}, {2, 3, 8}, {4, 7, 0}, {5, 6, 0}};
    const uint32_t tokens[4] = {3, 3, 2, 2};
    skrull_config c = config(1, 4, 3, SKRULL_POLICY_SKRULL, SKRULL_SHARD_PADDING_NONE);
    plan_store s;
    store_init(&s, 1, 1, 4);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 1), SKRULL_STATUS_OK);
    CHECK(s.bufs.placements[0].cp_rank == SKRULL_SHARDED);
    layout_store l;
    layout_init(&l, &c, 1);
    CHECK(l.cap.spans == 2 && l.cap.local_cu_seqlens == 2 && l.cap.positions == 3);
    for (uint32_t r = 0; r < 4; r++) {
        skrull_gpu gpu = {0, 0, r};
        CHECK_STATUS(layout_fill(&l, &c, lengths, 1, &s, gpu), SKRULL_STATUS_OK);
        const skrull_layout *o = l.bufs.layout;
        CHECK(o->spans == 2 && o->local_seqs == 0 && o->sharded_seqs == 1);
        CHECK(span_is(&l.bufs.spans[0], 0, want[r][0]));
        CHECK(span_is(&l.bufs.spans[1], 0, want[r][1]));
        CHECK(o->tokens == tokens[r] && o->pad_tokens == 0 && o->loss_tokens == tokens[r]);
        CHECK(o->charged_tokens == 3 && s.bufs.rank_tokens[r] == 3);
        for (uint32_t k = 0; k < tokens[r]; k++) {
            CHECK(l.bufs.positions[k] == positions[r][k]);
        }
        CHECK(l.bufs.local_cu_seqlens[0] == 0);
        CHECK(l.bufs.sharded_cu_seqlens[0] == 0 && l.bufs.sharded_cu_seqlens[1] == 10);
        CHECK(l.bufs.sharded_cu_seqlens_padded[1] == 10);
        CHECK(l.bufs.rank_cu_seqlens[0] == 0 && l.bufs.rank_cu_seqlens[1] == (int32_t)tokens[r]);
        CHECK(o->local_max_seqlen == 0 && o->sharded_max_seqlen == 10);
        CHECK(o->rank_max_seqlen == (int32_t)tokens[r]);
        CHECK(o->micro_batch_tokens == 10 && o->global_tokens == 10 && o->_reserved == 0);
        CHECK(layout_guards_intact(&l));
    }
    layout_free(&l);
    store_free(&s);
}

/*
 * N = 4, S = 10, zigzag padding (TransformerEngine THD): P = 2N * ceil(S / 2N) = 16, chunk k
 * is [2k, 2k + 2); positions 10..15 are padding, in chunks 5, 6, 7 (the back chunks of ranks
 * 2, 1, 0). Every rank carries 4 tokens, which is what the budget charged.
 */
static void worked_example_zigzag(void) {
    const uint32_t lengths[] = {10};
    const want_span want[4][2] = {
        {{0, 0, 0, 2, 0}, {7, 2, 14, 0, 2}},
        {{1, 0, 2, 2, 0}, {6, 2, 12, 0, 2}},
        {{2, 0, 4, 2, 0}, {5, 2, 10, 0, 2}},
        {{3, 0, 6, 2, 0}, {4, 2, 8, 2, 0}},
    };
    const int32_t positions[4][4] = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11},
                                     {6, 7, 8, 9}};
    skrull_config c = config(1, 4, 4, SKRULL_POLICY_SKRULL, SKRULL_SHARD_PADDING_ZIGZAG);
    plan_store s;
    store_init(&s, 1, 1, 4);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 1), SKRULL_STATUS_OK);
    layout_store l;
    layout_init(&l, &c, 1);
    uint32_t loss = 0;
    for (uint32_t r = 0; r < 4; r++) {
        skrull_gpu gpu = {0, 0, r};
        CHECK_STATUS(layout_fill(&l, &c, lengths, 1, &s, gpu), SKRULL_STATUS_OK);
        const skrull_layout *o = l.bufs.layout;
        CHECK(span_is(&l.bufs.spans[0], 0, want[r][0]));
        CHECK(span_is(&l.bufs.spans[1], 0, want[r][1]));
        for (uint32_t k = 0; k < 4; k++) {
            CHECK(l.bufs.positions[k] == positions[r][k]);
        }
        CHECK(o->tokens == 4 && o->charged_tokens == 4);
        CHECK(o->pad_tokens == (r == 3 ? 0u : 2u));
        CHECK(l.bufs.sharded_cu_seqlens[1] == 10 && l.bufs.sharded_cu_seqlens_padded[1] == 16);
        CHECK(l.bufs.rank_cu_seqlens[1] == 4 && o->rank_max_seqlen == 4);
        CHECK(o->sharded_max_seqlen_padded == 16);
        loss += o->loss_tokens;
    }
    CHECK(loss == 10);
    layout_free(&l);
    store_free(&s);
}

/* Whether the cu_seqlens array `cu[0..=count]` starts at 0, is monotone and ends at `end`. */
static int cu_ok(const int32_t *cu, uint32_t count, uint32_t end) {
    if (cu[0] != 0 || (uint32_t)cu[count] != end) {
        return 0;
    }
    for (uint32_t k = 0; k < count; k++) {
        if (cu[k + 1] < cu[k]) {
            return 0;
        }
    }
    return 1;
}

/*
 * For every micro-batch of a random plan: the spans of all CP ranks tile every sequence. Each
 * position 0..P-1 of a sharded sequence (P its padded length) and 0..S-1 of a local one is
 * covered exactly once over all ranks, real tokens exactly at positions < S.
 */
static void spans_tile_every_micro_batch(void) {
    const struct { size_t n; uint32_t dp, cp, bucket; } cases[] = {
        {60, 2, 4, 512}, {40, 1, 8, 300}, {25, 3, 3, 200}, {30, 2, 1, 900}, {7, 4, 2, 64},
    };
    uint32_t lengths[64];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (uint32_t policy = 0; policy <= SKRULL_POLICY_BALANCED; policy++) {
            for (uint32_t padding = 0; padding < 2; padding++) {
                rng_state = 77 + 10 * k + policy;
                size_t n = cases[k].n;
                uint32_t cp = cases[k].cp, max = cp * cases[k].bucket;
                for (size_t i = 0; i < n; i++) {
                    uint64_t r = next_u64();
                    lengths[i] = 1 + (uint32_t)((r >> 8) % (r % 4 == 0 ? max : 60));
                }
                skrull_config c = config(cases[k].dp, cp, cases[k].bucket, policy, padding);
                plan_store s;
                store_init(&s, n, c.dp, cp);
                CHECK_STATUS(store_schedule(&s, &c, lengths, n), SKRULL_STATUS_OK);
                layout_store l;
                layout_init(&l, &c, n);
                /* cover[seq] counts how often each (padded) position of seq is held. */
                uint32_t *offset = (uint32_t *)calloc(n + 1, sizeof *offset);
                for (size_t i = 0; i < n; i++) {
                    offset[i + 1] = offset[i] + lengths[i] + 2 * cp;
                }
                unsigned char *cover = (unsigned char *)calloc(offset[n], 1);
                if (offset == NULL || cover == NULL) {
                    exit(2);
                }
                uint64_t loss = 0;
                int bad = 0;
                uint32_t g = 0;
                for (uint32_t d = 0; d < c.dp; d++) {
                    for (uint32_t m = 0; m < s.bufs.micro_batches_per_dp[d]; m++, g++) {
                        for (uint32_t r = 0; r < cp; r++) {
                            skrull_gpu gpu = {d, m, r};
                            skrull_status st = layout_fill(&l, &c, lengths, n, &s, gpu);
                            bad += st != SKRULL_STATUS_OK;
                            if (st != SKRULL_STATUS_OK) {
                                continue;
                            }
                            const skrull_layout *o = l.bufs.layout;
                            const skrull_span *sp = l.bufs.spans;
                            bad += o->micro_batch_global != g;
                            bad += o->charged_tokens != s.bufs.rank_tokens[g * cp + r];
                            bad += o->charged_tokens > c.bucket_tokens;
                            bad += !cu_ok(l.bufs.local_cu_seqlens, o->local_seqs,
                                          o->local_tokens);
                            bad += !cu_ok(l.bufs.rank_cu_seqlens, o->sharded_seqs,
                                          o->sharded_tokens);
                            bad += !cu_ok(l.bufs.sharded_cu_seqlens, o->sharded_seqs,
                                          (uint32_t)l.bufs.sharded_cu_seqlens[o->sharded_seqs]);
                            uint32_t at = 0, pads = 0;
                            for (uint32_t k2 = 0; k2 < o->spans; k2++) {
                                uint32_t seq = sp[k2].seq, w = sp[k2].len + sp[k2].pad;
                                bad += sp[k2].offset != at;
                                bad += (k2 < o->local_seqs) != (sp[k2].chunk == -1);
                                bad += s.bufs.placements[seq].micro_batch != m ||
                                       s.bufs.placements[seq].dp_rank != d;
                                /* Real tokens end by S; padding follows only at S. */
                                uint32_t end = sp[k2].start + sp[k2].len;
                                bad += sp[k2].len != 0 && end > lengths[seq];
                                bad += sp[k2].pad != 0 && sp[k2].len != 0 && end != lengths[seq];
                                for (uint32_t i = 0; i < w; i++) {
                                    uint32_t pos = sp[k2].start + i;
                                    bad += l.bufs.positions[at + i] != (int32_t)pos;
                                    bad += (pos < lengths[seq]) != (i < sp[k2].len);
                                    if (pos < lengths[seq] + 2 * cp) {
                                        cover[offset[seq] + pos]++;
                                    } else {
                                        bad++;
                                    }
                                }
                                at += w;
                                pads += sp[k2].pad;
                            }
                            bad += at != o->tokens || pads != o->pad_tokens;
                            bad += o->local_tokens + o->sharded_tokens != o->tokens;
                            bad += o->loss_tokens != o->tokens - o->pad_tokens;
                            bad += o->global_tokens != s.bufs.summary->total_tokens;
                            loss += o->loss_tokens;
                        }
                    }
                }
                /* Every real position exactly once; padding only past S, at most once. */
                for (size_t i = 0; i < n; i++) {
                    for (uint32_t p = 0; p < lengths[i] + 2 * cp; p++) {
                        unsigned char v = cover[offset[i] + p];
                        bad += p < lengths[i] ? v != 1 : v > 1;
                    }
                }
                bad += loss != s.bufs.summary->total_tokens;
                CHECK(bad == 0);
                if (bad != 0) {
                    fprintf(stderr, "case %zu policy %u padding %u: %d violations\n", k,
                            (unsigned)policy, (unsigned)padding, bad);
                }
                CHECK(layout_guards_intact(&l) && all_guards_intact(&s));
                free(offset);
                free(cover);
                layout_free(&l);
                store_free(&s);
            }
        }
    }
}

static void errors_write_nothing(void) {
    const uint32_t lengths[] = {12, 40, 7, 33, 25, 3, 18, 9, 21, 30, 2, 16};
    skrull_config c = config(2, 2, 24, SKRULL_POLICY_SKRULL, SKRULL_SHARD_PADDING_NONE);
    plan_store s;
    store_init(&s, 12, 2, 2);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 12), SKRULL_STATUS_OK);
    layout_store l;
    layout_init(&l, &c, 12);
    skrull_gpu far = {0, s.bufs.micro_batches_per_dp[0], 0};
    CHECK_STATUS(layout_fill(&l, &c, lengths, 12, &s, far), SKRULL_STATUS_NO_SUCH_GPU);
    skrull_gpu no_rank = {0, 0, 2};
    CHECK_STATUS(layout_fill(&l, &c, lengths, 12, &s, no_rank), SKRULL_STATUS_NO_SUCH_GPU);
    CHECK(layout_untouched(&l));
    /* A plan edited after skrull_schedule() is refused. */
    skrull_gpu gpu = {0, 0, 0};
    s.bufs.members[0] = s.bufs.members[1];
    CHECK_STATUS(layout_fill(&l, &c, lengths, 12, &s, gpu), SKRULL_STATUS_PLAN_INVALID);
    CHECK(layout_untouched(&l));
    CHECK_STATUS(store_schedule(&s, &c, lengths, 12), SKRULL_STATUS_OK);
    /* Too small an output, then NULL arguments. */
    l.bufs.local_cu_seqlens_len = 0;
    CHECK_STATUS(layout_fill(&l, &c, lengths, 12, &s, gpu), SKRULL_STATUS_OUTPUT_TOO_SMALL);
    l.bufs.local_cu_seqlens_len = l.cap.local_cu_seqlens;
    CHECK_STATUS(skrull_layout_fill(&c, lengths, 12, NULL, gpu, l.workspace.data,
                                    l.cap.workspace_bytes, &l.bufs),
                 SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_layout_fill(&c, lengths, 12, &s.bufs, gpu, l.workspace.data, 8, &l.bufs),
                 SKRULL_STATUS_WORKSPACE_TOO_SMALL);
    CHECK(layout_untouched(&l));
    /* The exact sizes of one GPU, and success after all that. */
    skrull_layout_capacity exact;
    CHECK_STATUS(skrull_layout_sizes(&c, lengths, 12, &s.bufs, gpu, l.workspace.data,
                                     l.cap.workspace_bytes, &exact),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(layout_fill(&l, &c, lengths, 12, &s, gpu), SKRULL_STATUS_OK);
    CHECK(exact.spans == l.bufs.layout->spans && exact.positions == l.bufs.layout->tokens);
    CHECK(exact.local_cu_seqlens == l.bufs.layout->local_seqs + 1u);
    CHECK(exact.sharded_cu_seqlens == l.bufs.layout->sharded_seqs + 1u);
    CHECK(exact.workspace_bytes == l.cap.workspace_bytes);
    CHECK(layout_guards_intact(&l));
    layout_free(&l);
    store_free(&s);
}

int main(void) {
    CHECK(sizeof(skrull_span) == 24 && sizeof(skrull_gpu) == 12);
    CHECK(sizeof(skrull_layout) == 88 && sizeof(skrull_layout_capacity) == 5 * sizeof(size_t));
    worked_example_unpadded();
    worked_example_zigzag();
    spans_tile_every_micro_batch();
    errors_write_nothing();
    return report("layout");
}
