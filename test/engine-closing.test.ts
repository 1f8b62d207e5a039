import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, isTransferError } from '@te/connector';
import { fakeEngines } from './fixtures/fake-engine.js';

/*
 * What a peer hears from an engine that is closing (engine logic, over the in-process fake
 * transport, whose close() a fault holds open): the engine stops serving its descriptor
 * early in its close and its control endpoint goes last, so a request in between used to
 * be answered "unknown control message type" (INVALID_ARGUMENT, a caller's mistake). It is
 * the code a peer gets a moment later, when nothing listens: PEER_UNREACHABLE.
 */
const { fake, engine } = fakeEngines('fake-closing');

test('a peer that asks an engine in the middle of its close hears PEER_UNREACHABLE, and names it as closing', async () => {
  const closing = await engine();
  const asker = await engine();
  let closed: Promise<void> | undefined;
  try {
    const region = await closing.registerMemory(new Uint8Array(4096));
    const src = await asker.registerMemory(new Uint8Array(4096).fill(7));
    fake.faults.holdClose = true;
    const held = fake.faults.untilCloseHeld();
    closed = closing.close();
    await held; // the close is at its transports: past the step that stops serving descriptors
    for (const ask of [
      () => asker.openSegment(closing.segmentName, { connect: false }),
      () => asker.transfer(closing.segmentName, batchOf([{ op: 'write', local: src.addr, remote: region.addr, length: 64 }]), { timeoutMs: 5_000 }),
    ]) {
      try {
        await ask();
        assert.unreachable('a closing engine answered');
      } catch (e) {
        assert.ok(isTransferError(e, 'PEER_UNREACHABLE'), `expected PEER_UNREACHABLE, got ${String(e)}`);
        assert.match((e as Error).message, /closing its transfer engine/);
      }
    }
    fake.faults.releaseClose();
    await closed;
  } finally {
    fake.faults.reset();
    await closed;
    await closing.close();
    await asker.close();
  }
});

test.run();
