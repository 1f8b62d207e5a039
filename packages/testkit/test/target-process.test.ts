import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { freePort, spawnTargetProcess } from '../src/index.js';

/*
 * The cross-process target helper as plugin authors use it: a JavaScript target needs no
 * TypeScript loader, the environment reaches the target's config (TE_HANDSHAKE_PORT), and
 * a killed target fails the calls that needed it instead of crashing the test process.
 */
const JS_TARGET = fileURLToPath(new URL('./fixtures/js-target.mjs', import.meta.url));
const config = { connector: 'mooncake-tcp', bindAddress: '127.0.0.1' };

test('a JavaScript target runs without tsx; TE_HANDSHAKE_PORT sets its control port', async () => {
  const port = await freePort();
  const t = await spawnTargetProcess(JS_TARGET, config, { env: { TE_HANDSHAKE_PORT: String(port) } });
  try {
    assert.is(t.segment, `127.0.0.1:${port}`);
    const addr = await t.alloc(64, { fill: 7 });
    assert.equal([...(await t.read(addr, 4))], [7, 7, 7, 7]);
  } finally {
    await t.close();
  }
});

test('kill() then close() does not crash; calls to a dead target reject', async () => {
  const errors: unknown[] = [];
  const onError = (e: unknown): void => void errors.push(e);
  process.on('uncaughtException', onError);
  try {
    const t = await spawnTargetProcess(JS_TARGET, config);
    t.kill();
    await t.close();
    const e = await t.alloc(64).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.match(String(e), /target process is gone/);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(errors.map(String), []);
  } finally {
    process.off('uncaughtException', onError);
  }
});

test.run();
