import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { constants as bufferConstants } from 'node:buffer';
import { createTransferEngine, isTransferError } from '../src/index.js';

/*
 * An engine whose transports allocate no host memory hands out one JS buffer. Past the
 * longest one this Node.js makes (4 GiB on Node 20) that was OUT_OF_MEMORY ("Invalid typed
 * array length") although the machine may have the memory; it is INVALID_ARGUMENT saying
 * what to do instead.
 */
test('allocateMemory past the longest JS buffer is INVALID_ARGUMENT naming the limit and the way around it', async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
  try {
    const limit = BigInt(bufferConstants.MAX_LENGTH);
    const e = await engine.allocateMemory(limit + 1n).then(
      () => undefined,
      (x: unknown) => x as Error,
    );
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    assert.match(e.message, `Cannot allocate ${limit + 1n} bytes of host memory as one JS buffer (at most ${limit} on Node.js ${process.version})`);
    assert.match(e.message, /use registerMemory\(\{ addr, length \}\)/);
    assert.equal(engine.registeredMemory(), []);
    const small = await engine.allocateMemory(4096);
    assert.is(small.buffer?.byteLength, 4096);
  } finally {
    await engine.close();
  }
});

test.run();
