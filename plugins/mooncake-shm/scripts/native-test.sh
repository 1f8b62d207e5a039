#!/bin/sh
# Builds and runs the mooncake-shm core's C++ tests (test/native/) without N-API or cmake:
# the wire parser on malformed and random input, a live target answering hostile clients,
# an initiator closed while a target is inside a copy, and pool memory (shm_pool_test).
#   scripts/native-test.sh           plain build (-O1 -g)
#   scripts/native-test.sh --tsan    ThreadSanitizer build; any report fails the run
#   scripts/native-test.sh --asan-ubsan   AddressSanitizer and UBSan build; any report fails it
# CXX picks the compiler (g++ by default).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
mode=plain
case "${1:-}" in
  --tsan) mode=tsan; shift ;;
  --asan-ubsan) mode=asan-ubsan; shift ;;
esac
out="$here/build/native-tests/$mode"
mkdir -p "$out"
flags="-std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter"
[ "$mode" = tsan ] && flags="$flags -fsanitize=thread"
[ "$mode" = asan-ubsan ] && flags="$flags -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
sources="$here/native/wire.cpp $here/native/socket.cpp $here/native/control_page.cpp $here/native/copy.cpp $here/native/pools.cpp
  $here/native/server.cpp $here/native/server_copy.cpp $here/native/client.cpp $here/native/client_connection.cpp $here/native/transport.cpp
  $core/src/status.cpp $core/src/memory_registry.cpp"
# The transport's sources compiled once, in parallel unity batches and only what changed;
# each test program's own sources apart, so that both link the same transport objects.
compile="$core/scripts/compile-objects.sh"
flags="$flags -I$here/native -I$core/include -I$core/test"
objs=$(sh "$compile" "$out/obj" "$flags" $sources)
core_test=$(sh "$compile" "$out/obj" "$flags" "$here/test/native/shm_core_test.cpp" "$here/test/native/shm_client_stop_test.cpp" \
  "$here/test/native/shm_deep_window_test.cpp")
pool_tests=$(sh "$compile" "$out/obj" "$flags" "$here/test/native/shm_pool_test.cpp" "$here/test/native/shm_pool_live_test.cpp")
${CXX:-g++} $flags $objs $core_test -o "$out/shm_core_test" -lpthread
${CXX:-g++} $flags $objs $pool_tests -o "$out/shm_pool_test" -lpthread
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" "$out/shm_core_test" "$@"
# The pool tests run with the whole suite, not with a single named core case.
if [ $# -eq 0 ]; then
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" "$out/shm_pool_test"
fi
