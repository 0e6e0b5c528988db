// batches.hpp - where the trainer's global batches come from: a length file or a built-in
// long-tail sampler, and the synthetic tokens of every sequence (deterministic, so the packed
// and the unpacked model see the same data).
#ifndef SKRULL_LIBTORCH_BATCHES_HPP
#define SKRULL_LIBTORCH_BATCHES_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

/// One length of a length file and the line it came from.
struct FileLength {
    uint32_t tokens;  // 2^32 - 1 for a value outside uint32_t
    int64_t written;  // the value as written (clamped to int64_t)
    std::size_t line;
};

/// Reads a length file: whitespace-separated whole numbers, `#` to the end of a line is a
/// comment. A number that does not fit uint32_t is kept as 2^32 - 1 (the library refuses it
/// as LENGTH_OUT_OF_RANGE, naming the sequence); a word that is not a number is an error
/// (`*why` says where), as is a file without a length or one that cannot be read.
std::optional<std::vector<FileLength>> read_length_file(const std::string &path,
                                                        std::string *why);

/// Draws global batches: the file's lengths `batch` at a time (wrapping around), or, without a
/// file, a long-tail mix (most sequences short, some up to `longest` tokens).
class BatchSource {
public:
    BatchSource(std::vector<FileLength> file, std::size_t batch, uint32_t longest,
                uint64_t seed);

    /// The lengths of step `step`, and for a file the line and the written value of each.
    std::vector<uint32_t> next(std::size_t step, std::vector<std::size_t> *lines,
                               std::vector<int64_t> *written);

private:
    std::vector<FileLength> file_;
    std::size_t batch_;
    uint32_t longest_;
    uint64_t seed_;
};

/// Sequence `index` of step `step`: `len` tokens in 1 .. vocab - 1, each token's target the
/// next token and the last one's target 0 (an end-of-sequence id).
struct Sequence {
    std::vector<int64_t> tokens;
    std::vector<int64_t> targets;
};
Sequence make_sequence(uint64_t seed, std::size_t step, std::size_t index, uint32_t len,
                       int64_t vocab);

/// A 64-bit generator (splitmix64): the same numbers on every platform.
struct SplitMix {
    uint64_t state;
    uint64_t next();
    /// Uniform in [0, 1).
    double unit();
};

}  // namespace trainer

#endif
