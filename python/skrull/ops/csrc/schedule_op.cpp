// schedule_op.cpp - torch.ops.skrull.schedule: skrull_schedule_prepared() as a torch operator.
//
//   schedule(Tensor lengths, str config) -> (Tensor placements, Tensor micro_batch_table,
//       Tensor members, Tensor rank_tokens, Tensor micro_batches_per_dp, Tensor cp_groups,
//       Tensor summary)
//
// `lengths` is a one-dimensional integer tensor (any device: it is read on the CPU); `config`
// the text of config_text.hpp. The outputs are CPU tensors holding exactly the arrays of
// skrull.Scheduler(...).plan(lengths) (docs/cpp.md, "The torch op"):
//
//   placements            int32 [n, 4]   dp_rank, micro_batch, cp_rank (-1 sharded, -2
//                                        chunked), tokens_per_gpu     (Plan.placements)
//   micro_batch_table     int32 [k, 4]   dp_rank, index, first, count (Plan.micro_batch_table)
//   members               int64 [n]      sequences grouped by micro-batch (Plan.members)
//   rank_tokens           int32 [k, cp]  tokens per CP rank of each table entry
//   micro_batches_per_dp  int64 [dp]     (Plan.micro_batches_per_dp)
//   cp_groups             int32 [n, 2]   first, size                  (Plan.cp_groups)
//   summary               int64 [7]      total_tokens, sequences, micro_batches, sharded,
//                                        rollbacks, peak_rank_tokens, chunked (Plan.summary)
//
// The library writes the placements, the table, the token loads and the groups straight into
// the output tensors (every value fits int32: see the limits in README.md); nothing is kept
// between calls (the configuration is parsed and prepared per call, in memory the call owns),
// so the op is safe from many threads. A status other than ok raises the message the ctypes
// binding raises (status_text.hpp): ValueError for a refused batch or configuration,
// TypeError for lengths that are not one-dimensional integers, RuntimeError for an internal
// error.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "config_text.hpp"
#include "skrull.h"
#include "status_text.hpp"

