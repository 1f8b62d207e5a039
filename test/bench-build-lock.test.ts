// The benchmarks build their C programs on first use (bench/lib/c-bench.mjs). Two processes
// doing so at once (two benchmarks started together, test files run side by side) must not run
// CMake in one build folder at the same time: the build holds a lock folder, and a lock whose
// holder has exited is taken over rather than waited for.
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest("the benchmark tools' own checks");
const cBench = new URL('../bench/lib/c-bench.mjs', import.meta.url).href;

/** A process that takes `lock` and, holding it, writes its start, waits `holdMs`, and writes its end to `log`. */
function holder(lock: string, log: string, tag: string, holdMs: number) {
  const script = `
    import { appendFileSync } from 'node:fs';
    import { withBuildLock } from ${JSON.stringify(cBench)};
    withBuildLock(${JSON.stringify(lock)}, () => {
      appendFileSync(${JSON.stringify(log)}, 'start ${tag}\\n');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${holdMs});
      appendFileSync(${JSON.stringify(log)}, 'end ${tag}\\n');
    });`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise<void>((resolve, reject) =>
    child.on('exit', (code, signal) => (code === 0 ? resolve() : reject(new Error(`holder ${tag} exited ${code ?? signal}: ${stderr}`)))),
  );
}

test('two processes that build at once take turns: one ends before the other starts', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-build-lock-'));
  try {
    const lock = join(dir, '.te-build-lock');
    const log = join(dir, 'log');
    writeFileSync(log, '');
    await Promise.all([holder(lock, log, 'a', 400), holder(lock, log, 'b', 400)]);
    const lines = readFileSync(log, 'utf8').trim().split('\n');
    assert.is(lines.length, 4, lines.join(', '));
    // Each start is followed by its own end: no build ran inside another.
    assert.is(lines[1], lines[0]!.replace('start', 'end'), lines.join(', '));
    assert.is(lines[3], lines[2]!.replace('start', 'end'), lines.join(', '));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a lock left by a process that exited is taken over at once', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-build-lock-'));
  try {
    const lock = join(dir, '.te-build-lock');
    const log = join(dir, 'log');
    // A process that has exited: its pid names the lock it left behind.
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    mkdirSync(lock);
    writeFileSync(join(lock, 'pid'), gone.stdout);
    writeFileSync(log, '');
    const started = Date.now();
    await holder(lock, log, 'a', 0);
    assert.is(readFileSync(log, 'utf8'), 'start a\nend a\n');
    assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
