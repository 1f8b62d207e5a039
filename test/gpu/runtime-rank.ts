/**
 * One PD rank of the GPU runtime suite (test/gpu/runtime.ts), in its own process, driven over
 * Node's IPC channel. Its KV lives in CUDA memory (cudaMalloc on cuda:0), its aux in host
 * memory; the engine routes KV to the CUDA transport and aux to mooncake-tcp. Every KV byte
 * is a function of (room, layer, K/V, global head, token, byte), so a decode checks what
 * landed, on the host, after copying its device memory back, whatever the prefill TP was.
 */
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import {
  KVStatus,
  batchOf,
  createTransferEngine,
  isTransferError,
  type KVBuffers,
  type KVSender,
  type KVReceiver,
  type ParallelLayout,
  type TransferEngine,
} from '@te/connector';
import { createKVManager, type DisaggKVManager } from '@te/disagg';
import { addonLoader, cudaEventsOf, type DeviceMemory, type NativeCudaModule } from '@te/cuda';
import { deviceMemory as intraMemory } from '@te/mooncake-intra-nvlink';
import { allocateFabricMemory, deviceMemory as nvlinkMemory, freeFabricMemory } from '@te/mooncake-nvlink';
import { deviceMemory as tcpMemory } from '@te/mooncake-tcp';

export interface RankSpec {
  role: 'prefill' | 'decode';
  connector: 'mooncake-intra-nvlink' | 'mooncake-nvlink' | 'mooncake-tcp';
  tp: number;
  tpRank: number;
  bootstrapPort: number;
  layerwise: boolean;
  model: Model;
  /**
   * Host rehearsal (TE_GPU_RUNTIME_HOST=1 in runtime.ts): the KV in host memory over
   * mooncake-tcp and the event helper replaced by a resolved promise. It checks the suite's
   * own logic on a machine without a GPU, nothing of the GPU path.
   */
  host?: boolean;
  /** Bytes of the copy benchmark's scratch regions (one in device memory, one in host memory). */
  scratchBytes: number;
}

export interface Model {
  layers: number;
  heads: number;
  headBytes: number;
  pageSize: number;
  /** Pages each rank's KV buffers hold. */
  pages: number;
  auxSlots: number;
  auxBytes: number;
}

export interface RoomArgs {
  room: string;
  pages: number[];
  auxSlot: number;
}

export const SENTINEL = 0xee;
const root = join(import.meta.dirname, '..', '..');

/** The byte at (room, layer, K/V, global head, token, byte). Never the sentinel. */
export function kvByte(room: bigint, layer: number, kv: number, head: number, token: number, b: number): number {
  const v = (Number(room % 997n) * 13 + layer * 131 + head * 31 + token * 7 + kv * 101 + b * 3 + 1) & 0xff;
  return v === SENTINEL ? 0x11 : v;
}
export function auxByte(room: bigint, b: number): number {
  return (Number(room % 251n) + b * 5 + 2) & 0xff || 1;
}

const spec = JSON.parse(process.env.TE_GPU_RANK_SPEC!) as RankSpec;
const m = spec.model;
const headsHere = m.heads / spec.tp;
const headFirst = spec.tpRank * headsHere;
const rowBytes = headsHere * m.headBytes; // one token of one layer (NHD: [token][head][bytes])
const itemBytes = m.pageSize * rowBytes;
const bufferBytes = itemBytes * m.pages;
const nKv = 2 * m.layers;
/**
 * mooncake-tcp's own device helpers (its addon carries its own static cudart; cudaMalloc
 * memory lives in the device's primary context, which every runtime in the process shares);
 * it has no baseline copy: intra-nvlink's cudaMemcpyAsync stands in.
 */
