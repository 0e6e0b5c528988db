/*
 * ABI facts a C program relies on: struct sizes and field offsets, the ABI version macro
 * against the library, status numbers and strings, option constants, presets, sizing
 * functions, and the panic guard.
 */
#include <stdalign.h>
#include <stddef.h>

#include "common.h"

/* Frozen layouts: a change here is an ABI break (bump SKRULL_ABI_VERSION). */
_Static_assert(sizeof(skrull_placement) == 16, "skrull_placement is 16 bytes");
_Static_assert(offsetof(skrull_placement, dp_rank) == 0, "");
_Static_assert(offsetof(skrull_placement, micro_batch) == 4, "");
_Static_assert(offsetof(skrull_placement, cp_rank) == 8, "");
_Static_assert(offsetof(skrull_placement, tokens_per_gpu) == 12, "");
_Static_assert(sizeof(skrull_micro_batch) == 16, "skrull_micro_batch is 16 bytes");
_Static_assert(offsetof(skrull_micro_batch, count) == 12, "");
_Static_assert(sizeof(skrull_summary) == 32, "skrull_summary is 32 bytes");
_Static_assert(offsetof(skrull_summary, sequences) == 8, "");
_Static_assert(offsetof(skrull_summary, _reserved) == 28, "");
_Static_assert(sizeof(skrull_model_shape) == 24, "skrull_model_shape is 24 bytes");
_Static_assert(SKRULL_CONFIG_SIZE_V1 == 60, "skrull_config v1 is 60 bytes");
_Static_assert(sizeof(skrull_config) == 104 + sizeof(void *),
               "skrull_config grew by pad_multiple, pad_local, lockstep, cost_model, subgroups, "
               "fill_empty, micro_batches, chunk_size, chunk_keep, chunk_state_permille, sync "
               "and _reserved");
_Static_assert(offsetof(skrull_config, pad_multiple) == SKRULL_CONFIG_SIZE_V1, "appended");
_Static_assert(offsetof(skrull_config, cost_model) == 72, "appended");
_Static_assert(offsetof(skrull_config, subgroups) == 72 + sizeof(void *), "appended");
_Static_assert(offsetof(skrull_config, fill_empty) == 76 + sizeof(void *),
               "the previous explicit padding word");
_Static_assert(offsetof(skrull_config, micro_batches) == 80 + sizeof(void *), "appended");
_Static_assert(offsetof(skrull_config, chunk_size) == 84 + sizeof(void *),
               "the previous explicit padding word");
_Static_assert(offsetof(skrull_config, chunk_keep) == 88 + sizeof(void *), "appended");
_Static_assert(offsetof(skrull_config, chunk_state_permille) == 92 + sizeof(void *), "appended");
_Static_assert(offsetof(skrull_config, sync) == 96 + sizeof(void *), "appended");
_Static_assert(offsetof(skrull_config, _reserved) == 100 + sizeof(void *), "appended");
_Static_assert(SKRULL_CHUNKED == -2 && SKRULL_SHARDED == -1, "placement markers");
_Static_assert(SKRULL_POLICY_CHUNKFLOW == 5, "policy numbers are stable");
_Static_assert(sizeof(skrull_cost_model) == SKRULL_COST_MODEL_SIZE_V3, "cost model v3");
_Static_assert(offsetof(skrull_cost_model, sharded_sequence_s) == SKRULL_COST_MODEL_SIZE_V1,
               "sharded_sequence_s appended to version 1");
_Static_assert(offsetof(skrull_cost_model, local_sequence_s) == SKRULL_COST_MODEL_SIZE_V2,
               "local_sequence_s appended to version 2");
_Static_assert(sizeof(skrull_refit_report) == SKRULL_REFIT_REPORT_SIZE_V3, "refit report v3");
_Static_assert(offsetof(skrull_refit_report, coefficient_last_micro_batch)
                   == SKRULL_REFIT_REPORT_SIZE_V2, "appended to version 2");
