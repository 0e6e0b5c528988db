/*
 * Named regressions of the C ABI, from C: every bug found at the C boundary replays here the
 * way a C caller hits it (the same cases run from Rust in ffi/tests/regressions.rs).
 */
#include "common.h"

static const uint32_t LENGTHS[10] = {1, 2, 2, 3, 4, 6, 9, 14, 30, 5};
#define N 10

/* DP 2, CP 4, BucketSize 24: the configuration of the report. */
static skrull_config config(void) {
    skrull_config c;
    if (skrull_config_init(&c, sizeof c) != SKRULL_STATUS_OK) {
        exit(2);
    }
    c.dp = 2;
    c.cp = 4;
    c.bucket_tokens = 24;
    return c;
}

/* One GPU's layout buffers, sized with skrull_layout_sizes_max() and set to a pattern. */
typedef struct {
    skrull_layout_capacity cap;
    skrull_span spans[2 * N];
    int32_t local_cu[N + 1], sharded_cu[N + 1], sharded_cu_padded[N + 1], rank_cu[N + 1];
    int32_t positions[24];
    skrull_layout layout;
    unsigned char ws[4096];
    skrull_layout_buffers bufs;
} layout_out;

static void layout_out_init(layout_out *o, const skrull_config *c) {
    memset(o, PATTERN, sizeof *o);
    CHECK_STATUS(skrull_layout_sizes_max(c, N, &o->cap), SKRULL_STATUS_OK);
    if (o->cap.spans > 2 * N || o->cap.local_cu_seqlens > N + 1 || o->cap.positions > 24 ||
        o->cap.workspace_bytes > sizeof o->ws) {
        fprintf(stderr, "layout capacities grew past the test's arrays\n");
        exit(2);
    }
    memset(&o->bufs, 0, sizeof o->bufs);
    o->bufs.struct_size = sizeof o->bufs;
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
}

/* Whether no output byte of `o` (everything but the workspace and the struct) changed. */
static int layout_out_untouched(const layout_out *o) {
    const unsigned char *p = (const unsigned char *)o->spans;
    const unsigned char *end = (const unsigned char *)&o->layout + sizeof o->layout;
    for (; p < end; p++) {
        if (*p != PATTERN) {
            return 0;
        }
    }
    return 1;
}

static const skrull_gpu GPU0 = {0, 0, 0};

static skrull_status fill(const skrull_config *c, const skrull_plan_buffers *plan,
                          layout_out *o) {
    return skrull_layout_fill(c, LENGTHS, N, plan, GPU0, o->ws, o->cap.workspace_bytes,
                              &o->bufs);
}

/*
 * Outside harness: skrull_layout_fill accepted a plan whose summary._reserved is 1 (GPU
 * (0,0,0) returned OK). A summary skrull_schedule() wrote always has _reserved == 0, so any
 * other value is a corrupted plan: SKRULL_STATUS_PLAN_INVALID, and nothing written.
 */
static void summary_reserved_is_plan_invalid(void) {
    skrull_config c = config();
    plan_store s;
    store_init(&s, N, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    CHECK(s.bufs.summary->_reserved == 0);
    layout_out o;
    layout_out_init(&o, &c);
    CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_OK); /* the plan as written works */
    const uint32_t bad[] = {1, 0x80000000u, UINT32_MAX};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        s.bufs.summary->_reserved = bad[k];
        layout_out_init(&o, &c);
        CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_PLAN_INVALID);
        CHECK(layout_out_untouched(&o));
        skrull_layout_capacity cap;
        memset(&cap, PATTERN, sizeof cap);
        CHECK_STATUS(skrull_layout_sizes(&c, LENGTHS, N, &s.bufs, GPU0, o.ws,
                                         o.cap.workspace_bytes, &cap),
                     SKRULL_STATUS_PLAN_INVALID);
        CHECK(((unsigned char *)&cap)[0] == PATTERN);
    }
    s.bufs.summary->_reserved = 0;
    /* The parameter structs' own _reserved fields: INVALID_ARG. */
    layout_out_init(&o, &c);
    skrull_plan_buffers plan = s.bufs;
    plan._reserved = 1;
    CHECK_STATUS(fill(&c, &plan, &o), SKRULL_STATUS_INVALID_ARG);
    o.bufs._reserved = 1;
    CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_INVALID_ARG);
    CHECK(layout_out_untouched(&o));
    store_free(&s);
}

