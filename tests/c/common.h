/*
 * Shared helpers of the C tests: a tiny check harness, guarded buffer allocation, and an
 * independent plan checker that trusts nothing but the placements and the lengths.
 */
#ifndef SKRULL_TEST_COMMON_H
#define SKRULL_TEST_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skrull.h"

static int g_pass;
static int g_fail;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) {                                                                     \
            g_pass++;                                                                   \
        } else {                                                                        \
            g_fail++;                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                               \
    } while (0)

#define CHECK_STATUS(got, want)                                                         \
    do {                                                                                \
        skrull_status got_ = (got);                                                     \
        skrull_status want_ = (want);                                                   \
        if (got_ == want_) {                                                            \
            g_pass++;                                                                   \
        } else {                                                                        \
            g_fail++;                                                                   \
            fprintf(stderr, "%s:%d: %s returned %u (%s), want %u (%s)\n", __FILE__,     \
                    __LINE__, #got, (unsigned)got_, skrull_status_str(got_),            \
                    (unsigned)want_, skrull_status_str(want_));                         \
        }                                                                               \
    } while (0)

/* Prints the check totals and returns the process exit status. */
static inline int report(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}

/* Bytes of guard pattern around every buffer (a multiple of every alignment used). */
#define GUARD 64
#define PATTERN 0xA5

/* A heap buffer with GUARD pattern bytes on each side; `data` is what the library sees. */
typedef struct {
    unsigned char *base;
    void *data;
    size_t bytes;
} guarded;

static inline guarded guarded_alloc(size_t bytes) {
    guarded g;
    g.bytes = bytes;
    g.base = (unsigned char *)malloc(bytes + 2 * GUARD);
    if (g.base == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memset(g.base, PATTERN, bytes + 2 * GUARD);
    g.data = g.base + GUARD;
    return g;
}

/* Whether the guard bytes on both sides still hold the pattern. */
static inline int guards_intact(const guarded *g) {
    for (size_t i = 0; i < GUARD; i++) {
        if (g->base[i] != PATTERN || g->base[GUARD + g->bytes + i] != PATTERN) {
            return 0;
        }
    }
    return 1;
}

/* Every buffer of one plan, sized by skrull_plan_sizes(). */
typedef struct {
    skrull_sizes sizes;
    guarded placements, micro_batches, members, rank_tokens, per_dp, summary, workspace;
    skrull_plan_buffers bufs;
} plan_store;

static inline void store_init(plan_store *s, size_t n, uint32_t dp, uint32_t cp) {
    if (skrull_plan_sizes(n, dp, cp, &s->sizes) != SKRULL_STATUS_OK) {
        fprintf(stderr, "skrull_plan_sizes(%zu, %u, %u) failed\n", n, (unsigned)dp,
                (unsigned)cp);
        exit(2);
    }
    s->placements = guarded_alloc(s->sizes.placements * sizeof(skrull_placement));
    s->micro_batches = guarded_alloc(s->sizes.micro_batches * sizeof(skrull_micro_batch));
    s->members = guarded_alloc(s->sizes.members * sizeof(uint32_t));
    s->rank_tokens = guarded_alloc(s->sizes.rank_tokens * sizeof(uint32_t));
    s->per_dp = guarded_alloc(s->sizes.micro_batches_per_dp * sizeof(uint32_t));
    s->summary = guarded_alloc(sizeof(skrull_summary));
    s->workspace = guarded_alloc(s->sizes.workspace_bytes);
    memset(&s->bufs, 0, sizeof s->bufs);
    s->bufs.struct_size = sizeof s->bufs;
    s->bufs.placements = (skrull_placement *)s->placements.data;
    s->bufs.placements_len = s->sizes.placements;
    s->bufs.micro_batches = (skrull_micro_batch *)s->micro_batches.data;
    s->bufs.micro_batches_len = s->sizes.micro_batches;
    s->bufs.members = (uint32_t *)s->members.data;
    s->bufs.members_len = s->sizes.members;
    s->bufs.rank_tokens = (uint32_t *)s->rank_tokens.data;
    s->bufs.rank_tokens_len = s->sizes.rank_tokens;
    s->bufs.micro_batches_per_dp = (uint32_t *)s->per_dp.data;
    s->bufs.micro_batches_per_dp_len = s->sizes.micro_batches_per_dp;
    s->bufs.summary = (skrull_summary *)s->summary.data;
}

static inline void store_free(plan_store *s) {
    free(s->placements.base);
    free(s->micro_batches.base);
    free(s->members.base);
    free(s->rank_tokens.base);
    free(s->per_dp.base);
    free(s->summary.base);
    free(s->workspace.base);
}

static inline skrull_status store_schedule(plan_store *s, const skrull_config *cfg,
                                           const uint32_t *lengths, size_t n) {
    return skrull_schedule(cfg, lengths, n, s->workspace.data, s->sizes.workspace_bytes,
                           &s->bufs);
}

/* Whether every output buffer (not the workspace) still holds only the guard pattern. */
static inline int outputs_untouched(const plan_store *s) {
    const guarded *g[] = {&s->placements, &s->micro_batches, &s->members,
                          &s->rank_tokens, &s->per_dp, &s->summary};
    for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) {
        const unsigned char *p = g[k]->base;
        for (size_t i = 0; i < g[k]->bytes + 2 * GUARD; i++) {
            if (p[i] != PATTERN) {
                return 0;
            }
        }
    }
    return 1;
}