_Static_assert(sizeof(skrull_error_info) == 32, "skrull_error_info is 32 bytes");
_Static_assert(offsetof(skrull_error_info, index) == 8, "");
_Static_assert(offsetof(skrull_config, struct_size) == 0, "struct_size comes first");
_Static_assert(offsetof(skrull_config, model) == 36, "");
_Static_assert(sizeof(skrull_dacp_summary) == 8, "");
_Static_assert(sizeof(skrull_sizes) == 6 * sizeof(size_t), "");
_Static_assert(offsetof(skrull_plan_buffers, struct_size) == 0, "struct_size comes first");
_Static_assert(sizeof(skrull_plan_buffers) == 8 + 14 * sizeof(void *), "no implicit padding");
_Static_assert(offsetof(skrull_plan_buffers, error) == 8 + 11 * sizeof(void *), "v1 ends before error");
_Static_assert(offsetof(skrull_plan_buffers, cp_groups) == 8 + 12 * sizeof(void *), "appended");
_Static_assert(sizeof(skrull_cp_group) == 8, "skrull_cp_group is 8 bytes");
_Static_assert(offsetof(skrull_cp_group, size) == 4, "");
_Static_assert(sizeof(skrull_layout_ring) == 16, "skrull_layout_ring is 16 bytes");
_Static_assert(offsetof(skrull_layout_ring, offset) == 8, "");
_Static_assert(offsetof(skrull_layout_ring, seqs) == 12, "");
_Static_assert(sizeof(skrull_layout_buffers) == 8 + 23 * sizeof(void *), "no implicit padding");
_Static_assert(offsetof(skrull_layout_buffers, rings) == 8 + 17 * sizeof(void *), "appended");
_Static_assert(offsetof(skrull_layout_buffers, rings_count) == 8 + 19 * sizeof(void *), "");
_Static_assert(offsetof(skrull_layout_buffers, chunk_passes) == 8 + 20 * sizeof(void *), "appended");
_Static_assert(offsetof(skrull_layout_buffers, chunk_passes_count) == 8 + 22 * sizeof(void *), "");
_Static_assert(sizeof(skrull_chunk_pass) == 48, "skrull_chunk_pass is 48 bytes");
_Static_assert(SKRULL_WHOLE_CHUNK == -2, "");
_Static_assert(SKRULL_MAX_RINGS == 8, "whole group + sub-groups of 128 .. 2 ranks");
_Static_assert(sizeof(skrull_status) == 4, "skrull_status is a uint32_t");
_Static_assert(SKRULL_SHARDED == -1, "");
_Static_assert(SKRULL_ABI_VERSION >= 1, "");

static void versions(void) {
    CHECK(skrull_abi_version() == SKRULL_ABI_VERSION);
    const char *v = skrull_version();
    CHECK(v != NULL && strlen(v) >= 5 && strchr(v, '.') != NULL);
}

