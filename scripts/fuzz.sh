#!/usr/bin/env bash
# Runs every fuzz target for a fixed budget (seconds each, default 60): the libFuzzer
# targets for the wire parsers (mooncake-tcp frames end to end, fabric control messages,
# mooncake-shm datagrams, the mooncake-wire target's Mooncake data-path session),
# built with clang and AddressSanitizer + UndefinedBehaviorSanitizer, and the control-plane
# fuzzer (JS: envelope and message decoding through the real control server). Exits
# non-zero on the first crash; the reproducer is left in fuzz/crashes/.
#   bash scripts/fuzz.sh [seconds]
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-${TE_FUZZ_SECONDS:-60}}"
out=build/fuzz
mkdir -p "$out" fuzz/crashes
command -v clang++ >/dev/null || { echo "fuzz: clang++ is needed (Debian: apt-get install -y clang libclang-rt-14-dev)" >&2; exit 2; }

flags="-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DTE_HAVE_CUDA=0 -pthread"
# Each target's sources are compiled in parallel unity batches, again only where they changed
# (native/scripts/compile-objects.sh), then linked with the fuzzer's runtime.
build() {
  local name=$1 includes=$2 objs
  shift 2
  objs=$(CXX=clang++ sh native/scripts/compile-objects.sh "$out/obj-$name" "$flags $includes" "$@")
  # shellcheck disable=SC2086  # objs and flags are words
  clang++ $flags $objs -ldl -o "$out/$name"
}
tcp=plugins/mooncake-tcp/native
wire=plugins/mooncake-wire/native
build fabric_messages "-Inative/fabric/src -Inative/fabric/include" fuzz/fabric_messages.cpp native/fabric/src/wire.cpp
build shm_messages "-Iplugins/mooncake-shm/native -Inative/include" fuzz/shm_messages.cpp plugins/mooncake-shm/native/wire.cpp native/src/status.cpp
# Every source of the TCP transport core except its Node-API addon.
# shellcheck disable=SC2046  # the transport's sources are words
build tcp_frames "-I$tcp -Inative/include -Inative/cuda/include" fuzz/tcp_frames.cpp $(ls $tcp/*.cpp | grep -v addon.cpp) \
  native/src/status.cpp native/src/epoch.cpp native/src/memory_registry.cpp native/src/slice_plan.cpp native/src/hmac_sha256.cpp native/src/digest.cpp \
  native/cuda/src/errors.cpp native/cuda/src/driver.cpp native/cuda/src/device.cpp
# The Mooncake-compatible data-path session of mooncake-wire, over an in-memory stream.
build mooncake_wire_session "-I$wire -Inative/include" fuzz/mooncake_wire_session.cpp $wire/session.cpp $wire/wire.cpp \
  native/src/status.cpp native/src/memory_registry.cpp

run() {
  local name=$1; shift
  local work="$out/corpus-$name"
  mkdir -p "$work"
  echo "fuzz: $name for ${budget}s"
  # The committed seeds are read-only input; new findings go to the scratch corpus.
  local log="$out/$name.log" status=0
  "$out/$name" -max_total_time="$budget" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="fuzz/crashes/$name-" "$@" "$work" "fuzz/corpus/$name" >"$log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)' "$log" | sed "s/^/  /" || true
  if [ "$status" -ne 0 ]; then
    grep -A40 -E '==[0-9]+==ERROR|deadly signal|Timeout|out-of-memory' "$log" | head -60 >&2
    echo "fuzz: $name FAILED (exit $status); reproducer in fuzz/crashes/, full log $log" >&2
    exit 1
  fi
}
run fabric_messages -max_len=70000
run tcp_frames -max_len=20000
TE_FUZZ_SECRET=1 run tcp_frames -max_len=20000
run shm_messages -max_len=70000
run mooncake_wire_session -max_len=70000
# mooncake-wire's handshake side (JS): frame reader, JSON and descriptor parsers in process, a
# real handshake server with a canary Probe, a real client facing a hostile server.
echo "fuzz: mooncake_handshake for ${budget}s"
node --import tsx fuzz/mooncake-handshake.ts "$budget"
echo "fuzz: control_plane for ${budget}s"
node --import tsx fuzz/control-plane.ts "$budget"
# The decoding stages themselves (codec, envelope and descriptor checks) in process, through a
# real control server and a real control client: only TransferErrors, nothing unhandled.
echo "fuzz: control_decode for ${budget}s"
node --import tsx fuzz/control-decode.ts "$budget"
