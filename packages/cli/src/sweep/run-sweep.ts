import { writeFileSync } from 'node:fs';
import pc from 'picocolors';
import { benchBytes, runBench, type BenchResult } from '../bench/initiator.js';
import { spawnBenchTarget } from '../bench/loopback.js';
import { commandConfig } from '../config.js';
import { bytes, gbps, table } from '../format.js';
import { iperf3Gbps, memcpyGbps } from './baselines.js';
import { sweepSvg, type SweepSeries } from './svg-chart.js';

export const SWEEP_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

export interface SweepOptions {
  plugins: string[];
  modulePath?: string;
  durationS: number;
  sizes: number[];
  out?: string;
  json: boolean;
}

/** Batch shape per block size: small blocks in batches (requests/s matter), large ones alone. */
function shapeOf(blockSize: number): { batchSize: number; concurrency: number } {
  return { batchSize: Math.max(1, Math.min(64, Math.floor((256 << 10) / blockSize))), concurrency: blockSize >= 16 << 20 ? 2 : 4 };
}

/**
 * `te bench --sweep`: every block size for each plugin (writes, every byte verified), beside
 * memcpy and iperf3 measured in the same run; a table, optionally `--json`, and an SVG chart.
 */
export async function runSweep(o: SweepOptions): Promise<void> {
  const log = (line: string): void => void (o.json ? process.stderr.write(`${line}\n`) : console.log(line));
  const results: { plugin: string; r: BenchResult }[] = [];
  for (const plugin of o.plugins) {
    const config = await commandConfig({ plugin, ...(o.modulePath ? { modulePath: o.modulePath } : {}) });
    const maxBytes = Math.max(...o.sizes.map((b) => benchBytes({ blockSize: b, ...shapeOf(b) })));
    const target = await spawnBenchTarget([
      '--exit-with-parent',
      '--plugin',
      config.connector,
      ...(config.modulePath ? ['--module-path', config.modulePath] : []),
      '--bytes',
      String(maxBytes),
    ]);
    try {
      for (const blockSize of o.sizes) {
        if (!o.json && process.stderr.isTTY) process.stderr.write(`\r  ${plugin} ${bytes(blockSize)} …   `);
        const r = await runBench({
          plugin: config.connector,
          config,
          target: target.segment,
          op: 'write',
          blockSize,
          ...shapeOf(blockSize),
          durationS: o.durationS,
          verify: true,
          timeoutMs: 60_000,
        });
        results.push({ plugin: config.connector, r });
      }
    } finally {
      if (!o.json && process.stderr.isTTY) process.stderr.write('\r\x1b[K');
      await target.stop();
    }
  }
  const memcpy = o.sizes.map((b) => ({ blockSize: b, gbps: memcpyGbps(b) }));
  const iperf = await iperf3Gbps();
  const rows = [['plugin', 'block', 'batch × conc', 'throughput', 'p99 (batch)', 'memcpy', 'verified']];
  for (const { plugin, r } of results) {
    const m = memcpy.find((x) => x.blockSize === r.blockSize)!;
    rows.push([
      plugin,
      bytes(r.blockSize),
      `${r.batchSize} × ${r.concurrency}`,
      gbps(r.bytesPerSecond),
      `${r.p99Us.toFixed(0)} µs`,
      `${m.gbps.toFixed(2)} GB/s`,
      r.verified ? pc.green('yes') : 'no',
    ]);
  }
  log(table(rows));
  log(
    iperf !== undefined
      ? `iperf3 single stream (same run): ${iperf.toFixed(2)} GB/s`
      : 'iperf3 not installed: no kernel-TCP baseline (apt-get install -y iperf3)',
  );
  if (o.out) {
    const throughput: SweepSeries[] = o.plugins.map((p) => ({
      name: p,
      points: results.filter((x) => x.plugin === p || x.r.plugin === p).map((x) => ({ blockSize: x.r.blockSize, gbps: x.r.bytesPerSecond / 1e9 })),
    }));
    throughput.push({ name: 'memcpy (1 thread)', dashed: true, points: memcpy });
    if (iperf !== undefined) throughput.push({ name: 'iperf3 (1 stream)', dashed: true, points: o.sizes.map((b) => ({ blockSize: b, gbps: iperf })) });
    const latency: SweepSeries[] = o.plugins.map((p) => ({
      name: p,
      points: results.filter((x) => x.plugin === p || x.r.plugin === p).map((x) => ({ blockSize: x.r.blockSize, gbps: 0, p99Us: x.r.p99Us })),
    }));
    const note = `te bench --sweep, ${o.durationS} s per point, writes over loopback between two processes, every byte verified; baselines measured in the same run.`;
    writeFileSync(o.out, sweepSvg(`te bench --sweep: ${o.plugins.join(', ')}`, throughput, latency, note));
    log(`chart written to ${o.out}`);
  }
  if (o.json) console.log(JSON.stringify({ sizes: o.sizes, results: results.map(({ r }) => r), memcpy, iperf3: iperf ?? null }));
}
