/*
 * The prepared form through the C ABI: skrull_setup_init() once, skrull_schedule_prepared()
 * for many batches, each plan byte-identical to skrull_schedule()'s for every policy; a setup
 * in a misaligned buffer; the errors of init (config first, NULL, short and overlapping
 * buffers), of a handle that is NULL, misaligned or not a setup, and skrull_config_check().
 */
#include "common.h"

/* SplitMix64, for the random batches. */
typedef struct {
    uint64_t s;
} rng;
static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The bytes of every output buffer of a plan (placements .. per-DP counts and the summary). */
static int same_plan(const plan_store *a, const plan_store *b) {
    const skrull_sizes *z = &a->sizes;
    return memcmp(a->placements.data, b->placements.data,
                  z->placements * sizeof(skrull_placement)) == 0 &&
           memcmp(a->micro_batches.data, b->micro_batches.data,
                  a->bufs.summary->micro_batches * sizeof(skrull_micro_batch)) == 0 &&
           memcmp(a->members.data, b->members.data, z->members * sizeof(uint32_t)) == 0 &&
           memcmp(a->per_dp.data, b->per_dp.data,
                  z->micro_batches_per_dp * sizeof(uint32_t)) == 0 &&
           memcmp(a->summary.data, b->summary.data, sizeof(skrull_summary)) == 0;
}

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

/* One setup serves many batches; every plan equals the stateless call's. */
static void prepared_plans_equal_stateless_ones(uint32_t policy, size_t shift) {
    skrull_config c = config(3, 4, 4096, policy);
    c.subgroups = policy == SKRULL_POLICY_BALANCED;
    size_t bytes = skrull_setup_size();
    CHECK(bytes > 0);
    unsigned char *mem = (unsigned char *)malloc(bytes + 16);
    const skrull_setup *setup = NULL;
    CHECK_STATUS(skrull_setup_init(&c, mem + shift, bytes, &setup, NULL), SKRULL_STATUS_OK);
    CHECK(setup != NULL);
    rng r = {0x5EED0000u + policy};
    for (int batch = 0; batch < 20; batch++) {
        uint32_t lengths[64];
        size_t n = 1 + (size_t)(rng_next(&r) % 64);
        for (size_t i = 0; i < n; i++) {
            uint64_t x = rng_next(&r);
            lengths[i] = (uint32_t)(x % 16 == 0 ? 1 + (x >> 8) % 16000 : 1 + (x >> 8) % 900);
        }
        plan_store a, b;
        store_init(&a, n, c.dp, c.cp);
        store_init(&b, n, c.dp, c.cp);
        a.bufs.cp_groups = NULL;
        skrull_cp_group ga[64], gb[64];
        a.bufs.cp_groups = ga;
        a.bufs.cp_groups_len = n;
        b.bufs.cp_groups = gb;
        b.bufs.cp_groups_len = n;
        skrull_status sa = store_schedule(&a, &c, lengths, n);
        skrull_status sb = skrull_schedule_prepared(setup, lengths, n, b.workspace.data,
                                                    b.sizes.workspace_bytes, &b.bufs);
        CHECK_STATUS(sb, sa);
        if (sa == SKRULL_STATUS_OK) {
            CHECK(same_plan(&a, &b));
            CHECK(memcmp(ga, gb, n * sizeof ga[0]) == 0);
        }
        CHECK(all_guards_intact(&b));
        store_free(&a);
        store_free(&b);
    }
    free(mem);
}

