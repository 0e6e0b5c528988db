// planning.cpp - see planning.hpp.
#include "planning.hpp"

namespace trainer {

SkrullError skrull_error(const char *call, skrull_status status, const skrull_error_info *info,
                         const skrull_config *config, std::optional<int64_t> caller_value) {
    const bool written = info != nullptr && info->status == status;
    skrull_error_info shown = written ? *info : skrull_error_info{};
    if (written && caller_value) {
        shown.value = static_cast<uint64_t>(*caller_value);  // the int64 bit pattern
    }
    const skrull_error_info *details = written ? &shown : nullptr;
    std::string detail(skrull_error_describe(status, details, config, nullptr, 0), '\0');
    skrull_error_describe(status, details, config, detail.data(), detail.size() + 1);
    const char *name = skrull_status_name(status);
    return SkrullError{call, status, name ? name : "UNKNOWN_" + std::to_string(status), detail,
                       written ? info->index : -1};
}

std::unique_ptr<Planner> Planner::create(const skrull_config &cfg, std::size_t max_sequences,
                                         SkrullError *why) {
    std::unique_ptr<Planner> p(new Planner());
    p->cfg_ = cfg;
    if (cfg.cost_model != nullptr) {
        p->cost_ = *cfg.cost_model;
        p->cfg_.cost_model = &p->cost_;
    }
    p->max_sequences_ = max_sequences;
    skrull_error_info err{};
    if (!p->setup_mem_.allocate(skrull_setup_size())) {
        *why = SkrullError{"malloc", SKRULL_STATUS_INTERNAL, "OUT_OF_MEMORY", "out of memory", -1};
        return nullptr;
    }
    skrull_status st = skrull_setup_init(&p->cfg_, p->setup_mem_.data(), p->setup_mem_.size(),
                                         &p->setup_, &err);
    if (st != SKRULL_STATUS_OK) {
        *why = skrull_error("skrull_setup_init", st, &err, &p->cfg_);
        return nullptr;
    }
    skrull_sizes s{};
    st = skrull_plan_sizes(max_sequences, cfg.dp, cfg.cp, &s);
    if (st != SKRULL_STATUS_OK) {
        *why = skrull_error("skrull_plan_sizes", st, nullptr, &p->cfg_);
        return nullptr;
    }
    bool ok = p->workspace_.allocate(s.workspace_bytes) &&
              p->placements_.allocate(s.placements) && p->table_.allocate(s.micro_batches) &&
              p->members_.allocate(s.members) && p->rank_tokens_.allocate(s.rank_tokens) &&
              p->per_dp_.allocate(s.micro_batches_per_dp) && p->groups_.allocate(s.placements);
    if (!ok) {
        *why = SkrullError{"malloc", SKRULL_STATUS_INTERNAL, "OUT_OF_MEMORY", "out of memory", -1};
        return nullptr;
    }
    skrull_plan_buffers &out = p->out_;
    out.struct_size = sizeof out;
    out.placements = p->placements_.data();
    out.placements_len = p->placements_.size();
    out.micro_batches = p->table_.data();
    out.micro_batches_len = p->table_.size();
    out.members = p->members_.data();
    out.members_len = p->members_.size();
    out.rank_tokens = p->rank_tokens_.data();
    out.rank_tokens_len = p->rank_tokens_.size();
    out.micro_batches_per_dp = p->per_dp_.data();
    out.micro_batches_per_dp_len = p->per_dp_.size();
    out.summary = &p->summary_;
    out.error = &p->error_;
    out.cp_groups = p->groups_.data();  // read back by the layout functions
    out.cp_groups_len = p->groups_.size();
    return p;
}

std::optional<SkrullError> Planner::plan(const std::vector<uint32_t> &lengths,
                                         const std::vector<int64_t> *written) {
    error_ = skrull_error_info{};
    skrull_status st = skrull_schedule_prepared(setup_, lengths.data(), lengths.size(),
                                                workspace_.data(), workspace_.size(), &out_);
    if (st != SKRULL_STATUS_OK) {
        std::optional<int64_t> caller;
        if (st == SKRULL_STATUS_LENGTH_OUT_OF_RANGE && written != nullptr &&
            error_.status == st && error_.index >= 0 &&
            static_cast<std::size_t>(error_.index) < written->size()) {
            caller = (*written)[static_cast<std::size_t>(error_.index)];
        }
        return skrull_error("skrull_schedule_prepared", st, &error_, &cfg_, caller);
    }
    return std::nullopt;
}

std::vector<uint32_t> Planner::dp_sequences(uint32_t dp_rank) const {
    std::vector<uint32_t> order;
    for (uint32_t g = 0; g < summary_.micro_batches; g++) {
        const skrull_micro_batch &mb = table_[g];
        if (mb.dp_rank == dp_rank) {
            order.insert(order.end(), members_.data() + mb.first,
                         members_.data() + mb.first + mb.count);
        }
    }
    return order;
}

Layouts::Layouts(const skrull_config &cfg, std::size_t max_sequences) : cfg_(cfg) {
    skrull_status st = skrull_layout_sizes_max(&cfg_, max_sequences, &cap_);
    if (st != SKRULL_STATUS_OK) {
        error_ = skrull_error("skrull_layout_sizes_max", st, nullptr, &cfg_);
        return;
    }
    workspace_.resize(cap_.workspace_bytes + 1);
}

void Layouts::grow(std::size_t count) {
    while (slots_.size() < count) {
        slots_.emplace_back();
    }
    for (Slot &s : slots_) {
        if (!s.spans.empty()) {
            continue;  // sized before; vectors never move their storage after this
        }
        // One element at least: the library takes NULL only with a capacity of 0.
        auto at_least_one = [](std::size_t n) { return n == 0 ? std::size_t{1} : n; };
        s.spans.resize(at_least_one(cap_.spans));
        s.local_cu.resize(at_least_one(cap_.local_cu_seqlens));
        s.sharded_cu.resize(at_least_one(cap_.sharded_cu_seqlens));
        s.sharded_cu_padded.resize(at_least_one(cap_.sharded_cu_seqlens));
        s.rank_cu.resize(at_least_one(cap_.sharded_cu_seqlens));
        s.positions.resize(at_least_one(cap_.positions));
        s.gather.resize(at_least_one(cap_.positions));
        s.rings.resize(SKRULL_MAX_RINGS);
    }
    for (Slot &s : slots_) {
        skrull_layout_buffers &b = s.buffers;
        b = skrull_layout_buffers{};
        b.struct_size = sizeof b;
        b.spans = s.spans.data();
        b.spans_len = s.spans.size();
        b.local_cu_seqlens = s.local_cu.data();
        b.local_cu_seqlens_len = s.local_cu.size();
        b.sharded_cu_seqlens = s.sharded_cu.data();
        b.sharded_cu_seqlens_len = s.sharded_cu.size();
        b.sharded_cu_seqlens_padded = s.sharded_cu_padded.data();
        b.sharded_cu_seqlens_padded_len = s.sharded_cu_padded.size();
        b.rank_cu_seqlens = s.rank_cu.data();
        b.rank_cu_seqlens_len = s.rank_cu.size();
        b.positions = s.positions.data();
        b.positions_len = s.positions.size();
        b.layout = &s.info;
        b.gather_index = s.gather.data();
        b.gather_index_len = s.gather.size();
        b.rings = s.rings.data();
        b.rings_len = s.rings.size();
        b.rings_count = &s.rings_count;
    }
}

std::optional<SkrullError> Layouts::fill(const Planner &planner,
                                         const std::vector<uint32_t> &lengths, uint32_t dp_rank,
                                         uint32_t cp_rank, uint32_t micro_batches,
                                         std::vector<GpuLayout> &out) {
    grow(micro_batches);
    std::vector<skrull_gpu> gpus(micro_batches);
    std::vector<const skrull_layout_buffers *> outs(micro_batches);
    for (uint32_t j = 0; j < micro_batches; j++) {
        gpus[j] = skrull_gpu{dp_rank, j, cp_rank};
        outs[j] = &slots_[j].buffers;
    }
    skrull_status st = skrull_layout_fill_many(&cfg_, lengths.data(), lengths.size(),
                                               &planner.buffers(), gpus.data(), gpus.size(),
                                               workspace_.data(), workspace_.size(),
                                               outs.data());
    if (st != SKRULL_STATUS_OK) {
        return skrull_error("skrull_layout_fill_many", st, nullptr, &cfg_);
    }
    out.assign(micro_batches, GpuLayout{});
    for (uint32_t j = 0; j < micro_batches; j++) {
        const Slot &s = slots_[j];
        GpuLayout &l = out[j];
        l.info = s.info;
        l.spans.assign(s.spans.begin(), s.spans.begin() + s.info.spans);
        l.local_cu_seqlens.assign(s.local_cu.begin(), s.local_cu.begin() + s.info.local_seqs + 1);
        l.rank_cu_seqlens.assign(s.rank_cu.begin(), s.rank_cu.begin() + s.info.sharded_seqs + 1);
        l.sharded_cu_seqlens.assign(s.sharded_cu.begin(),
                                    s.sharded_cu.begin() + s.info.sharded_seqs + 1);
        l.positions.assign(s.positions.begin(), s.positions.begin() + s.info.tokens);
        l.gather_index.assign(s.gather.begin(), s.gather.begin() + s.info.tokens);
        l.rings.assign(s.rings.begin(), s.rings.begin() + s.rings_count);
    }
    return std::nullopt;
}

}  // namespace trainer
