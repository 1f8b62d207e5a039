#!/bin/sh
# Builds and runs the core's C++ tests (cmake + ctest), from any working directory.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build/tests"
# A unity build (sources compiled in batches of one translation unit): under half the
# compiler time of one unit per source, which CI's 2 CPUs feel.
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DTE_BUILD_TESTS=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$build" -j 2 >/dev/null
ctest --test-dir "$build" --output-on-failure
