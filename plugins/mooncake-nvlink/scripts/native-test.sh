#!/bin/sh
# Builds and runs the posix-fd server's C++ test (no GPU or CUDA toolkit needed).
# Exit 77: the cross-user case was skipped (not root).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
core=$(cd "$here/../../native" && pwd)
out="$here/build/native-tests"
mkdir -p "$out"
flags="-std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter -DTE_HAVE_CUDA=0 -pthread -I$here/native -I$core/include -I$core/cuda/include"
# Compiled in parallel unity batches, only what changed since the last build.
objs=$(sh "$core/scripts/compile-objects.sh" "$out/obj" "$flags" "$here/test/native/fd_server_test.cpp" "$here/native/fd_server.cpp" \
  "$here/native/allocator.cpp" "$core/cuda/src/errors.cpp" "$core/cuda/src/driver.cpp" "$core/cuda/src/device.cpp" \
  "$core/src/status.cpp" "$core/src/epoch.cpp")
${CXX:-g++} $flags $objs -o "$out/fd_server_test" -ldl
"$out/fd_server_test"