/*
 * Outside harness: overlap was checked on what a call writes, not on the declared
 * capacities. placements_len = 2n whose spare half lies on members was accepted, and so was
 * placements_len = SIZE_MAX. The declared ranges are what the caller lends: they must not
 * overlap, and one that does not fit the address space is SKRULL_STATUS_INVALID_ARG, in
 * skrull_schedule, skrull_dacp_place, skrull_layout_sizes and skrull_layout_fill alike.
 */
static void overlap_is_checked_on_declared_capacities(void) {
    skrull_config c = config();
    plan_store s;
    store_init(&s, N, c.dp, c.cp);

    /* skrull_schedule: placements of capacity 2n, members on its spare half. */
    static skrull_placement shared[2 * N];
    skrull_plan_buffers out = s.bufs;
    out.placements = shared;
    out.members = (uint32_t *)(void *)&shared[N];
    out.placements_len = N; /* control: the declared ranges are disjoint */
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_OK);
    out.placements_len = 2 * N;
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_INVALID_ARG);
    out = s.bufs;
    out.placements_len = SIZE_MAX;
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_INVALID_ARG);
    out = s.bufs;
    out.rank_tokens_len = SIZE_MAX / 4;
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_INVALID_ARG);
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, SIZE_MAX, &s.bufs),
                 SKRULL_STATUS_INVALID_ARG);

    /* skrull_dacp_place: cp_ranks of capacity 2n, the summary on its spare half. */
    static int32_t ranks[2 * N + 2];
    skrull_dacp_summary *dsum = (skrull_dacp_summary *)(void *)&ranks[N];
    CHECK_STATUS(skrull_dacp_place(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                   ranks, N, dsum),
                 SKRULL_STATUS_OK);
    CHECK_STATUS(skrull_dacp_place(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                   ranks, 2 * N, dsum),
                 SKRULL_STATUS_INVALID_ARG);
    skrull_dacp_summary own;
    CHECK_STATUS(skrull_dacp_place(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                   ranks, SIZE_MAX, &own),
                 SKRULL_STATUS_INVALID_ARG);

    /* skrull_layout_sizes: `out` inside the spare capacity of the plan's members. */
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    static uint64_t members[N / 2 + 1 + 8];
    memcpy(members, s.bufs.members, N * sizeof(uint32_t));
    void *spare = &members[N / 2 + 1];
    layout_out o;
    layout_out_init(&o, &c);
    skrull_plan_buffers plan = s.bufs;
    plan.members = (uint32_t *)(void *)members;
    plan.members_len = N; /* control */
    CHECK_STATUS(skrull_layout_sizes(&c, LENGTHS, N, &plan, GPU0, o.ws, o.cap.workspace_bytes,
                                     (skrull_layout_capacity *)spare),
                 SKRULL_STATUS_OK);
    plan.members_len = 2 * (N / 2 + 1 + 8);
    CHECK_STATUS(skrull_layout_sizes(&c, LENGTHS, N, &plan, GPU0, o.ws, o.cap.workspace_bytes,
                                     (skrull_layout_capacity *)spare),
                 SKRULL_STATUS_INVALID_ARG);
    skrull_layout_capacity cap;
    plan = s.bufs;
    plan.members_len = SIZE_MAX;
    CHECK_STATUS(skrull_layout_sizes(&c, LENGTHS, N, &plan, GPU0, o.ws, o.cap.workspace_bytes,
                                     &cap),
                 SKRULL_STATUS_INVALID_ARG);

    /* skrull_layout_fill: spans of twice the capacity, positions on the spare half. */
    static skrull_span spans[4 * N];
    layout_out_init(&o, &c);
    o.bufs.spans = spans;
    o.bufs.positions = (int32_t *)(void *)&spans[o.cap.spans];
    o.bufs.spans_len = o.cap.spans; /* control */
    CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_OK);
    o.bufs.spans_len = 2 * o.cap.spans;
    CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_INVALID_ARG);
    layout_out_init(&o, &c);
    o.bufs.positions_len = SIZE_MAX;
    CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_INVALID_ARG);
    CHECK(layout_out_untouched(&o));
    /* An output inside the spare capacity of a plan input. */
    layout_out_init(&o, &c);
    plan = s.bufs;
    plan.members = (uint32_t *)(void *)members;
    o.bufs.local_cu_seqlens = (int32_t *)spare;
    o.bufs.local_cu_seqlens_len = 16;
    plan.members_len = N; /* control */
    CHECK_STATUS(fill(&c, &plan, &o), SKRULL_STATUS_OK);
    plan.members_len = 2 * (N / 2 + 1 + 8);
    CHECK_STATUS(fill(&c, &plan, &o), SKRULL_STATUS_INVALID_ARG);
    /* A plan array whose declared capacity wraps the address space. */
    layout_out_init(&o, &c);
    plan = s.bufs;
    plan.rank_tokens_len = SIZE_MAX;
    CHECK_STATUS(fill(&c, &plan, &o), SKRULL_STATUS_INVALID_ARG);
    CHECK(layout_out_untouched(&o));
    CHECK(all_guards_intact(&s));
    store_free(&s);
}

