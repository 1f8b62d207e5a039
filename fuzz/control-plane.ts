// Control-plane fuzzer: a prefill rank, a decode rank and an EC producer (real engines over
// mooncake-tcp, real zeromq control endpoints, real handlers) receive, for a fixed budget,
// messages built three ways: byte mutations of the committed seeds, bodies generated from
// each message's own TypeBox schema with edge values (so they pass validation and reach
// the handlers), and such bodies with one field broken. The run fails on an unhandled
// rejection or exception, on memory growth past a bound, on a request that got no answer
// within 10 s, and if a real PD transfer does not land byte-exact afterwards. The last
// inputs sent before a failure are saved under fuzz/crashes/.
//   node --import tsx fuzz/control-plane.ts [seconds]
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Kind, type TSchema } from '@sinclair/typebox';
import { Packr } from 'msgpackr';
import { Dealer } from 'zeromq';
import { KVStatus, createTransferEngine, decodeMessage, type ParallelLayout } from '@te/connector';
import { createECProducer, createKVManager } from '../packages/disagg/src/index.js';
import { AbortSchema, MSG, PingSchema, RegisterSchema, RequestSchema, StatusSchema } from '../packages/disagg/src/protocol/messages.js';
import { EC_PULL, PullSchema } from '../packages/disagg/src/ec/messages.js';
import { allocateRank, fillPrefill, verifyDecode, type ModelSpec } from '../packages/disagg/test/fixtures/pd-model.js';

const here = dirname(fileURLToPath(import.meta.url));
const seconds = Number(process.argv[2] ?? process.env.TE_FUZZ_SECONDS ?? 60);
const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true, moreTypes: true });
const MAX_RSS = 1024 * 1024 * 1024; // above this, held memory is measured
const MAX_HELD = 512 * 1024 * 1024;
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

// ---------------------------------------------------------------- the ranks under test
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 2, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const LAYOUT: ParallelLayout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
const config = { connector: 'mooncake-tcp', bindAddress: '127.0.0.1' };
const timeouts = { bootstrapMs: 3000, waitingMs: 3000, heartbeatIntervalMs: 500, heartbeatMaxFailures: 2, abortMs: 1000 };
const port = await new Promise<number>((resolve) => {
  // A free port for the bootstrap server (asked of the kernel, then released).
  const probe = createServer().listen(0, '127.0.0.1', () => {
    const p = (probe.address() as { port: number }).port;
    probe.close(() => resolve(p));
  });
});
const prefillEngine = await createTransferEngine(config);
const decodeEngine = await createTransferEngine(config);
const prefillMemory = await allocateRank(prefillEngine, MODEL, LAYOUT);
const decodeMemory = await allocateRank(decodeEngine, MODEL, LAYOUT);
const prefill = await createKVManager({
  role: 'prefill',
  engine: prefillEngine,
  layout: LAYOUT,
  buffers: prefillMemory.buffers,
  bootstrapHost: '127.0.0.1',
  bootstrapPort: port,
  timeouts,
});
const decode = await createKVManager({
  role: 'decode',
  engine: decodeEngine,
  layout: LAYOUT,
  buffers: decodeMemory.buffers,
  bootstrapHost: '127.0.0.1',
  bootstrapPort: port,
  timeouts,
});
const producer = await createECProducer({ engine: prefillEngine, poolBytes: 4 << 20 });

const targets = [
  {
    endpoint: prefillEngine.control.endpoint,
    types: [
      [MSG.register, RegisterSchema],
      [MSG.request, RequestSchema],
      [MSG.abort, AbortSchema],
      [MSG.ping, PingSchema],
      [EC_PULL, PullSchema],
    ] as [string, TSchema][],
  },
  {
    endpoint: decodeEngine.control.endpoint,
    types: [
      [MSG.status, StatusSchema],
      [MSG.decodePing, PingSchema],
    ] as [string, TSchema][],
  },
];

