/**
 * GPU test and benchmark of mooncake-intra-nvlink (CUDA IPC), mooncake-nvlink (cuMem VMM
 * with posix-fd handles) and mooncake-tcp (device memory staged through pinned host buffers
 * over loopback TCP, 4 KiB … 256 MiB): two processes on one GPU. For each plugin the parent registers a
 * source buffer, a child process registers a target buffer and publishes its descriptor;
 * the parent writes and reads 4 KiB … 1 GiB, every transfer verified by copying the device
 * memory back to the host and comparing SHA-256 digests on both sides; a write past the
 * peer's buffer must be refused and change nothing. Then device-to-device bandwidth is
 * measured against the same-process cudaMemcpy baseline (GB/s and ratio).
 *
 * Bundled by test/gpu/prepare.sh into test/gpu/build/harness.mjs (runs with plain node, no
 * node_modules), started by test/gpu/run.sh. Results: $OUT/gpu-results.json (+ logs).
 */
import { fork } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { batchOf, NATIVE_STATUS, parseOptions, type SegmentDescriptor, type Transport, type TransportPeer } from '@te/connector';
import intraPlugin, { deviceMemory as intraMemory } from '@te/mooncake-intra-nvlink';
import nvlinkPlugin, { allocateFabricMemory, deviceMemory as nvlinkMemory, freeFabricMemory } from '@te/mooncake-nvlink';
import tcpPlugin, { deviceMemory as tcpDeviceMemory } from '@te/mooncake-tcp';

const here = dirname(fileURLToPath(import.meta.url));
const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;
const MAX = Number(process.env.TE_GPU_MAX_BYTES ?? GiB);
const SIZES = [4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB, GiB].filter((s) => s <= MAX);
/** mooncake-tcp moves device memory through pinned host buffers over TCP: 4 KiB … 256 MiB. */
const TCP_MAX = 256 * MiB;
/** Batches in flight for the second bandwidth figure. */
const IN_FLIGHT = 8;
const sizesOf = (plugin: PluginName) => (plugin === 'mooncake-tcp' ? SIZES.filter((s) => s <= TCP_MAX) : SIZES);
const regionOf = (plugin: PluginName) => Math.max(...sizesOf(plugin), 10_000 * 256) + 2 * MiB; // room for the out-of-bounds probe and misaligned offsets

type PluginName = 'mooncake-intra-nvlink' | 'mooncake-nvlink' | 'mooncake-tcp';
const PLUGINS: Record<PluginName, typeof intraPlugin | typeof nvlinkPlugin | typeof tcpPlugin> = {
  'mooncake-intra-nvlink': intraPlugin,
  'mooncake-nvlink': nvlinkPlugin,
  'mooncake-tcp': tcpPlugin,
};
const OPTIONS: Record<PluginName, Record<string, unknown>> = { 'mooncake-intra-nvlink': {}, 'mooncake-nvlink': { handleType: 'posix-fd' }, 'mooncake-tcp': {} };

/**
 * mooncake-tcp's own device helpers (its addon carries its own static cudart; cudaMalloc
 * memory lives in the device's primary context, which every runtime in the process shares).
 * The same-process baseline copy comes from intra-nvlink's helpers.
 */
const tcpMemory: typeof intraMemory = {
  alloc: (bytes, device) => tcpDeviceMemory.alloc(bytes, device),
  free: (addr, device) => tcpDeviceMemory.free(addr, device),
  write: (addr, data, device) => tcpDeviceMemory.write(addr, data, device),
  read: (addr, length, device, into) => {
    const out = tcpDeviceMemory.read(addr, length, device);
    if (!into) return out;
    into.set(out);
    return into;
  },
  fill: (addr, value, bytes, device) => tcpDeviceMemory.fill(addr, value & 0xff, bytes, device),
  baselineCopy: (dst, src, bytes, iterations, device) => intraMemory.baselineCopy(dst, src, bytes, iterations, device),
};

