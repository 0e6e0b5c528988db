/*
 * Sub-group sharding from C: skrull_config.subgroups, the cp_groups output and its read-back,
 * and the layout's rings. Until `balanced` emits sub-groups, the sub-group plan is built by
 * hand: a balanced plan on DP 1 x CP 8 whose long sharded sequence is moved onto a group of 4
 * ranks (its cp_groups entry, tokens_per_gpu, the micro-batch's rank_tokens and the summary's
 * peak rewritten as skrull_schedule() writes them). Then every GPU of the group holds exactly
 * two chunks of it, the spans of the group tile it exactly once, no other GPU holds any, and
 * every GPU's ring table names its rings in order. Errors: a misaligned or wrong-size group,
 * a sub-group without `subgroups`, a wrong tokens_per_gpu (PLAN_INVALID), cp_groups or rings
 * NULL with sub-groups (NULL_ARG), subgroups = 2 (INVALID_ENUM), and the struct_size
 * boundaries of the grown structs.
 */
#include <stddef.h>

#include "common.h"

#define CP 8
#define N 6

/* The batch: one sequence (300 tokens) longer than the BucketSize, so it is sharded. */
static const uint32_t LENGTHS[N] = {300, 20, 35, 12, 50, 9};

static skrull_config config(uint32_t subgroups) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = 1;
    c.cp = CP;
    c.bucket_tokens = 100;
    c.policy = SKRULL_POLICY_BALANCED;
    c.subgroups = subgroups;
    return c;
}

/* A plan store with its cp_groups buffer (n entries, guarded). */
typedef struct {
    plan_store s;
    guarded groups;
} group_store;

static void gstore_init(group_store *g) {
    store_init(&g->s, N, 1, CP);
    g->groups = guarded_alloc(N * sizeof(skrull_cp_group));
    g->s.bufs.cp_groups = (skrull_cp_group *)g->groups.data;
    g->s.bufs.cp_groups_len = N;
}

static void gstore_free(group_store *g) {
    store_free(&g->s);
    free(g->groups.base);
}

/* Moves sharded sequence `seq` onto ranks first .. first + size (no padding: ceil(len/g)). */
static void regroup(group_store *g, uint32_t seq, uint32_t first, uint32_t size) {
    skrull_plan_buffers *b = &g->s.bufs;
    skrull_placement *p = &b->placements[seq];
    skrull_cp_group *old = &b->cp_groups[seq];
    uint32_t mb = 0;
    while (b->micro_batches[mb].index != p->micro_batch) {
        mb++;
    }
    uint32_t *row = &b->rank_tokens[mb * CP];
    uint32_t share = ceil_div(LENGTHS[seq], size);
    for (uint32_t r = old->first; r < old->first + old->size; r++) {
        row[r] -= p->tokens_per_gpu;
    }
    for (uint32_t r = first; r < first + size; r++) {
        row[r] += share;
    }
    p->tokens_per_gpu = share;
    old->first = first;
    old->size = size;
    uint32_t peak = 0;
    for (uint32_t k = 0; k < b->summary->micro_batches * CP; k++) {
        peak = b->rank_tokens[k] > peak ? b->rank_tokens[k] : peak;
    }
    b->summary->peak_rank_tokens = peak;
}

/* One GPU's layout outputs, sized once with skrull_layout_sizes_max() and SKRULL_MAX_RINGS. */
typedef struct {
    skrull_layout_capacity cap;
    skrull_span *spans;
    int32_t *local_cu, *sharded_cu, *sharded_cu_padded, *rank_cu;
    skrull_layout_ring rings[SKRULL_MAX_RINGS];
    uint32_t rings_count;
    skrull_layout layout;
    void *workspace;
    skrull_layout_buffers bufs;
} gpu_out;

