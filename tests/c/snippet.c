/* The snippet of docs/c_api.md ("Use from C/C++"), compiled and run by tests/c/run.sh. */
#include <stdio.h>
#include "skrull.h"

int main(void) {
    uint32_t lengths[] = {1, 2, 2, 3, 4, 6, 9, 14, 30, 5};     /* tokens per sequence */
    skrull_config cfg;
    skrull_config_init(&cfg, sizeof cfg);                  /* Qwen2.5-0.5B, paper defaults */
    cfg.dp = 2; cfg.cp = 4; cfg.bucket_tokens = 24;
    static unsigned char ws[4096];                /* >= skrull_workspace_size(10, 2, 4) */
    if (skrull_workspace_size(10, cfg.dp, cfg.cp) > sizeof ws) return 1;
    skrull_placement pl[10]; skrull_micro_batch mb[10]; skrull_summary sum;
    skrull_error_info err;                        /* details, written only on failure */
    uint32_t members[10], tokens[10 * 4], per_dp[2];
    skrull_plan_buffers out = {                   /* designated: new fields stay zero */
        .struct_size = sizeof out, .placements = pl, .placements_len = 10,
        .micro_batches = mb, .micro_batches_len = 10, .members = members, .members_len = 10,
        .rank_tokens = tokens, .rank_tokens_len = 40, .micro_batches_per_dp = per_dp,
        .micro_batches_per_dp_len = 2, .summary = &sum, .error = &err};
    skrull_status st = skrull_schedule(&cfg, lengths, 10, ws, sizeof ws, &out);
    if (st != SKRULL_STATUS_OK) {
        fprintf(stderr, "%s (sequence %lld, value %llu, limit %llu)\n", skrull_status_str(st),
                (long long)err.index, (unsigned long long)err.value,
                (unsigned long long)err.limit);
        return 1;
    }
    for (int i = 0; i < 10; i++)
        printf("seq %d: DP %u, micro-batch %u, CP %d\n", i, pl[i].dp_rank,
               pl[i].micro_batch, pl[i].cp_rank);        /* CP -1 = sharded */
    return 0;
}
