#!/usr/bin/env bash
# Regression (outside harness: libskrull.so had no SONAME). Checks, on Linux, that
#  1. `readelf -d` (or `objdump -p`) shows SONAME libskrull.so.<SKRULL_ABI_VERSION>, the ABI
#     number in include/skrull.h;
#  2. installed the documented way (docs/c_api.md: the file under its SONAME, plus the
#     development symlink libskrull.so), a C program linked with -lskrull records
#     NEEDED libskrull.so.<ABI> and runs with only that file present.
#
# usage: bash tests/c/soname.sh [LIBSKRULL_SO] [BUILD_DIR]   (run.sh passes both)
set -euo pipefail
cd "$(dirname "$0")/../.."

SO=${1:-${CARGO_TARGET_DIR:-target}/release/libskrull.so}
BUILD=${2:-tests/c/build}
CC=${CC:-gcc}
if [ "$(uname -s)" != Linux ]; then
    echo "soname.sh: skipped: the SONAME is set on Linux only"
    exit 0
fi
ABI=$(sed -n 's/^#define SKRULL_ABI_VERSION \([0-9][0-9]*\)$/\1/p' include/skrull.h)
[ -n "$ABI" ] || { echo "no SKRULL_ABI_VERSION in include/skrull.h"; exit 1; }
WANT="libskrull.so.$ABI"

dynamic() {
    if command -v readelf >/dev/null 2>&1; then
        readelf -d "$1"
    else
        objdump -p "$1"
    fi
}

# 1. The SONAME, exactly once.
got=$(dynamic "$SO" | grep -E 'SONAME' || true)
echo "$SO: $got"
case "$got" in
    *"[$WANT]"* | *" $WANT") ;;
    *) echo "FAIL: $SO has SONAME '$got', want $WANT"; exit 1 ;;
esac
[ "$(printf '%s\n' "$got" | wc -l)" -eq 1 ] || { echo "FAIL: more than one SONAME"; exit 1; }

# 2. Install like docs/c_api.md says, link through the symlink, run through the SONAME.
dir="$BUILD/soname"
rm -rf "$dir"
mkdir -p "$dir/lib"
cp "$SO" "$dir/lib/$WANT"
ln -s "$WANT" "$dir/lib/libskrull.so"
"$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -Iinclude tests/c/snippet.c \
    -L"$dir/lib" -lskrull -o "$dir/snippet"
needed=$(dynamic "$dir/snippet" | grep -E 'NEEDED.*skrull' || true)
echo "snippet: $needed"
case "$needed" in
    *"$WANT"*) ;;
    *) echo "FAIL: the program records '$needed', want NEEDED $WANT"; exit 1 ;;
esac
rm "$dir/lib/libskrull.so"     # the runtime needs only the SONAME file
LD_LIBRARY_PATH="$dir/lib" "$dir/snippet" >"$dir/snippet.out"
grep -q '^seq 9: DP' "$dir/snippet.out" || { echo "FAIL: unexpected output"; cat "$dir/snippet.out"; exit 1; }
echo "soname: checks passed ($WANT)"
