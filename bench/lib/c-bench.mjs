// The C and C++ programs the benchmarks run beside te (bench/<dir>/<name>.c or .cpp, each its own CMake
// project): configured and built on first use, and again when the source changed.
import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const benchDir = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Builds bench/<dir>/<name>.c (or .cpp) if needed and returns the binary; throws an error that says what to install. */
export function buildCBench(dir, name, needs = 'cmake and a C compiler: apt-get install -y cmake gcc') {
  const source = [`${name}.c`, `${name}.cpp`].map((file) => join(benchDir, dir, file)).find((path) => existsSync(path));
  if (!source) throw new Error(`bench/${dir} has no ${name}.c or ${name}.cpp`);
  const build = join(benchDir, dir, 'build');
  const binary = join(build, name);
  if (existsSync(binary) && statSync(binary).mtimeMs >= statSync(source).mtimeMs) return binary;
  try {
    execFileSync('cmake', ['-S', join(benchDir, dir), '-B', build, '-DCMAKE_BUILD_TYPE=Release'], { stdio: 'pipe' });
    execFileSync('cmake', ['--build', build], { stdio: 'pipe' });
  } catch (e) {
    const detail = `${e.stderr ?? ''}${e.stdout ?? ''}`.trim().split('\n').slice(-5).join('\n');
    throw new Error(`${relative(join(benchDir, '..'), source)} did not build (it needs ${needs})\n${detail}`);
  }
  return binary;
}
