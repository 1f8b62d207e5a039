// The host's cost of a system call and of a thread's wake-up (bench/host-costs), measured beside
// a benchmark's figures: te's transports pay both on every small batch, the spinning baselines
// do not, and on a virtual machine both depend on the host.
import { execFileSync } from 'node:child_process';
import { buildCBench } from './c-bench.mjs';

/** Runs bench/host-costs for about 2 × `seconds`; returns { syscallNs, syscalls, wakeRoundTripUs, roundTrips, seconds }. */
export function measureHostCosts(seconds = 0.5) {
  const binary = buildCBench('host-costs', 'host_costs');
  const out = execFileSync(binary, ['--seconds', String(seconds)], { encoding: 'utf8', timeout: 60_000 });
  return JSON.parse(out.trim().split('\n').pop());
}

/** The report's line: "host costs: a system call (getppid) 992 ns before, 1057 after; a wake-up round trip … 15.5 µs before, 24.6 after" (one figure each without `after`). */
export function hostCostsLine(before, after) {
  const pair = (a, b, digits, unit) => (b ? `${a.toFixed(digits)} ${unit} before, ${b.toFixed(digits)} after` : `${a.toFixed(digits)} ${unit}`);
  return (
    `host costs: a system call (getppid) ${pair(before.syscallNs, after?.syscallNs, 0, 'ns')}; ` +
    `a wake-up round trip between two threads (eventfd) ${pair(before.wakeRoundTripUs, after?.wakeRoundTripUs, 1, 'µs')}`
  );
}