const tcpDevice: DeviceMemory = {
  alloc: (bytes, device) => tcpMemory.alloc(bytes, device),
  free: (addr, device) => tcpMemory.free(addr, device),
  write: (addr, data, device) => tcpMemory.write(addr, data, device),
  read: (addr, length, device) => tcpMemory.read(addr, length, device),
  fill: (addr, value, bytes, device) => tcpMemory.fill(addr, value & 0xff, bytes, device),
  baselineCopy: (dst, src, bytes, iterations, device) => intraMemory.baselineCopy(dst, src, bytes, iterations, device),
};
/** mooncake-nvlink moves cuMem (VMM) allocations only: its fabric allocator with posix-fd handles. */
const nvlinkDevice: DeviceMemory = {
  ...nvlinkMemory,
  alloc: (bytes) => allocateFabricMemory(bytes, { handleType: 'posix-fd' }).addr,
  free: (addr) => freeFabricMemory(addr),
};
let memory: DeviceMemory = spec.connector === 'mooncake-tcp' ? tcpDevice : spec.connector === 'mooncake-nvlink' ? nvlinkDevice : intraMemory;
const cudaEvents = cudaEventsOf(
  addonLoader<NativeCudaModule>({
    plugin: 'mooncake-intra-nvlink',
    pkg: '@te/mooncake-intra-nvlink',
    addon: 'te_mooncake_intra_nvlink.node',
    envVar: 'TE_MOONCAKE_INTRA_NVLINK_ADDON',
    root: join(root, 'plugins', 'mooncake-intra-nvlink'),
  }),
  'mooncake-intra-nvlink',
);

const events = spec.host ? { readyAfter: () => () => Promise.resolve() } : cudaEvents;

/** The host rehearsal's stand-in for device memory: one engine allocation, same calls. */
function hostMemory(base: bigint, view: Uint8Array): DeviceMemory {
  const at = (addr: bigint) => Number(addr - base);
  return {
    alloc: () => base,
    free: () => undefined,
    write: (addr, data) => view.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), at(addr)),
    read: (addr, length) => view.slice(at(addr), at(addr) + length),
    fill: (addr, value, bytes) => view.fill(value, at(addr), at(addr) + Number(bytes)),
    baselineCopy: (dst, src, bytes, iterations = 10) => {
      const started = performance.now();
      for (let k = 0; k < iterations; k++) view.copyWithin(at(dst), at(src), at(src) + Number(bytes));
      return (performance.now() - started) / 1e3 / iterations;
    },
  };
}

let engine: TransferEngine;
let manager: DisaggKVManager;
let kvBase = 0n;
/** The copy benchmark's registered regions: device (as the KV) and host. */
let scratch = 0n;
let hostScratch: { addr: bigint; view: Uint8Array };
let auxView: Uint8Array;
let buffers: KVBuffers;
const rooms = new Map<string, { sender?: KVSender; receiver?: KVReceiver }>();

function errorOf(e: unknown): { code: string; message: string } {
  return { code: isTransferError(e) ? e.code : 'Error', message: (e as Error).message };
}
const kvAddr = (i: number) => kvBase + BigInt(i * bufferBytes);

/** The expected bytes of one page of KV buffer `i` for the room's `index`-th page. */
function expectedPage(room: bigint, i: number, index: number, out: Uint8Array): void {
  const layer = i % m.layers;
  const kv = i < m.layers ? 0 : 1;
  for (let t = 0; t < m.pageSize; t++) {
    const token = index * m.pageSize + t;
    for (let h = 0; h < headsHere; h++) {
      const o = (t * headsHere + h) * m.headBytes;
      for (let b = 0; b < m.headBytes; b++) out[o + b] = kvByte(room, layer, kv, headFirst + h, token, b);
    }
  }
}

/** Writes the room's KV into device memory (one cudaMemcpy per page and buffer) and its aux slot. */
function fill(r: RoomArgs): void {
  const room = BigInt(r.room);
  const page = new Uint8Array(itemBytes);
  for (let i = 0; i < nKv; i++) {
    r.pages.forEach((p, index) => {
      expectedPage(room, i, index, page);
      memory.write(kvAddr(i) + BigInt(p * itemBytes), page);
    });
  }
  for (let b = 0; b < m.auxBytes; b++) auxView[r.auxSlot * m.auxBytes + b] = auxByte(room, b);
}

