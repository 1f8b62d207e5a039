// `te bench --wire mooncake`: te against Mooncake Transfer Engine peers, through the
// mooncake-wire plugin. A Mooncake target has no digest service, so --verify reads the
// written bytes back over the same wire and compares them in this process.
import {
  OP_READ,
  OP_WRITE,
  TransferError,
  allocateBatch,
  defaultRegistry,
  parseOptions,
  type TeConfig,
  type TransferBatch,
  type Transport,
  type TransportPeer,
  type SegmentDescriptor,
} from '@te/connector';
import type { BenchOptions, BenchResult } from './options.js';
import { benchResult, timedRun } from './timed-run.js';
import { fillRandom } from './whole-buffer.js';

export const WIRE_PLUGIN = 'mooncake-wire';

/** Makes `mooncake-wire` known to the engine's registry (once). */
export function registerWirePlugin(): void {
  const registry = defaultRegistry();
  // By package name, as the built-ins are: loaded only when used.
  if (!registry.names().includes(WIRE_PLUGIN)) registry.register(WIRE_PLUGIN, '@te/mooncake-wire');
}

/** What the plugin adds to the Transport interface for Mooncake peers (see @te/mooncake-wire). */
interface WireTransport extends Transport {
  openSegment(segment: string): Promise<{ descriptor: SegmentDescriptor; peer: TransportPeer }>;
}

/** The served config of `te bench --mode target --wire mooncake`: mooncake-wire, listening. */
export function wireTargetConfig(config: TeConfig): TeConfig {
  const own = config.transportOptions[WIRE_PLUGIN] ?? {};
  return {
    ...config,
    connector: WIRE_PLUGIN,
    transports: config.transports.filter((t) => t !== WIRE_PLUGIN),
    transportOptions: { ...config.transportOptions, [WIRE_PLUGIN]: { listen: true, ...own } },
  };
}

function batchFor(op: number, worker: number, o: BenchOptions, local: bigint, remote: bigint): TransferBatch {
  const batch = allocateBatch(o.batchSize);
  const base = BigInt(worker * o.batchSize * o.blockSize);
  for (let i = 0; i < o.batchSize; i++) {
    const off = base + BigInt(i * o.blockSize);
    batch.opcodes[i] = op;
    batch.localAddrs[i] = local + off;
    batch.remoteAddrs[i] = remote + off;
    batch.lengths[i] = BigInt(o.blockSize);
  }
  return batch;
}

/** Throws TRANSFER_FAILED naming the first byte where `got` differs from `expected`. */
export function checkSame(expected: Uint8Array, got: Uint8Array, what: string): void {
  if (expected.length !== got.length) throw new TransferError('TRANSFER_FAILED', `${what}: ${got.length} bytes compared with ${expected.length}`);
  for (let i = 0; i < expected.length; i++) {
    if (expected[i] !== got[i]) throw new TransferError('TRANSFER_FAILED', `${what}: byte ${i} is ${got[i]}, ${expected[i]} expected`);
  }
}

/** Measures a Mooncake target (segment `host:handshake-port`) as `runBench` measures a te target. */
export async function runMooncakeBench(o: BenchOptions): Promise<BenchResult> {
  registerWirePlugin();
  const plugin = await defaultRegistry().load(WIRE_PLUGIN);
  const options = parseOptions(plugin.options, o.transportOptions ?? o.config?.transportOptions[WIRE_PLUGIN] ?? {}, process.env, WIRE_PLUGIN);
  const transport = (await plugin.create(
    {
      segmentName: 'te-bench',
      epoch: 1n,
      bindAddress: o.bindAddress ?? o.config?.bindAddress ?? '127.0.0.1',
      connectTimeoutMs: o.config?.timeouts.connectMs ?? 5000,
      env: process.env,
      log: (level, message) => {
        if (level === 'warn' || level === 'error') console.error(`[${WIRE_PLUGIN}] ${message}`);
      },
    },
    options,
  )) as WireTransport;
  try {
    return await measure(transport, o);
  } finally {
    await transport.close();
  }
}

async function measure(t: WireTransport, o: BenchOptions): Promise<BenchResult> {
  const total = o.blockSize * o.batchSize * o.concurrency;
  const { descriptor, peer } = await t.openSegment(o.target);
  const remote = descriptor.buffers[0];
  if (!remote || remote.length < BigInt(total))
    throw new TransferError('INVALID_ARGUMENT', `Mooncake segment ${o.target}'s first buffer has ${remote?.length ?? 0} bytes, the run needs ${total}`);
  const local = new Uint8Array(total);
  const check = new Uint8Array(total);
  fillRandom(local);
  const l = await t.registerMemory({ buffer: local, length: BigInt(total), device: 'cpu', remoteAccess: false });
  const c = await t.registerMemory({ buffer: check, length: BigInt(total), device: 'cpu', remoteAccess: false });
  const timeoutMs = o.timeoutMs ?? 30_000;
  const all = (op: number, from: bigint) =>
    Promise.all(Array.from({ length: o.concurrency }, (_, w) => t.submit(peer, batchFor(op, w, o, from, remote.addr), { timeoutMs })));
  const readBackAndCompare = async (what: string): Promise<void> => {
    check.fill(0);
    await all(OP_READ, c.addr);
    checkSame(local, check, `${what} (written to ${o.target}, read back)`);
  };
  // Correctness before speed: the pattern written, read back and compared.
  await all(OP_WRITE, l.addr);
  await readBackAndCompare('pre-timing check');
  // With --verify the timed run must be what moves the compared bytes: new bytes to write, or
  // an emptied destination for the reads.
  if (o.verify && o.op === 'write') fillRandom(local);
  if (o.verify && o.op === 'read') check.fill(0);

  const batches = Array.from({ length: o.concurrency }, (_, w) =>
    batchFor(o.op === 'write' ? OP_WRITE : OP_READ, w, o, o.op === 'write' ? l.addr : c.addr, remote.addr),
  );
  const run = await timedRun(batches, (b) => t.submit(peer, b, { timeoutMs }), o);
  let verified = false;
  if (o.verify) {
    if (o.op === 'write') await readBackAndCompare('verification after the timed run');
    else {
      // The timed reads landed in `check`; the target still holds `local`'s pattern.
      checkSame(local, check, `verification after the timed run (read from ${o.target})`);
    }
    verified = true;
  }
  return benchResult(WIRE_PLUGIN, o, run, verified);
}
