import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, isTransferError } from '@te/connector';
import type { StagingStats } from '../src/index.js';
import { verifyDecode, type ModelSpec, type PageSide } from './fixtures/pd-model.js';
import { flip } from './flipping-transport.js';
import { layout } from './pd-harness.js';
import { onReport, runRoom, withRanks, type Rank, type RoomSpec } from './checksum-ranks.js';

/*
 * Checksums of head-sliced writes and of state (CRC32C per piece: one prefill page's head
 * slice of one layer buffer as it lies in the decode's page; per state slot's shard): every
 * route (gather, ring, direct, and the transport's own gathered and scattered writes) and a
 * decode page holding two prefill pages succeed
 * byte-exact with each report carrying its checksums; a byte flipped in flight by a fake
 * transport on the staged route or in a state slot, and a byte corrupted after a real
 * mooncake-tcp write landed (ring route, state), fail the room with DATA_CORRUPTED naming
 * the layer and page (or the state buffer and slot) and the room.
 */
const MHA: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const MAMBA: ModelSpec = { ...MHA, state: { kind: 'mamba', units: 4, unitBytes: 8, slots: 4 } };
// Slices of 4 KiB and more per page (16 tokens × 256-byte heads): moved as rows by mooncake-tcp itself.
const WIDE: ModelSpec = { ...MHA, headBytes: 256, pageSize: 16 };
const tps = (n: number) => Array.from({ length: n }, (_, i) => layout(n, i));

interface Case {
  name: string;
  model: ModelSpec;
  prefill: number;
  decode: number;
  prefillSide?: PageSide;
  decodeSide?: PageSide;
  route: 'gather' | 'ring' | 'direct' | 'transportGather' | 'transportScatter';
  how: RoomSpec['how'];
}

async function ranks(
  make: (role: 'prefill' | 'decode', l: ReturnType<typeof layout>) => Promise<Rank>,
  p: number,
  d: number,
): Promise<{ prefills: Rank[]; decodes: Rank[] }> {
  const prefills: Rank[] = [];
  for (const l of tps(p)) prefills.push(await make('prefill', l));
  const decodes: Rank[] = [];
  for (const l of tps(d)) decodes.push(await make('decode', l));
  return { prefills, decodes };
}

function staged(prefills: Rank[]): { gather: number; ring: number; transportGather: number; transportScatter: number } {
  const s = prefills.map((p) => p.manager.stagingStats() as StagingStats | undefined);
  const sum = (key: 'gatherWrites' | 'ringWrites' | 'transportGathers' | 'transportScatters') => s.reduce((a, x) => a + (x?.[key] ?? 0), 0);
  return { gather: sum('gatherWrites'), ring: sum('ringWrites'), transportGather: sum('transportGathers'), transportScatter: sum('transportScatters') };
}

const CASES: Case[] = [
  { name: 'TP 1→2 NHD', model: MHA, prefill: 1, decode: 2, route: 'gather', how: 'chunked' },
  { name: 'TP 2→1 NHD', model: MHA, prefill: 2, decode: 1, route: 'ring', how: 'whole' },
  { name: 'TP 2→1 NHD, layerwise, Mamba state sliced', model: MAMBA, prefill: 2, decode: 1, route: 'ring', how: 'layerwise' },
  {
    name: 'TP 1→2 HND both sides',
    model: MHA,
    prefill: 1,
    decode: 2,
    prefillSide: { pageLayout: 'HND' },
    decodeSide: { pageLayout: 'HND' },
    route: 'direct',
    how: 'whole',
  },
  { name: 'TP 1→2 NHD, gathered writes', model: WIDE, prefill: 1, decode: 2, route: 'transportGather', how: 'chunked' },
  { name: 'TP 2→1 NHD, scattered writes', model: WIDE, prefill: 2, decode: 1, route: 'transportScatter', how: 'whole' },
  { name: 'TP 2→1 NHD, layerwise, scattered writes', model: WIDE, prefill: 2, decode: 1, route: 'transportScatter', how: 'layerwise' },
  { name: 'TP 1→1 NHD → HND', model: MHA, prefill: 1, decode: 1, decodeSide: { pageLayout: 'HND' }, route: 'gather', how: 'layerwise' },
  {
    name: 'TP 2→1 HND pages of 4 → HND pages of 8',
    model: MHA,
    prefill: 2,
    decode: 1,
    prefillSide: { pageLayout: 'HND' },
    decodeSide: { pageLayout: 'HND', pageSize: 8 },
    route: 'ring',
    how: 'chunked',
  },
];

/** Routes whose bytes pass only through the transport: with checksums on, mooncake-tcp verifies their writes instead of page checksums. */
const TRANSPORT_ONLY = new Set(['direct', 'transportGather']);

