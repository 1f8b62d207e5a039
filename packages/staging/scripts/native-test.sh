#!/bin/sh
# Builds and runs the staging copier's and checksummer's C++ tests (test/native/) without N-API or cmake.
#   scripts/native-test.sh           plain build (-O1 -g)
#   scripts/native-test.sh --tsan    ThreadSanitizer build; any report fails the run
#   scripts/native-test.sh --asan    AddressSanitizer + UBSan build
# CXX picks the compiler (g++ by default).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
mode=plain
case "${1:-}" in --tsan) mode=tsan; shift ;; --asan) mode=asan; shift ;; esac
out="$here/build/native-tests/$mode"
mkdir -p "$out"
flags="-std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter"
[ "$mode" = tsan ] && flags="$flags -fsanitize=thread"
[ "$mode" = asan ] && flags="$flags -fsanitize=address,undefined -fno-sanitize-recover=all"
sources="$here/native/strided_copy.cpp $here/native/copy_pool.cpp $here/native/crc32c.cpp $here/native/checksum_batch.cpp $core/src/status.cpp $here/test/native/staging_core_test.cpp $here/test/native/checksum_test.cpp"
# Compiled in parallel unity batches, only what changed since the last build of this mode.
flags="$flags -I$here/native -I$core/include -I$core/test"
objs=$(sh "$core/scripts/compile-objects.sh" "$out/obj" "$flags" $sources)
${CXX:-g++} $flags $objs -o "$out/staging_core_test" -lpthread
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" "$out/staging_core_test" "$@"
