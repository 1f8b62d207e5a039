#!/usr/bin/env node
// What end-to-end KV checksums leave after a chunked prefill's last chunk: the time from the
// last chunk's send() to the decode's Success, checksums off and on, in one run. TP 1→1 over
// mooncake-tcp on loopback, the prefill and the decode each its own process (bench/pd.mjs's
// ranks: GQA 8 KV heads × 128 dim fp16, page 64), rooms of `--tokens` sent in `--chunks`
// chunks, the two sets of ranks alive at once and their rooms alternating. With checksums on
// the decode checks each chunk but the last when the prefill reports it written, so what is
// left after the last chunk is that chunk's write and check; `--chunks 1` shows the whole
// room's check instead.
//
//   node bench/pd-tail.mjs [--chunks 8] [--tokens 8192] [--layers 32] [--rooms 3] [--json]
//
// Every timed room is verified as bench/pd.mjs verifies its rooms (its destination pages
// poisoned first, then compared per head slice with the prefill's pages: verifyRoom); a room
// whose bytes differ makes the run exit 1 with `verified: false` (`--corrupt` shows it).
// With --json the last stdout line is one JSON object.
import { fileURLToPath } from 'node:url';
import { parseCli } from '../scripts/lib/cli.mjs';
import { quick } from './lib/quick.mjs';
import { HEADS, PAGE } from './lib/pd-rank.mjs';
import { closeRanks, freePort, median, spawnRank } from './lib/ranks.mjs';
import { verifyRoom } from './lib/pd-results.mjs';

const { values: args } = parseCli({
  usage: 'node bench/pd-tail.mjs [options]',
  summary: "Chunked PD rooms, KV checksums off and on: the time from the last chunk's send() to the decode's Success (TP 1→1, mooncake-tcp, loopback).",
  options: {
    chunks: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '8', help: 'chunks per room' },
    tokens: { type: 'string', number: { integer: true, min: 1, max: 1048576 }, default: '8192', help: 'tokens per room' },
    layers: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '32', help: 'layers' },
    rooms: { type: 'string', number: { integer: true, min: 1, max: 1000 }, default: '3', help: 'timed rooms per setting (after one warm-up room each)' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
    corrupt: { type: 'boolean', default: false, help: "test hook: flip one byte of the decode's pages after the first timed room (the run must fail)" },
  },
});
quick(args, { tokens: '512', layers: '2', rooms: '1' });
const chunks = Number(args.chunks);
const pagesPerRoom = Math.ceil(Number(args.tokens) / PAGE);
if (!Number.isInteger(chunks) || chunks < 1 || chunks > pagesPerRoom) {
  console.error(`--chunks must be a whole number from 1 to the room's ${pagesPerRoom} pages, got ${args.chunks}`);
  process.exit(2);
}
const rankScript = fileURLToPath(new URL('./pd.mjs', import.meta.url));
const src = Array.from({ length: pagesPerRoom }, (_, i) => i);
const log = (...a) => (args.json ? process.stderr.write(a.join(' ') + '\n') : console.log(...a));

/** A prefill and a decode rank, TP 1→1, checksums `on` (both ranks, as a deployment sets them). */
async function pair(checksums) {
  const port = await freePort();
  const base = {
    connector: 'mooncake-tcp',
    layers: Number(args.layers),
    pages: pagesPerRoom * 2,
    port,
    pageLayout: 'NHD',
    staging: true,
    checksums,
    tp: 1,
    rank: 0,
  };
  const prefill = await spawnRank(rankScript, { ...base, role: 'prefill' });
  const decode = await spawnRank(rankScript, { ...base, role: 'decode' });
  return { prefill: [prefill], decode: [decode], slices: [[{ prefill: 0, srcOffset: 0, dstOffset: 0, count: HEADS }]] };
}

/**
 * One room: the last chunk's send() → the decode's Success (ms), the whole room (ms), and
 * why its bytes do not match (undefined when every head slice does). With `corrupt`, one
 * byte of its destination is flipped after the room, before the check.
 */
async function room(ranks, k, what, corrupt) {
  const [p] = ranks.prefill;
  const [d] = ranks.decode;
  const id = String(9000 + k);
  const dst = src.map((i) => (i * 37 + k) % (pagesPerRoom * 2));
  await d.call('poison', { pages: dst, round: k });
  await d.call('receive', { room: id, pages: dst });
  const [s, w] = await Promise.all([p.call('send', { room: id, pages: src, chunks }), d.call('wait', { room: id })]);
  if (corrupt) await d.call('corrupt', { page: dst[0] });
  const mismatch = await verifyRoom(ranks, `${what} room ${id}`, src, dst).then(
    () => undefined,
    (e) => e.message,
  );
  return { tail: w.t - s.lastChunk, room: w.t - s.t, mismatch };
}

const off = await pair(false);
let on;
try {
  on = await pair(true);
  const got = { off: [], on: [] };
  for (let k = 0; k <= Number(args.rooms); k++) {
    for (const which of k % 2 ? ['on', 'off'] : ['off', 'on']) {
      const corrupt = args.corrupt && k === 1 && which === 'off';
      const r = await room(which === 'on' ? on : off, 2 * k + (which === 'on' ? 1 : 0), `checksums ${which}`, corrupt);
      if (k > 0)
        got[which].push(r); // the first room of each warms up
      else if (r.mismatch) throw new Error(r.mismatch);
    }
  }
  const timed = [...got.off, ...got.on];
  const mismatches = timed.map((r) => r.mismatch).filter(Boolean);
  const of = (xs, key) => median(xs.map((x) => x[key]));
  const result = {
    chunks,
    bytesPerRoom: pagesPerRoom * PAGE * HEADS * 256 * 2 * Number(args.layers),
    tailOffMs: of(got.off, 'tail'),
    tailOnMs: of(got.on, 'tail'),
    roomOffMs: of(got.off, 'room'),
    roomOnMs: of(got.on, 'room'),
    verified: mismatches.length === 0,
  };
  log(
    `PD rooms of ${(result.bytesPerRoom / 2 ** 20).toFixed(0)} MiB in ${chunks} chunks, TP 1→1 over mooncake-tcp (loopback, every rank its own process), medians of ${got.on.length} rooms each:`,
  );
  log(
    `  last chunk sent → decode Success: checksums off ${result.tailOffMs.toFixed(1)} ms, on ${result.tailOnMs.toFixed(1)} ms (on − off: ${(result.tailOnMs - result.tailOffMs).toFixed(1)} ms)`,
  );
  log(
    `  whole room: checksums off ${result.roomOffMs.toFixed(0)} ms, on ${result.roomOnMs.toFixed(0)} ms (off / on: ${(result.roomOffMs / result.roomOnMs).toFixed(2)})`,
  );
  for (const m of mismatches) console.error(m);
  log(`cases verified: ${timed.length - mismatches.length} of ${timed.length}`);
  if (args.json) console.log(JSON.stringify(result));
  if (mismatches.length > 0) process.exitCode = 1;
} finally {
  await closeRanks([...off.prefill, ...off.decode, ...(on ? [...on.prefill, ...on.decode] : [])]);
}
