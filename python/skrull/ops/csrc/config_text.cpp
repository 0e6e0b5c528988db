// config_text.cpp - see config_text.hpp. Settings are checked in the order, and with the
// sentences, of skrull.Scheduler (python/skrull/_config.py, `build`), so that a configuration
// refused by one is refused by the other with the same message; the library then validates
// the whole struct (skrull_setup_init in the op).
#include "config_text.hpp"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

namespace skrull_ops {
namespace {

constexpr uint64_t kU32Max = 0xFFFFFFFFu;

using Table = std::vector<std::pair<std::string_view, uint32_t>>;
const Table kPolicies{{"skrull", 0}, {"deepspeed", 1}, {"packed", 2},
                      {"roundrobin", 3}, {"balanced", 4}, {"chunkflow", 5}};
const Table kVictims{{"shortest", 0}, {"longest", 1}};
const Table kFlops{{"paper", 0}, {"megatron", 1}};
const Table kShardPaddings{{"none", 0}, {"zigzag", 1}};
const Table kPresets{{"qwen2.5-0.5b", SKRULL_PRESET_QWEN2_5_0_5B},
                     {"qwen2.5-7b", SKRULL_PRESET_QWEN2_5_7B}};
const Table kGpus{{"h100", SKRULL_GPU_H100}, {"h200", SKRULL_GPU_H200}};
const Table kOverlaps{{"local-attention", 0}, {"all-attention", 1}};

// Integer settings (_config.LIMITS): smallest, largest, status, what it is.
struct Limit {
    std::string_view name;
    int64_t lo;
    int64_t hi;
    uint32_t status;
    std::string_view what;
};
constexpr std::array<Limit, 9> kLimits{{
    {"dp", 1, 65536, SKRULL_STATUS_INVALID_DP, "the data-parallel size"},
    {"cp", 1, 256, SKRULL_STATUS_INVALID_CP, "the context-parallel size: GPUs per DP rank"},
    {"bucket_tokens", 1, 2147483647, SKRULL_STATUS_INVALID_BUCKET,
     "BucketSize: the most tokens one GPU holds in one micro-batch"},
    {"pad_multiple", 0, SKRULL_MAX_PAD_MULTIPLE, SKRULL_STATUS_INVALID_PAD_MULTIPLE,
     "0 or 1 for no padding"},
    {"max_micro_batches", 0, static_cast<int64_t>(kU32Max), SKRULL_STATUS_INVALID_ARG,
     "0 for no limit"},
    {"micro_batches", 0, static_cast<int64_t>(kU32Max), SKRULL_STATUS_INVALID_ARG,
     "0 for as many as the batch needs"},
    {"chunk_size", 0, static_cast<int64_t>(kU32Max), SKRULL_STATUS_INVALID_CHUNKING,
     "0 for no chunking, else the most tokens of one chunk"},
    {"chunk_keep", 1, 64, SKRULL_STATUS_INVALID_CHUNKING,
     "chunks whose activations are kept (the others are recomputed)"},
    {"chunk_state_permille", 0, 1000, SKRULL_STATUS_INVALID_CHUNKING,
     "thousandths of a token of K/V state per token"},
}};

constexpr std::array<std::string_view, 14> kPlainKeys{
    "dp",         "cp",           "bucket_tokens", "policy",     "victim",
    "flops",      "shard_padding", "max_micro_batches", "pad_multiple", "pad_local",
    "lockstep",   "subgroups",    "fill_empty",    "micro_batches"};
constexpr std::array<std::string_view, 6> kMoreKeys{
    "chunk_size", "chunk_keep", "chunk_state_permille", "model", "cost_model", "model.swiglu"};
constexpr std::array<std::string_view, 5> kModelKeys{"hidden", "kv_hidden", "ffn", "layers",
                                                     "vocab"};
// skrull_cost_model's double fields by name (the uint32 ones, the tables and overlap apart).
using CostDouble = double skrull_cost_model::*;
const std::vector<std::pair<std::string_view, CostDouble>> kCostDoubles{
    {"peak_flops", &skrull_cost_model::peak_flops},
    {"gemm_efficiency", &skrull_cost_model::gemm_efficiency},
    {"hbm_bandwidth", &skrull_cost_model::hbm_bandwidth},
    {"weight_bytes", &skrull_cost_model::weight_bytes},
    {"weight_passes", &skrull_cost_model::weight_passes},
    {"attention_bwd_ratio", &skrull_cost_model::attention_bwd_ratio},
    {"kv_element_bytes", &skrull_cost_model::kv_element_bytes},
    {"comm_passes", &skrull_cost_model::comm_passes},
    {"ring_step_latency_s", &skrull_cost_model::ring_step_latency_s},
    {"inter_node_ring_step_latency_s", &skrull_cost_model::inter_node_ring_step_latency_s},
    {"intra_node_bandwidth", &skrull_cost_model::intra_node_bandwidth},
    {"inter_node_bandwidth", &skrull_cost_model::inter_node_bandwidth},
    {"kernels_per_layer", &skrull_cost_model::kernels_per_layer},
    {"kernel_launch_s", &skrull_cost_model::kernel_launch_s},
    {"micro_batch_extra_s", &skrull_cost_model::micro_batch_extra_s},
    {"iteration_fixed_s", &skrull_cost_model::iteration_fixed_s},
};
using CostWhole = uint32_t skrull_cost_model::*;
const std::vector<std::pair<std::string_view, CostWhole>> kCostWholes{
    {"attention_tile", &skrull_cost_model::attention_tile},
    {"gpus_per_node", &skrull_cost_model::gpus_per_node},
};
constexpr std::string_view kCostPrefix = "cost_model.";
constexpr std::string_view kModelPrefix = "model.";

std::string lower(std::string_view s) {
    std::string out(s);
    for (char &c : out) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c - 'A' + 'a');
        }
    }
    return out;
}

