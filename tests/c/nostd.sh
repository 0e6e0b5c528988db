#!/usr/bin/env bash
# The no_std C library: skrull-ffi without its `std` feature, built as a static library with
# the `release-nostd` profile (panic = "abort"), and tests/c/nostd_plan.c linked against it.
#
#   host   build the no_std library for this machine, check that it needs no system library
#          beyond the C library's mem* functions, then build and run the program against it
#          (feature panic-handler, and again with panic-extern and the program's own
#          skrull_on_panic)
#   thumb  cross-build the library for thumbv7em-none-eabihf and link a bare-metal image with
#          arm-none-eabi-gcc, -nostdlib (link only; no C library at all)
#   sizes  print the sizes of the std and no_std static libraries (as built and without debug
#          info) and of stripped host programs linking each (needs `host` first; `thumb` adds
#          the bare-metal numbers)
#
# usage: bash tests/c/nostd.sh [host] [thumb] [sizes]     (default: host)
# With CARGO_TARGET_DIR set, cargo builds there.
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGET_DIR=${CARGO_TARGET_DIR:-target}
BUILD=tests/c/build/nostd
CC=${CC:-gcc}
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
THUMB=thumbv7em-none-eabihf
# Cortex-M4F, hard-float ABI: what rustc's thumbv7em-none-eabihf target generates.
ARM_FLAGS="-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard"
mkdir -p "$BUILD"

# nostd_lib FEATURE [TARGET]: builds the no_std static library, copies it into $BUILD and
# prints the copy's path.
nostd_lib() {
    local feature=$1 target=${2:-}
    local dir="$TARGET_DIR/release-nostd"
    local args=(-p skrull-ffi --locked --profile release-nostd --no-default-features
        --features "$feature" --crate-type staticlib)
    if [ -n "$target" ]; then
        args+=(--target "$target")
        dir="$TARGET_DIR/$target/release-nostd"
    fi
    cargo rustc "${args[@]}" >&2
    local out="$BUILD/libskrull-nostd-${target:-host}-$feature.a"
    cp "$dir/libskrull.a" "$out"
    echo "$out"
}

# external_symbols READELF ARCHIVE: the symbols the archive uses but does not define. (readelf,
# not nm: nm hands the members that carry LLVM bitcode to its LTO plugin and lists nothing.)
external_symbols() {
    "$1" -sW "$2" | awk '
        $1 ~ /^[0-9]+:$/ && NF >= 8 {
            if ($7 == "UND") used[$8] = 1
            else if ($5 != "LOCAL") defined[$8] = 1
        }
        END { for (s in used) if (!(s in defined)) print s }' | sort
}

host() {
    local lib ext extra
    lib=$(nostd_lib panic-handler)
    # Everything the library needs from outside: at most the C library's mem* functions
    # (the std build needs pthread, dl, unwinding, ...).
    extra=$(external_symbols readelf "$lib" | grep -v -x -E 'mem(cpy|move|set|cmp)|bcmp' || true)
    if [ -n "$extra" ]; then
        echo "FAIL: the no_std library needs more than mem*: $extra"
        return 1
    fi
    "$CC" $WARN -O2 -Iinclude tests/c/nostd_plan.c "$lib" -o "$BUILD/nostd_plan"
    "$BUILD/nostd_plan"
    ext=$(nostd_lib panic-extern)
    "$CC" $WARN -O2 -DSKRULL_PANIC_EXTERN -Iinclude tests/c/nostd_plan.c "$ext" \
        -o "$BUILD/nostd_plan_extern"
    "$BUILD/nostd_plan_extern"
    echo "nostd_host: checks passed (no system library needed; panic-handler and panic-extern)"
}

thumb() {
    if ! command -v arm-none-eabi-gcc >/dev/null 2>&1; then
        echo "FAIL: arm-none-eabi-gcc is missing (apt-get install gcc-arm-none-eabi)"
        return 1
    fi
    local lib extra
    lib=$(nostd_lib panic-handler "$THUMB")
    # compiler_builtins inside the archive brings memcpy and friends: nothing is external.
    extra=$(external_symbols arm-none-eabi-readelf "$lib")
    if [ -n "$extra" ]; then
        echo "FAIL: the bare-metal library needs symbols from outside: $extra"
        return 1
    fi
    arm-none-eabi-gcc $ARM_FLAGS $WARN -Os -ffreestanding -nostdlib -DSKRULL_BARE_METAL \
        -ffunction-sections -fdata-sections -Iinclude tests/c/nostd_plan.c "$lib" -lgcc \
        -Wl,--gc-sections -Wl,-z,noexecstack -Wl,-e,skrull_reset \
        -Wl,--require-defined=skrull_vectors -o "$BUILD/nostd_plan.elf"
    arm-none-eabi-size "$BUILD/nostd_plan.elf"
    echo "nostd_thumb: checks passed (linked $BUILD/nostd_plan.elf for $THUMB)"
}

