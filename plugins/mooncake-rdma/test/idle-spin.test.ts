// A rail's idle polling (`idleSpinUs`). On tcp;ofi_rxm the target of RMA writes moves the
// data inside its completion-queue polls but gets no completion of its own, so a rail that
// slept whenever its queue stayed empty was woken for every arrival, at the sender's cost.
// The rail now counts a wait during which the provider moved data as work and keeps polling
// for `idleSpinUs` after it; a rail with nothing arriving still goes back to sleep.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { batchOf, type Transport } from '@te/connector';
import { assertOptionRefused } from '@te/testkit';
import plugin from '../src/index.js';
import { KiB, bareSide } from './helpers.js';

interface WaitCounters {
  waitCounters(): { waits: number; waitsWithData: number }[];
}

const PROVIDER = 'tcp;ofi_rxm'; // sockets progresses on its own threads: its rails' waits say nothing of the data
const SIZE = 64 * KiB;
const SLOTS = 64;

function waits(t: Transport): { waits: number; waitsWithData: number } {
  return (t as Transport & WaitCounters).waitCounters().reduce((a, r) => ({ waits: a.waits + r.waits, waitsWithData: a.waitsWithData + r.waitsWithData }), {
    waits: 0,
    waitsWithData: 0,
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Writes `batches` batches of 16 requests of 64 KiB from an initiator into a target with
 * `targetOptions`, one at a time with a pause of PAUSE_MS after each: the target's queue is
 * empty in every pause, whatever the machine's load (a stream with batches in flight back to
 * back left it empty only as often as the scheduler happened to allow). Returns the
 * target's wait counters over the stream, after checking that the last pass's bytes landed.
 */
const PAUSE_MS = 3;
async function stream(targetOptions: Record<string, unknown>, batches: number) {
  const src = new Uint8Array(randomBytes(SIZE * SLOTS));
  const dst = new Uint8Array(SIZE * SLOTS);
  const t = await bareSide(PROVIDER, [dst], targetOptions);
  const i = await bareSide(PROVIDER, [src]);
  try {
    const peer = await i.transport.openPeer(t.descriptor);
    const batch = (k: number) =>
      batchOf(
        Array.from({ length: 16 }, (_, j) => ({
          op: 'write' as const,
          local: i.addrs[0]! + BigInt(((k * 16 + j) % SLOTS) * SIZE),
          remote: t.addrs[0]! + BigInt(((k * 16 + j) % SLOTS) * SIZE),
          length: SIZE,
        })),
      );
    const before = waits(t.transport);
    for (let k = 0; k < batches; k++) {
      const r = await i.transport.submit(peer, batch(k), { timeoutMs: 10_000 });
      assert.ok(
        [...r.statuses].every((s) => s === 0),
        `every write completed: ${[...r.statuses]}`,
      );
      await sleep(PAUSE_MS);
    }
    const after = waits(t.transport);
    assert.ok(Buffer.from(dst).equals(Buffer.from(src)), "the target's buffer holds what was written");
    await i.transport.closePeer(peer);
    return { waits: after.waits - before.waits, waitsWithData: after.waitsWithData - before.waitsWithData, target: t, dst };
  } finally {
    await i.transport.close();
  }
}

test(`${PROVIDER}: a target receiving a stream of writes keeps polling instead of sleeping between arrivals`, async () => {
  const r = await stream({ idleSpinUs: 10_000_000 }, 30);
  try {
    // The rail slept until the first writes arrived; the wait that saw them moved data, and
    // from then on it polled through every pause: at most a few waits over the whole stream.
    assert.ok(r.waits <= 3, `the target's rail slept ${r.waits} times during the stream`);
  } finally {
    await r.target.transport.close();
  }
});

test(`${PROVIDER}: with idleSpinUs 0 the same target sleeps whenever its queue is empty (the counters see it)`, async () => {
  const r = await stream({ idleSpinUs: 0 }, 30);
  try {
    // At least one wait per pause (the queue was empty), and more while a batch's writes trickle in.
    assert.ok(r.waits >= 30, `the target's rail slept ${r.waits} times during the stream`);
    assert.ok(r.waitsWithData > 0, `some of those waits moved data (${r.waitsWithData})`);
  } finally {
    await r.target.transport.close();
  }
});

test(`${PROVIDER}: once the writes stop, the target's rail sleeps until traffic comes back (an idle process does not wake on a clock)`, async () => {
  const r = await stream({ idleSpinUs: 20_000 }, 20);
  try {
    await sleep(100); // past the 20 ms of polling after the last arrival
    const w0 = waits(r.target.transport);
    await sleep(500);
    const w1 = waits(r.target.transport);
    // The rail sleeps on its completion queue's wait fd with nothing timed to do: a wake-up a
    // second at most (it woke every 2 ms, 500 times a second, when it slept in fi_cq_sread).
    assert.ok(w1.waits - w0.waits <= 2, `the idle rail woke ${w1.waits - w0.waits} times in 500 ms`);
    // A write arriving at the sleeping rail ends its sleep: the sleep counts as one that saw
    // traffic (one that only timed out and then found the data would not), and the bytes land.
    const src = new Uint8Array(randomBytes(SIZE));
    const i = await bareSide(PROVIDER, [src]);
    try {
      const peer = await i.transport.openPeer(r.target.descriptor);
      const w = batchOf([{ op: 'write', local: i.addrs[0]!, remote: r.target.addrs[0]!, length: SIZE }]);
      const done = await i.transport.submit(peer, w, { timeoutMs: 10_000 });
      assert.equal([...done.statuses], [0]);
      assert.ok(Buffer.from(r.dst.subarray(0, SIZE)).equals(Buffer.from(src)), 'the write landed');
    } finally {
      await i.transport.close();
    }
    const w2 = waits(r.target.transport);
    assert.ok(w2.waitsWithData > w1.waitsWithData, 'the arriving traffic ended a sleep');
  } finally {
    await r.target.transport.close();
  }
});

test(`${PROVIDER}: a rail that sleeps between batches is woken by each post, never by its timeout`, async () => {
  // With idleSpinUs 0 the initiator's rail sleeps as soon as a batch completed, until the
  // next batch is posted. A sleep that ends on its timeout (1 s) while batches keep coming is
  // a wake-up lost. Every other batch follows its predecessor at once, so that posts race the
  // rail's way into its sleep; the others wait PAUSE_MS, so that the rail is surely asleep.
  const src = new Uint8Array(randomBytes(SIZE));
  const dst = new Uint8Array(SIZE);
  const t = await bareSide(PROVIDER, [dst]);
  const i = await bareSide(PROVIDER, [src], { idleSpinUs: 0 });
  try {
    const peer = await i.transport.openPeer(t.descriptor);
    const write = batchOf([{ op: 'write', local: i.addrs[0]!, remote: t.addrs[0]!, length: 4 * KiB }]);
    await i.transport.submit(peer, write, { timeoutMs: 10_000 });
    const before = waits(i.transport);
    for (let k = 0; k < 200; k++) {
      const r = await i.transport.submit(peer, write, { timeoutMs: 10_000 });
      assert.equal([...r.statuses], [0]);
      if (k % 2) await sleep(PAUSE_MS);
    }
    const after = waits(i.transport);
    const slept = after.waits - before.waits;
    assert.ok(slept >= 50, `the initiator's rail slept ${slept} times in 200 batches, 100 of them after a pause`);
    assert.is(slept - (after.waitsWithData - before.waitsWithData), 0, `of ${slept} sleeps between batches, some ended on their timeout`);
    assert.ok(Buffer.from(dst.subarray(0, 4 * KiB)).equals(Buffer.from(src.subarray(0, 4 * KiB))), 'the writes landed');
  } finally {
    await i.transport.close();
    await t.transport.close();
  }
});

test('idleSpinUs below 0, above 10 s or not an integer → INVALID_CONFIG naming the option', () => {
  assertOptionRefused(
    plugin,
    [
      [{ idleSpinUs: -1 }, {}],
      [{ idleSpinUs: 10_000_001 }, {}],
      [{ idleSpinUs: 2.5 }, {}],
      [{}, { TE_RDMA_IDLE_SPIN_US: 'forever' }],
    ],
    /idleSpinUs|TE_RDMA_IDLE_SPIN_US/,
  );
});

test.run();
