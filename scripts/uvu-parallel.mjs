#!/usr/bin/env node
// Runs a folder's test files a few at a time, each file in its own scripts/uvu.mjs run (with
// that runner's deadlines and its check for processes left running), and fails when any file
// did not pass. A cross-package test file spends much of its time waiting on other processes
// (peers, workers, timeouts), so a second file beside it uses what the first leaves idle of a
// 2-core machine (there the cross-package tests took 263 s two at a time, 335 s one after
// another).
// - The files are the ones uvu itself would pick (the same folder, pattern and -i ignores).
// - Each file's output is printed whole once it ended, so files side by side do not
//   interleave their lines.
// - With TE_TEST_SUMMARY set, one row for the whole folder is appended there (as a single
//   uvu run appends), summed over the files; its time is the wall time of the run.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from './lib/cli.mjs';
import { appendSummaryRow, suiteName } from './lib/test-summary-row.mjs';

const require = createRequire(import.meta.url);
const { parse } = require('uvu/parse');
const runner = join(dirname(fileURLToPath(import.meta.url)), 'uvu.mjs');

const usage = 'node scripts/uvu-parallel.mjs [--jobs N] [-i PATTERN]... <dir> [pattern]';
const { values, positionals } = parseCli({
  usage,
  summary:
    "Runs the test files uvu would pick under <dir> (matching [pattern], without -i's) N at a time, each in its own scripts/uvu.mjs run; exit 1 when any did not pass.",
  options: {
    jobs: {
      type: 'string',
      short: 'j',
      number: { integer: true, min: 1, max: 64 },
      default: String(Math.min(2, availableParallelism())),
      help: 'test files run at once',
    },
    ignore: { type: 'string', short: 'i', multiple: true, help: 'a pattern of files and folders to leave out (as uvu -i); repeatable' },
  },
  allowPositionals: true,
});
const [dir, pattern] = positionals;
if (!dir || positionals.length > 2) {
  console.error(`usage: ${usage}`);
  process.exit(2);
}
const jobs = Number(values.jobs);
const { suites } = await parse(dir, pattern, { ignore: values.ignore ?? [] });
if (suites.length === 0) {
  console.error(`no test files under ${dir}${pattern ? ` match ${pattern}` : ''}`);
  process.exit(1);
}

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
// Each file's run appends its counts here; they are summed into the one row of the folder.
const counts = mkdtempSync(join(tmpdir(), 'te-uvu-parallel-'));
const started = Date.now();
const running = new Set();
let interrupted;
const failedFiles = [];
const took = [];

/** Runs one file through scripts/uvu.mjs; resolves once it ended and its output was printed. */
function runFile(index) {
  const name = suites[index].name;
  const begun = Date.now();
  const child = spawn(process.execPath, [runner, dir, `^${escape(name)}$`], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TE_TEST_SUMMARY: join(counts, `${index}.jsonl`), TE_TEST_WHERE: join(dir, name) },
  });
  running.add(child);
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  return new Promise((resolve) =>
    child.on('close', (code, signal) => {
      running.delete(child);
      process.stdout.write(out);
      process.stderr.write(err);
      took.push({ name, seconds: (Date.now() - begun) / 1000 });
      if (code !== 0) failedFiles.push(`${name} (${signal ?? `exit ${code}`})`);
      resolve();
    }),
  );
}

// A terminal's Ctrl-C reaches each file's runner (same process group); a signal sent to this
// process alone is passed on, and no further file is started.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    interrupted = signal;
    for (const child of running) child.kill(signal);
  });

let next = 0;
await Promise.all(
  Array.from({ length: Math.min(jobs, suites.length) }, async () => {
    while (next < suites.length && !interrupted) await runFile(next++);
  }),
);

const rows = [];
for (let i = 0; i < suites.length; i++) {
  const file = join(counts, `${i}.jsonl`);
  if (existsSync(file)) for (const line of readFileSync(file, 'utf8').split('\n').filter(Boolean)) rows.push(JSON.parse(line));
}
rmSync(counts, { recursive: true, force: true });
const sum = (k) => rows.reduce((acc, r) => acc + (Number.isFinite(r[k]) ? r[k] : 0), 0);
const total = sum('total');
const passed = sum('passed');
const skipped = sum('skipped');
// A file whose run failed without a failed test (a process it left running, no totals) counts as one.
const failed = Math.max(sum('failed') + rows.filter((r) => !Number.isFinite(r.total)).length, failedFiles.length);
const seconds = Math.round((Date.now() - started) / 1000);
const slowest = [...took].sort((a, b) => b.seconds - a.seconds).slice(0, 5);
console.log(`\n  Files:     ${took.length} of ${suites.length}, ${jobs} at a time`);
console.log(`  Total:     ${total}\n  Passed:    ${passed}\n  Skipped:   ${skipped}\n  Duration:  ${Date.now() - started}ms`);
console.log(`  Slowest:   ${slowest.map((t) => `${t.name} ${t.seconds.toFixed(1)} s`).join(', ')}`);

appendSummaryRow({ where: suiteName(), total, passed, skipped, failed, seconds });
if (failedFiles.length) console.error(`\n${failedFiles.length} test file${failedFiles.length > 1 ? 's' : ''} did not pass: ${failedFiles.join(', ')}`);
if (interrupted) process.exitCode = 128 + (interrupted === 'SIGINT' ? 2 : interrupted === 'SIGHUP' ? 1 : 15);
else if (failed || took.length < suites.length) process.exitCode = 1;
