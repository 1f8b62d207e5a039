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
    // Options of null or a number were read as an object (a TypeError before).
    for (const options of [null, 3]) {
      const e = await outcome(() => engine.registerMemory(new Uint8Array(64), options as never));
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `registerMemory(buffer, ${String(options)}): ${String(e)}`);
      assert.match((e as Error).message, /Expected registerMemory's options to be an object/);
    }
    // Named as given: before, every one read "got undefined" (the missing `.addr`).
    for (const [bad, shown] of [
      ['nope', '"nope"'],
      [7, '7'],
      [null, 'null'],
      [{ length: 4 }, 'an object without `addr`'],
      [{ addr: -1 }, '-1'],
    ] as const) {
      const e = await outcome(() => engine.unregisterMemory(bad as never));
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `unregisterMemory(${String(bad)}): ${String(e)}`);
      assert.ok((e as Error).message.endsWith(`got ${shown}`), (e as Error).message);
    }
  } finally {
    await engine.close();
  }
});

test('bad request fields: INVALID_ARGUMENT naming the request and field, and no byte moves', async () => {
  const a = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
  const b = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
  try {
    const src = new Uint8Array(4096).fill(7);
    const dst = new Uint8Array(4096);
    const local = (await a.registerMemory(src)).addr;
    const remote = (await b.registerMemory(dst)).addr;
    // Before, a BigUint64Array stored -1 as 2^64 - 1 (sent to the peer), op 'copy' became a
    // read (the peer's bytes written over local memory), and 2.5 rows were truncated to 2.
    const cases: [string, () => unknown, RegExp][] = [
      ['length -1', () => a.write(b.segmentName, local, remote, -1), /request 0's `length` .* got -1$/],
      ['length -1n', () => a.read(b.segmentName, local, remote, -1n), /request 0's `length` .* got -1n$/],
      ['length 1.5', () => a.write(b.segmentName, local, remote, 1.5), /request 0's `length` .* got 1\.5$/],
      ['length NaN', () => a.write(b.segmentName, local, remote, NaN), /request 0's `length` .* got NaN$/],
      ['length 2^53', () => a.write(b.segmentName, local, remote, 2 ** 53), /request 0's `length` .* got 9007199254740992$/],
      ['local as a number', () => a.write(b.segmentName, Number(local) as never, remote, 16), /request 0's `local` to be an address, .* use BigInt\)/],
      ['remote 2^64', () => a.write(b.segmentName, local, 1n << 64n, 16), /request 0's `remote` .* got 18446744073709551616n$/],
      [
        "batchOf: op 'copy'",
        () =>
          a.transfer(
            b.segmentName,
            batchOf([
              { op: 'write', local, remote, length: 8 },
              { op: 'copy' as never, local, remote, length: 8 },
            ]),
          ),
        /request 1's `op` to be 'write' or 'read', got "copy"$/,
      ],
      ['batchOf: a request that is not an object', () => batchOf([null as never]), /request 0's `request` to be an object/],
      [
        'batchOf: rows 2.5',
        () => batchOf([{ op: 'write', local, remote, length: 10, rows: 2.5, localPitch: 64 }]),
        /request 0's `rows` to be an integer from 0 to 4294967295, got 2\.5$/,
      ],
      [
        'batchOf: remotePitch -64',
        () => batchOf([{ op: 'write', local, remote, length: 16, remoteRows: 2, remotePitch: -64 }]),
        /request 0's `remotePitch` .* got -64$/,
      ],
    ];
    for (const [what, call, message] of cases) {
      // write and read reject; batchOf, which is synchronous, throws.
      const settled = await outcome(call);
      const thrown = (settled as { threwSynchronously?: unknown }).threwSynchronously;
      assert.is(thrown !== undefined, what.startsWith('batchOf'), `${what}: thrown synchronously only by batchOf`);
      const e = thrown ?? settled;
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${what}: ${String(e)}`);
      assert.match((e as Error).message, message, what);
    }
    assert.ok(
      dst.every((x) => x === 0),
      'no byte landed at the peer',
    );
    assert.ok(
      src.every((x) => x === 7),
      'no byte of the local buffer was overwritten',
    );
  } finally {
    await a.close();
    await b.close();
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

// A listener that is not a function was taken, then called at every batch or notification:
// each call failed, was caught and logged, for the engine's whole life.
test('onNotification and observeBatches refuse a listener that is not a function, naming the method', async () => {
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1' }, { env: {} });
  try {
    for (const junk of [undefined, null, 5, 'f', {}]) {
      for (const method of ['onNotification', 'observeBatches'] as const) {
        let error: unknown;
        try {
          engine[method](junk as never);
        } catch (e) {
          error = e;
        }
        assert.ok(isTransferError(error, 'INVALID_ARGUMENT'), `${method}(${String(junk)}): ${String(error)}`);
        assert.match(
          (error as Error).message,
          new RegExp(`^Expected ${method}'s? (listener|observer) to be a function, got (undefined|null|number|string|object)$`),
        );
      }
    }
    const seen: number[] = [];
    const stop = engine.observeBatches((r) => seen.push(r.requests));
    const a = await engine.registerMemory(new Uint8Array(64));
    const b = await engine.registerMemory(new Uint8Array(64));
    await engine.write(engine.segmentName, a.addr, b.addr, 64);
    stop();
    assert.equal(seen, [1], 'a function is still taken');
  } finally {
    await engine.close();
  }
});

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
