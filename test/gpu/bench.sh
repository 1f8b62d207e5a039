#!/usr/bin/env bash
# Runs on the GPU machine after test/gpu/run.sh's preparation (test/gpu/prepare.sh on the
# build machine packs .gpu/runtime.tar.xz and .gpu/libs.tar.xz): the GPU cases of the
# plugins' test suites, which are skipped on a machine without a GPU, then the loopback
# benchmark (bench/vs-iperf3.mjs, arguments passed through) on that machine's cores.
#   TE_GPU_SUITES=0   skip the suites     TE_GPU_BENCH=0   skip the benchmark
# Logs go to $OUT (default test/gpu/build/out). Exit: 0 passed, 1 a suite or the benchmark
# failed, 3 not prepared.
set -uo pipefail
bench_args=("$@")
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/test/gpu/build/out}
mkdir -p "$OUT"
source test/gpu/node-env.sh
for f in runtime libs; do [ -f ".gpu/$f.tar.xz" ] || { echo ".gpu/$f.tar.xz missing: run test/gpu/prepare.sh on the build machine and carry .gpu"; exit 3; }; done
tar -xJf .gpu/runtime.tar.xz
# The baseline's binary must look newer than its source, or the benchmark rebuilds it
# (there are no libfabric headers here).
find bench -name fi_rma_bench -type f -exec touch {} +
mkdir -p .gpu/lib && tar -C .gpu/lib -xJf .gpu/libs.tar.xz
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v iperf3 >/dev/null 2>&1 || { [ -x .gpu/lib/iperf3 ] && mkdir -p .gpu/bin && cp .gpu/lib/iperf3 .gpu/bin/ && export PATH=$PATH:$root/.gpu/bin; }
echo "== $(nproc) CPUs, $(grep -m1 PRETTY_NAME /etc/os-release | cut -d= -f2), node $(node --version)" | tee "$OUT/bench-env.txt"
rc=0
if [ "${TE_GPU_SUITES:-1}" != 0 ]; then
  for d in plugins/mooncake-intra-nvlink plugins/mooncake-nvlink "plugins/mooncake-tcp cuda"; do
    read -r dir only <<< "$d"
    log="$OUT/suite-$(basename "$dir")${only:+-$only}.log"
    (cd "$dir" && timeout 300 node ../../scripts/uvu.mjs test "${only}.*\\.test\\.ts\$" -i fixtures) > "$log" 2>&1
    s=$?
    [ $s -eq 0 ] || rc=1
    echo "suite $d: exit $s, $(grep -E '^\s*(Total|Passed|Skipped):' "$log" | sed 's/\x1b\[[0-9;]*m//g' | tr -s ' \n' ' ')"
    grep -E 'skipped "|FAIL|✘' "$log" | sed 's/\x1b\[[0-9;]*m//g' | head -10
  done
fi
if [ "${TE_GPU_BENCH:-1}" != 0 ]; then
  if node bench/vs-iperf3.mjs "${bench_args[@]}" > "$OUT/bench.log" 2>&1; then
    sed -n '/^iperf3 single stream/,$p' "$OUT/bench.log"
  else
    rc=1
    echo "the benchmark failed:"
    tail -30 "$OUT/bench.log"
  fi
fi
exit $rc