static void statuses(void) {
    /* Stable numbers. */
    CHECK(SKRULL_STATUS_OK == 0);
    CHECK(SKRULL_STATUS_NULL_ARG == 1);
    CHECK(SKRULL_STATUS_BAD_STRUCT_SIZE == 2);
    CHECK(SKRULL_STATUS_INVALID_ENUM == 3);
    CHECK(SKRULL_STATUS_INVALID_ARG == 4);
    CHECK(SKRULL_STATUS_WORKSPACE_TOO_SMALL == 5);
    CHECK(SKRULL_STATUS_OUTPUT_TOO_SMALL == 6);
    CHECK(SKRULL_STATUS_INVALID_DP == 10);
    CHECK(SKRULL_STATUS_INVALID_CP == 11);
    CHECK(SKRULL_STATUS_INVALID_BUCKET == 12);
    CHECK(SKRULL_STATUS_INVALID_MODEL == 13);
    CHECK(SKRULL_STATUS_TOO_MANY_SEQUENCES == 14);
    CHECK(SKRULL_STATUS_EMPTY_SEQUENCE == 15);
    CHECK(SKRULL_STATUS_LENGTH_OUT_OF_RANGE == 16);
    CHECK(SKRULL_STATUS_SEQUENCE_TOO_LONG == 17);
    CHECK(SKRULL_STATUS_MICRO_BATCH_LIMIT == 18);
    CHECK(SKRULL_STATUS_DACP_FAILED == 19);
    CHECK(SKRULL_STATUS_INVALID_PAD_MULTIPLE == 20);
    CHECK(SKRULL_STATUS_INVALID_COST_MODEL == 21);
    CHECK(SKRULL_STATUS_UNSUPPORTED_OPTION == 22);
    CHECK(SKRULL_STATUS_INVALID_WINDOW_PARAMS == 50);
    CHECK(SKRULL_STATUS_WINDOW_STATE_INVALID == 51);
    CHECK(SKRULL_STATUS_WINDOW_FULL == 52);
    CHECK(SKRULL_STATUS_WINDOW_EMPTY == 53);
    CHECK(SKRULL_STATUS_WINDOW_BATCH_TOO_LARGE == 54);
    CHECK(SKRULL_STATUS_INVALID_DEFERRED == 55);
    CHECK(SKRULL_STATUS_INTERNAL == 254);
    CHECK(SKRULL_STATUS_PANIC == 255);
    /* Every number has a static string; known ones are distinct, unknown ones say so. */
    const char *unknown = skrull_status_str(7);
    CHECK(unknown != NULL && strcmp(unknown, "unknown status") == 0);
    CHECK(strcmp(skrull_status_str(SKRULL_STATUS_OK), "ok") == 0);
    CHECK(strcmp(skrull_status_str(UINT32_MAX), "unknown status") == 0);
    int known = 0;
    for (uint32_t a = 0; a < 300; a++) {
        const char *s = skrull_status_str(a);
        CHECK(s != NULL);
        if (strcmp(s, "unknown status") == 0) {
            continue;
        }
        known++;
        for (uint32_t b = a + 1; b < 300; b++) {
            if (strcmp(s, skrull_status_str(b)) == 0) {
                CHECK(!"two statuses share a message");
            }
        }
    }
    CHECK(known == 39);
    /* The panic guard turns a Rust panic into a status. */
    CHECK_STATUS(skrull_panic_selftest(), SKRULL_STATUS_PANIC);
    CHECK_STATUS(skrull_panic_selftest(), SKRULL_STATUS_PANIC);
}

static void presets(void) {
    skrull_config c;
    memset(&c, 0xFF, sizeof c);
    CHECK_STATUS(skrull_config_init(&c, sizeof c), SKRULL_STATUS_OK);
    CHECK(c.struct_size == sizeof(skrull_config));
    CHECK(c.dp == 4 && c.cp == 8 && c.bucket_tokens == 26 * 1024);
    CHECK(c.policy == SKRULL_POLICY_SKRULL && c.victim == SKRULL_VICTIM_SHORTEST);
    CHECK(c.flops == SKRULL_FLOPS_PAPER && c.shard_padding == SKRULL_SHARD_PADDING_NONE);
    CHECK(c.max_micro_batches == 0);
    CHECK(c.model.hidden == 896 && c.model.kv_hidden == 128 && c.model.ffn == 4864);
    CHECK(c.model.layers == 24 && c.model.vocab == 151936 && c.model.swiglu == 1);
    CHECK(c.pad_multiple == 1 && c.pad_local == 0 && c.lockstep == 0 && c.cost_model == NULL);
    CHECK(c.subgroups == 0); /* sub-groups are opt-in */
    /* Chunking is off by default, with K = 1 and 64/1000 of a token of state. */
    CHECK(c.chunk_size == 0 && c.chunk_keep == 1 && c.chunk_state_permille == 64);
    CHECK(c.sync == SKRULL_SYNC_CP_GROUP && c._reserved == 0);

    skrull_config p;
    CHECK_STATUS(skrull_config_preset_init(SKRULL_PRESET_QWEN2_5_0_5B, &p, sizeof p),
                 SKRULL_STATUS_OK);
    CHECK(memcmp(&p, &c, sizeof c) == 0);
    CHECK_STATUS(skrull_config_preset_init(SKRULL_PRESET_QWEN2_5_7B, &p, sizeof p),
                 SKRULL_STATUS_OK);
    CHECK(p.dp == 4 && p.cp == 8 && p.bucket_tokens == 13 * 1024);
    CHECK(p.model.hidden == 3584 && p.model.kv_hidden == 512 && p.model.ffn == 18944);
    CHECK(p.model.layers == 28 && p.model.vocab == 152064 && p.model.swiglu == 1);

    /* The recommended preset: the same layout, balanced with sub-groups on. */
    skrull_config r;
    CHECK_STATUS(skrull_config_recommended_init(SKRULL_PRESET_QWEN2_5_7B, &r, sizeof r),
                 SKRULL_STATUS_OK);
    CHECK(r.policy == SKRULL_POLICY_BALANCED && r.subgroups == 1);
    r.policy = p.policy;
    r.subgroups = p.subgroups;
    CHECK(memcmp(&r, &p, sizeof r) == 0);
    CHECK_STATUS(skrull_config_recommended_init(2, &r, sizeof r), SKRULL_STATUS_INVALID_ENUM);

    /* Errors write nothing. */
    skrull_config before = p;
    CHECK_STATUS(skrull_config_preset_init(2, &p, sizeof p), SKRULL_STATUS_INVALID_ENUM);
    CHECK_STATUS(skrull_config_init(&p, SKRULL_CONFIG_SIZE_V1 - 1), SKRULL_STATUS_BAD_STRUCT_SIZE);
    CHECK(memcmp(&p, &before, sizeof p) == 0);
    CHECK_STATUS(skrull_config_preset_init(SKRULL_PRESET_QWEN2_5_7B, NULL, sizeof p),
                 SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_config_init(NULL, sizeof p), SKRULL_STATUS_NULL_ARG);
}

