// A trainer's data-loader step with skrull.
//
// Every rank of a DP x CP job runs this same code: it gathers the token lengths of the global
// batch (here drawn from a fixed-seed generator instead of an all-gather), calls
// skrull_schedule() with the same configuration, and reads its own part of the plan: for each
// of its DP rank's micro-batches, the sequences its CP rank holds whole and its shard of every
// sharded sequence, with the tokens it holds against the budget. Because the plan is
// bit-identical on every rank, no broadcast is needed.
//
// For each of its micro-batches it then asks skrull_layout_fill() for its execution layout:
// the token spans it packs (local sequences whole, then its two zigzag chunks of every sharded
// sequence), the cu_seqlens / max_seqlen of the local varlen attention call and of the
// sharded (context-parallel) calls, one per ring, the position-id range of every span (for
// RoPE), and the loss weight (its real tokens over the global token count).
//
// It asks for sub-groups (cfg.subgroups = 1): the planner may then shard a sequence over an
// aligned sub-group of the CP ranks instead of all of them. Each sequence's ranks come back in
// cp_groups, and each GPU's sharded group in rings: one CP attention call per ring, over that
// ring's process group, on the ring's slice of the sharded cu_seqlens.
//
// The program checks the plan's invariants for the whole job (every sequence exactly once,
// every GPU within BucketSize, per-GPU counts consistent, the layouts of all CP ranks tile
// every sequence, loss tokens add up to the global count) and exits non-zero if one fails.
//
// usage: example [DP_RANK [CP_RANK [ITERATIONS]]]   (defaults: 1 3 3)
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "skrull.hpp"

