/*
 * Every status from C: each error case returns its specific status and leaves every output
 * buffer byte-for-byte untouched (guard pattern, including GUARD bytes on both sides).
 * A final check fails if some status was never produced (SKRULL_STATUS_INTERNAL is
 * unreachable by design: it stands for a core error this ABI version cannot name).
 */
#include "common.h"

static unsigned char seen[256];

static void note(skrull_status s) {
    if (s < 256) {
        seen[s] = 1;
    }
}

static const uint32_t OK10[10] = {1, 2, 2, 3, 4, 6, 9, 14, 30, 5};

/* The arguments of one skrull_schedule() call, edited by each case. */
typedef struct {
    skrull_config cfg;
    const uint32_t *lengths;
    size_t n;
    void *ws;
    size_t ws_size;
    skrull_plan_buffers bufs;
    const skrull_config *cfg_ptr;
    const skrull_plan_buffers *bufs_ptr;
} call;

static void fresh(call *c, plan_store *s, const uint32_t *lengths, size_t n) {
    store_init(s, n, 2, 4);
    if (skrull_config_init(&c->cfg, sizeof c->cfg) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c->cfg.dp = 2;
    c->cfg.cp = 4;
    c->cfg.bucket_tokens = 24;
    c->lengths = lengths;
    c->n = n;
    c->ws = s->workspace.data;
    c->ws_size = s->sizes.workspace_bytes;
    c->bufs = s->bufs;
    c->cfg_ptr = &c->cfg;
    c->bufs_ptr = &c->bufs;
}

/* Runs the call and checks the status and that no output byte changed. */
static void expect(const char *what, call *c, plan_store *s, skrull_status want) {
    skrull_status got = skrull_schedule(c->cfg_ptr, c->lengths, c->n, c->ws, c->ws_size,
                                        c->bufs_ptr);
    note(got);
    if (got != want) {
        fprintf(stderr, "%s: got %u (%s), want %u (%s)\n", what, (unsigned)got,
                skrull_status_str(got), (unsigned)want, skrull_status_str(want));
    }
    CHECK(got == want);
    CHECK(outputs_untouched(s));
    CHECK(guards_intact(&s->workspace));
    store_free(s);
}

#define CASE(want, lengths, n, edit)                                                    \
    do {                                                                                \
        call c;                                                                         \
        plan_store s;                                                                   \
        fresh(&c, &s, (lengths), (n));                                                  \
        edit;                                                                           \
        expect(#want ": " #edit, &c, &s, (want));                                       \
    } while (0)

static void schedule_errors(void) {
    /* NULL pointers. */
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.cfg_ptr = NULL);
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.bufs_ptr = NULL);
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.lengths = NULL);
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.ws = NULL);
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.bufs.summary = NULL);
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.bufs.placements = NULL);
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.bufs.micro_batches_per_dp = NULL);
    /* struct_size. */
    CASE(SKRULL_STATUS_BAD_STRUCT_SIZE, OK10, 10, c.cfg.struct_size = 0);
    CASE(SKRULL_STATUS_BAD_STRUCT_SIZE, OK10, 10, c.cfg.struct_size = SKRULL_CONFIG_SIZE_V1 - 4);
    CASE(SKRULL_STATUS_BAD_STRUCT_SIZE, OK10, 10, c.cfg.struct_size = 1u << 20);
    CASE(SKRULL_STATUS_BAD_STRUCT_SIZE, OK10, 10, c.bufs.struct_size = 8);
    /* Option integers from C are validated, never trusted. */
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.policy = 99);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.policy = UINT32_MAX);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.victim = 2);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.flops = 2);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.shard_padding = 2);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.model.swiglu = 2);
    /* Malformed arguments. */
    CASE(SKRULL_STATUS_INVALID_ARG, OK10, 10, c.bufs._reserved = 1);
    CASE(SKRULL_STATUS_INVALID_ARG, OK10, 10,
         c.bufs.members = (uint32_t *)((unsigned char *)c.bufs.members + 1));
    CASE(SKRULL_STATUS_INVALID_ARG, OK10, 10, c.bufs.rank_tokens = c.bufs.members);
    CASE(SKRULL_STATUS_INVALID_ARG, OK10, 10,
         c.bufs.placements = (skrull_placement *)c.ws);
    /* Buffer sizes. */
    CASE(SKRULL_STATUS_WORKSPACE_TOO_SMALL, OK10, 10, c.ws_size -= 1);
    CASE(SKRULL_STATUS_WORKSPACE_TOO_SMALL, OK10, 10, c.ws_size = 0);
    CASE(SKRULL_STATUS_OUTPUT_TOO_SMALL, OK10, 10, c.bufs.placements_len -= 1);
    CASE(SKRULL_STATUS_OUTPUT_TOO_SMALL, OK10, 10, c.bufs.micro_batches_len -= 1);
    CASE(SKRULL_STATUS_OUTPUT_TOO_SMALL, OK10, 10, c.bufs.members_len = 0);
    CASE(SKRULL_STATUS_OUTPUT_TOO_SMALL, OK10, 10, c.bufs.rank_tokens_len -= 1);
    CASE(SKRULL_STATUS_OUTPUT_TOO_SMALL, OK10, 10, c.bufs.micro_batches_per_dp_len = 1);
    /* Configuration ranges (zero or absurd DP/CP/BucketSize). */
    CASE(SKRULL_STATUS_INVALID_DP, OK10, 10, c.cfg.dp = 0);
    CASE(SKRULL_STATUS_INVALID_DP, OK10, 10, c.cfg.dp = 65537);
    CASE(SKRULL_STATUS_INVALID_CP, OK10, 10, c.cfg.cp = 0);
    CASE(SKRULL_STATUS_INVALID_CP, OK10, 10, c.cfg.cp = 257);
    CASE(SKRULL_STATUS_INVALID_BUCKET, OK10, 10, c.cfg.bucket_tokens = 0);
    CASE(SKRULL_STATUS_INVALID_BUCKET, OK10, 10, c.cfg.bucket_tokens = 0x80000000u);
    CASE(SKRULL_STATUS_INVALID_PAD_MULTIPLE, OK10, 10, c.cfg.pad_multiple = SKRULL_MAX_PAD_MULTIPLE + 1);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.pad_local = 2);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.lockstep = 2);
    /* balanced plans on time: it refuses a FLOPs formula rather than ignore it. */
    CASE(SKRULL_STATUS_UNSUPPORTED_OPTION, OK10, 10,
         (c.cfg.policy = SKRULL_POLICY_BALANCED, c.cfg.flops = SKRULL_FLOPS_MEGATRON));
    /* A cost model with a zero GEMM efficiency; and one with an unknown overlap. */
    static skrull_cost_model bad_cost, bad_overlap;
    if (skrull_cost_model_preset(SKRULL_GPU_H100, NULL, &bad_cost, sizeof bad_cost) != SKRULL_STATUS_OK) {
        exit(2);
    }
    bad_overlap = bad_cost;
    bad_cost.gemm_efficiency = 0.0;
    bad_overlap.overlap = 7;
    CASE(SKRULL_STATUS_INVALID_COST_MODEL, OK10, 10, c.cfg.cost_model = &bad_cost);
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.cost_model = &bad_overlap);
    CASE(SKRULL_STATUS_INVALID_MODEL, OK10, 10, c.cfg.model.hidden = 0);
    CASE(SKRULL_STATUS_INVALID_MODEL, OK10, 10, c.cfg.model.kv_hidden = 100000);
    CASE(SKRULL_STATUS_INVALID_MODEL, OK10, 10, c.cfg.model.layers = 5000);
    /* Batch errors. */
    static const uint32_t empty_seq[] = {3, 0, 2};
    static const uint32_t huge_seq[] = {3, 0xFFFFFFFFu};
    static const uint32_t too_long[] = {3, 97}; /* ceil(97 / 4) = 25 > 24 */
    CASE(SKRULL_STATUS_EMPTY_SEQUENCE, empty_seq, 3, (void)0);
    CASE(SKRULL_STATUS_LENGTH_OUT_OF_RANGE, huge_seq, 2, c.cfg.bucket_tokens = 0x7FFFFFFF);
    CASE(SKRULL_STATUS_SEQUENCE_TOO_LONG, too_long, 2, (void)0);
    CASE(SKRULL_STATUS_MICRO_BATCH_LIMIT, OK10, 10,
         (c.cfg.max_micro_batches = 1, c.cfg.policy = SKRULL_POLICY_DEEPSPEED));
    CASE(SKRULL_STATUS_MICRO_BATCH_LIMIT, OK10, 10,
         (c.cfg.max_micro_batches = 1, c.cfg.bucket_tokens = 8));
    CASE(SKRULL_STATUS_MICRO_BATCH_COUNT, OK10, 10,
         (c.cfg.micro_batches = 1, c.cfg.policy = SKRULL_POLICY_DEEPSPEED));
    CASE(SKRULL_STATUS_INVALID_ENUM, OK10, 10, c.cfg.fill_empty = 2);
    /* Chunking: chunkflow without a chunk size, a K of 0, too much state; a chunked sequence
     * over the budget (4 chunks of 24 kept, 6 tokens each per GPU, plus 96 / 4 of state). */
    CASE(SKRULL_STATUS_INVALID_CHUNKING, OK10, 10, c.cfg.policy = SKRULL_POLICY_CHUNKFLOW);
    CASE(SKRULL_STATUS_INVALID_CHUNKING, OK10, 10, (c.cfg.chunk_size = 8, c.cfg.chunk_keep = 0));
    CASE(SKRULL_STATUS_INVALID_CHUNKING, OK10, 10,
         (c.cfg.chunk_size = 8, c.cfg.chunk_state_permille = 1001));
    CASE(SKRULL_STATUS_NULL_ARG, OK10, 10, c.cfg.chunk_size = 8); /* cp_groups required */
    static skrull_cp_group groups[10];
    static const uint32_t chunky[] = {3, 96};
    CASE(SKRULL_STATUS_CHUNK_OVER_BUDGET, chunky, 2,
         (c.cfg.policy = SKRULL_POLICY_CHUNKFLOW, c.cfg.chunk_size = 24, c.cfg.chunk_keep = 4,
          c.cfg.chunk_state_permille = 1000, c.bufs.cp_groups = groups,
          c.bufs.cp_groups_len = 10));

    /* More sequences than a batch may hold. */
    uint32_t *many = (uint32_t *)malloc(65537 * sizeof *many);
    CHECK(many != NULL);
    for (size_t i = 0; many != NULL && i < 65537; i++) {
        many[i] = 1;
    }
    CASE(SKRULL_STATUS_TOO_MANY_SEQUENCES, many, 10, c.n = 65537);
    free(many);

    /* A newer caller's larger struct is accepted when its tail is zero. */
    struct {
        skrull_config cfg;
        uint64_t future_field; /* 8 bytes: no padding bytes in the tail */
    } newer;
    {
        call c;
        plan_store s;
        fresh(&c, &s, OK10, 10);
        newer.cfg = c.cfg;
        newer.cfg.struct_size = sizeof newer;
        newer.future_field = 0;
        c.cfg_ptr = &newer.cfg;
        skrull_status got = skrull_schedule(c.cfg_ptr, OK10, 10, c.ws, c.ws_size, &c.bufs);
        note(got);
        CHECK_STATUS(got, SKRULL_STATUS_OK);
        CHECK(verify_plan(&newer.cfg, OK10, 10, &s) == 0);
        CHECK(all_guards_intact(&s));
        store_free(&s);
        newer.future_field = 1;
        CASE(SKRULL_STATUS_BAD_STRUCT_SIZE, OK10, 10, c.cfg_ptr = &newer.cfg);
    }
}

