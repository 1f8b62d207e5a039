#!/bin/sh
# Builds and runs the transport core's C++ tests (test/native/) without N-API or cmake.
#   scripts/native-test.sh           plain build (-O1 -g)
#   scripts/native-test.sh --tsan    ThreadSanitizer build; any report fails the run
# Extra arguments after the mode select test cases by name. CXX picks the compiler (g++ by default).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
mode=plain
if [ "${1:-}" = "--tsan" ]; then mode=tsan; shift; fi
out="$here/build/native-tests/$mode"
mkdir -p "$out"
flags="-std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter -DTE_HAVE_CUDA=0"
[ "$mode" = tsan ] && flags="$flags -fsanitize=thread"
includes="-I$here/native -I$core/include -I$core/cuda/include -I$core/test"
sources="$here/native/transport.cpp $here/native/transport_batches.cpp $here/native/listener.cpp $here/native/worker_pool.cpp $here/native/lane*.cpp $here/native/server_conn*.cpp $here/native/loop.cpp
  $here/native/cuda_staging.cpp $core/src/status.cpp $core/src/epoch.cpp $core/src/memory_registry.cpp
  $core/src/slice_plan.cpp $core/src/hmac_sha256.cpp $core/src/digest.cpp $core/cuda/src/errors.cpp $core/cuda/src/driver.cpp
  $core/cuda/src/device.cpp $here/test/native/tcp_core_test.cpp $here/test/native/control_order_test.cpp
  $here/test/native/receive_path_test.cpp $here/test/native/loop_test.cpp $here/test/native/writev_test.cpp
  $here/test/native/gather_rows_test.cpp $here/test/native/scatter_rows_test.cpp"
# Compiled in parallel unity batches, only what changed since the last build of this mode.
flags="$flags $includes"
objs=$(sh "$core/scripts/compile-objects.sh" "$out/obj" "$flags" $sources)
${CXX:-g++} $flags $objs -o "$out/tcp_core_test" -lpthread -ldl
# halt_on_error: the first race fails the run (exit 66) instead of being printed and ignored.
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" "$out/tcp_core_test" "$@"
