import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, TransferError, createTransferEngine, type KVReceiver, type KVSender, type ParallelLayout } from '@te/connector';
import { fillPrefill, type ModelSpec } from './fixtures/pd-model.js';
import { gatedPlugin } from './gated-transport.js';
import { withInProcessRanks, type MakeRank } from './in-process-ranks.js';
import { layout } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * "Failed" and an abort acknowledgement tell a decode it may free its pages: neither may
 * be said while a write into those pages is still in flight. Ranks run in one process
 * over the testkit's fake transport (real engines and control plane), with a gate that
 * holds chosen writes open past their abort and deadline, as a transport that cannot
 * recall posted writes does, and fails others meanwhile.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const gated = gatedPlugin('settle-gate');
const engine = () => createTransferEngine({ connector: 'settle-gate' }, { registry: gated.registry() });
const PAGES = Uint32Array.of(0, 1, 2, 3);
const DEST = Uint32Array.of(8, 9, 10, 11);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Resolves with the error a cell failed with (undefined on Success; a TIMEOUT error if it did neither within 30 s), and records when. */
const failureOf = (cell: { reached(s: KVStatus, o: { timeoutMs: number }): Promise<unknown> }, at: { ms: number }) =>
  cell.reached(KVStatus.Success, { timeoutMs: 30_000 }).then(
    () => undefined,
    (e: TransferError) => ((at.ms = Date.now()), e),
  );
/** What a send settled with: its error, or undefined. */
const outcome = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as TransferError,
  );

/** Prefill and decode ranks of `layouts`, one room between them, every side ready for `send`. */
async function openRoom(make: MakeRank, port: number, room: bigint, layouts: { prefill: ParallelLayout[]; decode: ParallelLayout[] }) {
  const bootstrap = { host: '127.0.0.1', port, room };
  const prefills = [];
  for (const l of layouts.prefill) prefills.push(await make('prefill', l));
  const decodes = [];
  for (const l of layouts.decode) decodes.push(await make('decode', l));
  const senders: KVSender[] = prefills.map((p) => {
    fillPrefill(MODEL, p.memory, room, PAGES, 1);
    const s = p.manager.createSender(bootstrap);
    s.init(PAGES.length, 1);
    return s;
  });
  const receivers: KVReceiver[] = decodes.map((d) => d.manager.createReceiver(bootstrap));
  await Promise.all(receivers.map((r) => r.init(DEST, 2)));
  await Promise.all(senders.map((s) => s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 10_000 })));
  return { prefills, decodes, senders, receivers };
}

/** Prefill TP 1 into decode TP 1: sends the room with its one write held by the transport. */
async function oneIntoOneHeld(make: MakeRank, port: number, room: bigint) {
  const {
    decodes: [d],
    senders: [sender],
    receivers: [receiver],
  } = await openRoom(make, port, room, { prefill: [layout(1, 0)], decode: [layout(1, 0)] });
  const parked = gated.arm({ hold: d!.engine.segmentName });
  const sending = outcome(sender!.send(PAGES, { last: true }));
  await parked;
  return { sender: sender!, receiver: receiver!, sending };
}

/**
 * Prefill TP 2 (two heads each) into decode TP 1: both prefill ranks write into the one
 * decode's pages. Sends the room with rank 0's write held and rank 1's failed.
 */
async function twoRanksIntoOne(make: MakeRank, port: number, room: bigint) {
  const { prefills, senders, receivers } = await openRoom(make, port, room, { prefill: [layout(2, 0), layout(2, 1)], decode: [layout(1, 0)] });
  const parked = gated.arm({ holdFrom: prefills[0]!.engine.segmentName, failFrom: prefills[1]!.engine.segmentName });
  const sent = senders.map((s) => outcome(s.send(PAGES, { last: true })));
  await parked;
  return { senders, receiver: receivers[0]!, sent };
}

test.after.each(() => gated.reset());

