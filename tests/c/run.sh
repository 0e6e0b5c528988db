#!/usr/bin/env bash
# The C-side ABI tests: builds libskrull.a, checks that the header compiles as C and C++,
# compiles the C11 test programs with -Wall -Wextra -Wpedantic -Werror against the header and
# the static library, runs them (plain, under ASan+UBSan, and under valgrind when installed),
# checks the shared library's SONAME (tests/c/soname.sh), runs a program against the no_std
# build (tests/c/nostd.sh host) and compares the C library's plan with the CLI's
# (tests/c/compare_cli.sh).
#
# usage: bash tests/c/run.sh     (from anywhere). Last line: "N passed, M failed".
# With CARGO_TARGET_DIR set, the library is built and linked from there.
set -uo pipefail
cd "$(dirname "$0")/../.."

CC=${CC:-gcc}
CXX=${CXX:-g++}
BUILD=tests/c/build
# The library cargo builds: honours CARGO_TARGET_DIR like cargo itself (default: target/).
LIB=${CARGO_TARGET_DIR:-target}/release/libskrull.a
WARN="-Wall -Wextra -Wpedantic -Werror"
CFLAGS="-std=c11 $WARN -O2 -g -Iinclude -Itests/c"
LIBS="$LIB -lpthread -ldl -lm"
TESTS="abi abi_v1 plan errors threads snippet layout trainer regressions subgroups fill prepared refit chunked window"
passed=0
failed=0
mkdir -p "$BUILD"

# step NAME COMMAND...: runs one step, logs to $BUILD/NAME.log, counts it.
step() {
    local name=$1
    shift
    if "$@" >"$BUILD/$name.log" 2>&1; then
        passed=$((passed + 1))
        echo "ok   $name$(tail -n 1 "$BUILD/$name.log" | sed -n 's/^[a-z_]*: \(.*checks.*\)$/  (\1)/p')"
    else
        failed=$((failed + 1))
        echo "FAIL $name (log: $BUILD/$name.log)"
        tail -n 40 "$BUILD/$name.log" | sed 's/^/     /'
    fi
}

if ! cargo build -p skrull-ffi --release --locked; then
    echo "0 passed, 1 failed"
    exit 1
fi

step header-c99 "$CC" -std=c99 $WARN -fsyntax-only -x c include/skrull.h
step header-c11 "$CC" -std=c11 $WARN -fsyntax-only -x c include/skrull.h
step header-c++11 "$CXX" -std=c++11 $WARN -fsyntax-only -x c++ include/skrull.h
step header-c++17 "$CXX" -std=c++17 $WARN -fsyntax-only -x c++ include/skrull.h

for t in $TESTS; do
    step "build-$t" "$CC" $CFLAGS "tests/c/$t.c" -o "$BUILD/$t" $LIBS
    step "run-$t" "$BUILD/$t"
done

# The C side under AddressSanitizer + UBSan (catches C-side overruns of what skrull wrote).
for t in abi_v1 plan errors layout regressions subgroups fill prepared refit chunked window; do
    step "build-$t-asan" "$CC" $CFLAGS -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
        "tests/c/$t.c" -o "$BUILD/$t-asan" $LIBS
    step "run-$t-asan" env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
        "$BUILD/$t-asan"
done

# Every read and write of the library checked by valgrind (skipped when not installed).
if command -v valgrind >/dev/null 2>&1; then
    for t in abi abi_v1 errors regressions subgroups; do
        step "valgrind-$t" valgrind -q --error-exitcode=99 --leak-check=full \
            --errors-for-leak-kinds=definite "$BUILD/$t"
    done
fi

# The shared library's SONAME (libskrull.so.<ABI>) and a program linked and run through it.
step soname bash tests/c/soname.sh "${CARGO_TARGET_DIR:-target}/release/libskrull.so" "$BUILD"

# The no_std build of the same C API (no std, no system libraries, panics abort): built for
# this machine, checked for outside symbols, and the C program run against it (both panic
# features). The Cortex-M4F link is `bash tests/c/nostd.sh thumb` (in .ci/run).
step nostd-host bash tests/c/nostd.sh host

# The C++ example through its CMake imported target (skipped when cmake is not installed;
# `make -C cpp_example run` is the canonical build).
if command -v cmake >/dev/null 2>&1; then
    step cmake-example bash -c "cmake -S cpp_example -B $BUILD/cmake -DCMAKE_BUILD_TYPE=Release \
        && cmake --build $BUILD/cmake && ctest --test-dir $BUILD/cmake --output-on-failure"
fi

step compare-cli bash tests/c/compare_cli.sh

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
