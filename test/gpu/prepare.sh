#!/usr/bin/env bash
# Run on the build machine (no GPU needed): builds @te/connector, both CUDA plugins and
# mooncake-tcp (built with CUDA staging),
# bundles the GPU harness into test/gpu/build/harness.mjs (no node_modules needed there),
# copies the built addons and the sources + headers to rebuild them, and packs node for the
# GPU machine (see test/gpu/README.md). Then, on the GPU machine: test/gpu/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
b=test/gpu/build

echo "== building @te/connector, @te/cuda, @te/testkit, @te/staging, @te/disagg, @te/mooncake-intra-nvlink, @te/mooncake-nvlink, @te/mooncake-tcp"
(cd packages/connector && npm run build --silent)
(cd packages/cuda && npm run build --silent)
# The runtime suite (test/gpu/runtime.ts) runs the PD and EC runtime from the packed dist folders.
(cd packages/testkit && npm run build --silent)
(cd packages/staging && npm run build --silent)
(cd packages/disagg && npm run build --silent)
(cd plugins/mooncake-intra-nvlink && npm run build --silent)
(cd plugins/mooncake-nvlink && npm run build --silent)
(cd plugins/mooncake-tcp && npm run build --silent)
node -e "process.exit(require('./plugins/mooncake-tcp/build/Release/te_mooncake_tcp.node').builtWithCuda ? 0 : 1)" ||
  echo "   warning: mooncake-tcp was built without CUDA here; run.sh rebuilds it on the GPU machine"


echo "== bundling the harness"
rm -rf "$b"
mkdir -p "$b/addons" "$b/src/plugins"
node test/gpu/bundle.mjs
cp plugins/mooncake-intra-nvlink/build/Release/te_mooncake_intra_nvlink.node "$b/addons/"
cp plugins/mooncake-nvlink/build/Release/te_mooncake_nvlink.node "$b/addons/"
cp plugins/mooncake-tcp/build/Release/te_mooncake_tcp.node "$b/addons/"

echo "== sources and headers for an on-device rebuild (TE_GPU_REBUILD=1, or when the addons do not load there)"
mkdir -p "$b/src/native"
cp -r native/CMakeLists.txt native/cmake native/include native/src native/cuda "$b/src/native/"
for p in mooncake-intra-nvlink mooncake-nvlink mooncake-tcp; do
  mkdir -p "$b/src/plugins/$p"
  cp -r "plugins/$p/CMakeLists.txt" "plugins/$p/native" "$b/src/plugins/$p/"
  rm -rf "$b/src/plugins/$p/native/te-core" "$b/src/plugins/$p/native/te-cuda"
done
napi_headers=$(node -p "require('path').dirname(require.resolve('node-api-headers/package.json'))")
addon_api=$(node -p "require('path').dirname(require.resolve('node-addon-api/package.json'))")
mkdir -p "$b/src/node-api-headers" "$b/src/node-addon-api"
cp -r "$napi_headers/include" "$b/src/node-api-headers/"
cp "$addon_api"/*.h "$b/src/node-addon-api/"

echo "== node for the GPU machine (it has none)"
if [ ! -f .gpu/node.tar.xz ]; then
  mkdir -p .gpu
  node_bin=$(readlink -f "$(command -v node)")
  tar -C / -cJf .gpu/node.tar.xz "${node_bin#/}"
fi
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { [ -d .git/info ] && echo /.gpu/ >> .git/info/exclude; } || true

echo "== the runtime for the GPU test suites and the loopback bench (test/gpu/bench.sh)"
# node_modules as far as the packages and the test runner need it (zeromq's prebuilt addons
# for linux x64 glibc only), the built packages and addons, the raw libfabric baseline, and
# the shared libraries libfabric and iperf3 need, which a GPU machine usually lacks.
# shellcheck disable=SC2046
tar -cJf .gpu/runtime.tar.xz --exclude='node_modules/zeromq/build/darwin' --exclude='node_modules/zeromq/build/win32' \
  --exclude='node_modules/zeromq/build/linux/arm*' --exclude='*musl*' --exclude='*.map' \
  $(node test/gpu/runtime-files.mjs) $(ls -d packages/*/dist plugins/*/dist plugins/*/build/Release/*.node packages/*/build/Release/*.node) \
  $(node -e "import('./bench/lib/raw-fabric.mjs').then((m) => console.log(require('path').relative(process.cwd(), m.buildRawFabric())))")
libs=$(mktemp -d)
for bin in plugins/mooncake-rdma/build/Release/te_mooncake_rdma.node "$(command -v iperf3 || true)"; do
  [ -n "$bin" ] && [ -e "$bin" ] || continue  # mooncake-rdma is not built where libfabric is missing
  # Everything but the C and C++ runtimes, which the GPU machine has (newer or equal).
  ldd "$bin" | awk '/=> \//{print $3}' | grep -v -E '/lib(c|m|gcc_s|stdc\+\+|crypto|ssl|z)\.so' | xargs -r cp -L -t "$libs"
done
command -v iperf3 >/dev/null && cp -L "$(command -v iperf3)" "$libs/"
tar -C "$libs" -cJf .gpu/libs.tar.xz .
rm -rf "$libs"

# Smoke test here: the bundle and addons load; without a GPU the harness exits 2 with the reason.
set +e
TE_MOONCAKE_INTRA_NVLINK_ADDON="$root/$b/addons/te_mooncake_intra_nvlink.node" TE_MOONCAKE_NVLINK_ADDON="$root/$b/addons/te_mooncake_nvlink.node" \
  TE_MOONCAKE_TCP_ADDON="$root/$b/addons/te_mooncake_tcp.node" \
  OUT="$root/$b/smoke" node "$b/harness.mjs" > "$b/smoke.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
  echo "the bundled harness failed to start here (exit $rc):"; cat "$b/smoke.log"; exit 1
fi
echo "   smoke run here: exit $rc ($(tail -1 "$b/smoke.log"))"
du -sh "$b" .gpu/node.tar.xz .gpu/runtime.tar.xz .gpu/libs.tar.xz
cat <<MSG
== ready. On the GPU machine, with ".gpu" and "test/gpu/build" copied along, run:
   tar -C / -xJf .gpu/node.tar.xz && export PATH=/usr/bin:\$PATH && bash test/gpu/run.sh
   (the transport harness, then the runtime suite with the KV in CUDA memory: test/gpu/runtime.ts)
   then, for the GPU test suites and the loopback bench on that machine: bash test/gpu/bench.sh
MSG
