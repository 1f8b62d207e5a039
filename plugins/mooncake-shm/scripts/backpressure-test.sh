#!/bin/sh
# Builds and runs the back-pressure test (test/native/shm_backpressure_test.cpp): a live
# target flooded by a hostile same-user peer, linked with the transport core, no N-API.
# test/backpressure.test.ts and scripts/sanitize.sh (repository root) both run it through
# this script, so its sources are listed once, here.
#   scripts/backpressure-test.sh                plain build (-O1 -g)
#   scripts/backpressure-test.sh --tsan         ThreadSanitizer; any report fails the run
#   scripts/backpressure-test.sh --asan-ubsan   AddressSanitizer + UndefinedBehaviorSanitizer
# CXX picks the compiler (g++ by default).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
# shellcheck source=../../../native/scripts/sanitizer-mode.sh
. "$core/scripts/sanitizer-mode.sh"
sanitizer_mode "${1:-plain}" "usage: sh scripts/backpressure-test.sh [--tsan|--asan-ubsan]"
out="$here/build/native-tests/backpressure-$mode"
mkdir -p "$out"
sources=""
for f in wire socket control_page copy pools server server_copy client client_connection transport; do sources="$sources $here/native/$f.cpp"; done
flags="-std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter $flags -I$here/native -I$core/include -I$core/test"
# Compiled in parallel unity batches, only what changed since the last build of this mode.
# shellcheck disable=SC2086  # the flags and the source list are words
objs=$(sh "$core/scripts/compile-objects.sh" "$out/obj" "$flags" $sources "$core/src/status.cpp" "$core/src/memory_registry.cpp" \
  "$here/test/native/shm_backpressure_test.cpp")
${CXX:-g++} $flags $objs -o "$out/shm_backpressure_test" -lpthread
run_reporting "$out/shm_backpressure_test"
