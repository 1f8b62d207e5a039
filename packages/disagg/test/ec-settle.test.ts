import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine, isTransferError, type TransferEngine, type TransferError } from '@te/connector';
import { createECConsumer, createECProducer } from '../src/index.js';
import { until } from '@te/testkit';
import { gatedPlugin } from './gated-transport.js';

/*
 * An EC producer answers a pull, and lets the pulled items be evicted, only once no
 * transport reads them: also when the engine gave up on the write at its deadline while
 * the transport still holds it (TIMEOUT, details.settled: false). Producer and consumer
 * run in one process over the testkit's fake transport (real engines and control plane),
 * with a gate that holds writes to the consumer past the engine's grace, as a transport
 * that cannot recall posted writes does.
 */
const gated = gatedPlugin('ec-settle-gate');

/** A producer and a consumer, each on its own engine over the gated transport. */
async function producerAndConsumer(o: { poolBytes: number; loadTimeoutMs: number }) {
  const registry = gated.registry();
  const engines: TransferEngine[] = [];
  const engine = async (): Promise<TransferEngine> => {
    const e = await createTransferEngine({ connector: 'ec-settle-gate', bindAddress: '127.0.0.1' }, { registry, env: {} });
    engines.push(e);
    return e;
  };
  const producer = await createECProducer({ engine: await engine(), poolBytes: o.poolBytes, port: 0 });
  const consumer = await createECConsumer({ engine: await engine(), loadTimeoutMs: o.loadTimeoutMs });
  const close = async (): Promise<void> => {
    gated.reset();
    await consumer.close();
    await producer.close();
    for (const e of engines) await e.close();
  };
  return { producer, consumer, close };
}

test('a pull whose write the transport holds past the deadline: the item stays pinned (not evicted, not overwritten) until the transport let go', async () => {
  const KiB = 1024;
  const { producer, consumer, close } = await producerAndConsumer({ poolBytes: 64 * KiB, loadTimeoutMs: 300 });
  try {
    const destination = new Uint8Array(48 * KiB);
    const { addr } = await consumer.engine.registerMemory(destination);
    const embedding = new Uint8Array(48 * KiB).fill(0x5a);
    const params = { a: await producer.save('a', embedding) };

    const parked = gated.arm({ hold: consumer.engine.segmentName });
    consumer.startLoad(params, () => ({ addr }));
    await parked;
    const load = await consumer.waitForLoad();
    assert.equal(load.loaded, []);
    assert.equal(
      load.failed.map((f) => f.mmHash),
      ['a'],
    );
    // The producer did not answer in time: the consumer is told its destination may still be written.
    const why = load.failed[0]!.error as TransferError;
    assert.is(why.details?.destinationMayBeWritten, true, why.message);
    // Past the transfer deadline (300 ms) and the engine's grace (2 s): the engine has
    // answered the producer, but the transport still holds the write, reading from `a`.
    await new Promise((r) => setTimeout(r, 3_000));
    const other = new Uint8Array(48 * KiB).fill(0x33); // needs a's range of the 64 KiB pool
    const refused = await producer.save('b', other).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(isTransferError(refused, 'POOL_EXHAUSTED'), `saving over an item a transport still reads: ${String(refused ?? 'succeeded')}`);
    assert.is(producer.pool.evictions, 0);

    gated.releaseAll();
    // The released write lands when the transport gets to it: waited for, not slept on. The
    // destination was zeros, the item and what would have overwritten it are not.
    await until('the released write landed', () => destination.every((b) => b !== 0));
    assert.ok(
      destination.every((b) => b === 0x5a),
      'the late write carried bytes other than the item',
    );
    // Settled: `a` may go now.
    await producer.save('b', other);
    assert.is(producer.pool.evictions, 1);
  } finally {
    await close();
  }
});

test("a pull whose write the producer's transport settles unconfirmed: the consumer's failed item says its destination may still be written; a plain failure does not", async () => {
  const { producer, consumer, close } = await producerAndConsumer({ poolBytes: 64 * 1024, loadTimeoutMs: 5_000 });
  try {
    const destination = new Uint8Array(8 * 1024);
    const { addr } = await consumer.engine.registerMemory(destination);
    const params = { a: await producer.save('a', new Uint8Array(4 * 1024).fill(1)) };

    const parked = gated.arm({ hold: consumer.engine.segmentName });
    consumer.startLoad(params, () => ({ addr }));
    await parked;
    gated.releaseAll({ unconfirmed: true });
    const unconfirmed = await consumer.waitForLoad();
    assert.equal(
      unconfirmed.failed.map((f) => f.mmHash),
      ['a'],
    );
    const why = unconfirmed.failed[0]!.error as TransferError;
    assert.is(why.code, 'TIMEOUT', why.message);
    assert.is(why.details?.destinationMayBeWritten, true, `no destinationMayBeWritten: ${why.message}`);

    // A write that failed and settled (nothing more lands): no flag.
    gated.reset();
    const failing = gated.arm({ fail: consumer.engine.segmentName });
    gated.gate.park!();
    await failing;
    consumer.startLoad(params, () => ({ addr }));
    const plain = await consumer.waitForLoad();
    assert.equal(
      plain.failed.map((f) => f.mmHash),
      ['a'],
    );
    const plainWhy = plain.failed[0]!.error as TransferError;
    assert.is(plainWhy.code, 'TRANSFER_FAILED', plainWhy.message);
    assert.is(plainWhy.details?.destinationMayBeWritten, undefined);
  } finally {
    await close();
  }
});

test.run();