static void dacp_errors(void) {
    const uint32_t lengths[] = {1, 2, 2, 3, 4, 6, 9, 14, 30};
    skrull_config c;
    CHECK_STATUS(skrull_config_init(&c, sizeof c), SKRULL_STATUS_OK);
    c.dp = 1;
    c.cp = 4;
    c.bucket_tokens = 20; /* paper Example 2: infeasible with integer shares */
    size_t wl = skrull_workspace_size(9, 1, 4);
    guarded ws = guarded_alloc(wl);
    guarded ranks = guarded_alloc(9 * sizeof(int32_t));
    guarded sum = guarded_alloc(sizeof(skrull_dacp_summary));
    skrull_status got = skrull_dacp_place(&c, lengths, 9, ws.data, wl, (int32_t *)ranks.data,
                                          9, (skrull_dacp_summary *)sum.data);
    note(got);
    CHECK_STATUS(got, SKRULL_STATUS_DACP_FAILED);
    got = skrull_dacp_place(&c, lengths, 9, ws.data, wl - 1, (int32_t *)ranks.data, 9,
                            (skrull_dacp_summary *)sum.data);
    CHECK_STATUS(got, SKRULL_STATUS_WORKSPACE_TOO_SMALL);
    c.bucket_tokens = 24;
    got = skrull_dacp_place(&c, lengths, 9, ws.data, wl, (int32_t *)ranks.data, 8,
                            (skrull_dacp_summary *)sum.data);
    CHECK_STATUS(got, SKRULL_STATUS_OUTPUT_TOO_SMALL);
    got = skrull_dacp_place(&c, lengths, 9, ws.data, wl, (int32_t *)ranks.data, 9, NULL);
    CHECK_STATUS(got, SKRULL_STATUS_NULL_ARG);
    /* Nothing written by any of the failures. */
    const unsigned char *r = ranks.base, *s = sum.base;
    int untouched = 1;
    for (size_t i = 0; i < 9 * sizeof(int32_t) + 2 * GUARD; i++) {
        untouched &= r[i] == PATTERN;
    }
    for (size_t i = 0; i < sizeof(skrull_dacp_summary) + 2 * GUARD; i++) {
        untouched &= s[i] == PATTERN;
    }
    CHECK(untouched);
    CHECK(guards_intact(&ws));
    free(ws.base);
    free(ranks.base);
    free(sum.base);
}

