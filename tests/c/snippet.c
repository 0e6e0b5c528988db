/* The snippet of docs/c_api.md ("Use from C/C++"), compiled and run by tests/c/run.sh. */
#include <stdio.h>
#include "skrull.h"

int main(void) {
    uint32_t lengths[] = {1, 2, 2, 3, 4, 6, 9, 14, 30, 5};     /* tokens per sequence */
    skrull_config cfg;
    skrull_config_default(&cfg);                  /* Qwen2.5-0.5B, paper defaults */
    cfg.dp = 2; cfg.cp = 4; cfg.bucket_tokens = 24;
    static unsigned char ws[4096];                /* >= skrull_workspace_size(10, 2, 4) */
    if (skrull_workspace_size(10, cfg.dp, cfg.cp) > sizeof ws) return 1;
    skrull_placement pl[10]; skrull_micro_batch mb[10]; skrull_summary sum;
    uint32_t members[10], tokens[10 * 4], per_dp[2];
    skrull_plan_buffers out = {sizeof out, 0, pl, 10, mb, 10, members, 10, tokens, 40,
                               per_dp, 2, &sum};
    skrull_status st = skrull_schedule(&cfg, lengths, 10, ws, sizeof ws, &out);
    if (st != SKRULL_STATUS_OK) { fprintf(stderr, "%s\n", skrull_status_str(st)); return 1; }
    for (int i = 0; i < 10; i++)
        printf("seq %d: DP %u, micro-batch %u, CP %d\n", i, pl[i].dp_rank,
               pl[i].micro_batch, pl[i].cp_rank);        /* CP -1 = sharded */
    return 0;
}
