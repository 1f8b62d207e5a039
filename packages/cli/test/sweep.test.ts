import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const te = fileURLToPath(new URL('../bin/te.js', import.meta.url));

test('te bench --sweep: verified points per block size, same-run baselines, an SVG chart', () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-sweep-'));
  try {
    const out = join(dir, 'sweep.svg');
    const r = spawnSync(process.execPath, [te, 'bench', '--sweep', '--sizes', '4KiB,1MiB', '--duration', '0.3', '--out', out, '--json'], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.is(r.status, 0, r.stderr);
    const report = JSON.parse(r.stdout.trim().split('\n').pop()!);
    assert.equal(report.sizes, [4096, 1 << 20]);
    assert.is(report.results.length, 2);
    for (const x of report.results) {
      assert.is(x.verified, true);
      assert.ok(x.bytesPerSecond > 0 && x.p99Us > 0);
    }
    assert.ok(report.memcpy.every((m: { gbps: number }) => m.gbps > 0));
    const svg = readFileSync(out, 'utf8');
    assert.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.match(svg, /memcpy \(1 thread\)/);
    assert.is((svg.match(/<circle /g) ?? []).length >= 6, true, 'points for the plugin, memcpy and latency');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
