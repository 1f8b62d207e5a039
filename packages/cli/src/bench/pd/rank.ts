// A rank of `te bench pd`: a prefill or a decode process with its engine, KV pages and KV
// manager, answering the orchestrator's requests over IPC (rooms, poison, digests, CPU time).
// The prefill runs the bootstrap server its decode registers with.
import { createHash } from 'node:crypto';
import { createTransferEngine, KVStatus, type KVReceiver, type TransferEngine } from '@te/connector';
import { createKVManager, type DisaggKVManager } from '@te/disagg';
import { exitWithStartFailure, sentError } from '../../child-error.js';
import { allocateKv, type KvMemory } from '../../demo/pipeline/kv-memory.js';
import { monotonicMs } from './clock.js';
import { HEAD_DIM, KV_HEADS, PAGE_TOKENS, type PdRankSpec } from './model.js';

interface Rank {
  spec: PdRankSpec;
  engine: TransferEngine;
  kv: DisaggKVManager;
  mem: KvMemory;
  receivers: Map<string, KVReceiver>;
}

async function open(spec: PdRankSpec): Promise<Rank> {
  const engine = await createTransferEngine({
    connector: spec.connector,
    bindAddress: '127.0.0.1',
    ...(spec.modulePath ? { modulePath: spec.modulePath } : {}),
  });
  const mem = await allocateKv(engine, { layers: spec.layers, pageSize: PAGE_TOKENS, heads: KV_HEADS, headDim: HEAD_DIM }, spec.pages, 1);
  if (spec.role === 'prefill') {
    // Position-dependent words: a page landing in the wrong place cannot verify.
    mem.kv.forEach((buffer, b) => {
      const words = new Uint32Array(buffer.buffer, buffer.byteOffset, buffer.byteLength >>> 2);
      const first = b * words.length;
      for (let i = 0; i < words.length; i++) words[i] = Math.imul(first + i, 2654435761) ^ 0x5eed;
    });
  }
  const kv = await createKVManager({
    role: spec.role,
    layout: { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 },
    buffers: mem.buffers,
    engine,
    bootstrapHost: '127.0.0.1',
    bootstrapPort: spec.role === 'prefill' ? 0 : spec.bootstrapPort!,
    timeouts: { transferMs: 120_000 },
    checksums: spec.checksums,
  });
  return { spec, engine, kv, mem, receivers: new Map() };
}

/** sha256 over the given pages of every K and V buffer, in the order given. */
function digest(r: Rank, pages: number[]): string {
  const h = createHash('sha256');
  const item = r.mem.itemBytes;
  for (const buffer of r.mem.kv) for (const p of pages) h.update(buffer.subarray(p * item, (p + 1) * item));
  return h.digest('hex');
}

type Op = (r: Rank, a: Record<string, unknown>) => Promise<unknown> | unknown;

const ops: Record<string, Op> = {
  /** Overwrites the pages with a byte, so a room that moves nothing cannot verify. */
  poison: (r, a) => {
    const item = r.mem.itemBytes;
    for (const buffer of r.mem.kv) for (const p of a.pages as number[]) buffer.fill(a.byte as number, p * item, (p + 1) * item);
    return true;
  },
  /** Test hook (`--corrupt`): flips one byte of a page. */
  corrupt: (r, a) => {
    r.mem.kv[0]![(a.page as number) * r.mem.itemBytes + 17]! ^= 0x40;
    return true;
  },
  digest: (r, a) => digest(r, a.pages as number[]),
  receive: async (r, a) => {
    const receiver = r.kv.createReceiver({ host: '127.0.0.1', port: r.spec.bootstrapPort!, room: BigInt(a.room as string) });
    r.receivers.set(a.room as string, receiver);
    await receiver.init(Uint32Array.from(a.pages as number[]), 0);
    return true;
  },
  /** Resolves once the room reached Success here, with when (ms on the host's monotonic clock). */
  wait: async (r, a) => {
    const receiver = r.receivers.get(a.room as string)!;
    try {
      await receiver.cell.reached(KVStatus.Success, { timeoutMs: 120_000 });
    } finally {
      r.receivers.delete(a.room as string);
    }
    return monotonicMs();
  },
  send: async (r, a) => {
    const sender = r.kv.createSender({ host: '127.0.0.1', port: r.kv.bootstrapServer!.port, room: BigInt(a.room as string) });
    const pages = Uint32Array.from(a.pages as number[]);
    sender.init(pages.length, 0);
    await sender.send(pages, { last: true });
    await sender.cell.reached(KVStatus.Success, { timeoutMs: 120_000 });
    return true;
  },
  /** CPU time of this process so far (every thread), µs. */
  cpu: () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  },
  close: async (r) => {
    await r.kv.close().catch(() => undefined);
    await r.engine.close().catch(() => undefined);
    setImmediate(() => process.exit(0));
    return true;
  },
};

async function main(): Promise<void> {
  const spec = JSON.parse(process.env.TE_PD_BENCH_RANK ?? '') as PdRankSpec;
  const r = await open(spec);
  // The bench is gone: end at once. SIGKILL, not process.exit(), which can hang for good in
  // V8's platform shutdown while a background task waits for a collection (nodejs/node#54918).
  process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
  process.on('message', (m: { id: number; op: string; args: Record<string, unknown> }) => {
    Promise.resolve()
      .then(() => ops[m.op]!(r, m.args))
      .then(
        (value) => process.send!({ id: m.id, ok: true, value }),
        (e: unknown) => process.send!({ id: m.id, ok: false, error: sentError(e) }),
      );
  });
  process.send!({ ready: true, bootstrapPort: r.kv.bootstrapServer?.port });
}

main().catch(exitWithStartFailure);