/** Host<->device helpers from the plugin's own addon (each addon carries its own static cudart). */
let deviceMemory = intraMemory;
const useMemoryOf = (plugin: PluginName) => (deviceMemory = plugin === 'mooncake-nvlink' ? nvlinkMemory : plugin === 'mooncake-tcp' ? tcpMemory : intraMemory);

const log = (...a: unknown[]) => console.log(`[${process.argv.includes('--child') ? 'child ' : 'parent'} ${process.pid}]`, ...a);

/** Deterministic bytes, offset-dependent (a shifted copy never matches). */
function pattern(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  const words = new Uint32Array(out.buffer, 0, length >>> 2);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = (x ^ i) >>> 0;
  }
  for (let i = words.length * 4; i < length; i++) out[i] = (i * 131 + seed) & 0xff;
  return out;
}
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Device memory of a plugin's kind: cudaMalloc for IPC, the fabric allocator (posix-fd) for VMM. */
function allocFor(plugin: PluginName, bytes: number): { addr: bigint; size: bigint; free(): void } {
  if (plugin !== 'mooncake-nvlink') {
    const addr = deviceMemory.alloc(bytes);
    return { addr, size: BigInt(bytes), free: () => deviceMemory.free(addr) };
  }
  const a = allocateFabricMemory(bytes, { handleType: 'posix-fd' });
  return { addr: a.addr, size: a.size, free: () => freeFabricMemory(a) };
}

async function createTransport(plugin: PluginName, name: string): Promise<{ transport: Transport; epoch: bigint }> {
  const p = PLUGINS[plugin];
  const epoch = randomBytes(8).readBigUInt64LE() | 1n;
  const transport = await p.create(
    { segmentName: name, epoch, bindAddress: '127.0.0.1', connectTimeoutMs: 5000, env: process.env, log: (l, m) => log(`${l}: ${m}`) },
    parseOptions(p.options, OPTIONS[plugin], process.env, p.name) as never,
  );
  return { transport, epoch };
}

// ---------------------------------------------------------------- child (the target)
async function child(plugin: PluginName): Promise<void> {
  useMemoryOf(plugin);
  const name = `gpu-target-${process.pid}`;
  const { transport, epoch } = await createTransport(plugin, name);
  const mem = allocFor(plugin, regionOf(plugin));
  const reg = await transport.registerMemory({ addr: mem.addr, length: mem.size, device: 'cuda:0', remoteAccess: true });
  const descriptor: SegmentDescriptor = {
    version: 1,
    name,
    epoch,
    hostname: hostname(),
    pid: process.pid,
    transports: { [plugin]: { class: PLUGINS[plugin].capabilities.class, memoryKinds: ['cuda'], endpoint: transport.endpoint() } },
    buffers: [{ addr: reg.addr, length: reg.length, device: 'cuda:0', attrs: { [plugin]: reg.attrs ?? null } }],
  };
  process.on('message', async (m: { cmd: string; offset?: number; length?: number; seed?: number; value?: number }) => {
    try {
      const at = mem.addr + BigInt(m.offset ?? 0);
      switch (m.cmd) {
        case 'sha':
          process.send!({ ok: true, value: sha(deviceMemory.read(at, m.length!)) });
          break;
        case 'fill':
          deviceMemory.write(at, pattern(m.length!, m.seed!));
          process.send!({ ok: true });
          break;
        case 'memset':
          deviceMemory.fill(at, m.value!, m.length!);
          process.send!({ ok: true });
          break;
        case 'exit':
          await transport.close();
          mem.free();
          process.send!({ ok: true }, () => process.exit(0));
          break;
      }
    } catch (e) {
      process.send!({ ok: false, error: `${(e as { code?: string }).code ?? 'Error'}: ${(e as Error).message}` });
    }
  });
  process.send!({ ok: true, descriptor });
}

