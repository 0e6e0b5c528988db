// batches.cpp - see batches.hpp.
#include "batches.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace trainer {

uint64_t SplitMix::next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double SplitMix::unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

namespace {

// A whole number (optional '-'): nullopt for anything else. Its value as the file means it,
// clamped into uint32_t's range by the caller.
std::optional<long double> whole_number(const std::string &word) {
    std::size_t i = word[0] == '-' || word[0] == '+' ? 1 : 0;
    if (i == word.size()) {
        return std::nullopt;
    }
    long double v = 0;
    for (std::size_t k = i; k < word.size(); k++) {
        if (word[k] < '0' || word[k] > '9') {
            return std::nullopt;
        }
        v = v * 10 + (word[k] - '0');
    }
    return word[0] == '-' ? -v : v;
}

}  // namespace

std::optional<std::vector<FileLength>> read_length_file(const std::string &path,
                                                        std::string *why) {
    std::ifstream in(path);
    if (!in) {
        *why = path + ": cannot be read";
        return std::nullopt;
    }
    std::vector<FileLength> out;
    std::string line;
    for (std::size_t number = 1; std::getline(in, line); number++) {
        line = line.substr(0, line.find('#'));
        std::istringstream words(line);
        std::string word;
        while (words >> word) {
            std::optional<long double> v = whole_number(word);
            if (!v) {
                *why = path + ":" + std::to_string(number) + ": '" + word +
                       "' is not a length (a whole number of tokens)";
                return std::nullopt;
            }
            // Out of uint32_t (negative, or 2^32 and up): 2^32 - 1, which the library refuses.
            uint32_t tokens = *v < 0 || *v > 4294967295.0L ? 0xFFFFFFFFu
                                                            : static_cast<uint32_t>(*v);
            long double clamped = std::clamp(*v, -9.2e18L, 9.2e18L);
            out.push_back(FileLength{tokens, static_cast<int64_t>(clamped), number});
        }
    }
    if (out.empty()) {
        *why = path + ": holds no length";
        return std::nullopt;
    }
    return out;
}

BatchSource::BatchSource(std::vector<FileLength> file, std::size_t batch, uint32_t longest,
                         uint64_t seed)
    : file_(std::move(file)), batch_(batch), longest_(longest), seed_(seed) {}

std::vector<uint32_t> BatchSource::next(std::size_t step, std::vector<std::size_t> *lines,
                                        std::vector<int64_t> *written) {
    std::vector<uint32_t> lengths(batch_);
    lines->assign(batch_, 0);
    written->assign(batch_, 0);
    if (!file_.empty()) {
        for (std::size_t i = 0; i < batch_; i++) {
            const FileLength &f = file_[(step * batch_ + i) % file_.size()];
            lengths[i] = f.tokens;
            (*lines)[i] = f.line;
            (*written)[i] = f.written;
        }
        return lengths;
    }
    // Long tail: 80% short (8..64 tokens), the rest log-uniform up to `longest`.
    SplitMix rng{seed_ * 1000003u + step};
    const double hi = std::max(65.0, static_cast<double>(longest_));
    for (uint32_t &len : lengths) {
        if (rng.unit() < 0.8) {
            len = 8 + static_cast<uint32_t>(rng.next() % 57);
        } else {
            len = static_cast<uint32_t>(std::exp(std::log(64.0) + rng.unit() * std::log(hi / 64.0)));
        }
        len = std::min(len, longest_);
    }
    written->assign(lengths.begin(), lengths.end());
    return lengths;
}

Sequence make_sequence(uint64_t seed, std::size_t step, std::size_t index, uint32_t len,
                       int64_t vocab) {
    SplitMix rng{(seed << 32) ^ (static_cast<uint64_t>(step) << 20) ^ index};
    Sequence s;
    s.tokens.resize(len);
    for (int64_t &t : s.tokens) {
        t = 1 + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(vocab - 1));
    }
    s.targets.resize(len);
    for (uint32_t p = 0; p + 1 < len; p++) {
        s.targets[p] = s.tokens[p + 1];
    }
    if (len > 0) {
        s.targets[len - 1] = 0;
    }
    return s;
}

}  // namespace trainer