static void out_init(gpu_out *o, const skrull_config *cfg) {
    if (skrull_layout_sizes_max(cfg, N, &o->cap) != SKRULL_STATUS_OK) {
        exit(2);
    }
    o->spans = (skrull_span *)calloc(o->cap.spans, sizeof *o->spans);
    o->local_cu = (int32_t *)calloc(o->cap.local_cu_seqlens, sizeof(int32_t));
    o->sharded_cu = (int32_t *)calloc(o->cap.sharded_cu_seqlens, sizeof(int32_t));
    o->sharded_cu_padded = (int32_t *)calloc(o->cap.sharded_cu_seqlens, sizeof(int32_t));
    o->rank_cu = (int32_t *)calloc(o->cap.sharded_cu_seqlens, sizeof(int32_t));
    o->workspace = malloc(o->cap.workspace_bytes);
    if (!o->spans || !o->local_cu || !o->sharded_cu || !o->sharded_cu_padded || !o->rank_cu ||
        !o->workspace) {
        exit(2);
    }
    memset(o->rings, 0xA5, sizeof o->rings);
    o->rings_count = 0xDEAD;
    /* Designated initialiser: fields added later stay zero. */
    skrull_layout_buffers b = {
        .struct_size = sizeof b,
        .spans = o->spans,
        .spans_len = o->cap.spans,
        .local_cu_seqlens = o->local_cu,
        .local_cu_seqlens_len = o->cap.local_cu_seqlens,
        .sharded_cu_seqlens = o->sharded_cu,
        .sharded_cu_seqlens_len = o->cap.sharded_cu_seqlens,
        .sharded_cu_seqlens_padded = o->sharded_cu_padded,
        .sharded_cu_seqlens_padded_len = o->cap.sharded_cu_seqlens,
        .rank_cu_seqlens = o->rank_cu,
        .rank_cu_seqlens_len = o->cap.sharded_cu_seqlens,
        .layout = &o->layout,
        .rings = o->rings,
        .rings_len = SKRULL_MAX_RINGS,
        .rings_count = &o->rings_count,
    };
    o->bufs = b;
}

static void out_free(gpu_out *o) {
    free(o->spans);
    free(o->local_cu);
    free(o->sharded_cu);
    free(o->sharded_cu_padded);
    free(o->rank_cu);
    free(o->workspace);
}

static skrull_status fill(gpu_out *o, const skrull_config *cfg, const skrull_plan_buffers *plan,
                          uint32_t rank) {
    skrull_gpu gpu = {0, 0, rank};
    return skrull_layout_fill(cfg, LENGTHS, N, plan, gpu, o->workspace, o->cap.workspace_bytes,
                              &o->bufs);
}

/* Whether {first, size} is a group a sequence may be sharded over (written out here). */
static int shard_group_ok(uint32_t first, uint32_t size) {
    if (size == CP) {
        return first == 0;
    }
    return size >= 2 && size < CP && (size & (size - 1)) == 0 && CP % size == 0 &&
           first % size == 0 && first + size <= CP;
}

/* The sub-group plan: balanced with sub-groups on, then sequence 0, unless balanced already
 * put it on a sub-group, moved onto the half of the CP group with the lighter load. Returns
 * its group. */
static skrull_cp_group build(group_store *g, const skrull_config *cfg) {
    gstore_init(g);
    CHECK_STATUS(store_schedule(&g->s, cfg, LENGTHS, N), SKRULL_STATUS_OK);
    const skrull_plan_buffers *b = &g->s.bufs;
    CHECK(b->summary->micro_batches == 1);
    CHECK(b->placements[0].cp_rank == SKRULL_SHARDED);
    /* skrull_schedule() wrote every group: {r, 1} local, else an allowed group whose share
     * is tokens_per_gpu. */
    for (uint32_t i = 0; i < N; i++) {
        const skrull_cp_group *grp = &b->cp_groups[i];
        if (b->placements[i].cp_rank == SKRULL_SHARDED) {
            CHECK(shard_group_ok(grp->first, grp->size));
            CHECK(b->placements[i].tokens_per_gpu == ceil_div(LENGTHS[i], grp->size));
        } else {
            CHECK(grp->first == (uint32_t)b->placements[i].cp_rank && grp->size == 1);
        }
    }
    CHECK(guards_intact(&g->groups));
    if (b->cp_groups[0].size == CP) {
        uint32_t lo = 0, hi = 0;
        for (uint32_t r = 0; r < CP; r++) {
            if (r < 4) {
                lo += b->rank_tokens[r];
            } else {
                hi += b->rank_tokens[r];
            }
        }
        regroup(g, 0, lo <= hi ? 0 : 4, 4);
    }
    CHECK(b->summary->peak_rank_tokens <= cfg->bucket_tokens);
    return b->cp_groups[0];
}

/* The rings rank r must have: one per group of a sharded sequence holding r, largest first
 * (so the whole group first), with its sequence count. Returns how many. */