for (const checksums of ['pages', true] as const)
  test(`checksums ${checksums === true ? 'on' : "'pages'"}, head-sliced and state: every route succeeds byte-exact, each report carrying KV checksums${checksums === true ? ' (or, where the transport alone moves the bytes, kvVerifiedInTransfer)' : ''} and state checksums`, async () => {
    let id = checksums === true ? 0x6180n : 0x6100n;
    for (const c of CASES) {
      await withRanks(
        { model: c.model, checksums, ...(c.prefillSide ? { prefillSide: c.prefillSide } : {}), ...(c.decodeSide ? { decodeSide: c.decodeSide } : {}) },
        async (make, port) => {
          const { prefills, decodes } = await ranks(make, c.prefill, c.decode);
          let reports = 0;
          let kv = 0;
          let state = 0;
          for (const d of decodes) {
            onReport(d, (m) => {
              if (m.status !== KVStatus.Success) return;
              reports++;
              const sums = m.kvCrc32c instanceof Uint32Array && m.kvCrc32c.length > 0;
              if (checksums === true && TRANSPORT_ONLY.has(c.route) ? !sums && m.kvVerifiedInTransfer === true : sums && m.kvVerifiedInTransfer === undefined)
                kv++;
              if (m.stateCrc32c instanceof Uint32Array && m.stateCrc32c.length > 0) state++;
            });
          }
          const room = id++;
          const perDst = (c.decodeSide?.pageSize ?? c.model.pageSize) / c.model.pageSize;
          const src = [0, 1, 2, 3];
          const dst = perDst === 2 ? [5, 9] : [5, 9, 6, 12];
          const spec: RoomSpec = { room, src, dst, how: c.how, ...(c.model.state ? { stateSrc: [1, 3], stateDst: [2, 0] } : {}) };
          const errors = await runRoom(c.model, prefills, decodes, port, spec);
          errors.decode.forEach((e, i) => assert.is(e, undefined, `${c.name}: decode rank ${i}: ${String(e)}`));
          errors.prefill.forEach((e, i) => assert.is(e, undefined, `${c.name}: prefill rank ${i}: ${String(e)}`));
          const tokens = perDst === 2 ? { tokens: src.length * c.model.pageSize } : {};
          for (const [k, d] of decodes.entries()) {
            assert.is(
              verifyDecode(c.model, d.memory, [
                { room, pages: Uint32Array.from(dst), auxSlot: 2, ...(spec.stateDst ? { stateIdx: Uint32Array.from(spec.stateDst) } : {}), ...tokens },
              ]),
              undefined,
              `${c.name}: decode rank ${k} bytes`,
            );
          }
          const s = staged(prefills);
          if (c.route === 'gather') assert.ok(s.gather > 0 && s.ring === 0, `${c.name}: gathered (${JSON.stringify(s)})`);
          if (c.route === 'ring') assert.ok(s.ring > 0 && s.gather === 0, `${c.name}: staged on the ring (${JSON.stringify(s)})`);
          if (c.route === 'direct') assert.ok(s.ring === 0 && s.gather === 0, `${c.name}: no staging (${JSON.stringify(s)})`);
          if (c.route === 'transportGather') assert.ok(s.transportGather > 0 && s.gather === 0, `${c.name}: gathered by the transport (${JSON.stringify(s)})`);
          if (c.route === 'transportScatter') assert.ok(s.transportScatter > 0 && s.ring === 0, `${c.name}: scattered by the transport (${JSON.stringify(s)})`);
          assert.ok(reports >= c.prefill * c.decode, `${c.name}: ${reports} reports`);
          assert.is(kv, reports, `${c.name}: every Success report carried KV checksums (or kvVerifiedInTransfer)`);
          if (c.model.state) assert.is(state, c.prefill, `${c.name}: every state sender's report carried state checksums`);
        },
      );
    }
  });

test('a byte flipped in flight on the gather route (fake transport, TP 1→2 NHD): DATA_CORRUPTED naming layer 1 V and the page, on both sides', async () => {
  await withRanks({ model: MHA, fake: true }, async (make, port) => {
    const { prefills, decodes } = await ranks(make, 1, 2);
    const d1 = decodes[1]!;
    // Layer 1's V buffer of decode rank 1 is its last KV buffer (K0, K1, V0, V1).
    const v1 = { addr: d1.memory.buffers.kv.addrs[3]!, length: d1.memory.buffers.kv.lengths[3]! };
    flip.when = (remote) => remote >= v1.addr && remote < v1.addr + v1.length;
    flip.at = (addr) => void (d1.engine.hostView(addr, 1n)![0]! ^= 0x10);
    flip.armed = true;
    const errors = await runRoom(MHA, prefills, decodes, port, { room: 0x6200n, src: [0, 1, 2], dst: [7, 8, 9], how: 'whole' });
    flip.when = undefined;
    assert.is(flip.armed, false, 'the fake transport flipped a byte');
    assert.ok(staged(prefills).gather > 0, 'the write was staged');
    const e = errors.decode[1] as (Error & { details?: Record<string, unknown> }) | undefined;
    assert.ok(isTransferError(e, 'DATA_CORRUPTED'), `decode rank 1: ${String(e)}`);
    assert.match(e!.message, /layer 1 V, destination pages 7\b/);
    assert.is(e!.details?.room, 0x6200n);
    assert.is(e!.details?.layer, 1);
    assert.equal(e!.details?.pages, [7]);
    assert.ok(isTransferError(errors.prefill[0], 'DATA_CORRUPTED'), `prefill: ${String(errors.prefill[0])}`);
    assert.is((errors.prefill[0] as { details?: Record<string, unknown> }).details?.room, 0x6200n);
  });
});

