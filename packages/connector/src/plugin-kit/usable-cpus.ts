import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/** Reads a file's text, or undefined when it cannot be read (tests pass their own). */
export type ReadText = (path: string) => string | undefined;

/** The file system's text. */
export const readText: ReadText = (path) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
};

/** `path` and each folder above it, up to `/`. */
function selfAndAncestors(path: string): string[] {
  const out: string[] = [];
  let p = path.replace(/\/+$/, '') || '/';
  for (;;) {
    out.push(p);
    if (p === '/') return out;
    p = p.slice(0, p.lastIndexOf('/')) || '/';
  }
}

/** CPUs a quota of `quota` µs per `period` µs amounts to (rounded up), or undefined for none. */
function cpusOf(quota: number, period: number): number | undefined {
  if (!Number.isFinite(quota) || !Number.isFinite(period) || quota <= 0 || period <= 0) return undefined;
  return Math.max(1, Math.ceil(quota / period));
}

/**
 * The tightest CPU quota of this process's cgroups (cgroup v2 `cpu.max`, v1
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us`), from its own cgroup up to the root of the
 * mount, in CPUs; undefined when none is set or none can be read.
 */
export function cgroupCpuQuota(read: ReadText = readText): number | undefined {
  const lines = (read('/proc/self/cgroup') ?? '').split('\n').filter(Boolean);
  const found: number[] = [];
  for (const line of lines) {
    const [, controllers = '', path = '/'] = line.split(':');
    if (controllers === '') {
      for (const dir of selfAndAncestors(path)) {
        const [quota, period] = (read(`/sys/fs/cgroup${dir === '/' ? '' : dir}/cpu.max`) ?? '').trim().split(/\s+/);
        const n = quota === 'max' ? undefined : cpusOf(Number(quota), Number(period));
        if (n !== undefined) found.push(n);
      }
    } else if (controllers.split(',').includes('cpu')) {
      for (const mount of ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct']) {
        for (const dir of selfAndAncestors(path)) {
          const base = `${mount}${dir === '/' ? '' : dir}`;
          const n = cpusOf(Number((read(`${base}/cpu.cfs_quota_us`) ?? '').trim()), Number((read(`${base}/cpu.cfs_period_us`) ?? '').trim()));
          if (n !== undefined) found.push(n);
        }
      }
    }
  }
  return found.length ? Math.min(...found) : undefined;
}

/**
 * CPUs this process may use, for sizing thread pools: the affinity mask (Node's
 * availableParallelism), capped by a cgroup CPU quota where one is set, as container
 * runtimes set for a CPU limit. A quota does not show in the affinity mask: a container
 * limited to 2 CPUs on a 64-core host still sees 64 there.
 */
export function usableCpus(options: { affinity?: number; read?: ReadText } = {}): number {
  const affinity = options.affinity ?? availableParallelism();
  const quota = cgroupCpuQuota(options.read);
  return quota === undefined ? affinity : Math.max(1, Math.min(affinity, quota));
}