/*
 * The corruptions the layout fuzz target (kit/src/fuzz/layout/plan.rs, `corrupt`) applies, from
 * C: every edited entry of a plan is PLAN_INVALID with nothing written, except an edit that
 * leaves a valid plan of the batch (the rollback count, which no array records), which is laid
 * out exactly as before.
 */
static void corrupted_plan_entries_are_plan_invalid(void) {
    skrull_config c = config();
    plan_store s;
    store_init(&s, N, c.dp, c.cp);
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    layout_out ref;
    layout_out_init(&ref, &c);
    CHECK_STATUS(fill(&c, &s.bufs, &ref), SKRULL_STATUS_OK);
    for (int edit = 0; edit < 15; edit++) {
        CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
        skrull_plan_buffers plan = s.bufs;
        skrull_summary *sum = s.bufs.summary;
        switch (edit) {
        case 0: s.bufs.placements[3].cp_rank = 5; break;
        case 1: s.bufs.placements[8].tokens_per_gpu += 1; break;
        case 2: s.bufs.placements[0].micro_batch += 7; break;
        case 3: s.bufs.micro_batches[0].count += 1; break;
        case 4: s.bufs.rank_tokens[2] += 1; break;
        case 5: s.bufs.micro_batches_per_dp[1] = 0; break;
        case 6: s.bufs.members[0] = s.bufs.members[1]; break;
        case 7: sum->total_tokens += 1; break;
        case 8: sum->sequences -= 1; break;
        case 9: sum->micro_batches += 1; break;
        case 10: sum->sharded += 1; break;
        case 11: sum->peak_rank_tokens += 1; break;
        case 12: sum->_reserved = 1; break;
        case 13: plan.placements_len = N - 1; break;
        default: plan.rank_tokens_len = (size_t)sum->micro_batches * c.cp - 1; break;
        }
        layout_out o;
        layout_out_init(&o, &c);
        skrull_status st = fill(&c, &plan, &o);
        if (st != SKRULL_STATUS_PLAN_INVALID) {
            fprintf(stderr, "corruption %d: %s\n", edit, skrull_status_str(st));
        }
        CHECK_STATUS(st, SKRULL_STATUS_PLAN_INVALID);
        CHECK(layout_out_untouched(&o));
    }
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    s.bufs.summary->rollbacks += 7;
    layout_out o;
    layout_out_init(&o, &c);
    CHECK_STATUS(fill(&c, &s.bufs, &o), SKRULL_STATUS_OK);
    CHECK(memcmp(o.spans, ref.spans, sizeof o.spans) == 0);
    CHECK(memcmp(&o.layout, &ref.layout, sizeof o.layout) == 0);
    CHECK(memcmp(o.positions, ref.positions, sizeof o.positions) == 0);
    store_free(&s);
}

