/*
 * Chunking through the C ABI: SKRULL_POLICY_CHUNKFLOW and balanced with chunk_size set plan
 * SKRULL_CHUNKED placements, read here with their groups (cp_groups) and checked by a checker
 * written from the rule in docs/chunking.md (each chunked sequence charges every GPU of its
 * group its peak: the kept chunks, or one recomputed chunk, plus its share of the K/V state);
 * the prepared form gives the same plans; a caller whose struct ends before chunk_size gets
 * chunking off; the error details of the two chunking statuses.
 */
#include "common.h"

#include "rng.h"

/* Tokens of a t-token piece on each of g GPUs (no padding). */
static uint64_t share(uint64_t t, uint32_t g) { return (t + g - 1) / g; }

/* The peak a chunked sequence of len tokens holds on each GPU of a group of g ranks. */
static uint64_t chunk_peak(const skrull_config *c, uint32_t len, uint32_t g) {
    uint64_t size = c->chunk_size, n = (len + size - 1) / size;
    uint64_t k = c->chunk_keep < 1 ? 1 : c->chunk_keep;
    if (k > n) {
        k = n;
    }
    uint64_t kept = 0;
    for (uint64_t i = n - k; i < n; i++) {
        uint64_t left = len - i * size;
        kept += share(left < size ? left : size, g);
    }
    uint64_t live = (n > k && share(size, g) > kept) ? share(size, g) : kept;
    uint64_t state = ((uint64_t)len * c->chunk_state_permille + 999) / 1000;
    return live + (state + g - 1) / g;
}

/*
 * Checks a plan with its groups: every sequence once under its own micro-batch, local ones
 * on their rank, sharded ones over a valid group, chunked ones only when longer than a chunk
 * on a valid aligned group with their peak; recounted loads within the budget and equal to
 * rank_tokens; the summary (sharded counts no chunked sequence). Returns the chunked count.
 */
static uint32_t check_plan(const skrull_config *c, const uint32_t *lengths, size_t n,
                           const plan_store *s, const skrull_cp_group *groups) {
    const skrull_placement *pl = s->bufs.placements;
    const skrull_micro_batch *mb = s->bufs.micro_batches;
    const skrull_summary *sum = s->bufs.summary;
    uint32_t cp = c->cp, g = 0, first = 0, sharded = 0, chunked = 0;
    uint64_t peak = 0;
    uint64_t *load = (uint64_t *)calloc(cp, sizeof *load);
    unsigned char *seen = (unsigned char *)calloc(n + 1, 1);
    if (load == NULL || seen == NULL) {
        exit(2);
    }
    for (uint32_t d = 0; d < c->dp; d++) {
        for (uint32_t j = 0; j < s->bufs.micro_batches_per_dp[d]; j++, g++) {
            CHECK(g < sum->micro_batches && mb[g].dp_rank == d && mb[g].index == j);
            CHECK(mb[g].first == first);
            memset(load, 0, cp * sizeof *load);
            for (uint32_t m = 0; m < mb[g].count; m++) {
                uint32_t seq = s->bufs.members[first + m];
                CHECK(seq < n && !seen[seq]);
                if (seq >= n || seen[seq]) {
                    continue;
                }
                seen[seq] = 1;
                const skrull_placement *p = &pl[seq];
                const skrull_cp_group *gr = &groups[seq];
                uint32_t len = lengths[seq];
                CHECK(p->dp_rank == d && p->micro_batch == j);
                int aligned = gr->size >= 1 && gr->first + gr->size <= cp &&
                              ((gr->first % gr->size == 0 && (gr->size & (gr->size - 1)) == 0) ||
                               (gr->first == 0 && gr->size == cp));
                CHECK(aligned);
                if (!aligned) {
                    continue;
                }
                uint64_t each;
                if (p->cp_rank == SKRULL_CHUNKED) {
                    chunked++;
                    CHECK(len > c->chunk_size);
                    each = chunk_peak(c, len, gr->size);
                } else if (p->cp_rank == SKRULL_SHARDED) {
                    sharded++;
                    CHECK(gr->size >= 2 || cp == 1);
                    each = share(len, gr->size);
                } else {
                    CHECK(p->cp_rank >= 0 && gr->first == (uint32_t)p->cp_rank && gr->size == 1);
                    each = len;
                }
                CHECK(p->tokens_per_gpu == each);
                for (uint32_t r = gr->first; r < gr->first + gr->size && r < cp; r++) {
                    load[r] += each;
                }
            }
            for (uint32_t r = 0; r < cp; r++) {
                CHECK(load[r] <= c->bucket_tokens);
                CHECK(s->bufs.rank_tokens[(size_t)g * cp + r] == load[r]);
                peak = load[r] > peak ? load[r] : peak;
            }
            first += mb[g].count;
        }
    }
    for (size_t i = 0; i < n; i++) {
        CHECK(seen[i]);
    }
    CHECK(g == sum->micro_batches && first == n && sum->sequences == n);
    CHECK(sum->sharded == sharded && sum->peak_rank_tokens == peak && sum->_reserved == 0);
    free(load);
    free(seen);
    return chunked;
}

