// trainer.cpp - a libtorch trainer that links libskrull.a and trains on its plans.
//
// Every step: draw a global batch of lengths (--lengths FILE, or a built-in long-tail
// sampler), plan it with skrull_schedule_prepared (the configuration prepared once), lay out
// every GPU's micro-batches with skrull_layout_fill_many, and train a tiny causal transformer
// (tiny_lm.hpp) in float64 on them: the DP ranks and the CP ranks of each run in this process,
// each DP rank's gradients accumulated over its micro-batches and then summed over the DP
// ranks in rank order (the all-reduce). The same model trained unpacked (every sequence
// alone, positions from 0) is the check: the last line printed is
//
//   max relative weight difference vs unpacked: <x>
//
// and the program exits 1 when x is above --tolerance (1e-10). A batch skrull refuses (a
// length of 0, one too long for the budget, more micro-batches than allowed) prints the
// status name and the library's sentence for it (skrull_error_describe: the one skrull's
// Python binding raises) and exits 3; a length file that is not numbers exits 2.
// Usage: skrull_libtorch_trainer --help.
#include <torch/torch.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batches.hpp"
#include "op_check.hpp"
#include "planning.hpp"
#include "tiny_lm.hpp"

namespace {

using trainer::SkrullError;

struct Options {
    uint32_t dp = 2, cp = 1, bucket = 256;
    uint32_t policy = SKRULL_POLICY_BALANCED;
    bool subgroups = true, zigzag = false, lockstep = false;
    std::size_t steps = 3, batch = 16, threads = 1;
    uint32_t gpus_per_node = 0;  // 0: the library's cost model as it is
    std::string lengths;
    std::string check_op;  // the torch op's library, to compare its plans with (op_check.hpp)
    uint64_t seed = 7;
    double lr = 1e-2, tolerance = 1e-10;
};

constexpr const char *kUsage =
    "usage: skrull_libtorch_trainer [--dp N] [--cp N] [--bucket TOKENS] [--policy NAME]\n"
    "           [--steps N] [--batch N] [--lengths FILE] [--zigzag] [--no-subgroups]\n"
    "           [--lockstep] [--gpus-per-node N] [--seed N] [--lr X] [--tolerance X]\n"
    "           [--threads N] [--check-op LIB]\n"
    "  defaults: DP 2, CP 1, BucketSize 256, balanced, 3 steps of 16 sequences, AdamW lr 1e-2;\n"
    "  policies: skrull, deepspeed, packed, roundrobin, balanced (chunkflow is refused: this\n"
    "  trainer does not run chunked sequences). FILE: whole numbers, `#` comments; step k uses\n"
    "  the next --batch of them (wrapping around). --gpus-per-node N: plan on the H100 cost\n"
    "  model with N GPUs per node (balanced then weighs CP sub-groups where a ring of the\n"
    "  whole group would cross nodes). --check-op LIB: load the torch op's library\n"
    "  (python -c 'import skrull.ops; print(skrull.ops.library_path())') and check every step\n"
    "  that torch.ops.skrull.schedule, called through c10::Dispatcher, plans (or refuses) the\n"
    "  batch as libskrull.a does. --threads: torch's intra-op threads (1:\n"
    "  the tensors are tiny; more threads only add synchronisation).\n";

constexpr const char *kPolicyNames[] = {"skrull", "deepspeed", "packed", "roundrobin",
                                        "balanced"};

bool parse_options(int argc, char **argv, Options &o) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
        auto number = [&](auto &out) {
            const char *v = value();
            char *end = nullptr;
            if (v == nullptr) {
                return false;
            }
            unsigned long long n = std::strtoull(v, &end, 10);
            if (*end != '\0' || *v == '-' || n == 0) {
                return false;
            }
            out = static_cast<std::remove_reference_t<decltype(out)>>(n);
            return static_cast<unsigned long long>(out) == n;
        };
        bool ok = true;
        if (a == "--dp") {
            ok = number(o.dp);
        } else if (a == "--cp") {
            ok = number(o.cp);
        } else if (a == "--bucket") {
            ok = number(o.bucket);
        } else if (a == "--steps") {
            ok = number(o.steps);
        } else if (a == "--batch") {
            ok = number(o.batch);
        } else if (a == "--gpus-per-node") {
            ok = number(o.gpus_per_node);
        } else if (a == "--threads") {
            ok = number(o.threads);
        } else if (a == "--seed") {
            ok = number(o.seed);
        } else if (a == "--lr" || a == "--tolerance") {
            const char *v = value();
            char *end = nullptr;
            double x = v ? std::strtod(v, &end) : 0.0;
            ok = v != nullptr && *end == '\0' && x > 0;
            (a == "--lr" ? o.lr : o.tolerance) = x;
        } else if (a == "--policy") {
            const char *v = value();
            ok = false;
            for (uint32_t k = 0; v != nullptr && k < 5; k++) {
                if (std::strcmp(v, kPolicyNames[k]) == 0) {
                    o.policy = k;
                    ok = true;
                }
            }
        } else if (a == "--lengths") {
            const char *v = value();
            ok = v != nullptr;
            o.lengths = v ? v : "";
        } else if (a == "--check-op") {
            const char *v = value();
            ok = v != nullptr;
            o.check_op = v ? v : "";
        } else if (a == "--zigzag") {
            o.zigzag = true;
        } else if (a == "--no-subgroups") {
            o.subgroups = false;
        } else if (a == "--lockstep") {
            o.lockstep = true;
        } else if (a == "--help" || a == "-h") {
            std::printf("%s", kUsage);
            std::exit(0);
        } else {
            ok = false;
        }
        if (!ok) {
            std::fprintf(stderr, "bad argument near '%s'\n%s", a.c_str(), kUsage);
            return false;
        }
    }
    return true;
}