/* Regression (fuzz c_abi): a struct_size that ends inside a field was accepted, so the
 * library read part of a pointer (one byte of `error` into a NULL default) and wrote the
 * error details to address 0x80. Sizes that cut a field are BAD_STRUCT_SIZE, for the plan
 * buffers and for the configuration; field boundaries and the full size are accepted. */
static void struct_size_inside_a_field_is_refused(void) {
    skrull_config c = config();
    plan_store s;
    store_init(&s, N, c.dp, c.cp);
    skrull_error_info e;
    s.bufs.error = &e;
    const uint32_t full = (uint32_t)sizeof s.bufs;
    const uint32_t v1 = (uint32_t)offsetof(skrull_plan_buffers, error);
    const uint32_t cut[] = {v1 + 1, v1 + 4, full - 1};
    for (size_t k = 0; k < sizeof cut / sizeof cut[0]; k++) {
        s.bufs.struct_size = cut[k];
        memset(&e, 0xA5, sizeof e);
        CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_BAD_STRUCT_SIZE);
        CHECK(e.status == 0xA5A5A5A5u); /* the pointer was cut: nothing written through it */
    }
    s.bufs.struct_size = v1;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    s.bufs.struct_size = full;
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    const uint32_t config_cut[] = {61, 62, 63, 65, 69, 73, 79};
    for (size_t k = 0; k < sizeof config_cut / sizeof config_cut[0]; k++) {
        skrull_config d = c;
        d.struct_size = config_cut[k];
        CHECK_STATUS(store_schedule(&s, &d, LENGTHS, N), SKRULL_STATUS_BAD_STRUCT_SIZE);
    }
    const uint32_t config_ok[] = {60, 64, 68, 72, (uint32_t)sizeof c};
    for (size_t k = 0; k < sizeof config_ok / sizeof config_ok[0]; k++) {
        skrull_config d = c;
        d.struct_size = config_ok[k];
        CHECK_STATUS(store_schedule(&s, &d, LENGTHS, N), SKRULL_STATUS_OK);
    }
    store_free(&s);
}

/*
 * Outside harness, round 3: when `error` overlapped an output buffer and the call also had an
 * error earlier in the documented order (dp = 0 in skrull_schedule; gpu.cp_rank >= cp in
 * skrull_layout_fill, with plan->error on out->spans), the library returned that earlier
 * status and wrote the 32 bytes of details into the output. The details are now written only
 * when they overlap no argument at all: the status is the first problem in the order, and
 * every output is left as it was.
 */