/* Regression (ABI evolution): an initialiser must never write past the struct of the program
 * that calls it. The version-1 initialisers write exactly the 60 bytes a program built
 * against the first header has, and say so in struct_size; the sized ones write what the
 * caller's sizeof says. */
static void initialisers_never_write_past_the_callers_struct(void) {
    unsigned char raw[sizeof(skrull_config) + 16];
    memset(raw, 0xA5, sizeof raw);
    skrull_config *v1 = (skrull_config *)(void *)raw;
    CHECK_STATUS(skrull_config_default(v1), SKRULL_STATUS_OK);
    CHECK(v1->struct_size == SKRULL_CONFIG_SIZE_V1);
    for (size_t i = SKRULL_CONFIG_SIZE_V1; i < sizeof raw; i++) {
        CHECK(raw[i] == 0xA5);
    }
    memset(raw, 0xA5, sizeof raw);
    CHECK_STATUS(skrull_config_preset(SKRULL_PRESET_QWEN2_5_7B, v1), SKRULL_STATUS_OK);
    CHECK(v1->struct_size == SKRULL_CONFIG_SIZE_V1 && v1->bucket_tokens == 13 * 1024);
    for (size_t i = SKRULL_CONFIG_SIZE_V1; i < sizeof raw; i++) {
        CHECK(raw[i] == 0xA5);
    }
    /* A program whose struct ends after `lockstep` (72 bytes). */
    memset(raw, 0xA5, sizeof raw);
    CHECK_STATUS(skrull_config_init(v1, 72), SKRULL_STATUS_OK);
    CHECK(v1->struct_size == 72 && v1->pad_multiple == 1 && v1->lockstep == 0);
    for (size_t i = 72; i < sizeof raw; i++) {
        CHECK(raw[i] == 0xA5);
    }
    /* A newer program's larger struct: the library writes what it knows. */
    memset(raw, 0xA5, sizeof raw);
    CHECK_STATUS(skrull_config_init(v1, sizeof raw), SKRULL_STATUS_OK);
    CHECK(v1->struct_size == sizeof(skrull_config));
    for (size_t i = sizeof(skrull_config); i < sizeof raw; i++) {
        CHECK(raw[i] == 0xA5);
    }
    /* The cost model's initialiser follows the same rule. */
    union {
        skrull_cost_model m;
        unsigned char b[sizeof(skrull_cost_model) + 8];
    } cm;
    memset(&cm, 0xA5, sizeof cm);
    CHECK_STATUS(skrull_cost_model_preset(SKRULL_GPU_H200, NULL, &cm.m, sizeof cm.m),
                 SKRULL_STATUS_OK);
    CHECK(cm.m.struct_size == sizeof(skrull_cost_model) && cm.m.gpus_per_node == 8);
    for (size_t i = sizeof(skrull_cost_model); i < sizeof cm; i++) {
        CHECK(cm.b[i] == 0xA5);
    }
    CHECK_STATUS(skrull_cost_model_preset(SKRULL_GPU_H100, NULL, &cm.m, 8),
                 SKRULL_STATUS_BAD_STRUCT_SIZE);
    CHECK_STATUS(skrull_cost_model_preset(9, NULL, &cm.m, sizeof cm.m), SKRULL_STATUS_INVALID_ENUM);

    /* skrull_cost_model_slowed: every time 3x, the rates a third; in place too; a bad factor,
     * a NULL or a short output write nothing. */
    skrull_cost_model fast, slow;
    CHECK_STATUS(skrull_cost_model_preset(SKRULL_GPU_H100, NULL, &fast, sizeof fast),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_cost_model_slowed(&fast, 3.0, &slow, sizeof slow), SKRULL_STATUS_OK);
    CHECK(slow.struct_size == sizeof slow && slow.overlap == fast.overlap);
    CHECK(slow.kernel_launch_s == fast.kernel_launch_s * 3.0);
    CHECK(slow.ring_step_latency_s == fast.ring_step_latency_s * 3.0);
    CHECK(slow.peak_flops == fast.peak_flops / 3.0);
    CHECK(slow.attention_fwd_flops[0] == fast.attention_fwd_flops[0] / 3.0);
    skrull_cost_model before = slow;
    CHECK_STATUS(skrull_cost_model_slowed(&fast, 0.0, &slow, sizeof slow),
                 SKRULL_STATUS_INVALID_ARG);
    CHECK_STATUS(skrull_cost_model_slowed(&fast, -2.0, &slow, sizeof slow),
                 SKRULL_STATUS_INVALID_ARG);
    CHECK_STATUS(skrull_cost_model_slowed(NULL, 2.0, &slow, sizeof slow), SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_cost_model_slowed(&fast, 2.0, &slow, 8), SKRULL_STATUS_BAD_STRUCT_SIZE);
    CHECK(memcmp(&slow, &before, sizeof slow) == 0);
    CHECK_STATUS(skrull_cost_model_slowed(&slow, 0.5, &slow, sizeof slow), SKRULL_STATUS_OK);
    CHECK(slow.kernel_launch_s == fast.kernel_launch_s * 1.5);
}

