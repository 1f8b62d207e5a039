// Scatter-gather RMA: consecutive slices of one batch to one peer region, in one direction,
// go out as one operation carrying up to four iovs where the provider allows it. Every slice
// must still land at its own address, a batch mixing directions and regions is split where
// they change, a window kept full still posts whole groups, and `slicesPerOp: 1` posts one
// operation per slice. On both loopback providers.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { batchOf, type TransferRequest, type SegmentDescriptor, type Transport } from '@te/connector';
import { assertOptionRefused } from '@te/testkit';
import plugin from '../src/index.js';
import { PROVIDERS, bareSide } from './helpers.js';

interface Counters {
  rmaCounters(): { ops: number; slices: number }[];
}

interface Side {
  transport: Transport & Counters;
  descriptor: SegmentDescriptor;
  buffers: { bytes: Uint8Array; addr: bigint }[];
}

/** A bare transport (no engine) with `count` registered buffers of `size` bytes, filled with random bytes. */
async function side(provider: string, size: number, count: number, options: Record<string, unknown> = {}): Promise<Side> {
  const bytes = Array.from({ length: count }, () => new Uint8Array(randomBytes(size)));
  const s = await bareSide(provider, bytes, options);
  return { transport: s.transport as Transport & Counters, descriptor: s.descriptor, buffers: bytes.map((b, k) => ({ bytes: b, addr: s.addrs[k]! })) };
}

