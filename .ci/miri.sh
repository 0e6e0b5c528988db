#!/usr/bin/env bash
# miri over the core's unit tests and the FFI's unit and ABI tests (undefined behaviour,
# out-of-bounds and misaligned accesses, use of uninitialised memory at the C boundary).
# Skips with a message (exit 0) when nightly Rust or miri is not available. Measured on
# 2 cores: about 10 minutes in all, the core's unit tests 322 s of it (`.ci/run` runs this
# script in the background, beside the Python install and the doc and bench builds).
#
#   bash .ci/miri.sh
#
# Not run under miri, and why:
# - core: three tests of the balanced policy whose loops take minutes under miri (the other
#   balanced tests cover the same code): random_batches_are_valid_and_deterministic,
#   not_slower_than_skrull_or_packed_on_long_tail_batches and
#   skipping_attempts_by_their_bound_never_changes_a_plan (a 2,467-sequence batch and 40
#   long-tail batches, each planned twice: more than 17 minutes). The other randomised unit
#   tests run fewer cases under miri (`cfg!(miri)`).
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
    --skip balanced::tests::not_slower_than_skrull_or_packed_on_long_tail_batches \
    --skip balanced::tests::skipping_attempts_by_their_bound_never_changes_a_plan
t1=$(date +%s)
echo ".ci/miri.sh: skrull-core under miri: $((t1 - t0)) s"
cargo +nightly miri test -p skrull-ffi --lib --test abi
echo ".ci/miri.sh: skrull-ffi under miri: $(($(date +%s) - t1)) s"
