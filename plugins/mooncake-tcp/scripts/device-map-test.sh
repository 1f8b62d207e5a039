#!/bin/sh
# Builds and runs the device map test (test/native/device_map_test.cpp, header-only:
# lookups over overlapping entries, and lookups racing registration churn).
# test/device-map.test.ts and scripts/sanitize.sh (repository root) both run it through
# this script, so how it is built is written once, here.
#   scripts/device-map-test.sh                plain build (-O1 -g)
#   scripts/device-map-test.sh --tsan         ThreadSanitizer; any report fails the run
#   scripts/device-map-test.sh --asan-ubsan   AddressSanitizer + UndefinedBehaviorSanitizer
# CXX picks the compiler (g++ by default).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
case "${1:-plain}" in
  plain) mode=plain; flags="" ;;
  --tsan) mode=tsan; flags="-fsanitize=thread" ;;
  --asan-ubsan) mode=asan-ubsan; flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
  *) echo "usage: sh scripts/device-map-test.sh [--tsan|--asan-ubsan]" >&2; exit 2 ;;
esac
out="$here/build/native-tests/device-map-$mode"
mkdir -p "$out"
# shellcheck disable=SC2086  # the flags are words
${CXX:-g++} -std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra $flags -I"$here/native" -I"$core/test" \
  "$here/test/native/device_map_test.cpp" -o "$out/device_map_test" -lpthread
# A report stops the run with a distinct status (66) instead of being printed and ignored.
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" ASAN_OPTIONS="halt_on_error=1 exitcode=66 ${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="halt_on_error=1 exitcode=66 print_stacktrace=1 ${UBSAN_OPTIONS:-}" "$out/device_map_test"
