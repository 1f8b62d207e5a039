import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { KVStatus, closeTransferEngine, initTransferEngine, type ECItemParams } from '@te/connector';
import { createECConsumer, createKVManager } from '../src/index.js';
import { allocateRank, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { compileWorkerScript } from '@te/testkit';
import { freePort } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * One process, one engine: a decode KV manager and an EC consumer share the process's
 * engine (one registration per buffer, one control endpoint, one set of connections to a
 * peer), talking to a peer process that is a prefill rank and an EC producer on its own
 * single engine. Connections are counted from the kernel's socket table.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 2, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 64 };

/** A message from the peer: a call's reply (by `id`) or its `ready` event. */
interface PeerMessage {
  id?: number;
  value?: unknown;
  event?: string;
}

/** The peer's `ready` event: its engine's segment, and whether its KV manager and EC producer share that engine. */
interface PeerReady {
  event: 'ready';
  segment: string;
  sameEngine: boolean;
}

function tcpSockets(pid: number, state: 'listening' | 'established'): { local: string; peer: string }[] {
  const out = execFileSync('ss', ['-tnpH', 'state', state], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((l) => l.includes(`pid=${pid},`))
    .map((l) => {
      const f = l.trim().split(/\s+/);
      return { local: f[2]!, peer: f[3]! };
    });
}

test('KV manager and EC consumer share one engine: one registration per buffer, one control endpoint, one connection set per peer', async () => {
  const port = await freePort();
  const child = fork(await compileWorkerScript(fileURLToPath(new URL('./fixtures/shared-peer.ts', import.meta.url))), [], {
    env: { ...process.env, TE_SHARED_SPEC: JSON.stringify({ model: MODEL, port }) },
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let id = 1;
  // The peer's reply to a call is read as `T` (see fixtures/shared-peer.ts for what each op answers).
  const call = <T>(op: string, args: unknown = {}): Promise<T> =>
    new Promise((resolve) => {
      const my = id++;
      const on = (m: PeerMessage) => m.id === my && (child.off('message', on), resolve(m.value as T));
      child.on('message', on);
      child.send({ id: my, op, args });
    });
  const ready = await new Promise<PeerReady>((r) => child.on('message', (m: PeerMessage) => m.event === 'ready' && r(m as PeerReady)));
  try {
    assert.ok(ready.sameEngine, "the peer's KV manager and EC producer share its engine");
    const engine = await initTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' });
    const layout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
    const memory = await allocateRank(engine, MODEL, layout);
    const ecCache = await engine.allocateMemory(1 << 20);
    const registered = engine.registeredMemory().length;
    const kv = await createKVManager({ role: 'decode', layout, buffers: memory.buffers, timeouts: FAST }); // no engine given: the shared one
    const ec = await createECConsumer(); // likewise
    assert.is(kv.engine, engine);
    assert.is(ec.engine, engine);
    assert.is(engine.registeredMemory().length, registered, 'the KV buffers were registered once (by the allocator), not again');

    // KV leg: the decode pulls a room from the peer's prefill rank.
    const receiver = kv.createReceiver({ host: '127.0.0.1', port, room: 77n });
    const [sent] = await Promise.all([call<{ status: KVStatus }>('send', { room: '77', pages: [1, 2] }), receiver.init(Uint32Array.of(5, 6), 1)]);
    await receiver.cell.reached(KVStatus.Success, { timeoutMs: 10_000 });
    assert.is(sent.status, KVStatus.Success);
    assert.is(verifyDecode(MODEL, memory, [{ room: 77n, pages: Uint32Array.of(5, 6), auxSlot: 1 }]), undefined);
    const peerHost = ready.segment.split(':')[0];
    const afterKv = tcpSockets(process.pid, 'established').filter((s) => s.peer.startsWith(`${peerHost}:`) && !s.peer.endsWith(`:${port}`));
    assert.ok(afterKv.length > 0);

    // EC leg, same peer: no new control endpoint, no new connection, no new registration.
    const params = { img: await call<ECItemParams>('save', { hash: 'img', length: 65_536 }) };
    ec.startLoad(params, () => ({ addr: ecCache.addr }));
    const loaded = await ec.waitForLoad();
    assert.equal(loaded.loaded, ['img']);
    const afterEc = tcpSockets(process.pid, 'established').filter((s) => s.peer.startsWith(`${peerHost}:`) && !s.peer.endsWith(`:${port}`));
    assert.equal(afterEc.map((s) => s.peer).sort(), afterKv.map((s) => s.peer).sort(), "the EC pull reused the KV leg's connections");
    assert.is(engine.registeredMemory().length, registered);
    const listening = tcpSockets(process.pid, 'listening').map((s) => s.local);
    assert.ok(listening.includes(engine.segmentName), `the control endpoint ${engine.segmentName} listens`);
    assert.is(listening.filter((l) => l === engine.segmentName).length, 1, 'one control endpoint for KV and EC');
    await kv.close();
  } finally {
    await call('close');
    await closeTransferEngine();
  }
});

test.run();
