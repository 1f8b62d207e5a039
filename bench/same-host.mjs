#!/usr/bin/env node
// Same-host transfers: mooncake-shm (and mooncake-tcp over loopback, for context) writing
// from one process into another at 64 KiB, 1 MiB and 16 MiB, beside memcpy measured in the
// same run over buffers of the same size and access pattern (bench/memcpy: pages touched and
// warmed, huge pages where shm asks for them), once single-threaded and once with as many
// threads as shm has copy threads: the target is the second (like for like).
//
// Both sides rotate through a pool (64 MiB by default) so neither memcpy nor the transfer
// is measured out of a warm cache alone; requests of a case are issued in whole passes over
// the pool. Every timed pass is checked: before it the initiator stamps the first and last
// 8 bytes of every request with the pass number, after it (clock stopped) the target checks
// every stamp; after the case the target's pool must hash exactly like the initiator's. At
// 64 KiB a batch carries 16 requests (1 MiB), larger sizes one request per batch;
// --inflight batches (16) are kept in flight by as many callers.
//
// mooncake-shm runs twice: from memory of engine.allocateMemory (its pool memory: a sealed
// memfd the target maps and copies with memcpy; the row the target is judged on) and from
// a registered JS buffer (ordinary memory: the target copies with process_vm_readv).
// Each is compared with memcpy from the same kind of memory: from a memfd mapped shared for
// the pool row (the kernel gives shared memory huge pages only where shmem_enabled allows,
// private memory wherever madvise asks), from private memory for the registered row. The
// report prints the part of every buffer each side got in huge pages (/proc/self/smaps).
//
//   node bench/same-host.mjs [--seconds 1] [--pool-mib 64] [--inflight 16] [--no-tcp] [--json]
//   TE_BENCH_QUICK=1 node bench/same-host.mjs      smoke run (small pool, short cases)
//   TE_BENCH_CORRUPT_BYTE=1 ...                    the verifier's own test: one byte of the
//                                                  target's pool is flipped after the last timed
//                                                  pass; every case must then fail verification
import { execFileSync, fork } from 'node:child_process';
import { createHash, randomFillSync } from 'node:crypto';
import { cpus } from 'node:os';
import { parseCli } from '../scripts/lib/cli.mjs';
import { batchOf, createTransferEngine } from '@te/connector';
import { buildCBench } from './lib/c-bench.mjs';
import { hugePageShare, pagesLine, shmemHugePolicy } from './lib/huge-pages.mjs';
import { quick, QUICK } from './lib/quick.mjs';

const SIZES = [64 << 10, 1 << 20, 16 << 20];
const { values } = parseCli({
  usage: 'node bench/same-host.mjs [options]',
  summary:
    'Same-host transfers: mooncake-shm (and mooncake-tcp over loopback) at 64 KiB, 1 MiB and 16 MiB beside memcpy of the same sizes in the same run, every pass verified.',
  options: {
    seconds: { type: 'string', number: { above: 0, max: 3600 }, default: '1', help: 'seconds per case' },
    'pool-mib': { type: 'string', number: { integer: true, min: 1, max: 65536 }, default: '64', help: 'MiB of the pool both sides rotate through' },
    inflight: { type: 'string', number: { integer: true, min: 1, max: 1024 }, default: '16', help: 'batches in flight' },
    'no-tcp': { type: 'boolean', default: false, help: 'leave out the mooncake-tcp rows' },
    json: { type: 'boolean', default: false, help: 'print the result as JSON (the last line of output)' },
    target: { type: 'string', hidden: true, help: "internal: a forked child's role" },
  },
});
quick(values, { seconds: '0.1', 'pool-mib': '32' });
const POOL = Number(values['pool-mib']) << 20;
const SECONDS = Number(values.seconds);
const INFLIGHT = Math.max(1, Number(values.inflight));

const sha = (b) => createHash('sha256').update(b).digest('hex');
const CORRUPT = process.env.TE_BENCH_CORRUPT_BYTE !== undefined && process.env.TE_BENCH_CORRUPT_BYTE !== '';

