import { resolve as resolveFromCwd } from 'node:path';
import pc from 'picocolors';
import { benchBytes, runBench, type BenchOptions, type BenchResult } from '../bench/initiator.js';
import { spawnBenchTarget } from '../bench/loopback.js';
import { WIRE_PLUGIN, registerWirePlugin, runMooncakeBench, wireTargetConfig } from '../bench/mooncake.js';
import { startBenchTarget } from '../bench/target.js';
import { commandConfig, type CommandFlags } from '../config.js';
import { SWEEP_SIZES, runSweep } from '../sweep/run-sweep.js';
import { bytes, count, gbps, parseSize, table } from '../format.js';
import { UsageError, positiveInt } from '../usage-error.js';

export interface BenchCliOptions {
  mode: string;
  loopback?: boolean;
  target?: string;
  plugin?: string;
  modulePath?: string;
  /** Target started by --loopback: stop when the parent's stdin pipe closes. */
  exitWithParent?: boolean;
  /** Block sizes 4 KiB … 64 MiB for each plugin (`--plugin a,b`), with a chart to `--out`. */
  sweep?: boolean;
  sizes?: string;
  out?: string;
  op: string;
  blockSize: string;
  batchSize: string;
  concurrency: string;
  duration: string;
  verify?: boolean;
  json?: boolean;
  bind?: string;
  port: string;
  bytes?: string;
  timeout: string;
  option: string[];
  /** `mooncake`: speak Mooncake Transfer Engine's own protocol (mooncake-wire) instead of te's. */
  wire?: string;
}

/** File paths are made absolute so the spawned target resolves them the same way; package names stay. */
function resolvePath(modulePath: string): string {
  return modulePath.startsWith('.') ? resolveFromCwd(modulePath) : modulePath;
}

/** `--option ioThreads=2` pairs, values parsed as JSON when they look like JSON. */
export function parseTransportOptions(pairs: string[]): Record<string, unknown> | undefined {
  if (pairs.length === 0) return undefined;
  const out: Record<string, unknown> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new UsageError(`Expected --option key=value, got ${JSON.stringify(pair)}`);
    const raw = pair.slice(eq + 1);
    let value: unknown = raw;
    try {
      value = JSON.parse(raw);
    } catch {
      // A plain string.
    }
    out[pair.slice(0, eq)] = value;
  }
  return out;
}

export function benchOptionsFrom(cli: BenchCliOptions & { plugin: string }, target: string): BenchOptions {
  if (cli.op !== 'write' && cli.op !== 'read') throw new UsageError(`Expected --op to be write or read, got ${JSON.stringify(cli.op)}`);
  let blockSize: number;
  try {
    blockSize = parseSize(cli.blockSize);
  } catch (e) {
    throw new UsageError(`--block-size: ${(e as Error).message}`);
  }
  if (blockSize < 1 || blockSize > 1 << 30) throw new UsageError(`Expected --block-size from 1 B to 1 GiB, got ${cli.blockSize}`);
  const duration = Number(cli.duration);
  if (!(duration > 0 && duration <= 3600)) throw new UsageError(`Expected --duration to be seconds in (0, 3600], got ${JSON.stringify(cli.duration)}`);
  const o: BenchOptions = {
    plugin: cli.plugin,
    target,
    op: cli.op,
    blockSize,
    batchSize: positiveInt('--batch-size', cli.batchSize, 1_000_000),
    concurrency: positiveInt('--concurrency', cli.concurrency, 1024),
    durationS: duration,
    verify: cli.verify === true,
    timeoutMs: positiveInt('--timeout', cli.timeout, 3_600_000),
  };
  if (benchBytes(o) > 4 * 2 ** 30) throw new UsageError(`block-size × batch-size × concurrency is ${bytes(benchBytes(o))}; keep it at or under 4 GiB`);
  if (cli.bind) o.bindAddress = cli.bind;
  if (cli.modulePath) o.modulePath = resolvePath(cli.modulePath);
  const transportOptions = parseTransportOptions(cli.option);
  if (transportOptions) o.transportOptions = transportOptions;
  return o;
}

export function printBenchResult(r: BenchResult): void {
  console.log(
    table([
      ['plugin', 'op', 'block', 'batch', 'conc', 'throughput', 'requests/s', 'p50 (batch)', 'p99 (batch)', 'verified'],
      [
        r.plugin,
        r.op,
        bytes(r.blockSize),
        String(r.batchSize),
        String(r.concurrency),
        gbps(r.bytesPerSecond),
        count(r.requestsPerSecond),
        `${r.p50Us.toFixed(0)} µs`,
        `${r.p99Us.toFixed(0)} µs`,
        r.verified ? pc.green('yes') : 'no',
      ],
    ]),
  );
}

function flagsOf(cli: BenchCliOptions, port?: number): CommandFlags {
  const transportOptions = parseTransportOptions(cli.option);
  return {
    ...(cli.plugin ? { plugin: cli.plugin } : {}),
    ...(cli.modulePath ? { modulePath: cli.modulePath } : {}),
    ...(cli.bind ? { bindAddress: cli.bind } : {}),
    ...(port !== undefined ? { port } : {}),
    ...(transportOptions ? { transportOptions } : {}),
  };
}

