import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, PLUGIN_API_VERSION, PluginRegistry, TransferError, createTransferEngine, definePlugin, type BatchResult, type SubmitOptions, type TransferBatch, type TransportContext, type TransportPeer } from '@te/connector';
import { FakeFaults, FakeTransport } from '@te/testkit';
import { fillPrefill, type ModelSpec } from './fixtures/pd-model.js';
import { withInProcessRanks } from './in-process-ranks.js';
import { layout } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * "Failed" and an abort acknowledgement tell a decode it may free its pages: a prefill
 * must not say either while one of its writes to that decode is still in flight. Ranks
 * run in one process over the testkit's fake transport (real engines and control
 * plane), with a gate that holds one decode's batch open past its abort, as a transport
 * that cannot recall posted writes does, and fails the other decode's batch meanwhile.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const PLUGIN = 'settle-gate';

const gate = {
  hold: undefined as string | undefined,
  fail: undefined as string | undefined,
  holdFrom: undefined as string | undefined,
  failFrom: undefined as string | undefined,
  parked: undefined as Promise<void> | undefined,
  park: undefined as (() => void) | undefined,
  released: [] as (() => void)[],
};

class GatedTransport extends FakeTransport {
  private readonly source: string;

  constructor(plugin: string, context: TransportContext, faults: FakeFaults) {
    super(plugin, context, faults);
    this.source = context.segmentName;
  }

  override submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    // Which writes to hold and fail can also be chosen by their source (two prefill ranks writing to one decode).
    if (gate.holdFrom !== undefined || gate.failFrom !== undefined) {
      if (this.source === gate.holdFrom) return this.held(peer, batch, options);
      if (this.source === gate.failFrom) return gate.parked!.then(() => Promise.reject(new TransferError('TRANSFER_FAILED', 'injected: this rank\'s link broke')));
      return super.submit(peer, batch, options);
    }
    if (peer.segment === gate.hold) return this.held(peer, batch, options);
    // Fails once the held batch is in the transport (failing first would abort it before it got there).
    if (peer.segment === gate.fail) return gate.parked!.then(() => Promise.reject(new TransferError('TRANSFER_FAILED', 'injected: the link to this decode broke')));
    return super.submit(peer, batch, options);
  }

  /** Ignores the abort and the deadline until released, then lands its bytes. */
  private held(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    return new Promise((resolve, reject) => {
      gate.released.push(() => super.submit(peer, batch, { timeoutMs: options.timeoutMs }).then(resolve, reject));
      gate.park?.();
    });
  }
}

const faults = new FakeFaults();
const plugin = definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN,
  version: '0.0.0-test',
  capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: true, maxInFlight: 1024, rawAddresses: false },
  options: {},
  probe: () => ({ available: true, details: {} }),
  create: async (context) => new GatedTransport(PLUGIN, context, faults),
});

test('one decode\'s write fails while another\'s is in flight: that decode hears Failed, and its abort is acknowledged, only after its batch settled', async () => {
  const registry = new PluginRegistry({ builtins: false });
  registry.register(PLUGIN, plugin);
  await withInProcessRanks({ model: MODEL, engine: () => createTransferEngine({ connector: PLUGIN }, { registry }) }, async (make, port) => {
    try {
      // Prefill TP 1 serves two decode ranks (TP 2, two heads each): two destinations per room.
      const p = await make('prefill', layout(1, 0));
      const d0 = await make('decode', layout(2, 0));
      const d1 = await make('decode', layout(2, 1));
      const room = 31n;
      const bootstrap = { host: '127.0.0.1', port, room };
      const pages = Uint32Array.of(0, 1, 2, 3);
      fillPrefill(MODEL, p.memory, room, pages, 1);
      const sender = p.manager.createSender(bootstrap);
      sender.init(pages.length, 1);
      const r0 = d0.manager.createReceiver(bootstrap);
      const r1 = d1.manager.createReceiver(bootstrap);
      await Promise.all([r0.init(Uint32Array.of(8, 9, 10, 11), 2), r1.init(Uint32Array.of(8, 9, 10, 11), 2)]);
      await sender.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 });

      gate.hold = d0.engine.segmentName;
      gate.fail = d1.engine.segmentName;
      gate.parked = new Promise<void>((r) => (gate.park = r));
      let sendSettledAt = 0;
      const sending = sender.send(pages, { last: true }).then(
        () => assert.unreachable('the room cannot succeed'),
        (e: unknown) => ((sendSettledAt = Date.now()), e),
      );
      await gate.parked;
      let r0FailedAt = 0;
      const r0Failed = r0.cell.reached(KVStatus.Success).then(() => undefined, (e: TransferError) => ((r0FailedAt = Date.now()), e));
      const r1Failed = r1.cell.reached(KVStatus.Success).then(() => undefined, (e: TransferError) => e);
      // The room failed (decode 1's write), but decode 0 must not hear it while its batch is open.
      await new Promise((r) => setTimeout(r, 500));
      assert.is(sender.status, KVStatus.Failed);
      assert.is(r0FailedAt, 0, `decode 0 was told the room failed while a write to it was in flight: ${r0.failure?.message}`);
      assert.is(r0.status, KVStatus.Transferring);
      assert.is(sendSettledAt, 0, 'send() settled while a write of its chunk was in flight');

      // Decode 0 aborts: the acknowledgement (its licence to free the pages) waits for the batch.
      let abortedAt = 0;
      const aborting = r0.abort('test').then(() => (abortedAt = Date.now()));
      await new Promise((r) => setTimeout(r, 500));
      assert.is(abortedAt, 0, 'the prefill acknowledged the abort while a write to decode 0 was in flight');

      const releasedAt = Date.now();
      for (const release of gate.released.splice(0)) release();
      await aborting;
      assert.ok(abortedAt >= releasedAt);
      const sendError = (await sending) as TransferError;
      assert.is(sendError.code, 'TRANSFER_FAILED', sendError.message);
      assert.ok(sendSettledAt >= releasedAt);
      assert.ok((await r0Failed) !== undefined);
      const e1 = await r1Failed;
      assert.is(e1?.code, 'TRANSFER_FAILED', e1?.message);
      assert.is(sender.status, KVStatus.Failed);
    } finally {
      // Gated batches go on before the ranks close (closing waits for them).
      for (const release of gate.released.splice(0)) release();
      gate.hold = gate.fail = undefined;
    }
  });
});

