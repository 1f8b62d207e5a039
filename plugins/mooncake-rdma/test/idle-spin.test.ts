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
    return { waits: after.waits - before.waits, waitsWithData: after.waitsWithData - before.waitsWithData, target: t };
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

test(`${PROVIDER}: once the writes stop, the target's rail goes back to sleep (an idle process does not spin)`, async () => {
  const r = await stream({ idleSpinUs: 20_000 }, 20);
  try {
    await sleep(100); // past the 20 ms of polling after the last arrival
    const w0 = waits(r.target.transport);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await sleep(300);
    const cpuMs = (() => {
      const c = process.cpuUsage(cpu0);
      return (c.user + c.system) / 1000;
    })();
    const wallMs = performance.now() - t0;
    const w1 = waits(r.target.transport);
    assert.ok(w1.waits - w0.waits >= 10, `the idle rail slept ${w1.waits - w0.waits} times in ${wallMs.toFixed(0)} ms`);
    // A wait is judged by the CPU time it used; on a loaded machine a short idle wake-up can
    // pass for one that moved data now and then, which costs one idleSpinUs window of polling
    // (20 ms), never a wrong byte. Most idle waits must still be judged idle.
    const misjudged = w1.waitsWithData - w0.waitsWithData;
    assert.ok(misjudged <= 2, `${misjudged} of ${w1.waits - w0.waits} idle waits counted as moving data`);
    assert.ok(cpuMs < wallMs / 2, `the idle process used ${cpuMs.toFixed(0)} ms of CPU in ${wallMs.toFixed(0)} ms`);
  } finally {
    await r.target.transport.close();
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
