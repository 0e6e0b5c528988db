/*
 * What a trainer needs beyond a plan, through the C ABI: zigzag padding at CP 1 (a named
 * regression), a pad multiple charged in the budget, lockstep micro-batch counts with valid
 * empty layouts, the per-GPU gather index, and error details that name the sequence and the
 * budget.
 */
#include "common.h"

static skrull_config config(uint32_t dp, uint32_t cp, uint32_t bucket) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = dp;
    c.cp = cp;
    c.bucket_tokens = bucket;
    return c;
}

/* One GPU's layout into plain buffers of the sizes skrull_layout_sizes() gives. */
typedef struct {
    skrull_layout layout;
    skrull_span spans[64];
    int32_t local_cu[33], local_cu_padded[33], sharded_cu[33], sharded_cu_padded[33],
        rank_cu[33], positions[512];
    int64_t gather[512];
} gpu_layout;

static skrull_status fill(const skrull_config *c, const uint32_t *lengths, size_t n,
                          plan_store *s, skrull_gpu gpu, gpu_layout *o) {
    skrull_layout_capacity cap;
    skrull_status st = skrull_layout_sizes_max(c, n, &cap);
    if (st != SKRULL_STATUS_OK) {
        return st;
    }
    unsigned char *ws = (unsigned char *)malloc(cap.workspace_bytes);
    if (ws == NULL) {
        exit(2);
    }
    skrull_layout_buffers b = {
        .struct_size = sizeof b, .spans = o->spans, .spans_len = 64,
        .local_cu_seqlens = o->local_cu, .local_cu_seqlens_len = 33,
        .sharded_cu_seqlens = o->sharded_cu, .sharded_cu_seqlens_len = 33,
        .sharded_cu_seqlens_padded = o->sharded_cu_padded, .sharded_cu_seqlens_padded_len = 33,
        .rank_cu_seqlens = o->rank_cu, .rank_cu_seqlens_len = 33,
        .positions = o->positions, .positions_len = 512, .layout = &o->layout,
        .gather_index = o->gather, .gather_index_len = 512,
        .local_cu_seqlens_padded = o->local_cu_padded, .local_cu_seqlens_padded_len = 33};
    st = skrull_layout_fill(c, lengths, n, &s->bufs, gpu, ws, cap.workspace_bytes, &b);
    free(ws);
    return st;
}

/* Regression (C contract): zigzag padding at CP 1 adds nothing, so a sequence of exactly the
 * budget fits, odd lengths included; it used to be refused (charged 2 * ceil(len / 2)). */
static void zigzag_at_cp_1_pads_nothing(void) {
    const uint32_t five[] = {5}, seven[] = {7, 3};
    for (uint32_t policy = 0; policy <= SKRULL_POLICY_BALANCED; policy++) {
        skrull_config c = config(1, 1, 5);
        c.shard_padding = SKRULL_SHARD_PADDING_ZIGZAG;
        c.policy = policy;
        plan_store s;
        store_init(&s, 1, 1, 1);
        CHECK_STATUS(store_schedule(&s, &c, five, 1), SKRULL_STATUS_OK);
        CHECK(s.bufs.summary->peak_rank_tokens == 5);
        store_free(&s);
        c.bucket_tokens = 7;
        store_init(&s, 2, 1, 1);
        CHECK_STATUS(store_schedule(&s, &c, seven, 2), SKRULL_STATUS_OK);
        CHECK(s.bufs.placements[0].tokens_per_gpu == 7);
        store_free(&s);
    }
}

/* Pad multiple 4 at CP 2 with local padding: 13 tokens sharded are padded to 16 (8 per GPU),
 * 3 tokens local to 4; the layout carries the padding and the gather index marks it. */
static void pad_multiple_and_gather_index(void) {
    const uint32_t lengths[] = {13, 3};
    skrull_config c = config(1, 2, 12);
    c.shard_padding = SKRULL_SHARD_PADDING_ZIGZAG;
    c.pad_multiple = 4;
    c.pad_local = 1;
    c.policy = SKRULL_POLICY_SKRULL;
    plan_store s;
    store_init(&s, 2, 1, 2);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 2), SKRULL_STATUS_OK);
    CHECK(s.bufs.placements[0].cp_rank == SKRULL_SHARDED);
    CHECK(s.bufs.placements[0].tokens_per_gpu == 8);
    CHECK(s.bufs.placements[1].tokens_per_gpu == 4);
    /* The DP rank's stream is its sequences in plan order (members): offsets of each. */
    uint32_t first = s.bufs.members[0], base_of[2];
    base_of[first] = 0;
    base_of[1 - first] = lengths[first];
    uint64_t real = 0;
    for (uint32_t r = 0; r < 2; r++) {
        gpu_layout o;
        skrull_gpu gpu = {0, 0, r};
        CHECK_STATUS(fill(&c, lengths, 2, &s, gpu, &o), SKRULL_STATUS_OK);
        CHECK(o.layout.tokens == (r == (uint32_t)s.bufs.placements[1].cp_rank ? 12u : 8u));
        for (uint32_t k = 0; k < o.layout.spans; k++) {
            const skrull_span *sp = &o.spans[k];
            for (uint32_t i = 0; i < sp->len + sp->pad; i++) {
                int64_t g = o.gather[sp->offset + i];
                CHECK(o.positions[sp->offset + i] == (int32_t)(sp->start + i));
                CHECK(i < sp->len ? g == (int64_t)(base_of[sp->seq] + sp->start + i) : g == -1);
                real += i < sp->len;
            }
        }
        if (o.layout.local_seqs == 1) {
            CHECK(o.local_cu[1] == 3 && o.local_cu_padded[1] == 4);
        }
    }
    CHECK(real == 16);
    store_free(&s);
}