static uint32_t want_rings(const skrull_plan_buffers *b, uint32_t r, skrull_layout_ring *out) {
    uint32_t count = 0;
    for (uint32_t size = CP; size >= 2; size /= 2) {
        uint32_t first = r - r % size, seqs = 0;
        for (uint32_t i = 0; i < N; i++) {
            const skrull_cp_group *grp = &b->cp_groups[i];
            seqs += b->placements[i].cp_rank == SKRULL_SHARDED && grp->first == first &&
                    grp->size == size;
        }
        if (seqs > 0) {
            skrull_layout_ring ring = {first, size, 0, seqs};
            ring.offset = count == 0 ? 0 : out[count - 1].offset + out[count - 1].seqs;
            out[count++] = ring;
        }
    }
    return count;
}

static void sub_group_plan_end_to_end(void) {
    skrull_config cfg = config(1);
    group_store g;
    skrull_cp_group grp = build(&g, &cfg);
    const uint32_t first = grp.first, size = grp.size;
    CHECK(size >= 2 && size < CP);
    const skrull_plan_buffers *b = &g.s.bufs;
    gpu_out o;
    out_init(&o, &cfg);
    /* held[r] = spans of sequence 0 on rank r; covered[p] = times position p is held. */
    uint32_t held[CP] = {0};
    unsigned char covered[300] = {0};
    uint64_t loss = 0;
    for (uint32_t r = 0; r < CP; r++) {
        memset(o.rings, 0xA5, sizeof o.rings);
        CHECK_STATUS(fill(&o, &cfg, b, r), SKRULL_STATUS_OK);
        const skrull_layout *l = &o.layout;
        skrull_layout_ring want[SKRULL_MAX_RINGS];
        uint32_t nrings = want_rings(b, r, want);
        CHECK(o.rings_count == nrings);
        uint32_t seqs = 0;
        for (uint32_t k = 0; k < nrings && k < o.rings_count; k++) {
            const skrull_layout_ring *ring = &o.rings[k];
            CHECK(ring->first == want[k].first && ring->size == want[k].size);
            CHECK(ring->offset == want[k].offset && ring->seqs == want[k].seqs);
            /* Each sequence of the ring: in its group, its two chunks j and 2g - 1 - j. */
            for (uint32_t q = ring->offset; q < ring->offset + ring->seqs; q++) {
                const skrull_span *front = &o.spans[l->local_seqs + 2 * q];
                const skrull_span *back = front + 1;
                uint32_t j = r - ring->first;
                CHECK(back->seq == front->seq);
                CHECK(b->cp_groups[front->seq].first == ring->first);
                CHECK(b->cp_groups[front->seq].size == ring->size);
                CHECK(front->chunk == (int32_t)j && back->chunk == (int32_t)(2 * ring->size - 1 - j));
                CHECK(o.sharded_cu[q + 1] - o.sharded_cu[q] == (int32_t)LENGTHS[front->seq]);
                CHECK(o.rank_cu[q + 1] - o.rank_cu[q] ==
                      (int32_t)(front->len + front->pad + back->len + back->pad));
            }
            seqs += ring->seqs;
        }
        CHECK(seqs == l->sharded_seqs);
        /* Rings past the count are untouched. */
        const unsigned char *rest = (const unsigned char *)&o.rings[nrings];
        for (size_t i = 0; i < (SKRULL_MAX_RINGS - nrings) * sizeof(skrull_layout_ring); i++) {
            CHECK(rest[i] == 0xA5);
        }
        for (uint32_t s = 0; s < l->spans; s++) {
            const skrull_span *sp = &o.spans[s];
            if (sp->seq != 0) {
                continue;
            }
            held[r]++;
            for (uint32_t p = sp->start; p < sp->start + sp->len + sp->pad && p < 300; p++) {
                covered[p]++;
            }
        }
        CHECK(l->charged_tokens == b->rank_tokens[r]);
        loss += l->loss_tokens;
    }
    /* Exactly two chunks on every GPU of the group, none elsewhere, tiling [0, 300) once. */
    for (uint32_t r = 0; r < CP; r++) {
        CHECK(held[r] == (r >= first && r < first + size ? 2u : 0u));
    }
    for (uint32_t p = 0; p < 300; p++) {
        CHECK(covered[p] == 1);
    }
    CHECK(loss == b->summary->total_tokens);
    CHECK(all_guards_intact(&g.s) && guards_intact(&g.groups));
    out_free(&o);
    gstore_free(&g);
}

