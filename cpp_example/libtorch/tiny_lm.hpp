// tiny_lm.hpp - a tiny causal transformer in libtorch that trains on skrull's layouts: token
// embedding, rotary position embedding from the layout's position ids, attention within each
// sequence (local sequences from local_cu_seqlens, sharded ones per ring from rank_cu_seqlens
// with the ring's K/V gathered from its CP ranks), a SwiGLU MLP and an LM head.
//
// The CP ranks of one DP rank run in this process: their K/V "all-gather" is a torch::cat of
// the ranks' tensors, so autograd carries each rank's gradient back to the rank that made it,
// as the reduce-scatter of a real ring attention would.
#ifndef SKRULL_LIBTORCH_TINY_LM_HPP
#define SKRULL_LIBTORCH_TINY_LM_HPP

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace trainer {

/// The model's sizes.
struct Shape {
    int64_t vocab = 61;
    int64_t dim = 32;
    int64_t heads = 4;
    int64_t layers = 2;
    int64_t ffn = 64;
};

/// Buffer rows [begin, end) of one sequence on one GPU.
struct Rows {
    int64_t begin = 0;
    int64_t end = 0;
};

/// One ring of a GPU's sharded group: CP ranks first .. first + size - 1, and for each of its
/// sequences (in ring order, the same on every rank of the ring) the rows this GPU holds.
struct RingRows {
    uint32_t first = 0;
    uint32_t size = 0;
    std::vector<uint32_t> seqs;
    std::vector<Rows> rows;
};

/// What one GPU of a micro-batch feeds the model; rows tile its buffer (local, then rings).
struct GpuInput {
    torch::Tensor tokens;     // int64 [T]
    torch::Tensor targets;    // int64 [T]
    torch::Tensor weights;    // float64 [T]: 1 for a real token, 0 for padding
    torch::Tensor positions;  // int64 [T]
    std::vector<Rows> local;  // one per local sequence
    std::vector<RingRows> rings;
};

/// One pre-norm transformer block.
struct BlockImpl : torch::nn::Module {
    explicit BlockImpl(const Shape &s);
    torch::Tensor norm1, norm2;
    torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
    torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(Block);

class TinyLMImpl : public torch::nn::Module {
public:
    explicit TinyLMImpl(const Shape &s);

    /// The loss of one micro-batch on the GPUs of one CP group (`gpus[r]`: CP rank r), summed
    /// over its real tokens and divided by `global_tokens` (the batch's loss normaliser).
    /// Throws std::runtime_error when the layouts do not fit together (a ring whose ranks
    /// disagree, rows that do not tile a buffer).
    torch::Tensor packed_loss(const std::vector<GpuInput> &gpus, double global_tokens);

    /// One sequence alone (positions 0 .. S-1), its loss summed and divided by
    /// `global_tokens`: the unpacked reference.
    torch::Tensor sequence_loss(const torch::Tensor &tokens, const torch::Tensor &targets,
                                double global_tokens);

private:
    Shape shape_;
    torch::nn::Embedding embed_{nullptr};
    torch::nn::ModuleList blocks_{nullptr};
    torch::Tensor final_norm_;
    torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(TinyLM);

/// The largest |a - b| / max |b| over the two models' parameters (same order).
double max_relative_difference(TinyLM &a, TinyLM &b);

}  // namespace trainer

#endif
