#!/usr/bin/env node
// Runs uvu and fails when any test did not pass. uvu 0.5 exits 0 when a `before` hook
// throws (its tests are then neither passed nor failed), so the totals are checked here.
// With TE_TEST_SUMMARY set, the counts are appended there for the root summary.
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';

const require = createRequire(import.meta.url);
// uvu exports no ./bin.js subpath: find its folder through the main entry (dist/index.js).
const uvuBin = join(dirname(dirname(require.resolve('uvu'))), 'bin.js');
if (process.argv[2] === '--help' || process.argv[2] === '-h') {
  // The options are uvu's own (its help follows), run with tsx loaded.
  console.log(
    'usage: node scripts/uvu.mjs <dir> [pattern] [uvu options]\n\nRuns uvu with tsx and fails when any test did not pass; with TE_TEST_SUMMARY set, appends the counts there.\n',
  );
  spawnSync(process.execPath, [uvuBin, '--help'], { stdio: 'inherit' });
  process.exit(0);
}
const child = spawn(process.execPath, ['--import', 'tsx', uvuBin, ...process.argv.slice(2)], {
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, NODE_OPTIONS: '' },
});
let out = '';
child.stdout.on('data', (chunk) => {
  out += chunk;
  process.stdout.write(chunk);
});
child.on('exit', (code, signal) => {
  // eslint-disable-next-line no-control-regex
  const plain = out.replace(/\x1b\[[0-9;]*m/g, '');
  const num = (label) => Number(plain.match(new RegExp(`^\\s*${label}:\\s+(\\d+)`, 'm'))?.[1] ?? NaN);
  const total = num('Total');
  const passed = num('Passed');
  const skipped = num('Skipped');
  const seconds = Math.round(Number(plain.match(/^\s*Duration:\s+([\d.]+)ms/m)?.[1] ?? NaN) / 1000);
  // uvu's Total counts the tests that ran; skipped ones are reported apart.
  const failed = Number.isNaN(total) ? 1 : total - passed;
  const root = process.env.TE_TEST_SUMMARY ? dirname(process.env.TE_TEST_SUMMARY) : process.cwd();
  const where = relative(root, process.cwd()) || 'test (cross-package)';
  if (process.env.TE_TEST_SUMMARY) appendFileSync(process.env.TE_TEST_SUMMARY, `${JSON.stringify({ where, total, passed, skipped, failed, seconds })}\n`);
  if (code !== 0 || signal) {
    process.exitCode = code || 1;
  } else if (Number.isNaN(total) || failed !== 0) {
    console.error(`\n${where}: ${Number.isNaN(total) ? 'no uvu totals found' : `${failed} of ${total} tests did not pass (a before/after hook failed?)`}`);
    process.exitCode = 1;
  }
});