/* The layout statuses (30-32); tests/c/layout.c checks that outputs stay untouched. */
static void layout_errors(void) {
    const uint32_t big = INT32_MAX;
    const uint32_t lengths[2] = {big - 1, big - 1};
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = 1;
    c.cp = 2;
    c.bucket_tokens = big;
    c.policy = SKRULL_POLICY_PACKED;
    plan_store s;
    store_init(&s, 2, 1, 2);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 2), SKRULL_STATUS_OK);
    skrull_layout_capacity cap;
    CHECK_STATUS(skrull_layout_sizes_max(&c, 2, &cap), SKRULL_STATUS_OK);
    guarded ws = guarded_alloc(cap.workspace_bytes);
    skrull_layout_capacity z;
    skrull_gpu gpu = {0, 0, 0};
    /* Two sharded sequences of 2^31 - 2 tokens: the global cu_seqlens pass INT32_MAX. */
    skrull_status got = skrull_layout_sizes(&c, lengths, 2, &s.bufs, gpu, ws.data,
                                            cap.workspace_bytes, &z);
    note(got);
    CHECK_STATUS(got, SKRULL_STATUS_LAYOUT_OVERFLOW);
    gpu.cp_rank = 2;
    got = skrull_layout_sizes(&c, lengths, 2, &s.bufs, gpu, ws.data, cap.workspace_bytes, &z);
    note(got);
    CHECK_STATUS(got, SKRULL_STATUS_NO_SUCH_GPU);
    gpu.cp_rank = 0;
    s.bufs.summary->total_tokens += 1;
    got = skrull_layout_sizes(&c, lengths, 2, &s.bufs, gpu, ws.data, cap.workspace_bytes, &z);
    note(got);
    CHECK_STATUS(got, SKRULL_STATUS_PLAN_INVALID);
    CHECK(guards_intact(&ws));
    free(ws.base);
    store_free(&s);
}