static skrull_config config(uint32_t policy, uint32_t chunk, uint32_t keep) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = 2;
    c.cp = 4;
    c.bucket_tokens = 4096;
    c.policy = policy;
    c.chunk_size = chunk;
    c.chunk_keep = keep;
    return c;
}

/* Random batches planned by chunkflow and by balanced with chunking (sub-groups on), each
 * plan checked, once through skrull_schedule() and once through a prepared setup. */
static void chunked_plans_check(uint32_t policy, uint32_t chunk, uint32_t keep,
                                uint32_t *chunked_total) {
    skrull_config c = config(policy, chunk, keep);
    c.subgroups = policy == SKRULL_POLICY_BALANCED;
    /* Links 1,000x slower than an H100's: balanced then chunks where sharding's rings cost
     * more than chunk passes (with the preset it seldom does). */
    static skrull_cost_model slow;
    CHECK_STATUS(skrull_cost_model_preset(SKRULL_GPU_H100, NULL, &slow, sizeof slow),
                 SKRULL_STATUS_OK);
    slow.intra_node_bandwidth /= 1000.0;
    slow.inter_node_bandwidth /= 1000.0;
    c.cost_model = policy == SKRULL_POLICY_BALANCED ? &slow : NULL;
    size_t bytes = skrull_setup_size();
    unsigned char *mem = (unsigned char *)malloc(bytes);
    const skrull_setup *setup = NULL;
    CHECK_STATUS(skrull_setup_init(&c, mem, bytes, &setup, NULL), SKRULL_STATUS_OK);
    rng_state = 0xC4u + policy * 7 + keep;
    for (int batch = 0; batch < 30; batch++) {
        uint32_t lengths[48];
        size_t n = 1 + (size_t)(next_u64() % 48);
        for (size_t i = 0; i < n; i++) {
            uint64_t x = next_u64();
            lengths[i] = (uint32_t)(x % 5 == 0 ? 1 + (x >> 8) % 16000 : 1 + (x >> 8) % 1500);
        }
        plan_store a, b;
        skrull_cp_group ga[48], gb[48];
        store_init(&a, n, c.dp, c.cp);
        store_init(&b, n, c.dp, c.cp);
        a.bufs.cp_groups = ga;
        a.bufs.cp_groups_len = n;
        b.bufs.cp_groups = gb;
        b.bufs.cp_groups_len = n;
        CHECK_STATUS(store_schedule(&a, &c, lengths, n), SKRULL_STATUS_OK);
        CHECK_STATUS(skrull_schedule_prepared(setup, lengths, n, b.workspace.data,
                                              b.sizes.workspace_bytes, &b.bufs),
                     SKRULL_STATUS_OK);
        *chunked_total += check_plan(&c, lengths, n, &a, ga);
        CHECK(memcmp(a.placements.data, b.placements.data, n * sizeof(skrull_placement)) == 0);
        CHECK(memcmp(ga, gb, n * sizeof ga[0]) == 0);
        CHECK(all_guards_intact(&a) && all_guards_intact(&b));
        store_free(&a);
        store_free(&b);
    }
    free(mem);
}

