#!/usr/bin/env bash
# Runs the native C++ tests under the sanitizers; clean means exit 0, any report fails.
#   - the core's tests (native/test/core_tests.cpp, the fabric write fences'
#     native/fabric/test/write_fences_test.cpp and the fabric rail's address cache
#     native/fabric/test/address_cache_test.cpp, through native/CMakeLists.txt) under
#     ThreadSanitizer and under AddressSanitizer + UndefinedBehaviorSanitizer;
#   - the mooncake-tcp, mooncake-shm and mooncake-wire transport cores' tests and the CUDA copy engine's tests (on its
#     fault-injection runtime) under ThreadSanitizer, through their own scripts, and mooncake-shm's also under
#     ASan + UBSan;
#   - mooncake-shm's back-pressure test (a live target flooded by a hostile peer) under
#     ThreadSanitizer, and mooncake-tcp's device map test (lookups over overlapping entries,
#     and lookups racing registration churn) under ASan + UBSan and under ThreadSanitizer,
#     through the scripts their TypeScript wrappers run too (scripts/backpressure-test.sh,
#     scripts/device-map-test.sh in each plugin);
#   - the fabric transport's tests (native/fabric/test/transport_test.cpp) under ASan + UBSan;
#   - the staging copier's tests (bounds checks, strided copies, the thread pool) under
#     ThreadSanitizer and under ASan + UBSan (packages/staging/scripts/native-test.sh).
# (The TCP, fabric and shm wire parsers run under ASan + UBSan in the fuzz targets, scripts/fuzz.sh.)
#   bash scripts/sanitize.sh              everything
#   bash scripts/sanitize.sh core         only the core's tests (both sanitizers)
#   bash scripts/sanitize.sh transports   everything but the core's tests
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
case "$what" in
  all | core | transports) ;;
  *) echo "usage: bash scripts/sanitize.sh [all|core|transports]" >&2; exit 2 ;;
esac
root=$PWD
fail=0

# Reports stop the process with a distinct exit status (66) instead of being printed and ignored.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export ASAN_OPTIONS="halt_on_error=1 exitcode=66 detect_leaks=1 detect_stack_use_after_return=1 strict_init_order=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 exitcode=66 print_stacktrace=1 ${UBSAN_OPTIONS:-}"

core() {
  local name=$1 flags=$2
  local build="$root/build/sanitize/core-$name"
  echo "sanitize: core tests under $name"
  # A separate build tree per sanitizer; the core's sources themselves are unchanged.
  # ThreadSanitizer's build in unity batches (faster); AddressSanitizer's one unit per source,
  # so that strict_init_order sees the order in which the units initialize.
  local unity=ON
  [ "$name" = tsan ] || unity=OFF
  cmake -S native -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTE_BUILD_TESTS=ON -DCMAKE_UNITY_BUILD=$unity \
    -DCMAKE_CXX_FLAGS="-O1 -g -fno-omit-frame-pointer $flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
  cmake --build "$build" -j 2 --target te_core_tests te_digest_tests te_write_fences_tests te_address_cache_tests >/dev/null
  if ! "$build/te_core_tests" || ! "$build/te_digest_tests" || ! "$build/te_write_fences_tests" || ! "$build/te_address_cache_tests"; then
    echo "sanitize: core tests under $name FAILED" >&2
    fail=1
  fi
}

# The fabric transport's tests (hostile control messages to a real rail) under ASan + UBSan
# only: libfabric itself is not instrumented, so ThreadSanitizer would report its internals.
fabric() {
  local flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
  local build="$root/build/sanitize/fabric-asan-ubsan"
  echo "sanitize: fabric transport tests under asan-ubsan"
  # One unit per source: see core().
  cmake -S native -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTE_BUILD_TESTS=ON -DCMAKE_UNITY_BUILD=OFF \
    -DCMAKE_CXX_FLAGS="-O1 -g -fno-omit-frame-pointer $flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
  # Skipped only where CMake found no libfabric (the target is not defined then); any other
  # build failure fails the run, so a compile error cannot pass as a skip.
  if grep -qE '^TE_LIBFABRIC_(LIB|INCLUDE):[A-Z]+=.*NOTFOUND$' "$build/CMakeCache.txt"; then
    echo "sanitize: fabric transport tests skipped: no libfabric (apt-get install -y libfabric-dev)"
    return
  fi
  if ! cmake --build "$build" -j 2 --target te_fabric_transport_tests >"$build/build.log" 2>&1; then
    tail -n 30 "$build/build.log" >&2
    echo "sanitize: fabric transport tests under asan-ubsan FAILED (build)" >&2
    fail=1
    return
  fi
  # Leaks inside libfabric's provider threads are not te's; everything else halts the run.
  local rc=0
  ASAN_OPTIONS="$ASAN_OPTIONS detect_leaks=0" "$build/fabric/te_fabric_transport_tests" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    echo "sanitize: fabric transport tests under asan-ubsan FAILED" >&2
    fail=1
  fi
}

run() {
  local label=$1; shift
  echo "sanitize: $label"
  if ! "$@"; then
    echo "sanitize: $label FAILED" >&2
    fail=1
  fi
}

shm=plugins/mooncake-shm
tcp=plugins/mooncake-tcp
asan_ubsan="-fsanitize=address,undefined -fno-sanitize-recover=undefined"

if [ "$what" != transports ]; then
  core tsan "-fsanitize=thread"
  core asan-ubsan "$asan_ubsan"
fi
if [ "$what" != core ]; then
  fabric
  run "mooncake-tcp core tests under tsan" sh $tcp/scripts/native-test.sh --tsan
  run "CUDA copy engine tests under tsan" sh native/cuda/scripts/test.sh --tsan
  run "mooncake-shm core tests under tsan" sh $shm/scripts/native-test.sh --tsan
  run "mooncake-shm core tests under asan-ubsan" sh $shm/scripts/native-test.sh --asan-ubsan
  run "mooncake-wire core tests under tsan" sh plugins/mooncake-wire/scripts/native-test.sh --tsan
  run "staging copier tests under tsan" sh packages/staging/scripts/native-test.sh --tsan
  TE_COMPILE_BATCH=1 run "staging copier tests under asan-ubsan" sh packages/staging/scripts/native-test.sh --asan
  run "mooncake-shm back-pressure test under tsan" sh $shm/scripts/backpressure-test.sh --tsan
  run "mooncake-tcp device map test under asan-ubsan" sh $tcp/scripts/device-map-test.sh --asan-ubsan
  run "mooncake-tcp device map test under tsan" sh $tcp/scripts/device-map-test.sh --tsan
fi
[ "$fail" -eq 0 ] && echo "sanitize: clean"
exit "$fail"
