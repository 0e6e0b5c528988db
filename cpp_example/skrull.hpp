// skrull.hpp - a small C++17 RAII layer over the C API in skrull.h.
//
// - skrull::Status: a [[nodiscard]] status (0 = ok) with its message.
// - skrull::Buffer<T>: a malloc-backed, move-only array (std::unique_ptr with a free deleter).
// - skrull::Planner: owns every buffer skrull_schedule() needs, sized once for the largest
//   batch, and exposes the last plan grouped per (DP rank, micro-batch).
// - skrull::GpuLayout: owns the buffers skrull_layout_fill() needs, sized once, and exposes one
//   GPU's spans, varlen cu_seqlens, rings (one CP attention call each), position ids and loss
//   weights.
//
// Nothing here throws: allocation failures and library errors come back as values, so no
// exception can cross into (or out of) the C library.
#ifndef SKRULL_HPP
#define SKRULL_HPP

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "skrull.h"

namespace skrull {

static_assert(sizeof(skrull_placement) == 16, "frozen layout");
static_assert(sizeof(skrull_micro_batch) == 16, "frozen layout");
static_assert(sizeof(skrull_summary) == 32, "frozen layout");
static_assert(sizeof(skrull_config) >= SKRULL_CONFIG_SIZE_V1, "extensible: grows at the end");
static_assert(sizeof(skrull_span) == 24, "frozen layout");
static_assert(sizeof(skrull_gpu) == 12, "frozen layout");
static_assert(sizeof(skrull_layout) == 88, "frozen layout");
static_assert(sizeof(skrull_cp_group) == 8, "frozen layout");
static_assert(sizeof(skrull_layout_ring) == 16, "frozen layout");

/// The result of a skrull call; converts to true on success.
class [[nodiscard]] Status {
public:
    constexpr Status() noexcept = default;
    constexpr explicit Status(skrull_status code) noexcept : code_(code) {}
    /// Out of memory in this wrapper (not a library status; never returned by skrull).
    static constexpr Status out_of_memory() noexcept { return Status(kOutOfMemory); }

    [[nodiscard]] constexpr bool ok() const noexcept { return code_ == SKRULL_STATUS_OK; }
    constexpr explicit operator bool() const noexcept { return ok(); }
    [[nodiscard]] constexpr skrull_status code() const noexcept { return code_; }
    [[nodiscard]] const char *message() const noexcept {
        return code_ == kOutOfMemory ? "out of memory" : skrull_status_str(code_);
    }

private:
    static constexpr skrull_status kOutOfMemory = static_cast<skrull_status>(0x10000);
    skrull_status code_ = SKRULL_STATUS_OK;
};

/// Checks that the header and the linked library agree on the ABI.
[[nodiscard]] inline bool abi_matches() noexcept {
    return skrull_abi_version() == SKRULL_ABI_VERSION;
}

/// A preset configuration (SKRULL_PRESET_*), or the status explaining why not.
[[nodiscard]] inline Status preset(uint32_t which, skrull_config &out) noexcept {
    return Status(skrull_config_preset_init(which, &out, sizeof out));
}

struct FreeDeleter {
    void operator()(void *p) const noexcept { std::free(p); }
};

/// A fixed-size array from malloc (trivially copyable T only), move-only.
template <class T>
class Buffer {
public:
    Buffer() noexcept = default;

    /// Replaces the contents with `n` uninitialised elements; false when out of memory.
    [[nodiscard]] bool allocate(std::size_t n) noexcept {
        if (n > SIZE_MAX / sizeof(T)) {
            return false;
        }
        // malloc(0) may return NULL: keep a 1-byte allocation so "empty" still has an address.
        void *p = std::malloc(n == 0 ? 1 : n * sizeof(T));
        if (p == nullptr) {
            return false;
        }
        ptr_.reset(static_cast<T *>(p));
        size_ = n;
        return true;
    }