// ---------------------------------------------------------------- failure bookkeeping
const recent: Buffer[] = [];
function fail(why: string): never {
  const dir = process.env.TE_FUZZ_CRASH_DIR ?? join(here, 'crashes');
  mkdirSync(dir, { recursive: true });
  recent.forEach((b, i) => writeFileSync(join(dir, `control_plane-${createHash('sha1').update(b).digest('hex').slice(0, 12)}-${i}`), b));
  console.error(`fuzz: event-loop lag up to ${maxLag} ms; slowest answers (ms): ${worst()}`);
  console.error(`fuzz: control_plane FAILED: ${why}; the last ${recent.length} inputs (the unanswered request last) are in ${dir}`);
  process.exit(1);
}
process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${(e as Error)?.stack ?? e}`));
process.on('uncaughtException', (e) => fail(`uncaught exception: ${e.stack ?? e}`));

// ---------------------------------------------------------------- input generation
const rnd = (n: number): number => Math.floor(Math.random() * n);
const pick = <T>(xs: readonly T[]): T => xs[rnd(xs.length)]!;
const EDGE_INTS = [0, 1, 2, 3, 7, 255, 256, 4095, 4096, 65535, 65536, 1 << 20, (1 << 30) - 1, 1 << 30, 2 ** 31 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER, -1];
const EDGE_BIG = [0n, 1n, 4096n, 0xffff_ffffn, 1n << 32n, (1n << 63n) - 1n, (1n << 64n) - 1n];

function intIn(min: number, max: number): number {
  const r = Math.random();
  if (r < 0.3) return pick([min, max, min + 1, max - 1].filter((x) => x >= min && x <= max));
  if (r < 0.6) return Math.min(max, Math.max(min, pick(EDGE_INTS)));
  return min + rnd(Math.min(max - min + 1, 64));
}

function wrongValue(): unknown {
  return pick<unknown>([
    null,
    undefined,
    -1,
    1.5,
    'x'.repeat(rnd(400)),
    [],
    {},
    true,
    2n ** 70n,
    new Uint8Array(3),
    { toString: 0 },
    NaN,
    Infinity,
    new Uint32Array(2),
    new BigUint64Array(1),
  ]);
}

// Elements one input may still generate: nested arrays of thousands of items each once
// built messages of tens of millions of values, whose transient heap (the fuzzer's own, up
// to 1.5 GiB) tripped the memory bound without the ranks holding anything.
let elementBudget = 0;

/** The JSON Schema keywords of a TypeBox schema that `generate` reads. */
interface SchemaKeywords {
  [Kind]?: string;
  const?: unknown;
  anyOf?: TSchema[];
  type?: string;
  properties?: Record<string, TSchema>;
  required?: string[];
  items?: TSchema;
  minimum?: number;
  maximum?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
}

/** A value of `schema`'s shape with edge values, depth- and size-bounded. */
function generate(schema: TSchema, depth = 0): unknown {
  const s: SchemaKeywords = schema;
  const kind = s[Kind];
  if (kind === 'TeUint32Array') {
    const n = Math.min(Math.max(elementBudget, 0), Math.random() < 0.1 ? rnd(70000) : rnd(20));
    elementBudget -= n;
    return Uint32Array.from({ length: n }, () => (Math.random() < 0.3 ? pick([0, 1, 15, 16, 2 ** 32 - 1]) : rnd(32)));
  }
  if (kind === 'TeBigUint64Array') return BigUint64Array.from({ length: rnd(6) }, () => (Math.random() < 0.5 ? pick(EDGE_BIG) : BigInt(rnd(1 << 20))));
  if ('const' in s) return s.const;
  if (s.anyOf) return generate(pick(s.anyOf), depth);
  switch (s.type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(s.properties ?? {}))
        if ((s.required ?? []).includes(k) || Math.random() < 0.6) out[k] = generate(v as TSchema, depth + 1);
      return out;
    }
    case 'array': {
      if (depth > 4 || elementBudget <= 0) return [];
      const n = Math.min(elementBudget, Math.random() < 0.1 ? Math.min(s.maxItems ?? 100, 5000) : rnd(4));
      elementBudget -= n;
      return Array.from({ length: n }, () => generate(s.items!, depth + 1));
    }
    case 'integer':
      return intIn(s.minimum ?? -(2 ** 31), s.maximum ?? 2 ** 31);
    case 'number':
      return Math.random() < 0.5 ? intIn(s.minimum ?? 0, s.maximum ?? 2 ** 40) : Math.random() * 1e12;
    case 'bigint':
      return Math.random() < 0.5 ? pick(EDGE_BIG) : BigInt(rnd(1000));
    case 'string': {
      const n = Math.random() < 0.2 ? (s.maxLength ?? 64) : Math.max(s.minLength ?? 0, rnd(12));
      return Math.random() < 0.3
        ? pick(['127.0.0.1:1', 'garbage', prefillEngine.segmentName, decodeEngine.segmentName, 'mha', 'auto']).slice(0, s.maxLength ?? 300)
        : randomBytes(n).toString('latin1').slice(0, n);
    }
    case 'boolean':
      return Math.random() < 0.5;
    default:
      return wrongValue();
  }
}

function breakOne(value: unknown): unknown {
  if (typeof value !== 'object' || value === null || ArrayBuffer.isView(value)) return wrongValue();
  const keys = Object.keys(value);
  if (keys.length === 0) return value;
  const k = pick(keys);
  return { ...value, [k]: Math.random() < 0.7 ? wrongValue() : breakOne((value as Record<string, unknown>)[k]) };
}

function mutateBytes(b: Buffer): Buffer {
  const out = Buffer.from(b);
  const n = 1 + rnd(8);
  let cur = out;
  for (let i = 0; i < n && cur.length > 0; i++) {
    const at = rnd(cur.length);
    switch (rnd(5)) {
      case 0:
        cur[at] ^= 1 << rnd(8);
        break;
      case 1:
        cur[at] = pick([0, 0xff, 0x7f, 0x80, 0xc0, 0xc1, 0xd4, 0xc7, 0xdd, 0xdf]);
        break;
      case 2:
        cur = Buffer.concat([cur.subarray(0, at), randomBytes(rnd(8) + 1), cur.subarray(at)]);
        break;
      case 3:
        cur = Buffer.concat([cur.subarray(0, at), cur.subarray(Math.min(cur.length, at + rnd(8) + 1))]);
        break;
      default:
        cur = Buffer.concat([cur, cur.subarray(at, Math.min(cur.length, at + 64))]);
    }
  }
  return cur;
}

const seeds = readdirSync(join(here, 'corpus', 'control_plane')).map((f) => readFileSync(join(here, 'corpus', 'control_plane', f)));
let nextId = 1;
function input(types: [string, TSchema][]): Buffer {
  const r = Math.random();
  if (r < 0.25) return mutateBytes(pick(seeds));
  const [type, schema] = pick(types);
  elementBudget = 100_000;
  let body = generate(schema);
  if (r > 0.8) body = breakOne(body);
  const envelope: Record<string, unknown> = { v: 1, id: nextId++, type, body };
  if (Math.random() < 0.05) envelope[pick(['v', 'id', 'type'])] = wrongValue();
  try {
    return packr.pack(envelope);
  } catch {
    return mutateBytes(pick(seeds));
  }
}

// ---------------------------------------------------------------- the run
const sockets = targets.map((t) => {
  const d = new Dealer({ linger: 0, sendHighWaterMark: 10_000 });
  d.connect(`tcp://${t.endpoint}`);
  return { ...t, d, waiting: new Map<number, { at: number; bytes: Buffer; type: string }>() };
});
let answered = 0;
// Event-loop lag (a blocked loop delays every answer): reported with a failure.
let maxLag = 0;
let lastTick = Date.now();
const lagTimer = setInterval(() => {
  const now = Date.now();
  maxLag = Math.max(maxLag, now - lastTick - 50);
  lastTick = now;
}, 50);
const slowest = new Map<string, number>();
/** The five slowest answers, by message type (types of well-formed messages only). */
const worst = (): string =>
  JSON.stringify(
    Object.fromEntries(
      [...slowest]
        .filter(([t]) => /^te\.[a-z.]+$/.test(t))
        .sort((a, b) => b[1] - a[1])
        .slice(0, 5),
    ),
  );
