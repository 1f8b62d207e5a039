#!/bin/sh
# Builds and runs the CUDA layer's C++ tests on the fault-injection runtime (no GPU, no
# CUDA toolkit needed): scripts/test.sh, or scripts/test.sh --tsan for ThreadSanitizer.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/.." && pwd)
mode=plain
if [ "${1:-}" = "--tsan" ]; then mode=tsan; shift; fi
out="$core/build/cuda-tests/$mode"
mkdir -p "$out"
flags="-std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter -DTE_HAVE_CUDA=0 -pthread"
[ "$mode" = tsan ] && flags="$flags -fsanitize=thread"
layer="$here/src/copy_engine.cpp $here/src/copy_runtime.cpp $here/src/cuda_transport.cpp $here/src/errors.cpp
  $here/src/device.cpp $here/src/driver.cpp $here/src/event_waiter.cpp $core/src/status.cpp $core/src/memory_registry.cpp"
tests="copy_engine_test slow_peer_test event_waiter_test"
# The layer compiled once, in parallel unity batches and only what changed; each test's own
# source apart, so that every test links the same layer objects.
compile="$core/scripts/compile-objects.sh"
flags="$flags -I$here/include -I$core/include -I$core/test"
objs=$(sh "$compile" "$out/obj" "$flags" $layer)
for t in $tests; do
  ${CXX:-g++} $flags $(sh "$compile" "$out/obj" "$flags" "$here/test/$t.cpp") $objs -o "$out/$t" -ldl
done
for t in $tests; do
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" "$out/$t"
done