    [[nodiscard]] T *data() noexcept { return ptr_.get(); }
    [[nodiscard]] const T *data() const noexcept { return ptr_.get(); }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    const T &operator[](std::size_t i) const noexcept { return ptr_.get()[i]; }
    T &operator[](std::size_t i) noexcept { return ptr_.get()[i]; }

private:
    std::unique_ptr<T[], FreeDeleter> ptr_;
    std::size_t size_ = 0;
};

/// A contiguous read-only range (a minimal std::span for C++17).
template <class T>
struct Range {
    const T *first = nullptr;
    std::size_t count = 0;
    const T *begin() const noexcept { return first; }
    const T *end() const noexcept { return first + count; }
    std::size_t size() const noexcept { return count; }
    const T &operator[](std::size_t i) const noexcept { return first[i]; }
};

/// Plans global batches into buffers it owns. Not thread-safe itself: use one Planner per
/// thread (the library is safe to call from many threads with separate buffers).
class Planner {
public:
    /// A planner for batches of up to `max_sequences` on a `dp x cp` layout; nullptr on
    /// failure, with the reason in `*why` when given.
    [[nodiscard]] static std::unique_ptr<Planner> create(std::size_t max_sequences, uint32_t dp,
                                                         uint32_t cp,
                                                         Status *why = nullptr) noexcept {
        Status st;
        std::unique_ptr<Planner> p(new (std::nothrow) Planner());
        if (!p) {
            st = Status::out_of_memory();
        } else {
            st = p->allocate(max_sequences, dp, cp);
        }
        if (why != nullptr) {
            *why = st;
        }
        return st ? std::move(p) : nullptr;
    }

    /// Plans `n` lengths under `cfg` (whose dp and cp must be those given to create()). On
    /// error the previous plan stays readable and unchanged.
    [[nodiscard]] Status plan(const skrull_config &cfg, const uint32_t *lengths,
                              std::size_t n) noexcept {
        if (cfg.dp != dp_ || cfg.cp != cp_ || n > max_sequences_) {
            return Status(SKRULL_STATUS_INVALID_ARG);
        }
        Status st(skrull_schedule(&cfg, lengths, n, workspace_.data(), workspace_.size(), &out_));
        if (st) {
            // Offsets of each DP rank's first micro-batch in the table (a prefix sum; the
            // table is already grouped by DP rank, then index).
            first_of_dp_[0] = 0;
            for (uint32_t d = 0; d < dp_; d++) {
                first_of_dp_[d + 1] = first_of_dp_[d] + per_dp_[d];
            }
            n_ = n;
        }
        return st;
    }

    // --- The last successful plan (only meaningful after plan() returned ok) ------------
    [[nodiscard]] const skrull_summary &summary() const noexcept { return summary_; }
    [[nodiscard]] std::size_t sequences() const noexcept { return n_; }
    [[nodiscard]] uint32_t dp() const noexcept { return dp_; }
    [[nodiscard]] uint32_t cp() const noexcept { return cp_; }
    /// Where sequence `i` runs.
    [[nodiscard]] const skrull_placement &placement(std::size_t i) const noexcept {
        return placements_[i];
    }
    /// The CP ranks that hold sequence `i`: {cp_rank, 1} local, {0, cp} sharded over the whole
    /// group, else the sub-group it is sharded over (cfg.subgroups = 1).
    [[nodiscard]] const skrull_cp_group &group(std::size_t i) const noexcept {
        return groups_[i];
    }
    /// Micro-batches DP rank `d` runs.
    [[nodiscard]] uint32_t micro_batches_of(uint32_t d) const noexcept { return per_dp_[d]; }
    /// Table position of micro-batch `j` of DP rank `d` (j < micro_batches_of(d)).
    [[nodiscard]] std::size_t table_index(uint32_t d, uint32_t j) const noexcept {
        return first_of_dp_[d] + j;
    }
    [[nodiscard]] const skrull_micro_batch &micro_batch(std::size_t g) const noexcept {
        return micro_batches_[g];
    }
    /// Sequence indices of the micro-batch at table position `g`.
    [[nodiscard]] Range<uint32_t> members(std::size_t g) const noexcept {
        const skrull_micro_batch &mb = micro_batches_[g];
        return Range<uint32_t>{members_.data() + mb.first, mb.count};
    }
    /// Tokens each CP rank holds in the micro-batch at table position `g`.
    [[nodiscard]] Range<uint32_t> rank_tokens(std::size_t g) const noexcept {
        return Range<uint32_t>{rank_tokens_.data() + g * cp_, cp_};
    }
    /// The buffers the last plan lives in, as skrull_layout_fill() reads them back.
    [[nodiscard]] const skrull_plan_buffers &buffers() const noexcept { return out_; }

private:
    Planner() noexcept = default;