test("one decode's write fails while another's is in flight: that decode hears Failed, and its abort is acknowledged, only after its batch settled", async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    try {
      // Prefill TP 1 serves two decode ranks (TP 2, two heads each): two destinations per room.
      const {
        decodes: [d0, d1],
        senders: [sender],
        receivers: [r0, r1],
      } = await openRoom(make, port, 31n, { prefill: [layout(1, 0)], decode: [layout(2, 0), layout(2, 1)] });

      const parked = gated.arm({ hold: d0.engine.segmentName, fail: d1.engine.segmentName });
      const sendSettled = { ms: 0 };
      const sending = outcome(sender.send(PAGES, { last: true }).finally(() => (sendSettled.ms = Date.now())));
      await parked;
      const r0Failed = { ms: 0 };
      const r0Failure = failureOf(r0.cell, r0Failed);
      const r1Failure = failureOf(r1.cell, { ms: 0 });
      // The room failed (decode 1's write), but decode 0 must not hear it while its batch is open.
      await sleep(500);
      assert.is(sender.status, KVStatus.Failed);
      assert.is(r0Failed.ms, 0, `decode 0 was told the room failed while a write to it was in flight: ${r0.failure?.message}`);
      assert.is(r0.status, KVStatus.Transferring);
      assert.is(sendSettled.ms, 0, 'send() settled while a write of its chunk was in flight');

      // Decode 0 aborts: the acknowledgement (its licence to free the pages) waits for the batch.
      let abortedAt = 0;
      const aborting = r0.abort('test').then(() => (abortedAt = Date.now()));
      await sleep(500);
      assert.is(abortedAt, 0, 'the prefill acknowledged the abort while a write to decode 0 was in flight');

      const releasedAt = Date.now();
      gated.releaseAll();
      await aborting;
      assert.ok(abortedAt >= releasedAt);
      const sendError = await sending;
      assert.is(sendError?.code, 'TRANSFER_FAILED', sendError?.message);
      assert.ok(sendSettled.ms >= releasedAt);
      assert.ok((await r0Failure) !== undefined);
      const e1 = await r1Failure;
      assert.is(e1?.code, 'TRANSFER_FAILED', e1?.message);
      assert.is(sender.status, KVStatus.Failed);
    } finally {
      // Held batches go on before the ranks close (closing waits for them).
      gated.releaseAll();
    }
  });
});

test("a write its transport holds past the deadline and the engine's grace: the room fails at once, but the decode hears Failed, and its abort is acknowledged, only once the transport let go", async () => {
  // The engine answers a batch its transport has not settled 2 s after the deadline
  // (TIMEOUT, details.settled: false); the transport goes on holding it past that.
  await withInProcessRanks({ model: MODEL, engine, timeouts: { ...FAST, transferMs: 300 } }, async (make, port) => {
    try {
      const { sender, receiver, sending } = await oneIntoOneHeld(make, port, 32n);
      const failed = { ms: 0 };
      const failure = failureOf(receiver.cell, failed);
      // The engine gave up on the write (deadline + grace): send() fails and the room is
      // Failed at the prefill, but the transport still holds the write to the decode.
      const sendError = await sending;
      assert.is(sendError?.code, 'TIMEOUT', sendError?.message);
      assert.is(sender.status, KVStatus.Failed);
      await sleep(500);
      assert.is(failed.ms, 0, `the decode was told the room failed while its transport still held a write to it: ${receiver.failure?.message}`);

      let abortedAt = 0;
      const aborting = receiver.abort('test').then(() => (abortedAt = Date.now()));
      await sleep(500);
      assert.is(abortedAt, 0, 'the prefill acknowledged the abort while its transport still held a write to the decode');

      const releasedAt = Date.now();
      gated.releaseAll();
      await aborting;
      assert.ok(abortedAt >= releasedAt);
      // Its own abort failed the room on the decode at once; only the acknowledgement waited.
      assert.is((await failure)?.code, 'ABORTED');
    } finally {
      gated.releaseAll();
    }
  });
});

test('one prefill rank of a room fails while another still writes to the decode: the decode reports Failed (its licence to free the pages) only once that write settled', async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    try {
      const { receiver, sent } = await twoRanksIntoOne(make, port, 33n);
      const failed = { ms: 0 };
      const failure = failureOf(receiver.cell, failed);
      // Rank 1 failed and reports it at once (its own write settled); rank 0's write is in flight.
      assert.is((await sent[1])?.code, 'TRANSFER_FAILED');
      await sleep(500);
      assert.is(failed.ms, 0, `the decode reported the room failed while prefill rank 0 still wrote into its pages: ${receiver.failure?.message}`);
      assert.is.not(receiver.status, KVStatus.Success);

      const releasedAt = Date.now();
      gated.releaseAll();
      const e = await failure;
      assert.ok(failed.ms >= releasedAt, 'Failed came before the held write settled');
      assert.is(e?.code, 'TRANSFER_FAILED', e?.message);
      assert.is(e?.details?.pagesMayBeWritten, undefined, 'every write settled and nothing more lands');
      assert.is(receiver.status, KVStatus.Failed);
      assert.is((await sent[0])?.code, 'ABORTED', 'rank 0 was told to stop');
    } finally {
      gated.releaseAll();
    }
  });
});

