// Host names in a peer's endpoint are resolved asynchronously before connecting (the I/O
// threads only ever connect to addresses): a name works, an unresolvable one fails fast and
// typed, and neither holds up the event loop.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, type SegmentDescriptor } from '@te/connector';
import { localTransport } from './helpers.js';

function descriptorOf(t: Awaited<ReturnType<typeof localTransport>>, name: string, host: string): SegmentDescriptor {
  const ep = t.transport.endpoint() as { host: string; port: number; protocol: number };
  return {
    version: 1,
    name,
    epoch: t.epoch,
    hostname: 'localhost',
    pid: process.pid,
    transports: { 'mooncake-tcp': { class: 'tcp', memoryKinds: ['cpu'], endpoint: { ...ep, host } } },
    buffers: [{ addr: t.addr, length: BigInt(t.buffer.length), device: 'cpu', attrs: {} }],
  };
}

test('a peer published under a host name is reached; an unresolvable name is PEER_UNREACHABLE', async () => {
  const target = await localTransport(4096);
  const initiator = await localTransport(4096);
  try {
    initiator.buffer.fill(0x3c);
    const peer = await initiator.transport.openPeer(descriptorOf(target, 'by-name', 'localhost'));
    await initiator.transport.submit(peer, batchOf([{ op: 'write', local: initiator.addr, remote: target.addr, length: 4096 }]), { timeoutMs: 3000 });
    assert.is(target.buffer[4095], 0x3c);
    const started = Date.now();
    const err = (await initiator.transport.openPeer(descriptorOf(target, 'nowhere', 'no-such-host.invalid')).then(
      () => undefined,
      (e) => e,
    )) as { code?: string; message?: string };
    assert.is(err?.code, 'PEER_UNREACHABLE');
    assert.match(err!.message!, /cannot resolve the host "no-such-host\.invalid"/);
    assert.ok(Date.now() - started < 3000, `resolving took ${Date.now() - started} ms`);
  } finally {
    await initiator.transport.close();
    await target.transport.close();
  }
});

test.run();
