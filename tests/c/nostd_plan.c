/*
 * A consumer of the no_std C library (skrull-ffi without `std`): plans the paper's example
 * batch and checks the plan with no C library at all (static storage only, no malloc, no
 * stdio), so the same file links into a bare-metal image and into a hosted test program.
 *
 *   hosted (build and run):  cc -std=c11 -Iinclude tests/c/nostd_plan.c libskrull.a
 *   bare metal (link only):  -DSKRULL_BARE_METAL, entry `skrull_reset` (see tests/c/nostd.sh)
 *   -DSKRULL_PANIC_EXTERN:   defines skrull_on_panic() for a library built with panic-extern
 *   -DSKRULL_WITH_STD:       linked with the default (std) library instead, for comparison
 *
 * The check is independent of the library: every sequence listed once, under the micro-batch
 * its placement names, loads recounted from the lengths and within the budget, the summary
 * recounted, then one GPU's layout whose spans must tile its tokens. It returns the number
 * of violations (0 = the plan is right).
 */
#include "skrull.h"

#define N 10
#define DP 2
#define CP 4
#define BUCKET 24

static const uint32_t LENGTHS[N] = {1, 2, 2, 3, 4, 6, 9, 14, 30, 5};

/* Everything the library needs, in static storage (the sizes are asserted at run time). */
static unsigned char workspace[4096];
static skrull_placement placements[N];
static skrull_micro_batch micro_batches[N];
static uint32_t members[N], rank_tokens[N * CP], per_dp[DP];
static skrull_summary summary;
static skrull_span spans[2 * N];
static int32_t local_cu[N + 1], sharded_cu[N + 1], sharded_cu_padded[N + 1], rank_cu[N + 1];
static int32_t positions[BUCKET];
static skrull_layout layout;

static uint32_t ceil_div(uint32_t a, uint32_t b) { return a / b + (a % b != 0); }

int skrull_nostd_check(void);

