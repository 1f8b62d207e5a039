import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '../src/errors/transfer-error.js';
import { guardTransport, OPEN_PEER_GRACE_MS } from '../src/engine/guarded-transport.js';
import type { Log } from '../src/engine/logger.js';
import type { Transport } from '../src/spi/transport.js';

/*
 * What the engine's guard does with a plugin's memory calls that settle after their bound
 * (`timeouts.registerMs`): the caller already has its TIMEOUT, so a late allocation, which
 * nobody else can hold, is freed; a late registration is only logged, since the caller may
 * have registered the same buffer again and a plugin may answer both with one address.
 */
const REGISTER_MS = 50;
const LATE_MS = 150;
const later = <T>(value: T, ms = LATE_MS): Promise<T> => new Promise((resolve) => setTimeout(() => resolve(value), ms));

function lateTransport(): { transport: Transport; freed: bigint[]; unregistered: bigint[] } {
  const freed: bigint[] = [];
  const unregistered: bigint[] = [];
  const transport = {
    endpoint: () => 'late',
    registerMemory: () => later({ addr: 0x1000n, length: 64n }),
    unregisterMemory: async (addr: bigint) => void unregistered.push(addr),
    allocateMemory: () => later({ addr: 0x2000n, length: 64n }),
    freeMemory: async (addr: bigint) => void freed.push(addr),
    openPeer: async () => ({}),
    closePeer: async () => undefined,
    lookupSegment: () => new Promise(() => {}),
    submit: async () => ({ statuses: new Int32Array(0), bytes: 0n }),
    close: async () => undefined,
  } as unknown as Transport;
  return { transport, freed, unregistered };
}

function recordingLog(): { log: Log; lines: string[] } {
  const lines: string[] = [];
  return { log: ((level: string, message: string) => void lines.push(`${level}: ${message}`)) as Log, lines };
}

async function timedOut(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    (v) => v,
    (e: unknown) => e,
  );
}

test('an allocation that arrives after timeouts.registerMs: the caller gets TIMEOUT, and the memory is freed', async () => {
  const { transport, freed } = lateTransport();
  const { log, lines } = recordingLog();
  const guarded = guardTransport('late', transport, { connectTimeoutMs: 1_000, registerMs: REGISTER_MS }, log);
  const e = await timedOut(guarded.allocateMemory!(64n, 'cpu'));
  assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
  assert.match((e as Error).message, /transport late did not settle allocateMemory\(\) within 50 ms/);
  assert.equal(freed, []);
  await later(undefined, LATE_MS + 50);
  assert.equal(freed, [0x2000n]);
  assert.ok(
    lines.some((l) => /settled allocateMemory\(\) after the engine stopped waiting; what it gave is given back/.test(l)),
    lines.join('\n'),
  );
});

test('a registration that arrives after timeouts.registerMs: TIMEOUT, logged, and not unregistered behind the caller', async () => {
  const { transport, unregistered } = lateTransport();
  const { log, lines } = recordingLog();
  const guarded = guardTransport('late', transport, { connectTimeoutMs: 1_000, registerMs: REGISTER_MS }, log);
  const e = await timedOut(guarded.registerMemory({ buffer: new Uint8Array(64), length: 64n, device: 'cpu', remoteAccess: true } as never));
  assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
  await later(undefined, LATE_MS + 50);
  assert.equal(unregistered, []);
  assert.ok(
    lines.some((l) => /^error: transport late settled registerMemory\(\) after the engine stopped waiting$/.test(l)),
    lines.join('\n'),
  );
});

test('a registration within its bound is answered as the plugin gave it', async () => {
  const { transport } = lateTransport();
  const guarded = guardTransport('late', transport, { connectTimeoutMs: 1_000, registerMs: LATE_MS * 4 }, recordingLog().log);
  const r = await guarded.registerMemory({ buffer: new Uint8Array(64), length: 64n, device: 'cpu', remoteAccess: true } as never);
  assert.equal(r, { addr: 0x1000n, length: 64n });
});

test("lookupSegment is bounded by the deadline the engine gave it, plus the plugin's grace", async () => {
  const { transport } = lateTransport();
  const guarded = guardTransport('late', transport, { connectTimeoutMs: 1_000, registerMs: REGISTER_MS }, recordingLog().log);
  const started = Date.now();
  const e = await timedOut(guarded.lookupSegment!('127.0.0.1:1', 10));
  const took = Date.now() - started;
  assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
  assert.ok(took >= 10 + OPEN_PEER_GRACE_MS - 20 && took < 10 + OPEN_PEER_GRACE_MS + 2_000, `took ${took} ms`);
});

test.run();