function shuffled(n: number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = randomBytes(4).readUInt32LE() % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

function totals(s: Side): { ops: number; slices: number } {
  return s.transport.rmaCounters().reduce((t, r) => ({ ops: t.ops + r.ops, slices: t.slices + r.slices }), { ops: 0, slices: 0 });
}

const SLOT = 8192;
const SLOTS = 128;
// Lengths that are not multiples of each other, so a slice landing in its neighbour's iov shows.
const LENGTHS = [4096, 1, 3000, 8192, 777, 4095];

interface Planned {
  op: 'read' | 'write';
  region: number;
  localSlot: number;
  remoteSlot: number;
  length: number;
}

/**
 * 96 requests, in runs that change direction and target region (write A ×40, read A ×16,
 * write B ×24, read B ×8, write A ×8), at shuffled slots on both sides.
 */
function plan(): Planned[] {
  const runs: [Planned['op'], number, number][] = [
    ['write', 0, 40],
    ['read', 0, 16],
    ['write', 1, 24],
    ['read', 1, 8],
    ['write', 0, 8],
  ];
  const local = shuffled(SLOTS);
  const remote = [shuffled(SLOTS), shuffled(SLOTS)];
  const used = [0, 0];
  const out: Planned[] = [];
  let k = 0;
  for (const [op, region, n] of runs) {
    for (let i = 0; i < n; i++, k++) {
      out.push({ op, region, localSlot: local[k]!, remoteSlot: remote[region]![used[region]!++]!, length: LENGTHS[k % LENGTHS.length]! });
    }
  }
  return out;
}

async function run(provider: string, slicesPerOp: number, options: Record<string, unknown> = {}): Promise<{ ops: number; slices: number; requests: number }> {
  const t = await side(provider, SLOTS * SLOT, 2);
  const i = await side(provider, SLOTS * SLOT, 1, { slicesPerOp, ...options });
  try {
    const peer = await i.transport.openPeer(t.descriptor);
    const p = plan();
    const before = {
      local: i.buffers[0]!.bytes.slice(),
      remote: t.buffers.map((b) => b.bytes.slice()),
    };
    const requests: TransferRequest[] = p.map((r) => ({
      op: r.op,
      local: i.buffers[0]!.addr + BigInt(r.localSlot * SLOT),
      remote: t.buffers[r.region]!.addr + BigInt(r.remoteSlot * SLOT),
      length: r.length,
    }));
    const c0 = totals(i);
    const result = await i.transport.submit(peer, batchOf(requests), { timeoutMs: 5000 });
    const c1 = totals(i);
    assert.ok(
      [...result.statuses].every((s) => s === 0),
      `every request completed: ${[...result.statuses]}`,
    );
    // Expected contents: writes copy the initiator's bytes into the target, reads the reverse.
    const wantLocal = before.local.slice();
    const wantRemote = before.remote.map((b) => b.slice());
    for (const r of p) {
      const l = r.localSlot * SLOT;
      const m = r.remoteSlot * SLOT;
      if (r.op === 'write') wantRemote[r.region]!.set(before.local.subarray(l, l + r.length), m);
      else wantLocal.set(before.remote[r.region]!.subarray(m, m + r.length), l);
    }
    assert.ok(Buffer.from(i.buffers[0]!.bytes).equals(Buffer.from(wantLocal)), 'initiator buffer: every read landed at its own slot, nothing else changed');
    for (let k = 0; k < 2; k++) {
      assert.ok(
        Buffer.from(t.buffers[k]!.bytes).equals(Buffer.from(wantRemote[k]!)),
        `target region ${k}: every write landed at its own slot, nothing else changed`,
      );
    }
    await i.transport.closePeer(peer);
    return { ops: c1.ops - c0.ops, slices: c1.slices - c0.slices, requests: p.length };
  } finally {
    await i.transport.close();
    await t.transport.close();
  }
}

for (const provider of PROVIDERS) {
  test(`${provider}: grouped slices land at their own addresses; runs split where direction or region changes`, async () => {
    const r = await run(provider, 4);
    assert.is(r.slices, r.requests, 'one slice per request (all below the slice size)');
    // Five runs of 40, 16, 24, 8 and 8 slices: 10 + 4 + 6 + 2 + 2 = 24 operations when every
    // group is full. Chunk boundaries of the rail's posting loop may split a few more.
    assert.ok(r.ops >= 24, `at least one operation per four slices of a run (${r.ops})`);
    assert.ok(r.ops <= 36, `slices were carried four to an operation (${r.ops} operations for ${r.slices} slices)`);
  });

  // A PD batch keeps the window full: every completion frees one place at a time, and each
  // place must still take a whole group, not one slice.
  test(`${provider}: a full window (2 operations) still carries four slices per operation`, async () => {
    const r = await run(provider, 4, { window: 2 });
    assert.is(r.slices, r.requests);
    assert.ok(r.ops <= 36, `slices were carried four to an operation through a full window (${r.ops} operations for ${r.slices} slices)`);
  });

  test(`${provider}: slicesPerOp 1 posts one operation per slice, bytes identical`, async () => {
    const r = await run(provider, 1);
    assert.is(r.ops, r.slices, 'one operation per slice');
  });
}

test('slicesPerOp outside 1..4 or not an integer → INVALID_CONFIG naming the option', () => {
  assertOptionRefused(
    plugin,
    [
      [{ slicesPerOp: 0 }, {}],
      [{ slicesPerOp: 5 }, {}],
      [{ slicesPerOp: 2.5 }, {}],
      [{}, { TE_RDMA_SLICES_PER_OP: 'many' }],
    ],
    /slicesPerOp|TE_RDMA_SLICES_PER_OP/,
  );
});

test('describe() reports how many slices one operation carries', async () => {
  const s = await side('tcp;ofi_rxm', 4096, 1, { slicesPerOp: 2 });
  try {
    const rails = (s.transport.describe?.() as { rails: { slicesPerOp: number }[] }).rails;
    assert.ok(rails.length > 0 && rails.every((r) => r.slicesPerOp === 2), JSON.stringify(rails));
  } finally {
    await s.transport.close();
  }
});

test('describe() reports the delivery completion the rails post writes with, per rail and overall', async () => {
  for (const deliveryComplete of [true, false]) {
    const s = await side('tcp;ofi_rxm', 4096, 1, { deliveryComplete });
    try {
      const d = s.transport.describe?.() as { deliveryComplete: boolean; rails: { deliveryComplete: boolean }[] };
      assert.is(d.deliveryComplete, deliveryComplete);
      assert.ok(d.rails.length > 0 && d.rails.every((r) => r.deliveryComplete === deliveryComplete), JSON.stringify(d.rails));
    } finally {
      await s.transport.close();
    }
  }
});

test.run();
