/*
 * Filled micro-batches, a fixed micro-batch count and skrull_layout_fill_many through the C ABI
 * (skrull_config.fill_empty and skrull_config.micro_batches): every DP rank reports the same
 * count, no micro-batch is empty while its rank has a multi-sequence one, a count that is
 * too small is refused with SKRULL_STATUS_MICRO_BATCH_COUNT and the smallest count that fits,
 * and a count above max_micro_batches is SKRULL_STATUS_MICRO_BATCH_LIMIT.
 */
#include "common.h"

#define N 16
static const uint32_t LENGTHS[N] = {12, 40, 7, 33, 25, 3, 18, 9, 21, 30, 2, 16, 5, 44, 11, 6};

static skrull_config config(uint32_t dp, uint32_t cp, uint32_t bucket, uint32_t policy) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = dp;
    c.cp = cp;
    c.bucket_tokens = bucket;
    c.policy = policy;
    return c;
}

static uint32_t most_micro_batches(const plan_store *s, uint32_t dp) {
    uint32_t most = 0;
    for (uint32_t d = 0; d < dp; d++) {
        uint32_t c = s->bufs.micro_batches_per_dp[d];
        most = c > most ? c : most;
    }
    return most;
}

/* A fixed count above what the policy needs: every rank runs exactly that many, listing
 * min(count, its sequences) of them (deepspeed already gives every sequence its own), and the
 * plan passes the independent checker wherever no micro-batch is empty. */
static void fixed_count_fills_every_rank(uint32_t policy) {
    plan_store s;
    skrull_config c = config(2, 2, 48, policy);
    store_init(&s, N, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    uint32_t g = most_micro_batches(&s, c.dp) + 2;
    c.micro_batches = g;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    uint32_t seqs[2] = {0, 0}, listed[2] = {0, 0};
    for (uint32_t i = 0; i < N; i++) {
        seqs[s.bufs.placements[i].dp_rank]++;
    }
    for (uint32_t k = 0; k < s.bufs.summary->micro_batches; k++) {
        listed[s.bufs.micro_batches[k].dp_rank]++;
    }
    for (uint32_t d = 0; d < c.dp; d++) {
        CHECK(s.bufs.micro_batches_per_dp[d] == g);
        CHECK(listed[d] == (seqs[d] < g ? seqs[d] : g));
    }
    if (seqs[0] >= g && seqs[1] >= g) {
        CHECK(s.bufs.summary->micro_batches == 2 * g);
        CHECK(verify_plan(&c, LENGTHS, N, &s) == 0);
    }
    CHECK(all_guards_intact(&s));
    store_free(&s);
}

/* One count fewer than needed: MICRO_BATCH_COUNT, the details give the count that fits. */
static void too_small_a_count_names_the_one_that_fits(void) {
    plan_store s;
    skrull_config c = config(2, 2, 24, SKRULL_POLICY_SKRULL);
    store_init(&s, N, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    uint32_t most = most_micro_batches(&s, c.dp);
    CHECK(most >= 2);
    skrull_error_info info;
    memset(&info, 0xA5, sizeof info);
    s.bufs.error = &info;
    c.micro_batches = most - 1;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_MICRO_BATCH_COUNT);
    CHECK(info.status == SKRULL_STATUS_MICRO_BATCH_COUNT);
    CHECK(info.value == most && info.limit == most - 1);
    CHECK(info.index >= 0 && info.index < (int64_t)c.dp);
    CHECK(strcmp(skrull_status_str(SKRULL_STATUS_MICRO_BATCH_COUNT), "unknown status") != 0);
    c.micro_batches = most;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    c.max_micro_batches = most - 1;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_MICRO_BATCH_LIMIT);
    CHECK(info.value == most && info.limit == most - 1);
    s.bufs.error = NULL;
    store_free(&s);
}

/* Lockstep with fill_empty on DP 4: the ranks that need fewer micro-batches split theirs, so
 * every listed count equals the reported one; fill_empty 2 is not a flag. */
static void lockstep_fill_leaves_nothing_empty(void) {
    plan_store s;
    skrull_config c = config(4, 2, 40, SKRULL_POLICY_PACKED);
    c.lockstep = 1;
    c.fill_empty = 1;
    store_init(&s, N, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    uint32_t g = s.bufs.micro_batches_per_dp[0];
    uint32_t listed[4] = {0, 0, 0, 0};
    for (uint32_t k = 0; k < s.bufs.summary->micro_batches; k++) {
        listed[s.bufs.micro_batches[k].dp_rank]++;
    }
    for (uint32_t d = 0; d < 4; d++) {
        CHECK(s.bufs.micro_batches_per_dp[d] == g);
        CHECK(listed[d] == g); /* 4 sequences per rank, fewer micro-batches than that */
    }
    CHECK(verify_plan(&c, LENGTHS, N, &s) == 0);
    c.fill_empty = 2;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_INVALID_ENUM);
    store_free(&s);
}

/* One GPU's buffers for one micro-batch, sized with skrull_layout_sizes_max(). */
typedef struct {
    skrull_span *spans;
    int32_t *cu[5]; /* local, sharded, sharded padded, rank, local padded */
    int32_t *positions;
    int64_t *gather;
    skrull_layout layout;
    skrull_layout_buffers bufs;
} gpu_out;

