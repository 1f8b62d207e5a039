// The C and C++ programs the benchmarks run beside te (bench/<dir>/<name>.c or .cpp, each its own CMake
// project): configured and built on first use, and again when the source changed.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
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

const LOCK_WAIT_MS = 10 * 60_000;
// A lock folder without its holder's pid yet is being taken; past this age its taker died in between.
const UNNAMED_LOCK_MS = 10_000;

/**
 * Runs `work` holding the lock folder `lock` (mkdir is atomic): two processes building the same
 * program at once (two benchmarks started together, test files run side by side) would otherwise
 * run CMake in one build folder at the same time. A lock whose holder has exited is taken over.
 */
export function withBuildLock(lock, work) {
  const started = Date.now();
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, 'pid'), String(process.pid));
      break;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    const holder = lockHolder(lock);
    if (holder.gone) {
      rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (Date.now() - started > LOCK_WAIT_MS)
      throw new Error(
        `${lock} has been held by process ${holder.pid ?? '(unnamed)'} for over ${LOCK_WAIT_MS / 60_000} minutes; remove it if no build is running`,
      );
    // Synchronous, as the build is: a 100 ms sleep between looks.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
  try {
    return work();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** Who holds `lock`, and whether it is gone (exited, or died between taking the folder and naming itself). */
function lockHolder(lock) {
  let pid;
  try {
    pid = Number(readFileSync(join(lock, 'pid'), 'utf8'));
  } catch {
    // Not named yet, or released between the two looks.
  }
  if (!Number.isInteger(pid) || pid <= 0) {
    // Not named yet (or unreadable): judged by its age.
    let age;
    try {
      age = Date.now() - statSync(lock).mtimeMs;
    } catch {
      return { gone: false };
    }
    return { gone: age > UNNAMED_LOCK_MS };
  }
  try {
    process.kill(pid, 0);
    return { pid, gone: false };
  } catch (e) {
    return { pid, gone: e.code === 'ESRCH' };
  }
}