/* A layout call on the plan after one edit must be PLAN_INVALID (and write nothing). */
static void expect_plan_invalid(const char *what, group_store *g, const skrull_config *cfg) {
    gpu_out o;
    out_init(&o, cfg);
    skrull_status st = fill(&o, cfg, &g->s.bufs, 0);
    if (st != SKRULL_STATUS_PLAN_INVALID) {
        fprintf(stderr, "%s: ", what);
    }
    CHECK_STATUS(st, SKRULL_STATUS_PLAN_INVALID);
    CHECK(o.rings_count == 0xDEAD);
    out_free(&o);
}

static void errors(void) {
    skrull_config cfg = config(1);
    group_store g;
    /* A misaligned group, and groups of a wrong size. */
    const uint32_t bad[][2] = {{2, 4}, {6, 4}, {0, 3}, {0, 0}, {0, 16}, {4, 1}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        build(&g, &cfg);
        g.s.bufs.cp_groups[0].first = bad[k][0];
        g.s.bufs.cp_groups[0].size = bad[k][1];
        expect_plan_invalid("bad group", &g, &cfg);
        gstore_free(&g);
    }
    /* tokens_per_gpu of the whole group on a sub-group. */
    build(&g, &cfg);
    g.s.bufs.placements[0].tokens_per_gpu = ceil_div(300, CP);
    expect_plan_invalid("whole-group share", &g, &cfg);
    gstore_free(&g);
    /* A sub-group read back under a configuration without sub-groups. */
    build(&g, &cfg);
    skrull_config off = config(0);
    expect_plan_invalid("sub-group without subgroups", &g, &off);
    gstore_free(&g);

    /* skrull_schedule(): cp_groups required with sub-groups, optional without. */
    gstore_init(&g);
    g.s.bufs.cp_groups = NULL;
    g.s.bufs.cp_groups_len = 0;
    CHECK_STATUS(store_schedule(&g.s, &cfg, LENGTHS, N), SKRULL_STATUS_NULL_ARG);
    CHECK(outputs_untouched(&g.s));
    CHECK_STATUS(store_schedule(&g.s, &off, LENGTHS, N), SKRULL_STATUS_OK);
    g.s.bufs.cp_groups = (skrull_cp_group *)g.groups.data;
    g.s.bufs.cp_groups_len = N - 1;
    CHECK_STATUS(store_schedule(&g.s, &cfg, LENGTHS, N), SKRULL_STATUS_OUTPUT_TOO_SMALL);
    skrull_config two = config(2);
    g.s.bufs.cp_groups_len = N;
    CHECK_STATUS(store_schedule(&g.s, &two, LENGTHS, N), SKRULL_STATUS_INVALID_ENUM);
    /* The former _reserved word is chunk_size: chunking on with K = 0 is refused. */
    skrull_config chunky = config(0);
    chunky.chunk_size = 8;
    chunky.chunk_keep = 0;
    CHECK_STATUS(store_schedule(&g.s, &chunky, LENGTHS, N), SKRULL_STATUS_INVALID_CHUNKING);
    gstore_free(&g);

    /* The layout: rings required with sub-groups (NULL_ARG), of this GPU's ring count. */
    skrull_cp_group grp = build(&g, &cfg);
    gpu_out o;
    out_init(&o, &cfg);
    o.bufs.rings = NULL;
    o.bufs.rings_len = 0;
    CHECK_STATUS(fill(&o, &cfg, &g.s.bufs, grp.first), SKRULL_STATUS_NULL_ARG);
    o.bufs.rings = o.rings;
    CHECK_STATUS(fill(&o, &cfg, &g.s.bufs, grp.first), SKRULL_STATUS_OUTPUT_TOO_SMALL);
    CHECK(o.rings_count == 0xDEAD);
    skrull_layout_ring want[SKRULL_MAX_RINGS];
    o.bufs.rings_len = want_rings(&g.s.bufs, grp.first, want);
    CHECK_STATUS(fill(&o, &cfg, &g.s.bufs, grp.first), SKRULL_STATUS_OK);
    CHECK(o.rings_count == o.bufs.rings_len);
    out_free(&o);
    gstore_free(&g);
}

/* struct_size boundaries of the grown structs: smaller sizes that end on a field boundary are
 * accepted (the fields they lack take their defaults), sizes that cut a field are not. */
