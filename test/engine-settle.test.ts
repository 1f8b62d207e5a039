import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { NATIVE_STATUS, PluginRegistry, createTransferEngine, isTransferError, untilSettled, type TransferEngine } from '@te/connector';
import { createFakePlugin } from '@te/testkit';

/*
 * Engine logic with the fault-injecting fake transport (a test tool, in-process):
 * settled means done with memory, even when a transport breaks its deadline; and one
 * batch's connection failure does not fail the batches beside it.
 */
const fake = createFakePlugin({ name: 'fake-settle' });
const registry = new PluginRegistry({ builtins: false });
registry.register(fake.plugin.name, fake.plugin);

async function pair(): Promise<{ a: TransferEngine; b: TransferEngine; local: bigint; remote: bigint; close: () => Promise<void> }> {
  const a = await createTransferEngine({ connector: 'fake-settle', bindAddress: '127.0.0.1' }, { registry, env: {} });
  const b = await createTransferEngine({ connector: 'fake-settle', bindAddress: '127.0.0.1' }, { registry, env: {} });
  const local = (await a.registerMemory(new Uint8Array(4096))).addr;
  const remote = (await b.registerMemory(new Uint8Array(4096))).addr;
  return { a, b, local, remote, close: async () => (fake.faults.reset(), await a.close(), await b.close()) };
}

/** A 64-byte write through a transport that ignores its 100 ms deadline: the engine's answer (TIMEOUT). */
async function hungWrite(a: TransferEngine, b: TransferEngine, local: bigint, remote: bigint): Promise<unknown> {
  await a.openSegment(b.segmentName);
  fake.faults.hang = true;
  const e = await a.write(b.segmentName, local, remote, 64, { timeoutMs: 100 }).then(
    () => undefined,
    (x: unknown) => x,
  );
  assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
  return e;
}

test('a transport that ignores its deadline: the caller is answered, and the memory stays in use until the transport lets go', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    const e = await hungWrite(a, b, local, remote);
    assert.equal((e as { details?: unknown }).details, { settled: false });
    const u = await a.unregisterMemory(local).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(u, 'MEMORY_IN_USE'), `unregister while the batch is unsettled: ${String(u)}`);
    fake.faults.releaseHung();
    await untilSettled(e); // the transport let go
    await a.unregisterMemory(local); // now free
  } finally {
    await close();
  }
});

test('a batch in flight keeps its local memory: unregistering it is refused, a region it does not use may go', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    const spare = (await a.registerMemory(new Uint8Array(4096))).addr;
    await a.openSegment(b.segmentName);
    fake.faults.hang = true;
    const writing = a.write(b.segmentName, local, remote, 64, { timeoutMs: 60_000 });
    writing.catch(() => {});
    const u = await a.unregisterMemory(local).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(u, 'MEMORY_IN_USE'), `unregister under a batch in flight: ${String(u)}`);
    assert.match((u as Error).message, /is local memory of 1 batch in flight; await it \(or abort it\)/);
    assert.equal((u as { details?: unknown }).details, { addr: local, inFlight: 1, overdue: 0 });
    // A region of the same engine that no batch uses may go meanwhile.
    await a.unregisterMemory(spare);
    fake.faults.releaseHung();
    await writing;
    await a.unregisterMemory(local);
  } finally {
    await close();
  }
});

test('the longest deadline (2^31 - 1 ms): the watchdog, set past it, does not fire at once and answer a batch its transport still holds', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    await a.openSegment(b.segmentName);
    fake.faults.hang = true;
    const writing = a.write(b.segmentName, local, remote, 64, { timeoutMs: 2_147_483_647 }).then(
      () => 'landed',
      (x: unknown) => x,
    );
    // Node.js runs a timer set past 2^31 - 1 ms after 1 ms: a watchdog set that way answers
    // TIMEOUT (settled: false) here, long before the deadline.
    await new Promise((r) => setTimeout(r, 100));
    fake.faults.releaseHung();
    assert.is(await writing, 'landed');
  } finally {
    await close();
  }
});

