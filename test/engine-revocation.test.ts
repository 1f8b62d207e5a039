import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PluginRegistry, createTransferEngine, type TransferEngine } from '@te/connector';
import { createFakePlugin } from '@te/testkit';

/*
 * Unregistration reaches the peers (engine logic, with the in-process fake transport as a
 * stand-in for transports that import a peer's memory, such as the CUDA ones): the owner's
 * unregisterMemory returns only after every peer that fetched its descriptor dropped what it
 * cached and finished its batches into the region, and a peer's next transfer uses a fresh
 * descriptor.
 */
const fake = createFakePlugin({ name: 'fake-revoke' });
const registry = new PluginRegistry({ builtins: false });
registry.register(fake.plugin.name, fake.plugin);
const engine = (): Promise<TransferEngine> => createTransferEngine({ connector: 'fake-revoke', bindAddress: '127.0.0.1' }, { registry, env: {} });

test('unregisterMemory waits until the peer writing into the region finished, then the peer sees it gone', async () => {
  const owner = await engine();
  const peer = await engine();
  try {
    const region = await owner.registerMemory(new Uint8Array(4096));
    const src = await peer.registerMemory(new Uint8Array(4096).fill(9));
    await peer.write(owner.segmentName, src.addr, region.addr, 64); // the peer holds the owner's descriptor now
    // The peer's next write into the region is submitted and takes 300 ms to complete. The
    // owner's unregistration starts once it is submitted (an event, not a sleep) and must
    // return after it settled: the order is checked, not a duration, so a slow host cannot
    // fail the test, and an unregistration that did not wait returns well before.
    fake.faults.latencyMs = 300;
    const order: string[] = [];
    const submitted = fake.faults.untilBatches(fake.faults.batches + 1);
    const inFlight = peer.write(owner.segmentName, src.addr, region.addr, 4096).then(
      () => order.push('peer batch settled'),
      () => order.push('peer batch settled'),
    );
    await submitted;
    await owner.unregisterMemory(region).then(() => order.push('unregister returned'));
    await inFlight;
    assert.equal(order, ['peer batch settled', 'unregister returned'], "the owner's unregister returned before the peer's batch into it settled");
    fake.faults.latencyMs = 0;
    // The peer's cached descriptor is gone: its next fetch no longer lists the region.
    const fresh = await peer.openSegment(owner.segmentName, { connect: false });
    assert.not.ok(
      fresh.buffers.some((b) => b.addr === region.addr),
      'the peer still has the region in its descriptor',
    );
  } finally {
    fake.faults.reset();
    await owner.close();
    await peer.close();
  }
});

test('a peer that stopped answering delays one unregistration, then is forgotten', async () => {
  const owner = await engine();
  const peer = await engine();
  try {
    const a = await owner.registerMemory(new Uint8Array(4096));
    const b = await owner.registerMemory(new Uint8Array(4096));
    const src = await peer.registerMemory(new Uint8Array(64));
    await peer.write(owner.segmentName, src.addr, a.addr, 64);
    await peer.close(); // its control endpoint is gone: the revocation cannot be answered
    let started = Date.now();
    await owner.unregisterMemory(a);
    const first = Date.now() - started;
    started = Date.now();
    await owner.unregisterMemory(b);
    const second = Date.now() - started;
    assert.ok(first < 6000, `first unregistration took ${first} ms`);
    assert.ok(second < 100, `the dead peer was asked again (${second} ms)`);
  } finally {
    await owner.close();
  }
});

test.run();
