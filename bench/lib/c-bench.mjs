// The C and C++ programs the benchmarks run beside te (bench/<dir>/<name>.c or .cpp, each its own CMake
// project): configured and built on first use, and again when the source changed.
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const benchDir = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Builds bench/<dir>/<name>.c (or .cpp) if needed and returns the binary; throws an error that says what to install. */
export function buildCBench(dir, name, needs = 'cmake and a C compiler: apt-get install -y cmake gcc') {
  const source = [`${name}.c`, `${name}.cpp`].map((file) => join(benchDir, dir, file)).find((path) => existsSync(path));
  if (!source) throw new Error(`bench/${dir} has no ${name}.c or ${name}.cpp`);
  const build = join(benchDir, dir, 'build');
  const binary = join(build, name);
  const upToDate = () => existsSync(binary) && statSync(binary).mtimeMs >= statSync(source).mtimeMs;
  if (upToDate()) return binary;
  mkdirSync(build, { recursive: true });
  withBuildLock(join(build, '.te-build-lock'), () => {
    // Another process may have built it while this one waited for the lock.
    if (upToDate()) return;
    try {
      execFileSync('cmake', ['-S', join(benchDir, dir), '-B', build, '-DCMAKE_BUILD_TYPE=Release'], { stdio: 'pipe' });
      execFileSync('cmake', ['--build', build], { stdio: 'pipe' });
    } catch (e) {
      const detail = `${e.stderr ?? ''}${e.stdout ?? ''}`.trim().split('\n').slice(-5).join('\n');
      throw new Error(`${relative(join(benchDir, '..'), source)} did not build (it needs ${needs})\n${detail}`);
    }
  });
  return binary;
}

// A build takes seconds (fi_rma_bench: about 2 s on 2 CPUs); a wait this long means the holder is stuck.
const LOCK_WAIT_S = 600;
// flock's exit status when the wait ran out (its -E), told apart from its other failures.
const LOCK_TIMED_OUT = 75;

/**
 * Runs `work` holding the lock folder `lock`: two processes building the same program at once (two
 * benchmarks started together, test files run side by side) would otherwise run CMake in one build
 * folder at the same time. The lock is the kernel's (flock(2) on `lock`/flock, taken through
 * util-linux's `flock` on a descriptor this process keeps open), so it ends with its holder however
 * the holder ends: nothing is left to judge stale, and a pid written down and later reused by
 * another process holds no one up. `waitSeconds` bounds the wait; when it runs out, the error
 * names the processes that have the lock file open: the holder, and any other waiters.
 */
export function withBuildLock(lock, work, { waitSeconds = LOCK_WAIT_S } = {}) {
  mkdirSync(lock, { recursive: true });
  const file = join(lock, 'flock');
  const fd = openSync(file, 'a');
  try {
    // The child locks the open file it inherits as its fd 3; a flock(2) lock belongs to that open
    // file, which this process still holds after the child exits, and it is released on close.
    const taken = spawnSync('flock', ['--exclusive', '--wait', String(waitSeconds), '--conflict-exit-code', String(LOCK_TIMED_OUT), '3'], {
      stdio: ['ignore', 'ignore', 'pipe', fd],
      encoding: 'utf8',
    });
    if (taken.error) {
      const missing = taken.error.code === 'ENOENT';
      throw new Error(`could not take the build lock ${file}: ${missing ? 'flock(1) is needed (apt-get install -y util-linux)' : taken.error.message}`);
    }
    if (taken.status === LOCK_TIMED_OUT)
      throw new Error(`${file} has been held for over ${waitSeconds} s; open in ${describeHolders(holdersOf(file), file)} (the holder, and any other waiters)`);
    if (taken.status !== 0) throw new Error(`could not take the build lock ${file}: flock exited ${taken.status ?? taken.signal}: ${taken.stderr.trim()}`);
    return work();
  } finally {
    closeSync(fd);
  }
}

/**
 * The other processes that have `file` open, read from /proc (the kernel's lock table records the pid
 * of the short-lived `flock` that took a lock, not of the process that holds it, and `fuser` comes in
 * a package a fresh machine may lack). Processes of other users cannot be read and are not listed.
 */
function holdersOf(file) {
  const holders = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name) && Number(name) !== process.pid)) {
    try {
      const fds = readdirSync(`/proc/${pid}/fd`);
      if (!fds.some((fd) => readlinkOr(`/proc/${pid}/fd/${fd}`) === file)) continue;
      holders.push({ pid: Number(pid), command: readFileSync(`/proc/${pid}/comm`, 'utf8').trim() });
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return holders;
}

function readlinkOr(path) {
  try {
    return readlinkSync(path);
  } catch {
    return undefined;
  }
}

function describeHolders(holders, file) {
  if (holders.length === 0) return `another user's process only (as root, find /proc/[0-9]*/fd -lname '${file}' names it)`;
  return holders.map(({ pid, command }) => `pid ${pid} (${command})`).join(', ');
}