// Prints a refused call: status name, number, the library's sentence and, for a length
// file, the line of the sequence it names.
void report(const SkrullError &e, const std::vector<std::size_t> *lines, const Options &o) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s: SKRULL_STATUS_%s (%u): %s\n", e.call.c_str(),
                 e.name.c_str(), static_cast<unsigned>(e.status), e.detail.c_str());
    bool names_a_sequence = e.status == SKRULL_STATUS_EMPTY_SEQUENCE ||
                            e.status == SKRULL_STATUS_LENGTH_OUT_OF_RANGE ||
                            e.status == SKRULL_STATUS_SEQUENCE_TOO_LONG;
    if (names_a_sequence && lines != nullptr && !o.lengths.empty() && e.index >= 0 &&
        static_cast<std::size_t>(e.index) < lines->size()) {
        std::fprintf(stderr, "  sequence %" PRId64 " is line %zu of %s\n", e.index,
                     (*lines)[static_cast<std::size_t>(e.index)], o.lengths.c_str());
    }
}

// The rows of each sequence in one GPU's layout: local ones from local_cu_seqlens, sharded
// ones per ring from rank_cu_seqlens (offsets from the sharded group's start).
trainer::GpuInput gpu_input(const trainer::GpuLayout &l, const torch::Tensor &stream_tokens,
                            const torch::Tensor &stream_targets) {
    trainer::GpuInput g;
    const int64_t t = l.info.tokens;
    torch::Tensor gather = torch::from_blob(const_cast<int64_t *>(l.gather_index.data()), {t},
                                            torch::kLong).clone();
    torch::Tensor real = gather >= 0;
    torch::Tensor at = gather.clamp_min(0);
    g.tokens = stream_tokens.index_select(0, at).masked_fill(~real, 0);
    g.targets = stream_targets.index_select(0, at).masked_fill(~real, 0);
    g.weights = real.to(torch::kFloat64);
    g.positions = torch::from_blob(const_cast<int32_t *>(l.positions.data()), {t}, torch::kInt)
                      .to(torch::kLong);
    for (uint32_t i = 0; i < l.info.local_seqs; i++) {
        g.local.push_back(trainer::Rows{l.local_cu_seqlens[i], l.local_cu_seqlens[i + 1]});
    }
    const int64_t base = l.info.local_tokens;
    for (const skrull_layout_ring &ring : l.rings) {
        trainer::RingRows rr{ring.first, ring.size, {}, {}};
        for (uint32_t i = ring.offset; i < ring.offset + ring.seqs; i++) {
            rr.seqs.push_back(l.spans[l.info.local_seqs + 2 * i].seq);
            rr.rows.push_back(
                trainer::Rows{base + l.rank_cu_seqlens[i], base + l.rank_cu_seqlens[i + 1]});
        }
        g.rings.push_back(std::move(rr));
    }
    return g;
}

std::vector<torch::Tensor> grads_of(trainer::TinyLM &m) {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor &p : m->parameters()) {
        out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    }
    return out;
}

