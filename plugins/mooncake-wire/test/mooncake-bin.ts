// The real Mooncake Transfer Engine (transfer_engine_bench, TCP build) as a separate process.
// Found at $TE_MOONCAKE_TE_DIR or ../shared/mooncake-te beside the repository; `unavailable()`
// says why it cannot run here (absent, or its runtime libraries missing), for registered skips.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MSG_METADATA, handshake, parseSegment } from '../src/index.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const MOONCAKE_DIR = process.env.TE_MOONCAKE_TE_DIR ?? join(repo, '..', 'shared', 'mooncake-te');
export const BENCH = join(MOONCAKE_DIR, 'transfer_engine_bench');

/** Why the binary cannot run here, or undefined when it can. */
export function unavailable(): string | undefined {
  if (!existsSync(BENCH)) return `no Mooncake binary at ${BENCH} (set TE_MOONCAKE_TE_DIR)`;
  const ldd = spawnSync('ldd', [BENCH], { encoding: 'utf8' });
  const missing = (ldd.stdout ?? '')
    .split('\n')
    .filter((l) => l.includes('not found'))
    .map((l) => l.trim().split(' ')[0]);
  if (missing.length > 0) return `${BENCH} lacks runtime libraries: ${missing.join(', ')} (.ci/run installs them)`;
  return undefined;
}

const baseEnv = { ...process.env, GLOG_logtostderr: '1' };

export interface MooncakeTarget {
  segment: string;
  process: ChildProcess;
  log(): string;
  stop(): Promise<void>;
}

/** Whether `segment`'s descriptor lists a buffer, asked every 20 ms until it does or `over()` says to stop. */
async function untilRegistered(segment: string, over: () => boolean): Promise<boolean> {
  const port = Number(segment.slice(segment.lastIndexOf(':') + 1));
  while (!over()) {
    try {
      if (parseSegment(await handshake('127.0.0.1', port, MSG_METADATA, '{}\n', 2000), segment).buffers.length > 0) return true;
    } catch {
      // not answering yet: asked again
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

/** Starts a Mooncake target (P2P handshake) and resolves once its descriptor lists its buffer. */
export function startTarget(bufferSize: number, env: Record<string, string> = {}): Promise<MooncakeTarget> {
  const p = spawn(
    BENCH,
    [
      '--mode=target',
      '--protocol=tcp',
      '--metadata_server=P2PHANDSHAKE',
      '--local_server_name=127.0.0.1',
      `--buffer_size=${bufferSize}`,
      '--batch_size=1',
      '--threads=1',
      '--block_size=4096',
    ],
    {
      env: { ...baseEnv, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  return new Promise((resolveTarget, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      p.kill('SIGKILL');
      reject(new Error(`Mooncake target did not start:\n${out}`));
    }, 15000);
    let waiting = false;
    const onData = (c: Buffer) => {
      out += c.toString();
      const m = /listening on (\S+:\d+)/.exec(out);
      // The buffers are registered after "DRAM is used" is logged, and the handshake answers at
      // once: the target is ready when its descriptor lists a buffer (resolving at the log line,
      // a first test once opened it with none).
      if (m && /DRAM is used/.test(out) && !waiting) {
        waiting = true;
        void untilRegistered(m[1]!, () => settled).then((ready) => {
          if (!ready) return;
          settled = true;
          clearTimeout(timer);
          resolveTarget({
            segment: m[1]!,
            process: p,
            log: () => out,
            stop: () =>
              new Promise<void>((r) => {
                if (p.exitCode !== null) return r();
                p.once('exit', () => r());
                p.kill('SIGTERM');
                setTimeout(() => p.kill('SIGKILL'), 3000).unref();
              }),
          });
        });
      }
    };
    p.stdout!.on('data', onData);
    p.stderr!.on('data', onData);
    p.once('exit', (code) => {
      settled = true;
      clearTimeout(timer);
      reject(new Error(`Mooncake target exited (${code}):\n${out}`));
    });
  });
}

export interface InitiatorRun {
  code: number | null;
  log: string;
  /** GB/s as the binary reports it (10^9 bytes/s), NaN when it did not finish. */
  gbps: number;
  batches: number;
}

/** Runs a Mooncake initiator against `segment` (it exits non-zero when a transfer fails). */
export function runInitiator(o: {
  segment: string;
  op: 'read' | 'write';
  blockSize: number;
  batchSize: number;
  threads?: number;
  seconds: number;
  env?: Record<string, string>;
}): Promise<InitiatorRun> {
  const threads = o.threads ?? 1;
  const args = [
    '--mode=initiator',
    '--protocol=tcp',
    '--metadata_server=P2PHANDSHAKE',
    '--local_server_name=127.0.0.1',
    `--segment_id=${o.segment}`,
    `--operation=${o.op}`,
    `--block_size=${o.blockSize}`,
    `--batch_size=${o.batchSize}`,
    `--threads=${threads}`,
    `--duration=${o.seconds}`,
    `--buffer_size=${o.blockSize * o.batchSize * threads}`,
    '--report_unit=GB',
    '--report_precision=3',
  ];
  const p = spawn(BENCH, args, { env: { ...baseEnv, ...(o.env ?? {}) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  p.stdout!.on('data', (c: Buffer) => (log += c.toString()));
  p.stderr!.on('data', (c: Buffer) => (log += c.toString()));
  return new Promise((r) => {
    const kill = setTimeout(() => p.kill('SIGKILL'), (o.seconds + 30) * 1000);
    p.once('exit', (code) => {
      clearTimeout(kill);
      const m = /batch count (\d+), throughput ([\d.]+) GB\/s/.exec(log);
      r({ code, log, gbps: m ? Number(m[2]) : NaN, batches: m ? Number(m[1]) : 0 });
    });
  });
}