namespace skrull_ops {
namespace {

static_assert(sizeof(skrull_placement) == 4 * sizeof(int32_t), "placements are int32 [n, 4]");
static_assert(sizeof(skrull_micro_batch) == 4 * sizeof(int32_t), "the table is int32 [k, 4]");
static_assert(sizeof(skrull_cp_group) == 2 * sizeof(int32_t), "groups are int32 [n, 2]");

constexpr std::size_t kMaxSequences = 65536;

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor>;

[[noreturn]] void raise(const Failure &f) {
    switch (f.kind) {
    case ErrorKind::value:
        TORCH_CHECK_VALUE(false, f.message);
    case ErrorKind::type:
        TORCH_CHECK_TYPE(false, f.message);
    case ErrorKind::runtime:
        break;
    }
    TORCH_CHECK(false, f.message);
}

// Python's tuple form of a shape: (), (3,), (2, 3).
std::string py_shape(at::IntArrayRef sizes) {
    std::string out = "(";
    for (std::size_t i = 0; i < sizes.size(); i++) {
        out += (i ? ", " : "") + std::to_string(sizes[i]);
    }
    return out + (sizes.size() == 1 ? ",)" : ")");
}

// The lengths as the library reads them, and the caller's int64 values (for messages).
// Values that do not fit uint32_t become 2^32 - 1, which the library refuses as
// LENGTH_OUT_OF_RANGE in input order, as the binding does.
struct Lengths {
    std::vector<uint32_t> c;
    at::Tensor caller;  // int64, CPU, contiguous
};

Lengths read_lengths(const at::Tensor &lengths) {
    if (lengths.dim() != 1) {
        raise(make_failure(SKRULL_STATUS_INVALID_ARG,
                           "lengths must be one-dimensional (one length per sequence), got "
                           "shape " + py_shape(lengths.sizes()),
                           ErrorKind::type));
    }
    c10::ScalarType t = lengths.scalar_type();
    if (!c10::isIntegralType(t, /*includeBool=*/false)) {
        raise(make_failure(SKRULL_STATUS_INVALID_ARG,
                           std::string("lengths must hold integer numbers of tokens, got a "
                                       "tensor of dtype ") + c10::toString(t),
                           ErrorKind::type));
    }
    Lengths out;
    out.caller = lengths.to(at::kCPU, at::kLong).contiguous();
    const int64_t *v = out.caller.data_ptr<int64_t>();
    std::size_t n = static_cast<std::size_t>(out.caller.numel());
    out.c.resize(n);
    for (std::size_t i = 0; i < n; i++) {
        out.c[i] = v[i] >= 0 && v[i] <= int64_t{0xFFFFFFFF} ? static_cast<uint32_t>(v[i])
                                                             : 0xFFFFFFFFu;
    }
    return out;
}

template <class T>
T *words(at::Tensor &t) {
    return reinterpret_cast<T *>(t.data_ptr<int32_t>());
}

Outputs schedule(const at::Tensor &lengths, c10::string_view config) {
    Lengths len = read_lengths(lengths);
    const std::size_t n = len.c.size();

    ConfigText text;
    if (std::optional<Failure> f = text.parse(std::string_view(config.data(), config.size()))) {
        raise(*f);
    }
    const skrull_config &cfg = text.config();
    DescribeContext ctx;
    ctx.bucket_tokens = cfg.bucket_tokens;
    ctx.flops = text.flops_name();

    // The configuration prepared for this call (validated once, the cost model derived).
    std::unique_ptr<unsigned char[]> setup_mem(new unsigned char[skrull_setup_size()]);
    const skrull_setup *setup = nullptr;
    skrull_error_info err{};
    uint32_t st = skrull_setup_init(&cfg, setup_mem.get(), skrull_setup_size(), &setup, &err);
    if (st != SKRULL_STATUS_OK) {
        raise(describe(st, err, ctx));
    }

    // Past the limit the library answers TOO_MANY_SEQUENCES before it looks at a buffer.
    skrull_sizes sizes{};
    st = skrull_plan_sizes(n <= kMaxSequences ? n : 0, cfg.dp, cfg.cp, &sizes);
    if (st != SKRULL_STATUS_OK) {
        raise(describe(st, skrull_error_info{}, ctx));
    }
    // At least one element each: an empty tensor has no address, and the library takes NULL
    // only with a capacity of 0 (cp_groups not even then, with sub-groups or chunking on).
    auto rows_of = [](std::size_t count) { return static_cast<int64_t>(count == 0 ? 1 : count); };
    sizes.placements = static_cast<std::size_t>(rows_of(sizes.placements));
    sizes.micro_batches = static_cast<std::size_t>(rows_of(sizes.micro_batches));
    sizes.members = static_cast<std::size_t>(rows_of(sizes.members));
    sizes.rank_tokens = static_cast<std::size_t>(rows_of(sizes.rank_tokens));
    sizes.micro_batches_per_dp = static_cast<std::size_t>(rows_of(sizes.micro_batches_per_dp));
    auto i32 = at::TensorOptions().dtype(at::kInt);
    at::Tensor placements = at::empty({static_cast<int64_t>(sizes.placements), 4}, i32);
    at::Tensor table = at::empty({static_cast<int64_t>(sizes.micro_batches), 4}, i32);
    at::Tensor rank_tokens = at::empty({static_cast<int64_t>(sizes.rank_tokens)}, i32);
    at::Tensor groups = at::empty({static_cast<int64_t>(sizes.placements), 2}, i32);
    std::vector<uint32_t> members(sizes.members), per_dp(sizes.micro_batches_per_dp);
    std::unique_ptr<unsigned char[]> workspace(new unsigned char[sizes.workspace_bytes + 1]);
    skrull_summary summary{};

    skrull_plan_buffers out{};
    out.struct_size = sizeof out;
    out.placements = words<skrull_placement>(placements);
    out.placements_len = sizes.placements;
    out.micro_batches = words<skrull_micro_batch>(table);
    out.micro_batches_len = sizes.micro_batches;
    out.members = members.data();
    out.members_len = members.size();
    out.rank_tokens = words<uint32_t>(rank_tokens);
    out.rank_tokens_len = sizes.rank_tokens;
    out.micro_batches_per_dp = per_dp.data();
    out.micro_batches_per_dp_len = per_dp.size();
    out.summary = &summary;
    out.error = &err;
    out.cp_groups = words<skrull_cp_group>(groups);
    out.cp_groups_len = sizes.placements;

    err = skrull_error_info{};
    st = skrull_schedule_prepared(setup, len.c.data(), n, workspace.get(), sizes.workspace_bytes,
                                  &out);
    if (st != SKRULL_STATUS_OK) {
        if (st == SKRULL_STATUS_LENGTH_OUT_OF_RANGE && err.status == st && err.index >= 0 &&
            static_cast<std::size_t>(err.index) < n) {
            ctx.caller_value = len.caller.data_ptr<int64_t>()[err.index];
        }
        raise(describe(st, err, ctx));
    }

    const int64_t k = summary.micro_batches;
    const int64_t rows = static_cast<int64_t>(n);
    auto i64 = at::TensorOptions().dtype(at::kLong);
    at::Tensor members_t = at::empty({rows}, i64);
    int64_t *m = members_t.data_ptr<int64_t>();
    for (std::size_t i = 0; i < n; i++) {
        m[i] = members[i];
    }
    at::Tensor per_dp_t = at::empty({static_cast<int64_t>(cfg.dp)}, i64);
    int64_t *p = per_dp_t.data_ptr<int64_t>();
    for (uint32_t d = 0; d < cfg.dp; d++) {
        p[d] = per_dp[d];
    }
    int64_t chunked = 0;
    const skrull_placement *pl = words<skrull_placement>(placements);
    for (std::size_t i = 0; i < n; i++) {
        chunked += pl[i].cp_rank == SKRULL_CHUNKED;
    }
    at::Tensor summary_t = at::empty({7}, i64);
    int64_t *s = summary_t.data_ptr<int64_t>();
    s[0] = static_cast<int64_t>(summary.total_tokens);
    s[1] = summary.sequences;
    s[2] = summary.micro_batches;
    s[3] = summary.sharded;
    s[4] = summary.rollbacks;
    s[5] = summary.peak_rank_tokens;
    s[6] = chunked;
    return Outputs(placements.narrow(0, 0, rows), table.narrow(0, 0, k), members_t,
                   rank_tokens.narrow(0, 0, k * cfg.cp).view({k, static_cast<int64_t>(cfg.cp)}),
                   per_dp_t, groups.narrow(0, 0, rows), summary_t);
}

}  // namespace
}  // namespace skrull_ops

TORCH_LIBRARY(skrull, m) {
    // The fake (meta) implementation for torch.compile is registered from Python
    // (skrull/ops/__init__.py), where this points torch to look for it.
    m.set_python_module("skrull.ops");
    m.def(
        "schedule(Tensor lengths, str config) -> (Tensor placements, Tensor micro_batch_table, "
        "Tensor members, Tensor rank_tokens, Tensor micro_batches_per_dp, Tensor cp_groups, "
        "Tensor summary)");
}

TORCH_LIBRARY_IMPL(skrull, CompositeExplicitAutograd, m) {
    m.impl("schedule", &skrull_ops::schedule);
}
