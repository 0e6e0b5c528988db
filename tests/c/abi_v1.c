/*
 * A program built against the first header (ABI version 1). tests/c/v1/skrull.h is a verbatim
 * copy of include/skrull.h as of commit 26cca3a: its skrull_config is 60 bytes of uint32_t
 * fields, so alignof(skrull_config) is 4 and a program may place one at any 4-byte boundary,
 * for example as the second member of a struct after a uint32_t. Appended fields never change
 * SKRULL_ABI_VERSION, so this program must keep working against today's library.
 *
 * Regression (outside harness, round 3): once the cost_model pointer was appended, the
 * library checked every config pointer against the new 8-byte alignment whatever struct_size
 * said, so this program got SKRULL_STATUS_INVALID_ARG from skrull_config_default,
 * skrull_config_preset and skrull_schedule. Every entry point of the first header that takes
 * a config is called here with one at a 4-byte offset (address = 4 mod 8), and must answer as
 * it does for the same config at an 8-byte boundary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "v1/skrull.h"

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
            fprintf(stderr, "%s:%d: %s returned %u (%s), want %u\n", __FILE__, __LINE__, \
                    #got, (unsigned)got_, skrull_status_str(got_), (unsigned)want_);     \
        }                                                                               \
    } while (0)

#define N 10
static const uint32_t LENGTHS[N] = {1, 2, 2, 3, 4, 6, 9, 14, 30, 5};

/* The config as the second member after a uint32_t, in a struct aligned to 8: it sits at a
 * 4-byte boundary that is not an 8-byte one. `after` catches writes past the 60 bytes. */
typedef struct {
    _Alignas(8) uint32_t before;
    skrull_config cfg;
    uint32_t after[8];
} holder;

/* One plan's buffers, as the first header declares them. */
typedef struct {
    skrull_placement placements[N];
    skrull_micro_batch micro_batches[N];
    uint32_t members[N];
    uint32_t rank_tokens[N * 4];
    uint32_t per_dp[2];
    skrull_summary summary;
    unsigned char ws[8192];
    skrull_plan_buffers bufs;
} plan_out;

static void plan_out_init(plan_out *p) {
    memset(p, 0x5A, sizeof *p);
    memset(&p->bufs, 0, sizeof p->bufs);
    p->bufs.struct_size = sizeof p->bufs; /* 96 on 64-bit: version 1 */
    p->bufs.placements = p->placements;
    p->bufs.placements_len = N;
    p->bufs.micro_batches = p->micro_batches;
    p->bufs.micro_batches_len = N;
    p->bufs.members = p->members;
    p->bufs.members_len = N;
    p->bufs.rank_tokens = p->rank_tokens;
    p->bufs.rank_tokens_len = N * 4;
    p->bufs.micro_batches_per_dp = p->per_dp;
    p->bufs.micro_batches_per_dp_len = 2;
    p->bufs.summary = &p->summary;
}

static skrull_status schedule(const skrull_config *c, plan_out *p) {
    if (skrull_workspace_size(N, c->dp, c->cp) > sizeof p->ws) {
        fprintf(stderr, "workspace grew past the test's array\n");
        exit(2);
    }
    return skrull_schedule(c, LENGTHS, N, p->ws, sizeof p->ws, &p->bufs);
}

/* Whether two plans hold the same bytes (the workspace and the struct aside). */
static int same_plan(const plan_out *a, const plan_out *b) {
    return memcmp(a, b, offsetof(plan_out, ws)) == 0;
}

/* One GPU's layout, as the first header declares it. */
typedef struct {
    skrull_layout_capacity cap;
    skrull_span spans[2 * N];
    int32_t local_cu[N + 1], sharded_cu[N + 1], sharded_cu_padded[N + 1], rank_cu[N + 1];
    int32_t positions[24];
    skrull_layout layout;
    unsigned char ws[4096];
    skrull_layout_buffers bufs;
} layout_out;

static skrull_status fill(const skrull_config *c, plan_out *p, layout_out *o, skrull_gpu gpu) {
    memset(o, 0x5A, sizeof *o);
    skrull_status st = skrull_layout_sizes_max(c, N, &o->cap);
    if (st != SKRULL_STATUS_OK) {
        return st;
    }
    if (o->cap.spans > 2 * N || o->cap.local_cu_seqlens > N + 1 || o->cap.positions > 24 ||
        o->cap.workspace_bytes > sizeof o->ws) {
        fprintf(stderr, "layout capacities grew past the test's arrays\n");
        exit(2);
    }
    skrull_layout_capacity exact;
    st = skrull_layout_sizes(c, LENGTHS, N, &p->bufs, gpu, o->ws, sizeof o->ws, &exact);
    if (st != SKRULL_STATUS_OK) {
        return st;
    }
    memset(&o->bufs, 0, sizeof o->bufs);
    o->bufs.struct_size = sizeof o->bufs; /* 112 on 64-bit: version 1 */
    o->bufs.spans = o->spans;
    o->bufs.spans_len = o->cap.spans;
    o->bufs.local_cu_seqlens = o->local_cu;
    o->bufs.local_cu_seqlens_len = o->cap.local_cu_seqlens;
    o->bufs.sharded_cu_seqlens = o->sharded_cu;
    o->bufs.sharded_cu_seqlens_len = o->cap.sharded_cu_seqlens;
    o->bufs.sharded_cu_seqlens_padded = o->sharded_cu_padded;
    o->bufs.sharded_cu_seqlens_padded_len = o->cap.sharded_cu_seqlens;
    o->bufs.rank_cu_seqlens = o->rank_cu;
    o->bufs.rank_cu_seqlens_len = o->cap.sharded_cu_seqlens;
    o->bufs.positions = o->positions;
    o->bufs.positions_len = o->cap.positions;
    o->bufs.layout = &o->layout;
    return skrull_layout_fill(c, LENGTHS, N, &p->bufs, gpu, o->ws, sizeof o->ws, &o->bufs);
}