static void sizes(void) {
    skrull_sizes s;
    CHECK_STATUS(skrull_plan_sizes(256, 4, 8, &s), SKRULL_STATUS_OK);
    CHECK(s.placements == 256 && s.micro_batches == 256 && s.members == 256);
    CHECK(s.rank_tokens == 256 * 8 && s.micro_batches_per_dp == 4);
    CHECK(s.workspace_bytes == skrull_workspace_size(256, 4, 8));
    CHECK(s.workspace_bytes > 0);
    /* Sizes grow with the batch and the layout. */
    CHECK(skrull_workspace_size(257, 4, 8) > s.workspace_bytes);
    CHECK(skrull_workspace_size(256, 4, 16) > s.workspace_bytes);
    CHECK(skrull_workspace_size(0, 1, 1) > 0);
    /* Out of range: 0 bytes, and a status that names the problem. */
    CHECK(skrull_workspace_size(65537, 4, 8) == 0);
    CHECK(skrull_workspace_size(10, 0, 8) == 0);
    CHECK(skrull_workspace_size(10, 4, 257) == 0);
    skrull_sizes before = s;
    CHECK_STATUS(skrull_plan_sizes(65537, 4, 8, &s), SKRULL_STATUS_TOO_MANY_SEQUENCES);
    CHECK_STATUS(skrull_plan_sizes(10, 0, 8, &s), SKRULL_STATUS_INVALID_DP);
    CHECK_STATUS(skrull_plan_sizes(10, 65537, 8, &s), SKRULL_STATUS_INVALID_DP);
    CHECK_STATUS(skrull_plan_sizes(10, 4, 0, &s), SKRULL_STATUS_INVALID_CP);
    CHECK_STATUS(skrull_plan_sizes(10, 4, 8, NULL), SKRULL_STATUS_NULL_ARG);
    CHECK(memcmp(&s, &before, sizeof s) == 0);
}

int main(void) {
    versions();
    statuses();
    presets();
    initialisers_never_write_past_the_callers_struct();
    sizes();
    return report("abi");
}