test('a write its transport holds past the deadline and the engine\'s grace: the room fails at once, but the decode hears Failed, and its abort is acknowledged, only once the transport let go', async () => {
  const registry = new PluginRegistry({ builtins: false });
  registry.register(PLUGIN, plugin);
  // The engine answers a batch its transport has not settled 2 s after the deadline
  // (TIMEOUT, details.settled: false); the transport goes on holding it past that.
  const timeouts = { ...FAST, transferMs: 300 };
  await withInProcessRanks({ model: MODEL, engine: () => createTransferEngine({ connector: PLUGIN }, { registry }), timeouts }, async (make, port) => {
    try {
      const p = await make('prefill', layout(1, 0));
      const d = await make('decode', layout(1, 0));
      const room = 32n;
      const bootstrap = { host: '127.0.0.1', port, room };
      const pages = Uint32Array.of(0, 1, 2, 3);
      fillPrefill(MODEL, p.memory, room, pages, 1);
      const sender = p.manager.createSender(bootstrap);
      sender.init(pages.length, 1);
      const receiver = d.manager.createReceiver(bootstrap);
      await receiver.init(Uint32Array.of(8, 9, 10, 11), 2);
      await sender.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 });

      gate.hold = d.engine.segmentName;
      gate.parked = new Promise<void>((r) => (gate.park = r));
      const sending = sender.send(pages, { last: true }).then(
        (): TransferError => assert.unreachable('the room cannot succeed') as never,
        (e: unknown) => e as TransferError,
      );
      await gate.parked;
      let failedAt = 0;
      const failed = receiver.cell.reached(KVStatus.Success).then(() => undefined, (e: TransferError) => ((failedAt = Date.now()), e));
      // The engine gave up on the write (deadline + grace): send() fails and the room is
      // Failed at the prefill, but the transport still holds the write to the decode.
      const sendError = await sending;
      assert.is(sendError.code, 'TIMEOUT', sendError.message);
      assert.is(sender.status, KVStatus.Failed);
      await new Promise((r) => setTimeout(r, 500));
      assert.is(failedAt, 0, `the decode was told the room failed while its transport still held a write to it: ${receiver.failure?.message}`);

      let abortedAt = 0;
      const aborting = receiver.abort('test').then(() => (abortedAt = Date.now()));
      await new Promise((r) => setTimeout(r, 500));
      assert.is(abortedAt, 0, 'the prefill acknowledged the abort while its transport still held a write to the decode');

      const releasedAt = Date.now();
      for (const release of gate.released.splice(0)) release();
      await aborting;
      assert.ok(abortedAt >= releasedAt);
      // Its own abort failed the room on the decode at once; only the acknowledgement waited.
      assert.is((await failed)?.code, 'ABORTED');
    } finally {
      for (const release of gate.released.splice(0)) release();
      gate.hold = gate.fail = undefined;
    }
  });
});