test('untilSettled: the error of a transfer answered before its transport settled resolves only when the transport lets go; any other error at once', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    const e = await hungWrite(a, b, local, remote);
    let settledAt = 0;
    const settling = untilSettled(e).then(() => (settledAt = Date.now()));
    await new Promise((r) => setTimeout(r, 300));
    assert.is(settledAt, 0, 'untilSettled resolved while the transport still held the batch');
    const releasedAt = Date.now();
    fake.faults.releaseHung();
    await settling;
    assert.ok(settledAt >= releasedAt);

    // A transfer that settled before it failed: nothing to wait for.
    fake.faults.hang = false;
    fake.faults.failRequest(1, NATIVE_STATUS.CONNECTION_LOST);
    const failed = await a.write(b.segmentName, local, remote, 64).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(failed, 'CONNECTION_LOST'), String(failed));
    let at = 0;
    void untilSettled(failed).then(() => (at = Date.now()));
    await new Promise((r) => setImmediate(r));
    assert.ok(at > 0, 'untilSettled of a settled transfer did not resolve at once');
    await untilSettled(undefined);
    await untilSettled(new Error('not a transfer'));
    // Anything but `details.remoteMayBeWritten === true` says nothing more lands.
    for (const odd of [null, 'x', { details: 'x' }, { details: { remoteMayBeWritten: 'yes' } }, { details: null }]) {
      assert.equal(await untilSettled(odd), { remoteMayBeWritten: false }, JSON.stringify(odd));
    }
  } finally {
    await close();
  }
});

test('a cancel the transport could not confirm: the error and untilSettled say the peer may still be written; a read or a confirmed cancel does not', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    await a.openSegment(b.segmentName);
    fake.faults.neverComplete = true;
    fake.faults.unconfirmedCancel = true;
    const w = await a.write(b.segmentName, local, remote, 64, { timeoutMs: 100 }).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(w, 'TIMEOUT'), String(w));
    assert.is(w.details?.remoteMayBeWritten, true);
    assert.equal(await untilSettled(w), { remoteMayBeWritten: true });
    const r = await a.read(b.segmentName, local, remote, 64, { timeoutMs: 100 }).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(r, 'TIMEOUT'), String(r));
    assert.equal(await untilSettled(r), { remoteMayBeWritten: false }, 'a read writes nothing at the peer');
    fake.faults.unconfirmedCancel = false;
    const confirmed = await a.write(b.segmentName, local, remote, 64, { timeoutMs: 100 }).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.equal(await untilSettled(confirmed), { remoteMayBeWritten: false });
  } finally {
    await close();
  }
});

test('a transport that held a write past its deadline and then gave up unconfirmed: untilSettled resolves with remoteMayBeWritten', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    const e = await hungWrite(a, b, local, remote);
    assert.is((e as { details?: Record<string, unknown> }).details?.remoteMayBeWritten, undefined, 'not known when the engine answers');
    const settling = untilSettled(e);
    fake.faults.releaseHung({ unconfirmed: true });
    assert.equal(await settling, { remoteMayBeWritten: true });
    // One that completes after all: nothing more lands.
    const again = await hungWrite(a, b, local, remote);
    const clean = untilSettled(again);
    fake.faults.releaseHung();
    assert.equal(await clean, { remoteMayBeWritten: false });
  } finally {
    await close();
  }
});

test('one batch failing with a connection error does not fail the batch beside it on the same peer', async () => {
  const { a, b, local, remote, close } = await pair();
  try {
    await a.openSegment(b.segmentName);
    fake.faults.latencyMs = 150;
    const slow = a.write(b.segmentName, local, remote, 64, { timeoutMs: 5_000 });
    await new Promise((r) => setTimeout(r, 20));
    fake.faults.latencyMs = 0;
    fake.faults.failRequest(1, NATIVE_STATUS.CONNECTION_LOST);
    const failed = await a.write(b.segmentName, local + 64n, remote + 64n, 64).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(failed, 'CONNECTION_LOST'), String(failed));
    const r = await slow.then(
      (x) => x,
      (x: unknown) => x,
    );
    assert.ok(!(r instanceof Error), `the sibling batch failed: ${String(r)}`);
    // The forgotten peer is reopened for the next transfer.
    await a.write(b.segmentName, local, remote, 64);
  } finally {
    await close();
  }
});

test("MC_FORCE_TCP is satisfied by any TCP-class plugin, a third party's too: decided by capability, not by name", async () => {
  const acme = createFakePlugin({ name: 'acme-tcp', class: 'tcp' });
  const r = new PluginRegistry({ builtins: false });
  r.register('acme-tcp', acme.plugin);
  const e = await createTransferEngine({ connector: 'acme-tcp', forceTcp: true, bindAddress: '127.0.0.1' }, { registry: r, env: {} });
  try {
    assert.equal(e.transports, ['acme-tcp']);
  } finally {
    await e.close();
  }
});

test('the fake transport registered after a native one follows the registration rule', async () => {
  const r = new PluginRegistry();
  r.register('fake-settle', fake.plugin);
  const e = await createTransferEngine({ connector: 'mooncake-tcp', transports: ['fake-settle'], bindAddress: '127.0.0.1' }, { registry: r, env: {} });
  try {
    const h = await e.registerMemory(new Uint8Array(256));
    assert.ok(h.addr > 0n);
    await e.unregisterMemory(h);
  } finally {
    await e.close();
  }
});

test.run();
