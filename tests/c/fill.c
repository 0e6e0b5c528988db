/*
 * Filled micro-batches and a fixed micro-batch count through the C ABI
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

int main(void) {
    fixed_count_fills_every_rank(SKRULL_POLICY_SKRULL);
    fixed_count_fills_every_rank(SKRULL_POLICY_PACKED);
    fixed_count_fills_every_rank(SKRULL_POLICY_DEEPSPEED);
    too_small_a_count_names_the_one_that_fits();
    lockstep_fill_leaves_nothing_empty();
    return report("fill");
}