static int untouched_around(const holder *h) {
    if (h->before != 0xC0FFEEu) {
        return 0;
    }
    for (size_t k = 0; k < sizeof h->after / sizeof h->after[0]; k++) {
        if (h->after[k] != 0xC0FFEEu) {
            return 0;
        }
    }
    return 1;
}

static void config_at_a_4_byte_offset_is_accepted(void) {
    holder h;
    memset(&h, 0, sizeof h);
    h.before = 0xC0FFEEu;
    for (size_t k = 0; k < sizeof h.after / sizeof h.after[0]; k++) {
        h.after[k] = 0xC0FFEEu;
    }
    CHECK(sizeof(skrull_config) == 60);
    CHECK(((uintptr_t)&h.cfg) % 8 == 4);

    /* The version-1 initialisers: accepted, 60 bytes written, nothing around them. */
    CHECK_STATUS(skrull_config_preset(SKRULL_PRESET_QWEN2_5_7B, &h.cfg), SKRULL_STATUS_OK);
    CHECK(h.cfg.struct_size == 60 && h.cfg.bucket_tokens == 13312);
    CHECK_STATUS(skrull_config_default(&h.cfg), SKRULL_STATUS_OK);
    CHECK(h.cfg.struct_size == 60 && h.cfg.dp == 4 && h.cfg.cp == 8);
    CHECK(untouched_around(&h));

    /* The same configuration at an 8-byte boundary gives the reference answers. */
    h.cfg.dp = 2;
    h.cfg.cp = 4;
    h.cfg.bucket_tokens = 24;
    skrull_config aligned_storage[2];
    skrull_config *aligned = &aligned_storage[((uintptr_t)&aligned_storage[0] % 8) ? 1 : 0];
    CHECK(((uintptr_t)aligned) % 8 == 0);
    *aligned = h.cfg;

    static plan_out ref, got;
    plan_out_init(&ref);
    plan_out_init(&got);
    CHECK_STATUS(schedule(aligned, &ref), SKRULL_STATUS_OK);
    CHECK_STATUS(schedule(&h.cfg, &got), SKRULL_STATUS_OK);
    CHECK(same_plan(&ref, &got));

    int32_t ranks_ref[N], ranks_got[N];
    skrull_dacp_summary ds_ref, ds_got;
    unsigned char ws[8192];
    CHECK(skrull_workspace_size(N, 2, 4) <= sizeof ws);
    CHECK_STATUS(skrull_dacp_place(aligned, LENGTHS, N, ws, sizeof ws, ranks_ref, N, &ds_ref),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_dacp_place(&h.cfg, LENGTHS, N, ws, sizeof ws, ranks_got, N, &ds_got),
                 SKRULL_STATUS_OK);
    CHECK(memcmp(ranks_ref, ranks_got, sizeof ranks_ref) == 0);
    CHECK(memcmp(&ds_ref, &ds_got, sizeof ds_ref) == 0);

    /* skrull_layout_sizes_max, skrull_layout_sizes and skrull_layout_fill on every GPU. */
    static layout_out lref, lgot;
    for (uint32_t d = 0; d < 2; d++) {
        for (uint32_t m = 0; m < ref.per_dp[d]; m++) {
            for (uint32_t r = 0; r < 4; r++) {
                skrull_gpu gpu = {d, m, r};
                CHECK_STATUS(fill(aligned, &ref, &lref, gpu), SKRULL_STATUS_OK);
                CHECK_STATUS(fill(&h.cfg, &ref, &lgot, gpu), SKRULL_STATUS_OK);
                CHECK(memcmp(&lref.cap, &lgot.cap, sizeof lref.cap) == 0);
                CHECK(memcmp(lref.spans, lgot.spans, sizeof lref.spans) == 0);
                CHECK(memcmp(&lref.layout, &lgot.layout, sizeof lref.layout) == 0);
                CHECK(memcmp(lref.positions, lgot.positions, sizeof lref.positions) == 0);
            }
        }
    }

    /* The checks still run on a config at a 4-byte offset: a bad value is its status. */
    h.cfg.dp = 0;
    plan_out_init(&got);
    CHECK_STATUS(schedule(&h.cfg, &got), SKRULL_STATUS_INVALID_DP);
    h.cfg.dp = 2;
    h.cfg.struct_size = 61; /* cuts the field after version 1 */
    CHECK_STATUS(schedule(&h.cfg, &got), SKRULL_STATUS_BAD_STRUCT_SIZE);
    h.cfg.struct_size = 60;
    CHECK(untouched_around(&h));

    /* Not even 4-byte aligned: refused before struct_size is read. */
    static unsigned char raw[128];
    unsigned char *odd = raw + (8 - ((uintptr_t)raw % 8)) % 8 + 2;
    memcpy(odd, &h.cfg, sizeof h.cfg);
    skrull_config *odd_cfg = NULL;
    memcpy(&odd_cfg, &odd, sizeof odd_cfg); /* no misaligned object is ever formed in C */
    CHECK_STATUS(skrull_layout_sizes_max(odd_cfg, N, &lref.cap), SKRULL_STATUS_INVALID_ARG);
}

int main(void) {
    CHECK(skrull_abi_version() == SKRULL_ABI_VERSION);
    config_at_a_4_byte_offset_is_accepted();
    printf("abi_v1: %d checks passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}