    Status allocate(std::size_t max_sequences, uint32_t dp, uint32_t cp) noexcept {
        skrull_sizes s{};
        Status st(skrull_plan_sizes(max_sequences, dp, cp, &s));
        if (!st) {
            return st;
        }
        bool ok = workspace_.allocate(s.workspace_bytes) && placements_.allocate(s.placements) &&
                  micro_batches_.allocate(s.micro_batches) && members_.allocate(s.members) &&
                  rank_tokens_.allocate(s.rank_tokens) &&
                  per_dp_.allocate(s.micro_batches_per_dp) && first_of_dp_.allocate(dp + 1u) &&
                  groups_.allocate(s.placements);  // one group per sequence, like placements
        if (!ok) {
            return Status::out_of_memory();
        }
        max_sequences_ = max_sequences;
        dp_ = dp;
        cp_ = cp;
        out_.struct_size = sizeof out_;
        out_.placements = placements_.data();
        out_.placements_len = placements_.size();
        out_.micro_batches = micro_batches_.data();
        out_.micro_batches_len = micro_batches_.size();
        out_.members = members_.data();
        out_.members_len = members_.size();
        out_.rank_tokens = rank_tokens_.data();
        out_.rank_tokens_len = rank_tokens_.size();
        out_.micro_batches_per_dp = per_dp_.data();
        out_.micro_batches_per_dp_len = per_dp_.size();
        out_.summary = &summary_;
        // Always given (required with cfg.subgroups = 1, written either way), and read back by
        // skrull_layout_fill().
        out_.cp_groups = groups_.data();
        out_.cp_groups_len = groups_.size();
        return Status();
    }

    Buffer<unsigned char> workspace_;
    Buffer<skrull_placement> placements_;
    Buffer<skrull_micro_batch> micro_batches_;
    Buffer<uint32_t> members_;
    Buffer<uint32_t> rank_tokens_;
    Buffer<uint32_t> per_dp_;
    Buffer<std::size_t> first_of_dp_;
    Buffer<skrull_cp_group> groups_;
    skrull_summary summary_{};
    skrull_plan_buffers out_{};
    std::size_t max_sequences_ = 0;
    std::size_t n_ = 0;
    uint32_t dp_ = 0;
    uint32_t cp_ = 0;
};

/// One GPU's execution layout of a plan (skrull_layout_fill()): what the GPU packs into its
/// token buffer and the varlen metadata of its two attention calls. Buffers are sized once
/// with skrull_layout_sizes_max() for the largest batch. Not thread-safe itself (one per
/// thread).
class GpuLayout {
public:
    /// Buffers for every GPU of every plan of up to `max_sequences` under `cfg`; nullptr on
    /// failure, with the reason in `*why` when given.
    [[nodiscard]] static std::unique_ptr<GpuLayout> create(const skrull_config &cfg,
                                                           std::size_t max_sequences,
                                                           Status *why = nullptr) noexcept {
        Status st;
        std::unique_ptr<GpuLayout> l(new (std::nothrow) GpuLayout());
        if (!l) {
            st = Status::out_of_memory();
        } else {
            st = l->allocate(cfg, max_sequences);
        }
        if (why != nullptr) {
            *why = st;
        }
        return st ? std::move(l) : nullptr;
    }

    /// Fills the layout of `gpu` in the last plan of `planner` (made from `cfg` and the `n`
    /// `lengths`). On error the previous layout stays readable and unchanged.
    [[nodiscard]] Status fill(const skrull_config &cfg, const uint32_t *lengths, std::size_t n,
                              const Planner &planner, skrull_gpu gpu) noexcept {
        skrull_layout_buffers out{};
        out.struct_size = sizeof out;
        out.spans = spans_.data();
        out.spans_len = spans_.size();
        out.local_cu_seqlens = local_cu_.data();
        out.local_cu_seqlens_len = local_cu_.size();
        out.sharded_cu_seqlens = sharded_cu_.data();
        out.sharded_cu_seqlens_len = sharded_cu_.size();
        out.sharded_cu_seqlens_padded = sharded_cu_padded_.data();
        out.sharded_cu_seqlens_padded_len = sharded_cu_padded_.size();
        out.rank_cu_seqlens = rank_cu_.data();
        out.rank_cu_seqlens_len = rank_cu_.size();
        out.positions = positions_.data();
        out.positions_len = positions_.size();
        out.layout = &info_;
        out.rings = rings_;
        out.rings_len = SKRULL_MAX_RINGS;
        out.rings_count = &rings_count_;
        return Status(skrull_layout_fill(&cfg, lengths, n, &planner.buffers(), gpu,
                                         workspace_.data(), workspace_.size(), &out));
    }

