/*
 * Known plans through the C ABI, and the independent checker on random batches for every
 * policy: awkward-but-valid inputs included (empty batch, fewer sequences than DP ranks, all
 * equal, every sequence exactly at the budget), misaligned and reused workspaces.
 */
#include "common.h"
#include "rng.h"

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

/* Paper section 4.4, Example 1 with integer shares: DP 1, CP 4, BucketSize 24. */
static void paper_example_1(void) {
    const uint32_t lengths[] = {1, 2, 2, 3, 4, 6, 9, 14, 30};
    const int32_t want_cp[] = {0, 1, 2, SKRULL_SHARDED, 0, 1, 2, 3, SKRULL_SHARDED};
    const uint32_t want_tokens[] = {14, 17, 20, 23};
    skrull_config c = config(1, 4, 24);
    plan_store s;
    store_init(&s, 9, 1, 4);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 9), SKRULL_STATUS_OK);
    for (int i = 0; i < 9; i++) {
        CHECK(s.bufs.placements[i].dp_rank == 0 && s.bufs.placements[i].micro_batch == 0);
        CHECK(s.bufs.placements[i].cp_rank == want_cp[i]);
    }
    CHECK(s.bufs.placements[8].tokens_per_gpu == 8 && s.bufs.placements[3].tokens_per_gpu == 1);
    CHECK(s.bufs.summary->micro_batches == 1 && s.bufs.summary->rollbacks == 1);
    CHECK(s.bufs.summary->sharded == 2 && s.bufs.summary->peak_rank_tokens == 23);
    CHECK(memcmp(s.bufs.rank_tokens, want_tokens, sizeof want_tokens) == 0);
    CHECK(verify_plan(&c, lengths, 9, &s) == 0);
    CHECK(all_guards_intact(&s));
    store_free(&s);
}

/* A plan with several micro-batches per DP rank and rollbacks (same as `skrull plan`). */
static void several_micro_batches(void) {
    const uint32_t lengths[] = {12, 40, 7, 33, 25, 3, 18, 9, 21, 30, 2, 16};
    const skrull_placement want[] = {
        {1, 2, -1, 6},  {0, 1, -1, 20}, {0, 1, -1, 4},  {1, 2, -1, 17},
        {0, 0, -1, 13}, {1, 0, 0, 3},   {0, 3, 0, 18},  {1, 1, 0, 9},
        {1, 0, 1, 21},  {1, 1, -1, 15}, {0, 0, 0, 2},   {0, 2, 0, 16},
    };
    const uint32_t want_per_dp[] = {4, 3};
    const uint32_t want_tokens[] = {15, 13, 24, 24, 16, 0, 18, 0, 3, 21, 24, 15, 23, 23};
    skrull_config c = config(2, 2, 24);
    plan_store s;
    store_init(&s, 12, 2, 2);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 12), SKRULL_STATUS_OK);
    CHECK(memcmp(s.bufs.placements, want, sizeof want) == 0);
    CHECK(memcmp(s.bufs.micro_batches_per_dp, want_per_dp, sizeof want_per_dp) == 0);
    CHECK(memcmp(s.bufs.rank_tokens, want_tokens, sizeof want_tokens) == 0);
    const skrull_summary *sum = s.bufs.summary;
    CHECK(sum->sequences == 12 && sum->total_tokens == 216 && sum->micro_batches == 7);
    CHECK(sum->sharded == 6 && sum->rollbacks == 2 && sum->peak_rank_tokens == 24);
    /* Reading DP rank 1's micro-batches straight from the table: offset = sum of counts. */
    const skrull_micro_batch *mb = s.bufs.micro_batches + want_per_dp[0];
    for (uint32_t j = 0; j < want_per_dp[1]; j++) {
        CHECK(mb[j].dp_rank == 1 && mb[j].index == j);
    }
    /* Entries past the plan are left as they were. */
    const unsigned char *tail = (const unsigned char *)(s.bufs.micro_batches + 7);
    CHECK(tail[0] == PATTERN && tail[5 * sizeof(skrull_micro_batch) - 1] == PATTERN);
    CHECK(verify_plan(&c, lengths, 12, &s) == 0);
    CHECK(all_guards_intact(&s));
    store_free(&s);
}

/* A long-tailed batch: mostly short, some medium, a few long; at most `max` tokens each. */
static void draw(uint32_t *out, size_t n, uint32_t max) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        uint32_t len;
        switch (r % 20) {
        case 0: len = 8192 + (uint32_t)((r >> 8) % 120000); break;
        case 1: case 2: case 3: case 4: len = 1024 + (uint32_t)((r >> 8) % 7000); break;
        default: len = 16 + (uint32_t)((r >> 8) % 1000); break;
        }
        out[i] = len < max ? len : max;
    }
}

