// schedule_op.cpp - torch.ops.skrull.schedule: skrull_schedule_prepared() as a torch operator.
//
//   schedule(Tensor lengths, Tensor config, Tensor cost_model) -> (Tensor placements,
//       Tensor micro_batch_table, Tensor members, Tensor rank_tokens,
//       Tensor micro_batches_per_dp, Tensor cp_groups, Tensor summary)
//
// `lengths` is a one-dimensional integer tensor (any device: it is read on the CPU). `config`
// holds the bytes of a skrull_config and `cost_model` those of a skrull_cost_model, or no
// bytes for the library's preset: each a one-dimensional uint8 CPU tensor of exactly its
// struct_size bytes (skrull.ops.config_tensors() gives both for a Scheduler). The op copies
// them into structs of its own and points the config at its cost model (the pointer in the
// config's bytes is ignored). The outputs are CPU tensors holding exactly the arrays of
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
// between calls (the configuration is prepared per call, in memory the call owns), so the op
// is safe from many threads. A status other than ok raises the binding's message, which the
// library words: "<skrull_error_describe()> [<skrull_status_name()>]".
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "skrull.h"

namespace skrull_ops {
namespace {

static_assert(sizeof(skrull_placement) == 4 * sizeof(int32_t), "placements are int32 [n, 4]");
static_assert(sizeof(skrull_micro_batch) == 4 * sizeof(int32_t), "the table is int32 [k, 4]");
static_assert(sizeof(skrull_cp_group) == 2 * sizeof(int32_t), "groups are int32 [n, 2]");

constexpr std::size_t kMaxSequences = 65536;

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor>;

// The binding's exception for a status (skrull._errors.error_class): INVALID_ARG a TypeError;
// INVALID_ENUM and the configuration, batch and layout statuses (10 to 39) ValueErrors; a
// malformed call or a library fault a RuntimeError.
[[noreturn]] void raise_status(uint32_t status, const skrull_error_info *info,
                               const skrull_config *config, std::string sentence = {}) {
    if (sentence.empty()) {
        sentence.assign(skrull_error_describe(status, info, config, nullptr, 0), '\0');
        skrull_error_describe(status, info, config, sentence.data(), sentence.size() + 1);
    }
    const char *name = skrull_status_name(status);
    const std::string message =
        sentence + " [" + (name ? std::string(name) : "UNKNOWN_" + std::to_string(status)) + "]";
    TORCH_CHECK_TYPE(status != SKRULL_STATUS_INVALID_ARG, message);
    TORCH_CHECK_VALUE(status != SKRULL_STATUS_INVALID_ENUM && (status < 10 || status > 39),
                      message);
    TORCH_CHECK(false, message);
}

// Python's tuple form of a shape: (), (3,), (2, 3).
std::string py_shape(at::IntArrayRef sizes) {
    std::string out = "(";
    for (std::size_t i = 0; i < sizes.size(); i++) {
        out += (i ? ", " : "") + std::to_string(sizes[i]);
    }
    return out + (sizes.size() == 1 ? ",)" : ")");
}

// The bytes of a C struct given as a tensor (`arg`; no bytes only where `optional`), copied
// into storage aligned for T of at least sizeof(T) bytes (zeros past the caller's, which the
// library does not read: it reads struct_size bytes).
template <class T>
std::vector<T> read_struct(const at::Tensor &t, const char *arg, const char *c_type,
                           bool optional) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kByte, arg, " must be a uint8 tensor holding the "
                     "bytes of a ", c_type, " (skrull.ops.config_tensors() gives it), got dtype ",
                     t.scalar_type());
    TORCH_CHECK_VALUE(t.device().is_cpu(), arg, " must be a CPU tensor (the bytes of a ",
                      c_type, "), got one on ", t.device());
    TORCH_CHECK_VALUE(t.dim() == 1, arg, " must be one-dimensional (the bytes of a ", c_type,
                      "), got shape ", py_shape(t.sizes()));
    const at::Tensor bytes = t.contiguous();
    const std::size_t n = static_cast<std::size_t>(bytes.numel());
    std::vector<T> out((std::max(n, sizeof(T)) + sizeof(T) - 1) / sizeof(T));
    if (n == 0 && optional) {
        return out;
    }
    if (n != 0) {
        std::memcpy(static_cast<void *>(out.data()), bytes.data_ptr<uint8_t>(), n);
    }
    uint32_t size = 0;
    std::memcpy(&size, out.data(), n < sizeof size ? n : sizeof size);
    TORCH_CHECK_VALUE(n >= sizeof size && size == n, arg, " holds ", n, " bytes, but its "
                      "struct_size field (the first 4 bytes) says ", size, ": pass exactly the ",
                      "bytes of one ", c_type);
    return out;
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
        raise_status(SKRULL_STATUS_INVALID_ARG, nullptr, nullptr,
                     "lengths must be one-dimensional (one length per sequence), got shape " +
                         py_shape(lengths.sizes()));
    }
    c10::ScalarType t = lengths.scalar_type();
    if (!c10::isIntegralType(t, /*includeBool=*/false)) {
        raise_status(SKRULL_STATUS_INVALID_ARG, nullptr, nullptr,
                     std::string("lengths must hold integer numbers of tokens, got a tensor of "
                                 "dtype ") + c10::toString(t));
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

Outputs schedule(const at::Tensor &lengths, const at::Tensor &config,
                 const at::Tensor &cost_model) {
    std::vector<skrull_config> cfg_mem = read_struct<skrull_config>(config, "config",
                                                                    "skrull_config", false);
    std::vector<skrull_cost_model> cost_mem =
        read_struct<skrull_cost_model>(cost_model, "cost_model", "skrull_cost_model", true);
    skrull_config &cfg = cfg_mem.front();
    const bool has_cost = cost_model.numel() != 0;
    if (cfg.struct_size >= offsetof(skrull_config, cost_model) + sizeof cfg.cost_model) {
        cfg.cost_model = has_cost ? cost_mem.data() : nullptr;
    } else if (has_cost) {
        // A config that cannot point at a cost model: the library's verdict on it first.
        skrull_error_info err{};
        if (uint32_t st = skrull_config_check(&cfg, &err); st != SKRULL_STATUS_OK) {
            raise_status(st, &err, &cfg);
        }
        TORCH_CHECK_VALUE(false, "cost_model must be empty for a config of ", cfg.struct_size,
                          " bytes, which ends before its cost_model field");
    }
    Lengths len = read_lengths(lengths);
    const std::size_t n = len.c.size();

    // The configuration prepared for this call (validated once, the cost model derived).
    std::unique_ptr<unsigned char[]> setup_mem(new unsigned char[skrull_setup_size()]);
    const skrull_setup *setup = nullptr;
    skrull_error_info err{};
    uint32_t st = skrull_setup_init(&cfg, setup_mem.get(), skrull_setup_size(), &setup, &err);
    if (st != SKRULL_STATUS_OK) {
        raise_status(st, &err, &cfg);
    }

    // Past the limit the library answers TOO_MANY_SEQUENCES before it looks at a buffer.
    skrull_sizes sizes{};
    st = skrull_plan_sizes(n <= kMaxSequences ? n : 0, cfg.dp, cfg.cp, &sizes);
    if (st != SKRULL_STATUS_OK) {
        raise_status(st, nullptr, &cfg);
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
        // A length that did not fit uint32_t is named as the caller wrote it (the int64 bit
        // pattern in `value`, as skrull_error_describe reads it).
        if (st == SKRULL_STATUS_LENGTH_OUT_OF_RANGE && err.status == st && err.index >= 0 &&
            static_cast<std::size_t>(err.index) < n) {
            err.value = static_cast<uint64_t>(len.caller.data_ptr<int64_t>()[err.index]);
        }
        raise_status(st, &err, &cfg);
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
        "schedule(Tensor lengths, Tensor config, Tensor cost_model) -> (Tensor placements, "
        "Tensor micro_batch_table, Tensor members, Tensor rank_tokens, "
        "Tensor micro_batches_per_dp, Tensor cp_groups, Tensor summary)");
}

TORCH_LIBRARY_IMPL(skrull, CompositeExplicitAutograd, m) {
    m.impl("schedule", &skrull_ops::schedule);
}