for (const s of sockets) {
  void (async () => {
    for await (const [msg] of s.d) {
      try {
        const reply = packr.unpack(msg!) as { id?: number };
        const w = typeof reply?.id === 'number' ? s.waiting.get(reply.id) : undefined;
        if (w) {
          s.waiting.delete(reply.id!);
          answered++;
          const type = w.type;
          slowest.set(type, Math.max(slowest.get(type) ?? 0, Date.now() - w.at));
        }
      } catch {
        fail('a reply that is not msgpack');
      }
    }
  })();
}

const started = Date.now();
let sent = 0;
const rssStart = process.memoryUsage().rss;
while (Date.now() - started < seconds * 1000) {
  for (let k = 0; k < 64; k++) {
    const s = pick(sockets);
    const bytes = input(s.types);
    recent.push(bytes);
    if (recent.length > 32) recent.shift();
    // Decoded with te's own bounded decoder: a plain unpack of a hostile header would spend
    // this process's time (and skew the lag measured below) before the server even saw it.
    let id: unknown;
    let type = '?';
    try {
      const head = decodeMessage(bytes) as { id?: unknown; type?: unknown };
      id = head?.id;
      type = String(head?.type ?? '?').slice(0, 40);
    } catch {
      // not msgpack, or refused by the bounds check
    }
    if (typeof id === 'number' && Number.isSafeInteger(id) && id >= 0) s.waiting.set(id, { at: Date.now(), bytes, type });
    await s.d.send(bytes);
    sent++;
  }
  await new Promise((r) => setImmediate(r));
  const now = Date.now();
  for (const s of sockets) {
    for (const [id, w] of s.waiting) {
      if (now - w.at <= 10_000) continue;
      recent.push(w.bytes); // the unanswered request itself is saved with the others
      fail(`request ${id} to ${s.endpoint} got no answer in 10 s`);
    }
  }
  if (process.memoryUsage().rss > MAX_RSS) {
    // RSS can stay high after the garbage is gone (the allocator keeps freed pages), so the
    // bound applies to what is still held after a full collection: V8's heap and the memory
    // outside it (buffers, typed arrays, native allocations reported to V8).
    collectGarbage();
    const m = process.memoryUsage();
    const held = m.heapUsed + m.external;
    if (held > MAX_HELD)
      fail(
        `${(held / 2 ** 20).toFixed(0)} MiB still held after a full garbage collection (RSS ${(m.rss / 2 ** 20).toFixed(0)} MiB), past the ${MAX_HELD / 2 ** 20} MiB bound`,
      );
  }
  // At most 256 requests in flight per socket: a ROUTER drops replies to a peer whose pipe
  // is full (1000 messages), which would look like a missing answer.
  while (sockets.some((s) => s.waiting.size > 256)) await new Promise((r) => setTimeout(r, 2));
}
// Replies still due get their 10 s.
const drainUntil = Date.now() + 10_000;
while (sockets.some((s) => s.waiting.size > 0) && Date.now() < drainUntil) await new Promise((r) => setTimeout(r, 50));
for (const s of sockets) if (s.waiting.size > 0) fail(`${s.waiting.size} request(s) to ${s.endpoint} never answered`);

