/*
 * The outlier-delay window from C, the way a trainer drives it: size the state, initialise it
 * in guarded storage with a prepared setup, push global batches (max_delay ahead), take each
 * step and plan its samples with skrull_schedule_prepared(); every sample comes back once,
 * within max_delay steps, and every plan checks. Then the statuses of bad input: NULLs, bad
 * struct sizes, too-small storage and outputs, an uninitialised state, a full and an empty
 * window, and the queue saved and requeued into a resumed window.
 */
#include "common.h"

#define DP 2
#define CP 2
#define BATCH 16
#define STEPS 30
#define DELAY 3

/* SplitMix64, for the batches. */
static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Batch t: short sequences, and a long one in about every second batch. */
static void batch_of(uint32_t t, uint32_t *out) {
    uint64_t s = 1000 + t;
    for (uint32_t i = 0; i < BATCH; i++) {
        out[i] = 1 + (uint32_t)(next(&s) % 300);
    }
    if (next(&s) % 2 == 0) {
        out[next(&s) % BATCH] = 6000 + (uint32_t)(next(&s) % 2000);
    }
}

static skrull_config config(void) {
    skrull_config c;
    if (skrull_config_recommended_init(SKRULL_PRESET_QWEN2_5_0_5B, &c, sizeof c) !=
        SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = DP;
    c.cp = CP;
    c.bucket_tokens = 4096;
    c.subgroups = 0; /* the plan store lends no cp_groups buffer */
    return c;
}

static skrull_window_params params(uint32_t delay) {
    skrull_window_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.max_delay = delay;
    p.batch_capacity = BATCH;
    return p;
}

int main(void) {
    skrull_config cfg = config();
    size_t setup_bytes = skrull_setup_size();
    guarded setup_mem = guarded_alloc(setup_bytes);
    const skrull_setup *setup = NULL;
    CHECK_STATUS(skrull_setup_init(&cfg, setup_mem.data, setup_bytes, &setup, NULL),
                 SKRULL_STATUS_OK);

    skrull_window_params p = params(DELAY);
    skrull_window_capacity cap;
    CHECK_STATUS(skrull_window_sizes(&p, &cap), SKRULL_STATUS_OK);
    CHECK(cap.step_capacity == BATCH + DELAY * BATCH && cap.queue_capacity == DELAY * BATCH);
    guarded state = guarded_alloc(cap.state_bytes);
    skrull_error_info info;
    CHECK_STATUS(skrull_window_init(&p, setup, state.data, cap.state_bytes, &info),
                 SKRULL_STATUS_OK);

    /* One epoch: every position once, within DELAY steps of its batch; plans check. */
    plan_store s;
    store_init(&s, cap.step_capacity, DP, CP);
    uint64_t *positions = (uint64_t *)malloc(cap.step_capacity * sizeof *positions);
    uint32_t *lengths = (uint32_t *)malloc(cap.step_capacity * sizeof *lengths);
    unsigned seen[STEPS * BATCH] = {0};
    uint32_t all[STEPS][BATCH];
    uint32_t deferred = 0, pushed = 0;
    skrull_window_deferred saved[DELAY * BATCH];
    size_t saved_n = 0;
    for (uint32_t t = 0; t < STEPS; t++) {
        for (; pushed < STEPS && pushed <= t + DELAY; pushed++) {
            batch_of(pushed, all[pushed]);
            CHECK_STATUS(skrull_window_push(state.data, cap.state_bytes, all[pushed], BATCH, &info),
                         SKRULL_STATUS_OK);
        }
        if (t == STEPS / 2) {
            CHECK_STATUS(skrull_window_queue(state.data, cap.state_bytes, saved,
                                             DELAY * BATCH, &saved_n, &info),
                         SKRULL_STATUS_OK);
        }
        skrull_window_step_info out;
        CHECK_STATUS(skrull_window_step(state.data, cap.state_bytes, positions, lengths,
                                        cap.step_capacity, &out, &info),
                     SKRULL_STATUS_OK);
        CHECK(out.index == t);
        deferred += out.deferred;
        for (uint32_t k = 0; k < out.samples; k++) {
            uint64_t pos = positions[k];
            uint32_t origin = (uint32_t)(pos / BATCH);
            CHECK(pos < STEPS * BATCH && !seen[pos]);
            CHECK(origin <= t && t - origin <= DELAY);
            CHECK(lengths[k] == all[origin][pos % BATCH]);
            if (pos < STEPS * BATCH) {
                seen[pos] = 1;
            }
        }
        skrull_status st = skrull_schedule_prepared(setup, lengths, out.samples, s.workspace.data,
                                                    s.sizes.workspace_bytes, &s.bufs);
        CHECK_STATUS(st, SKRULL_STATUS_OK);
        CHECK(st == SKRULL_STATUS_OK && verify_plan(&cfg, lengths, out.samples, &s) == 0);
    }
    for (uint32_t i = 0; i < STEPS * BATCH; i++) {
        CHECK(seen[i]);
    }
    CHECK(deferred > 0);
    CHECK_STATUS(skrull_window_step(state.data, cap.state_bytes, positions, lengths,
                                    cap.step_capacity, NULL, &info),
                 SKRULL_STATUS_NULL_ARG);
    skrull_window_step_info out;
    CHECK_STATUS(skrull_window_step(state.data, cap.state_bytes, positions, lengths,
                                    cap.step_capacity, &out, &info),
                 SKRULL_STATUS_WINDOW_EMPTY);

    /* The saved queue resumes the epoch at its step (the same checks from there on). */
    skrull_window_params r = params(DELAY);
    r.first_step = STEPS / 2;
    r.first_position = (uint64_t)(STEPS / 2) * BATCH;
    guarded resumed = guarded_alloc(cap.state_bytes);
    CHECK_STATUS(skrull_window_init(&r, setup, resumed.data, cap.state_bytes, &info),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_window_requeue(resumed.data, cap.state_bytes, saved, saved_n, &info),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_window_push(resumed.data, cap.state_bytes, all[STEPS / 2], BATCH, &info),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_window_requeue(resumed.data, cap.state_bytes, saved, saved_n, &info),
                 saved_n ? SKRULL_STATUS_INVALID_DEFERRED : SKRULL_STATUS_OK);
    CHECK(guards_intact(&resumed));

    /* Bad input: statuses, never a crash, nothing written outside the buffers. */
    CHECK_STATUS(skrull_window_sizes(NULL, &cap), SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_window_sizes(&p, NULL), SKRULL_STATUS_NULL_ARG);
    skrull_window_params bad = p;
    bad.struct_size = 8;
    CHECK_STATUS(skrull_window_sizes(&bad, &cap), SKRULL_STATUS_BAD_STRUCT_SIZE);
    bad = p;
    bad.max_delay = SKRULL_WINDOW_MAX_DELAY + 1;
    guarded small = guarded_alloc(64);
    CHECK_STATUS(skrull_window_init(&bad, setup, small.data, 64, &info),
                 SKRULL_STATUS_INVALID_WINDOW_PARAMS);
    CHECK(info.field == 1 && info.value == SKRULL_WINDOW_MAX_DELAY + 1);
    CHECK_STATUS(skrull_window_init(&p, NULL, small.data, 64, &info), SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_window_init(&p, setup, NULL, 64, &info), SKRULL_STATUS_NULL_ARG);
    CHECK_STATUS(skrull_window_init(&p, setup, small.data, 64, &info),
                 SKRULL_STATUS_WORKSPACE_TOO_SMALL);
    CHECK(guards_intact(&small));
    /* Never initialised: refused by its marker. */
    memset(small.data, 0, 64);
    uint32_t one = 5;
    CHECK_STATUS(skrull_window_push(small.data, 64, &one, 1, &info),
                 SKRULL_STATUS_WINDOW_STATE_INVALID);
    CHECK_STATUS(skrull_window_push(NULL, 64, &one, 1, &info), SKRULL_STATUS_NULL_ARG);
    guarded fresh = guarded_alloc(cap.state_bytes);
    CHECK_STATUS(skrull_window_init(&p, setup, fresh.data, cap.state_bytes, &info),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_window_push(fresh.data, cap.state_bytes, NULL, 3, &info),
                 SKRULL_STATUS_NULL_ARG);
    uint32_t big[BATCH + 1];
    for (uint32_t i = 0; i <= BATCH; i++) {
        big[i] = 10;
    }
    CHECK_STATUS(skrull_window_push(fresh.data, cap.state_bytes, big, BATCH + 1, &info),
                 SKRULL_STATUS_WINDOW_BATCH_TOO_LARGE);
    CHECK(info.value == BATCH + 1 && info.limit == BATCH);
    big[3] = 0;
    CHECK_STATUS(skrull_window_push(fresh.data, cap.state_bytes, big, BATCH, &info),
                 SKRULL_STATUS_EMPTY_SEQUENCE);
    CHECK(info.index == 3);
    big[3] = 10;
    for (uint32_t k = 0; k <= DELAY; k++) {
        CHECK_STATUS(skrull_window_push(fresh.data, cap.state_bytes, big, BATCH, &info),
                     SKRULL_STATUS_OK);
    }
    CHECK_STATUS(skrull_window_push(fresh.data, cap.state_bytes, big, BATCH, &info),
                 SKRULL_STATUS_WINDOW_FULL);
    CHECK_STATUS(skrull_window_step(fresh.data, cap.state_bytes, positions, lengths,
                                    cap.step_capacity - 1, &out, &info),
                 SKRULL_STATUS_OUTPUT_TOO_SMALL);
    CHECK_STATUS(skrull_window_step(fresh.data, cap.state_bytes - 8, positions, lengths,
                                    cap.step_capacity, &out, &info),
                 SKRULL_STATUS_WINDOW_STATE_INVALID);
    CHECK_STATUS(skrull_window_step(fresh.data, cap.state_bytes, positions, lengths,
                                    cap.step_capacity, &out, &info),
                 SKRULL_STATUS_OK);
    CHECK(out.index == 0 && out.samples == BATCH);
    CHECK(guards_intact(&fresh) && guards_intact(&state) && guards_intact(&setup_mem));

    free(positions);
    free(lengths);
    free(state.base);
    free(resumed.base);
    free(small.base);
    free(fresh.base);
    free(setup_mem.base);
    store_free(&s);
    return report("window");
}