static void random_batches_every_policy(void) {
    const struct { size_t n; uint32_t dp, cp, bucket; } cases[] = {
        {256, 4, 8, 26 * 1024}, {40, 2, 16, 13 * 1024}, {3, 4, 8, 26 * 1024},
        {1, 1, 1, 100000},      {97, 5, 3, 50000},      {513, 8, 4, 16384},
    };
    uint32_t lengths[513];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rng_state = 1000 + k;
        draw(lengths, cases[k].n, cases[k].cp * cases[k].bucket);
        for (uint32_t policy = 0; policy <= SKRULL_POLICY_BALANCED; policy++) {
            for (uint32_t victim = 0; victim < 2; victim++) {
                skrull_config c = config(cases[k].dp, cases[k].cp, cases[k].bucket);
                c.policy = policy;
                c.victim = victim;
                /* Both formulas; balanced plans on time and takes only the default. */
                c.flops = policy == SKRULL_POLICY_BALANCED ? SKRULL_FLOPS_PAPER : victim;
                plan_store s;
                store_init(&s, cases[k].n, c.dp, c.cp);
                CHECK_STATUS(store_schedule(&s, &c, lengths, cases[k].n), SKRULL_STATUS_OK);
                CHECK(verify_plan(&c, lengths, cases[k].n, &s) == 0);
                CHECK(all_guards_intact(&s));
                store_free(&s);
            }
        }
    }
}

static void awkward_but_valid(void) {
    /* Empty batch: NULL lengths allowed, every DP rank runs 0 micro-batches. */
    skrull_config c = config(3, 2, 100);
    plan_store s;
    store_init(&s, 0, 3, 2);
    CHECK_STATUS(store_schedule(&s, &c, NULL, 0), SKRULL_STATUS_OK);
    CHECK(s.bufs.summary->micro_batches == 0 && s.bufs.summary->sequences == 0);
    CHECK(s.bufs.micro_batches_per_dp[0] == 0 && s.bufs.micro_batches_per_dp[2] == 0);
    store_free(&s);

    /* Fewer sequences than DP ranks, all equal, each exactly at the budget of N x C. */
    const uint32_t at_budget[] = {800, 800, 800};
    c = config(5, 8, 100);
    for (uint32_t policy = 0; policy <= SKRULL_POLICY_BALANCED; policy++) {
        c.policy = policy;
        store_init(&s, 3, 5, 8);
        CHECK_STATUS(store_schedule(&s, &c, at_budget, 3), SKRULL_STATUS_OK);
        CHECK(verify_plan(&c, at_budget, 3, &s) == 0);
        CHECK(s.bufs.summary->peak_rank_tokens == 100);
        store_free(&s);
    }

    /* A single sequence of exactly the budget on one GPU stays local (no CP cost). */
    const uint32_t one[] = {4096};
    c = config(1, 4, 4096);
    store_init(&s, 1, 1, 4);
    CHECK_STATUS(store_schedule(&s, &c, one, 1), SKRULL_STATUS_OK);
    CHECK(s.bufs.placements[0].cp_rank == 0 && s.bufs.summary->sharded == 0);
    CHECK(verify_plan(&c, one, 1, &s) == 0);
    store_free(&s);
}

static void workspace_alignment_and_reuse(void) {
    uint32_t lengths[200];
    rng_state = 77;
    draw(lengths, 200, 8 * 8192);
    skrull_config c = config(4, 8, 8192);
    plan_store ref;
    store_init(&ref, 200, 4, 8);
    CHECK_STATUS(store_schedule(&ref, &c, lengths, 200), SKRULL_STATUS_OK);
    size_t need = skrull_workspace_size(200, 4, 8);
    unsigned char *big = (unsigned char *)malloc(need + 16);
    CHECK(big != NULL);
    for (size_t shift = 0; shift < 16 && big != NULL; shift++) {
        plan_store s;
        store_init(&s, 200, 4, 8);
        memset(big, (int)shift, need + 16); /* stale contents must not matter */
        CHECK_STATUS(skrull_schedule(&c, lengths, 200, big + shift, need, &s.bufs),
                     SKRULL_STATUS_OK);
        CHECK(memcmp(s.bufs.placements, ref.bufs.placements,
                     200 * sizeof(skrull_placement)) == 0);
        CHECK(memcmp(s.bufs.summary, ref.bufs.summary, sizeof(skrull_summary)) == 0);
        store_free(&s);
    }
    free(big);
    /* The same buffers reused for the next batch. */
    CHECK_STATUS(store_schedule(&ref, &c, lengths + 100, 100), SKRULL_STATUS_OK);
    CHECK(ref.bufs.summary->sequences == 100);
    store_free(&ref);
}

static void dacp_alone(void) {
    const uint32_t lengths[] = {1, 2, 2, 3, 4, 6, 9, 14, 30};
    const int32_t want[] = {0, 1, 2, -1, 0, 1, 2, 3, -1};
    skrull_config c = config(1, 4, 24);
    size_t wl = skrull_workspace_size(9, 1, 4);
    void *ws = malloc(wl);
    int32_t ranks[9];
    skrull_dacp_summary sum;
    CHECK_STATUS(skrull_dacp_place(&c, lengths, 9, ws, wl, ranks, 9, &sum), SKRULL_STATUS_OK);
    CHECK(memcmp(ranks, want, sizeof want) == 0);
    CHECK(sum.sharded == 2 && sum.rollbacks == 1);
    free(ws);
}

int main(void) {
    paper_example_1();
    several_micro_batches();
    random_batches_every_policy();
    awkward_but_valid();
    workspace_alignment_and_reuse();
    dacp_alone();
    return report("plan");
}
