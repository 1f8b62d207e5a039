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
# shellcheck source=../../../native/scripts/sanitizer-mode.sh
. "$core/scripts/sanitizer-mode.sh"
sanitizer_mode "${1:-plain}" "usage: sh scripts/device-map-test.sh [--tsan|--asan-ubsan]"
out="$here/build/native-tests/device-map-$mode"
mkdir -p "$out"
# shellcheck disable=SC2086  # the flags are words
${CXX:-g++} -std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra $flags -I"$here/native" -I"$core/test" \
  "$here/test/native/device_map_test.cpp" -o "$out/device_map_test" -lpthread
run_reporting "$out/device_map_test"
