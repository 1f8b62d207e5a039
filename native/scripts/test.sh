#!/bin/sh
# Builds and runs the core's C++ tests (cmake + ctest), from any working directory.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build/tests"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTE_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j 2 >/dev/null
ctest --test-dir "$build" --output-on-failure
