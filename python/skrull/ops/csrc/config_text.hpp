// config_text.hpp - the op's configuration: a line of `key=value` items.
//
//   "dp=2 cp=4 bucket_tokens=4096 policy=balanced model=qwen2.5-7b cost_model=h200"
//
// Items are separated by spaces, tabs, newlines or commas; each key at most once. The keys are
// the arguments of skrull.Scheduler, with the model shape and the cost model spelled out
// field by field (docs/cpp.md lists them):
//
//   dp, cp, bucket_tokens            integers (default: the model preset's paper layout)
//   policy, victim, flops,           names (any case) or their numbers; policy defaults to
//   shard_padding                    the recommended preset's (balanced)
//   max_micro_batches, pad_multiple, micro_batches, chunk_size, chunk_keep,
//   chunk_state_permille             integers
//   pad_local, lockstep, subgroups,  flags: 1/0 or true/false (subgroups defaults to the
//   fill_empty                       recommended preset's, on)
//   model                            qwen2.5-0.5b (default) or qwen2.5-7b
//   model.hidden, model.kv_hidden, model.ffn, model.layers, model.vocab, model.swiglu
//                                    override the preset's shape
//   cost_model                       h100 or h200: that GPU preset for the model shape;
//                                    absent (and no cost_model.* key): the library's default
//   cost_model.<field>               any skrull_cost_model field by its C name; the three
//                                    attention tables as 6 values joined by ':'; overlap by
//                                    name (local-attention, all-attention) or number
//
// skrull.ops.config_text() writes this form from a Scheduler's configuration (every field, so
// that the op plans exactly what the Scheduler plans). Plain C++20, no torch header.
#ifndef SKRULL_OPS_CONFIG_TEXT_HPP
#define SKRULL_OPS_CONFIG_TEXT_HPP

#include <optional>
#include <string>
#include <string_view>

#include "skrull.h"
#include "status_text.hpp"

namespace skrull_ops {

/// A parsed configuration and the cost model it points at. Not copyable (the config points
/// into the object itself): parse into the object that is used.
class ConfigText {
public:
    ConfigText() = default;
    ConfigText(const ConfigText &) = delete;
    ConfigText &operator=(const ConfigText &) = delete;

    /// Parses `text`; on failure returns the error (a ValueError for the op) and leaves the
    /// object unusable.
    [[nodiscard]] std::optional<Failure> parse(std::string_view text);

    /// The configuration to pass to the library (its cost model pointer set).
    [[nodiscard]] const skrull_config &config() const noexcept { return config_; }
    /// The FLOPs formula's name, for messages.
    [[nodiscard]] const std::string &flops_name() const noexcept { return flops_; }

private:
    skrull_config config_{};
    skrull_cost_model cost_{};
    std::string flops_ = "paper";
};

}  // namespace skrull_ops

#endif