namespace {

constexpr uint32_t kBatch = 256;             // DP 4 x BatchSize 64, as in the paper
constexpr uint64_t kSeed = 20250526;          // fixed: every rank draws the same batch
constexpr uint32_t kContext = 128 * 1024;     // training context limit

// splitmix64: a portable generator (std::uniform_int_distribution differs between
// standard libraries; a trainer's batches must not).
struct Rng {
    uint64_t state;
    uint64_t next() noexcept {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint32_t between(uint32_t lo, uint32_t hi) noexcept {  // inclusive
        return lo + static_cast<uint32_t>(next() % (uint64_t{hi} - lo + 1));
    }
};

// A long-tailed SFT batch: most sequences short chats, a few long documents.
std::vector<uint32_t> draw_global_batch(Rng &rng, uint32_t clip) {
    std::vector<uint32_t> lengths(kBatch);
    for (uint32_t &len : lengths) {
        uint32_t bucket = rng.between(0, 99);
        if (bucket < 70) {
            len = rng.between(64, 1023);
        } else if (bucket < 90) {
            len = rng.between(1024, 8191);
        } else if (bucket < 97) {
            len = rng.between(8192, 32767);
        } else {
            len = rng.between(32768, kContext);
        }
        len = len < clip ? len : clip;
    }
    return lengths;
}

// Checks every GPU's layout: the real tokens of each sequence over all CP ranks of its
// micro-batch add up to its length, positions match the spans, cu_seqlens end at the group
// sizes, and the loss tokens of all GPUs add up to the global token count.
int check_layouts(const skrull::Planner &p, skrull::GpuLayout &l, const skrull_config &cfg,
                  const std::vector<uint32_t> &lengths) {
    int bad = 0;
    std::vector<uint64_t> real(lengths.size(), 0);
    uint64_t loss = 0;
    for (uint32_t d = 0; d < cfg.dp; d++) {
        for (uint32_t j = 0; j < p.micro_batches_of(d); j++) {
            for (uint32_t r = 0; r < cfg.cp; r++) {
                if (!l.fill(cfg, lengths.data(), lengths.size(), p, skrull_gpu{d, j, r})) {
                    bad++;
                    continue;
                }
                const skrull_layout &info = l.info();
                bad += info.charged_tokens != p.rank_tokens(p.table_index(d, j))[r];
                bad += static_cast<uint32_t>(l.local_cu_seqlens()[info.local_seqs]) !=
                       info.local_tokens;
                bad += static_cast<uint32_t>(l.rank_cu_seqlens()[info.sharded_seqs]) !=
                       info.sharded_tokens;
                // The rings split the sharded group, block after block, each on CP ranks
                // that include this one.
                uint32_t ring_seqs = 0;
                for (const skrull_layout_ring &ring : l.rings()) {
                    bad += ring.offset != ring_seqs || ring.seqs == 0;
                    bad += r < ring.first || r - ring.first >= ring.size;
                    ring_seqs += ring.seqs;
                }
                bad += ring_seqs != info.sharded_seqs;
                for (const skrull_span &s : l.spans()) {
                    real[s.seq] += s.len;
                    for (uint32_t i = 0; i < s.len + s.pad; i++) {
                        bad += l.positions()[s.offset + i] != static_cast<int32_t>(s.start + i);
                    }
                }
                loss += info.loss_tokens;
            }
        }
    }
    for (std::size_t i = 0; i < lengths.size(); i++) {
        bad += real[i] != lengths[i];
    }
    bad += loss != p.summary().total_tokens;
    return bad;
}

// Prints up to `show` entries of a cu_seqlens array, then its last one.
void print_cu(const char *name, skrull::Range<int32_t> cu, int32_t max_seqlen) {
    constexpr std::size_t kShow = 5;
    std::printf(" %s [", name);
    for (std::size_t i = 0; i < cu.size() && i < kShow; i++) {
        std::printf("%s%" PRId32, i == 0 ? "" : ", ", cu[i]);
    }
    if (cu.size() > kShow) {
        std::printf(", ..., %" PRId32 "] (%zu)", cu[cu.size() - 1], cu.size());
    } else {
        std::printf("]");
    }
    std::printf(" max %" PRId32, max_seqlen);
}

// Prints what GPU (dp_rank, micro-batch j, cp_rank) passes to its varlen attention calls (CP
// size `cp`).
void print_varlen(const skrull::GpuLayout &l, uint32_t cp) {
    const skrull_layout &info = l.info();
    std::printf("      buffer %" PRIu32 " tokens = local %" PRIu32 " + sharded %" PRIu32
                " (%" PRIu32 " padding); loss weight %" PRIu32 "/%" PRIu64 " = %.6f\n",
                info.tokens, info.local_tokens, info.sharded_tokens, info.pad_tokens,
                info.loss_tokens, info.global_tokens,
                static_cast<double>(info.loss_tokens) / static_cast<double>(info.global_tokens));
    // Spans are the position-id ranges: buffer [offset, offset+n) holds positions
    // [start, start+n) of the sequence.
    // Show the first two spans of each group.
    constexpr uint32_t kShow = 2;
    std::printf("      spans (buffer -> positions):");
    uint32_t shown[2] = {0, 0};
    for (const skrull_span &s : l.spans()) {
        bool sharded = s.chunk >= 0;  // -1: a whole local sequence
        if (shown[sharded]++ >= kShow) {
            continue;
        }
        uint32_t n = s.len + s.pad;
        std::printf(" #%" PRIu32, s.seq);
        if (sharded) {
            std::printf("/c%" PRId32, s.chunk);
        }
        std::printf(" %" PRIu32 "..%" PRIu32 "->%" PRIu32 "..%" PRIu32, s.offset, s.offset + n,
                    s.start, s.start + n);
        if (shown[sharded] == kShow) {
            uint32_t total = sharded ? 2 * info.sharded_seqs : info.local_seqs;
            if (total > kShow) {
                std::printf(" +%" PRIu32 " %s", total - kShow, sharded ? "chunks" : "local");
            }
        }
    }
    std::printf("\n      local:");
    print_cu("cu_seqlens", l.local_cu_seqlens(), info.local_max_seqlen);
    std::printf(" | sharded:");
    print_cu("global", l.sharded_cu_seqlens(), info.sharded_max_seqlen);
    if (info.pad_tokens != 0 || info.sharded_max_seqlen_padded != info.sharded_max_seqlen) {
        print_cu("padded", l.sharded_cu_seqlens_padded(), info.sharded_max_seqlen_padded);
    }
    print_cu("rank", l.rank_cu_seqlens(), info.rank_max_seqlen);
    std::printf("\n");
    // One CP attention call per ring, over the process group of its ranks, on its slices of
    // the sharded cu_seqlens (rebased to start at 0).
    for (const skrull_layout_ring &ring : l.rings()) {
        skrull::Range<int32_t> cu = skrull::GpuLayout::ring_slice(l.sharded_cu_seqlens(), ring);
        skrull::Range<int32_t> rank = skrull::GpuLayout::ring_slice(l.rank_cu_seqlens(), ring);
        std::printf("      ring CP %" PRIu32 "..%" PRIu32 "%s: %" PRIu32
                    " sequence%s, %" PRId32 " tokens (%" PRId32 " on this rank)\n",
                    ring.first, ring.first + ring.size - 1,
                    ring.size == cp ? " (whole group)" : " (sub-group)", ring.seqs,
                    ring.seqs == 1 ? "" : "s", cu[ring.seqs] - cu[0],
                    rank[ring.seqs] - rank[0]);
    }
}

// Checks the whole job's plan from the placements alone; returns the number of violations.
int check_invariants(const skrull::Planner &p, const skrull_config &cfg,
                     const std::vector<uint32_t> &lengths) {
    int bad = 0;
    std::vector<uint32_t> listed(lengths.size(), 0);
    std::vector<uint64_t> load(cfg.cp);
    uint64_t total = 0;
    for (uint32_t d = 0; d < cfg.dp; d++) {
        for (uint32_t j = 0; j < p.micro_batches_of(d); j++) {
            std::size_t g = p.table_index(d, j);
            const skrull_micro_batch &mb = p.micro_batch(g);
            bad += mb.dp_rank != d || mb.index != j;
            std::fill(load.begin(), load.end(), 0);
            for (uint32_t seq : p.members(g)) {
                if (seq >= lengths.size()) {
                    bad++;
                    continue;
                }
                listed[seq]++;
                const skrull_placement &pl = p.placement(seq);
                bad += pl.dp_rank != d || pl.micro_batch != j;
                if (pl.cp_rank == SKRULL_SHARDED) {
                    // Its group: the whole CP group, or an aligned sub-group.
                    const skrull_cp_group &grp = p.group(seq);
                    bool aligned = grp.size == cfg.cp ? grp.first == 0
                                                      : grp.size >= 2 && cfg.cp % grp.size == 0 &&
                                                            grp.first % grp.size == 0 &&
                                                            grp.first + grp.size <= cfg.cp;
                    bad += !aligned;
                    for (uint32_t r = grp.first; aligned && r < grp.first + grp.size; r++) {
                        load[r] += pl.tokens_per_gpu;
                    }
                } else if (pl.cp_rank >= 0 && static_cast<uint32_t>(pl.cp_rank) < cfg.cp) {
                    load[static_cast<std::size_t>(pl.cp_rank)] += lengths[seq];
                } else {
                    bad++;
                }
            }
            skrull::Range<uint32_t> tokens = p.rank_tokens(g);
            for (uint32_t r = 0; r < cfg.cp; r++) {
                bad += load[r] > cfg.bucket_tokens;  // budget held on every GPU
                bad += load[r] != tokens[r];         // reported counts are right
            }
        }
    }
    for (std::size_t i = 0; i < lengths.size(); i++) {
        bad += listed[i] != 1;  // every sequence exactly once
        total += lengths[i];
    }
    bad += total != p.summary().total_tokens;
    return bad;
}

// Prints what GPU (dp_rank, cp_rank) runs in each of its micro-batches, and the varlen
// attention inputs of each. Returns the number of failed layout calls.
int print_my_work(const skrull::Planner &p, skrull::GpuLayout &layout, const skrull_config &cfg,
                  const std::vector<uint32_t> &lengths, uint32_t dp_rank, uint32_t cp_rank) {
    uint32_t m = p.micro_batches_of(dp_rank);
    std::printf("  GPU (DP %" PRIu32 ", CP %" PRIu32 ") runs %" PRIu32 " micro-batch%s\n",
                dp_rank, cp_rank, m, m == 1 ? "" : "es");
    for (uint32_t j = 0; j < m; j++) {
        std::size_t g = p.table_index(dp_rank, j);
        std::printf("    micro-batch %" PRIu32 ":", j);
        constexpr uint32_t kShow = 6;  // list at most this many of each kind
        uint32_t mine = 0, local = 0, shards = 0;
        for (uint32_t seq : p.members(g)) {
            const skrull_placement &pl = p.placement(seq);
            if (pl.cp_rank == static_cast<int32_t>(cp_rank)) {
                if (local++ < kShow) {
                    std::printf(" #%" PRIu32 "(%" PRIu32 ")", seq, lengths[seq]);
                }
                mine += lengths[seq];
            }
        }
        if (local > kShow) {
            std::printf(" +%" PRIu32 " more", local - kShow);
        }
        std::printf("%s", local != 0 ? " whole;" : " nothing whole;");
        for (uint32_t seq : p.members(g)) {
            const skrull_placement &pl = p.placement(seq);
            const skrull_cp_group &grp = p.group(seq);
            bool here = cp_rank >= grp.first && cp_rank - grp.first < grp.size;
            if (pl.cp_rank == SKRULL_SHARDED && here) {
                if (shards++ < kShow) {
                    std::printf(" #%" PRIu32 "(%" PRIu32 "->%" PRIu32, seq, lengths[seq],
                                pl.tokens_per_gpu);
                    if (grp.size != cfg.cp) {
                        std::printf(" on CP %" PRIu32 "..%" PRIu32, grp.first,
                                    grp.first + grp.size - 1);
                    }
                    std::printf(")");
                }
                mine += pl.tokens_per_gpu;
            }
        }
        if (shards > kShow) {
            std::printf(" +%" PRIu32 " more", shards - kShow);
        }
        std::printf("%s\n", shards != 0 ? " sharded (len->shard here)" : " nothing sharded");
        uint32_t reported = p.rank_tokens(g)[cp_rank];
        std::printf("      %" PRIu32 " whole + %" PRIu32 " shards = %" PRIu32
                    " tokens of %" PRIu32 " (%.1f%% of budget)%s\n",
                    local, shards, mine, cfg.bucket_tokens,
                    100.0 * mine / cfg.bucket_tokens, mine == reported ? "" : "  MISMATCH");
        skrull::Status st =
            layout.fill(cfg, lengths.data(), lengths.size(), p, skrull_gpu{dp_rank, j, cp_rank});
        if (!st) {
            std::fprintf(stderr, "skrull_layout_fill: %s\n", st.message());
            return 1;
        }
        print_varlen(layout, cfg.cp);
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    uint32_t my_dp = argc > 1 ? static_cast<uint32_t>(std::strtoul(argv[1], nullptr, 10)) : 1;
    uint32_t my_cp = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 3;
    int iterations = argc > 3 ? std::atoi(argv[3]) : 3;

    if (!skrull::abi_matches()) {
        std::fprintf(stderr, "skrull.h (ABI %d) does not match libskrull (ABI %" PRIu32 ")\n",
                     SKRULL_ABI_VERSION, skrull_abi_version());
        return 1;
    }
    skrull_config cfg{};
    if (skrull::Status st = skrull::preset(SKRULL_PRESET_QWEN2_5_0_5B, cfg); !st) {
        std::fprintf(stderr, "preset: %s\n", st.message());
        return 1;
    }
    // The paper's 0.5B layout: DP 4 x CP 8, BucketSize 26K tokens per GPU per micro-batch,
    // planned with the cost-aware policy (SKRULL_POLICY_SKRULL gives the paper's own), which
    // may shard a sequence over a sub-group of the CP ranks: this trainer reads the groups and
    // runs one CP attention call per ring.
    cfg.policy = SKRULL_POLICY_BALANCED;
    cfg.subgroups = 1;
    if (my_dp >= cfg.dp || my_cp >= cfg.cp) {
        std::fprintf(stderr, "rank (%" PRIu32 ", %" PRIu32 ") outside DP %" PRIu32
                     " x CP %" PRIu32 "\n", my_dp, my_cp, cfg.dp, cfg.cp);
        return 2;
    }

    skrull::Status why;
    std::unique_ptr<skrull::Planner> planner =
        skrull::Planner::create(kBatch, cfg.dp, cfg.cp, &why);
    if (!planner) {
        std::fprintf(stderr, "planner: %s\n", why.message());
        return 1;
    }

    std::unique_ptr<skrull::GpuLayout> layout = skrull::GpuLayout::create(cfg, kBatch, &why);
    if (!layout) {
        std::fprintf(stderr, "layout: %s\n", why.message());
        return 1;
    }

    std::printf("skrull %s: Qwen2.5-0.5B, DP %" PRIu32 " x CP %" PRIu32
                ", BucketSize %" PRIu32 " tokens/GPU, %" PRIu32 " sequences per step\n",
                skrull_version(), cfg.dp, cfg.cp, cfg.bucket_tokens, kBatch);
    Rng rng{kSeed};
    int failures = 0;
    for (int step = 0; step < iterations; step++) {
        // 1. All ranks gather the same lengths (an all-gather of integers in a real trainer).
        std::vector<uint32_t> lengths = draw_global_batch(rng, cfg.cp * cfg.bucket_tokens);
        // 2. All ranks compute the same plan.
        if (skrull::Status st = planner->plan(cfg, lengths.data(), lengths.size()); !st) {
            std::fprintf(stderr, "step %d: skrull_schedule: %s\n", step, st.message());
            return 1;
        }
        const skrull_summary &s = planner->summary();
        std::printf("step %d: %" PRIu32 " sequences, %" PRIu64
                    " tokens (the loss normaliser), %" PRIu32 " micro-batches, %" PRIu32
                    " sharded, %" PRIu32 " rollbacks, peak %" PRIu32 " tokens/GPU\n",
                    step, s.sequences, s.total_tokens, s.micro_batches, s.sharded, s.rollbacks,
                    s.peak_rank_tokens);
        std::printf("  micro-batches per DP rank:");
        for (uint32_t d = 0; d < cfg.dp; d++) {
            std::printf(" %" PRIu32, planner->micro_batches_of(d));
        }
        std::printf("\n");
        // 3. Each rank reads its own part.
        if (print_my_work(*planner, *layout, cfg, lengths, my_dp, my_cp) != 0) {
            return 1;
        }
        int bad = check_invariants(*planner, cfg, lengths);
        bad += check_layouts(*planner, *layout, cfg, lengths);
        if (bad != 0) {
            std::fprintf(stderr, "step %d: %d plan invariant violations\n", step, bad);
            failures++;
        }
    }
    if (failures != 0) {
        std::fprintf(stderr, "FAILED: %d step(s) violated the plan invariants\n", failures);
        return 1;
    }
    std::printf("ok: %d steps, every sequence placed once, every GPU within %" PRIu32
                " tokens, layouts tile every sequence, loss weights sum to 1\n", iterations,
                cfg.bucket_tokens);
    return 0;
}
