#!/usr/bin/env node
// Runs the cross-package suite (test/, the release checks left out) through scripts/uvu.mjs:
// first the files that rebuild a plugin's addon in place, alone, since every other file loads
// those addons; then the rest in two lanes at once, the files dealt out alternately in name
// order. Each lane's output is printed whole when it ends, so that two lanes' lines do not
// interleave. Exit 1 when any run failed.
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from './lib/cli.mjs';

const { values } = parseCli({
  usage: 'node scripts/test-cross.mjs [--lanes <n>]',
  summary:
    "Runs test/**/*.test.ts (fixtures and release checks left out): the files that rebuild an addon first, alone, then the rest in lanes run at once; each lane's output printed when it ends.",
  options: { lanes: { type: 'string', default: '2', help: 'runs at once after the first (1: one run, in name order)' } },
});
const lanes = Number(values.lanes);
if (!Number.isInteger(lanes) || lanes < 1 || lanes > 8) {
  console.error(`--lanes must be a whole number from 1 to 8, got ${values.lanes}`);
  process.exit(2);
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const testDir = join(root, 'test');
// Files that replace a built addon while they run: nothing else may load it meanwhile.
const ALONE = new Set(['native-build-options.test.ts']);

function testFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    const rel = relative(testDir, path);
    if (statSync(path).isDirectory()) {
      if (name !== 'fixtures' && rel !== 'release') out.push(...testFiles(path));
    } else if (name.endsWith('.test.ts')) out.push(rel);
  }
  return out;
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** One uvu run over exactly these files (relative to test/); resolves to its exit code and output. */
function run(files, label, live) {
  return new Promise((resolve) => {
    const pattern = `^(${files.map(escape).join('|')})$`;
    const child = spawn(process.execPath, [join(root, 'scripts', 'uvu.mjs'), 'test', pattern], {
      cwd: root,
      stdio: ['ignore', live ? 'inherit' : 'pipe', live ? 'inherit' : 'pipe'],
      env: { ...process.env, TE_TEST_LABEL: label },
    });
    let out = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (out += d));
    child.on('exit', (code, signal) => resolve({ code: code ?? 1, signal, out }));
  });
}

const files = testFiles(testDir);
const alone = files.filter((f) => ALONE.has(f));
const rest = files.filter((f) => !ALONE.has(f));
let failed = false;
if (alone.length > 0) {
  const r = await run(alone, 'test (cross-package, alone)', true);
  failed ||= r.code !== 0;
}
const dealt = Array.from({ length: Math.min(lanes, rest.length) }, (_, i) => rest.filter((_, k) => k % lanes === i));
const results = await Promise.all(
  dealt.map((set, i) =>
    run(set, dealt.length === 1 ? 'test (cross-package)' : `test (cross-package, lane ${i + 1})`, dealt.length === 1).then((r) => {
      if (dealt.length > 1) process.stdout.write(`\n── cross-package lane ${i + 1} of ${dealt.length} (${set.length} files) ──\n${r.out}`);
      return r;
    }),
  ),
);
for (const r of results) failed ||= r.code !== 0;
process.exitCode = failed ? 1 : 0;
