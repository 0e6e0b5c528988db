// status_text.cpp - see status_text.hpp. Each sentence is the one python/skrull/_errors.py
// writes for the same status and details; a detail the library did not write prints as
// Python prints a missing one ("None").
#include "status_text.hpp"

#include <array>
#include <string_view>
#include <utility>

namespace skrull_ops {
namespace {

constexpr std::array<std::pair<uint32_t, std::string_view>, 33> kNames{{
    {0, "OK"},
    {1, "NULL_ARG"},
    {2, "BAD_STRUCT_SIZE"},
    {3, "INVALID_ENUM"},
    {4, "INVALID_ARG"},
    {5, "WORKSPACE_TOO_SMALL"},
    {6, "OUTPUT_TOO_SMALL"},
    {10, "INVALID_DP"},
    {11, "INVALID_CP"},
    {12, "INVALID_BUCKET"},
    {13, "INVALID_MODEL"},
    {14, "TOO_MANY_SEQUENCES"},
    {15, "EMPTY_SEQUENCE"},
    {16, "LENGTH_OUT_OF_RANGE"},
    {17, "SEQUENCE_TOO_LONG"},
    {18, "MICRO_BATCH_LIMIT"},
    {19, "DACP_FAILED"},
    {20, "INVALID_PAD_MULTIPLE"},
    {21, "INVALID_COST_MODEL"},
    {22, "UNSUPPORTED_OPTION"},
    {23, "MICRO_BATCH_COUNT"},
    {24, "INVALID_CHUNKING"},
    {25, "CHUNK_OVER_BUDGET"},
    {30, "PLAN_INVALID"},
    {31, "NO_SUCH_GPU"},
    {32, "LAYOUT_OVERFLOW"},
    {40, "INVALID_REFIT_PARAMS"},
    {41, "REFIT_STATE_INVALID"},
    {42, "MEASUREMENT_MISMATCH"},
    {43, "REFIT_STEP_TOO_LARGE"},
    {254, "INTERNAL"},
    {255, "PANIC"},
    {0xFFFFFFFFu, ""},  // end marker, never a status
}};

// skrull_cost_model's fields after struct_size: INVALID_COST_MODEL's `field` is a 1-based
// position in this list.
constexpr std::array<std::string_view, 22> kCostFields{
    "attention_tile", "peak_flops", "gemm_efficiency", "hbm_bandwidth", "weight_bytes",
    "weight_passes", "attention_seqlen", "attention_fwd_flops", "attention_bwd_flops",
    "attention_bwd_ratio", "kv_element_bytes", "comm_passes", "ring_step_latency_s",
    "inter_node_ring_step_latency_s", "intra_node_bandwidth", "inter_node_bandwidth",
    "gpus_per_node", "overlap", "kernels_per_layer", "kernel_launch_s", "micro_batch_extra_s",
    "iteration_fixed_s"};
constexpr std::array<std::string_view, 5> kModelFields{"hidden", "kv_hidden", "ffn", "layers",
                                                       "vocab"};
constexpr std::array<std::string_view, 3> kChunkingFields{"chunk_size", "chunk_keep",
                                                          "chunk_state_permille"};

// Which of value ('v') and limit ('l') a status's details carry (_errors._VALUE_LIMIT).
std::string_view value_limit(uint32_t s) {
    switch (s) {
    case SKRULL_STATUS_INVALID_MODEL:
    case SKRULL_STATUS_EMPTY_SEQUENCE:
        return "v";
    case SKRULL_STATUS_INVALID_DP:
    case SKRULL_STATUS_INVALID_CP:
    case SKRULL_STATUS_INVALID_BUCKET:
    case SKRULL_STATUS_INVALID_PAD_MULTIPLE:
    case SKRULL_STATUS_TOO_MANY_SEQUENCES:
    case SKRULL_STATUS_LENGTH_OUT_OF_RANGE:
    case SKRULL_STATUS_SEQUENCE_TOO_LONG:
    case SKRULL_STATUS_MICRO_BATCH_LIMIT:
    case SKRULL_STATUS_MICRO_BATCH_COUNT:
    case SKRULL_STATUS_NO_SUCH_GPU:
    case SKRULL_STATUS_LAYOUT_OVERFLOW:
    case SKRULL_STATUS_MEASUREMENT_MISMATCH:
    case SKRULL_STATUS_REFIT_STEP_TOO_LARGE:
    case SKRULL_STATUS_INVALID_CHUNKING:
    case SKRULL_STATUS_CHUNK_OVER_BUDGET:
        return "vl";
    default:
        return "";
    }
}

// A detail as Python formats an int or a missing one.
struct Opt {
    bool set = false;
    bool negative = false;
    uint64_t magnitude = 0;

