// planning.hpp - the trainer's use of the C ABI: a configuration prepared once
// (skrull_setup_init), a plan per step (skrull_schedule_prepared) into buffers sized once for
// the largest batch, and one GPU's micro-batches laid out per step with one
// skrull_layout_fill_many call. Buffers come from ../skrull.hpp (skrull::Buffer).
#ifndef SKRULL_LIBTORCH_PLANNING_HPP
#define SKRULL_LIBTORCH_PLANNING_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../skrull.hpp"
#include "skrull.h"

namespace trainer {

/// A refused call: the function, the status and the library's sentence for it.
struct SkrullError {
    std::string call;
    skrull_status status;
    std::string name;    // "SEQUENCE_TOO_LONG" (skrull_status_name)
    std::string detail;  // skrull_error_describe: the sentence skrull's Python binding raises
    int64_t index = -1;  // the sequence (or DP rank) the details name; -1 when none
};

/// Plans global batches of up to `max_sequences` with one prepared configuration.
class Planner {
public:
    /// Validates and prepares `cfg` (kept by value, and so is the cost model it points at,
    /// if any) and sizes every buffer; nullptr and `*why` on failure.
    static std::unique_ptr<Planner> create(const skrull_config &cfg, std::size_t max_sequences,
                                           SkrullError *why);

    /// Plans `lengths` (at most `max_sequences`); the error on refusal (the last plan stays).
    /// `written`, when given, holds the lengths as the caller wrote them (a length outside
    /// uint32_t went to the library as 2^32 - 1; the message then shows the caller's value).
    std::optional<SkrullError> plan(const std::vector<uint32_t> &lengths,
                                    const std::vector<int64_t> *written = nullptr);

    [[nodiscard]] const skrull_config &config() const noexcept { return cfg_; }
    [[nodiscard]] const skrull_plan_buffers &buffers() const noexcept { return out_; }
    [[nodiscard]] const skrull_summary &summary() const noexcept { return summary_; }
    [[nodiscard]] const skrull_placement &placement(std::size_t i) const noexcept {
        return placements_[i];
    }
    /// The CP ranks holding sequence `i`: {cp_rank, 1} local, {0, cp} whole group, else a
    /// sub-group.
    [[nodiscard]] const skrull_cp_group &group(std::size_t i) const noexcept { return groups_[i]; }
    [[nodiscard]] uint32_t micro_batches_of(uint32_t dp_rank) const noexcept {
        return per_dp_[dp_rank];
    }
    /// The DP rank's sequences in plan order (its table entries' members, one after another):
    /// the token stream the layouts' gather indices point into.
    [[nodiscard]] std::vector<uint32_t> dp_sequences(uint32_t dp_rank) const;

    Planner(const Planner &) = delete;
    Planner &operator=(const Planner &) = delete;

private:
    Planner() = default;

    skrull_config cfg_{};
    skrull_cost_model cost_{};  // what cfg_.cost_model points at, when the caller gave one
    skrull::Buffer<unsigned char> setup_mem_;
    const skrull_setup *setup_ = nullptr;
    skrull::Buffer<unsigned char> workspace_;
    skrull::Buffer<skrull_placement> placements_;
    skrull::Buffer<skrull_micro_batch> table_;
    skrull::Buffer<uint32_t> members_;
    skrull::Buffer<uint32_t> rank_tokens_;
    skrull::Buffer<uint32_t> per_dp_;
    skrull::Buffer<skrull_cp_group> groups_;
    skrull_summary summary_{};
    skrull_error_info error_{};
    skrull_plan_buffers out_{};
    std::size_t max_sequences_ = 0;
};

/// One GPU's layout of one micro-batch, read out of the library's buffers.
struct GpuLayout {
    skrull_layout info{};
    std::vector<skrull_span> spans;
    std::vector<int32_t> local_cu_seqlens;   // local_seqs + 1
    std::vector<int32_t> rank_cu_seqlens;    // sharded_seqs + 1: this rank's rows
    std::vector<int32_t> sharded_cu_seqlens; // sharded_seqs + 1: global lengths
    std::vector<int32_t> positions;          // tokens
    std::vector<int64_t> gather_index;       // tokens: offset in the DP rank's stream, -1 pad
    std::vector<skrull_layout_ring> rings;
};

/// Lays out every micro-batch of one GPU (DP rank, CP rank) with one skrull_layout_fill_many
/// call, into buffers sized once with skrull_layout_sizes_max.
class Layouts {
public:
    /// Buffers for every GPU of every plan of up to `max_sequences` under `cfg` (a planner's
    /// config(): its cost model must outlive this object).
    Layouts(const skrull_config &cfg, std::size_t max_sequences);

    /// The layouts of micro-batches 0 .. micro_batches - 1 of GPU (dp_rank, cp_rank).
    std::optional<SkrullError> fill(const Planner &planner, const std::vector<uint32_t> &lengths,
                                    uint32_t dp_rank, uint32_t cp_rank, uint32_t micro_batches,
                                    std::vector<GpuLayout> &out);

    /// Whether construction got every buffer (skrull_layout_sizes_max succeeded).
    [[nodiscard]] const std::optional<SkrullError> &error() const noexcept { return error_; }

private:
    struct Slot {
        std::vector<skrull_span> spans;
        std::vector<int32_t> local_cu, sharded_cu, sharded_cu_padded, rank_cu, positions;
        std::vector<int64_t> gather;
        std::vector<skrull_layout_ring> rings;
        skrull_layout info{};
        uint32_t rings_count = 0;
        skrull_layout_buffers buffers{};
    };
    void grow(std::size_t count);

    skrull_config cfg_;
    skrull_layout_capacity cap_{};
    std::vector<unsigned char> workspace_;
    std::vector<Slot> slots_;
    std::optional<SkrullError> error_;
};

/// The error for a failed call, worded by the library from the details it wrote (`info`, when
/// it wrote them) and the configuration the call was given (`config`, or nullptr); a length
/// the caller wrote outside uint32_t is named as `caller_value`.
SkrullError skrull_error(const char *call, skrull_status status, const skrull_error_info *info,
                         const skrull_config *config, std::optional<int64_t> caller_value = {});

}  // namespace trainer

#endif