static void gpu_out_init(gpu_out *o, const skrull_layout_capacity *cap) {
    memset(o, 0, sizeof *o);
    o->spans = (skrull_span *)calloc(cap->spans + 1, sizeof *o->spans);
    for (int k = 0; k < 5; k++) {
        size_t len = k == 0 || k == 4 ? cap->local_cu_seqlens : cap->sharded_cu_seqlens;
        o->cu[k] = (int32_t *)calloc(len + 1, sizeof(int32_t));
    }
    o->positions = (int32_t *)calloc(cap->positions + 1, sizeof(int32_t));
    o->gather = (int64_t *)calloc(cap->positions + 1, sizeof(int64_t));
    o->bufs.struct_size = sizeof o->bufs;
    o->bufs.spans = o->spans;
    o->bufs.spans_len = cap->spans;
    o->bufs.local_cu_seqlens = o->cu[0];
    o->bufs.local_cu_seqlens_len = cap->local_cu_seqlens;
    o->bufs.sharded_cu_seqlens = o->cu[1];
    o->bufs.sharded_cu_seqlens_len = cap->sharded_cu_seqlens;
    o->bufs.sharded_cu_seqlens_padded = o->cu[2];
    o->bufs.sharded_cu_seqlens_padded_len = cap->sharded_cu_seqlens;
    o->bufs.rank_cu_seqlens = o->cu[3];
    o->bufs.rank_cu_seqlens_len = cap->sharded_cu_seqlens;
    o->bufs.local_cu_seqlens_padded = o->cu[4];
    o->bufs.local_cu_seqlens_padded_len = cap->local_cu_seqlens;
    o->bufs.positions = o->positions;
    o->bufs.positions_len = cap->positions;
    o->bufs.gather_index = o->gather;
    o->bufs.gather_index_len = cap->positions;
    o->bufs.layout = &o->layout;
}

static void gpu_out_free(gpu_out *o) {
    free(o->spans);
    for (int k = 0; k < 5; k++) {
        free(o->cu[k]);
    }
    free(o->positions);
    free(o->gather);
}

/* Whether two filled layouts are equal (counts, spans, every array up to its count). */
static int same_layout(const gpu_out *a, const gpu_out *b) {
    const skrull_layout *x = &a->layout, *y = &b->layout;
    if (memcmp(x, y, sizeof *x) != 0 ||
        memcmp(a->spans, b->spans, x->spans * sizeof *a->spans) != 0 ||
        memcmp(a->positions, b->positions, x->tokens * sizeof(int32_t)) != 0 ||
        memcmp(a->gather, b->gather, x->tokens * sizeof(int64_t)) != 0) {
        return 0;
    }
    for (int k = 0; k < 5; k++) {
        size_t len = (k == 0 || k == 4 ? x->local_seqs : x->sharded_seqs) + 1;
        if (memcmp(a->cu[k], b->cu[k], len * sizeof(int32_t)) != 0) {
            return 0;
        }
    }
    return 1;
}

/* skrull_layout_fill_many over every micro-batch of each GPU equals one skrull_layout_fill
 * per micro-batch; a bad GPU at the end leaves every output untouched. */
static void fill_many_equals_one_fill_per_micro_batch(void) {
    plan_store s;
    skrull_config c = config(2, 4, 40, SKRULL_POLICY_SKRULL);
    c.micro_batches = 5;
    store_init(&s, N, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    skrull_layout_capacity cap;
    CHECK_STATUS(skrull_layout_sizes_max(&c, N, &cap), SKRULL_STATUS_OK);
    void *ws = malloc(cap.workspace_bytes);
    gpu_out many[6], one;
    const skrull_layout_buffers *outs[6];
    skrull_gpu gpus[6];
    for (uint32_t d = 0; d < c.dp; d++) {
        for (uint32_t r = 0; r < c.cp; r++) {
            for (uint32_t m = 0; m < 6; m++) {
                gpu_out_init(&many[m], &cap);
                outs[m] = &many[m].bufs;
                gpus[m].dp_rank = d;
                gpus[m].micro_batch = m;
                gpus[m].cp_rank = r;
            }
            /* The sixth micro-batch does not exist: NO_SUCH_GPU, nothing written. */
            CHECK_STATUS(skrull_layout_fill_many(&c, LENGTHS, N, &s.bufs, gpus, 6, ws,
                                                 cap.workspace_bytes, outs),
                         SKRULL_STATUS_NO_SUCH_GPU);
            CHECK(many[0].layout.tokens == 0 && many[0].layout.spans == 0 &&
                  many[0].positions[0] == 0);
            CHECK_STATUS(skrull_layout_fill_many(&c, LENGTHS, N, &s.bufs, gpus, 5, ws,
                                                 cap.workspace_bytes, outs),
                         SKRULL_STATUS_OK);
            for (uint32_t m = 0; m < 5; m++) {
                gpu_out_init(&one, &cap);
                CHECK_STATUS(skrull_layout_fill(&c, LENGTHS, N, &s.bufs, gpus[m], ws,
                                                cap.workspace_bytes, &one.bufs),
                             SKRULL_STATUS_OK);
                CHECK(same_layout(&many[m], &one));
                gpu_out_free(&one);
            }
            for (uint32_t m = 0; m < 6; m++) {
                gpu_out_free(&many[m]);
            }
        }
    }
    CHECK_STATUS(skrull_layout_fill_many(&c, LENGTHS, N, &s.bufs, NULL, 1, ws,
                                         cap.workspace_bytes, outs),
                 SKRULL_STATUS_NULL_ARG);
    free(ws);
    store_free(&s);
}

int main(void) {
    fixed_count_fills_every_rank(SKRULL_POLICY_SKRULL);
    fixed_count_fills_every_rank(SKRULL_POLICY_PACKED);
    fixed_count_fills_every_rank(SKRULL_POLICY_DEEPSPEED);
    too_small_a_count_names_the_one_that_fits();
    lockstep_fill_leaves_nothing_empty();
    fill_many_equals_one_fill_per_micro_batch();
    return report("fill");
}
