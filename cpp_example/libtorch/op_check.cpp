// op_check.cpp - see op_check.hpp.
#include "op_check.hpp"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <cstring>
#include <tuple>

namespace trainer {
namespace {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor>;

using Signature = Outputs(const at::Tensor &, const at::Tensor &, const at::Tensor &);

c10::TypedOperatorHandle<Signature> schedule_op() {
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow("skrull::schedule", "")
        .typed<Signature>();
}

// `n` bytes at `p` as a uint8 tensor of its own.
at::Tensor bytes_of(const void *p, std::size_t n) {
    return torch::from_blob(const_cast<void *>(p), {static_cast<int64_t>(n)}, torch::kUInt8)
        .clone();
}

// The op on `written` with the planner's configuration: its skrull_config (struct_size bytes;
// the op ignores the pointer in them) and the cost model it points at (none: no bytes, the
// library's preset).
Outputs call(const Planner &planner, const std::vector<int64_t> &written) {
    const skrull_config &cfg = planner.config();
    at::Tensor config = bytes_of(&cfg, cfg.struct_size);
    at::Tensor cost = cfg.cost_model != nullptr
                          ? bytes_of(cfg.cost_model, cfg.cost_model->struct_size)
                          : torch::empty({0}, torch::kUInt8);
    return schedule_op().call(torch::tensor(written, torch::kLong), config, cost);
}

// `got` (an integer tensor of `rows` x `cols`) against `want` read as `rows * cols` words of
// type W; the first difference as text.
template <class W>
std::optional<std::string> compare(const char *name, const at::Tensor &got, const W *want,
                                   int64_t rows, int64_t cols) {
    if (got.dim() == 0 || got.size(0) != rows || got.numel() != rows * cols) {
        return std::string(name) + ": " + std::to_string(got.numel()) + " values, wanted " +
               std::to_string(rows * cols);
    }
    at::Tensor flat = got.to(torch::kLong).contiguous().view(-1);
    const int64_t *g = flat.data_ptr<int64_t>();
    for (int64_t i = 0; i < rows * cols; i++) {
        if (g[i] != static_cast<int64_t>(want[i])) {
            return std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(g[i]) +
                   ", libskrull.a gave " + std::to_string(static_cast<int64_t>(want[i]));
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<OpCheck> OpCheck::load(const std::string &path, std::string *why) {
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
        const char *e = dlerror();
        *why = "cannot load " + path + ": " + (e ? e : "unknown error");
        return std::nullopt;
    }
    try {
        (void)schedule_op();
    } catch (const c10::Error &e) {
        *why = path + " does not register skrull::schedule: " + e.what_without_backtrace();
        return std::nullopt;
    }
    return OpCheck();
}

std::optional<std::string> OpCheck::same_plan(const Planner &planner,
                                              const std::vector<int64_t> &written) const {
    Outputs out;
    try {
        out = call(planner, written);
    } catch (const c10::Error &e) {
        return std::string("the op refused a batch libskrull.a planned: ") +
               e.what_without_backtrace();
    }
    const skrull_plan_buffers &b = planner.buffers();
    const skrull_summary &s = planner.summary();
    const int64_t n = static_cast<int64_t>(written.size()), k = s.micro_batches;
    const int64_t dp = planner.config().dp, cp = planner.config().cp;
    // Placements and groups are read as int32 words (cp_rank is signed), the rest unsigned.
    std::optional<std::string> d =
        compare("placements", std::get<0>(out), reinterpret_cast<const int32_t *>(b.placements),
                n, 4);
    if (!d) {
        d = compare("micro_batch_table", std::get<1>(out),
                    reinterpret_cast<const uint32_t *>(b.micro_batches), k, 4);
    }
    if (!d) {
        d = compare("members", std::get<2>(out), b.members, n, 1);
    }
    if (!d) {
        d = compare("rank_tokens", std::get<3>(out), b.rank_tokens, k, cp);
    }
    if (!d) {
        d = compare("micro_batches_per_dp", std::get<4>(out), b.micro_batches_per_dp, dp, 1);
    }
    if (!d) {
        d = compare("cp_groups", std::get<5>(out), reinterpret_cast<const uint32_t *>(b.cp_groups),
                    n, 2);
    }
    if (!d) {
        const uint64_t summary[6] = {s.total_tokens, s.sequences, s.micro_batches,
                                     s.sharded,      s.rollbacks, s.peak_rank_tokens};
        d = compare("summary", std::get<6>(out).narrow(0, 0, 6), summary, 6, 1);
    }
    return d;
}

std::optional<std::string> OpCheck::same_refusal(const SkrullError &refusal,
                                                 const Planner &planner,
                                                 const std::vector<int64_t> &written) const {
    const std::string want = refusal.detail + " [" + refusal.name + "]";
    try {
        (void)call(planner, written);
    } catch (const c10::Error &e) {
        std::string got = e.what_without_backtrace();
        if (got == want) {
            return std::nullopt;
        }
        return "the op says \"" + got + "\", the trainer \"" + want + "\"";
    }
    return "the op planned a batch libskrull.a refused (" + want + ")";
}

}  // namespace trainer
