import { usableCpus } from '@te/connector';

/**
 * Default I/O threads (and lanes per peer) for a process that may use `cores` CPUs (the
 * affinity mask capped by a cgroup CPU quota): 2 on
 * small machines, one per 4 cores up to 4. On a 16-core host 4 threads and 4 lanes moved
 * 1.27–1.42× the bytes of 2 (64 KiB and 1 MiB small batches, 4 KiB requests; loopback,
 * docs/benchmarks.md); on 2 cores more threads than cores only contend. Loopback puts both
 * ends on one host, so a quarter of the cores leaves room for the peer and the JS threads.
 */
export function defaultIoThreads(cores: number = usableCpus()): number {
  return Math.min(4, Math.max(2, Math.floor(cores / 4)));
}
