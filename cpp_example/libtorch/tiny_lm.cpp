// tiny_lm.cpp - see tiny_lm.hpp.
#include "tiny_lm.hpp"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

namespace trainer {
namespace {

namespace F = torch::nn::functional;

torch::Tensor rms_norm(const torch::Tensor &x, const torch::Tensor &weight) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-6) * weight;
}

// Rotary embedding of x [T, H, hd] at integer positions [T].
torch::Tensor rope(const torch::Tensor &x, const torch::Tensor &positions) {
    const int64_t half = x.size(2) / 2;
    auto opts = x.options();
    torch::Tensor inv = torch::pow(10000.0, -torch::arange(half, opts) * 2.0 / x.size(2));
    torch::Tensor angle = positions.to(opts).unsqueeze(1) * inv.unsqueeze(0);  // [T, half]
    torch::Tensor c = angle.cos().unsqueeze(1), s = angle.sin().unsqueeze(1);
    torch::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
    return torch::cat({x1 * c - x2 * s, x1 * s + x2 * c}, 2);
}

// Causal attention of the queries of one sequence on its keys, matched by position: a query
// at position p sees the keys at positions <= p. q [Sq, H, hd], k and v [Sk, H, hd].
torch::Tensor attend(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v,
                     const torch::Tensor &q_pos, const torch::Tensor &k_pos) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
    torch::Tensor scores = torch::einsum("qhd,khd->hqk", {q, k}) * scale;
    torch::Tensor future = k_pos.unsqueeze(0) > q_pos.unsqueeze(1);  // [Sq, Sk]
    scores = scores.masked_fill(future.unsqueeze(0), -std::numeric_limits<double>::infinity());
    return torch::einsum("hqk,khd->qhd", {torch::softmax(scores, -1), v});
}

torch::Tensor rows_of(const torch::Tensor &t, const Rows &r) {
    return t.narrow(0, r.begin, r.end - r.begin);
}

// The K/V and positions of one ring sequence, gathered from every rank of the ring.
struct Gathered {
    torch::Tensor k, v, pos;
};

Gathered gather_ring(const std::vector<GpuInput> &gpus, const std::vector<torch::Tensor> &k,
                     const std::vector<torch::Tensor> &v, const RingRows &ring, std::size_t i) {
    std::vector<torch::Tensor> ks, vs, ps;
    for (uint32_t q = ring.first; q < ring.first + ring.size; q++) {
        if (q >= gpus.size()) {
            throw std::runtime_error("a ring names CP rank " + std::to_string(q) +
                                     " outside the group");
        }
        const RingRows *same = nullptr;
        for (const RingRows &other : gpus[q].rings) {
            if (other.first == ring.first && other.size == ring.size) {
                same = &other;
            }
        }
        if (same == nullptr || same->seqs.size() != ring.seqs.size() ||
            same->seqs[i] != ring.seqs[i]) {
            throw std::runtime_error("CP rank " + std::to_string(q) + " does not hold sequence " +
                                     std::to_string(ring.seqs[i]) + " of its ring");
        }
        ks.push_back(rows_of(k[q], same->rows[i]));
        vs.push_back(rows_of(v[q], same->rows[i]));
        ps.push_back(rows_of(gpus[q].positions, same->rows[i]));
    }
    return Gathered{torch::cat(ks), torch::cat(vs), torch::cat(ps)};
}

}  // namespace

BlockImpl::BlockImpl(const Shape &s) {
    norm1 = register_parameter("norm1", torch::ones({s.dim}));
    norm2 = register_parameter("norm2", torch::ones({s.dim}));
    auto linear = [](int64_t in, int64_t out) {
        return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
    };
    wq = register_module("wq", linear(s.dim, s.dim));
    wk = register_module("wk", linear(s.dim, s.dim));
    wv = register_module("wv", linear(s.dim, s.dim));
    wo = register_module("wo", linear(s.dim, s.dim));
    gate = register_module("gate", linear(s.dim, s.ffn));
    up = register_module("up", linear(s.dim, s.ffn));
    down = register_module("down", linear(s.ffn, s.dim));
}

TinyLMImpl::TinyLMImpl(const Shape &s) : shape_(s) {
    embed_ = register_module("embed", torch::nn::Embedding(s.vocab, s.dim));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int64_t l = 0; l < s.layers; l++) {
        blocks_->push_back(Block(s));
    }
    final_norm_ = register_parameter("final_norm", torch::ones({s.dim}));
    head_ = register_module("head", torch::nn::Linear(s.dim, s.vocab));
}

