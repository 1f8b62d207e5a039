// The raw libfabric RMA baseline (bench/fabric-rma/fi_rma_bench.c): configured and built
// with CMake on first use (and again when its source changed), then run as a child process.
import { execFileSync } from 'node:child_process';
import { buildCBench } from './c-bench.mjs';

/** Builds the baseline if needed; throws an error that says what to install. */
export function buildRawFabric() {
  return buildCBench('fabric-rma', 'fi_rma_bench', "cmake, a C compiler and libfabric's headers: apt-get install -y cmake gcc libfabric-dev");
}

/**
 * One run: {op, size, window, endpoints, iov, bytesPerSecond, requestsPerSecond, p50Us, p99Us, verified}.
 * `deliveryComplete`: writes complete only once applied at the target (FI_DELIVERY_COMPLETE),
 * the guarantee te's transports give for a completed write. `fenceEvery` N: only every Nth
 * write of an endpoint asks for it, the writes before it complete once sent (te's write fence,
 * the last write of a batch; 1 is `deliveryComplete`). `thirdThread` ("30:90") adds a
 * thread that spins and sleeps in turn, as te's JS thread does beside its transport threads.
 */
export function runRawFabric({
  op,
  size,
  window,
  seconds,
  provider = 'tcp;ofi_rxm',
  deliveryComplete = false,
  fenceEvery,
  thirdThread,
  endpoints = 1,
  iov = 1,
  span,
}) {
  // `endpoints`: endpoint pairs, each with its own domain, CQ and polling thread on both sides
  // (te's rails); `iov`: requests per operation (te's multi-iov grouping); `window`: operations
  // in flight over all endpoints; `span`: the working set per side that the operations walk
  // (te's, so a small window does not stay in the caches while te streams from memory;
  // default window × iov × size).
  const args = [
    '--op',
    op,
    '--size',
    String(size),
    '--window',
    String(window),
    '--seconds',
    String(seconds),
    '--provider',
    provider,
    '--endpoints',
    String(endpoints),
    '--iov',
    String(iov),
  ];
  if (span) args.push('--span', String(span));
  if (deliveryComplete) args.push('--delivery-complete');
  else if (fenceEvery) args.push('--fence-every', String(fenceEvery));
  // `thirdThread`: "ON_US:OFF_US", a duty-cycled busy thread beside the raw initiator.
  if (thirdThread) args.push('--third-thread', thirdThread);
  const out = execFileSync(buildRawFabric(), args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: (seconds + 60) * 1000,
  });
  return JSON.parse(out.trim().split('\n').pop());
}
