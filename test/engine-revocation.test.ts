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
    fake.faults.latencyMs = 300;
    let settledAt = 0;
    const inFlight = peer.write(owner.segmentName, src.addr, region.addr, 4096).then(
      () => (settledAt = Date.now()),
      () => (settledAt = Date.now()),
    );
    await new Promise((r) => setTimeout(r, 20));
    const started = Date.now();
    await owner.unregisterMemory(region);
    const returnedAt = Date.now();
    await inFlight;
    assert.ok(settledAt > 0 && settledAt <= returnedAt, `the owner's unregister returned ${settledAt - returnedAt} ms before the peer's batch into it settled`);
    assert.ok(returnedAt - started >= 200, `unregister returned after ${returnedAt - started} ms, not waiting for the peer`);
    // The peer's cached descriptor is gone: its next fetch no longer lists the region.
    fake.faults.latencyMs = 0;
    const fresh = await peer.openSegment(owner.segmentName, { connect: false });
    assert.not.ok(fresh.buffers.some((b) => b.addr === region.addr), 'the peer still has the region in its descriptor');
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