bytes() { stat -c %s "$1"; }

sizes() {
    local std_a="$TARGET_DIR/release/libskrull.a"
    local nostd_a="$BUILD/libskrull-nostd-host-panic-handler.a"
    cargo build -p skrull-ffi --release --locked >&2
    [ -f "$nostd_a" ] || { echo "FAIL: run '$0 host' first"; return 1; }
    strip -g -o "$BUILD/std-g.a" "$std_a"
    strip -g -o "$BUILD/nostd-g.a" "$nostd_a"
    # The same program against each library: -Os, sections per function, --gc-sections, -s.
    local small="-Os -ffunction-sections -fdata-sections -Wl,--gc-sections -s"
    "$CC" $WARN $small -DSKRULL_WITH_STD -Iinclude tests/c/nostd_plan.c "$std_a" \
        -lpthread -ldl -lm -o "$BUILD/prog-std"
    "$CC" $WARN $small -Iinclude tests/c/nostd_plan.c "$nostd_a" -o "$BUILD/prog-nostd"
    "$CC" $WARN -Os -s -DSKRULL_WITH_STD -Iinclude tests/c/nostd_plan.c "$std_a" \
        -lpthread -ldl -lm -o "$BUILD/prog-std-nogc"
    "$CC" $WARN -Os -s -Iinclude tests/c/nostd_plan.c "$nostd_a" -o "$BUILD/prog-nostd-nogc"
    "$BUILD/prog-std" >/dev/null && "$BUILD/prog-nostd" >/dev/null
    printf '%-58s %12s\n' "artifact (host: $(uname -m), release)" bytes
    printf '%-58s %12s\n' "libskrull.a, std (default)" "$(bytes "$std_a")"
    printf '%-58s %12s\n' "libskrull.a, std, strip -g" "$(bytes "$BUILD/std-g.a")"
    printf '%-58s %12s\n' "libskrull.a, no_std (release-nostd, panic-handler)" "$(bytes "$nostd_a")"
    printf '%-58s %12s\n' "libskrull.a, no_std, strip -g" "$(bytes "$BUILD/nostd-g.a")"
    printf '%-58s %12s\n' "program + std lib, -s" "$(bytes "$BUILD/prog-std-nogc")"
    printf '%-58s %12s\n' "program + std lib, -s --gc-sections" "$(bytes "$BUILD/prog-std")"
    printf '%-58s %12s\n' "program + no_std lib, -s" "$(bytes "$BUILD/prog-nostd-nogc")"
    printf '%-58s %12s\n' "program + no_std lib, -s --gc-sections" "$(bytes "$BUILD/prog-nostd")"
    local thumb_a="$BUILD/libskrull-nostd-$THUMB-panic-handler.a"
    if [ -f "$thumb_a" ] && [ -f "$BUILD/nostd_plan.elf" ]; then
        arm-none-eabi-strip -g -o "$BUILD/thumb-g.a" "$thumb_a"
        printf '%-58s %12s\n' "libskrull.a, no_std, $THUMB" "$(bytes "$thumb_a")"
        printf '%-58s %12s\n' "libskrull.a, no_std, $THUMB, strip -g" \
            "$(bytes "$BUILD/thumb-g.a")"
        printf '%-58s %12s\n' "bare-metal image, text+data (--gc-sections)" \
            "$(arm-none-eabi-size "$BUILD/nostd_plan.elf" | awk 'NR == 2 { print $1 + $2 }')"
    fi
}

steps=("$@")
[ "${#steps[@]}" -gt 0 ] || steps=(host)
for s in "${steps[@]}"; do
    case "$s" in
        host | thumb | sizes) "$s" ;;
        *) echo "usage: $0 [host] [thumb] [sizes]"; exit 2 ;;
    esac
done