torch::Tensor TinyLMImpl::packed_loss(const std::vector<GpuInput> &gpus, double global_tokens) {
    const std::size_t ranks = gpus.size();
    const int64_t heads = shape_.heads, hd = shape_.dim / shape_.heads;
    std::vector<torch::Tensor> h(ranks);
    for (std::size_t r = 0; r < ranks; r++) {
        h[r] = embed_->forward(gpus[r].tokens);
    }
    for (const auto &module : *blocks_) {
        auto *b = module->as<BlockImpl>();
        std::vector<torch::Tensor> q(ranks), k(ranks), v(ranks);
        for (std::size_t r = 0; r < ranks; r++) {
            torch::Tensor x = rms_norm(h[r], b->norm1);
            const int64_t t = x.size(0);
            q[r] = rope(b->wq->forward(x).view({t, heads, hd}), gpus[r].positions);
            k[r] = rope(b->wk->forward(x).view({t, heads, hd}), gpus[r].positions);
            v[r] = b->wv->forward(x).view({t, heads, hd});
        }
        // One all-gather per ring sequence, shared by the ring's ranks.
        std::map<std::tuple<uint32_t, uint32_t, std::size_t>, Gathered> gathered;
        for (std::size_t r = 0; r < ranks; r++) {
            const GpuInput &g = gpus[r];
            std::vector<torch::Tensor> pieces;
            int64_t next_row = 0;
            auto add = [&](const Rows &rows, torch::Tensor out) {
                if (rows.begin != next_row) {
                    throw std::runtime_error("the rows of CP rank " + std::to_string(r) +
                                             " do not tile its buffer");
                }
                next_row = rows.end;
                pieces.push_back(std::move(out));
            };
            for (const Rows &rows : g.local) {
                torch::Tensor p = rows_of(g.positions, rows);
                add(rows, attend(rows_of(q[r], rows), rows_of(k[r], rows), rows_of(v[r], rows), p,
                                 p));
            }
            for (const RingRows &ring : g.rings) {
                for (std::size_t i = 0; i < ring.seqs.size(); i++) {
                    auto key = std::make_tuple(ring.first, ring.size, i);
                    auto it = gathered.find(key);
                    if (it == gathered.end()) {
                        it = gathered.emplace(key, gather_ring(gpus, k, v, ring, i)).first;
                    }
                    const Gathered &kv = it->second;
                    add(ring.rows[i], attend(rows_of(q[r], ring.rows[i]), kv.k, kv.v,
                                             rows_of(g.positions, ring.rows[i]), kv.pos));
                }
            }
            if (next_row != h[r].size(0)) {
                throw std::runtime_error("the rows of CP rank " + std::to_string(r) +
                                         " do not cover its buffer");
            }
            torch::Tensor att = pieces.empty() ? torch::zeros_like(q[r]) : torch::cat(pieces);
            h[r] = h[r] + b->wo->forward(att.reshape({-1, shape_.dim}));
            torch::Tensor x = rms_norm(h[r], b->norm2);
            h[r] = h[r] + b->down->forward(F::silu(b->gate->forward(x)) * b->up->forward(x));
        }
    }
    torch::Tensor loss = torch::zeros({}, h[0].options());
    for (std::size_t r = 0; r < ranks; r++) {
        torch::Tensor logits = head_->forward(rms_norm(h[r], final_norm_));
        torch::Tensor each = F::cross_entropy(
            logits, gpus[r].targets, F::CrossEntropyFuncOptions().reduction(torch::kNone));
        loss = loss + (each * gpus[r].weights).sum();
    }
    return loss / global_tokens;
}

torch::Tensor TinyLMImpl::sequence_loss(const torch::Tensor &tokens, const torch::Tensor &targets,
                                        double global_tokens) {
    const int64_t s = tokens.size(0);
    GpuInput alone;
    alone.tokens = tokens;
    alone.targets = targets;
    alone.positions = torch::arange(s, torch::kLong);
    alone.weights = torch::ones({s}, torch::kFloat64);
    alone.local.push_back(Rows{0, s});
    return packed_loss({alone}, global_tokens);
}

double max_relative_difference(TinyLM &a, TinyLM &b) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> pa = a->parameters(), pb = b->parameters();
    double worst = 0.0;
    for (std::size_t i = 0; i < pa.size(); i++) {
        double diff = (pa[i] - pb[i]).abs().max().item<double>();
        double scale = pb[i].abs().max().item<double>();
        worst = std::max(worst, diff / scale);
    }
    return worst;
}

}  // namespace trainer
