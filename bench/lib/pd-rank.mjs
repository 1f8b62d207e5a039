// A rank of the PD benchmark (bench/pd.mjs forked with `--rank <json>`): a prefill or decode
// rank of one TP layout with its KV manager, answering the orchestrator's ops (rooms, poison,
// digests, the raw baseline, staging statistics, CPU time).
import { gqaBuffers, headsDigest, layoutOf, now, serveRank } from './ranks.mjs';

/** The benchmark's model: GQA with 8 KV heads of 128 dim fp16, pages of 64 tokens. */
export const HEADS = 8;
export const HEAD_BYTES = 128 * 2; // 128 dim × fp16
export const PAGE = 64;

/** Runs the rank `spec` describes until the orchestrator closes it. */
export async function servePdRank(spec) {
  const r = await openRank(spec);
  serveRank({ ...pageOps(r), ...roomOps(r), ...measureOps(r) });
  await new Promise(() => {});
}

/** The engine, the KV pages (filled with the rank's byte on a prefill) and the KV manager. */
async function openRank(spec) {
  // Imported here, so that the orchestrator (which imports this module too) starts, and
  // answers --help, without loading the runtime.
  const { createTransferEngine, KVStatus, batchOf } = await import('@te/connector');
  const { createKVManager, shardOfRank } = await import('@te/disagg');
  const engine = await createTransferEngine({ connector: spec.connector, bindAddress: '127.0.0.1' });
  const heads = shardOfRank(HEADS, spec.tp, spec.rank).count;
  const {
    mem,
    item,
    bytes: kvBytes,
    buffers,
  } = await gqaBuffers(engine, {
    layers: spec.layers,
    pages: spec.pages,
    heads,
    headsTotal: HEADS,
    headBytes: HEAD_BYTES,
    pageSize: PAGE,
    fill: spec.role === 'prefill' ? spec.rank + 1 : 0,
  });
  buffers.pageLayout = spec.pageLayout;
  const manager = await createKVManager({
    role: spec.role,
    layout: layoutOf(spec.tp, spec.rank),
    buffers,
    engine,
    bootstrapHost: '127.0.0.1',
    bootstrapPort: spec.port,
    timeouts: { transferMs: 120_000 },
    staging: { enabled: spec.staging, transportGather: spec.transportGather !== false, transportScatter: spec.transportScatter !== false },
    checksums: spec.checksums,
  });
  return {
    KVStatus,
    batchOf,
    spec,
    engine,
    mem,
    view: mem.buffer,
    item,
    kvBytes,
    heads,
    nBuf: 2 * spec.layers,
    bufferBytes: item * spec.pages,
    manager,
    receivers: new Map(),
  };
}

/** What the orchestrator verifies with: the rank's facts, poison, a flipped byte, digests of head slices. */
function pageOps({ spec, engine, mem, view, item, kvBytes, heads, nBuf, bufferBytes }) {
  return {
    info: async () => ({ segment: engine.segmentName, addr: mem.addr.toString(), bytes: kvBytes, item, heads }),
    /** Overwrites the pages with a byte no prefill page holds in full, so a room that moves nothing cannot verify. */
    poison: async (a) => {
      for (let b = 0; b < nBuf; b++) for (const p of a.pages) view.fill(0xa5 ^ (a.round & 0xff), b * bufferBytes + p * item, b * bufferBytes + (p + 1) * item);
      return true;
    },
    corrupt: async (a) => {
      const at = a.page * item + 17;
      view[at] ^= 0x40;
      return true;
    },
    digest: async (a) =>
      headsDigest(view, {
        buffers: nBuf,
        item,
        bufferBytes,
        pages: a.pages,
        pageSize: PAGE,
        headBytes: HEAD_BYTES,
        rowHeads: heads,
        headOffset: a.headOffset,
        heads: a.heads,
        pageLayout: spec.pageLayout,
      }),
  };
}

/** A room on either side, and the raw baseline: each target's bytes written as large contiguous requests, all targets at once. */
function roomOps({ KVStatus, batchOf, spec, engine, mem, kvBytes, manager, receivers }) {
  return {
    receive: async (a) => {
      const r = manager.createReceiver({ host: '127.0.0.1', port: spec.port, room: BigInt(a.room) });
      receivers.set(a.room, r);
      await r.init(Uint32Array.from(a.pages), 0);
      return true;
    },
    wait: async (a) => {
      const r = receivers.get(a.room);
      await r.cell.reached(KVStatus.Success);
      const t = now();
      receivers.delete(a.room);
      return { t };
    },
    /** `chunks` (default 1): the pages sent in that many chunks, one after another; `lastChunk`: when the last one was sent. */
    send: async (a) => {
      const s = manager.createSender({ host: '127.0.0.1', port: spec.port, room: BigInt(a.room) });
      s.init(a.pages.length, 0);
      const pages = Uint32Array.from(a.pages);
      const chunks = a.chunks ?? 1;
      const t = now();
      let lastChunk = t;
      for (let c = 0; c < chunks; c++) {
        const part = pages.subarray(Math.floor((c * pages.length) / chunks), Math.floor(((c + 1) * pages.length) / chunks));
        if (c === chunks - 1) lastChunk = now();
        await s.send(part, { last: c === chunks - 1 });
      }
      await s.cell.reached(KVStatus.Success);
      return { t, done: now(), lastChunk };
    },
    /** The transport's ceiling for the same bytes. */
    raw: async (a) => {
      const chunk = 8 << 20;
      const t = now();
      await Promise.all(
        a.targets.map((x) => {
          const reqs = [];
          for (let off = 0; off < x.bytes; off += chunk)
            reqs.push({
              op: 'write',
              local: mem.addr + BigInt(off % kvBytes),
              remote: BigInt(x.addr) + BigInt(x.offset + off),
              length: Math.min(chunk, x.bytes - off),
            });
          return engine.transfer(x.segment, batchOf(reqs), { timeoutMs: 120_000 });
        }),
      );
      return { t, done: now() };
    },
  };
}

function measureOps({ engine, manager }) {
  return {
    stats: async () => manager.stagingStats() ?? null,
    /** CPU time this process used so far (every thread: JS, transport, copier, checksummer), µs. */
    cpu: async () => {
      const u = process.cpuUsage();
      return u.user + u.system;
    },
    close: async () => {
      await manager.close();
      await engine.close();
      setImmediate(() => process.exit(0));
      return true;
    },
  };
}