// Python's repr of a str (single quotes unless it holds one and no double quote).
std::string py_repr(std::string_view s) {
    bool single = s.find('\'') != std::string_view::npos;
    bool dbl = s.find('"') != std::string_view::npos;
    char q = single && !dbl ? '"' : '\'';
    std::string out(1, q);
    for (char c : s) {
        if (c == q || c == '\\') {
            out += '\\';
        }
        out += c;
    }
    return out + q;
}

std::string names_of(const Table &t) {
    std::string out;
    for (const auto &[name, code] : t) {
        out += (out.empty() ? "" : ", ") + py_repr(name);
    }
    return out;
}

Failure value_error(uint32_t status, const std::string &detail) {
    return make_failure(status, detail, ErrorKind::value);
}

Failure type_error(const std::string &name, std::string_view text, const std::string &wanted) {
    return make_failure(SKRULL_STATUS_INVALID_ARG,
                        name + " must be " + wanted + ", got " + py_repr(text) + " (str)",
                        ErrorKind::type);
}

// A decimal integer (optional sign); nullopt for anything else. Values beyond int64 saturate
// (they are out of every range, and the message then shows the saturated value).
std::optional<int64_t> parse_int(std::string_view s) {
    std::size_t i = 0;
    bool neg = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    if (i == s.size()) {
        return std::nullopt;
    }
    uint64_t v = 0;
    bool big = false;
    for (; i < s.size(); i++) {
        if (s[i] < '0' || s[i] > '9') {
            return std::nullopt;
        }
        uint64_t d = static_cast<uint64_t>(s[i] - '0');
        if (v > (static_cast<uint64_t>(INT64_MAX) - d) / 10) {
            big = true;
        } else {
            v = v * 10 + d;
        }
    }
    if (big) {
        return neg ? INT64_MIN : INT64_MAX;
    }
    return neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

const Limit &limit_of(std::string_view name) {
    for (const Limit &l : kLimits) {
        if (l.name == name) {
            return l;
        }
    }
    return kLimits[0];  // unreachable: every caller names a listed setting
}

// Reads the items of a config text and applies them in Scheduler's order.
class Reader {
public:
    std::optional<Failure> split(std::string_view text) {
        std::size_t i = 0;
        while (i < text.size()) {
            while (i < text.size() && is_sep(text[i])) {
                i++;
            }
            std::size_t j = i;
            while (j < text.size() && !is_sep(text[j])) {
                j++;
            }
            if (j > i) {
                std::string_view item = text.substr(i, j - i);
                std::size_t eq = item.find('=');
                if (eq == std::string_view::npos || eq == 0) {
                    return value_error(SKRULL_STATUS_INVALID_ARG,
                                       "config: " + py_repr(item) +
                                           " is not a key=value item (docs/cpp.md lists the "
                                           "keys)");
                }
                std::string key(item.substr(0, eq));
                if (!known(key)) {
                    return value_error(SKRULL_STATUS_INVALID_ARG,
                                       "config: unknown key " + py_repr(key) + "; keys: " +
                                           key_list() + " (docs/cpp.md)");
                }
                if (!items_.emplace(key, std::string(item.substr(eq + 1))).second) {
                    return value_error(SKRULL_STATUS_INVALID_ARG,
                                       "config: " + py_repr(key) + " is given twice");
                }
            }
            i = j;
        }
        return std::nullopt;
    }

    [[nodiscard]] const std::string *get(const std::string &key) const {
        auto it = items_.find(key);
        return it == items_.end() ? nullptr : &it->second;
    }
    [[nodiscard]] bool has_prefix(std::string_view prefix) const {
        auto it = items_.lower_bound(std::string(prefix));
        return it != items_.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix;
    }

    // An integer setting of kLimits, if given.
    std::optional<Failure> setting(std::string_view name, uint32_t &field) const {
        const std::string *text = get(std::string(name));
        if (text == nullptr) {
            return std::nullopt;
        }
        const Limit &l = limit_of(name);
        std::optional<int64_t> v = parse_int(*text);
        if (!v) {
            return type_error(std::string(name), *text, "an integer");
        }
        if (*v < l.lo || *v > l.hi) {
            std::string n(name);
            return value_error(l.status, n + "=" + std::to_string(*v) + " is out of range: " + n +
                                             " (" + std::string(l.what) +
                                             ") must be an integer from " +
                                             std::to_string(l.lo) + " to " +
                                             std::to_string(l.hi));
        }
        field = static_cast<uint32_t>(*v);
        return std::nullopt;
    }

    // An option by name (any case) or number (_config._option), if given.
    std::optional<Failure> option(const std::string &name, const Table &table, uint32_t &field,
                                  std::string *chosen = nullptr) const {
        const std::string *text = get(name);
        if (text == nullptr) {
            return std::nullopt;
        }
        std::optional<int64_t> code = parse_int(*text);
        for (const auto &[n, c] : table) {
            if (code ? *code == static_cast<int64_t>(c) : lower(*text) == n) {
                field = c;
                if (chosen != nullptr) {
                    *chosen = std::string(n);
                }
                return std::nullopt;
            }
        }
        if (code) {
            uint32_t top = 0;
            for (const auto &entry : table) {
                top = std::max(top, entry.second);
            }
            return value_error(SKRULL_STATUS_INVALID_ENUM,
                               name + "=" + std::to_string(*code) + " is not a " + name +
                                   " number: use one of " + names_of(table) +
                                   " (or its number, 0 to " + std::to_string(top) + ")");
        }
        return value_error(SKRULL_STATUS_INVALID_ENUM, name + "=" + py_repr(*text) +
                                                           " is not a known " + name +
                                                           ": use one of " + names_of(table));
    }

    // A True/False option (1/0, true/false), if given (_config._flag).
    std::optional<Failure> flag(const std::string &name, uint32_t &field) const {
        const std::string *text = get(name);
        if (text == nullptr) {
            return std::nullopt;
        }
        std::string t = lower(*text);
        if (t == "true" || t == "false") {
            field = t == "true" ? 1 : 0;
            return std::nullopt;
        }
        std::optional<int64_t> v = parse_int(*text);
        if (!v) {
            return type_error(name, *text, "True or False");
        }
        if (*v != 0 && *v != 1) {
            return value_error(SKRULL_STATUS_INVALID_ENUM,
                               name + "=" + std::to_string(*v) + " is not a flag: " + name +
                                   " must be True or False (or 1/0)");
        }
        field = static_cast<uint32_t>(*v);
        return std::nullopt;
    }

    // A model-shape field that must fit uint32_t (_config._u32), if given.
    std::optional<Failure> model_field(std::string_view name, uint32_t &field) const {
        std::string key = std::string(kModelPrefix) + std::string(name);
        const std::string *text = get(key);
        if (text == nullptr) {
            return std::nullopt;
        }
        std::optional<int64_t> v = parse_int(*text);
        if (!v) {
            return type_error(key, *text, "an integer");
        }
        if (*v < 0 || *v > static_cast<int64_t>(kU32Max)) {
            return value_error(SKRULL_STATUS_INVALID_MODEL,
                               key + "=" + std::to_string(*v) + " is out of range: " + key +
                                   " must be an integer from 1 to " + std::to_string(kU32Max));
        }
        field = static_cast<uint32_t>(*v);
        return std::nullopt;
    }

private:
    static bool is_sep(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ','; }

    static bool known(const std::string &key) {
        for (std::string_view k : kPlainKeys) {
            if (key == k) {
                return true;
            }
        }
        for (std::string_view k : kMoreKeys) {
            if (key == k) {
                return true;
            }
        }
        std::string_view kv(key);
        if (kv.substr(0, kModelPrefix.size()) == kModelPrefix) {
            for (std::string_view k : kModelKeys) {
                if (kv.substr(kModelPrefix.size()) == k) {
                    return true;
                }
            }
        }
        if (kv.substr(0, kCostPrefix.size()) == kCostPrefix) {
            std::string_view f = kv.substr(kCostPrefix.size());
            if (f == "attention_seqlen" || f == "attention_fwd_flops" ||
                f == "attention_bwd_flops" || f == "overlap") {
                return true;
            }
            for (const auto &entry : kCostDoubles) {
                if (entry.first == f) {
                    return true;
                }
            }
            for (const auto &entry : kCostWholes) {
                if (entry.first == f) {
                    return true;
                }
            }
        }
        return false;
    }

    static std::string key_list() {
        std::string out;
        for (std::string_view k : kPlainKeys) {
            out += std::string(k) + ", ";
        }
        out += "chunk_size, chunk_keep, chunk_state_permille, model, model.<field> (hidden, "
               "kv_hidden, ffn, layers, vocab, swiglu), cost_model, cost_model.<field> (the "
               "skrull_cost_model fields)";
        return out;
    }

    std::map<std::string, std::string> items_;
};

// The CLI's chunk size for chunkflow given none (_config.default_chunk_size): the largest
// power of two below the longest sequence the layout accepts whose chunked peak on one GPU
// fits bucket_tokens; 0 when none does.
uint32_t default_chunk_size(const skrull_config &c) {
    int64_t cp = std::max<int64_t>(c.cp, 1), bucket = c.bucket_tokens;
    int64_t m = std::max<int64_t>(c.pad_multiple, 1);
    int64_t unit = m;
    if (cp > 1 && (c.shard_padding == 1 || m > 1)) {
        unit = 2 * cp / std::gcd(2 * cp, m) * m;
    }
    int64_t longest = std::min<int64_t>(cp * bucket / unit * unit, 2147483647);
    int64_t local_unit = c.pad_local ? m : 1;
    auto local = [local_unit](int64_t t) { return (t + local_unit - 1) / local_unit * local_unit; };
    auto peak = [&](int64_t size) {
        int64_t n = (longest + size - 1) / size;
        int64_t k = std::min<int64_t>(std::max<int64_t>(c.chunk_keep, 1), n);
        int64_t kept = 0;
        for (int64_t i = n - k; i < n; i++) {
            kept += local(std::min(size, longest - i * size));
        }
        int64_t live = n > k ? std::max(kept, local(size)) : kept;
        return live + (longest * static_cast<int64_t>(c.chunk_state_permille) + 999) / 1000;
    };
    for (int k = 30; k >= 0; k--) {
        int64_t size = int64_t{1} << k;
        if (size < longest && peak(size) <= bucket) {
            return static_cast<uint32_t>(size);
        }
    }
    return 0;
}

std::optional<Failure> parse_double(const std::string &key, const std::string &text, double &out) {
    errno = 0;
    char *end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) {
        return type_error(key, text, "a number");
    }
    out = v;
    return std::nullopt;
}

