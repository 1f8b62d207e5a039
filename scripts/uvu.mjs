#!/usr/bin/env node
// Runs uvu and fails when any test did not pass. uvu 0.5 exits 0 when a `before` hook
// throws (its tests are then neither passed nor failed), so the totals are checked here.
// Every failure is printed, whatever was thrown (lib/uvu-report-guard.mjs).
// With TE_TEST_SUMMARY set, the counts are appended there for the root summary.
// A test process that has printed its totals but does not exit (a handle left open: an
// engine or transport not closed, a worker's channel) is not waited for forever: after
// EXIT_GRACE_MS it is asked for a diagnostic report, the handles that keep it alive are
// printed, it is killed, and the run fails.
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
// Makes uvu print every failure, whatever was thrown (see the module).
const reportGuard = new URL('./lib/uvu-report-guard.mjs', import.meta.url).href;
// The report's signal is one no test uses: SIGUSR1 starts the inspector, and the control
// plane's signal test floods SIGUSR2.
const EXIT_GRACE_MS = Number(process.env.TE_TEST_EXIT_GRACE_MS ?? 30_000);
const reports = mkdtempSync(join(tmpdir(), 'te-uvu-report-'));
const child = spawn(
  process.execPath,
  [
    '--report-on-signal',
    '--report-signal=SIGPWR',
    `--report-directory=${reports}`,
    '--import',
    'tsx',
    '--import',
    reportGuard,
    uvuBin,
    ...process.argv.slice(2),
  ],
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, NODE_OPTIONS: '' } },
);
let out = '';
let lingering;
let stuck = false;
child.stdout.on('data', (chunk) => {
  out += chunk;
  process.stdout.write(chunk);
  // eslint-disable-next-line no-control-regex
  if (!lingering && /^\s*Duration:/m.test(out.replace(/\x1b\[[0-9;]*m/g, ''))) lingering = setTimeout(diagnoseAndKill, EXIT_GRACE_MS);
});

/** The totals are out but the process lives on: print what keeps it alive, then end it. */
function diagnoseAndKill() {
  stuck = true;
  child.kill('SIGPWR');
  setTimeout(() => {
    const file = readdirSync(reports).find((f) => f.endsWith('.json'));
    let handles = 'no diagnostic report was written';
    if (file) {
      const report = JSON.parse(readFileSync(join(reports, file), 'utf8'));
      const held = (report.libuv ?? []).filter((h) => h.is_referenced && h.is_active);
      handles = held.map((h) => `${h.type}${h.fd !== undefined ? ` fd ${h.fd}` : ''}${h.details ? ` (${h.details})` : ''}`).join(', ') || 'none referenced';
    }
    console.error(`\nthe test process printed its totals but had not exited ${EXIT_GRACE_MS / 1000} s later; referenced libuv handles: ${handles}; killed`);
    child.kill('SIGKILL');
  }, 3_000);
}

child.on('exit', (code, signal) => {
  clearTimeout(lingering);
  rmSync(reports, { recursive: true, force: true });
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
  if (stuck) {
    process.exitCode = 1;
  } else if (code !== 0 || signal) {
    // Without its totals a dead test process says nothing itself: name how it ended.
    if (Number.isNaN(total))
      console.error(`\n${where}: the test process ${signal ? `was killed by ${signal}` : `exited with ${code}`} before uvu printed its totals`);
    process.exitCode = code || 1;
  } else if (Number.isNaN(total) || failed !== 0) {
    console.error(`\n${where}: ${Number.isNaN(total) ? 'no uvu totals found' : `${failed} of ${total} tests did not pass (a before/after hook failed?)`}`);
    process.exitCode = 1;
  }
});