static void struct_sizes(void) {
    const size_t cfg_sub = offsetof(skrull_config, subgroups);
    const size_t plan_groups = offsetof(skrull_plan_buffers, cp_groups);
    const size_t lay_rings = offsetof(skrull_layout_buffers, rings);
    const size_t lay_count = offsetof(skrull_layout_buffers, rings_count);
    /* Config: ending before `subgroups` reads them as off (cp_groups then optional). */
    const struct {
        size_t size;
        skrull_status want;
    } cfg_cases[] = {
        {cfg_sub, SKRULL_STATUS_OK},
        {cfg_sub + 2, SKRULL_STATUS_BAD_STRUCT_SIZE},
        {cfg_sub + 4, SKRULL_STATUS_NULL_ARG}, /* subgroups read: cp_groups required */
        {cfg_sub + 6, SKRULL_STATUS_BAD_STRUCT_SIZE},
        {sizeof(skrull_config), SKRULL_STATUS_NULL_ARG},
    };
    for (size_t k = 0; k < sizeof cfg_cases / sizeof cfg_cases[0]; k++) {
        group_store g;
        gstore_init(&g);
        g.s.bufs.cp_groups = NULL;
        g.s.bufs.cp_groups_len = 0;
        skrull_config cfg = config(1);
        cfg.struct_size = (uint32_t)cfg_cases[k].size;
        CHECK_STATUS(store_schedule(&g.s, &cfg, LENGTHS, N), cfg_cases[k].want);
        gstore_free(&g);
    }
    /* Plan buffers: version 1, + error, + cp_groups; one ending inside the pair is refused. */
    const struct {
        size_t size;
        uint32_t subgroups;
        skrull_status want;
    } plan_cases[] = {
        {8 + 11 * sizeof(void *), 0, SKRULL_STATUS_OK},
        {8 + 11 * sizeof(void *), 1, SKRULL_STATUS_NULL_ARG},
        {plan_groups, 0, SKRULL_STATUS_OK},
        {plan_groups, 1, SKRULL_STATUS_NULL_ARG},
        {plan_groups + sizeof(void *), 0, SKRULL_STATUS_BAD_STRUCT_SIZE},
        {sizeof(skrull_plan_buffers), 1, SKRULL_STATUS_OK},
    };
    for (size_t k = 0; k < sizeof plan_cases / sizeof plan_cases[0]; k++) {
        group_store g;
        gstore_init(&g);
        skrull_config cfg = config(plan_cases[k].subgroups);
        g.s.bufs.struct_size = (uint32_t)plan_cases[k].size;
        CHECK_STATUS(store_schedule(&g.s, &cfg, LENGTHS, N), plan_cases[k].want);
        /* Groups past the struct are never written. */
        if (plan_cases[k].size <= plan_groups) {
            const unsigned char *p = g.groups.base;
            int untouched = 1;
            for (size_t i = 0; i < N * sizeof(skrull_cp_group) + 2 * GUARD; i++) {
                untouched &= p[i] == PATTERN;
            }
            CHECK(untouched);
        }
        gstore_free(&g);
    }
    /* Layout buffers: ending before the rings (fine without sub-groups), after the pair
     * (rings_count not read), or inside the pair (refused). */
    const struct {
        size_t size;
        uint32_t subgroups;
        skrull_status want;
    } lay_cases[] = {
        {lay_rings, 0, SKRULL_STATUS_OK},
        {lay_rings, 1, SKRULL_STATUS_NULL_ARG},
        {lay_rings + sizeof(void *), 1, SKRULL_STATUS_BAD_STRUCT_SIZE},
        {lay_count, 1, SKRULL_STATUS_OK},
        {lay_count + 4, 1, SKRULL_STATUS_BAD_STRUCT_SIZE},
        {sizeof(skrull_layout_buffers), 1, SKRULL_STATUS_OK},
    };
    for (size_t k = 0; k < sizeof lay_cases / sizeof lay_cases[0]; k++) {
        skrull_config cfg = config(lay_cases[k].subgroups);
        group_store g;
        gstore_init(&g);
        CHECK_STATUS(store_schedule(&g.s, &cfg, LENGTHS, N), SKRULL_STATUS_OK);
        gpu_out o;
        out_init(&o, &cfg);
        o.bufs.struct_size = (uint32_t)lay_cases[k].size;
        CHECK_STATUS(fill(&o, &cfg, &g.s.bufs, 0), lay_cases[k].want);
        if (lay_cases[k].want == SKRULL_STATUS_OK) {
            /* The count is written only when the struct holds its pointer. */
            int has_count = lay_cases[k].size > lay_count;
            CHECK(has_count ? o.rings_count <= 1 : o.rings_count == 0xDEAD);
        }
        out_free(&o);
        gstore_free(&g);
    }
}

int main(void) {
    sub_group_plan_end_to_end();
    errors();
    struct_sizes();
    return report("subgroups");
}