/* Lockstep: DP rank 1 has one micro-batch of sequences but reports two; the second is a valid,
 * empty layout. Without lockstep it reports one and the second GPU does not exist. */
static void lockstep_empty_micro_batch(void) {
    const uint32_t lengths[] = {16, 16, 2, 2};
    for (uint32_t lockstep = 0; lockstep < 2; lockstep++) {
        skrull_config c = config(2, 2, 8);
        c.policy = SKRULL_POLICY_PACKED;
        c.lockstep = lockstep;
        plan_store s;
        store_init(&s, 4, 2, 2);
        CHECK_STATUS(store_schedule(&s, &c, lengths, 4), SKRULL_STATUS_OK);
        CHECK(s.bufs.micro_batches_per_dp[0] == 2);
        CHECK(s.bufs.micro_batches_per_dp[1] == (lockstep ? 2u : 1u));
        CHECK(s.bufs.summary->micro_batches == 3);
        gpu_layout o;
        skrull_gpu gpu = {1, 1, 0};
        skrull_status st = fill(&c, lengths, 4, &s, gpu, &o);
        if (lockstep) {
            CHECK_STATUS(st, SKRULL_STATUS_OK);
            CHECK(o.layout.micro_batch_global == SKRULL_NO_MICRO_BATCH);
            CHECK(o.layout.tokens == 0 && o.layout.spans == 0 && o.layout.loss_tokens == 0);
            CHECK(o.local_cu[0] == 0 && o.sharded_cu[0] == 0 && o.rank_cu[0] == 0);
        } else {
            CHECK_STATUS(st, SKRULL_STATUS_NO_SUCH_GPU);
        }
        store_free(&s);
    }
}

/* Error details: the sequence, its length and the BucketSize it needs. */
static void error_details(void) {
    const uint32_t lengths[] = {5, 97, 3};
    skrull_config c = config(2, 4, 24);
    plan_store s;
    store_init(&s, 3, 2, 4);
    skrull_error_info e;
    memset(&e, 0xA5, sizeof e);
    s.bufs.error = &e;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 3), SKRULL_STATUS_SEQUENCE_TOO_LONG);
    CHECK(e.status == SKRULL_STATUS_SEQUENCE_TOO_LONG);
    CHECK(e.index == 1 && e.value == 97 && e.limit == 25);
    CHECK(outputs_untouched(&s));
    /* Success leaves the details alone. */
    const uint32_t fine[] = {5, 9, 3};
    memset(&e, 0xA5, sizeof e);
    CHECK_STATUS(store_schedule(&s, &c, fine, 3), SKRULL_STATUS_OK);
    CHECK(e.status == 0xA5A5A5A5u);
    store_free(&s);
}

/* Regression: too many sequences once came back with value and limit 0; the details carry
 * the batch size and the limit. */
static void too_many_sequences_names_count_and_limit(void) {
    const size_t n = 65537;
    uint32_t *many = (uint32_t *)malloc(n * sizeof *many);
    CHECK(many != NULL);
    if (many == NULL) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        many[i] = 1;
    }
    skrull_config c = config(2, 4, 24);
    plan_store s;
    store_init(&s, 3, 2, 4);
    skrull_error_info e;
    memset(&e, 0xA5, sizeof e);
    s.bufs.error = &e;
    CHECK_STATUS(store_schedule(&s, &c, many, n), SKRULL_STATUS_TOO_MANY_SEQUENCES);
    CHECK(e.status == SKRULL_STATUS_TOO_MANY_SEQUENCES);
    CHECK(e.value == 65537 && e.limit == 65536);
    CHECK(outputs_untouched(&s));
    store_free(&s);
    free(many);
}

int main(void) {
    zigzag_at_cp_1_pads_nothing();
    pad_multiple_and_gather_index();
    lockstep_empty_micro_batch();
    error_details();
    too_many_sequences_names_count_and_limit();
    return report("trainer");
}
