#!/usr/bin/env bash
# The trainer refuses bad input with skrull's status name and the library's sentence, and a
# non-zero exit: a length file with garbage, lengths skrull refuses (over the budget, 0,
# negative), a missing file and a bad flag. With the torch op's library as the second
# argument, every refused batch is also refused by torch.ops.skrull.schedule with the same
# message (the trainer's --check-op).
# Usage: bad_input.sh <skrull_libtorch_trainer> [<skrull_ops library>]
set -u
trainer=$1
op=${2:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

# expect <exit code> <text the error output must hold> <lengths file content | -> <args...>
expect() {
    local code=$1 want=$2 content=$3
    shift 3
    if [[ $content != - ]]; then
        printf '%s' "$content" >"$dir/lengths.txt"
        set -- --lengths "$dir/lengths.txt" "$@"
    fi
    local err rc=0 same=
    if [[ -n $op && $code == 3 ]]; then
        set -- "$@" --check-op "$op"
        same="the torch op refuses the batch with the same message"
    fi
    err=$("$trainer" "$@" 2>&1 >/dev/null) || rc=$?
    if [[ $rc != "$code" ]] || [[ $err != *"$want"* ]] || [[ $err != *"$same"* ]]; then
        echo "FAILED: $* -> exit $rc (wanted $code), output:"
        echo "$err"
        echo "  (wanted it to contain: $want)"
        failures=$((failures + 1))
    else
        echo "ok: exit $rc: $(echo "$err" | head -1)"
    fi
}

expect 2 "lengths.txt:2: '3x' is not a length (a whole number of tokens)" $'12\n3x\n40\n'
expect 3 "error: step 0: skrull_schedule_prepared: SKRULL_STATUS_SEQUENCE_TOO_LONG (17): sequence 1 has 300 tokens, too many for bucket_tokens=256: its share of each GPU (padding included) needs a BucketSize of 300" $'12\n300\n40\n'
expect 3 "sequence 1 is line 3 of" $'# a comment\n12\n300 # too long\n40\n'
expect 3 "SKRULL_STATUS_SEQUENCE_TOO_LONG (17): sequence 0 has 250 tokens, too many for bucket_tokens=62: its share of each GPU (padding included) needs a BucketSize of 64" $'250\n' --cp 4 --bucket 62 --zigzag
expect 3 "SKRULL_STATUS_EMPTY_SEQUENCE (15): sequence 2 has 0 tokens" $'12\n30\n0\n'
expect 3 "SKRULL_STATUS_LENGTH_OUT_OF_RANGE (16): sequence 0 has a negative length (-5): a length is a token count from 1 to 2147483647" $'-5\n30\n'
expect 3 "SKRULL_STATUS_LENGTH_OUT_OF_RANGE (16): sequence 1 has 30000000000 tokens, more than the 2147483647 tokens" $'12\n30000000000\n'
expect 3 "SKRULL_STATUS_LENGTH_OUT_OF_RANGE (16): sequence 1 has 3000000000 tokens, more than the 2147483647 tokens" $'12\n3000000000\n'
expect 2 "holds no length" $'# nothing\n'
expect 2 "cannot be read" - --lengths "$dir/missing.txt"
expect 2 "bad argument near '--dp'" - --dp 0
expect 2 "bad argument near '--policy'" - --policy chunkflow

if [[ $failures != 0 ]]; then
    echo "$failures bad-input check(s) failed"
    exit 1
fi
echo "every bad input refused"
