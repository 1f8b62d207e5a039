import { totalmem } from 'node:os';
import pc from 'picocolors';
import { commandConfig } from '../config.js';
import { pdBenchMemoryBytes, runPdBench, type PdBenchOptions, type PdBenchResult } from '../bench/pd/run.js';
import { UsageError, positiveInt } from '../usage-error.js';

export interface BenchPdCliOptions {
  connector?: string;
  modulePath?: string;
  tokens: string;
  layers: string;
  rooms: string;
  checksums: 'both' | 'on' | 'off';
  corrupt?: boolean;
  json?: boolean;
}

const gb = (x: number): string => (x / 1e9).toFixed(2);
const gib = (x: number): string => (x / 2 ** 30).toFixed(1);

function print(r: PdBenchResult, rooms: number): void {
  console.log(
    `te bench pd: KV of ${r.tokens} tokens × ${r.layers} layers (${(r.bytesPerRoom / 2 ** 20).toFixed(0)} MiB per room; pages of 64 tokens, 8 KV heads × 128 dim bf16) from a prefill process to a decode process over ${r.connector}, ${rooms} timed rooms per mode after a warm-up room`,
  );
  for (const m of r.modes)
    console.log(
      `  checksums ${m.checksums.padEnd(3)}: ${gb(m.bytesPerSecond)} GB/s (rooms ${m.roomBytesPerSecond.map(gb).join(', ')}), CPU of both processes ${m.cpuMsPerRoom.toFixed(0)} ms per room`,
    );
  if (r.checksumRatio !== null)
    console.log(
      `  with / without KV checksums: ${r.checksumRatio.toFixed(2)} (median of ${r.checksumRatios.length} alternating room pairs: ${r.checksumRatios.map((x) => x.toFixed(2)).join(', ')}); by CPU ${r.checksumCpuRatio!.toFixed(2)}`,
    );
  for (const f of r.failures) console.log(pc.red(`  ${f}`));
  console.log(`rooms verified: ${r.roomsVerified} of ${r.rooms}`);
}

/** `te bench pd`: PD KV throughput through @te/disagg, KV checksums off and on. */
export async function benchPdCommand(o: BenchPdCliOptions): Promise<void> {
  const rooms = positiveInt('--rooms', o.rooms, 100);
  const tokens = positiveInt('--tokens', o.tokens, 1 << 20);
  const layers = positiveInt('--layers', o.layers, 1024);
  const modes: PdBenchOptions['modes'] = o.checksums === 'both' ? ['off', 'on'] : [o.checksums];
  // Refused up front, before two processes per mode start and fail (or swap) allocating it.
  const memory = pdBenchMemoryBytes({ tokens, layers, modes });
  if (memory > 0.75 * totalmem())
    throw new UsageError(
      `te bench pd would hold ${gib(memory)} GiB of KV in its processes (${modes.length} mode(s) × the prefill's pages and the decode's), more than three quarters of this machine's ${gib(totalmem())} GiB; give fewer --tokens or --layers, or --checksums on or off`,
    );
  const config = await commandConfig({ ...(o.connector ? { plugin: o.connector } : {}), ...(o.modulePath ? { modulePath: o.modulePath } : {}) });
  const r = await runPdBench({
    connector: config.connector,
    ...(config.modulePath ? { modulePath: config.modulePath } : {}),
    tokens,
    layers,
    rooms,
    modes,
    ...(o.corrupt ? { corrupt: true } : {}),
  });
  print(r, rooms);
  if (o.json) console.log(JSON.stringify(r));
  if (!r.verified) process.exitCode = 1;
}
