// The same-host report prints how much of each buffer was in huge pages, for mooncake-shm and
// for its memcpy baseline, so that a reader can check both copied between the same kinds of
// pages (the kernel gives shared memory, as shm's pool is, huge pages only where
// shmem_enabled allows; private memory wherever madvise asks). These cases check that what
// is printed is what the kernel did.
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { createTransferEngine } from '@te/connector';
// @ts-expect-error: a plain .mjs helper of the benchmarks, without types
import { buildCBench } from '../bench/lib/c-bench.mjs';
// @ts-expect-error: a plain .mjs helper of the benchmarks, without types
import { hugePageShare, residentPages, shmemHugePolicy } from '../bench/lib/huge-pages.mjs';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest("the benchmark tools' own checks");
const MiB = 1 << 20;
// Policies under which shared memory never gets transparent huge pages.
const sharedNeverHuge = ['never', 'deny'].includes(shmemHugePolicy() as string);

function memcpyBench(...flags: string[]): { sourceHugeShare: number; destinationHugeShare: number; verified: boolean } {
  const r = spawnSync(
    buildCBench('memcpy', 'memcpy_bench') as string,
    ['--size', String(MiB), '--pool-mib', '8', '--threads', '1', '--seconds', '0.05', ...flags],
    {
      encoding: 'utf8',
    },
  );
  assert.is(r.status, 0, r.stdout + r.stderr);
  return JSON.parse(r.stdout.trim());
}

test("memcpy_bench reports each buffer's huge-page share, and a shared source is a memfd the kernel treats as shmem", () => {
  for (const flags of [[], ['--huge-pages'], ['--huge-pages', '--shared-source']]) {
    const r = memcpyBench(...flags);
    assert.ok(r.verified);
    for (const share of [r.sourceHugeShare, r.destinationHugeShare]) assert.ok(share >= 0 && share <= 1, `${flags.join(' ')}: ${share}`);
    if (flags.includes('--shared-source') && sharedNeverHuge) assert.is(r.sourceHugeShare, 0, 'shmem_enabled forbids huge shared pages, yet smaps shows some');
  }
});

test("the share printed for mooncake-shm's pool memory is read from the mapping that holds it", async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-shm' });
  try {
    const { addr, buffer } = await engine.allocateMemory(8 * MiB);
    buffer!.fill(1); // touched: every page resident
    // The mapping was found: all of it is resident once touched.
    const pages = residentPages(addr, 8 * MiB) as { residentKb: number; hugeKb: number };
    assert.ok(pages.residentKb >= 8 * 1024, JSON.stringify(pages));
    const share = hugePageShare(addr, 8 * MiB) as number;
    assert.is(share, pages.hugeKb / pages.residentKb);
    assert.ok(share >= 0 && share <= 1, String(share));
    if (sharedNeverHuge) assert.is(share, 0);
    // A range no mapping holds has nothing resident, hence no share.
    assert.equal(residentPages(8n, 4096), { residentKb: 0, hugeKb: 0 });
  } finally {
    await engine.close();
  }
});

test.run();
