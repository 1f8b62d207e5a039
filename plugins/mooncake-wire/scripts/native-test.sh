#!/bin/sh
# Builds and runs the mooncake-wire core's C++ tests (test/native/) without N-API or cmake:
# the session parser over memory, and a live target and initiator over loopback.
#   scripts/native-test.sh           plain build (-O1 -g)
#   scripts/native-test.sh --tsan    ThreadSanitizer build; any report fails the run
# CXX picks the compiler (g++ by default).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
mode=plain
if [ "${1:-}" = "--tsan" ]; then mode=tsan; shift; fi
out="$here/build/native-tests/$mode"
mkdir -p "$out"
flags="-std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter"
[ "$mode" = tsan ] && flags="$flags -fsanitize=thread"
sources="$here/native/wire.cpp $here/native/net.cpp $here/native/session.cpp $here/native/target.cpp
  $here/native/initiator.cpp $core/src/status.cpp $core/src/memory_registry.cpp $here/test/native/wire_core_test.cpp"
# Compiled in parallel unity batches, only what changed since the last build of this mode.
flags="$flags -I$here/native -I$core/include -I$core/test"
objs=$(sh "$core/scripts/compile-objects.sh" "$out/obj" "$flags" $sources)
${CXX:-g++} $flags $objs -o "$out/wire_core_test" -lpthread
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" "$out/wire_core_test" "$@"
