// The benchmarks build their C programs on first use (bench/lib/c-bench.mjs). Two processes
// doing so at once (two benchmarks started together, test files run side by side) must not run
// CMake in one build folder at the same time: the build holds the kernel's lock on a file in a
// lock folder, which ends with its holder however the holder ends.
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest("the benchmark tools' own checks");
const cBench = new URL('../bench/lib/c-bench.mjs', import.meta.url).href;

/** Runs a holder (below) to its end; rejects if it failed. */
function holder(lock: string, log: string, tag: string, holdMs: number): Promise<void> {
  return ended(startHolder(lock, log, tag, holdMs), tag);
}

/** A process that takes `lock` and, holding it, writes its start, waits `holdMs`, and writes its end to `log`. */
function startHolder(lock: string, log: string, tag: string, holdMs: number) {
  const script = `
    import { appendFileSync } from 'node:fs';
    import { withBuildLock } from ${JSON.stringify(cBench)};
    withBuildLock(${JSON.stringify(lock)}, () => {
      appendFileSync(${JSON.stringify(log)}, 'start ${tag}\\n');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${holdMs});
      appendFileSync(${JSON.stringify(log)}, 'end ${tag}\\n');
    });`;
  return spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
}

/** Resolves when a holder exits 0; rejects with its stderr otherwise. */
function ended(child: ReturnType<typeof startHolder>, tag: string) {
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise<void>((resolve, reject) =>
    child.on('exit', (code, signal) => (code === 0 ? resolve() : reject(new Error(`holder ${tag} exited ${code ?? signal}: ${stderr}`)))),
  );
}

/** Resolves once the holder `tag` has written that it holds the lock. */
async function tookLock(log: string, tag: string): Promise<void> {
  for (const until = Date.now() + 20_000; !readFileSync(log, 'utf8').includes(`start ${tag}`);) {
    assert.ok(Date.now() < until, `holder ${tag} never took the lock`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Runs `body` with a lock path and an empty log file in a new temporary folder, removed afterwards. */
async function inLockFolder(body: (lock: string, log: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'te-build-lock-'));
  try {
    const lock = join(dir, '.te-build-lock');
    const log = join(dir, 'log');
    writeFileSync(log, '');
    await body(lock, log);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('two processes that build at once take turns: one ends before the other starts', async () => {
  await inLockFolder(async (lock, log) => {
    await Promise.all([holder(lock, log, 'a', 400), holder(lock, log, 'b', 400)]);
    const lines = readFileSync(log, 'utf8').trim().split('\n');
    assert.is(lines.length, 4, lines.join(', '));
    // Each start is followed by its own end: no build ran inside another.
    assert.is(lines[1], lines[0]!.replace('start', 'end'), lines.join(', '));
    assert.is(lines[3], lines[2]!.replace('start', 'end'), lines.join(', '));
  });
});

test('a holder killed while it builds releases the lock at once', async () => {
  await inLockFolder(async (lock, log) => {
    const doomed = startHolder(lock, log, 'a', 60_000);
    const killed = new Promise((resolve) => doomed.on('exit', resolve));
    await tookLock(log, 'a');
    doomed.kill('SIGKILL');
    await killed;
    const started = Date.now();
    await holder(lock, log, 'b', 0);
    assert.is(readFileSync(log, 'utf8'), 'start a\nstart b\nend b\n');
    assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
  });
});

test('a lock folder naming a live process that is not building (a reused pid) holds no one up', async () => {
  await inLockFolder(async (lock, log) => {
    // As an earlier lock left it behind: a folder with a pid that now names a live process (this one).
    mkdirSync(lock);
    writeFileSync(join(lock, 'pid'), String(process.pid));
    const started = Date.now();
    await holder(lock, log, 'a', 0);
    assert.is(readFileSync(log, 'utf8'), 'start a\nend a\n');
    assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
    assert.ok(existsSync(join(lock, 'flock')), 'the lock file stays for the next build');
  });
});

test('a wait that runs out fails with an error that names the holding process', async () => {
  await inLockFolder(async (lock, log) => {
    const stuck = startHolder(lock, log, 'a', 60_000);
    const gone = new Promise((resolve) => stuck.on('exit', resolve));
    try {
      await tookLock(log, 'a');
      // @ts-expect-error: a plain ES module without types
      const { withBuildLock } = await import('../bench/lib/c-bench.mjs');
      let ran = false;
      const error = (() => {
        try {
          withBuildLock(lock, () => (ran = true), { waitSeconds: 1 });
        } catch (e) {
          return e as Error;
        }
      })();
      assert.ok(error, 'the wait ended without an error');
      assert.not.ok(ran, 'the work ran without the lock');
      assert.match(error.message, `${join(lock, 'flock')} has been held for over 1 s; open in pid ${stuck.pid} (node) (the holder, and any other waiters)`);
    } finally {
      stuck.kill('SIGKILL');
      await gone;
    }
  });
});

test.run();
