#!/usr/bin/env node
// Same-host transfers: mooncake-shm (and mooncake-tcp over loopback, for context) writing
// from one process into another at 64 KiB, 1 MiB and 16 MiB, beside single-thread memcpy
// measured in the same run over buffers of the same size and access pattern (a ratio).
//
// Both sides rotate through a pool (64 MiB by default) so neither memcpy nor the transfer
// is measured out of a warm cache alone; requests of a case are issued in whole passes over
// the pool, and after each case the target's pool must hash exactly like the initiator's
// (every case is verified). At 64 KiB a batch carries 16 requests (1 MiB), larger sizes one
// request per batch; --inflight batches (4) are kept in flight by as many callers.
//
//   node bench/same-host.mjs [--seconds 1] [--pool-mib 64] [--inflight 4] [--no-tcp] [--json]
//   TE_BENCH_QUICK=1 node bench/same-host.mjs      smoke run (small pool, short cases)
import { fork } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { batchOf, createTransferEngine } from '@te/connector';
import { quick, QUICK } from './lib/quick.mjs';

const SIZES = [64 << 10, 1 << 20, 16 << 20];
const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '1' },
    'pool-mib': { type: 'string', default: '64' },
    inflight: { type: 'string', default: '4' },
    'no-tcp': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    target: { type: 'string' },
  },
});
quick(values, { seconds: '0.1', 'pool-mib': '32' });
const POOL = Number(values['pool-mib']) << 20;
const SECONDS = Number(values.seconds);
const INFLIGHT = Math.max(1, Number(values.inflight));

const sha = (b) => createHash('sha256').update(b).digest('hex');

// ---- target process: one engine, one registered pool, answers the parent over IPC ----
if (values.target) {
  const engine = await createTransferEngine(JSON.parse(values.target));
  const pool = new Uint8Array(POOL);
  const handle = await engine.registerMemory(pool);
  process.on('message', async (m) => {
    if (m.cmd === 'zero') pool.fill(0);
    if (m.cmd === 'hash') return process.send({ id: m.id, hash: sha(pool) });
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
  const child = fork(new URL(import.meta.url), ['--target', JSON.stringify(config), '--pool-mib', String(POOL >> 20)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let next = 1;
  const waiting = new Map();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the target process did not start within 20 s')), 20_000);
    child.once('exit', (code) => reject(new Error(`the target process exited with ${code}`)));
    child.on('message', (m) => {
      if (m.ready) {
        clearTimeout(timer);
        const ask = (cmd) => new Promise((res) => { const id = next++; waiting.set(id, res); child.send({ id, cmd }); });
        resolve({ segment: m.segment, addr: BigInt(m.addr), ask, close: () => ask('close') });
      } else waiting.get(m.id)?.(m), waiting.delete(m.id);
    });
  });
}

/** Single-thread memcpy (Buffer#copy is memmove) over two pools, the same sizes and rotation. */
function memcpyGBps(size) {
  const src = Buffer.alloc(POOL, 1);
  const dst = Buffer.alloc(POOL);
  const deadline = performance.now() + SECONDS * 1000;
  const started = performance.now();
  let bytes = 0;
  do {
    for (let off = 0; off + size <= POOL; off += size) src.copy(dst, off, off, off + size);
    bytes += POOL - (POOL % size);
  } while (performance.now() < deadline);
  const gbps = bytes / ((performance.now() - started) / 1000) / 1e9;
  if (!dst.equals(src)) throw new Error('memcpy baseline: the copy does not match');
  return gbps;
}

/** Writes the initiator's pool into the target's in whole passes for about SECONDS; verified. */
async function transferGBps(engine, target, local, data, size) {
  await target.ask('zero');
  const perBatch = size < 1 << 20 ? Math.max(1, (1 << 20) / size) : 1;
  const batches = [];
  for (let off = 0; off + size * perBatch <= POOL; off += size * perBatch) {
    batches.push(batchOf(Array.from({ length: perBatch }, (_, i) => ({ op: 'write', local: local + BigInt(off + i * size), remote: target.addr + BigInt(off + i * size), length: size }))));
  }
  const pass = async () => {
    // Several callers: the next batch is queued while the target copies the current one.
    let i = 0;
    const lane = async () => {
      while (i < batches.length) await engine.transfer(target.segment, batches[i++]);
    };
    await Promise.all(Array.from({ length: INFLIGHT }, lane));
  };
  await pass(); // warm-up: connections, first faults
  const deadline = performance.now() + SECONDS * 1000;
  const started = performance.now();
  let bytes = 0;
  do {
    await pass();
    bytes += batches.length * perBatch * size;
  } while (performance.now() < deadline);
  const gbps = bytes / ((performance.now() - started) / 1000) / 1e9;
  const { hash } = await target.ask('hash');
  if (hash !== sha(data)) throw new Error(`${size} B case: the target's pool does not match what was written`);
  return gbps;
}

async function run(connector, extra = {}) {
  const config = { connector, ...extra, timeouts: { transferMs: 60_000 } };
  const target = await startTarget(config);
  const engine = await createTransferEngine(config);
  const data = new Uint8Array(POOL);
  for (let i = 0; i < POOL; i += 4096) data[i] = (i >> 12) & 255;
  const { addr } = await engine.registerMemory(data);
  const out = {};
  try {
    for (const size of SIZES) if (size <= POOL) out[size] = await transferGBps(engine, target, addr, data, size);
  } finally {
    await engine.close();
    await target.close();
  }
  return out;
}

async function main() {
  const memcpy = {};
  for (const size of SIZES) memcpy[size] = memcpyGBps(size);
  const shm = await run('mooncake-shm');
  const tcp = values['no-tcp'] ? undefined : await run('mooncake-tcp');
  const label = (s) => (s >= 1 << 20 ? `${s >> 20} MiB` : `${s >> 10} KiB`);
  const rows = SIZES.filter((s) => s <= POOL).map((s) => ({
    size: label(s),
    memcpyGBps: +memcpy[s].toFixed(2),
    shmGBps: +shm[s].toFixed(2),
    shmVsMemcpy: +(shm[s] / memcpy[s]).toFixed(2),
    ...(tcp ? { tcpGBps: +tcp[s].toFixed(2), shmVsTcp: +(shm[s] / tcp[s]).toFixed(2) } : {}),
    verified: true,
  }));
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? '?'}`;
  if (values.json) {
    console.log(JSON.stringify({ machine, poolMiB: POOL >> 20, seconds: SECONDS, inflight: INFLIGHT, quick: QUICK, rows }));
    return;
  }
  console.log(`same-host writes, ${machine}; pool ${POOL >> 20} MiB per side, ${INFLIGHT} batches in flight, ~${SECONDS} s per case${QUICK ? ' (TE_BENCH_QUICK: smoke run, figures not meaningful)' : ''}`);
  console.log('size     memcpy GB/s  mooncake-shm GB/s  shm/memcpy' + (tcp ? '  mooncake-tcp GB/s  shm/tcp' : '') + '  verified');
  for (const r of rows) {
    const cols = [r.size.padEnd(8), String(r.memcpyGBps).padStart(11), String(r.shmGBps).padStart(18), `${r.shmVsMemcpy}x`.padStart(11)];
    if (tcp) cols.push(String(r.tcpGBps).padStart(18), `${r.shmVsTcp}x`.padStart(8));
    cols.push('  yes');
    console.log(cols.join(' '));
  }
}
