#!/usr/bin/env bash
# miri over the core's unit tests and the FFI's unit and ABI tests (undefined behaviour,
# out-of-bounds and misaligned accesses, use of uninitialised memory at the C boundary).
# Skips with a message (exit 0) when nightly Rust or miri is not available. Takes about
# 11 minutes on 2 cores (core 10.5 min, FFI 0.5 min once built).
#
#   bash .ci/miri.sh
#
# Not run under miri, and why:
# - core: three randomised unit tests whose loops take tens of minutes under miri (the
#   other unit tests cover the same code): balanced::tests::random_batches_are_valid_and_
#   deterministic (300 batches), gds::tests::both_lpt_key_widths_match_the_reference (200
#   batches of up to 3,000) and gds::tests::radix_sort_matches_the_comparison_sort (300
#   sorts of up to 5,000).
# - core/tests/layout_props.rs: both tests, marked #[cfg_attr(miri, ignore = "...")] (3,000
#   random plans; 64,000 chunkings).
# - ffi/tests/abi.rs: the tests marked #[cfg_attr(miri, ignore = "...")] there (large
#   batches and threads; the small cases cover the same code).
# - `libm/force-soft-floats`: libm computes sqrt with inline assembly on x86_64, which miri
#   cannot run; the portable implementation gives the same IEEE results.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo ".ci/miri.sh: skipped: no nightly toolchain (rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    rustup +nightly component add miri rust-src >/dev/null 2>&1 || true
fi
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo ".ci/miri.sh: skipped: miri is not installed (rustup +nightly component add miri)"
    exit 0
fi
cargo +nightly miri setup

t0=$(date +%s)
cargo +nightly miri test -p skrull-core --features libm/force-soft-floats -- \
    --skip balanced::tests::random_batches_are_valid_and_deterministic \
    --skip gds::tests::both_lpt_key_widths_match_the_reference \
    --skip gds::tests::radix_sort_matches_the_comparison_sort
t1=$(date +%s)
echo ".ci/miri.sh: skrull-core under miri: $((t1 - t0)) s"
cargo +nightly miri test -p skrull-ffi --lib --test abi
echo ".ci/miri.sh: skrull-ffi under miri: $(($(date +%s) - t1)) s"