/** Decode: reads every KV buffer back to the host and compares each page with what it should hold. */
function verify(received: RoomArgs[]): string | null {
  const owner = new Map<number, { room: bigint; index: number }>();
  for (const r of received) r.pages.forEach((p, index) => owner.set(p, { room: BigInt(r.room), index }));
  // A failed room may have landed part of its pages: they hold nothing to check.
  for (const p of failedPages) owner.delete(p);
  const want = new Uint8Array(itemBytes);
  const sentinel = new Uint8Array(itemBytes).fill(SENTINEL);
  for (let i = 0; i < nKv; i++) {
    const host = memory.read(kvAddr(i), bufferBytes, 0);
    for (let p = 0; p < m.pages; p++) {
      if (failedPages.has(p)) continue;
      const o = owner.get(p);
      if (o) expectedPage(o.room, i, o.index, want);
      const exp = o ? want : sentinel;
      const got = host.subarray(p * itemBytes, (p + 1) * itemBytes);
      if (Buffer.compare(got, exp) !== 0) {
        const at = got.findIndex((x, k) => x !== exp[k]);
        return `KV buffer ${i} page ${p}${o ? ` (room ${o.room} page ${o.index})` : ' (no room)'}: byte ${at} is ${got[at]}, expected ${exp[at]}`;
      }
    }
  }
  for (const r of received) {
    for (let b = 0; b < m.auxBytes; b++) {
      if (auxView[r.auxSlot * m.auxBytes + b] !== auxByte(BigInt(r.room), b)) return `aux slot ${r.auxSlot} (room ${r.room}) byte ${b} differs`;
    }
  }
  return null;
}

/** How a room ended on this rank: its status, with the error where it failed. */
interface RoomReply {
  status: KVStatus;
  code?: string;
  message?: string;
}