test('a real write on the ring route corrupted after it landed (mooncake-tcp, TP 2→1 NHD): DATA_CORRUPTED naming layer 0 K and the page', async () => {
  await withRanks({ model: MHA }, async (make, port) => {
    const { prefills, decodes } = await ranks(make, 2, 1);
    const d = decodes[0]!;
    const item = Number(d.memory.buffers.kv.itemLengths[0]!);
    onReport(d, (m) => {
      // Prefill rank 1 sends heads 2..3: token 1's head 3 of page 11 is its, landed by now.
      if (m.status !== KVStatus.Success || m.prefillTpRank !== 1) return;
      d.memory.kv[0]![11 * item + (1 * 4 + 3) * MHA.headBytes + 2]! ^= 0x01;
    });
    const errors = await runRoom(MHA, prefills, decodes, port, { room: 0x6300n, src: [0, 1, 2], dst: [10, 11, 12], how: 'whole' });
    assert.ok(staged(prefills).ring > 0, 'the write went through the ring');
    const e = errors.decode[0] as (Error & { details?: Record<string, unknown> }) | undefined;
    assert.ok(isTransferError(e, 'DATA_CORRUPTED'), `decode: ${String(e)}`);
    assert.match(e!.message, /layer 0 K, destination pages 11\b/);
    assert.is(e!.details?.room, 0x6300n);
    assert.ok(
      errors.prefill.some((x) => isTransferError(x, 'DATA_CORRUPTED')),
      `prefill: ${errors.prefill.map(String).join('; ')}`,
    );
  });
});

test('state: a byte flipped in flight (fake transport, TP 1→1) and one corrupted after a real write landed (mooncake-tcp, TP 2→1 sliced) fail the room, naming the state buffer and slot', async () => {
  await withRanks({ model: MAMBA, fake: true }, async (make, port) => {
    const { prefills, decodes } = await ranks(make, 1, 1);
    const d = decodes[0]!;
    const st = d.memory.buffers.state!;
    flip.when = (remote) => remote >= st.addrs[1]! && remote < st.addrs[1]! + st.lengths[1]!;
    flip.at = (addr) => void (d.engine.hostView(addr, 1n)![0]! ^= 0x04);
    flip.armed = true;
    const errors = await runRoom(MAMBA, prefills, decodes, port, { room: 0x6400n, src: [0, 1], dst: [3, 4], how: 'whole', stateSrc: [2], stateDst: [1] });
    flip.when = undefined;
    assert.is(flip.armed, false, 'the fake transport flipped a byte');
    const e = errors.decode[0] as (Error & { details?: Record<string, unknown> }) | undefined;
    assert.ok(isTransferError(e, 'DATA_CORRUPTED'), `decode: ${String(e)}`);
    assert.match(e!.message, /state checksum mismatch in state buffer 1, slots 1\b/);
    assert.is(e!.details?.room, 0x6400n);
    assert.ok(isTransferError(errors.prefill[0], 'DATA_CORRUPTED'), `prefill: ${String(errors.prefill[0])}`);
  });
  await withRanks({ model: MAMBA }, async (make, port) => {
    const { prefills, decodes } = await ranks(make, 2, 1);
    const d = decodes[0]!;
    const item = Number(d.memory.buffers.state!.itemLengths[0]!);
    onReport(d, (m) => {
      // Prefill rank 1 sends units 2..3 of each slot; slot 3's unit 2 has landed by its report.
      if (m.status === KVStatus.Success && m.prefillTpRank === 1) d.memory.state[0]![3 * item + 2 * 8 + 5]! ^= 0x80;
    });
    const errors = await runRoom(MAMBA, prefills, decodes, port, {
      room: 0x6500n,
      src: [0, 1],
      dst: [3, 4],
      how: 'chunked',
      stateSrc: [0, 2],
      stateDst: [1, 3],
    });
    const e = errors.decode[0] as (Error & { details?: Record<string, unknown> }) | undefined;
    assert.ok(isTransferError(e, 'DATA_CORRUPTED'), `decode: ${String(e)}`);
    assert.match(e!.message, /state checksum mismatch in state buffer 0, slots 3\b/);
    assert.is(e!.details?.room, 0x6500n);
  });
});

test.run();
