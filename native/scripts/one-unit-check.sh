#!/bin/sh
# Compiles each native target's sources as one translation unit (syntax only), as CMake's
# unity build (-DCMAKE_UNITY_BUILD=ON) would: two files of one target must not define the
# same name in their anonymous namespaces. The plugins' addon.cpp is included, with the
# Node-API headers from node_modules; where the CUDA toolkit is installed the CUDA layer and
# the CUDA plugins are checked with it as well as without it, and the libfabric layer with
# libfabric where its headers are installed. Exit: 0 clean, 1 a collision (the compiler's
# error is printed).
#   sh native/scripts/one-unit-check.sh        (from the repository root or anywhere)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
napi="$(dirname "$(node -p "require.resolve('node-api-headers/package.json')")")/include"
addon_api="$(dirname "$(node -p "require.resolve('node-addon-api/package.json')")")"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
have_cuda=0
[ -f "$cuda_home/include/cuda_runtime.h" ] && have_cuda=1
have_fabric=0
printf '#include <rdma/fabric.h>\n' | ${CXX:-g++} -x c++ -fsyntax-only - 2>/dev/null && have_fabric=1
unit=$(mktemp -d)
trap 'rm -rf "$unit"' EXIT
failed=0

# check NAME CUDA(0|1) FABRIC(0|1) DIR [EXCLUDED FILE NAMES...]
check() {
  name=$1 cuda=$2 fabric=$3 dir=$4
  shift 4
  : > "$unit/$name.cpp"
  for f in "$dir"/*.cpp; do
    skip=0
    for x in "$@"; do [ "$(basename "$f")" = "$x" ] && skip=1; done
    [ $skip = 1 ] || printf '#include "%s"\n' "$root/$f" >> "$unit/$name.cpp"
  done
  extra=""
  [ "$cuda" = 1 ] && extra="-I$cuda_home/include"
  # shellcheck disable=SC2086  # extra is words
  if ${CXX:-g++} -std=c++17 -fsyntax-only -DTE_HAVE_CUDA="$cuda" -DTE_HAVE_LIBFABRIC="$fabric" \
      -DTE_CUDA_TOOLKIT_VERSION='"check"' -DTE_BAREX_VENDOR_LIB='"check"' -DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS -DBUILDING_NODE_EXTENSION \
      -I"$dir" -Inative/include -Inative/fabric/include -Inative/cuda/include -I"$napi" -I"$addon_api" $extra \
      "$unit/$name.cpp" 2> "$unit/$name.err"; then
    echo "one unit: $name ok"
  else
    echo "one unit: $name FAILED"
    grep -E 'error' "$unit/$name.err" | head -10
    failed=1
  fi
}

# digest_avx2.cpp is built alone, with -mavx2, and kept out of a unity build (native/CMakeLists.txt).
check core 0 0 native/src digest_avx2.cpp
if [ $have_fabric = 1 ]; then check fabric 0 1 native/fabric/src stub.cpp; else check fabric-stub 0 0 native/fabric/src; fi
for cuda in 0 $( [ $have_cuda = 1 ] && echo 1 ); do
  check "cuda-layer-cuda$cuda" "$cuda" 0 native/cuda/src
  for p in mooncake-intra-nvlink mooncake-nvlink mooncake-tcp; do check "$p-cuda$cuda" "$cuda" 0 "plugins/$p/native"; done
done
for p in mooncake-shm; do check "$p" 0 0 "plugins/$p/native"; done
check staging 0 0 packages/staging/native
for p in mooncake-rdma barex; do check "$p" 0 "$have_fabric" "plugins/$p/native"; done
[ $failed = 0 ] && echo "one unit: clean"
exit $failed
