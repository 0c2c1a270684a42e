#!/usr/bin/env bash
# Smoke run of the reader fuzzers (tests/fuzz/run.sh: four fuzzers, 4 s each, under a minute with their builds)
# when clang can build a libFuzzer binary here; otherwise skipped (exit 0).
# $1 is the build dir (unused: run.sh builds its own ASan/UBSan binaries).
# Nothing is written to the source tree: run.sh works in a mktemp -d directory.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cc=${FUZZ_CC:-clang}
probe=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-fuzzprobe.XXXXXX")
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
    >"$probe/p.c"
if ! command -v "$cc" >/dev/null 2>&1 ||
   ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1 ||
   ! "$probe/p" -runs=1 >/dev/null 2>&1; then
    echo "skipped: clang/libFuzzer not available"
    exit 0
fi
bash "$here/fuzz/run.sh" 4
