import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { batchOf, createTransferEngine, isTransferError, type TransferEngine } from '../src/index.js';

/*
 * Every public engine method answers bad input with a TransferError (async methods reject,
 * never throw synchronously), and a dead peer fails fast as PEER_UNREACHABLE instead of
 * looking like a slow one.
 */
const BAD_NAMES: unknown[] = ['garbage', 'host:notaport', '', 42, null, '::1:8080', 'host:0', 'host:70000', 'a b:80', ':80'];

async function outcome(call: () => unknown): Promise<unknown> {
  let p: unknown;
  try {
    p = call();
  } catch (e) {
    return { threwSynchronously: e };
  }
  return (p as Promise<unknown>).then(
    () => 'resolved',
    (e: unknown) => e,
  );
}

test('bad segment names: INVALID_ARGUMENT naming the value from every method', async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
  try {
    const mem = await engine.allocateMemory(64);
    for (const name of BAD_NAMES) {
      const calls: [string, () => unknown][] = [
        ['transfer', () => engine.transfer(name as string, batchOf([{ op: 'write', local: mem.addr, remote: 1n, length: 8 }]))],
        ['write', () => engine.write(name as string, mem.addr, 1n, 8)],
        ['read', () => engine.read(name as string, mem.addr, 1n, 8)],
        ['openSegment', () => engine.openSegment(name as string)],
      ];
      for (const [method, call] of calls) {
        const e = await outcome(call);
        assert.ok(
          isTransferError(e, 'INVALID_ARGUMENT'),
          `${method}(${JSON.stringify(name)}): ${String((e as { threwSynchronously?: unknown }).threwSynchronously ?? e)}`,
        );
      }
      const sync = (() => {
        try {
          engine.controlClient(name as string);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      assert.ok(isTransferError(sync, 'INVALID_ARGUMENT'), `controlClient(${JSON.stringify(name)})`);
    }
    for (const bad of [undefined, 5, { addr: 'x', length: 4 }, new Uint8Array(0)]) {
      const e = await outcome(() => engine.registerMemory(bad as never));
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `registerMemory(${String(bad)}): ${String(e)}`);
    }
    const e = await outcome(() => engine.unregisterMemory('nope' as never));
    assert.ok(isTransferError(e), String(e));
  } finally {
    await engine.close();
  }
});

async function peerProcess(): Promise<{ segment: string; kill: () => void }> {
  const script = `import { createTransferEngine } from '@te/connector';
const e = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
await e.allocateMemory(4096);
console.log(e.segmentName);
setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'], cwd: process.cwd() });
  const segment = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (c) => reject(new Error(`peer exited ${c}`)));
  });
  return { segment, kill: () => child.kill('SIGKILL') };
}

test('a dead peer fails fast with PEER_UNREACHABLE, not a TIMEOUT at the deadline', async () => {
  const engine: TransferEngine = await createTransferEngine(
    { connector: 'mooncake-tcp', bindAddress: '127.0.0.1', timeouts: { handshakeMs: 8_000 } },
    { env: {} },
  );
  const peer = await peerProcess();
  try {
    const d = await engine.openSegment(peer.segment);
    assert.ok(d.buffers.length > 0);
    const local = await engine.allocateMemory(4096);
    await engine.write(peer.segment, local.addr, d.buffers[0]!.addr, 4096);
    peer.kill();
    await new Promise((r) => setTimeout(r, 1_200)); // the peer is gone and has been silent
    const started = Date.now();
    const e = await engine.openSegment(peer.segment, { refresh: true }).then(
      () => undefined,
      (x: unknown) => x,
    );
    const took = Date.now() - started;
    assert.ok(isTransferError(e, 'PEER_UNREACHABLE'), String(e));
    assert.ok(took < 2_000, `took ${took} ms of an 8 s deadline`);
    const t2 = Date.now();
    const e2 = await engine.write(peer.segment, local.addr, d.buffers[0]!.addr, 4096, { timeoutMs: 8_000 }).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e2) && ['PEER_UNREACHABLE', 'CONNECTION_LOST'].includes(e2.code), String(e2));
    assert.ok(Date.now() - t2 < 2_000, `write took ${Date.now() - t2} ms`);
  } finally {
    peer.kill();
    await engine.close();
  }
});

test.run();
