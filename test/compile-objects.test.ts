import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// native/scripts/compile-objects.sh: the C++ test scripts' parallel, incremental compile in
// unity batches. The batch size is pinned (TE_COMPILE_BATCH) so that the cases see batches of
// more than one source among three.
const script = join(import.meta.dirname, '..', 'native', 'scripts', 'compile-objects.sh');
const compile = (out: string, flags: string, sources: string[], batch = 2, jobs = 2) =>
  spawnSync('sh', [script, out, flags, ...sources], {
    encoding: 'utf8',
    env: { ...process.env, TE_COMPILE_BATCH: String(batch), TE_COMPILE_JOBS: String(jobs) },
  });

/** A folder with a header and three sources, only the first of which includes the header. */
function project() {
  const dir = mkdtempSync(join(tmpdir(), 'te-compile-objects-'));
  writeFileSync(join(dir, 'value.h'), 'inline int value() { return 7; }\n');
  writeFileSync(join(dir, 'a.cpp'), '#include "value.h"\nint a() { return value(); }\n');
  writeFileSync(join(dir, 'b.cpp'), 'int b() { return 2; }\n');
  writeFileSync(join(dir, 'c.cpp'), 'int c() { return 3; }\nint main() { return 0; }\n');
  return { dir, out: join(dir, 'obj'), sources: [join(dir, 'a.cpp'), join(dir, 'b.cpp'), join(dir, 'c.cpp')] };
}

/** Sets files' times `seconds` into the past (one instant for all), so that a rebuild shows as a newer object. */
function age(paths: string[], seconds: number): void {
  const past = new Date(Date.now() - seconds * 1000);
  for (const p of paths) utimesSync(p, past, past);
}