static void error_details_never_land_in_an_output(void) {
    skrull_config c = config();
    plan_store s;
    store_init(&s, N, c.dp, c.cp);
    /* The details on the first placements (an output of skrull_schedule). */
    skrull_plan_buffers out = s.bufs;
    out.error = (skrull_error_info *)s.placements.data;
    CHECK(((uintptr_t)out.error) % 8 == 0);
    c.dp = 0;
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_INVALID_DP);
    c.dp = 2;
    CHECK(all_guards_intact(&s));
    const unsigned char *pl = (const unsigned char *)s.placements.data;
    int clean = 1;
    for (size_t k = 0; k < s.sizes.placements * sizeof(skrull_placement); k++) {
        clean &= pl[k] == PATTERN;
    }
    CHECK(clean);
    /* With no earlier problem: INVALID_ARG, and still nothing written. */
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_INVALID_ARG);
    for (size_t k = 0; k < s.sizes.placements * sizeof(skrull_placement); k++) {
        clean &= pl[k] == PATTERN;
    }
    CHECK(clean);
    /* Details on the workspace or the lengths are not written either. */
    out.error = (skrull_error_info *)s.workspace.data;
    c.cp = 0;
    memset(s.workspace.data, PATTERN, s.sizes.workspace_bytes);
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_INVALID_CP);
    CHECK(((const unsigned char *)s.workspace.data)[0] == PATTERN);
    c.cp = 4;

    /* skrull_layout_fill: GPU (0, 0, cp) does not exist; the details on out->spans. */
    CHECK_STATUS(store_schedule(&s, &c, LENGTHS, N), SKRULL_STATUS_OK);
    layout_out o;
    layout_out_init(&o, &c);
    skrull_plan_buffers plan = s.bufs;
    static uint64_t spans_store[(2 * N * sizeof(skrull_span)) / 8 + 1];
    memset(spans_store, PATTERN, sizeof spans_store);
    o.bufs.spans = (skrull_span *)(void *)spans_store;
    plan.error = (skrull_error_info *)(void *)spans_store;
    const skrull_gpu far = {0, 0, 4};
    CHECK_STATUS(skrull_layout_fill(&c, LENGTHS, N, &plan, far, o.ws, o.cap.workspace_bytes,
                                    &o.bufs),
                 SKRULL_STATUS_NO_SUCH_GPU);
    const unsigned char *sp = (const unsigned char *)spans_store;
    for (size_t k = 0; k < sizeof spans_store; k++) {
        clean &= sp[k] == PATTERN;
    }
    CHECK(clean);
    CHECK(layout_out_untouched(&o));
    plan = s.bufs;
    /* Control: details in their own struct are written, with the same status. */
    skrull_error_info e;
    memset(&e, PATTERN, sizeof e);
    plan.error = &e;
    CHECK_STATUS(skrull_layout_fill(&c, LENGTHS, N, &plan, far, o.ws, o.cap.workspace_bytes,
                                    &o.bufs),
                 SKRULL_STATUS_NO_SUCH_GPU);
    CHECK(e.status == SKRULL_STATUS_NO_SUCH_GPU);
    store_free(&s);
}

/*
 * Outside harness, round 3: with subgroups = 1, a NULL cp_groups was reported (NULL_ARG)
 * before a too-short micro_batches_per_dp, which the documented field order puts first
 * (OUTPUT_TOO_SMALL). The groups are now checked in their place, after micro_batches_per_dp.
 */
static void cp_groups_checked_in_field_order(void) {
    skrull_config c = config();
    c.subgroups = 1;
    plan_store s;
    store_init(&s, N, c.dp, c.cp);
    skrull_plan_buffers out = s.bufs;
    out.cp_groups = NULL;
    out.cp_groups_len = 0;
    out.micro_batches_per_dp_len = c.dp - 1;
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_OUTPUT_TOO_SMALL);
    out.micro_batches_per_dp_len = c.dp; /* then the groups themselves */
    CHECK_STATUS(skrull_schedule(&c, LENGTHS, N, s.workspace.data, s.sizes.workspace_bytes,
                                 &out),
                 SKRULL_STATUS_NULL_ARG);
    CHECK(all_guards_intact(&s));
    store_free(&s);
}

int main(void) {
    struct_size_inside_a_field_is_refused();
    summary_reserved_is_plan_invalid();
    overlap_is_checked_on_declared_capacities();
    corrupted_plan_entries_are_plan_invalid();
    error_details_never_land_in_an_output();
    cp_groups_checked_in_field_order();
    return report("regressions");
}
