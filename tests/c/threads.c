/*
 * Thread safety: many threads scheduling at once, each with its own workspace and outputs
 * (sharing the configuration, the lengths and one prepared setup), get the single-threaded
 * plan every time, statelessly and with the shared setup, for `skrull` and `balanced`; the
 * shared setup's bytes are the same after every thread is done (planning only reads it).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "common.h"

#define THREADS 8
#define ROUNDS 25
#define N 1024

static uint32_t lengths[N];
static skrull_config cfg;
static plan_store reference;
static const skrull_setup *setup;

typedef struct {
    int mismatches;
    int failures;
} result;

static int same_plan(const plan_store *a, const plan_store *b) {
    const skrull_summary *s = a->bufs.summary;
    return memcmp(a->bufs.summary, b->bufs.summary, sizeof *s) == 0 &&
           memcmp(a->bufs.placements, b->bufs.placements, N * sizeof(skrull_placement)) == 0 &&
           memcmp(a->bufs.micro_batches, b->bufs.micro_batches,
                  s->micro_batches * sizeof(skrull_micro_batch)) == 0 &&
           memcmp(a->bufs.members, b->bufs.members, N * sizeof(uint32_t)) == 0 &&
           memcmp(a->bufs.rank_tokens, b->bufs.rank_tokens,
                  (size_t)s->micro_batches * cfg.cp * sizeof(uint32_t)) == 0;
}

static void *worker(void *arg) {
    result *r = (result *)arg;
    plan_store s;
    store_init(&s, N, cfg.dp, cfg.cp);
    for (int round = 0; round < ROUNDS; round++) {
        if (store_schedule(&s, &cfg, lengths, N) != SKRULL_STATUS_OK) {
            r->failures++;
        } else if (!same_plan(&s, &reference)) {
            r->mismatches++;
        }
        if (skrull_schedule_prepared(setup, lengths, N, s.workspace.data,
                                     s.sizes.workspace_bytes, &s.bufs) != SKRULL_STATUS_OK) {
            r->failures++;
        } else if (!same_plan(&s, &reference)) {
            r->mismatches++;
        }
    }
    store_free(&s);
    return NULL;
}

/* Runs THREADS workers on `policy` and checks their plans and the shared setup. */
static void run(uint32_t policy) {
    CHECK_STATUS(skrull_config_init(&cfg, sizeof cfg), SKRULL_STATUS_OK);
    cfg.policy = policy;
    store_init(&reference, N, cfg.dp, cfg.cp);
    CHECK_STATUS(store_schedule(&reference, &cfg, lengths, N), SKRULL_STATUS_OK);
    CHECK(verify_plan(&cfg, lengths, N, &reference) == 0);
    size_t bytes = skrull_setup_size();
    unsigned char *mem = (unsigned char *)malloc(bytes);
    unsigned char *before = (unsigned char *)malloc(bytes);
    if (mem == NULL || before == NULL) {
        exit(2);
    }
    CHECK_STATUS(skrull_setup_init(&cfg, mem, bytes, &setup, NULL), SKRULL_STATUS_OK);
    memcpy(before, mem, bytes);

    pthread_t tid[THREADS];
    result res[THREADS];
    memset(res, 0, sizeof res);
    for (int t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&tid[t], NULL, worker, &res[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) {
        CHECK(pthread_join(tid[t], NULL) == 0);
        CHECK(res[t].failures == 0);
        CHECK(res[t].mismatches == 0);
    }
    CHECK(memcmp(before, mem, bytes) == 0);
    free(mem);
    free(before);
    store_free(&reference);
}

int main(void) {
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(x >> 33);
        lengths[i] = (r % 16 == 0) ? 4096 + r % 60000 : 32 + r % 2000;
    }
    run(SKRULL_POLICY_SKRULL);
    run(SKRULL_POLICY_BALANCED);
    return report("threads");
}