// ---------------------------------------------------------------- parent
/** The target's answer: `ok` with the command's value (`sha`: the digest) or, at start-up, its descriptor; else the error. */
interface Answer {
  ok: boolean;
  error?: string;
  value?: string;
  descriptor?: SegmentDescriptor;
}

interface Child {
  /** Resolves with the command's value: the hex digest for `sha`, nothing for the others. */
  call(cmd: string, args?: Record<string, unknown>): Promise<string | undefined>;
  descriptor: SegmentDescriptor;
}

/** Longest wait for one answer of the target process (1 GiB fills and digests take seconds). */
const CALL_DEADLINE_MS = 120_000;

function startChild(plugin: PluginName): Promise<Child> {
  const c = fork(fileURLToPath(import.meta.url), ['--child', plugin], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let waiter: { resolve(v: Answer): void; reject(e: Error): void } | undefined;
  c.on('message', (m: Answer) => {
    const w = waiter;
    waiter = undefined;
    if (!w) return;
    if (m.ok) w.resolve(m);
    else w.reject(new Error(m.error));
  });
  c.on('exit', (code, signal) => waiter?.reject(new Error(`target process exited (${code ?? signal})`)));
  // Every answer has a deadline: a target stuck in a driver call fails its check and the run
  // goes on, instead of hanging until the outer timeout (if one was given).
  const next = (what: string) =>
    new Promise<Answer>((resolve, reject) => {
      const timer = setTimeout(() => {
        waiter = undefined;
        c.kill('SIGKILL');
        reject(new Error(`target process: no answer to ${what} within ${CALL_DEADLINE_MS / 1000} s (killed)`));
      }, CALL_DEADLINE_MS);
      const settle =
        <T>(f: (v: T) => void) =>
        (v: T) => {
          clearTimeout(timer);
          f(v);
        };
      waiter = { resolve: settle(resolve), reject: settle(reject) };
    });
  const call = (cmd: string, args: Record<string, unknown> = {}) => {
    const p = next(`"${cmd}"`);
    c.send({ cmd, ...args });
    return p.then((m) => m.value);
  };
  return next('start-up').then((m) => ({ call, descriptor: m.descriptor as SegmentDescriptor }));
}

interface Row {
  plugin: PluginName;
  bytes: number;
  iterations: number;
  transportGBps: number;
  /** With IN_FLIGHT batches in flight (sizes up to 16 MiB; NaN above). */
  concurrentGBps: number;
  baselineGBps: number;
  ratio: number;
  p50us: number;
}

function check(cond: unknown, what: string): asserts cond {
  if (!cond) throw new Error(`CHECK FAILED: ${what}`);
}

/** One plugin's run: its transport and peer, the two local regions and the target's, and where results go. */
interface PluginRun {
  plugin: PluginName;
  transport: Transport;
  peer: TransportPeer;
  target: Child;
  src: { addr: bigint };
  dst: { addr: bigint };
  remote: SegmentDescriptor['buffers'][number];
  results: { checks: string[]; rows: Row[] };
  submit(op: 'write' | 'read', local: bigint, remoteAddr: bigint, length: number): ReturnType<Transport['submit']>;
  ok(what: string): void;
}

async function runPlugin(plugin: PluginName, results: { checks: string[]; rows: Row[] }): Promise<void> {
  useMemoryOf(plugin);
  const kind = {
    'mooncake-intra-nvlink': 'CUDA IPC',
    'mooncake-nvlink': 'cuMem VMM, posix-fd handles',
    'mooncake-tcp': 'loopback TCP, device memory staged through pinned host buffers',
  }[plugin];
  log(`=== ${plugin} (${kind}) ===`);
  const REGION = regionOf(plugin);
  const target = await startChild(plugin);
  const { transport } = await createTransport(plugin, `gpu-initiator-${process.pid}`);
  const src = allocFor(plugin, REGION);
  const dst = allocFor(plugin, REGION);
  try {
    const rs = await transport.registerMemory({ addr: src.addr, length: src.size, device: 'cuda:0', remoteAccess: true });
    const rd = await transport.registerMemory({ addr: dst.addr, length: dst.size, device: 'cuda:0', remoteAccess: true });
    const remote = target.descriptor.buffers[0]!;
    log(
      `local src 0x${rs.addr.toString(16)} dst 0x${rd.addr.toString(16)}; remote 0x${remote.addr.toString(16)} (+${remote.length}) attrs ${JSON.stringify(remote.attrs[plugin], (_k, v) => (typeof v === 'bigint' ? `${v}n` : v instanceof Uint8Array ? `<${v.length} bytes>` : v))}`,
    );
    const peer: TransportPeer = await transport.openPeer(target.descriptor);
    const run: PluginRun = {
      plugin,
      transport,
      peer,
      target,
      src,
      dst,
      remote,
      results,
      submit: (op, local, remoteAddr, length) => transport.submit(peer, batchOf([{ op, local, remote: remoteAddr, length }]), { timeoutMs: 60_000 }),
      ok: (what) => {
        results.checks.push(`${plugin}: ${what}`);
        log(`ok  ${what}`);
      },
    };
    await checkSizes(run);
    await checkBounds(run);
    await checkScatteredBatch(run);
    for (const size of sizesOf(plugin)) benchRow(run, size, await benchSize(run, size));
    await transport.closePeer(peer);
    await transport.unregisterMemory(rs.addr);
    await transport.unregisterMemory(rd.addr);
  } finally {
    await transport.close();
    await target.call('exit').catch(() => undefined);
    src.free();
    dst.free();
  }
}

/** Correctness: every size both ways, verified on the host from device memory. */
async function checkSizes({ plugin, target, src, dst, remote, submit, ok }: PluginRun): Promise<void> {
  let seed = 1;
  for (const size of sizesOf(plugin)) {
    const off = size < MiB ? 4096 + 256 : 0; // unaligned offsets for the small ones
    const data = pattern(size, seed++);
    deviceMemory.write(src.addr, data);
    await target.call('memset', { offset: 0, length: size + off + 4096, value: 0 });
    const w = await submit('write', src.addr, remote.addr + BigInt(off), size);
    check(w.statuses[0] === 0 && w.bytes === BigInt(size), `write ${size}: statuses ${Array.from(w.statuses)}`);
    const want = sha(data);
    check((await target.call('sha', { offset: off, length: size })) === want, `write of ${size} B landed byte for byte`);
    check((await target.call('sha', { offset: off + size, length: 4096 })) === sha(new Uint8Array(4096)), `bytes after the ${size} B write untouched`);
    const back = pattern(size, seed++);
    await target.call('fill', { offset: off, length: size, seed: seed - 1 });
    deviceMemory.fill(dst.addr, 0, size);
    const r = await submit('read', dst.addr, remote.addr + BigInt(off), size);
    check(r.statuses[0] === 0, `read ${size}: statuses ${Array.from(r.statuses)}`);
    check(sha(deviceMemory.read(dst.addr, size)) === sha(back), `read of ${size} B arrived byte for byte`);
    ok(`write+read ${fmt(size)} verified`);
  }
}

/** Bounds: a write reaching past the peer's published buffer is refused and changes nothing. */
async function checkBounds({ transport, peer, target, src, remote, ok }: PluginRun): Promise<void> {
  await target.call('memset', { offset: 0, length: 8192, value: 0x5a });
  const before = await target.call('sha', { offset: 0, length: 8192 });
  const bad = await transport.submit(peer, batchOf([{ op: 'write', local: src.addr, remote: remote.addr + remote.length - 2048n, length: 4096 }]), {
    timeoutMs: 10_000,
  });
  check(bad.statuses[0] === NATIVE_STATUS.ADDRESS_OUT_OF_RANGE, `out-of-range write refused (status ${bad.statuses[0]})`);
  const outside = await transport.submit(peer, batchOf([{ op: 'write', local: src.addr, remote: remote.addr + remote.length + 4096n, length: 16 }]), {
    timeoutMs: 10_000,
  });
  check(outside.statuses[0] === NATIVE_STATUS.MEMORY_NOT_REGISTERED, `write outside every published buffer refused (status ${outside.statuses[0]})`);
  check((await target.call('sha', { offset: 0, length: 8192 })) === before, 'target unchanged by refused writes');
  ok('bounds enforced against the published descriptor');
}

/** Many requests in one batch, scattered; and the peer's allocation imported once. */
async function checkScatteredBatch({ plugin, transport, peer, target, src, remote, ok }: PluginRun): Promise<void> {
  const n = 10_000;
  const item = 256;
  const many = pattern(n * item, 77);
  deviceMemory.write(src.addr, many);
  const batch = {
    opcodes: new Uint8Array(n).fill(1),
    localAddrs: new BigUint64Array(n),
    remoteAddrs: new BigUint64Array(n),
    lengths: new BigUint64Array(n).fill(BigInt(item)),
  };
  for (let i = 0; i < n; i++) {
    batch.localAddrs[i] = src.addr + BigInt(i * item);
    batch.remoteAddrs[i] = remote.addr + BigInt((n - 1 - i) * item);
  }
  const mb = await transport.submit(peer, batch, { timeoutMs: 60_000 });
  check(
    mb.statuses.every((s) => s === 0),
    'scattered batch all OK',
  );
  const expect = new Uint8Array(n * item);
  for (let i = 0; i < n; i++) expect.set(many.subarray(i * item, (i + 1) * item), (n - 1 - i) * item);
  check((await target.call('sha', { offset: 0, length: n * item })) === sha(expect), 'scattered batch landed in reverse order');
  ok(`${n} scattered requests in one batch verified`);
  if (plugin !== 'mooncake-tcp') {
    const imports = (transport as unknown as { importsOpen(): number }).importsOpen();
    check(imports === 1, `one import per peer allocation (got ${imports})`);
    ok('peer allocation opened once and cached');
  }
}

/** Bandwidth of one size: transport (wall clock per batch, one in flight) vs same-process cudaMemcpy (CUDA events). */
async function benchSize({ src, dst, remote, submit }: PluginRun, size: number) {
  const iterations = Math.max(5, Math.min(200, Math.ceil((4 * GiB) / size)));
  for (let i = 0; i < 3; i++) await submit('write', src.addr, remote.addr, size);
  const times: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < iterations; i++) {
    const s = performance.now();
    await submit('write', src.addr, remote.addr, size);
    times.push(performance.now() - s);
  }
  const total = (performance.now() - t0) / 1000;
  let baseline = Number.NaN;
  try {
    baseline = deviceMemory.baselineCopy(dst.addr, src.addr, size, iterations);
  } catch (e) {
    log(`baseline copy failed (reported as NaN): ${(e as Error).message}`);
  }
  // The same copies with several batches in flight (as a PD transfer keeps them), so the
  // fixed cost per batch overlaps: sizes up to 16 MiB, where that cost dominates.
  let concurrentGBps = Number.NaN;
  if (size <= 16 * MiB) {
    const perWorker = Math.max(2, Math.ceil(iterations / IN_FLIGHT));
    const c0 = performance.now();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        for (let i = 0; i < perWorker; i++) await submit('write', src.addr, remote.addr, size);
      }),
    );
    concurrentGBps = (size * perWorker * IN_FLIGHT) / ((performance.now() - c0) / 1000) / 1e9;
  }
  times.sort((a, b) => a - b);
  return { iterations, total, baseline, concurrentGBps, p50ms: times[times.length >> 1]! };
}

