import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, isTransferError } from '@te/connector';
import { fakeEngines } from './fixtures/fake-engine.js';

/*
 * A batch from a region whose unregistration is under way (engine logic, over the
 * in-process fake transport, whose unregisterMemory() a fault holds open). The engine has
 * taken the region out of its map, its transports still hold the memory. Such a batch used
 * to go to the transports, which ended it each its own way: the fake one moved it,
 * mooncake-tcp and mooncake-shm refused it, mooncake-rdma refused it after part of it had
 * landed. The engine now refuses its requests itself, MEMORY_NOT_REGISTERED, and nothing of
 * it reaches a transport.
 */
const { fake, engine } = fakeEngines('fake-unregistering');

test('a batch from a region being unregistered is refused MEMORY_NOT_REGISTERED and nothing of it lands; other regions move', async () => {
  const sender = await engine();
  const target = await engine();
  let unregistered: Promise<void> | undefined;
  try {
    const going = await sender.registerMemory(new Uint8Array(4096).fill(7));
    const staying = await sender.registerMemory(new Uint8Array(4096).fill(9));
    const destination = new Uint8Array(8192);
    const remote = await target.registerMemory(destination);
    await sender.openSegment(target.segmentName);
    fake.faults.unregisterStep.hold = true;
    const held = fake.faults.unregisterStep.untilHeld();
    unregistered = sender.unregisterMemory(going);
    await held; // the engine's unregistration is at its transport
    const submittedBefore = fake.faults.batches;
    const e = await sender
      .transfer(target.segmentName, batchOf([{ op: 'write', local: going.addr, remote: remote.addr, length: 4096 }]), { timeoutMs: 5_000 })
      .then(
        () => undefined,
        (x: unknown) => x,
      );
    assert.ok(isTransferError(e, 'MEMORY_NOT_REGISTERED'), `a batch from the region being unregistered: ${String(e)}`);
    assert.is(fake.faults.batches, submittedBefore, 'no batch reached the transport');
    // The other region is not held up by it.
    await sender.transfer(target.segmentName, batchOf([{ op: 'write', local: staying.addr, remote: remote.addr + 4096n, length: 4096 }]), { timeoutMs: 5_000 });
    assert.ok(
      destination.subarray(0, 4096).every((b) => b === 0),
      'nothing of the refused batch landed',
    );
    assert.ok(
      destination.subarray(4096).every((b) => b === 9),
      'the other region moved',
    );
    fake.faults.unregisterStep.release();
    await unregistered;
    // Once it is over, batches from the other regions take the usual route again.
    await sender.transfer(target.segmentName, batchOf([{ op: 'write', local: staying.addr, remote: remote.addr, length: 4096 }]), { timeoutMs: 5_000 });
    assert.ok(
      destination.subarray(0, 4096).every((b) => b === 9),
      'moved after the unregistration',
    );
  } finally {
    fake.faults.reset();
    await unregistered?.catch(() => undefined);
    await sender.close();
    await target.close();
  }
});

test.run();
