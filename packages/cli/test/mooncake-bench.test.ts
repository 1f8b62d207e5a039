// `te bench --wire mooncake`: its verifier fails on one corrupted byte, and its usage errors.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { isTransferError } from '@te/connector';
import { checkSame } from '../src/bench/mooncake.js';

const te = fileURLToPath(new URL('../bin/te.js', import.meta.url));

test('the read-back verifier passes equal bytes and fails on any one corrupted byte', () => {
  const a = new Uint8Array(4096).map((_, i) => i * 7);
  checkSame(a, a.slice(), 'same');
  for (const at of [0, 1234, 4095]) {
    const b = a.slice();
    b[at] ^= 1;
    assert.throws(
      () => checkSame(a, b, 'corrupt'),
      (e: unknown) => isTransferError(e) && e.code === 'TRANSFER_FAILED' && e.message.includes(`byte ${at} `),
    );
  }
});

test('usage: --wire takes te or mooncake; --wire mooncake needs --target or --loopback', () => {
  const bad = spawnSync(process.execPath, [te, 'bench', '--wire', 'rdma'], { encoding: 'utf8' });
  assert.is.not(bad.status, 0);
  assert.match(bad.stderr, /--wire/);
  const none = spawnSync(process.execPath, [te, 'bench', '--wire', 'mooncake'], { encoding: 'utf8' });
  assert.is(none.status, 2);
  assert.match(none.stderr, /Give --target <host:port> of a Mooncake segment/);
});

test.run();