function benchRow({ plugin, results }: PluginRun, size: number, m: Awaited<ReturnType<typeof benchSize>>): void {
  const row: Row = {
    plugin,
    bytes: size,
    iterations: m.iterations,
    transportGBps: (size * m.iterations) / m.total / 1e9,
    concurrentGBps: m.concurrentGBps,
    baselineGBps: size / m.baseline / 1e9,
    ratio: 0,
    p50us: m.p50ms * 1000,
  };
  row.ratio = row.transportGBps / row.baselineGBps;
  results.rows.push(row);
  log(
    `bench ${fmt(size).padStart(8)}  ${row.transportGBps.toFixed(2).padStart(8)} GB/s  (${IN_FLIGHT} in flight ${row.concurrentGBps.toFixed(2)})  baseline ${row.baselineGBps.toFixed(2).padStart(8)} GB/s  ratio ${row.ratio.toFixed(3)}  p50 ${row.p50us.toFixed(1)} us  (${m.iterations} iterations)`,
  );
}

function fmt(bytes: number): string {
  return bytes >= GiB ? `${bytes / GiB} GiB` : bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / KiB} KiB`;
}

async function main(): Promise<void> {
  const out = process.env.OUT || join(here, 'out');
  mkdirSync(out, { recursive: true });
  const probes = { intra: await intraPlugin.probe!(), nvlink: await nvlinkPlugin.probe!(), tcp: await tcpPlugin.probe!() };
  log(
    'probe mooncake-intra-nvlink:',
    JSON.stringify(probes.intra, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)),
  );
  log(
    'probe mooncake-nvlink:',
    JSON.stringify(probes.nvlink, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)),
  );
  log(
    'probe mooncake-tcp:',
    JSON.stringify(probes.tcp, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)),
  );
  const results = {
    started: new Date().toISOString(),
    host: hostname(),
    sizes: SIZES,
    probes,
    checks: [] as string[],
    rows: [] as Row[],
    failures: [] as string[],
  };
  if (!probes.intra.available) {
    results.failures.push(`no usable GPU: ${probes.intra.reason}`);
    writeFileSync(
      join(out, 'gpu-results.json'),
      JSON.stringify(results, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2),
    );
    log(`SKIP: no usable GPU: ${probes.intra.reason}`);
    process.exit(2);
  }
  const only = process.env.TE_GPU_PLUGINS?.split(',').filter(Boolean) as PluginName[] | undefined;
  for (const plugin of only ?? (Object.keys(PLUGINS) as PluginName[])) {
    try {
      await runPlugin(plugin, results);
    } catch (e) {
      const msg = `${plugin}: ${(e as { code?: string }).code ?? ''} ${(e as Error).stack ?? e}`;
      results.failures.push(msg);
      log(`FAILED ${msg}`);
    }
  }
  writeFileSync(
    join(out, 'gpu-results.json'),
    JSON.stringify(results, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2),
  );
  console.log(`\nplugin                   size      transport GB/s  ${IN_FLIGHT} in flight GB/s  baseline GB/s  ratio   p50 latency`);
  for (const r of results.rows) {
    console.log(
      `${r.plugin.padEnd(24)} ${fmt(r.bytes).padStart(8)}  ${r.transportGBps.toFixed(2).padStart(14)}  ${(Number.isNaN(r.concurrentGBps) ? '-' : r.concurrentGBps.toFixed(2)).padStart(17)}  ${r.baselineGBps.toFixed(2).padStart(13)}  ${r.ratio.toFixed(3).padStart(5)}  ${r.p50us.toFixed(1).padStart(8)} us`,
    );
  }
  console.log(`\n${results.checks.length} checks passed, ${results.failures.length} failures; results in ${join(out, 'gpu-results.json')}`);
  process.exit(results.failures.length ? 1 : 0);
}

if (process.argv.includes('--child')) {
  child(process.argv[process.argv.indexOf('--child') + 1] as PluginName).catch((e) => {
    console.error(`[child] ${(e as Error).stack ?? e}`);
    process.send?.({ ok: false, error: `${(e as { code?: string }).code ?? 'Error'}: ${(e as Error).message}` });
    process.exit(1);
  });
} else {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