async function runTarget(cli: BenchCliOptions): Promise<void> {
  const size = cli.bytes ? parseSize(cli.bytes) : 64 * 2 ** 20;
  const port = Number(cli.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`Expected --port to be a port number, got ${JSON.stringify(cli.port)}`);
  const mooncake = cli.wire === 'mooncake';
  if (mooncake) registerWirePlugin();
  let config = await commandConfig(flagsOf(cli, port));
  if (mooncake) config = wireTargetConfig(config);
  const target = await startBenchTarget({ plugin: config.connector, bytes: size, config });
  // With --wire mooncake the segment to give a Mooncake initiator is the Mooncake one
  // (host:handshake-port); the te control endpoint stays what te peers use.
  const wireEndpoint = target.engine.descriptor().transports[WIRE_PLUGIN]?.endpoint as { mooncakeSegment?: string } | undefined;
  // `segment` (with --wire mooncake): the te control endpoint, whose bench digests check what landed.
  console.log(
    JSON.stringify(
      mooncake ? { ready: wireEndpoint?.mooncakeSegment, bytes: size, segment: target.engine.segmentName } : { ready: target.engine.segmentName, bytes: size },
    ),
  );
  // Serve until a signal (SIGINT/SIGTERM), so it runs under a service manager or nohup with
  // stdin closed; a target started by --loopback also stops when its parent's pipe closes.
  await new Promise<void>((resolve) => {
    if (cli.exitWithParent) process.stdin.on('end', resolve).on('error', resolve).resume();
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await target.close();
}

/** `--wire mooncake`: the target is a Mooncake segment (a real Mooncake process, or `--loopback`: te serving the Mooncake wire). */
async function runWireBench(cli: BenchCliOptions): Promise<void> {
  if (!cli.loopback && !cli.target) throw new UsageError('Give --target <host:port> of a Mooncake segment (its P2P handshake address), or --loopback');
  const config = await commandConfig({ ...flagsOf(cli), plugin: WIRE_PLUGIN });
  const draft = { ...benchOptionsFrom({ ...cli, plugin: WIRE_PLUGIN }, cli.target ?? ''), config };
  const spawned = cli.loopback
    ? await spawnBenchTarget(['--exit-with-parent', '--wire', 'mooncake', '--bytes', String(benchBytes(draft)), ...(cli.bind ? ['--bind', cli.bind] : [])])
    : undefined;
  try {
    const result = await runMooncakeBench({ ...draft, target: spawned?.segment ?? cli.target! });
    if (cli.json) console.log(JSON.stringify(result));
    else printBenchResult(result);
  } finally {
    await spawned?.stop();
  }
}

export async function benchCommand(cli: BenchCliOptions): Promise<void> {
  if (cli.mode === 'target') return runTarget(cli);
  if (cli.sweep) {
    const duration = Number(cli.duration);
    if (!(duration > 0 && duration <= 60))
      throw new UsageError(`Expected --duration to be seconds in (0, 60] for a sweep, got ${JSON.stringify(cli.duration)}`);
    let sizes = SWEEP_SIZES;
    if (cli.sizes) {
      try {
        sizes = cli.sizes.split(',').map((x) => parseSize(x.trim()));
      } catch (e) {
        throw new UsageError(`--sizes: ${(e as Error).message}`);
      }
    }
    return runSweep({
      plugins: (cli.plugin ?? 'mooncake-tcp')
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean),
      ...(cli.modulePath ? { modulePath: cli.modulePath } : {}),
      durationS: duration,
      sizes,
      ...(cli.out ? { out: cli.out } : {}),
      json: Boolean(cli.json),
    });
  }
  if (cli.mode !== 'initiator') throw new UsageError(`Expected --mode to be initiator or target, got ${JSON.stringify(cli.mode)}`);
  if (cli.wire !== undefined && cli.wire !== 'te' && cli.wire !== 'mooncake')
    throw new UsageError(`Expected --wire to be te or mooncake, got ${JSON.stringify(cli.wire)}`);
  if (cli.wire === 'mooncake') return runWireBench(cli);
  if (!cli.loopback && !cli.target) throw new UsageError('Give --target <host:port> of a running `te bench --mode target`, or --loopback to start one here');
  const config = await commandConfig(flagsOf(cli));
  const draft = { ...benchOptionsFrom({ ...cli, plugin: config.connector }, cli.target ?? ''), config };
  const spawned = cli.loopback
    ? await spawnBenchTarget([
        '--exit-with-parent',
        '--plugin',
        config.connector,
        ...(config.modulePath ? ['--module-path', config.modulePath] : []),
        '--bytes',
        String(benchBytes(draft)),
        ...(cli.bind ? ['--bind', cli.bind] : []),
        ...cli.option.flatMap((o) => ['--option', o]),
      ])
    : undefined;
  const progress = !cli.json && process.stderr.isTTY;
  try {
    const result = await runBench({
      ...draft,
      target: spawned?.segment ?? cli.target!,
      ...(progress
        ? { onProgress: (p) => process.stderr.write(`\r  ${p.elapsedS.toFixed(1)} s  ${gbps(p.bytesPerSecond)}  ${count(p.requestsPerSecond)} req/s   `) }
        : {}),
    });
    if (progress) process.stderr.write('\r\x1b[K');
    if (cli.json) console.log(JSON.stringify(result));
    else printBenchResult(result);
  } finally {
    await spawned?.stop();
  }
}
