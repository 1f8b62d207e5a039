import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TransferEngine } from '@te/connector';
import { until } from '@te/testkit';
import { fakeEngines } from './fixtures/fake-engine.js';
import { Router } from 'zeromq';

/*
 * Unregistration reaches the peers (engine logic, with the in-process fake transport as a
 * stand-in for transports that import a peer's memory, such as the CUDA ones): the owner's
 * unregisterMemory returns only after every peer that fetched its descriptor dropped what it
 * cached and finished its batches into the region, and a peer's next transfer uses a fresh
 * descriptor.
 */
const { fake, engine: fakeEngine } = fakeEngines('fake-revoke');
// An owner's deadline for a peer's answer to a revocation, shorter than the default (5 s) so
// that the cases with a peer that never answers run quickly.
const HANDSHAKE_MS = 1_000;
const engine = (timeouts: { handshakeMs?: number } = {}): Promise<TransferEngine> => fakeEngine({ timeouts });

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

/**
 * Binds `socket` where a process of this one listened a moment ago: zeromq releases a closed
 * socket's port shortly after close() returns, so "in use" is retried (bounded).
 */
async function bindWhenReleased(socket: Router, address: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await socket.bind(address);
    } catch (error) {
      if (!/in use/i.test((error as Error).message) || attempt >= 40) throw error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

test('a peer that exited does not hold an unregistration past its deadline', async () => {
  const owner = await engine({ handshakeMs: HANDSHAKE_MS });
  const peer = await engine();
  try {
    const a = await owner.registerMemory(new Uint8Array(4096));
    const src = await peer.registerMemory(new Uint8Array(64));
    await peer.write(owner.segmentName, src.addr, a.addr, 64); // the owner now has the peer to tell
    await peer.close(); // its control endpoint is gone: the revocation cannot be answered
    const started = Date.now();
    await owner.unregisterMemory(a);
    // A deadline, not a speed: the owner asks the peer for at most handshakeMs (a refused
    // connection ends it at once), then lets the memory go.
    const took = Date.now() - started;
    assert.ok(took < HANDSHAKE_MS + 2_000, `the unregistration took ${took} ms, past the ${HANDSHAKE_MS} ms deadline`);
  } finally {
    await owner.close();
  }
});

test('a peer that stopped answering delays one unregistration, then is forgotten', async () => {
  const owner = await engine({ handshakeMs: HANDSHAKE_MS });
  const peer = await engine();
  // A hung peer: its control endpoint takes requests and never answers. It sits at the address
  // of a peer that fetched the owner's descriptor, and counts what it is asked: whether the
  // owner asks it again is then seen, not guessed from how long an unregistration took.
  const hung = new Router({ linger: 0 });
  let asked = 0;
  try {
    const a = await owner.registerMemory(new Uint8Array(4096));
    const b = await owner.registerMemory(new Uint8Array(4096));
    const src = await peer.registerMemory(new Uint8Array(64));
    await peer.write(owner.segmentName, src.addr, a.addr, 64); // the owner now has the peer to tell
    const endpoint = peer.segmentName;
    await peer.close();
    await bindWhenReleased(hung, `tcp://${endpoint}`);
    void (async () => {
      for await (const _request of hung) asked++;
    })().catch(() => undefined); // ends when the socket closes
    await owner.unregisterMemory(a); // asks the hung peer, which runs out the deadline
    await until('the owner asked the peer about the first region', () => asked >= 1);
    // Asked again, the peer would get the request at once and the owner wait out another
    // deadline for it; the request would have arrived by the time the call returns.
    await owner.unregisterMemory(b);
    assert.is(asked, 1, 'the owner asked the peer that never answered again');
  } finally {
    hung.close();
    await owner.close();
  }
});

test.run();
