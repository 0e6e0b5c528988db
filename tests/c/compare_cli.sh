#!/usr/bin/env bash
# Checks that the C library gives the same plan as `skrull plan --format json` for the same
# input: tests/c/plan_json (linked against libskrull.a) prints the plan in the CLI's JSON
# shape, and every field it prints must equal the CLI's (the CLI may print more).
#
# usage: bash tests/c/compare_cli.sh        (from anywhere; builds what it needs)
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=tests/c/build
TARGET=${CARGO_TARGET_DIR:-target}
CLI=$TARGET/release/skrull
PLAN_JSON=$BUILD/plan_json
mkdir -p "$BUILD"

cargo build -p skrull-cli -p skrull-ffi --release --locked --quiet
${CC:-gcc} -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -Iinclude tests/c/plan_json.c \
    -o "$PLAN_JSON" "$TARGET/release/libskrull.a" -lpthread -ldl -lm

# same C.json CLI.json: every value in C.json equals the CLI's at the same place.
same() {
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$1" "$2" <<'PY'
import json, sys
c, r = (json.load(open(p)) for p in sys.argv[1:3])
def sub(a, b, path):
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return path
        for k, v in a.items():
            if k not in b:
                return f"{path}.{k} (missing in CLI)"
            bad = sub(v, b[k], f"{path}.{k}")
            if bad:
                return bad
        return None
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return f"{path} (length)"
        for i, (x, y) in enumerate(zip(a, b)):
            bad = sub(x, y, f"{path}[{i}]")
            if bad:
                return bad
        return None
    return None if a == b else f"{path}: C {a!r} vs CLI {b!r}"
bad = sub(c, r, "$")
if bad:
    print("differs at", bad)
    sys.exit(1)
PY
    else
        jq -e -n --slurpfile c "$1" --slurpfile r "$2" '
          def sub($a; $b):
            if ($a|type) == "object" then ($b|type) == "object"
                 and all($a|keys[]; . as $k | ($b|has($k)) and sub($a[$k]; $b[$k]))
            elif ($a|type) == "array" then ($b|type) == "array" and ($a|length) == ($b|length)
                 and all(range($a|length); sub($a[.]; $b[.]))
            else $a == $b end;
          sub($c[0]; $r[0])' >/dev/null
    fi
}

# lengths_of CLI.json > FILE: the batch the CLI planned.
lengths_of() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; print(" ".join(str(p["len"]) for p in json.load(open(sys.argv[1]))["placements"]))' "$1"
    else
        jq -r '[.placements[].len] | map(tostring) | join(" ")' "$1"
    fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# compare NAME [LENGTHS_FILE|""] ARGS...: plans with both and compares.
compare() {
    local name=$1 lengths=$2
    shift 2
    if [ -n "$lengths" ]; then
        "$CLI" plan --lengths "$lengths" --format json "$@" >"$tmp/cli.json"
        cp "$lengths" "$tmp/lengths.txt"
    else
        # The CLI's built-in default batch (256 LMsys-like sequences, fixed seed).
        "$CLI" plan --format json "$@" >"$tmp/cli.json"
        lengths_of "$tmp/cli.json" >"$tmp/lengths.txt"
    fi
    "$PLAN_JSON" "$tmp/lengths.txt" "$@" >"$tmp/c.json"
    if same "$tmp/c.json" "$tmp/cli.json"; then
        pass=$((pass + 1))
        echo "same plan: $name"
    else
        fail=$((fail + 1))
        echo "DIFFERENT plan: $name"
    fi
}

printf '1 2 2 3 4 6 9 14 30 5\n' >"$tmp/readme.txt"
printf '12 40 7 33 25 3 18 9 21 30 2 16\n' >"$tmp/several.txt"
printf '800 800 800\n' >"$tmp/at_budget.txt"

compare "default batch, balanced (the CLI default)" "" --policy balanced
compare "default batch, skrull" "" --policy skrull
compare "default batch, deepspeed" "" --policy deepspeed
compare "default batch, packed" "" --policy packed
compare "default batch, roundrobin" "" --policy roundrobin
compare "default batch, skrull, victim longest, megatron flops" "" --policy skrull --victim longest --flops megatron
compare "default batch, balanced, victim longest" "" --victim longest
compare "default batch, zigzag padding" "" --shard-padding zigzag
compare "default batch, qwen2.5-7b, 13K" "" --model qwen2.5-7b --bucket 13312
compare "default batch, DP 2 x CP 16, 13K" "" --dp 2 --cp 16 --bucket 13312
compare "default batch, DP 2 x CP 16, 13K, sub-groups off" "" --dp 2 --cp 16 --bucket 13312 --subgroups off
compare "default batch, max 64 micro-batches" "" --max-micro-batches 64
compare "readme batch, DP 2 x CP 4, 24" "$tmp/readme.txt" --dp 2 --cp 4 --bucket 24
compare "several micro-batches, DP 2 x CP 2, 24" "$tmp/several.txt" --dp 2 --cp 2 --bucket 24
compare "fewer sequences than DP ranks, at budget" "$tmp/at_budget.txt" --dp 5 --cp 8 --bucket 100
compare "default batch, pad multiple 16, local padding, lockstep" "" --pad-multiple 16 --pad-local --lockstep --shard-padding zigzag
compare "default batch, DP 2 x CP 16, pad multiple 64, lockstep" "" --dp 2 --cp 16 --bucket 13312 --pad-multiple 64 --lockstep
compare "fewer sequences than DP ranks, lockstep" "$tmp/at_budget.txt" --dp 5 --cp 8 --bucket 100 --lockstep
compare "several micro-batches, lockstep, filled" "$tmp/several.txt" --dp 2 --cp 2 --bucket 24 --lockstep --fill-empty
compare "default batch, a fixed count of 6 micro-batches" "" --micro-batches 6
compare "fewer sequences than slots, a fixed count of 3" "$tmp/at_budget.txt" --dp 2 --cp 8 --bucket 100 --micro-batches 3 --policy packed

echo "compare_cli: $pass same, $fail different"
[ "$fail" -eq 0 ]
