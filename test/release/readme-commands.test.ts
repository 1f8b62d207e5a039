import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * Every command the README and the docs show, extracted from the Markdown (fenced sh/bash
 * blocks, and the README's inline `npx …` / `npm run …` / `node …` commands), is run as
 * written from the repository root — in CI that is a fresh clone right after `npm ci`. A
 * command that cannot run here is registered as skipped with its reason. Benchmarks run
 * with TE_BENCH_QUICK=1 (same code paths and checks, small sizes).
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

function markdownFiles(): string[] {
  const out = ['README.md', 'test/gpu/README.md'];
  const walk = (d: string): void => {
    for (const f of readdirSync(join(root, d))) {
      const p = join(d, f);
      if (statSync(join(root, p)).isDirectory()) walk(p);
      else if (f.endsWith('.md')) out.push(p);
    }
  };
  walk('docs');
  for (const area of ['packages', 'plugins'])
    for (const d of readdirSync(join(root, area)))
      if (statSync(join(root, area, d)).isDirectory()) {
        try {
          statSync(join(root, area, d, 'README.md'));
          out.push(join(area, d, 'README.md'));
        } catch {
          // no README
        }
      }
  return out;
}

function commands(): { file: string; command: string }[] {
  const out: { file: string; command: string }[] = [];
  for (const file of markdownFiles()) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const m of text.matchAll(/```(?:sh|bash|shell|console)\n([\s\S]*?)```/g)) {
      for (const raw of m[1]!.split('\n')) {
        const line = raw
          .replace(/^\$\s+/, '')
          .replace(/\s+#.*$/, '')
          .trim();
        if (line && !line.startsWith('#')) out.push({ file, command: line });
      }
    }
    if (file === 'README.md') {
      for (const m of text.matchAll(/`((?:npx te|npm run|npm start|node bench)[^`]*)`/g)) out.push({ file, command: m[1]!.trim() });
    }
  }
  return out;
}

/** Whether Linux perf can profile here (installed, and allowed to open perf events). */
function perfWorks(): boolean {
  return spawnSync('perf', ['stat', '-e', 'task-clock', 'true'], { stdio: 'ignore' }).status === 0;
}

/** Whether strace can trace here (installed, and ptrace allowed). */
function straceWorks(): boolean {
  return spawnSync('strace', ['-f', '-c', '-o', '/dev/null', 'true'], { stdio: 'ignore' }).status === 0;
}

/** Why the real Mooncake binary the interop benchmark runs cannot run here (absent, or libraries missing). */
function mooncakeMissing(): string | undefined {
  const bin = join(process.env.TE_MOONCAKE_TE_DIR ?? join(root, '..', 'shared', 'mooncake-te'), 'transfer_engine_bench');
  const ldd = spawnSync('ldd', [bin], { encoding: 'utf8' });
  if (ldd.status !== 0) return `no runnable Mooncake binary at ${bin} (set TE_MOONCAKE_TE_DIR)`;
  if (/not found/.test(ldd.stdout)) return `${bin} lacks runtime libraries (.ci/run installs them)`;
  return undefined;
}

/** Why a documented command is not run here, or undefined to run it. */
function skipReason(command: string): string | undefined {
  if (/bench\/flame\.mjs/.test(command) && !perfWorks())
    return 'Linux perf cannot profile on this machine (apt-get install -y linux-perf; needs root or kernel.perf_event_paranoid <= 1)';
  if (/bench\/syscalls\.mjs/.test(command) && !straceWorks()) return 'strace cannot trace on this machine (apt-get install -y strace; ptrace must be allowed)';
  if (command === 'npm run test:release') return 'it is the command running this test';
  if (command === 'npm test') return 'the test suite (12 minutes on 2 cores), which CI runs as its own step before this one';
  if (/^npm install @te\//.test(command))
    return 'installs from the public npm registry, where te packages are not published (test/pack-all.test.ts installs packed tarballs)';
  if (/^apt-get /.test(command)) return 'a system package install (.ci/run installs what the tests need)';
  if (/test\/gpu\/|\.gpu\//.test(command)) return 'prepares or runs the GPU test, which needs a GPU machine (test/gpu/README.md)';
  if (/10\.0\.0\.\d+/.test(command)) return "a multi-host example with the hosts' own addresses";
  if (/test\/netns/.test(command)) return 'the multi-host namespace tests, which npm run test:cross runs in this same suite';
  if (/bench:netns|bench\/netns/.test(command) && process.getuid?.() !== 0) return 'builds network namespaces, which needs root';
  if (/^npm run soak\b/.test(command)) return 'a soak run of several minutes, outside the test suite by design (scripts/soak.mjs)';
  if (/scripts\/chaos\.mjs/.test(command)) return 'the chaos soak, minutes long: .ci/run runs its quick mode after the test suite (docs/chaos.md)';
  if (/--out docs\//.test(command)) return 'regenerates a committed chart in docs/ (packages/cli/test/sweep.test.ts runs the sweep into a temporary file)';
  if (/^npm test -w @te\/mooncake-wire$/.test(command)) return "a package's own test suite, which npm test runs (lerna run test)";
  if (/bench\/mooncake-interop\.mjs/.test(command) && mooncakeMissing()) return mooncakeMissing()!;
  return undefined;
}

const seen = new Set<string>();
for (const { file, command } of commands()) {
  // `npm ci` is the first step of every CI run, which this suite runs after: run the rest of the line.
  const runnable = command.replace(/^npm ci(?: [^&]*)?&&\s*/, '');
  const key = `${runnable}`;
  if (seen.has(key)) continue;
  seen.add(key);
  const reason = skipReason(runnable);
  const name = `${relative('.', file)}: ${command}`;
  if (reason) {
    test.skip(`${name} — skipped: ${reason}`, () => undefined);
    continue;
  }
  test(name, () => {
    const started = Date.now();
    const r = spawnSync('bash', ['-c', runnable], {
      cwd: root,
      encoding: 'utf8',
      timeout: 240_000,
      env: { ...process.env, TE_BENCH_QUICK: '1', FORCE_COLOR: '0' },
    });
    // Each command's time, for whoever trims this file's minutes.
    console.log(`  ${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s  ${runnable}`);
    assert.is(r.status, 0, `exit ${r.status}${r.signal ? ` (${r.signal})` : ''}\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
  });
}

test("the extraction found the README quick start and the docs' commands", () => {
  const all = commands().map((c) => c.command);
  assert.ok(all.includes('npm ci && npm start'));
  assert.ok(all.includes('npx te doctor'));
  assert.ok(all.length >= 20, `${all.length} commands`);
});

test.run();