/* chunkflow runs every sequence longer than a chunk chunked over the whole group, alone. */
static void chunkflow_chunks_long_sequences_over_the_whole_group(void) {
    skrull_config c = config(SKRULL_POLICY_CHUNKFLOW, 2048, 1);
    const uint32_t lengths[5] = {100, 9000, 2048, 2049, 700};
    plan_store s;
    skrull_cp_group groups[5];
    store_init(&s, 5, c.dp, c.cp);
    s.bufs.cp_groups = groups;
    s.bufs.cp_groups_len = 5;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 5), SKRULL_STATUS_OK);
    CHECK(check_plan(&c, lengths, 5, &s, groups) == 2);
    const skrull_placement *p = s.bufs.placements;
    for (int i = 0; i < 5; i++) {
        int chunked = lengths[i] > 2048;
        CHECK((p[i].cp_rank == SKRULL_CHUNKED) == chunked);
        CHECK(chunked || p[i].cp_rank == SKRULL_SHARDED);
        CHECK(groups[i].first == 0 && groups[i].size == 4);
    }
    /* 9000 tokens: 5 chunks, K = 1: one 2048-token chunk (512 a GPU) + ceil(576 / 4). */
    CHECK(p[1].tokens_per_gpu == 512 + 144);
    /* Without cp_groups a chunking plan is refused: -2 alone does not name the group. */
    s.bufs.cp_groups = NULL;
    s.bufs.cp_groups_len = 0;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 5), SKRULL_STATUS_NULL_ARG);
    store_free(&s);
}

/* A program built before chunking (struct ending at chunk_size) gets chunking off. */
static void an_older_struct_gets_chunking_off(void) {
    skrull_config c = config(SKRULL_POLICY_SKRULL, 2048, 1);
    c.struct_size = (uint32_t)offsetof(skrull_config, chunk_size);
    const uint32_t lengths[3] = {9000, 30, 500};
    plan_store s;
    store_init(&s, 3, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 3), SKRULL_STATUS_OK);
    CHECK(s.bufs.placements[0].cp_rank != SKRULL_CHUNKED);
    c.policy = SKRULL_POLICY_CHUNKFLOW;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 3), SKRULL_STATUS_INVALID_CHUNKING);
    store_free(&s);
}

/* The details of both chunking statuses. */
static void chunking_error_details(void) {
    skrull_config c = config(SKRULL_POLICY_CHUNKFLOW, 2048, 0);
    const uint32_t lengths[2] = {10, 16000};
    plan_store s;
    skrull_cp_group groups[2];
    skrull_error_info info;
    store_init(&s, 2, c.dp, c.cp);
    s.bufs.cp_groups = groups;
    s.bufs.cp_groups_len = 2;
    s.bufs.error = &info;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 2), SKRULL_STATUS_INVALID_CHUNKING);
    CHECK(info.status == SKRULL_STATUS_INVALID_CHUNKING && info.field == 2);
    CHECK(info.value == 0 && info.limit == 64 && info.index == -1);
    c.chunk_size = 0;
    c.chunk_keep = 1;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 2), SKRULL_STATUS_INVALID_CHUNKING);
    CHECK(info.field == 1 && info.value == 0);
    /* 16000 tokens in chunks of 4096, all 4 kept: 4000 a GPU + 1024 / 4 of state > 4096. */
    c.chunk_size = 4096;
    c.chunk_keep = 4;
    CHECK_STATUS(store_schedule(&s, &c, lengths, 2), SKRULL_STATUS_CHUNK_OVER_BUDGET);
    CHECK(info.status == SKRULL_STATUS_CHUNK_OVER_BUDGET && info.index == 1);
    CHECK(info.value == 16000 && info.limit == chunk_peak(&c, 16000, 4));
    CHECK(info.limit == 4000 + 256);
    CHECK(outputs_untouched(&s));
    store_free(&s);
}

int main(void) {
    uint32_t chunked = 0;
    chunkflow_chunks_long_sequences_over_the_whole_group();
    chunked_plans_check(SKRULL_POLICY_CHUNKFLOW, 2048, 1, &chunked);
    chunked_plans_check(SKRULL_POLICY_CHUNKFLOW, 1024, 3, &chunked);
    uint32_t before = chunked;
    CHECK(before > 0);
    chunked_plans_check(SKRULL_POLICY_BALANCED, 2048, 1, &chunked);
    CHECK(chunked > before);
    printf("chunked sequences: %u (chunkflow), %u (balanced)\n", (unsigned)before,
           (unsigned)(chunked - before));
    an_older_struct_gets_chunking_off();
    chunking_error_details();
    return report("chunked");
}