test("a prefill whose transport settles a write to the decode without the decode's confirmation: the decode's Failed says its pages may still be written", async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    try {
      const { sender, receiver, sending } = await oneIntoOneHeld(make, port, 35n);
      const failure = failureOf(receiver.cell, { ms: 0 });
      // The prefill gives the room up; its transport settles the write unconfirmed.
      const aborting = sender.abort('test');
      gated.releaseAll({ unconfirmed: true });
      await aborting;
      assert.is((await sending)?.code, 'ABORTED');
      const e = await failure;
      assert.is(e?.code, 'ABORTED', e?.message);
      assert.is(e!.details?.pagesMayBeWritten, true, `Failed without pagesMayBeWritten: ${e!.message}`);
      assert.match(e!.message, /pages may still be written/);
      // An abort that reaches the prefill after it finished the room (as one from a decode
      // that failed the room itself, and so took no report) gets the same answer.
      const late = await outcome(receiver.abort('late'));
      assert.is(late?.details?.pagesMayBeWritten, true, 'the answer to a late abort lost pagesMayBeWritten');
    } finally {
      gated.releaseAll();
    }
  });
});

test("a decode's abort answered after an unconfirmed write: abort() rejects and says the pages may still be written", async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    try {
      const { sender, receiver, sending } = await oneIntoOneHeld(make, port, 36n);
      const aborting = outcome(receiver.abort('test'));
      // The abort reached the prefill (its sender failed), which now waits for the held write.
      assert.is((await failureOf(sender.cell, { ms: 0 }))?.code, 'ABORTED');
      gated.releaseAll({ unconfirmed: true });
      const e = await aborting;
      assert.ok(e, 'abort() resolved: the decode would free pages a write may still land in');
      assert.is(e.code, 'ABORTED', e.message);
      assert.is(e.details?.pagesMayBeWritten, true);
      assert.is((await sending)?.code, 'ABORTED');
    } finally {
      gated.releaseAll();
    }
  });
});

test('prefill TP 2 into decode TP 1: rank 1 fails, rank 0 settles its write unconfirmed; the Failed the decode shows says its pages may still be written', async () => {
  await withInProcessRanks({ model: MODEL, engine }, async (make, port) => {
    try {
      const { senders, receiver, sent } = await twoRanksIntoOne(make, port, 37n);
      const failure = failureOf(receiver.cell, { ms: 0 });
      assert.is((await sent[1])?.code, 'TRANSFER_FAILED');
      // The decode's abort reached rank 0 (its sender failed), which now waits for its held write.
      assert.is((await failureOf(senders[0]!.cell, { ms: 0 }))?.code, 'ABORTED');
      gated.releaseAll({ unconfirmed: true });
      const e = await failure;
      assert.is(e?.code, 'TRANSFER_FAILED', e?.message);
      assert.is(e!.details?.pagesMayBeWritten, true, `Failed without pagesMayBeWritten: ${e!.message}`);
      await Promise.all(sent);
    } finally {
      gated.releaseAll();
    }
  });
});

test('a prefill rank that does not acknowledge the abort within abortMs: the decode fails the room then, and says its pages may still be written', async () => {
  await withInProcessRanks({ model: MODEL, engine, timeouts: { ...FAST, abortMs: 800 } }, async (make, port) => {
    try {
      // Rank 0 holds its write (and so its acknowledgement) past the decode's abortMs.
      const { receiver, sent } = await twoRanksIntoOne(make, port, 34n);
      const e = await failureOf(receiver.cell, { ms: 0 });
      assert.is(e?.code, 'TRANSFER_FAILED', e?.message);
      assert.match(e!.message, /did not acknowledge the abort.*its pages may still be written/);
      assert.is(e!.details?.pagesMayBeWritten, true);
      gated.releaseAll();
      await Promise.all(sent);
    } finally {
      gated.releaseAll();
    }
  });
});

test("a decode's abort() that a prefill rank does not acknowledge within abortMs rejects, and says the pages may still be written", async () => {
  await withInProcessRanks({ model: MODEL, engine, timeouts: { ...FAST, abortMs: 800 } }, async (make, port) => {
    try {
      const { receiver, sending } = await oneIntoOneHeld(make, port, 38n);
      // The prefill acknowledges only once its held write settles, after abortMs.
      const e = await outcome(receiver.abort('test'));
      assert.ok(e, 'abort() resolved while the prefill still held a write to the pages');
      assert.is(e.code, 'TIMEOUT', e.message);
      assert.match(e.message, /did not acknowledge the abort/);
      assert.is(e.details?.pagesMayBeWritten, true, `no pagesMayBeWritten: ${e.message}`);
      gated.releaseAll();
      await sending;
    } finally {
      gated.releaseAll();
    }
  });
});

test.run();
