/*
 * plan_json: plans a batch through libskrull.a and prints it in the JSON shape of
 * `skrull plan --format json`, so tests/c/compare_cli.sh can check that C gets the same plan
 * as the CLI for the same input.
 *
 * usage: plan_json LENGTHS_FILE [--dp N] [--cp N] [--bucket N] [--model qwen2.5-0.5b|qwen2.5-7b]
 *                  [--policy balanced|skrull|deepspeed|packed|roundrobin] [--victim shortest|longest]
 *                  [--flops paper|megatron] [--shard-padding none|zigzag]
 *                  [--max-micro-batches M]
 * LENGTHS_FILE holds whitespace- or comma-separated token counts ("-" reads stdin).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skrull.h"

static const char *const POLICIES[] = {"skrull", "deepspeed", "packed", "roundrobin", "balanced"};
static const char *const VICTIMS[] = {"shortest", "longest"};
static const char *const FLOPS[] = {"paper", "megatron"};
static const char *const PADDINGS[] = {"none", "zigzag"};
static const char *const SWITCHES[] = {"off", "on"};
static const char *const MODELS[] = {"qwen2.5-0.5b", "qwen2.5-7b"};

static int lookup(const char *const *names, uint32_t count, const char *name, uint32_t *out) {
    for (uint32_t i = 0; i < count; i++) {
        if (strcmp(names[i], name) == 0) {
            *out = i;
            return 1;
        }
    }
    return 0;
}

static int parse_u32(const char *s, uint32_t *out) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || v > UINT32_MAX) {
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

static uint32_t *read_lengths(const char *path, size_t *n) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 1024, len = 0;
    uint32_t *v = (uint32_t *)malloc(cap * sizeof *v);
    unsigned long long x;
    int c;
    while (v != NULL && (c = fgetc(f)) != EOF) {
        if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            continue;
        }
        ungetc(c, f);
        if (fscanf(f, "%llu", &x) != 1 || x > UINT32_MAX) {
            free(v);
            v = NULL;
            break;
        }
        if (len == cap) {
            cap *= 2;
            uint32_t *grown = (uint32_t *)realloc(v, cap * sizeof *v);
            if (grown == NULL) {
                free(v);
                v = NULL;
                break;
            }
            v = grown;
        }
        v[len++] = (uint32_t)x;
    }
    if (f != stdin) {
        fclose(f);
    }
    *n = len;
    return v;
}

static void print_u32_list(const uint32_t *v, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) {
        printf(i ? ", %" PRIu32 : "%" PRIu32, v[i]);
    }
    putchar(']');
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: plan_json LENGTHS_FILE [--dp N] [--cp N] [--bucket N] ...\n");
        return 2;
    }
    skrull_config cfg;
    uint32_t model = SKRULL_PRESET_QWEN2_5_0_5B;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0 && lookup(MODELS, 2, argv[i + 1], &model)) {
            continue;
        }
    }
    if (skrull_config_preset_init(model, &cfg, sizeof cfg) != SKRULL_STATUS_OK) {
        return 2;
    }
    cfg.dp = 4; /* the CLI's defaults (--dp 4 --cp 8 --bucket 26K), whatever the model */
    cfg.cp = 8;
    cfg.bucket_tokens = 26 * 1024;
    cfg.policy = SKRULL_POLICY_BALANCED; /* the CLI's default policy */
    cfg.subgroups = 1;                    /* the CLI plans with sub-groups unless told not to */
    for (int i = 2; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        int ok = strcmp(k, "--model") == 0 ||
                 (strcmp(k, "--dp") == 0 && parse_u32(v, &cfg.dp)) ||
                 (strcmp(k, "--cp") == 0 && parse_u32(v, &cfg.cp)) ||
                 (strcmp(k, "--bucket") == 0 && parse_u32(v, &cfg.bucket_tokens)) ||
                 (strcmp(k, "--max-micro-batches") == 0 && parse_u32(v, &cfg.max_micro_batches)) ||
                 (strcmp(k, "--policy") == 0 && lookup(POLICIES, 5, v, &cfg.policy)) ||
                 (strcmp(k, "--victim") == 0 && lookup(VICTIMS, 2, v, &cfg.victim)) ||
                 (strcmp(k, "--flops") == 0 && lookup(FLOPS, 2, v, &cfg.flops)) ||
                 (strcmp(k, "--shard-padding") == 0 && lookup(PADDINGS, 2, v, &cfg.shard_padding)) ||
                 (strcmp(k, "--pad-multiple") == 0 && parse_u32(v, &cfg.pad_multiple)) ||
                 (strcmp(k, "--micro-batches") == 0 && parse_u32(v, &cfg.micro_batches)) ||
                 (strcmp(k, "--subgroups") == 0 && lookup(SWITCHES, 2, v, &cfg.subgroups));
        if (strcmp(k, "--pad-local") == 0 || strcmp(k, "--lockstep") == 0 ||
            strcmp(k, "--fill-empty") == 0) {
            /* switches: no value */
            *(strcmp(k, "--pad-local") == 0  ? &cfg.pad_local
              : strcmp(k, "--lockstep") == 0 ? &cfg.lockstep
                                              : &cfg.fill_empty) = 1;
            i -= 1;
            continue;
        }
        if (!ok) {
            fprintf(stderr, "plan_json: bad option %s %s\n", k, v);
            return 2;
        }
    }
    size_t n = 0;
    uint32_t *lengths = read_lengths(argv[1], &n);
    if (lengths == NULL) {
        fprintf(stderr, "plan_json: cannot read lengths from %s\n", argv[1]);
        return 2;
    }

    skrull_sizes sz;
    skrull_status st = skrull_plan_sizes(n, cfg.dp, cfg.cp, &sz);
    if (st != SKRULL_STATUS_OK) {
        fprintf(stderr, "plan_json: %s\n", skrull_status_str(st));
        return 1;
    }
    skrull_summary summary;
    skrull_plan_buffers out;
    memset(&out, 0, sizeof out);
    out.struct_size = sizeof out;
    out.placements = (skrull_placement *)malloc(sz.placements * sizeof *out.placements + 1);
    out.placements_len = sz.placements;
    out.micro_batches = (skrull_micro_batch *)malloc(sz.micro_batches * sizeof *out.micro_batches + 1);
    out.micro_batches_len = sz.micro_batches;
    out.members = (uint32_t *)malloc(sz.members * sizeof(uint32_t) + 1);
    out.members_len = sz.members;
    out.rank_tokens = (uint32_t *)malloc(sz.rank_tokens * sizeof(uint32_t) + 1);
    out.rank_tokens_len = sz.rank_tokens;
    out.micro_batches_per_dp = (uint32_t *)malloc(sz.micro_batches_per_dp * sizeof(uint32_t) + 1);
    out.micro_batches_per_dp_len = sz.micro_batches_per_dp;
    out.cp_groups = (skrull_cp_group *)malloc(sz.placements * sizeof *out.cp_groups + 1);
    out.cp_groups_len = sz.placements;
    out.summary = &summary;
    void *ws = malloc(sz.workspace_bytes);
    if (!out.placements || !out.micro_batches || !out.members || !out.rank_tokens ||
        !out.micro_batches_per_dp || !out.cp_groups || !ws) {
        return 2;
    }
    st = skrull_schedule(&cfg, lengths, n, ws, sz.workspace_bytes, &out);
    if (st != SKRULL_STATUS_OK) {
        fprintf(stderr, "plan_json: skrull_schedule: %s\n", skrull_status_str(st));
        return 1;
    }

    printf("{\"config\": {\"dp\": %" PRIu32 ", \"cp\": %" PRIu32 ", \"bucket_tokens\": %" PRIu32
           ", \"policy\": \"%s\", \"victim\": \"%s\", \"model\": \"%s\", \"flops\": \"%s\", "
           "\"max_micro_batches\": %" PRIu32 ", \"shard_padding\": \"%s\", \"pad_multiple\": %" PRIu32
           ", \"pad_local\": %s, \"lockstep\": %s, \"subgroups\": %s, \"fill_empty\": %s"
           ", \"micro_batches\": %" PRIu32 "},\n",
           cfg.dp, cfg.cp, cfg.bucket_tokens, POLICIES[cfg.policy], VICTIMS[cfg.victim],
           MODELS[model], FLOPS[cfg.flops], cfg.max_micro_batches,
           PADDINGS[cfg.shard_padding], cfg.pad_multiple < 1 ? 1 : cfg.pad_multiple,
           cfg.pad_local ? "true" : "false", cfg.lockstep ? "true" : "false",
           cfg.subgroups ? "true" : "false", cfg.fill_empty ? "true" : "false",
           cfg.micro_batches);
    printf(" \"summary\": {\"sequences\": %" PRIu32 ", \"total_tokens\": %" PRIu64
           ", \"micro_batches\": %" PRIu32 ", \"sharded\": %" PRIu32 ", \"rollbacks\": %" PRIu32
           ", \"peak_rank_tokens\": %" PRIu32 "},\n",
           summary.sequences, summary.total_tokens, summary.micro_batches, summary.sharded,
           summary.rollbacks, summary.peak_rank_tokens);
    printf(" \"placements\": [");
    for (size_t i = 0; i < n; i++) {
        const skrull_placement *p = &out.placements[i];
        printf("%s{\"seq\": %zu, \"len\": %" PRIu32 ", \"dp\": %" PRIu32
               ", \"micro_batch\": %" PRIu32 ", \"cp\": %" PRId32 ", \"cp_first\": %" PRIu32
               ", \"cp_size\": %" PRIu32 "}",
               i ? ",\n   " : "", i, lengths[i], p->dp_rank, p->micro_batch, p->cp_rank,
               out.cp_groups[i].first, out.cp_groups[i].size);
    }
    printf("],\n \"micro_batches_per_dp\": ");
    print_u32_list(out.micro_batches_per_dp, cfg.dp);
    printf(",\n \"rank_tokens\": [");
    size_t g = 0;
    for (uint32_t d = 0; d < cfg.dp; d++) {
        printf(d ? ",\n   [" : "[");
        for (uint32_t j = 0; j < out.micro_batches_per_dp[d]; j++) {
            if (j) {
                printf(", ");
            }
            const skrull_micro_batch *mb = &out.micro_batches[g];
            if (g < summary.micro_batches && mb->dp_rank == d && mb->index == j) {
                print_u32_list(out.rank_tokens + g * cfg.cp, cfg.cp);
                g++;
            } else {
                /* an empty lockstep micro-batch: no token on any GPU */
                printf("[");
                for (uint32_t r = 0; r < cfg.cp; r++) {
                    printf(r ? ", 0" : "0");
                }
                printf("]");
            }
        }
        putchar(']');
    }
    printf("]}\n");
    free(out.placements);
    free(out.micro_batches);
    free(out.members);
    free(out.rank_tokens);
    free(out.micro_batches_per_dp);
    free(out.cp_groups);
    free(ws);
    free(lengths);
    return 0;
}