/* init checks the configuration first, then its pointers and sizes; nothing else written. */
static void init_errors(void) {
    skrull_config c = config(2, 2, 64, SKRULL_POLICY_BALANCED);
    size_t bytes = skrull_setup_size();
    unsigned char *mem = (unsigned char *)malloc(bytes + 32);
    const skrull_setup *setup = (const skrull_setup *)0x1;
    skrull_error_info info;
    skrull_config bad = c;
    bad.cp = 0;
    memset(&info, 0xA5, sizeof info);
    CHECK_STATUS(skrull_setup_init(&bad, NULL, 0, NULL, &info), SKRULL_STATUS_INVALID_CP);
    CHECK(info.status == SKRULL_STATUS_INVALID_CP && info.value == 0);
    CHECK_STATUS(skrull_setup_init(NULL, mem, bytes, &setup, NULL), SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_setup_init(&c, NULL, bytes, &setup, NULL), SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_setup_init(&c, mem, bytes, NULL, NULL), SKRULL_STATUS_NULL_ARG);
    /* Short by one byte at the worst alignment, and short at a good one. */
    size_t worst = 0;
    while ((uintptr_t)(mem + worst) % 16 != 1) {
        worst++;
    }
    CHECK_STATUS(skrull_setup_init(&c, mem + worst, bytes - 1, &setup, NULL),
                 SKRULL_STATUS_WORKSPACE_TOO_SMALL);
    CHECK_STATUS(skrull_setup_init(&c, mem + worst, bytes, &setup, NULL), SKRULL_STATUS_OK);
    /* The handle inside the buffer it is written to: overlapping arguments. */
    const skrull_setup **inside = (const skrull_setup **)(void *)(mem + 16);
    CHECK_STATUS(skrull_setup_init(&c, mem, bytes, inside, NULL), SKRULL_STATUS_INVALID_ARG);
    /* Details overlapping the buffer are not written. */
    memset(mem, 0x11, 32);
    CHECK_STATUS(skrull_setup_init(&bad, mem, bytes, &setup, (skrull_error_info *)(void *)mem),
                 SKRULL_STATUS_INVALID_CP);
    CHECK(mem[0] == 0x11 && mem[31] == 0x11);
    free(mem);
}

/* A handle that is NULL, misaligned or not a setup is refused before anything else. */
static void bad_handles(void) {
    plan_store s;
    const uint32_t lengths[3] = {5, 9, 2};
    store_init(&s, 3, 2, 2);
    CHECK_STATUS(skrull_schedule_prepared(NULL, lengths, 3, s.workspace.data,
                                          s.sizes.workspace_bytes, &s.bufs),
                 SKRULL_STATUS_NULL_ARG);
    uint64_t junk[64];
    memset(junk, 0x5A, sizeof junk);
    CHECK_STATUS(skrull_schedule_prepared((const skrull_setup *)(void *)junk, lengths, 3,
                                          s.workspace.data, s.sizes.workspace_bytes, &s.bufs),
                 SKRULL_STATUS_INVALID_ARG);
    CHECK_STATUS(
        skrull_schedule_prepared((const skrull_setup *)(void *)((unsigned char *)junk + 1),
                                 lengths, 3, s.workspace.data, s.sizes.workspace_bytes, &s.bufs),
        SKRULL_STATUS_INVALID_ARG);
    CHECK(outputs_untouched(&s));
    store_free(&s);
}

/* skrull_config_check: OK, or the status and details skrull_schedule would give. */
static void config_check(void) {
    skrull_config c = config(2, 2, 64, SKRULL_POLICY_SKRULL);
    skrull_error_info info;
    CHECK_STATUS(skrull_config_check(&c, NULL), SKRULL_STATUS_OK);
    c.bucket_tokens = 0;
    memset(&info, 0xA5, sizeof info);
    CHECK_STATUS(skrull_config_check(&c, &info), SKRULL_STATUS_INVALID_BUCKET);
    CHECK(info.status == SKRULL_STATUS_INVALID_BUCKET && info.value == 0 && info.index == -1);
    CHECK_STATUS(skrull_config_check(NULL, &info), SKRULL_STATUS_NULL_ARG);
    /* Details inside the configuration itself are not written. */
    skrull_config big[2];
    memset(big, 0, sizeof big);
    big[0] = c;
    unsigned char before[sizeof(skrull_config)];
    memcpy(before, &big[0], sizeof before);
    CHECK_STATUS(skrull_config_check(&big[0], (skrull_error_info *)(void *)&big[0].dp),
                 SKRULL_STATUS_INVALID_BUCKET);
    CHECK(memcmp(before, &big[0], sizeof before) == 0);
}

int main(void) {
    const uint32_t policies[] = {SKRULL_POLICY_SKRULL, SKRULL_POLICY_ROUNDROBIN,
                                 SKRULL_POLICY_DEEPSPEED, SKRULL_POLICY_PACKED,
                                 SKRULL_POLICY_BALANCED};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        prepared_plans_equal_stateless_ones(policies[k], k % 8);
    }
    init_errors();
    bad_handles();
    config_check();
    return report("prepared");
}
