#!/usr/bin/env node
// Runs uvu and fails when any test did not pass. uvu 0.5 exits 0 when a `before` hook
// throws (its tests are then neither passed nor failed), so the totals are checked here.
// Every failure is printed, whatever was thrown (lib/uvu-report-guard.mjs).
// With TE_TEST_SUMMARY set, the counts are appended there for the root summary; its messages
// name the package (or TE_TEST_WHERE, which scripts/uvu-parallel.mjs sets to the file).
// No test process is waited for forever:
// - one that has printed its totals but does not exit (a handle left open: an engine or
//   transport not closed, a worker's channel) is, after EXIT_GRACE_MS, asked for a
//   diagnostic report, the handles that keep it alive are printed, it is killed, and the
//   run fails;
// - one that has not printed its totals DEADLINE_MS after it started (a test awaiting
//   something that never comes, a process hung in native code) is ended the same way,
//   with the JavaScript stack it was in;
// - it leads its own process group, and whatever it started and left running when it
//   ended (a worker process, a spawned peer) is named, killed, and fails the run. Such a
//   process holds the runner's pipe open, so without this the runner would wait for it.
//   A worker that follows its parent (it exits once its IPC channel closes, as parked PD
//   ranks do) has FOLLOW_GRACE_MS to be gone; one caught mid-exit is not left running.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { groupMembers, signalGroup } from './lib/process-group.mjs';
import { appendSummaryRow, suiteName } from './lib/test-summary-row.mjs';

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
// Longer than any package's tests take on a 2-core CI machine (the longest, under 5 min), and
// no longer than the whole of `npm test` may take.
const DEADLINE_MS = Number(process.env.TE_TEST_DEADLINE_MS ?? 15 * 60_000);
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
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, NODE_OPTIONS: '' }, detached: true },
);
// A terminal's Ctrl-C reaches the runner's process group only: pass it on to the tests'.
let interrupted;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    interrupted = signal;
    signalGroup(child.pid, signal);
  });
const deadline = setTimeout(() => diagnoseAndKill(`had not printed its totals ${DEADLINE_MS / 1000} s after it started; ${whereItWas()}`), DEADLINE_MS);
let out = '';
let lingering;
let stuck = false;
child.stdout.on('data', (chunk) => {
  out += chunk;
  process.stdout.write(chunk);
  // eslint-disable-next-line no-control-regex
  if (!lingering && /^\s*Duration:/m.test(out.replace(/\x1b\[[0-9;]*m/g, ''))) {
    clearTimeout(deadline);
    lingering = setTimeout(() => diagnoseAndKill(`printed its totals but had not exited ${EXIT_GRACE_MS / 1000} s later`), EXIT_GRACE_MS);
  }
});

/** The process is stuck (`why`): print what keeps it alive and where it is, then end it and its group. */
function diagnoseAndKill(why) {
  if (stuck) return;
  stuck = true;
  child.kill('SIGPWR');
  setTimeout(() => {
    const file = readdirSync(reports).find((f) => f.endsWith('.json'));
    let handles = 'no diagnostic report was written';
    let stack = '';
    if (file) {
      const report = JSON.parse(readFileSync(join(reports, file), 'utf8'));
      const held = (report.libuv ?? []).filter((h) => h.is_referenced && h.is_active);
      handles = held.map((h) => `${h.type}${h.fd !== undefined ? ` fd ${h.fd}` : ''}${h.details ? ` (${h.details})` : ''}`).join(', ') || 'none referenced';
      // The report is written between two turns of the event loop unless JavaScript is
      // running (then its stack is the one here): an empty stack means it was waiting.
      const frames = (report.javascriptStack?.stack ?? []).filter((f) => f.trim() && !/No stack/i.test(f));
      if (frames.length) stack = `\nJavaScript stack: ${report.javascriptStack.message}\n${frames.join('\n')}`;
    }
    console.error(`\nthe test process ${why}; referenced libuv handles: ${handles}; killed${stack}`);
    signalGroup(child.pid, 'SIGKILL');
  }, 3_000);
}

/** Which file's tests were running, from uvu's output: a file's name on its own line, then a mark per test that ended. */
function whereItWas() {
  // eslint-disable-next-line no-control-regex
  const lines = out.replace(/\x1b\[[0-9;]*m/g, '').split('\n');
  const title = lines.findLastIndex((l) => /^\s*\S+\.[cm]?[jt]sx?\s*$/.test(l));
  if (title < 0) return 'no test file had started';
  const ended = (
    lines
      .slice(title + 1)
      .join('')
      .match(/[•✘]/g) ?? []
  ).length;
  return `it was in ${lines[title].trim()}, after ${ended} of its tests had ended`;
}

const FOLLOW_GRACE_MS = 1_000;
let exitCode;
let exitSignal;
let leftBehind = [];
/** Settles once the test process's group was checked for what it left running. */
let groupChecked = Promise.resolve();

/** The group's members that are still there once those following their parent had FOLLOW_GRACE_MS to exit. */
async function membersAfterGrace(pgid) {
  const until = Date.now() + FOLLOW_GRACE_MS;
  let members = groupMembers(pgid);
  while (members.length && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 50));
    members = groupMembers(pgid);
  }
  return members;
}

child.on('exit', (code, signal) => {
  exitCode = code;
  exitSignal = signal;
  clearTimeout(lingering);
  clearTimeout(deadline);
  // What the test process started and left running is ended with it; it would otherwise
  // keep the stdout pipe, and so this runner, open.
  groupChecked = membersAfterGrace(child.pid).then((members) => {
    leftBehind = members;
    signalGroup(child.pid, 'SIGKILL');
    // A process that left the group (its own session) may still hold the pipe: the output
    // read so far is all there is after a while.
    setTimeout(() => child.stdout.destroy(), 5_000).unref();
  });
});
// 'close' comes once the output is read to its end: the totals are in `out` by then.
child.on('close', async () => {
  await groupChecked;
  rmSync(reports, { recursive: true, force: true });
  const code = exitCode;
  const signal = exitSignal;
  // eslint-disable-next-line no-control-regex
  const plain = out.replace(/\x1b\[[0-9;]*m/g, '');
  const num = (label) => Number(plain.match(new RegExp(`^\\s*${label}:\\s+(\\d+)`, 'm'))?.[1] ?? NaN);
  const total = num('Total');
  const passed = num('Passed');
  const skipped = num('Skipped');
  const seconds = Math.round(Number(plain.match(/^\s*Duration:\s+([\d.]+)ms/m)?.[1] ?? NaN) / 1000);
  // uvu's Total counts the tests that ran; skipped ones are reported apart.
  const failed = Number.isNaN(total) ? 1 : total - passed;
  const where = suiteName();
  appendSummaryRow({ where, total, passed, skipped, failed, seconds });
  if (leftBehind.length)
    console.error(
      `\n${where}: the test process left ${leftBehind.length} process${leftBehind.length > 1 ? 'es' : ''} running when it ended, killed: ${leftBehind.map((m) => `${m.pid} (${m.cmdline})`).join(', ')}`,
    );
  if (interrupted) {
    process.exitCode = 128 + (interrupted === 'SIGINT' ? 2 : interrupted === 'SIGHUP' ? 1 : 15);
  } else if (stuck) {
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
  if (leftBehind.length && !process.exitCode) process.exitCode = 1;
});
