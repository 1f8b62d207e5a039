import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { survivors } from '@te/testkit';

/*
 * The README's main job, `te demo`: encoder, prefill and decode worker processes behind an
 * OpenAI-style proxy on loopback, run as a user runs it, judged by its JSON report.
 */
const te = join(dirname(fileURLToPath(import.meta.url)), '..', 'packages', 'cli', 'dist', 'te.js');
const SMALL = ['--requests', '6', '--concurrency', '3', '--layers', '8', '--images', '4', '--pool-images', '3', '--json'];

/** `te demo --json`'s report (packages/cli/src/demo/pipeline/run.ts): the fields these tests read. */
interface DemoReport {
  connector: string;
  passed: boolean;
  /** One per request; `error` only where it failed, the timings only where it was answered. */
  rows: { id: number; ok: boolean; verified: boolean; error?: string; bytes?: number; totalMs?: number }[];
  stats: {
    encoder: { reused: number; evictions: number };
    prefill: { layerwise: { layerwiseRooms: number } };
  };
}

function demo(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [te, 'demo', ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  let report: DemoReport;
  try {
    report = JSON.parse(last) as DemoReport;
  } catch {
    throw new Error(`te demo printed no JSON report (exit ${r.status}):\n${r.stdout}\n${r.stderr}`);
  }
  return { status: r.status, report, stderr: r.stderr };
}

test('te demo over mooncake-tcp: every request verified, images shared and evicted', () => {
  const { status, report } = demo([...SMALL, '--connector', 'mooncake-tcp']);
  assert.is(status, 0);
  assert.is(report.passed, true);
  assert.is(report.rows.length, 6);
  for (const r of report.rows) {
    assert.ok(r.verified, `request ${r.id}: ${r.error}`);
    assert.ok(r.bytes! > 0 && r.totalMs! > 0);
  }
  assert.ok(report.stats.encoder.reused > 0, 'requests shared images');
  assert.ok(report.stats.encoder.evictions > 0, 'the pool evicted');
  assert.is(report.stats.prefill.layerwise.layerwiseRooms, 6);
});

test('te demo over mooncake-rdma (tcp;ofi_rxm)', () => {
  const { status, report } = demo([...SMALL, '--connector', 'mooncake-rdma'], { FI_PROVIDER: 'tcp;ofi_rxm' });
  assert.is(status, 0, JSON.stringify(report.rows?.find((r) => !r.verified)));
  assert.ok(report.rows.every((r) => r.verified));
  assert.is(report.connector, 'mooncake-rdma');
});

test('a request whose images the encoder fails on is answered with an error; the others still verify', () => {
  const { status, report } = demo([...SMALL, '--fail-encoder', '2']);
  assert.is(status, 0);
  const failed = report.rows.find((r) => r.id === 2)!;
  assert.is(failed.ok, false);
  assert.match(failed.error!, /encoder/);
  assert.ok(report.rows.filter((r) => r.id !== 2).every((r) => r.verified));
});

test('te demo --module-path runs every worker on the plugin loaded from that path (this one is in-process: each request fails with its typed error, exit 1)', () => {
  const { status, report } = demo([...SMALL, '--requests', '2', '--module-path', './test/fixtures/third-party-plugin']);
  assert.is(status, 1);
  assert.is(report.connector, 'example-memcpy');
  assert.is(report.passed, false);
  for (const r of report.rows) assert.match(r.error!, /\[example-memcpy\] no peer 127\.0\.0\.1:\d+/);
});

test('one corrupted KV byte fails verification and the exit code', () => {
  const { status, report } = demo([...SMALL, '--requests', '2'], { TE_DEMO_FAULT: 'corrupt-kv' });
  assert.is(status, 1);
  assert.is(report.passed, false);
  assert.ok(
    report.rows.some((r) => !r.verified && /layer 0 K byte/.test(r.error!)),
    JSON.stringify(report.rows),
  );
});

test('one wrong byte inside a pulled embedding fails verification (the KV depends on every embedding byte)', () => {
  const { status, report } = demo([...SMALL, '--requests', '3'], { TE_DEMO_FAULT: 'corrupt-embedding' });
  assert.is(status, 1);
  assert.is(report.passed, false);
  assert.ok(
    report.rows.some((r) => !r.verified && /layer 0 K byte/.test(r.error!)),
    JSON.stringify(report.rows),
  );
});

test('odd sizes (--hidden 3 --image-tokens 3 --tokens 1 --layers 1) still verify', () => {
  const { status, report } = demo(['--requests', '3', '--hidden', '3', '--image-tokens', '3', '--tokens', '1', '--layers', '1', '--json']);
  assert.is(status, 0, JSON.stringify(report.rows));
  assert.ok(report.rows.every((r) => r.verified));
});

test('te demo killed mid-run leaves no worker process behind', async () => {
  const run = spawn(process.execPath, [te, 'demo', ...SMALL, '--requests', '400', '--concurrency', '2'], { stdio: 'ignore' });
  const children = (): number[] => {
    try {
      return readFileSync(`/proc/${run.pid}/task/${run.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      return [];
    }
  };
  // The three workers are up and the requests under way.
  let workers: number[] = [];
  const upBy = Date.now() + 60_000;
  while ((workers = children()).length < 3 && run.exitCode === null && Date.now() < upBy) await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, 2_000));
  const stillRunning = run.exitCode === null;
  run.kill('SIGKILL');
  assert.is(workers.length, 3, 'the demo started its three workers');
  assert.ok(stillRunning, 'the demo was still running when it was killed');
  const left = await survivors(workers, 15_000);
  assert.equal(left, [], `every worker ended within 15 s of the demo (left: ${left.join('; ')})`);
});

test.run();