int run(const Options &o) {
    if (skrull_abi_version() != SKRULL_ABI_VERSION) {
        std::fprintf(stderr, "skrull.h (ABI %d) does not match libskrull (ABI %u)\n",
                     SKRULL_ABI_VERSION, skrull_abi_version());
        return 1;
    }
    std::vector<trainer::FileLength> file;
    if (!o.lengths.empty()) {
        std::string why;
        std::optional<std::vector<trainer::FileLength>> read =
            trainer::read_length_file(o.lengths, &why);
        if (!read) {
            std::fprintf(stderr, "error: %s\n", why.c_str());
            return 2;
        }
        file = std::move(*read);
    }

    skrull_config cfg{};
    if (skrull_status st = skrull_config_recommended_init(SKRULL_PRESET_QWEN2_5_0_5B, &cfg,
                                                          sizeof cfg);
        st != SKRULL_STATUS_OK) {
        report(trainer::skrull_error("skrull_config_recommended_init", st, nullptr, nullptr),
               nullptr, o);
        return 3;
    }
    cfg.dp = o.dp;
    cfg.cp = o.cp;
    cfg.bucket_tokens = o.bucket;
    cfg.policy = o.policy;
    cfg.subgroups = o.subgroups ? 1 : 0;
    cfg.shard_padding = o.zigzag ? SKRULL_SHARD_PADDING_ZIGZAG : SKRULL_SHARD_PADDING_NONE;
    cfg.lockstep = o.lockstep ? 1 : 0;
    skrull_cost_model cost{};
    if (o.gpus_per_node != 0) {
        if (skrull_status st = skrull_cost_model_preset(SKRULL_GPU_H100, &cfg.model, &cost,
                                                        sizeof cost);
            st != SKRULL_STATUS_OK) {
            report(trainer::skrull_error("skrull_cost_model_preset", st, nullptr, nullptr),
                   nullptr, o);
            return 3;
        }
        cost.gpus_per_node = o.gpus_per_node;
        cfg.cost_model = &cost;
    }
    SkrullError why;
    std::unique_ptr<trainer::Planner> planner = trainer::Planner::create(cfg, o.batch, &why);
    if (!planner) {
        report(why, nullptr, o);
        return 3;
    }
    trainer::Layouts layouts(planner->config(), o.batch);
    if (layouts.error()) {
        report(*layouts.error(), nullptr, o);
        return 3;
    }
    // The longest sequence the sampler draws: one that fits sharded, zigzag padding included.
    const uint32_t longest = o.cp * o.bucket - (o.zigzag ? 2 * o.cp : 0);
    trainer::BatchSource source(std::move(file), o.batch, longest, o.seed);
    std::optional<trainer::OpCheck> op;
    if (!o.check_op.empty()) {
        std::string why_not;
        op = trainer::OpCheck::load(o.check_op, &why_not);
        if (!op) {
            std::fprintf(stderr, "error: --check-op: %s\n", why_not.c_str());
            return 2;
        }
    }

    torch::set_num_threads(static_cast<int>(o.threads));
    const trainer::Shape shape;
    torch::manual_seed(static_cast<uint64_t>(o.seed));
    trainer::TinyLM model(shape), reference(shape);
    model->to(torch::kFloat64);
    reference->to(torch::kFloat64);
    {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> a = model->parameters(), b = reference->parameters();
        for (std::size_t i = 0; i < a.size(); i++) {
            b[i].copy_(a[i]);
        }
    }
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(o.lr));
    torch::optim::AdamW ref_opt(reference->parameters(), torch::optim::AdamWOptions(o.lr));

    std::printf("skrull %s + libtorch: DP %u x CP %u, BucketSize %u, %s, %zu steps of %zu "
                "sequences (%s), float64\n",
                skrull_version(), o.dp, o.cp, o.bucket,
                kPolicyNames[o.policy],
                o.steps, o.batch, o.lengths.empty() ? "long-tail sampler" : o.lengths.c_str());
    std::vector<trainer::GpuLayout> mine;
    for (std::size_t step = 0; step < o.steps; step++) {
        std::vector<std::size_t> lines;
        std::vector<int64_t> written;
        std::vector<uint32_t> lengths = source.next(step, &lines, &written);
        if (std::optional<SkrullError> e = planner->plan(lengths, &written)) {
            e->call = "step " + std::to_string(step) + ": " + e->call;
            report(*e, &lines, o);
            if (op) {
                if (std::optional<std::string> diff = op->same_refusal(*e, *planner, written)) {
                    std::fprintf(stderr, "error: --check-op: %s\n", diff->c_str());
                    return 1;
                }
                std::fprintf(stderr, "  the torch op refuses the batch with the same message\n");
            }
            return 3;
        }
        if (op) {
            if (std::optional<std::string> diff = op->same_plan(*planner, written)) {
                std::fprintf(stderr, "error: step %zu: --check-op: %s\n", step, diff->c_str());
                return 1;
            }
        }
        const skrull_summary &s = planner->summary();
        const double global_tokens = static_cast<double>(s.total_tokens);

        // Each DP rank: its token stream in plan order, its micro-batches on its CP ranks.
        std::vector<std::vector<torch::Tensor>> rank_grads;
        double packed_loss = 0.0;
        for (uint32_t d = 0; d < o.dp; d++) {
            std::vector<int64_t> toks, tgts;
            for (uint32_t seq : planner->dp_sequences(d)) {
                trainer::Sequence q = trainer::make_sequence(o.seed, step, seq, lengths[seq],
                                                             shape.vocab);
                toks.insert(toks.end(), q.tokens.begin(), q.tokens.end());
                tgts.insert(tgts.end(), q.targets.begin(), q.targets.end());
            }
            torch::Tensor stream_tokens = torch::tensor(toks, torch::kLong);
            torch::Tensor stream_targets = torch::tensor(tgts, torch::kLong);
            const uint32_t m = planner->micro_batches_of(d);
            std::vector<std::vector<trainer::GpuInput>> inputs(m,
                                                               std::vector<trainer::GpuInput>(o.cp));
            for (uint32_t r = 0; r < o.cp; r++) {
                if (std::optional<SkrullError> e = layouts.fill(*planner, lengths, d, r, m, mine)) {
                    report(*e, nullptr, o);
                    return 3;
                }
                for (uint32_t j = 0; j < m; j++) {
                    inputs[j][r] = gpu_input(mine[j], stream_tokens, stream_targets);
                }
            }
            opt.zero_grad();
            for (uint32_t j = 0; j < m; j++) {
                int64_t tokens = 0;
                for (const trainer::GpuInput &g : inputs[j]) {
                    tokens += g.tokens.size(0);
                }
                if (tokens == 0) {
                    continue;  // an empty lockstep micro-batch: nothing to run
                }
                torch::Tensor loss = model->packed_loss(inputs[j], global_tokens);
                loss.backward();
                packed_loss += loss.item<double>();
            }
            rank_grads.push_back(grads_of(model));
        }
        // The all-reduce: every DP rank's gradient, summed in rank order.
        {
            torch::NoGradGuard no_grad;
            std::vector<torch::Tensor> params = model->parameters();
            for (std::size_t i = 0; i < params.size(); i++) {
                torch::Tensor sum = torch::zeros_like(params[i]);
                for (const auto &g : rank_grads) {
                    sum += g[i];
                }
                params[i].mutable_grad() = sum;
            }
        }
        opt.step();

        // The reference: every sequence alone, in input order.
        ref_opt.zero_grad();
        double unpacked_loss = 0.0;
        for (std::size_t i = 0; i < lengths.size(); i++) {
            trainer::Sequence q = trainer::make_sequence(o.seed, step, i, lengths[i], shape.vocab);
            torch::Tensor loss = reference->sequence_loss(torch::tensor(q.tokens, torch::kLong),
                                                          torch::tensor(q.targets, torch::kLong),
                                                          global_tokens);
            loss.backward();
            unpacked_loss += loss.item<double>();
        }
        ref_opt.step();
        uint32_t subgroup = 0;
        for (std::size_t i = 0; i < lengths.size(); i++) {
            subgroup += planner->placement(i).cp_rank == SKRULL_SHARDED &&
                        planner->group(i).size < o.cp;
        }
        std::printf("step %zu: %u sequences, %" PRIu64 " tokens, %u micro-batches, %u sharded "
                    "(%u on a sub-group), loss %.12f (unpacked %.12f)\n",
                    step, s.sequences, s.total_tokens, s.micro_batches, s.sharded, subgroup,
                    packed_loss, unpacked_loss);
    }
    if (op) {
        std::printf("torch.ops.skrull.schedule (%s, through c10::Dispatcher) planned every step "
                    "as libskrull.a did\n", o.check_op.c_str());
    }
    double worst = trainer::max_relative_difference(model, reference);
    std::printf("max relative weight difference vs unpacked: %.3e\n", worst);
    return worst <= o.tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    if (!parse_options(argc, argv, o)) {
        return 2;
    }
    try {
        return run(o);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