test('one prefill rank of a room fails while another still writes to the decode: the decode reports Failed (its licence to free the pages) only once that write settled', async () => {
  const registry = new PluginRegistry({ builtins: false });
  registry.register(PLUGIN, plugin);
  await withInProcessRanks({ model: MODEL, engine: () => createTransferEngine({ connector: PLUGIN }, { registry }) }, async (make, port) => {
    try {
      // Prefill TP 2 (two heads each) into decode TP 1: both prefill ranks write into the decode's pages.
      const p0 = await make('prefill', layout(2, 0));
      const p1 = await make('prefill', layout(2, 1));
      const d = await make('decode', layout(1, 0));
      const room = 33n;
      const bootstrap = { host: '127.0.0.1', port, room };
      const pages = Uint32Array.of(0, 1, 2, 3);
      fillPrefill(MODEL, p0.memory, room, pages, 1);
      fillPrefill(MODEL, p1.memory, room, pages, 1);
      const s0 = p0.manager.createSender(bootstrap);
      const s1 = p1.manager.createSender(bootstrap);
      s0.init(pages.length, 1);
      s1.init(pages.length, 1);
      const receiver = d.manager.createReceiver(bootstrap);
      await receiver.init(Uint32Array.of(8, 9, 10, 11), 2);
      await Promise.all([s0.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 }), s1.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 })]);

      gate.holdFrom = p0.engine.segmentName;
      gate.failFrom = p1.engine.segmentName;
      gate.parked = new Promise<void>((r) => (gate.park = r));
      const sent = [s0.send(pages, { last: true }), s1.send(pages, { last: true })].map((x) => x.then(() => undefined, (e: unknown) => e as TransferError));
      await gate.parked;
      let failedAt = 0;
      const failed = receiver.cell.reached(KVStatus.Success).then(() => undefined, (e: TransferError) => ((failedAt = Date.now()), e));
      // Rank 1 failed and reports it at once (its own write settled); rank 0's write is in flight.
      assert.is((await sent[1])?.code, 'TRANSFER_FAILED');
      await new Promise((r) => setTimeout(r, 500));
      assert.is(failedAt, 0, `the decode reported the room failed while prefill rank 0 still wrote into its pages: ${receiver.failure?.message}`);
      assert.is.not(receiver.status, KVStatus.Success);

      const releasedAt = Date.now();
      for (const release of gate.released.splice(0)) release();
      const e = await failed;
      assert.ok(failedAt >= releasedAt, 'Failed came before the held write settled');
      assert.is(e?.code, 'TRANSFER_FAILED', e?.message);
      assert.is(receiver.status, KVStatus.Failed);
      assert.is((await sent[0])?.code, 'ABORTED', 'rank 0 was told to stop');
    } finally {
      for (const release of gate.released.splice(0)) release();
      gate.holdFrom = gate.failFrom = undefined;
    }
  });
});

test('a prefill rank that does not acknowledge the abort within abortMs: the decode fails the room then, and says its pages may still be written', async () => {
  const registry = new PluginRegistry({ builtins: false });
  registry.register(PLUGIN, plugin);
  await withInProcessRanks({ model: MODEL, engine: () => createTransferEngine({ connector: PLUGIN }, { registry }), timeouts: { ...FAST, abortMs: 800 } }, async (make, port) => {
    try {
      const p0 = await make('prefill', layout(2, 0));
      const p1 = await make('prefill', layout(2, 1));
      const d = await make('decode', layout(1, 0));
      const room = 34n;
      const bootstrap = { host: '127.0.0.1', port, room };
      const pages = Uint32Array.of(0, 1, 2, 3);
      fillPrefill(MODEL, p0.memory, room, pages, 1);
      fillPrefill(MODEL, p1.memory, room, pages, 1);
      const s0 = p0.manager.createSender(bootstrap);
      const s1 = p1.manager.createSender(bootstrap);
      s0.init(pages.length, 1);
      s1.init(pages.length, 1);
      const receiver = d.manager.createReceiver(bootstrap);
      await receiver.init(Uint32Array.of(8, 9, 10, 11), 2);
      await Promise.all([s0.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 }), s1.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 })]);

      gate.holdFrom = p0.engine.segmentName;
      gate.failFrom = p1.engine.segmentName;
      gate.parked = new Promise<void>((r) => (gate.park = r));
      const sent = [s0.send(pages, { last: true }), s1.send(pages, { last: true })].map((x) => x.then(() => undefined, (e: unknown) => e as TransferError));
      await gate.parked;
      // Rank 0 holds its write (and so its acknowledgement) past the decode's abortMs.
      const e = await receiver.cell.reached(KVStatus.Success).then(() => undefined, (x: TransferError) => x);
      assert.is(e?.code, 'TRANSFER_FAILED', e?.message);
      assert.match(e!.message, /did not acknowledge the abort.*its pages may still be written/);
      assert.is(e!.details?.pagesMayBeWritten, true);
      for (const release of gate.released.splice(0)) release();
      await Promise.all(sent);
    } finally {
      for (const release of gate.released.splice(0)) release();
      gate.holdFrom = gate.failFrom = undefined;
    }
  });
});

test.run();
