/*
 * SplitMix64, the seeded generator of the C tests: the same stream as the Rust tests'
 * (core/src/test_support/splitmix.rs, skrull_kit::sample::Rng) for the same seed.
 * Set rng_state to the seed, then call next_u64().
 */
#ifndef SKRULL_TEST_RNG_H
#define SKRULL_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state;

static inline uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
