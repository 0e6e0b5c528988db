#!/usr/bin/env bash
# Fuzz smoke run: each cargo-fuzz target for N seconds (default 60), from the committed corpus
# (the hand-written seeds, seed-*, and the minimised corpus of the last campaign, cmin-*). Exits
# non-zero when a target crashes (the input lands in fuzz/artifacts/<target>/); exits 0 with a
# message when nightly Rust or cargo-fuzz is missing.
#
#   fuzz/smoke.sh [SECONDS] [TARGET...]      # default: 60 s, targets c_abi, rust_api, layout
#   fuzz/smoke.sh 10 refit                   # the refit target (CI gives it 10 s)
#
# Longer runs (for example 30 minutes per target, low priority, in the background):
#   cd fuzz && nice -n 19 cargo +nightly fuzz run c_abi -- -max_total_time=1800 -print_final_stats=1
# Refresh the committed corpus after a campaign (inputs a run adds to corpus/<target>/ are
# git-ignored; only seed-* and cmin-* are committed):
#   cd fuzz && mkdir /tmp/min && cargo +nightly fuzz run c_abi /tmp/min corpus/c_abi -- -merge=1
#   then replace corpus/c_abi/cmin-* with the files of /tmp/min, each renamed cmin-<name>
# Replay one input:   cd fuzz && cargo +nightly fuzz run c_abi artifacts/c_abi/crash-<hash>
# Every crash becomes a named test in tests/regressions_fuzz.rs (it replays the bytes through
# the same harness, skrull_kit::fuzz in kit/src/fuzz/; the targets only wrap it).
set -euo pipefail

secs="${1:-60}"
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(c_abi rust_api layout)
fi
cd "$(dirname "$0")"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz/smoke.sh: skipped: no nightly toolchain (rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz/smoke.sh: skipped: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)"
    exit 0
fi

status=0
for t in "${targets[@]}"; do
    # The committed corpus goes into a scratch copy so a smoke run leaves the tree clean.
    work="target/smoke-corpus/$t"
    rm -rf "$work"
    mkdir -p "$work"
    find corpus/"$t" -maxdepth 1 -type f \( -name 'seed-*' -o -name 'cmin-*' \) \
        -exec cp -t "$work" {} +
    echo "== fuzz/smoke.sh: $t for ${secs}s"
    if ! cargo +nightly fuzz run "$t" "$work" -- -max_total_time="$secs" -print_final_stats=1; then
        echo "fuzz/smoke.sh: $t FAILED (crash input in fuzz/artifacts/$t/)"
        status=1
    fi
done
exit "$status"