/* The refit's own statuses: bad parameters, a state init never filled, times that do not
 * match the plan, and a step larger than the state holds. */
static void refit_errors(void) {
    skrull_config c;
    CHECK_STATUS(skrull_config_init(&c, sizeof c), SKRULL_STATUS_OK);
    c.dp = 2;
    c.cp = 2;
    c.bucket_tokens = 64;
    skrull_refit_params p;
    CHECK_STATUS(skrull_refit_params_default(&p, sizeof p), SKRULL_STATUS_OK);
    p.max_rows_per_step = 1;
    size_t bytes = skrull_refit_size(&p);
    CHECK(bytes > 0);
    guarded state = guarded_alloc(bytes);
    skrull_error_info info;
    CHECK_STATUS(skrull_refit_init(&p, &c, state.data, bytes, &info), SKRULL_STATUS_OK);
    plan_store s;
    const uint32_t lengths[3] = {5, 9, 2};
    store_init(&s, 3, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, lengths, 3), SKRULL_STATUS_OK);
    const double times[4] = {1e-3, 1e-3, 1e-3, 1e-3};
    /* One micro-batch of 2 x 2 GPUs is 4 times; the state holds 1 per step. */
    skrull_status st = skrull_refit_observe(state.data, bytes, lengths, 3, s.bufs.placements,
                                            NULL, 1, times, 4, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_REFIT_STEP_TOO_LARGE);
    st = skrull_refit_observe(state.data, bytes, lengths, 3, s.bufs.placements, NULL, 1, times,
                              3, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_MEASUREMENT_MISMATCH);
    skrull_refit_params bad = p;
    bad.window_steps = 0;
    st = skrull_refit_init(&bad, &c, state.data, bytes, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_INVALID_REFIT_PARAMS);
    memset(state.data, 0, bytes);
    skrull_cost_model model;
    st = skrull_refit_solve(state.data, bytes, &model, sizeof model, NULL, 0, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_REFIT_STATE_INVALID);
    CHECK(guards_intact(&state));
    free(state.base);
    store_free(&s);
}