int skrull_nostd_check(void) {
    int bad = 0;
    skrull_config cfg;
    if (skrull_abi_version() != SKRULL_ABI_VERSION) return 100;
    if (skrull_config_init(&cfg, sizeof cfg) != SKRULL_STATUS_OK) return 101;
    cfg.dp = DP;
    cfg.cp = CP;
    cfg.bucket_tokens = BUCKET;
    if (skrull_workspace_size(N, DP, CP) > sizeof workspace) return 102;
    skrull_plan_buffers out = {.struct_size = sizeof out, .placements = placements,
                               .placements_len = N, .micro_batches = micro_batches,
                               .micro_batches_len = N, .members = members, .members_len = N,
                               .rank_tokens = rank_tokens, .rank_tokens_len = N * CP,
                               .micro_batches_per_dp = per_dp, .micro_batches_per_dp_len = DP,
                               .summary = &summary};
    if (skrull_schedule(&cfg, LENGTHS, N, workspace, sizeof workspace, &out) != SKRULL_STATUS_OK)
        return 103;
    /* Statuses and their strings are the same as in the std build. */
    if (skrull_schedule(&cfg, LENGTHS, N, workspace, 8, &out) !=
        SKRULL_STATUS_WORKSPACE_TOO_SMALL)
        bad++;
    if (skrull_status_str(SKRULL_STATUS_OK)[0] != 'o') bad++;
    /* Without std no panic is caught: the self-test says so instead of panicking. The same
     * program linked with the std library (SKRULL_WITH_STD, for the size comparison) gets the
     * caught panic. */
#ifdef SKRULL_WITH_STD
    if (skrull_panic_selftest() != SKRULL_STATUS_PANIC) bad++;
#else
    if (skrull_panic_selftest() != SKRULL_STATUS_INTERNAL) bad++;
#endif

    /* The plan, checked from the placements and the lengths alone. */
    unsigned char seen[N] = {0};
    uint32_t g = 0, first = 0, sharded = 0, peak = 0;
    uint64_t total = 0;
    for (uint32_t d = 0; d < DP; d++) {
        for (uint32_t j = 0; j < per_dp[d]; j++, g++) {
            uint32_t load[CP] = {0};
            if (g >= summary.micro_batches || micro_batches[g].dp_rank != d ||
                micro_batches[g].index != j || micro_batches[g].first != first ||
                micro_batches[g].count == 0 || first + micro_batches[g].count > N)
                return 104;
            for (uint32_t k = 0; k < micro_batches[g].count; k++) {
                uint32_t s = members[first + k];
                if (s >= N || seen[s]) return 105;
                seen[s] = 1;
                bad += placements[s].dp_rank != d || placements[s].micro_batch != j;
                if (placements[s].cp_rank == SKRULL_SHARDED) {
                    sharded++;
                    for (uint32_t r = 0; r < CP; r++) load[r] += ceil_div(LENGTHS[s], CP);
                } else if (placements[s].cp_rank >= 0 && placements[s].cp_rank < CP) {
                    load[placements[s].cp_rank] += LENGTHS[s];
                } else {
                    bad++;
                }
            }
            for (uint32_t r = 0; r < CP; r++) {
                bad += load[r] > BUCKET || rank_tokens[g * CP + r] != load[r];
                peak = load[r] > peak ? load[r] : peak;
            }
            first += micro_batches[g].count;
        }
    }
    for (uint32_t i = 0; i < N; i++) {
        bad += !seen[i];
        total += LENGTHS[i];
    }
    bad += g != summary.micro_batches || first != N || summary.sequences != N;
    bad += summary.total_tokens != total || summary.sharded != sharded;
    bad += summary.peak_rank_tokens != peak || summary._reserved != 0;

    /* One GPU's layout: its spans are contiguous and the positions follow them. */
    skrull_layout_capacity cap;
    if (skrull_layout_sizes_max(&cfg, N, &cap) != SKRULL_STATUS_OK) return 106;
    if (cap.spans > 2 * N || cap.local_cu_seqlens > N + 1 || cap.positions > BUCKET ||
        cap.workspace_bytes > sizeof workspace)
        return 107;
    skrull_layout_buffers lb = {.struct_size = sizeof lb, .spans = spans, .spans_len = cap.spans,
                                .local_cu_seqlens = local_cu,
                                .local_cu_seqlens_len = cap.local_cu_seqlens,
                                .sharded_cu_seqlens = sharded_cu,
                                .sharded_cu_seqlens_len = cap.sharded_cu_seqlens,
                                .sharded_cu_seqlens_padded = sharded_cu_padded,
                                .sharded_cu_seqlens_padded_len = cap.sharded_cu_seqlens,
                                .rank_cu_seqlens = rank_cu,
                                .rank_cu_seqlens_len = cap.sharded_cu_seqlens,
                                .positions = positions, .positions_len = cap.positions,
                                .layout = &layout};
    skrull_gpu gpu = {0, 0, 0};
    if (skrull_layout_fill(&cfg, LENGTHS, N, &out, gpu, workspace, sizeof workspace, &lb) !=
        SKRULL_STATUS_OK)
        return 108;
    uint32_t at = 0;
    for (uint32_t k = 0; k < layout.spans; k++) {
        bad += spans[k].offset != at;
        for (uint32_t i = 0; i < spans[k].len + spans[k].pad; i++)
            bad += positions[at + i] != (int32_t)(spans[k].start + i);
        at += spans[k].len + spans[k].pad;
    }
    bad += at != layout.tokens || layout.charged_tokens != rank_tokens[layout.micro_batch_global * CP];
    bad += layout.global_tokens != total;
    return bad;
}

#ifdef SKRULL_BARE_METAL
/*
 * A bare-metal image for a Cortex-M4F (thumbv7em-none-eabihf): the vector table's first two
 * words (initial stack pointer, reset handler), kept by -Wl,--require-defined=skrull_vectors.
 * Linked, never run, in CI: the point is that the library needs nothing but the C compiler's
 * own runtime (libgcc), no C library, no allocator, no operating system.
 */
static uint32_t stack[512];
volatile int skrull_result;

void skrull_reset(void);

void skrull_reset(void) {
    skrull_result = skrull_nostd_check();
    for (;;) {
    }
}

extern const uintptr_t skrull_vectors[2];
__attribute__((section(".vectors"), used)) const uintptr_t skrull_vectors[2] = {
    (uintptr_t)(stack + 512), (uintptr_t)skrull_reset};
#else
#include <stdio.h>
#include <stdlib.h>

#ifdef SKRULL_PANIC_EXTERN
/* The library built with feature `panic-extern` calls this on a panic (never, by design). */
_Noreturn void skrull_on_panic(void);
_Noreturn void skrull_on_panic(void) {
    fputs("skrull: panic\n", stderr);
    abort();
}
#endif

int main(void) {
    int bad = skrull_nostd_check();
    printf("nostd_plan: %s (%d)\n", bad == 0 ? "checks passed" : "FAILED", bad);
    return bad == 0 ? 0 : 1;
}
#endif
