/*
 * Thread safety: many threads scheduling at once, each with its own workspace and outputs
 * (sharing the configuration and the lengths), get the single-threaded plan every time.
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
    }
    store_free(&s);
    return NULL;
}

int main(void) {
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(x >> 33);
        lengths[i] = (r % 16 == 0) ? 4096 + r % 60000 : 32 + r % 2000;
    }
    CHECK_STATUS(skrull_config_init(&cfg, sizeof cfg), SKRULL_STATUS_OK);
    store_init(&reference, N, cfg.dp, cfg.cp);
    CHECK_STATUS(store_schedule(&reference, &cfg, lengths, N), SKRULL_STATUS_OK);
    CHECK(verify_plan(&cfg, lengths, N, &reference) == 0);

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
    store_free(&reference);
    return report("threads");
}