/* chunkflow's default chunk size (skrull_chunk_size_default): found at DP 2 x CP 16, none
 * when the K/V state alone is over the budget, with the numbers in the details; and the
 * library's sentence, name and details for a status. */
static void chunk_size_and_words(void) {
    skrull_config c;
    CHECK_STATUS(skrull_config_preset_init(SKRULL_PRESET_QWEN2_5_7B, &c, sizeof c),
                 SKRULL_STATUS_OK);
    c.dp = 2;
    c.cp = 16;
    c.policy = SKRULL_POLICY_CHUNKFLOW;
    uint32_t size = 0;
    skrull_error_info info;
    CHECK_STATUS(skrull_chunk_size_default(&c, 0, &size, &info), SKRULL_STATUS_OK);
    CHECK(size == 8192);
    c.chunk_size = size;
    CHECK_STATUS(skrull_config_check(&c, &info), SKRULL_STATUS_OK);
    c.cp = 1;
    c.bucket_tokens = 1000;
    c.chunk_state_permille = 1000;
    size = 7;
    skrull_status st = skrull_chunk_size_default(&c, 0, &size, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_NO_CHUNK_SIZE);
    CHECK(size == 7 && info.status == st && info.value == 1000 && info.limit > 1000);
    CHECK((skrull_error_details(st) & (SKRULL_DETAIL_VALUE | SKRULL_DETAIL_LIMIT)) ==
          (SKRULL_DETAIL_VALUE | SKRULL_DETAIL_LIMIT));
    CHECK(strcmp(skrull_status_name(st), "NO_CHUNK_SIZE") == 0);
    CHECK(skrull_status_name(77) == NULL);
    char text[16];
    size_t whole = skrull_error_describe(st, &info, &c, NULL, 0);
    CHECK(whole > sizeof text);
    CHECK(skrull_error_describe(st, &info, &c, text, sizeof text) == whole);
    CHECK(strlen(text) == sizeof text - 1);
    CHECK(strcmp(skrull_error_field_name(SKRULL_STATUS_INVALID_DP, 0), "dp") == 0);
}