    // --- The last successful layout -----------------------------------------------------
    /// Counts, max_seqlens and loss weights.
    [[nodiscard]] const skrull_layout &info() const noexcept { return info_; }
    /// Spans in buffer order: the local group, then (front, back) chunk per sharded sequence.
    [[nodiscard]] Range<skrull_span> spans() const noexcept {
        return Range<skrull_span>{spans_.data(), info_.spans};
    }
    /// cu_seqlens of the local group (for flash_attn_varlen_func).
    [[nodiscard]] Range<int32_t> local_cu_seqlens() const noexcept {
        return Range<int32_t>{local_cu_.data(), info_.local_seqs + std::size_t{1}};
    }
    /// Global cu_seqlens of the sharded group, real lengths.
    [[nodiscard]] Range<int32_t> sharded_cu_seqlens() const noexcept {
        return Range<int32_t>{sharded_cu_.data(), info_.sharded_seqs + std::size_t{1}};
    }
    /// Global cu_seqlens of the sharded group, padded lengths (TE's cu_seqlens_padded).
    [[nodiscard]] Range<int32_t> sharded_cu_seqlens_padded() const noexcept {
        return Range<int32_t>{sharded_cu_padded_.data(), info_.sharded_seqs + std::size_t{1}};
    }
    /// This rank's cu_seqlens of the sharded group (offsets from the group's start).
    [[nodiscard]] Range<int32_t> rank_cu_seqlens() const noexcept {
        return Range<int32_t>{rank_cu_.data(), info_.sharded_seqs + std::size_t{1}};
    }
    /// Position id of every token in the buffer.
    [[nodiscard]] Range<int32_t> positions() const noexcept {
        return Range<int32_t>{positions_.data(), info_.tokens};
    }
    /// The rings of the sharded group, one CP attention call each: the whole CP group first,
    /// then the sub-groups this GPU belongs to, largest first.
    [[nodiscard]] Range<skrull_layout_ring> rings() const noexcept {
        return Range<skrull_layout_ring>{rings_, rings_count_};
    }
    /// One ring's slice of a sharded cu_seqlens array (ring.seqs + 1 entries; subtract the
    /// first entry to start the kernel's array at 0).
    [[nodiscard]] static Range<int32_t> ring_slice(Range<int32_t> cu,
                                                   const skrull_layout_ring &ring) noexcept {
        return Range<int32_t>{cu.first + ring.offset, ring.seqs + std::size_t{1}};
    }

private:
    GpuLayout() noexcept = default;

    Status allocate(const skrull_config &cfg, std::size_t max_sequences) noexcept {
        skrull_layout_capacity c{};
        Status st(skrull_layout_sizes_max(&cfg, max_sequences, &c));
        if (!st) {
            return st;
        }
        bool ok = spans_.allocate(c.spans) && local_cu_.allocate(c.local_cu_seqlens) &&
                  sharded_cu_.allocate(c.sharded_cu_seqlens) &&
                  sharded_cu_padded_.allocate(c.sharded_cu_seqlens) &&
                  rank_cu_.allocate(c.sharded_cu_seqlens) && positions_.allocate(c.positions) &&
                  workspace_.allocate(c.workspace_bytes);
        return ok ? Status() : Status::out_of_memory();
    }

    Buffer<skrull_span> spans_;
    Buffer<int32_t> local_cu_;
    Buffer<int32_t> sharded_cu_;
    Buffer<int32_t> sharded_cu_padded_;
    Buffer<int32_t> rank_cu_;
    Buffer<int32_t> positions_;
    Buffer<unsigned char> workspace_;
    skrull_layout_ring rings_[SKRULL_MAX_RINGS] = {};  // SKRULL_MAX_RINGS fits every GPU
    uint32_t rings_count_ = 0;
    skrull_layout info_{};
};

}  // namespace skrull

#endif  // SKRULL_HPP
