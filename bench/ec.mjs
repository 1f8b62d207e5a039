#!/usr/bin/env node
// Encoder-cache transfer benchmark: an EC producer and an EC consumer in their own
// processes over a te transport (mooncake-tcp by default). For 1 MiB and 16 MiB items it
// times a consumer's pull of a set of items (one pull request; the producer writes them in
// one batch) beside the raw transport writing the same bytes between the same processes,
// in the same run, as a ratio. Every pulled byte is verified, and so is every byte the raw
// baseline wrote (sha256 of the consumer's range = of the producer's pool, the range zeroed
// before each raw run).
//
//   node bench/ec.mjs [--connector mooncake-tcp] [--total-mib 256] [--runs 5] [--json]
//   TE_BENCH_CORRUPT_BYTE=1 ...   the verifier's own test: one received byte is flipped
//                                  before each check, and the run must fail
import { createHash } from 'node:crypto';
import { parseCli } from '../scripts/lib/cli.mjs';
import { fileURLToPath } from 'node:url';
import { quick } from './lib/quick.mjs';
import { closeRanks, median, now, serveRank, spawnRank } from './lib/ranks.mjs';

const { values: args } = parseCli({
  usage: 'node bench/ec.mjs [options]',
  summary:
    'Encoder-cache transfer: a consumer pulling items from a producer (1 MiB and 16 MiB items) beside the raw transport writing the same bytes in the same run, every byte verified.',
  notes: 'TE_BENCH_CORRUPT_BYTE=1 flips one received byte before each check (the run must fail); TE_BENCH_QUICK=1 makes a small smoke run.',
  options: {
    connector: { type: 'string', default: 'mooncake-tcp', help: 'te transport to use' },
    'total-mib': { type: 'string', number: { integer: true, min: 1, max: 65536 }, default: '256', help: 'MiB pulled per timed run' },
    runs: { type: 'string', number: { integer: true, min: 1, max: 100 }, default: '5', help: 'timed runs per case (the median is reported)' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
    rank: { type: 'string', hidden: true, help: "internal: a forked child's role" },
  },
});
quick(args, { 'total-mib': '32', runs: '1' });
const MiB = 1 << 20;
const total = Number(args['total-mib']) * MiB;
const CORRUPT = process.env.TE_BENCH_CORRUPT_BYTE !== undefined && process.env.TE_BENCH_CORRUPT_BYTE !== '';
const sha = (view) => createHash('sha256').update(view).digest('hex');

function fillItem(view, hash) {
  const s = createHash('sha256').update(hash).digest().readUInt32LE(0);
  const w = new Uint32Array(view.buffer, view.byteOffset, view.byteLength >>> 2);
  for (let i = 0; i < w.length; i++) w[i] = Math.imul(i + 1, 2654435761) ^ s;
}

if (args.rank) {
  const spec = JSON.parse(args.rank);
  const { createTransferEngine, batchOf } = await import('@te/connector');
  const { createECProducer, createECConsumer } = await import('@te/disagg');
  const engine = await createTransferEngine({ connector: spec.connector, bindAddress: '127.0.0.1' });
  let producer;
  let dest;
  if (spec.role === 'producer') producer = await createECProducer({ engine, poolBytes: total + 16 * MiB });
  else dest = await engine.allocateMemory(total);
  serveRank({
    /** Producer: saves `count` items of `size` bytes; returns their params and pool addresses. */
    save: async (a) => {
      const params = {};
      const item = new Uint8Array(a.size);
      for (let i = 0; i < a.count; i++) {
        const hash = `${a.prefix}-${i}`;
        fillItem(item, hash);
        params[hash] = await producer.save(hash, item);
      }
      return params;
    },
    info: async () => ({ segment: engine.segmentName, addr: dest?.addr.toString() }),
    /** Consumer: one pull of every item in `params`; returns the time and a verification. */
    pull: async (a) => {
      const consumer = await createECConsumer({ engine, loadTimeoutMs: 60_000 });
      dest.buffer.fill(0);
      let off = 0;
      const where = {};
      const t0 = now();
      consumer.startLoad(a.params, (hash, length) => ((where[hash] = off), (off += Number(length)), { addr: dest.addr + BigInt(where[hash]) }));
      const r = await consumer.waitForLoad();
      const t1 = now();
      if (r.failed.length) throw new Error(`${r.failed.length} items failed: ${r.failed[0].error.message}`);
      if (CORRUPT && r.loaded.length) dest.buffer[where[r.loaded[0]] + (a.size >> 1)] ^= 0xff;
      const want = new Uint8Array(a.size);
      for (const hash of r.loaded) {
        fillItem(want, hash);
        if (Buffer.compare(dest.buffer.subarray(where[hash], where[hash] + a.size), want) !== 0) throw new Error(`item ${hash} differs`);
      }
      return { ms: t1 - t0, bytes: off, verified: r.loaded.length === Object.keys(a.params).length };
    },
    /** Consumer: zeroes the range the raw run writes next. */
    zero: async (a) => (dest.buffer.fill(0, 0, a.bytes), true),
    /** Either side: sha256 of what the raw run wrote (consumer) or wrote from (producer). */
    digest: async (a) => {
      const view = producer ? producer.pool.memory.buffer.subarray(0, a.bytes) : dest.buffer.subarray(0, a.bytes);
      if (CORRUPT && !producer) view[a.bytes >> 1] ^= 0xff;
      return sha(view);
    },
    /** Producer: the same bytes, written straight from the pool by the engine (one batch). */
    raw: async (a) => {
      const pool = producer.pool;
      const reqs = [];
      for (let off = 0; off < a.bytes; off += a.size)
        reqs.push({ op: 'write', local: pool.memory.addr + BigInt(off), remote: BigInt(a.addr) + BigInt(off), length: a.size });
      const t0 = now();
      await engine.transfer(a.segment, batchOf(reqs), { timeoutMs: 60_000 });
      return { ms: now() - t0 };
    },
    close: async () => {
      await producer?.close();
      await engine.close();
      setImmediate(() => process.exit(0));
      return true;
    },
  });
  await new Promise(() => {});
}

const log = (...a) => (args.json ? process.stderr.write(a.join(' ') + '\n') : console.log(...a));
const script = fileURLToPath(import.meta.url);
const [p, c] = await Promise.all([
  spawnRank(script, { role: 'producer', connector: args.connector }),
  spawnRank(script, { role: 'consumer', connector: args.connector }),
]);
const out = { connector: args.connector, cases: [] };
try {
  const cinfo = await c.call('info');
  log(`EC transfer over ${args.connector}: ${args['total-mib']} MiB per pull, producer and consumer in their own processes (loopback)`);
  for (const size of [MiB, 16 * MiB]) {
    const params = await p.call('save', { size, count: Math.floor(total / size), prefix: `s${size}` });
    const ec = [];
    const raw = [];
    let verified = true;
    for (let k = 0; k < Number(args.runs) + 1; k++) {
      const e = await c.call('pull', { params, size });
      await c.call('zero', { bytes: e.bytes });
      const r = await p.call('raw', { segment: cinfo.segment, addr: cinfo.addr, bytes: e.bytes, size });
      const [got, want] = await Promise.all([c.call('digest', { bytes: e.bytes }), p.call('digest', { bytes: e.bytes })]);
      if (got !== want) throw new Error(`${size / MiB} MiB items, run ${k}: the raw transfer's bytes differ at the consumer`);
      verified &&= e.verified && got === want;
      if (k === 0) continue;
      ec.push(e.bytes / (e.ms / 1000));
      raw.push(e.bytes / (r.ms / 1000));
    }
    const row = { itemBytes: size, ecBytesPerSecond: median(ec), rawBytesPerSecond: median(raw), verified };
    row.ratio = row.ecBytesPerSecond / row.rawBytesPerSecond;
    out.cases.push(row);
    log(
      `${size / MiB} MiB items: EC ${(row.ecBytesPerSecond / 1e9).toFixed(2)} GB/s, raw ${(row.rawBytesPerSecond / 1e9).toFixed(2)} GB/s: ratio ${row.ratio.toFixed(2)} (target ≥ 0.9); ${row.verified ? 'every item and every raw byte verified' : 'NOT VERIFIED'}`,
    );
  }
} finally {
  await closeRanks([p, c]);
}
if (args.json) console.log(JSON.stringify(out));
process.exit(0);
