// Out of file descriptors: the target's server must not spin on a connection it cannot
// accept, and once descriptors are free again the waiting initiator is served.
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, type SegmentDescriptor, type WireValue } from '@te/connector';
import { compileWorkerScript, cpuUsedOver, forkCommandChild } from '@te/testkit';
import plugin from '../src/index.js';
import { createEndpoint, register } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('EMFILE: the server does not spin, logs the episode once, and serves the waiting initiator once descriptors are free', async () => {
  const script = await compileWorkerScript(fileURLToPath(new URL('./fixtures/descriptor-target.ts', import.meta.url)));
  const target = forkCommandChild<{ name: string; epoch: string; endpoint: WireValue; addr: string }>(script, [], { nofile: 256 });
  const call = target.call;
  const initiator = await createEndpoint(`shm-initiator-${process.pid}`, {});
  try {
    const t = await target.ready;
    assert.ok((await call<number>('exhaust')) > 0);
    const descriptor: SegmentDescriptor = {
      version: 1,
      name: t.name,
      epoch: BigInt(t.epoch),
      hostname: hostname(),
      pid: target.child.pid!,
      transports: { [plugin.name]: { class: plugin.capabilities.class, memoryKinds: ['cpu'], endpoint: t.endpoint } },
      buffers: [],
    };
    // The initiator connects and sends its HELLO; the target cannot accept the connection.
    const opened = initiator.transport.openPeer(descriptor);
    opened.catch(() => {});
    await sleep(300);
    const { used, wall } = await cpuUsedOver(target.child.pid!, 1000);
    assert.ok(used < 0.3 * wall, `target used ${used.toFixed(2)} s of CPU in ${wall.toFixed(2)} s while out of descriptors`);
    const warnings = await call<string[]>('warnings');
    assert.is(warnings.filter((w) => /cannot accept connections/.test(w)).length, 1, 'the episode is logged once');
    await call('release');
    // Served within its connect timeout (3 s), with no new connection: a write lands.
    const peer = await opened;
    const local = new Uint8Array(4096).fill(0xa7);
    const addr = await register(initiator.transport, local);
    const r = await initiator.transport.submit(peer, batchOf([{ op: 'write', local: addr, remote: BigInt(t.addr), length: local.length }]), {
      timeoutMs: 5000,
    });
    assert.equal(Array.from(r.statuses), [0]);
    assert.is(await call<number>('byte'), 0xa7);
  } finally {
    await initiator.transport.close();
    await target.close();
  }
});

test.run();
