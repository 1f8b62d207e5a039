import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fileURLToPath } from 'node:url';
import { createTransferEngine, type BatchRecord, type SegmentDescriptor, type TransferEngine } from '@te/connector';
import { compileWorkerScript, spawnTargetProcess } from '@te/testkit';
import { createEndpoint, pattern } from './helpers.js';

/*
 * Which transport carries a batch between two processes of this host that both hold
 * mooncake-shm and mooncake-tcp: mooncake-shm by locality, mooncake-tcp under MC_FORCE_TCP
 * or with mooncake-shm disabled, and never mooncake-shm for a peer on another machine.
 */
const fixture = fileURLToPath(new URL('./fixtures/conformance-target.ts', import.meta.url));
const base = { connector: 'mooncake-tcp', transports: ['mooncake-shm'], timeouts: { transferMs: 10_000 } };

async function carriedBy(
  initiatorConfig: Record<string, unknown>,
  targetConfig: Record<string, unknown> = base,
  env: NodeJS.ProcessEnv = {},
): Promise<string[]> {
  const target = await spawnTargetProcess(await compileWorkerScript(fixture), targetConfig);
  const saved = { ...process.env };
  Object.assign(process.env, env);
  let initiator: TransferEngine | undefined;
  try {
    initiator = await createTransferEngine(initiatorConfig);
    const seen: BatchRecord[] = [];
    initiator.observeBatches((r) => seen.push(r));
    const data = pattern(9, 1 << 20);
    const local = await initiator.registerMemory(data);
    const remote = await target.alloc(1 << 20);
    await initiator.write(target.segment, local.addr, remote, 1 << 20);
    assert.equal(await target.read(remote, 1 << 20), data);
    return seen.flatMap((r) => r.transports);
  } finally {
    process.env = saved;
    await initiator?.close();
    await target.close();
  }
}

test('both processes on this host: the router picks mooncake-shm', async () => {
  assert.equal(await carriedBy(base), ['mooncake-shm']);
});

test('MC_FORCE_TCP: mooncake-tcp, although both hold mooncake-shm', async () => {
  assert.equal(await carriedBy({ ...base, forceTcp: true }), ['mooncake-tcp']);
});

test('TE_SHM=0 at the target: it publishes mooncake-shm disabled, and the initiator uses mooncake-tcp', async () => {
  assert.equal(await carriedBy(base, { ...base, transportOptions: { 'mooncake-shm': { enabled: false } } }), ['mooncake-tcp']);
});

test('TE_SHM=0 at the initiator (environment): mooncake-tcp', async () => {
  assert.equal(await carriedBy(base, base, { TE_SHM: '0' }), ['mooncake-tcp']);
});

test('mooncake-shm reaches only peers on this machine, in its namespaces, of its user', async () => {
  const a = await createEndpoint('reach-a');
  const b = await createEndpoint('reach-b');
  try {
    const real = b.descriptor();
    const endpoint = real.transports['mooncake-shm']!.endpoint as Record<string, unknown>;
    const variant = (change: Record<string, unknown>): SegmentDescriptor => ({
      ...real,
      transports: { 'mooncake-shm': { ...real.transports['mooncake-shm']!, endpoint: { ...endpoint, ...change } as never } },
    });
    assert.ok(a.transport.reaches!(real));
    assert.not.ok(a.transport.reaches!(variant({ bootId: '00000000-0000-0000-0000-000000000000', host: 'another-host' })));
    assert.not.ok(a.transport.reaches!(variant({ pidNs: 'pid:[1]' })));
    assert.not.ok(a.transport.reaches!(variant({ netNs: 'net:[1]' })));
    assert.not.ok(a.transport.reaches!(variant({ uid: 4242 })));
    assert.not.ok(a.transport.reaches!(variant({ enabled: false })));
    // openPeer says why, as a typed error.
    try {
      await a.transport.openPeer(variant({ bootId: '00000000-0000-0000-0000-000000000000', host: 'another-host' }));
      assert.unreachable('opened a peer on another machine');
    } catch (e) {
      assert.is((e as { code?: string }).code, 'PEER_UNREACHABLE');
      assert.match((e as Error).message, /another machine/);
    }
  } finally {
    await a.transport.close();
    await b.transport.close();
  }
});

test.run();
