// Thread pools are sized from the CPUs a process may use: the affinity mask, capped by a
// cgroup CPU quota (what a container's CPU limit sets), read for cgroup v2 and v1 from the
// process's own cgroup up to the root.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { availableParallelism } from 'node:os';
import { cgroupCpuQuota, usableCpus } from '../src/index.js';

const fs = (files: Record<string, string>) => (path: string) => files[path];

test('cgroup v2: cpu.max of the own cgroup or an ancestor, rounded up; "max" is no limit', () => {
  assert.is(cgroupCpuQuota(fs({ '/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': '150000 100000\n' })), 2);
  assert.is(cgroupCpuQuota(fs({ '/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': 'max 100000\n' })), undefined);
  const nested = fs({
    '/proc/self/cgroup': '0::/kubepods/pod1/c1\n',
    '/sys/fs/cgroup/kubepods/pod1/c1/cpu.max': 'max 100000',
    '/sys/fs/cgroup/kubepods/pod1/cpu.max': '300000 100000',
    '/sys/fs/cgroup/kubepods/cpu.max': '1600000 100000',
  });
  assert.is(cgroupCpuQuota(nested), 3, 'the tightest quota on the way up');
  assert.is(usableCpus({ affinity: 64, read: nested }), 3);
});

test('cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us under the cpu controller; -1 is no limit', () => {
  const v1 = (quota: string) =>
    fs({
      '/proc/self/cgroup': '4:memory:/x\n2:cpu,cpuacct:/docker/abc\n',
      '/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us': quota,
      '/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us': '100000',
    });
  assert.is(cgroupCpuQuota(v1('50000\n')), 1);
  assert.is(cgroupCpuQuota(v1('400000\n')), 4);
  assert.is(cgroupCpuQuota(v1('-1\n')), undefined);
});

test('no quota, unreadable or malformed files: the affinity mask alone; a quota never raises it', () => {
  assert.is(usableCpus({ affinity: 6, read: () => undefined }), 6);
  assert.is(usableCpus({ affinity: 6, read: fs({ '/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': 'lots of cpus' }) }), 6);
  assert.is(usableCpus({ affinity: 2, read: fs({ '/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': '800000 100000' }) }), 2);
  assert.ok(usableCpus() >= 1 && usableCpus() <= availableParallelism(), 'this machine');
});

test.run();