// The ranks still do their job: a real room lands byte-exact.
const room = 424242n;
const pages = Uint32Array.from([3, 1, 4]);
fillPrefill(MODEL, prefillMemory, room, pages, 1);
const receiver = decode.createReceiver({ host: '127.0.0.1', port, room });
const sender = prefill.createSender({ host: '127.0.0.1', port, room });
await receiver.init(pages, 1);
sender.init(pages.length, 1);
await sender.send(pages, { last: true });
await receiver.cell.reached(KVStatus.Success);
const wrong = verifyDecode(MODEL, decodeMemory, [{ room, pages, auxSlot: 1 }]);
if (wrong) fail(`after fuzzing, a real room did not land byte-exact: ${wrong}`);

const took = (Date.now() - started) / 1000;
console.log(
  `  control_plane: ${sent} messages in ${took.toFixed(1)} s (${(sent / took).toFixed(0)}/s), ${answered} answered; RSS ${(rssStart / 2 ** 20).toFixed(0)} → ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB; a real room landed byte-exact afterwards`,
);
clearInterval(lagTimer);
console.log(`  control_plane: event-loop lag up to ${maxLag} ms; slowest answers (ms): ${worst()}`);
for (const s of sockets) s.d.close();
await producer.close();
await prefill.close();
await decode.close();
await prefillEngine.close();
await decodeEngine.close();
process.exit(0);
