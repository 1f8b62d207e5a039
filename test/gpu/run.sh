#!/usr/bin/env bash
# Runs on a machine with one NVIDIA GPU (H100/H200): two processes on the same device
# exercise mooncake-intra-nvlink (CUDA IPC), mooncake-nvlink (cuMem VMM, posix-fd
# handles) and mooncake-tcp (device memory staged through pinned host buffers, loopback
# TCP, 4 KiB … 256 MiB): register, transfer 4 KiB … 1 GiB verified on the device, bounds
# checks, then bandwidth against the same-process cudaMemcpy baseline. Prepare on the build machine with
# test/gpu/prepare.sh. Logs and gpu-results.json go to $OUT (default test/gpu/build/out).
#   TE_GPU_REBUILD=1        rebuild the addons here with cmake + nvcc's toolkit first
#   TE_GPU_PLUGINS=a,b      only these plugins (mooncake-intra-nvlink, mooncake-nvlink, mooncake-tcp)
#   TE_GPU_MAX_BYTES=N      largest transfer (default 1 GiB)
#   TE_GPU_RUNTIME=0        skip the runtime suite (test/gpu/runtime.ts: PD, layerwise, EC with
#                           the KV in CUDA memory; needs .gpu/runtime.tar.xz from prepare.sh)
#   TE_GPU_RUNTIME_CONNECTORS=a,b   its TP 1→1 connectors (default all three)
#   TE_GPU_RUNTIME_CASES=a,b        its cases (pd, pd-2-4, layerwise, restart, abort, ec; default all)
# Exit: 0 all passed, 1 a check failed, 2 no usable GPU, 3 not prepared.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
b="$root/test/gpu/build"
OUT=${OUT:-$root/test/gpu/build/out}
export OUT
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

echo "== te GPU test $(date -u +%FT%TZ) on $(hostname)"
source test/gpu/node-env.sh
echo "node $(node --version)"
[ -f "$b/harness.mjs" ] || { echo "test/gpu/build/harness.mjs missing: run test/gpu/prepare.sh on the build machine and carry test/gpu/build"; exit 3; }

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,memory.used --format=csv | tee "$OUT/nvidia-smi.csv"
  nvidia-smi topo -m > "$OUT/nvidia-topo.txt" 2>&1 || true
else
  echo "nvidia-smi not found (continuing: the harness reports what CUDA says)"
fi

export TE_MOONCAKE_INTRA_NVLINK_ADDON="$b/addons/te_mooncake_intra_nvlink.node"
export TE_MOONCAKE_NVLINK_ADDON="$b/addons/te_mooncake_nvlink.node"
export TE_MOONCAKE_TCP_ADDON="$b/addons/te_mooncake_tcp.node"

rebuild() {
  echo "== rebuilding the addons here"
  command -v cmake >/dev/null 2>&1 || { echo "cmake not found"; return 1; }
  for p in mooncake-intra-nvlink mooncake-nvlink mooncake-tcp; do
    cmake -S "$b/src/plugins/$p" -B "$b/rebuild/$p" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_JS_INC="$b/src/node-api-headers/include" -DTE_NODE_ADDON_API_DIR="$b/src/node-addon-api" > "$OUT/rebuild-$p.log" 2>&1 &&
      cmake --build "$b/rebuild/$p" -j 8 >> "$OUT/rebuild-$p.log" 2>&1 || { echo "rebuild of $p failed:"; tail -30 "$OUT/rebuild-$p.log"; return 1; }
  done
  export TE_MOONCAKE_INTRA_NVLINK_ADDON=$(find "$b/rebuild/mooncake-intra-nvlink" -name te_mooncake_intra_nvlink.node | head -1)
  export TE_MOONCAKE_NVLINK_ADDON=$(find "$b/rebuild/mooncake-nvlink" -name te_mooncake_nvlink.node | head -1)
  export TE_MOONCAKE_TCP_ADDON=$(find "$b/rebuild/mooncake-tcp" -name te_mooncake_tcp.node | head -1)
  echo "rebuilt: $TE_MOONCAKE_INTRA_NVLINK_ADDON $TE_MOONCAKE_NVLINK_ADDON $TE_MOONCAKE_TCP_ADDON"
}

# mooncake-tcp must also have been built with CUDA (else it would refuse device memory).
loads() { node -e "require(process.env.TE_MOONCAKE_INTRA_NVLINK_ADDON); require(process.env.TE_MOONCAKE_NVLINK_ADDON); if (!require(process.env.TE_MOONCAKE_TCP_ADDON).builtWithCuda) throw new Error('mooncake-tcp addon built without CUDA')"; }
if [ "${TE_GPU_REBUILD:-0}" = 1 ]; then
  rebuild || exit 3
elif ! loads; then
  echo "the prebuilt addons do not load here; rebuilding"
  rebuild || exit 3
fi

node "$b/harness.mjs"
rc=$?
echo "== harness exit $rc (0 ok, 1 check failed, 2 no GPU); results: $OUT/gpu-results.json"
[ $rc -eq 2 ] && exit 2

if [ "${TE_GPU_RUNTIME:-1}" != 0 ]; then
  # The runtime suite needs the control plane (zeromq) and tsx: the packed node_modules.
  [ -f .gpu/runtime.tar.xz ] || { echo ".gpu/runtime.tar.xz missing: run test/gpu/prepare.sh on the build machine and carry .gpu"; exit 3; }
  tar -xJf .gpu/runtime.tar.xz
  echo "== runtime suite (KV in CUDA memory): node --import tsx test/gpu/runtime.ts"
  node --import tsx test/gpu/runtime.ts
  rrc=$?
  echo "== runtime suite exit $rrc (0 ok, 1 check failed, 2 no GPU); results: $OUT/runtime-results.json"
  [ $rc -eq 0 ] && rc=$rrc
fi
exit $rc