/* The outlier-delay window's statuses: bad parameters, an uninitialised state, a full and an
 * empty window, a batch over its capacity, a deferred sample that does not fit. */
static void window_errors(void) {
    skrull_config c;
    CHECK_STATUS(skrull_config_init(&c, sizeof c), SKRULL_STATUS_OK);
    c.dp = 2;
    c.cp = 2;
    c.bucket_tokens = 64;
    size_t setup_bytes = skrull_setup_size();
    guarded setup_mem = guarded_alloc(setup_bytes);
    const skrull_setup *setup = NULL;
    CHECK_STATUS(skrull_setup_init(&c, setup_mem.data, setup_bytes, &setup, NULL),
                 SKRULL_STATUS_OK);
    skrull_window_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.max_delay = 1;
    p.batch_capacity = 2;
    skrull_window_capacity cap;
    CHECK_STATUS(skrull_window_sizes(&p, &cap), SKRULL_STATUS_OK);
    guarded state = guarded_alloc(cap.state_bytes);
    skrull_error_info info;
    skrull_window_params bad = p;
    bad.batch_capacity = 0;
    skrull_status st = skrull_window_init(&bad, setup, state.data, cap.state_bytes, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_INVALID_WINDOW_PARAMS);
    memset(state.data, 0, cap.state_bytes);
    const uint32_t lengths[3] = {5, 9, 2};
    st = skrull_window_push(state.data, cap.state_bytes, lengths, 2, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_WINDOW_STATE_INVALID);
    CHECK_STATUS(skrull_window_init(&p, setup, state.data, cap.state_bytes, &info),
                 SKRULL_STATUS_OK);
    uint64_t positions[8];
    uint32_t out_lengths[8];
    skrull_window_step_info out;
    st = skrull_window_step(state.data, cap.state_bytes, positions, out_lengths, 8, &out, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_WINDOW_EMPTY);
    st = skrull_window_push(state.data, cap.state_bytes, lengths, 3, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_WINDOW_BATCH_TOO_LARGE);
    skrull_window_deferred d = {0, 0, 5, 0};
    st = skrull_window_requeue(state.data, cap.state_bytes, &d, 1, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_INVALID_DEFERRED);
    CHECK_STATUS(skrull_window_push(state.data, cap.state_bytes, lengths, 2, &info),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_window_push(state.data, cap.state_bytes, lengths, 2, &info),
                 SKRULL_STATUS_OK);
    st = skrull_window_push(state.data, cap.state_bytes, lengths, 2, &info);
    note(st);
    CHECK_STATUS(st, SKRULL_STATUS_WINDOW_FULL);
    CHECK(guards_intact(&state) && guards_intact(&setup_mem));
    free(state.base);
    free(setup_mem.base);
}

int main(void) {
    note(SKRULL_STATUS_OK);
    chunk_size_and_words();
    schedule_errors();
    dacp_errors();
    layout_errors();
    refit_errors();
    window_errors();
    note(skrull_panic_selftest());
    /* Every status this library defines was produced by some call above. */
    for (uint32_t code = 0; code < 256; code++) {
        const char *msg = skrull_status_str(code);
        if (strcmp(msg, "unknown status") == 0 || code == SKRULL_STATUS_INTERNAL) {
            continue;
        }
        if (!seen[code]) {
            fprintf(stderr, "status %u (%s) was never produced\n", (unsigned)code, msg);
        }
        CHECK(seen[code]);
    }
    return report("errors");
}