std::optional<Failure> parse_whole(const std::string &key, const std::string &text, uint32_t &out) {
    std::optional<int64_t> v = parse_int(text);
    if (!v) {
        return type_error(key, text, "an integer");
    }
    if (*v < 0 || *v > static_cast<int64_t>(kU32Max)) {
        return value_error(SKRULL_STATUS_INVALID_COST_MODEL,
                           "cost model: " + py_repr(key.substr(kCostPrefix.size())) + " = " +
                               std::to_string(*v) +
                               " is out of range: it must be a whole number from 0 to " +
                               std::to_string(kU32Max));
    }
    out = static_cast<uint32_t>(*v);
    return std::nullopt;
}

// One of the attention tables: SKRULL_ATTENTION_POINTS values joined by ':'.
template <class T>
std::optional<Failure> parse_table(const std::string &key, const std::string &text, T (&out)[SKRULL_ATTENTION_POINTS]) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); i++) {
        if (i == text.size() || text[i] == ':') {
            parts.push_back(text.substr(start, i - start));
            start = i + 1;
        }
    }
    if (parts.size() != SKRULL_ATTENTION_POINTS) {
        return value_error(SKRULL_STATUS_INVALID_ARG,
                           "config: " + key + " must hold " +
                               std::to_string(SKRULL_ATTENTION_POINTS) +
                               " values joined by ':', got " + py_repr(text));
    }
    for (std::size_t k = 0; k < parts.size(); k++) {
        if constexpr (std::is_same_v<T, double>) {
            if (auto f = parse_double(key, parts[k], out[k])) {
                return f;
            }
        } else {
            if (auto f = parse_whole(key, parts[k], out[k])) {
                return f;
            }
        }
    }
    return std::nullopt;
}

