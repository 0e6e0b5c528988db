// op_check.hpp - the trainer as a C++ caller of the torch op (skrull.ops): --check-op LIB
// loads the op's library (skrull.ops.library_path()), finds torch.ops.skrull.schedule through
// c10::Dispatcher, passes it the trainer's skrull_config and skrull_cost_model as byte
// tensors, and every step compares what it returns with the plan the trainer made through
// libskrull.a, or, for a batch skrull refuses, its message with the trainer's.
#ifndef SKRULL_LIBTORCH_OP_CHECK_HPP
#define SKRULL_LIBTORCH_OP_CHECK_HPP

#include <optional>
#include <string>
#include <vector>

#include "planning.hpp"

namespace trainer {

class OpCheck {
public:
    /// Loads the op library at `path`; nullopt and `*why` when it cannot be loaded or does not
    /// register skrull::schedule.
    static std::optional<OpCheck> load(const std::string &path, std::string *why);

    /// Runs the op on `written` (the lengths as the caller wrote them) with `planner`'s
    /// configuration (its skrull_config and cost model as the op's byte tensors) and compares
    /// every array with `planner`'s last plan; the first difference, or nullopt when they are
    /// equal.
    std::optional<std::string> same_plan(const Planner &planner,
                                         const std::vector<int64_t> &written) const;

    /// Runs the op on a batch `planner` refused with `refusal`: the difference between its
    /// message and "<detail> [<name>]", or nullopt when they are the same.
    std::optional<std::string> same_refusal(const SkrullError &refusal, const Planner &planner,
                                            const std::vector<int64_t> &written) const;

private:
    OpCheck() = default;
};

}  // namespace trainer

#endif