/* Whether no byte around any buffer (workspace included) was written. */
static inline int all_guards_intact(const plan_store *s) {
    return guards_intact(&s->placements) && guards_intact(&s->micro_batches) &&
           guards_intact(&s->members) && guards_intact(&s->rank_tokens) &&
           guards_intact(&s->per_dp) && guards_intact(&s->summary) &&
           guards_intact(&s->workspace);
}

/* The tokens one GPU holds of a sharded sequence (no shard padding). */
static inline uint32_t ceil_div(uint32_t a, uint32_t b) { return a / b + (a % b != 0); }

/*
 * Independently checks a plan written by skrull_schedule() (no shard padding): every
 * sequence listed exactly once under the micro-batch its placement names, the table grouped
 * by (DP rank, index), token loads recounted and within the budget, and the summary.
 * Returns the number of violations (and prints the first few).
 */
static inline int verify_plan(const skrull_config *cfg, const uint32_t *lengths, size_t n,
                              const plan_store *s) {
    const skrull_placement *pl = s->bufs.placements;
    const skrull_micro_batch *mb = s->bufs.micro_batches;
    const uint32_t *members = s->bufs.members;
    const uint32_t *rt = s->bufs.rank_tokens;
    const uint32_t *per_dp = s->bufs.micro_batches_per_dp;
    const skrull_summary *sum = s->bufs.summary;
    uint32_t cp = cfg->cp;
    int bad = 0;
#define VERIFY(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            if (bad++ < 5) fprintf(stderr, "%s:%d: plan violates %s\n", __FILE__,       \
                                   __LINE__, #cond);                                    \
        }                                                                               \
    } while (0)
    unsigned char *seen = (unsigned char *)calloc(n + 1, 1);
    uint64_t *load = (uint64_t *)calloc(cp, sizeof *load);
    uint32_t g = 0, first = 0, sharded = 0, peak = 0;
    uint64_t total = 0;
    if (seen == NULL || load == NULL) {
        exit(2);
    }
    for (uint32_t d = 0; d < cfg->dp; d++) {
        for (uint32_t j = 0; j < per_dp[d]; j++, g++) {
            VERIFY(g < sum->micro_batches);
            VERIFY(mb[g].dp_rank == d && mb[g].index == j);
            VERIFY(mb[g].first == first && mb[g].count >= 1);
            memset(load, 0, cp * sizeof *load);
            for (uint32_t k = 0; k < mb[g].count; k++) {
                uint32_t seq = members[first + k];
                VERIFY(seq < n && !seen[seq]);
                if (seq >= n || seen[seq]) {
                    continue;
                }
                seen[seq] = 1;
                VERIFY(pl[seq].dp_rank == d && pl[seq].micro_batch == j);
                if (pl[seq].cp_rank == SKRULL_SHARDED) {
                    sharded++;
                    VERIFY(pl[seq].tokens_per_gpu == ceil_div(lengths[seq], cp));
                    for (uint32_t r = 0; r < cp; r++) {
                        load[r] += ceil_div(lengths[seq], cp);
                    }
                } else {
                    VERIFY(pl[seq].cp_rank >= 0 && (uint32_t)pl[seq].cp_rank < cp);
                    VERIFY(pl[seq].tokens_per_gpu == lengths[seq]);
                    if (pl[seq].cp_rank >= 0 && (uint32_t)pl[seq].cp_rank < cp) {
                        load[pl[seq].cp_rank] += lengths[seq];
                    }
                }
            }
            for (uint32_t r = 0; r < cp; r++) {
                VERIFY(load[r] <= cfg->bucket_tokens);
                VERIFY(rt[(size_t)g * cp + r] == load[r]);
                if (load[r] > peak) {
                    peak = (uint32_t)load[r];
                }
            }
            first += mb[g].count;
        }
    }
    for (size_t i = 0; i < n; i++) {
        VERIFY(seen[i]);
        total += lengths[i];
    }
    VERIFY(g == sum->micro_batches && first == n);
    VERIFY(sum->sequences == n && sum->total_tokens == total);
    VERIFY(sum->sharded == sharded && sum->peak_rank_tokens == peak);
    VERIFY(sum->_reserved == 0);
#undef VERIFY
    free(seen);
    free(load);
    return bad;
}

#endif /* SKRULL_TEST_COMMON_H */
