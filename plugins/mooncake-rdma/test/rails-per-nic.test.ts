// Several rails (endpoints, each with its own progress thread) on one NIC: slices of a batch
// are striped over all of them and every byte still lands at its own address, also when the
// two sides run different numbers of rails (rail r talks to the peer's rail r mod its count).
// The default (0) is automatic: one rail per NIC on hardware providers, one per 4 CPUs (1 to
// 4) on socket-based ones.
import { randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, parseOptions, usableCpus, type SegmentDescriptor, type TransferRequest, type Transport } from '@te/connector';
import { assertOptionRefused } from '@te/testkit';
import plugin from '../src/index.js';
import { PROVIDERS, bareSide } from './helpers.js';

interface Side {
  transport: Transport & { rmaCounters(): { ops: number; slices: number }[] };
  descriptor: SegmentDescriptor;
  bytes: Uint8Array;
  addr: bigint;
}

const SLOT = 8192;
const SLOTS = 128;

async function side(provider: string, options: Record<string, unknown>): Promise<Side> {
  const bytes = new Uint8Array(randomBytes(SLOTS * SLOT));
  const s = await bareSide(provider, [bytes], options);
  return { transport: s.transport as Side['transport'], descriptor: s.descriptor, bytes, addr: s.addrs[0]! };
}

const railCount = (s: Side) => (s.transport.describe?.() as { rails: unknown[] }).rails.length;

/** 96 writes then 32 reads at distinct random slots; checks every byte on both sides. */
async function stripe(provider: string, initiatorRails: number, targetRails: number): Promise<number[]> {
  const t = await side(provider, { railsPerNic: targetRails });
  const i = await side(provider, { railsPerNic: initiatorRails });
  try {
    assert.is(railCount(i), initiatorRails, 'initiator rails');
    assert.is(railCount(t), targetRails, 'target rails');
    assert.is((t.descriptor.transports[plugin.name]!.endpoint as { rails: unknown[] }).rails.length, targetRails, 'the target publishes one address per rail');
    const peer = await i.transport.openPeer(t.descriptor);
    const slots = [...Array(SLOTS).keys()].sort(() => randomBytes(1)[0]! - 128);
    const local = [...Array(SLOTS).keys()].sort(() => randomBytes(1)[0]! - 128);
    const before = { local: i.bytes.slice(), remote: t.bytes.slice() };
    const requests: TransferRequest[] = slots.map((remoteSlot, k) => ({
      op: k < 96 ? 'write' : 'read',
      local: i.addr + BigInt(local[k]! * SLOT),
      remote: t.addr + BigInt(remoteSlot * SLOT),
      length: 1 + ((k * 997) % SLOT),
    }));
    const c0 = i.transport.rmaCounters();
    const result = await i.transport.submit(peer, batchOf(requests), { timeoutMs: 5000 });
    const c1 = i.transport.rmaCounters();
    assert.ok(
      [...result.statuses].every((s) => s === 0),
      `every request completed: ${[...result.statuses]}`,
    );
    const wantLocal = before.local.slice();
    const wantRemote = before.remote.slice();
    requests.forEach((r, k) => {
      const l = local[k]! * SLOT;
      const m = slots[k]! * SLOT;
      if (r.op === 'write') wantRemote.set(before.local.subarray(l, l + Number(r.length)), m);
      else wantLocal.set(before.remote.subarray(m, m + Number(r.length)), l);
    });
    assert.ok(Buffer.from(t.bytes).equals(Buffer.from(wantRemote)), 'target: every write landed at its own slot, nothing else changed');
    assert.ok(Buffer.from(i.bytes).equals(Buffer.from(wantLocal)), 'initiator: every read landed at its own slot, nothing else changed');
    await i.transport.closePeer(peer);
    return c1.map((c, r) => c.slices - c0[r]!.slices);
  } finally {
    await i.transport.close();
    await t.transport.close();
  }
}

for (const provider of PROVIDERS) {
  test(`${provider}: 3 rails to a peer with 2: slices striped over every rail, bytes land`, async () => {
    const perRail = await stripe(provider, 3, 2);
    assert.is(perRail.length, 3);
    assert.ok(
      perRail.every((n) => n > 0),
      `every rail carried slices: ${perRail}`,
    );
    assert.is(
      perRail.reduce((a, b) => a + b, 0),
      SLOTS,
      'one slice per request',
    );
  });

  test(`${provider}: 1 rail to a peer with 4: bytes land`, async () => {
    const perRail = await stripe(provider, 1, 4);
    assert.equal(perRail, [SLOTS]);
  });
}

test('railsPerNic 0 (the default) is automatic: one per 4 CPUs, 1 to 4, on a socket-based provider', async () => {
  assert.is(parseOptions(plugin.options, {}, {}, plugin.name).railsPerNic, 0);
  const expected = Math.min(4, Math.max(1, Math.floor(usableCpus() / 4)));
  for (const provider of PROVIDERS) {
    const s = await side(provider, {});
    try {
      assert.is(railCount(s), expected, `${provider} on ${usableCpus()} CPUs`);
    } finally {
      await s.transport.close();
    }
  }
});

test('railsPerNic outside 0..16 or not an integer → INVALID_CONFIG naming the option', () => {
  assertOptionRefused(
    plugin,
    [
      [{ railsPerNic: -1 }, {}],
      [{ railsPerNic: 17 }, {}],
      [{ railsPerNic: 1.5 }, {}],
      [{}, { TE_RDMA_RAILS_PER_NIC: 'all' }],
    ],
    /railsPerNic|TE_RDMA_RAILS_PER_NIC/,
  );
});

test.run();