/** Writes `pass` into the first and last 8 bytes of each `size`-byte request of `bytes`. */
function stamp(pool, size, requests, pass) {
  const v = new DataView(pool.buffer, pool.byteOffset, pool.byteLength);
  for (let r = 0; r < requests; r++) {
    const a = r * size;
    v.setUint32(a, pass, true);
    v.setUint32(a + 4, ~pass >>> 0, true);
    v.setUint32(a + size - 8, pass, true);
    v.setUint32(a + size - 4, ~pass >>> 0, true);
  }
}
/** Requests whose stamps are not `pass` (a request of the pass that did not land whole). */
function badStamps(pool, size, requests, pass) {
  const v = new DataView(pool.buffer, pool.byteOffset, pool.byteLength);
  let bad = 0;
  for (let r = 0; r < requests; r++) {
    const a = r * size;
    const ok =
      v.getUint32(a, true) === pass &&
      v.getUint32(a + 4, true) === ~pass >>> 0 &&
      v.getUint32(a + size - 8, true) === pass &&
      v.getUint32(a + size - 4, true) === ~pass >>> 0;
    if (!ok) bad++;
  }
  return bad;
}

// ---- target process: one engine, one registered pool, answers the parent over IPC ----
if (values.target) {
  const engine = await createTransferEngine(JSON.parse(values.target));
  const pool = new Uint8Array(POOL);
  const handle = await engine.registerMemory(pool);
  process.on('message', async (m) => {
    if (m.cmd === 'zero') pool.fill(0);
    if (m.cmd === 'stamps') return process.send({ id: m.id, bad: badStamps(pool, m.size, m.requests, m.pass) });
    if (m.cmd === 'corrupt') pool[m.offset] ^= 0xff;
    if (m.cmd === 'hash') return process.send({ id: m.id, hash: sha(pool) });
    if (m.cmd === 'pages') return process.send({ id: m.id, share: hugePageShare(handle.addr, POOL) });
    if (m.cmd === 'close') {
      await engine.close();
      process.send({ id: m.id });
      return process.exit(0);
    }
    process.send({ id: m.id });
  });
  process.send({ ready: true, segment: engine.segmentName, addr: handle.addr.toString() });
} else {
  await main();
}

function startTarget(config) {
  const child = fork(new URL(import.meta.url), ['--target', JSON.stringify(config), '--pool-mib', String(POOL >> 20)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let next = 1;
  const waiting = new Map();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the target process did not start within 20 s')), 20_000);
    child.once('exit', (code) => reject(new Error(`the target process exited with ${code}`)));
    child.on('message', (m) => {
      if (m.ready) {
        clearTimeout(timer);
        const ask = (cmd, args = {}) =>
          new Promise((res) => {
            const id = next++;
            waiting.set(id, res);
            child.send({ id, cmd, ...args });
          });
        resolve({ segment: m.segment, addr: BigInt(m.addr), ask, close: () => ask('close') });
      } else {
        waiting.get(m.id)?.(m);
        waiting.delete(m.id);
      }
    });
  });
}

/**
 * memcpy over two pools of this size, in requests of `size` bytes (bench/memcpy), with
 * `threads` threads, pages touched and warmed, huge pages when `hugePages`, the source a
 * memfd mapped shared when `sharedSource` (as shm's pool): {gbps, verified, pages}.
 */