const received: RoomArgs[] = [];
const failedPages = new Set<number>();
// Each op takes the arguments the parent sent (JSON over IPC) and answers with its reply's value.
const ops = {
  /** Prefill: fill the room, send it in `chunks` chunks (pausing after the first when asked), wait for the result. */
  async send(a: RoomArgs & { chunks?: number; pauseMs?: number }): Promise<RoomReply & { ms: number; handshakeMs?: number; transferMs?: number }> {
    fill(a);
    const sender = manager.createSender({ host: '127.0.0.1', port: spec.bootstrapPort, room: BigInt(a.room) });
    rooms.set(a.room, { sender });
    const pages = Uint32Array.from(a.pages);
    const started = performance.now();
    try {
      sender.init(pages.length, a.auxSlot);
      // The transfer proper starts once the decode's destination is known (handshake done).
      await sender.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 60_000 });
      const ready = performance.now();
      const chunks = a.chunks ?? 1;
      const per = Math.ceil(pages.length / chunks);
      for (let c = 0; c < chunks; c++) {
        await sender.send(pages.subarray(c * per, Math.min(pages.length, (c + 1) * per)), c === chunks - 1 ? { last: true } : {});
        if (c === 0 && a.pauseMs) {
          process.send!({ event: 'chunk', room: a.room });
          await new Promise((r) => setTimeout(r, a.pauseMs));
        }
      }
      await sender.cell.reached(KVStatus.Success);
      const end = performance.now();
      return { status: sender.status, ms: end - started, handshakeMs: ready - started, transferMs: end - ready };
    } catch (e) {
      return { status: sender.status, ms: performance.now() - started, ...errorOf(sender.failure ?? e) };
    }
  },
  /** Decode: ask for the room, wait for its result, then verify all of this rank's memory. */
  async receive(a: RoomArgs & { verify?: boolean }): Promise<RoomReply & { mismatch?: string | null }> {
    const receiver = manager.createReceiver({ host: '127.0.0.1', port: spec.bootstrapPort, room: BigInt(a.room) });
    rooms.set(a.room, { receiver });
    try {
      await receiver.init(Uint32Array.from(a.pages), a.auxSlot);
      process.send!({ event: 'requested', room: a.room });
      await receiver.cell.reached(KVStatus.Success);
      received.push(a);
      // Rooms received concurrently are compared by a later `verify` (one room's check would see the other's bytes).
      return { status: receiver.status, mismatch: a.verify === false ? null : verify(received) };
    } catch (e) {
      for (const p of a.pages) failedPages.add(p);
      return { status: receiver.status, ...errorOf(receiver.failure ?? e) };
    }
  },
  async abort(a: { room: string; reason: string }): Promise<{ ok: boolean; code?: string; message?: string }> {
    const entry = rooms.get(a.room)!;
    try {
      await (entry.sender ?? entry.receiver)!.abort(a.reason);
      return { ok: true };
    } catch (e) {
      return { ok: false, ...errorOf(e) };
    }
  },
  /** Flips one byte of KV buffer `buffer` at page `page` (twice restores it): shows `verify` failing on it. */
  async corrupt(a: { buffer: number; page: number; offset: number }) {
    const addr = kvAddr(a.buffer) + BigInt(a.page * itemBytes + a.offset);
    const b = memory.read(addr, 1, 0);
    memory.write(addr, Uint8Array.of(b[0]! ^ 0xff), 0);
    return true;
  },
  /** Decode: verify what the succeeded rooms wrote, and the sentinel everywhere else. */
  async verify() {
    return { mismatch: verify(received) };
  },
  /**
   * Prefill, layerwise: one forward batch over `rooms`; per layer, `layerMs` of simulated
   * compute, then the layer's KV is written to the device and layerReady gets the CUDA event
   * recorded after that write (the event helper). Returns the time from the last layer's
   * readiness to finish() (the tail left after compute).
   */
  async batch(a: { rooms: RoomArgs[]; layerMs: number }) {
    for (const r of a.rooms) fill(r);
    const senders = a.rooms.map((r) => {
      const s = manager.createSender({ host: '127.0.0.1', port: spec.bootstrapPort, room: BigInt(r.room) });
      s.init(r.pages.length, r.auxSlot);
      return s;
    });
    await Promise.all(senders.map((s) => s.cell.reached(KVStatus.WaitingForInput, { timeoutMs: 20_000 })));
    const batch = manager.beginBatch(a.rooms.map((r, i) => ({ sender: senders[i]!, pages: Uint32Array.from(r.pages) })));
    const started = performance.now();
    for (let l = 0; l < m.layers; l++) {
      await new Promise((r) => setTimeout(r, a.layerMs));
      batch.layerReady(l, events.readyAfter(0n, 0));
    }
    const computeDone = performance.now();
    const results = await batch.finish();
    const end = performance.now();
    return {
      results: results.map((r) => ({ room: r.room.toString(), status: r.status, code: r.error?.code, message: r.error?.message })),
      tailMs: end - computeDone,
      totalMs: end - started,
      stats: manager.layerwiseStats,
    };
  },
  /**
   * Prefill: the raw figure for the PD throughput ratio: the same page ranges the last room
   * moved, written straight to the decode's buffers with engine.transfer (one batch).
   */
  async raw(a: RoomArgs & { remotePages: number[]; segment: string; remoteKvBase: string; iterations: number }) {
    const remote = BigInt(a.remoteKvBase);
    const reqs: { op: 'write'; local: bigint; remote: bigint; length: number }[] = [];
    for (let i = 0; i < nKv; i++) {
      a.pages.forEach((p, k) =>
        reqs.push({
          op: 'write',
          local: kvAddr(i) + BigInt(p * itemBytes),
          remote: remote + BigInt(i * bufferBytes + a.remotePages[k]! * itemBytes),
          length: itemBytes,
        }),
      );
    }
    const batch = batchOf(reqs);
    await engine.transfer(a.segment, batch); // warm: peer opened, handles imported
    const started = performance.now();
    for (let k = 0; k < a.iterations; k++) await engine.transfer(a.segment, batch);
    return { ms: (performance.now() - started) / a.iterations, bytes: reqs.length * itemBytes };
  },
  /**
   * Prefill: one copy size of the benchmark. `d2d`: this device scratch → the decode's, over
   * the connector, against a same-process cudaMemcpyAsync device → device of the same size
   * (CUDA events). `h2d`: this host scratch → the decode's device scratch, against a
   * synchronous cudaMemcpy host → device from the same host memory. Returns mean ms of each
   * and the SHA-256 of the bytes sent, which the decode's scratch must then hold.
   */
  async copy(a: { kind: 'd2d' | 'h2d'; size: number; iterations: number; segment: string; remoteScratch: string }) {
    const bytes = randomBytes(a.size);
    memory.write(scratch, bytes, 0);
    hostScratch.view.set(bytes);
    const local = a.kind === 'd2d' ? scratch : hostScratch.addr;
    const batch = batchOf([{ op: 'write', local, remote: BigInt(a.remoteScratch), length: a.size }]);
    await engine.transfer(a.segment, batch); // warm
    let started = performance.now();
    for (let k = 0; k < a.iterations; k++) await engine.transfer(a.segment, batch);
    const ms = (performance.now() - started) / a.iterations;
    let baselineMs: number;
    if (a.kind === 'd2d') {
      baselineMs = memory.baselineCopy(kvBase, scratch, BigInt(a.size), a.iterations, 0) * 1e3;
    } else {
      const from = hostScratch.view.subarray(0, a.size);
      memory.write(kvBase, from, 0); // warm
      started = performance.now();
      for (let k = 0; k < a.iterations; k++) memory.write(kvBase, from, 0);
      baselineMs = (performance.now() - started) / a.iterations;
    }
    return { ms, baselineMs, digest: createHash('sha256').update(bytes).digest('hex') };
  },
  /** Decode: SHA-256 of the first `length` bytes of the device scratch, then zeroes them when asked. */
  async scratch(a: { length: number; clear?: boolean }) {
    const digest = createHash('sha256')
      .update(memory.read(scratch, a.length, 0))
      .digest('hex');
    if (a.clear) memory.fill(scratch, 0, BigInt(a.length), 0);
    return { digest };
  },
  async info() {
    return { segment: engine.segmentName, kvBase: kvBase.toString(), bytesPerPage: nKv * itemBytes, scratch: scratch.toString() };
  },
  async close() {
    await manager.close();
    await engine.close();
    memory.free(kvBase, 0);
    if (!spec.host) memory.free(scratch, 0);
    setImmediate(() => process.exit(0));
    return true;
  },
};
/** The ops this rank serves, for runtime.ts to type each call's reply. */
export type RankOps = typeof ops;

