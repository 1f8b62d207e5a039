import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTransferEngine } from '@te/connector';
import { poolPages } from '../src/pool-pages.js';

/*
 * describe().poolPages says which pages the kernel gives pool memory (a memfd mapped shared):
 * shared memory follows shmem_enabled, and where that rules huge pages out the text names the
 * setting that lets them in.
 */
const dir = mkdtempSync(join(tmpdir(), 'te-shm-pool-pages-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

function withPolicy(line: string): string {
  const file = join(dir, 'shmem_enabled');
  writeFileSync(file, `${line}\n`);
  return poolPages(file);
}

test("each shmem_enabled setting: the pool's pages, and the fix where they are 4 KiB", () => {
  assert.is(withPolicy('always within_size [advise] never deny force'), '2 MiB where whole huge pages fit (shmem_enabled: advise)');
  assert.is(withPolicy('[always] within_size advise never deny force'), '2 MiB where whole huge pages fit (shmem_enabled: always)');
  assert.is(withPolicy('always [within_size] advise never deny force'), '2 MiB where whole huge pages fit (shmem_enabled: within_size)');
  for (const line of ['always within_size advise [never] deny force', 'always within_size advise never [deny] force']) {
    const text = withPolicy(line);
    assert.match(
      text,
      /^4 KiB \(shmem_enabled: (never|deny); "advise" would let the pool's hint take 2 MiB pages: echo advise > \/sys\/kernel\/mm\/transparent_hugepage\/shmem_enabled\)$/,
    );
  }
  // A kernel without the file (no transparent huge pages) or with a format not understood.
  assert.is(poolPages(join(dir, 'absent')), '4 KiB (this kernel gives shared memory no transparent huge pages)');
  assert.is(withPolicy('garbage'), '4 KiB (this kernel gives shared memory no transparent huge pages)');
});

test("describe() reports this machine's setting", async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-shm' });
  try {
    assert.is((engine.describe()['mooncake-shm'] as Record<string, unknown>).poolPages, poolPages());
  } finally {
    await engine.close();
  }
});

test.run();
