import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine, isTransferError } from '@te/connector';
import { createECConsumer, createECProducer } from '../src/index.js';
import { flip, flippingRegistry } from './flipping-transport.js';

/*
 * EC checksums (createECProducer({ checksums: true })): an item whose bytes were corrupted
 * on the way fails with DATA_CORRUPTED (the consumer encodes it locally) instead of
 * counting as loaded; intact items load. Producer and consumer in this process over a fake
 * transport that flips a byte of the write it is told to.
 */
for (const checksums of [true, false]) {
  test(`EC with checksums ${checksums ? 'on: a flipped byte fails the item with DATA_CORRUPTED, intact items load' : 'off: the flipped byte goes unnoticed (what checksums are for)'}`, async () => {
    const pe = await createTransferEngine({ connector: 'flip-fabric' }, { registry: flippingRegistry() });
    const ce = await createTransferEngine({ connector: 'flip-fabric' }, { registry: flippingRegistry() });
    const producer = await createECProducer({ engine: pe, poolBytes: 1 << 20, checksums });
    const consumer = await createECConsumer({ engine: ce, loadTimeoutMs: 5_000 });
    const dest = await ce.allocateMemory(1 << 16);
    try {
      const items = ['a', 'b'].map((h, k) => ({ hash: `item-${h}`, data: Uint8Array.from({ length: 4096 }, (_, i) => (i * 7 + k * 13 + 1) & 0xff) }));
      const params = Object.fromEntries(await Promise.all(items.map(async (it) => [it.hash, await producer.save(it.hash, it.data)] as const)));
      const where = new Map<string, number>();
      for (const [round, armed] of [
        [0, true],
        [1, false],
      ] as const) {
        flip.at = (addr) => void (ce.hostView(addr, 1n)![0]! ^= 0xff);
        flip.armed = armed;
        consumer.startLoad(params, (hash) => {
          const off = round * 0x8000 + (hash === 'item-a' ? 0 : 0x2000);
          where.set(hash, off);
          return { addr: dest.addr + BigInt(off) };
        });
        const r = await consumer.waitForLoad();
        const landed = (h: string) => Buffer.compare(dest.buffer!.subarray(where.get(h)!, where.get(h)! + 4096), items.find((i) => i.hash === h)!.data) === 0;
        if (!armed) {
          assert.equal(r.loaded.sort(), ['item-a', 'item-b'], 'nothing flipped: both load');
          assert.ok(landed('item-a') && landed('item-b'));
        } else if (checksums) {
          // One pull carries both items: the flipped byte is in the first item written.
          assert.is(r.failed.length, 1, JSON.stringify(r.failed.map((f) => f.error.message)));
          assert.ok(isTransferError(r.failed[0]!.error, 'DATA_CORRUPTED'), String(r.failed[0]!.error));
          assert.match(r.failed[0]!.error.message, /checksum mismatch/);
          assert.is(r.loaded.length, 1);
          assert.ok(landed(r.loaded[0]!), 'the item counted loaded is intact');
        } else {
          assert.is(r.loaded.length, 2, 'without checksums both count as loaded');
          assert.not.ok(landed('item-a') && landed('item-b'), 'one of them holds the flipped byte');
        }
      }
    } finally {
      await producer.close();
      await consumer.close();
      await pe.close();
      await ce.close();
    }
  });
}

test.run();