function memcpyRun(size, threads, hugePages, sharedSource) {
  const args = ['--size', String(size), '--pool-mib', String(POOL >> 20), '--threads', String(threads), '--seconds', String(SECONDS)];
  if (hugePages) args.push('--huge-pages');
  if (sharedSource) args.push('--shared-source');
  if (CORRUPT) args.push('--corrupt-one-byte');
  let out;
  try {
    out = execFileSync(buildCBench('memcpy', 'memcpy_bench'), args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  } catch (e) {
    if (e.status !== 1 || !e.stdout) throw e;
    out = e.stdout; // exit 1: ran, not verified
  }
  const r = JSON.parse(out.trim().split('\n').pop());
  return { gbps: r.bytesPerSecond / 1e9, verified: r.verified === true, pages: { source: r.sourceHugeShare, destination: r.destinationHugeShare } };
}

/**
 * Writes the initiator's pool into the target's in whole passes for about SECONDS:
 * {gbps, verified, why}. Every timed pass is stamped and checked (clock stopped), the last
 * one byte for byte.
 */
async function transferGBps(engine, target, local, data, size) {
  await target.ask('zero');
  const perBatch = size < 1 << 20 ? Math.max(1, (1 << 20) / size) : 1;
  const batches = [];
  for (let off = 0; off + size * perBatch <= POOL; off += size * perBatch) {
    batches.push(
      batchOf(
        Array.from({ length: perBatch }, (_, i) => ({
          op: 'write',
          local: local + BigInt(off + i * size),
          remote: target.addr + BigInt(off + i * size),
          length: size,
        })),
      ),
    );
  }
  const requests = batches.length * perBatch;
  const pass = async () => {
    // Several callers: the next batch is queued while the target copies the current one.
    let i = 0;
    const lane = async () => {
      while (i < batches.length) await engine.transfer(target.segment, batches[i++]);
    };
    await Promise.all(Array.from({ length: INFLIGHT }, lane));
  };
  let passes = 0;
  stamp(data, size, requests, ++passes);
  await pass(); // warm-up: connections, first faults
  let timedMs = 0;
  let bytes = 0;
  let why = '';
  do {
    stamp(data, size, requests, ++passes);
    const t0 = performance.now();
    await pass();
    timedMs += performance.now() - t0;
    bytes += requests * size;
    const { bad } = await target.ask('stamps', { size, requests, pass: passes });
    if (bad > 0) why ||= `pass ${passes}: ${bad} of ${requests} requests did not land`;
  } while (timedMs < SECONDS * 1000);
  const gbps = bytes / (timedMs / 1000) / 1e9;
  if (CORRUPT) await target.ask('corrupt', { offset: (requests * size) >> 1 });
  const { hash } = await target.ask('hash');
  if (hash !== sha(data)) why ||= "after the last pass the target's pool does not match what was written";
  return { gbps, verified: why === '', why };
}

/** `memory`: 'allocated' (engine.allocateMemory: the transport's pool memory where it has one) or 'registered' (a JS buffer). */
async function run(connector, memory) {
  const config = { connector, timeouts: { transferMs: 60_000 } };
  const target = await startTarget(config);
  const engine = await createTransferEngine(config);
  let data, addr;
  if (memory === 'allocated') {
    ({ buffer: data, addr } = await engine.allocateMemory(POOL));
  } else {
    data = new Uint8Array(POOL);
    ({ addr } = await engine.registerMemory(data));
  }
  randomFillSync(data); // every byte: a misplaced or missing copy shows in the final hash
  const out = { describe: engine.describe()[connector] ?? {} };
  try {
    for (const size of SIZES) if (size <= POOL) out[size] = await transferGBps(engine, target, addr, data, size);
    out.pages = { source: hugePageShare(addr, POOL), destination: (await target.ask('pages')).share };
  } finally {
    await engine.close();
    await target.close();
  }
  return out;
}

async function main() {
  const shm = await run('mooncake-shm', 'allocated');
  const shmRegistered = await run('mooncake-shm', 'registered');
  const tcp = values['no-tcp'] ? undefined : await run('mooncake-tcp', 'registered');
  // The baseline gets what shm got: its copy threads, its huge-page advice, and the kind of
  // memory it copies from (shared for the pool row, private for the registered one).
  const copyThreads = Number(shm.describe.copyThreads ?? 1);
  const hugePages = String(shm.describe.hugePages ?? 'off') !== 'off';
  const memcpy1 = {};
  const memcpyT = {};
  const memcpyPrivateT = {};
  for (const size of SIZES) {
    if (size > POOL) continue;
    memcpy1[size] = memcpyRun(size, 1, hugePages, true);
    memcpyT[size] = copyThreads === 1 ? memcpy1[size] : memcpyRun(size, copyThreads, hugePages, true);
    memcpyPrivateT[size] = memcpyRun(size, copyThreads, hugePages, false);
  }
  const label = (s) => (s >= 1 << 20 ? `${s >> 20} MiB` : `${s >> 10} KiB`);
  const failures = [];
  const rows = SIZES.filter((s) => s <= POOL).map((s) => {
    // Every run this size had, each verified from its own timed bytes (tcp only when it ran).
    const verified = [shm[s], shmRegistered[s], memcpy1[s], memcpyT[s], memcpyPrivateT[s], tcp?.[s]].filter(Boolean).every((r) => r.verified);
    for (const [what, r] of [
      ['mooncake-shm', shm[s]],
      ['mooncake-shm (registered)', shmRegistered[s]],
      ['mooncake-tcp', tcp?.[s]],
    ])
      if (r && !r.verified) failures.push(`${label(s)} ${what}: ${r.why}`);
    for (const [what, r] of [
      ['memcpy', memcpy1[s]],
      [`memcpy ×${copyThreads}`, memcpyT[s]],
      [`memcpy ×${copyThreads} from private memory`, memcpyPrivateT[s]],
    ])
      if (!r.verified) failures.push(`${label(s)} ${what}: the copy does not match`);
    return {
      size: label(s),
      copyThreads,
      hugePages,
      memcpyGBps: +memcpy1[s].gbps.toFixed(2),
      memcpyThreadsGBps: +memcpyT[s].gbps.toFixed(2),
      shmGBps: +shm[s].gbps.toFixed(2),
      shmVsMemcpy: +(shm[s].gbps / memcpy1[s].gbps).toFixed(2),
      shmVsMemcpyThreads: +(shm[s].gbps / memcpyT[s].gbps).toFixed(2),
      memcpyPrivateThreadsGBps: +memcpyPrivateT[s].gbps.toFixed(2),
      shmRegisteredGBps: +shmRegistered[s].gbps.toFixed(2),
      shmRegisteredVsMemcpyThreads: +(shmRegistered[s].gbps / memcpyPrivateT[s].gbps).toFixed(2),
      ...(tcp ? { tcpGBps: +tcp[s].gbps.toFixed(2), shmVsTcp: +(shm[s].gbps / tcp[s].gbps).toFixed(2) } : {}),
      verified,
    };
  });
  for (const f of failures) console.error(`same-host: NOT VERIFIED: ${f}`);
  process.exitCode = failures.length ? 1 : 0;
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? '?'}`;
  // Huge-page shares: the pool run's and memcpy's from shared memory (the last size's runs: one pool each).
  const last = SIZES.filter((s) => s <= POOL).pop();
  const pages = {
    shmemEnabled: shmemHugePolicy(),
    shm: shm.pages,
    memcpy: memcpyT[last].pages,
    shmRegistered: shmRegistered.pages,
    memcpyPrivate: memcpyPrivateT[last].pages,
  };
  if (values.json) {
    console.log(JSON.stringify({ machine, poolMiB: POOL >> 20, seconds: SECONDS, inflight: INFLIGHT, quick: QUICK, pages, rows }));
    return;
  }
  printTable(rows, machine, copyThreads, hugePages, pages, tcp !== undefined);
}

function printTable(rows, machine, copyThreads, hugePages, pages, withTcp) {
  console.log(
    `same-host writes, ${machine}; pool ${POOL >> 20} MiB per side, ${INFLIGHT} batches in flight, ~${SECONDS} s per case${QUICK ? ' (TE_BENCH_QUICK: smoke run, figures not meaningful)' : ''}`,
  );
  console.log(
    `memcpy: pages touched and warmed${hugePages ? ', huge pages advised (as shm)' : ''}; 1 thread, and ${copyThreads} (shm's copy threads: the target); from shared memory (a memfd, as shm's pool), and from private memory for the registered row`,
  );
  console.log('mooncake-shm: from engine.allocateMemory (pool memory, copied with memcpy); registered: from a JS buffer (process_vm_readv)');
  console.log(pagesLine(pages));
  console.log(
    'size     memcpy GB/s  memcpy ×' +
      copyThreads +
      ' GB/s  mooncake-shm GB/s  shm/memcpy  shm/memcpy ×' +
      copyThreads +
      '  private memcpy ×' +
      copyThreads +
      ' GB/s  registered GB/s  registered/private memcpy ×' +
      copyThreads +
      (withTcp ? '  mooncake-tcp GB/s  shm/tcp' : '') +
      '  verified',
  );
  for (const r of rows) {
    const cols = [
      r.size.padEnd(8),
      String(r.memcpyGBps).padStart(11),
      String(r.memcpyThreadsGBps).padStart(14),
      String(r.shmGBps).padStart(18),
      `${r.shmVsMemcpy}x`.padStart(11),
      `${r.shmVsMemcpyThreads}x`.padStart(13),
      String(r.memcpyPrivateThreadsGBps).padStart(22),
      String(r.shmRegisteredGBps).padStart(16),
      `${r.shmRegisteredVsMemcpyThreads}x`.padStart(28),
    ];
    if (withTcp) cols.push(String(r.tcpGBps).padStart(18), `${r.shmVsTcp}x`.padStart(8));
    cols.push(r.verified ? '  yes' : '  NO');
    console.log(cols.join(' '));
  }
}
