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
case "${1:-plain}" in
  plain) mode=plain; flags="" ;;
  --tsan) mode=tsan; flags="-fsanitize=thread" ;;
  --asan-ubsan) mode=asan-ubsan; flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
  *) echo "usage: sh scripts/backpressure-test.sh [--tsan|--asan-ubsan]" >&2; exit 2 ;;
esac
out="$here/build/native-tests/backpressure-$mode"
mkdir -p "$out"
sources=""
for f in wire socket control_page copy server client transport; do sources="$sources $here/native/$f.cpp"; done
# shellcheck disable=SC2086  # the flags and the source list are words
${CXX:-g++} -std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter $flags \
  -I"$here/native" -I"$core/include" -I"$core/test" $sources "$core/src/status.cpp" "$core/src/memory_registry.cpp" \
  "$here/test/native/shm_backpressure_test.cpp" -o "$out/shm_backpressure_test" -lpthread
# A report stops the run with a distinct status (66) instead of being printed and ignored.
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" ASAN_OPTIONS="halt_on_error=1 exitcode=66 ${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="halt_on_error=1 exitcode=66 print_stacktrace=1 ${UBSAN_OPTIONS:-}" "$out/shm_backpressure_test"