const mtime = (path: string) => statSync(path).mtimeMs;
/** The sources a batch's unity file includes, by file name. */
const members = (object: string) => [...readFileSync(object.replace(/\.o$/, '.cpp'), 'utf8').matchAll(/#include "[^"]*\/([^/"]+)"/g)].map((m) => m[1]);

test('splits the sources, sorted by path, into batches of TE_COMPILE_BATCH, compiles each as one unit, and prints the objects; they link', () => {
  const p = project();
  try {
    const r = compile(p.out, `-O0 -I${p.dir}`, p.sources);
    assert.is(r.status, 0, r.stderr);
    const objects = r.stdout.trim().split('\n');
    assert.is(objects.length, 2);
    assert.equal(objects.map(members), [['a.cpp', 'b.cpp'], ['c.cpp']]);
    for (const o of objects) assert.ok(statSync(o).size > 0, o);
    const exe = join(p.dir, 'linked');
    assert.is(spawnSync('g++', [...objects, '-o', exe]).status, 0, 'the objects link into one program');
    // A batch of 1: a unit per source; the default (8): the three in one unit.
    assert.equal(compile(p.out, `-O0 -I${p.dir}`, p.sources, 1).stdout.trim().split('\n').map(members), [['a.cpp'], ['b.cpp'], ['c.cpp']]);
    const byDefault = spawnSync('sh', [script, p.out, `-O0 -I${p.dir}`, ...p.sources], { encoding: 'utf8', env: { ...process.env, TE_COMPILE_BATCH: '' } });
    assert.equal(byDefault.stdout.trim().split('\n').map(members), [['a.cpp', 'b.cpp', 'c.cpp']]);
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test("a batch's members depend on the sources alone: not on the CPUs, the number of parallel compiles or the arguments' order", () => {
  // Where batches followed the CPU count, a source that leaned on an #include of its batch's
  // previous source compiled on one machine and failed on another.
  const p = project();
  try {
    const flags = `-O0 -I${p.dir}`;
    const runs = [compile(p.out, flags, p.sources, 2, 1), compile(p.out, flags, p.sources, 2, 8), compile(p.out, flags, [...p.sources].reverse(), 2, 2)];
    for (const r of runs) {
      assert.is(r.status, 0, r.stderr);
      assert.equal(r.stdout.trim().split('\n').map(members), [['a.cpp', 'b.cpp'], ['c.cpp']]);
    }
    assert.is(runs[2]!.stdout, runs[0]!.stdout, 'the same objects');
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('compiles again only the batches whose source or included header changed, and all of them when the flags change', () => {
  const p = project();
  try {
    const flags = `-O0 -I${p.dir}`;
    const [ab, c] = compile(p.out, flags, p.sources).stdout.trim().split('\n') as [string, string];
    // As after a build: the sources and the header older than the objects.
    age([...p.sources, join(p.dir, 'value.h'), ab.replace(/\.o$/, '.cpp'), c.replace(/\.o$/, '.cpp')], 120);
    age([ab, c], 60);
    const before = { ab: mtime(ab), c: mtime(c) };

    assert.is(compile(p.out, flags, p.sources).status, 0);
    assert.equal({ ab: mtime(ab), c: mtime(c) }, before, 'nothing changed: nothing compiled');

    writeFileSync(join(p.dir, 'value.h'), 'inline int value() { return 8; }\n');
    assert.is(compile(p.out, flags, p.sources).status, 0);
    assert.ok(mtime(ab) > before.ab, "a.cpp's batch includes the changed header");
    assert.is(mtime(c), before.c, "c.cpp's does not");

    age([...p.sources, join(p.dir, 'value.h')], 120);
    age([ab], 60);
    writeFileSync(join(p.dir, 'c.cpp'), 'int c() { return 4; }\nint main() { return 0; }\n');
    const touched = mtime(ab);
    assert.is(compile(p.out, flags, p.sources).status, 0);
    assert.ok(mtime(c) > before.c, 'c.cpp changed');
    assert.is(mtime(ab), touched, 'its batch alone was compiled again');

    age([ab, c], 60);
    const aged = { ab: mtime(ab), c: mtime(c) };
    assert.is(compile(p.out, `-O1 -I${p.dir}`, p.sources).status, 0);
    assert.ok(mtime(ab) > aged.ab && mtime(c) > aged.c, 'new flags: every batch again');
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('calls with different sources into one folder keep their batches apart', () => {
  const p = project();
  try {
    const flags = `-O0 -I${p.dir}`;
    const [all] = compile(p.out, flags, p.sources, 8).stdout.trim().split('\n') as [string];
    const [one] = compile(p.out, flags, [p.sources[1]!], 8).stdout.trim().split('\n') as [string];
    assert.is.not(one, all);
    assert.equal(members(one), ['b.cpp']);
    assert.equal(members(all), ['a.cpp', 'b.cpp', 'c.cpp'], "the first call's batch is untouched");
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('a source whose name is also a shell pattern is compiled, not the file the pattern matches', () => {
  const p = project();
  try {
    writeFileSync(join(p.dir, 'x[1].cpp'), 'int x_bracket() { return 1; }\n');
    writeFileSync(join(p.dir, 'x1.cpp'), 'int x_plain() { return 2; }\n');
    const r = compile(p.out, `-O0 -I${p.dir}`, [p.sources[0]!, join(p.dir, 'x[1].cpp')], 8);
    assert.is(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim().split('\n').map(members), [['a.cpp', 'x[1].cpp']]);
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('sources named relative to the working folder compile (the unity file includes them by absolute path)', () => {
  const p = project();
  try {
    const r = spawnSync('sh', [script, 'obj', `-O0 -I${p.dir}`, 'a.cpp', 'b.cpp', 'c.cpp'], {
      cwd: p.dir,
      encoding: 'utf8',
      env: { ...process.env, TE_COMPILE_BATCH: '8' },
    });
    assert.is(r.status, 0, r.stderr);
    const [object] = r.stdout.trim().split('\n') as [string];
    assert.ok(statSync(join(p.dir, object)).size > 0);
    assert.match(readFileSync(join(p.dir, object.replace(/\.o$/, '.cpp')), 'utf8'), new RegExp(`#include "${p.dir}/a\\.cpp"`));
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('TE_COMPILE_JOBS or TE_COMPILE_BATCH that is not a positive integer exits 2 with a message', () => {
  const p = project();
  try {
    for (const [name, value] of [
      ['TE_COMPILE_JOBS', 'many'],
      ['TE_COMPILE_JOBS', '0'],
      ['TE_COMPILE_BATCH', 'all'],
      ['TE_COMPILE_BATCH', '-1'],
    ] as const) {
      const r = spawnSync('sh', [script, p.out, '-O0', ...p.sources], { encoding: 'utf8', env: { ...process.env, [name]: value } });
      assert.is(r.status, 2, `${name}=${value}`);
      assert.match(r.stderr, `${name} must be a positive integer, not '${value}'`);
    }
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test("a source that does not compile fails the script with the compiler's message", () => {
  const p = project();
  try {
    writeFileSync(join(p.dir, 'b.cpp'), 'int b() { return missing; }\n');
    const r = compile(p.out, `-O0 -I${p.dir}`, p.sources);
    assert.is.not(r.status, 0);
    assert.match(r.stderr, /missing/);
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('without an output folder, flags and a source it exits 2 with its usage', () => {
  const r = spawnSync('sh', [script, '/tmp/unused'], { encoding: 'utf8' });
  assert.is(r.status, 2);
  assert.match(r.stderr, /usage: sh compile-objects\.sh OUT_DIR "FLAGS" SOURCE\.\.\./);
});

test.run();