process.on('message', (msg: { id: number; op: string; args: unknown }) => {
  (ops as Record<string, (a: unknown) => Promise<unknown>>)[msg.op]!(msg.args).then(
    (value) => process.send!({ id: msg.id, ok: true, value }),
    (e) => process.send!({ id: msg.id, ok: false, error: `${errorOf(e).code}: ${errorOf(e).message}` }),
  );
});

try {
  const layout: ParallelLayout = {
    attnTpSize: spec.tp,
    attnTpRank: spec.tpRank,
    attnDpSize: 1,
    attnDpRank: 0,
    ppSize: 1,
    ppRank: 0,
    systemDpSize: 1,
    systemDpRank: 0,
  };
  const transports = spec.connector === 'mooncake-tcp' ? [] : ['mooncake-tcp'];
  const config = {
    connector: spec.connector,
    transports,
    bindAddress: '127.0.0.1',
    ...(spec.connector === 'mooncake-nvlink' ? { transportOptions: { 'mooncake-nvlink': { handleType: 'posix-fd' } } } : {}),
  };
  engine = await createTransferEngine(config as Parameters<typeof createTransferEngine>[0]);
  if (spec.host) {
    const region = await engine.allocateMemory(nKv * bufferBytes + spec.scratchBytes);
    memory = hostMemory(region.addr, region.buffer!);
    scratch = region.addr + BigInt(nKv * bufferBytes);
  } else {
    scratch = memory.alloc(BigInt(spec.scratchBytes), 0);
    await engine.registerMemory({ addr: scratch, length: BigInt(spec.scratchBytes), device: 'cuda:0' });
  }
  const hs = await engine.allocateMemory(spec.scratchBytes);
  hostScratch = { addr: hs.addr, view: hs.buffer! };
  kvBase = memory.alloc(BigInt(nKv * bufferBytes), 0);
  memory.fill(kvBase, SENTINEL, BigInt(nKv * bufferBytes), 0);
  const aux = await engine.allocateMemory(m.auxSlots * m.auxBytes);
  auxView = aux.buffer!;
  auxView.fill(0);
  const group = (addrs: bigint[], length: number, item: number) => ({
    addrs: BigUint64Array.from(addrs),
    lengths: BigUint64Array.from(addrs.map(() => BigInt(length))),
    itemLengths: BigUint64Array.from(addrs.map(() => BigInt(item))),
  });
  buffers = {
    kv: group(
      Array.from({ length: nKv }, (_, i) => kvAddr(i)),
      bufferBytes,
      itemBytes,
    ),
    aux: group([aux.addr], m.auxSlots * m.auxBytes, m.auxBytes),
    attention: 'mha',
    numLayers: m.layers,
    pageSize: m.pageSize,
    kvCacheDtype: 'bf16',
    totalKvHeads: m.heads,
    kvHeadsPerRank: headsHere,
    headBytes: m.headBytes,
    device: spec.host ? 'cpu' : 'cuda:0',
  };
  manager = await createKVManager({
    role: spec.role,
    layout,
    buffers,
    engine,
    bootstrapHost: '127.0.0.1',
    bootstrapPort: spec.bootstrapPort,
    layerwise: spec.layerwise,
  });
  process.send!({ event: 'ready', segment: engine.segmentName });
} catch (e) {
  process.send!({ event: 'startFailed', ...errorOf(e) });
}