// The cost model: the GPU preset for the model shape, then each field given.
std::optional<Failure> read_cost_model(const Reader &r, const skrull_model_shape &shape,
                                       skrull_cost_model &cost) {
    uint32_t gpu = SKRULL_GPU_H100;
    if (const std::string *text = r.get("cost_model")) {
        bool found = false;
        for (const auto &[name, code] : kGpus) {
            if (lower(*text) == name) {
                gpu = code;
                found = true;
            }
        }
        if (!found) {
            return value_error(SKRULL_STATUS_INVALID_ENUM,
                               "cost_model=" + py_repr(*text) +
                                   " is not a GPU preset: use None, a GPU preset (" +
                                   names_of(kGpus) +
                                   ") or a skrull.CostModel (skrull.CostModel.from_json(path) "
                                   "for a calibrated one)");
        }
    }
    uint32_t st = skrull_cost_model_preset(gpu, &shape, &cost, sizeof cost);
    if (st != SKRULL_STATUS_OK) {
        return make_failure(st, "cost model preset", kind_of(st));
    }
    for (const auto &[name, member] : kCostDoubles) {
        std::string key = std::string(kCostPrefix) + std::string(name);
        if (const std::string *text = r.get(key)) {
            if (auto f = parse_double(key, *text, cost.*member)) {
                return f;
            }
        }
    }
    for (const auto &[name, member] : kCostWholes) {
        std::string key = std::string(kCostPrefix) + std::string(name);
        if (const std::string *text = r.get(key)) {
            if (auto f = parse_whole(key, *text, cost.*member)) {
                return f;
            }
        }
    }
    if (const std::string *t = r.get("cost_model.attention_seqlen")) {
        if (auto f = parse_table("cost_model.attention_seqlen", *t, cost.attention_seqlen)) {
            return f;
        }
    }
    if (const std::string *t = r.get("cost_model.attention_fwd_flops")) {
        if (auto f = parse_table("cost_model.attention_fwd_flops", *t, cost.attention_fwd_flops)) {
            return f;
        }
    }
    if (const std::string *t = r.get("cost_model.attention_bwd_flops")) {
        if (auto f = parse_table("cost_model.attention_bwd_flops", *t, cost.attention_bwd_flops)) {
            return f;
        }
    }
    if (const std::string *text = r.get("cost_model.overlap")) {
        std::optional<int64_t> code = parse_int(*text);
        bool found = false;
        for (const auto &[name, c] : kOverlaps) {
            if (!code && *text == name) {
                cost.overlap = c;
                found = true;
            }
        }
        if (!found && !code) {
            return value_error(SKRULL_STATUS_INVALID_COST_MODEL,
                               "cost model: 'overlap' must be one of local-attention, "
                               "all-attention, got " + py_repr(*text));
        }
        if (code) {
            if (*code < 0 || *code > 1) {
                return value_error(SKRULL_STATUS_INVALID_ENUM,
                                   "cost_model.overlap=" + std::to_string(*code) +
                                       " is not an overlap mode: use one of " +
                                       names_of(kOverlaps));
            }
            cost.overlap = static_cast<uint32_t>(*code);
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<Failure> ConfigText::parse(std::string_view text) {
    Reader r;
    if (auto f = r.split(text)) {
        return f;
    }
    uint32_t preset = SKRULL_PRESET_QWEN2_5_0_5B;
    if (auto f = r.option("model", kPresets, preset)) {
        return value_error(SKRULL_STATUS_INVALID_ENUM,
                           "model=" + py_repr(*r.get("model")) +
                               " is not a preset: use one of " + names_of(kPresets) +
                               " (and model.hidden, model.kv_hidden, ... for another shape)");
    }
    uint32_t st = skrull_config_recommended_init(preset, &config_, sizeof config_);
    if (st != SKRULL_STATUS_OK) {
        return make_failure(st, "recommended preset", kind_of(st));
    }
    skrull_config &c = config_;
    for (const char *name : {"dp", "cp", "bucket_tokens"}) {
        uint32_t &field = name[0] == 'd' ? c.dp : name[0] == 'c' ? c.cp : c.bucket_tokens;
        if (auto f = r.setting(name, field)) {
            return f;
        }
    }
    std::string policy;
    for (const auto &[n, code] : kPolicies) {
        if (code == c.policy) {
            policy = std::string(n);
        }
    }
    if (auto f = r.option("policy", kPolicies, c.policy, &policy)) {
        return f;
    }
    if (auto f = r.option("victim", kVictims, c.victim)) {
        return f;
    }
    if (auto f = r.option("flops", kFlops, c.flops, &flops_)) {
        return f;
    }
    if (auto f = r.option("shard_padding", kShardPaddings, c.shard_padding)) {
        return f;
    }
    if (auto f = r.setting("max_micro_batches", c.max_micro_batches)) {
        return f;
    }
    uint32_t *shape[] = {&c.model.hidden, &c.model.kv_hidden, &c.model.ffn, &c.model.layers,
                         &c.model.vocab};
    for (std::size_t k = 0; k < kModelKeys.size(); k++) {
        if (auto f = r.model_field(kModelKeys[k], *shape[k])) {
            return f;
        }
    }
    if (auto f = r.flag("model.swiglu", c.model.swiglu)) {
        return f;
    }
    if (auto f = r.setting("pad_multiple", c.pad_multiple)) {
        return f;
    }
    for (const char *name : {"pad_local", "lockstep", "subgroups", "fill_empty"}) {
        std::string n(name);
        uint32_t &field = n == "pad_local" ? c.pad_local
                          : n == "lockstep" ? c.lockstep
                          : n == "subgroups" ? c.subgroups
                                             : c.fill_empty;
        if (auto f = r.flag(n, field)) {
            return f;
        }
    }
    if (auto f = r.setting("micro_batches", c.micro_batches)) {
        return f;
    }
    if (auto f = r.setting("chunk_keep", c.chunk_keep)) {
        return f;
    }
    if (auto f = r.setting("chunk_state_permille", c.chunk_state_permille)) {
        return f;
    }
    c.chunk_size = 0;
    if (r.get("chunk_size") == nullptr) {
        if (policy == "chunkflow") {
            c.chunk_size = default_chunk_size(c);
        }
    } else if (auto f = r.setting("chunk_size", c.chunk_size)) {
        return f;
    }
    if (c.max_micro_batches != 0 && c.micro_batches > c.max_micro_batches) {
        return value_error(SKRULL_STATUS_MICRO_BATCH_LIMIT,
                           "micro_batches=" + std::to_string(c.micro_batches) +
                               " is more than max_micro_batches=" +
                               std::to_string(c.max_micro_batches) +
                               ": lower micro_batches or raise max_micro_batches (0 = no "
                               "limit)");
    }
    c.cost_model = nullptr;
    if (r.get("cost_model") != nullptr || r.has_prefix(kCostPrefix)) {
        if (auto f = read_cost_model(r, c.model, cost_)) {
            return f;
        }
        c.cost_model = &cost_;
    }
    c.struct_size = sizeof c;
    return std::nullopt;
}

}  // namespace skrull_ops