    static Opt of_signed(int64_t v) {
        Opt o;
        o.set = true;
        o.negative = v < 0;
        o.magnitude = o.negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        return o;
    }
    static Opt of_unsigned(uint64_t v) {
        Opt o;
        o.set = true;
        o.magnitude = v;
        return o;
    }
    [[nodiscard]] std::string str() const {
        if (!set) {
            return "None";
        }
        return (negative ? "-" : "") + std::to_string(magnitude);
    }
    [[nodiscard]] bool is_negative() const { return set && negative; }
};

// The details the binding reads from skrull_error_info (from_info).
struct Details {
    Opt index, value, limit;
    std::optional<std::string> field_name;
};

std::optional<std::string> field_name(uint32_t status, uint32_t number) {
    auto pick = [number](const auto &names) -> std::optional<std::string> {
        if (number >= 1 && number <= names.size()) {
            return std::string(names[number - 1]);
        }
        return std::nullopt;
    };
    switch (status) {
    case SKRULL_STATUS_INVALID_MODEL:
        return pick(kModelFields);
    case SKRULL_STATUS_INVALID_COST_MODEL:
        return pick(kCostFields);
    case SKRULL_STATUS_INVALID_CHUNKING:
        return pick(kChunkingFields);
    case SKRULL_STATUS_UNSUPPORTED_OPTION:
        if (number == 1) {
            return std::string("flops");
        }
        return std::nullopt;
    default:
        return std::nullopt;
    }
}

Details read_details(uint32_t status, const skrull_error_info &info,
                     const DescribeContext &ctx) {
    Details d;
    if (info.status == status) {
        if (info.index != -1) {
            d.index = Opt::of_signed(info.index);
        }
        std::string_view which = value_limit(status);
        if (which.find('v') != std::string_view::npos) {
            d.value = Opt::of_unsigned(info.value);
        }
        if (which.find('l') != std::string_view::npos) {
            d.limit = Opt::of_unsigned(info.limit);
        }
        if (info.field != 0) {
            d.field_name = field_name(status, info.field);
        }
        if (status == SKRULL_STATUS_LENGTH_OUT_OF_RANGE && ctx.caller_value) {
            d.value = Opt::of_signed(*ctx.caller_value);
        }
    }
    return d;
}

std::string bucket_name(const DescribeContext &ctx) {
    return "bucket_tokens=" + std::to_string(ctx.bucket_tokens);
}

std::string setting_range(const char *arg, const char *what, const Details &d, int lo) {
    return std::string(arg) + "=" + d.value.str() + " is out of range: " + arg + " (" + what +
           ") must be an integer from " + std::to_string(lo) + " to " + d.limit.str();
}

// The sentence of _errors._describe ("" where it has none: the library's text is used).
std::string sentence(uint32_t status, const Details &d, const DescribeContext &ctx) {
    const std::string i = d.index.str(), v = d.value.str(), lim = d.limit.str();
    switch (status) {
    case SKRULL_STATUS_SEQUENCE_TOO_LONG:
        return "sequence " + i + " has " + v + " tokens, too many for " + bucket_name(ctx) +
               ": its share of each GPU (padding included) needs a BucketSize of " + lim +
               "; raise bucket_tokens to at least " + lim +
               ", plan with a larger cp, or truncate the sequence";
    case SKRULL_STATUS_LENGTH_OUT_OF_RANGE:
        if (d.value.is_negative()) {
            return "sequence " + i + " has a negative length (" + v +
                   "): a length is a token count from 1 to " + lim;
        }
        return "sequence " + i + " has " + v + " tokens, more than the " + lim +
               " tokens (2^31 - 1) one sequence may have";
    case SKRULL_STATUS_EMPTY_SEQUENCE:
        return "sequence " + i +
               " has 0 tokens: every sequence needs at least 1 token; drop empty samples "
               "before planning";
    case SKRULL_STATUS_TOO_MANY_SEQUENCES:
        return "the batch has " + v + " sequences, more than the " + lim +
               " one plan may hold: split it into smaller global batches";
    case SKRULL_STATUS_MICRO_BATCH_LIMIT:
        if (!d.index.set) {
            return "micro_batches=" + v + " is more than max_micro_batches=" + lim +
                   ": raise max_micro_batches (0 = no limit) or lower micro_batches";
        }
        return "DP rank " + i + " needs " + v + " micro-batches, more than max_micro_batches=" +
               lim +
               ": raise max_micro_batches (0 = no limit) or bucket_tokens, or plan fewer "
               "tokens per global batch";
    case SKRULL_STATUS_MICRO_BATCH_COUNT:
        return "DP rank " + i + " needs " + v +
               " micro-batches, more than the fixed count micro_batches=" + lim +
               ": micro_batches=" + v +
               " or more fits this batch (or raise bucket_tokens, or plan fewer tokens per "
               "global batch)";
    case SKRULL_STATUS_INVALID_CHUNKING:
        if (d.field_name == "chunk_size") {
            return "policy='chunkflow' needs chunking on: give chunk_size (the most tokens of "
                   "one chunk, e.g. bucket_tokens)";
        }
        if (d.field_name == "chunk_keep") {
            return "chunk_keep=" + v +
                   " is out of range: chunk_keep (chunks whose activations are kept) must be "
                   "an integer from 1 to " +
                   lim;
        }
        return "chunk_state_permille=" + v + " is out of range: it must be an integer from 0 to " +
               lim + " (thousandths of a token per token of K/V state)";
    case SKRULL_STATUS_CHUNK_OVER_BUDGET:
        return "sequence " + i + " has " + v + " tokens: run chunked it holds " + lim +
               " tokens on a GPU, more than " + bucket_name(ctx) +
               "; lower chunk_size or chunk_keep, or raise bucket_tokens";
    case SKRULL_STATUS_DACP_FAILED:
        return "the placement of CP rank " + i + " could not be completed";
    case SKRULL_STATUS_INVALID_COST_MODEL:
        return "cost model: " + d.field_name.value_or("a field") +
               " is out of range (docs/cost_model.md lists each field's valid values); fix "
               "it, or start again from skrull.CostModel('h100')";
    case SKRULL_STATUS_UNSUPPORTED_OPTION:
        return "flops='" + ctx.flops +
               "' does not apply to policy='balanced', which plans on time from its cost "
               "model: leave flops='paper' (the default) or choose another policy";
    case SKRULL_STATUS_INVALID_MODEL: {
        std::string field =
            d.field_name ? "model." + *d.field_name + "=" + v : std::string("the model shape");
        return field +
               " is out of range: hidden, kv_hidden, ffn and layers must be at least 1 and "
               "within the library's limits, and kv_hidden at most hidden";
    }
    case SKRULL_STATUS_INVALID_DP:
        return setting_range("dp", "the data-parallel size", d, 1);
    case SKRULL_STATUS_INVALID_CP:
        return setting_range("cp", "the context-parallel size", d, 1);
    case SKRULL_STATUS_INVALID_BUCKET:
        return setting_range("bucket_tokens",
                             "BucketSize: the most tokens one GPU holds in one micro-batch", d,
                             1);
    case SKRULL_STATUS_INVALID_PAD_MULTIPLE:
        return setting_range("pad_multiple", "0 or 1 for none", d, 0);
    case SKRULL_STATUS_INVALID_ENUM:
        return "an option has an unknown value (policy, victim, flops, shard_padding, a "
               "preset, model.swiglu, a True/False flag or cost_model.overlap)";
    case SKRULL_STATUS_NULL_ARG:
    case SKRULL_STATUS_BAD_STRUCT_SIZE:
    case SKRULL_STATUS_WORKSPACE_TOO_SMALL:
    case SKRULL_STATUS_OUTPUT_TOO_SMALL:
    case SKRULL_STATUS_INVALID_ARG:
    case SKRULL_STATUS_INTERNAL:
    case SKRULL_STATUS_PANIC:
        return std::string("internal error in skrull or its binding (") +
               skrull_status_str(status) +
               "); please report it with the lengths and settings that caused it";
    default:
        return "";
    }
}

}  // namespace

std::string status_name(uint32_t status) {
    for (const auto &[code, name] : kNames) {
        if (code == status && !name.empty()) {
            return std::string(name);
        }
    }
    return "UNKNOWN_" + std::to_string(status);
}

ErrorKind kind_of(uint32_t status) {
    switch (status) {
    case SKRULL_STATUS_INVALID_ARG:
        return ErrorKind::type;
    case SKRULL_STATUS_INVALID_ENUM:
    case SKRULL_STATUS_INVALID_DP:
    case SKRULL_STATUS_INVALID_CP:
    case SKRULL_STATUS_INVALID_BUCKET:
    case SKRULL_STATUS_INVALID_MODEL:
    case SKRULL_STATUS_INVALID_PAD_MULTIPLE:
    case SKRULL_STATUS_INVALID_COST_MODEL:
    case SKRULL_STATUS_UNSUPPORTED_OPTION:
    case SKRULL_STATUS_INVALID_REFIT_PARAMS:
    case SKRULL_STATUS_INVALID_CHUNKING:
    case SKRULL_STATUS_MEASUREMENT_MISMATCH:
    case SKRULL_STATUS_REFIT_STEP_TOO_LARGE:
    case SKRULL_STATUS_MICRO_BATCH_COUNT:
    case SKRULL_STATUS_CHUNK_OVER_BUDGET:
        return ErrorKind::value;
    default:
        break;
    }
    if ((status >= 14 && status <= 19) || (status >= 30 && status <= 39)) {
        return ErrorKind::value;
    }
    return ErrorKind::runtime;
}

Failure make_failure(uint32_t status, const std::string &detail, ErrorKind kind) {
    std::string text = detail.empty() ? std::string(skrull_status_str(status)) : detail;
    std::string name = status_name(status);
    std::string message = text + " [" + name + "]";
    return Failure{kind, std::move(text), std::move(name), std::move(message)};
}

Failure describe(uint32_t status, const skrull_error_info &info, const DescribeContext &ctx) {
    Details d = read_details(status, info, ctx);
    return make_failure(status, sentence(status, d, ctx), kind_of(status));
}

}  // namespace skrull_ops
