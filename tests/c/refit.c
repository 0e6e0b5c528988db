/*
 * The online refit from C, the way a trainer calls it: size and initialise the state in its
 * own (guarded) storage, then each step plan with the current model, "measure" every
 * (micro-batch, GPU) time of the plan, observe, solve, and plan the next step with the
 * refitted skrull_cost_model. Two states fed the same steps give byte-identical models;
 * NaN times are skipped and counted; the statuses of bad params (with the field), an
 * uninitialised state, a count mismatch and a too-small state.
 */
#include <math.h>
#include <stddef.h>

#include "common.h"

#define DP 2
#define CP 4
#define N 24
#define STEPS 5

static skrull_config config(void) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = DP;
    c.cp = CP;
    c.bucket_tokens = 8192;
    c.policy = SKRULL_POLICY_BALANCED;
    c.subgroups = 0;
    return c;
}

static void lengths_of(uint32_t step, uint32_t *out) {
    for (uint32_t i = 0; i < N; i++) {
        out[i] = 100 + (i * 7919u + step * 104729u) % 12000u;
    }
}

/* A made-up truth: 20 ms per micro-batch plus 3 us per token the GPU holds. */
static uint32_t measure(const plan_store *s, double *times, size_t cap) {
    const skrull_plan_buffers *b = &s->bufs;
    uint32_t n_mb = 0;
    for (uint32_t d = 0; d < DP; d++) {
        n_mb = b->micro_batches_per_dp[d] > n_mb ? b->micro_batches_per_dp[d] : n_mb;
    }
    for (size_t k = 0; k < cap; k++) {
        times[k] = NAN;
    }
    for (uint32_t g = 0; g < b->summary->micro_batches; g++) {
        const skrull_micro_batch *m = &b->micro_batches[g];
        for (uint32_t r = 0; r < CP; r++) {
            double tokens = (double)b->rank_tokens[g * CP + r];
            times[(m->index * DP + m->dp_rank) * CP + r] = 0.02 + 3e-6 * tokens;
        }
    }
    return n_mb;
}

int main(void) {
    skrull_config cfg = config();
    skrull_refit_params params;
    CHECK_STATUS(skrull_refit_params_default(&params, sizeof params), SKRULL_STATUS_OK);
    CHECK(params.struct_size == SKRULL_REFIT_PARAMS_SIZE_V2);
    params.max_rows_per_step = N * DP * CP;
    size_t bytes = skrull_refit_size(&params);
    CHECK(bytes > 0);
    guarded a = guarded_alloc(bytes), b = guarded_alloc(bytes);
    skrull_error_info info;
    CHECK_STATUS(skrull_refit_init(&params, &cfg, a.data, bytes, &info), SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_refit_init(&params, &cfg, b.data, bytes, &info), SKRULL_STATUS_OK);

    plan_store s;
    store_init(&s, N, DP, CP);
    double times[N * DP * CP];
    skrull_cost_model model, model_b;
    skrull_refit_report rep;
    uint32_t lengths[N];
    int have_model = 0;
    for (uint32_t step = 0; step < STEPS; step++) {
        lengths_of(step, lengths);
        skrull_config plan_cfg = cfg;
        plan_cfg.cost_model = have_model ? &model : NULL;
        CHECK_STATUS(store_schedule(&s, &plan_cfg, lengths, N), SKRULL_STATUS_OK);
        uint32_t n_mb = measure(&s, times, N * DP * CP);
        size_t n_times = (size_t)n_mb * DP * CP;
        if (step == 1) {
            times[0] = NAN; /* a GPU that did not report (micro-batch 0 always exists) */
        }
        CHECK_STATUS(skrull_refit_observe(a.data, bytes, lengths, N, s.bufs.placements, NULL,
                                          n_mb, times, n_times, &info),
                     SKRULL_STATUS_OK);
        CHECK_STATUS(skrull_refit_observe(b.data, bytes, lengths, N, s.bufs.placements, NULL,
                                          n_mb, times, n_times, &info),
                     SKRULL_STATUS_OK);
        CHECK_STATUS(skrull_refit_solve(a.data, bytes, &model, sizeof model, &rep, sizeof rep,
                                        &info),
                     SKRULL_STATUS_OK);
        CHECK_STATUS(skrull_refit_solve(b.data, bytes, &model_b, sizeof model_b, NULL, 0, &info),
                     SKRULL_STATUS_OK);
        CHECK(memcmp(&model, &model_b, sizeof model) == 0);
        CHECK(rep.steps == step + 1);
        CHECK(rep.error_fit <= rep.error_prior);
        have_model = 1;
    }
    CHECK(rep.skipped == 1);
    CHECK(rep.kept_prior == 0);
    CHECK(model.struct_size == sizeof model);
    CHECK(guards_intact(&a) && guards_intact(&b));

    /* Errors. */
    CHECK_STATUS(skrull_refit_observe(a.data, bytes, lengths, N, s.bufs.placements, NULL, 1,
                                      times, 3, &info),
                 SKRULL_STATUS_MEASUREMENT_MISMATCH);
    CHECK(info.value == 3 && info.limit == DP * CP);
    skrull_refit_params bad = params;
    bad.window_steps = 0;
    CHECK(skrull_refit_size(&bad) == 0);
    CHECK_STATUS(skrull_refit_init(&bad, &cfg, a.data, bytes, &info),
                 SKRULL_STATUS_INVALID_REFIT_PARAMS);
    CHECK(info.field == 1);
    CHECK_STATUS(skrull_refit_init(&params, &cfg, a.data, bytes - 8, &info),
                 SKRULL_STATUS_WORKSPACE_TOO_SMALL);
    memset(b.data, 0, bytes);
    CHECK_STATUS(skrull_refit_solve(b.data, bytes, &model, sizeof model, NULL, 0, &info),
                 SKRULL_STATUS_REFIT_STATE_INVALID);
    CHECK(strcmp(skrull_status_str(SKRULL_STATUS_REFIT_STEP_TOO_LARGE), "unknown status") != 0);

    store_free(&s);
    free(a.base);
    free(b.base);
    return report("refit");
}
