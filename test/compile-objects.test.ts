import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// native/scripts/compile-objects.sh: the C++ test scripts' parallel, incremental compile.
const script = join(import.meta.dirname, '..', 'native', 'scripts', 'compile-objects.sh');
const compile = (out: string, flags: string, sources: string[]) => spawnSync('sh', [script, out, flags, ...sources], { encoding: 'utf8' });

/** A folder with a header and two sources, only the first of which includes the header. */
function project() {
  const dir = mkdtempSync(join(tmpdir(), 'te-compile-objects-'));
  writeFileSync(join(dir, 'value.h'), 'inline int value() { return 7; }\n');
  writeFileSync(join(dir, 'a.cpp'), '#include "value.h"\nint a() { return value(); }\n');
  writeFileSync(join(dir, 'b.cpp'), 'int b() { return 2; }\n');
  return { dir, out: join(dir, 'obj'), sources: [join(dir, 'a.cpp'), join(dir, 'b.cpp')] };
}

/** Sets files' times `seconds` into the past (one instant for all), so that a rebuild shows as a newer object. */
function age(paths: string[], seconds: number): void {
  const past = new Date(Date.now() - seconds * 1000);
  for (const p of paths) utimesSync(p, past, past);
}

const mtime = (path: string) => statSync(path).mtimeMs;

test('compiles every source and prints the objects in the order of the sources', () => {
  const p = project();
  try {
    const r = compile(p.out, `-O0 -I${p.dir}`, p.sources);
    assert.is(r.status, 0, r.stderr);
    const objects = r.stdout.trim().split('\n');
    assert.is(objects.length, 2);
    assert.match(objects[0]!, /a\.o$/);
    assert.match(objects[1]!, /b\.o$/);
    for (const o of objects) assert.ok(statSync(o).size > 0, o);
  } finally {
    rmSync(p.dir, { recursive: true, force: true });
  }
});

test('compiles again only the objects whose source or included header changed, and all of them when the flags change', () => {
  const p = project();
  try {
    const flags = `-O0 -I${p.dir}`;
    const [a, b] = compile(p.out, flags, p.sources).stdout.trim().split('\n') as [string, string];
    // As after a build: the sources and the header older than the objects.
    age([...p.sources, join(p.dir, 'value.h')], 120);
    age([a, b], 60);
    const before = { a: mtime(a), b: mtime(b) };

    assert.is(compile(p.out, flags, p.sources).status, 0);
    assert.equal({ a: mtime(a), b: mtime(b) }, before, 'nothing changed: nothing compiled');

    writeFileSync(join(p.dir, 'value.h'), 'inline int value() { return 8; }\n');
    assert.is(compile(p.out, flags, p.sources).status, 0);
    assert.ok(mtime(a) > before.a, 'a.cpp includes the changed header');
    assert.is(mtime(b), before.b, 'b.cpp does not');

    age([a, b], 60);
    const aged = { a: mtime(a), b: mtime(b) };
    assert.is(compile(p.out, `-O1 -I${p.dir}`, p.sources).status, 0);
    assert.ok(mtime(a) > aged.a && mtime(b) > aged.b, 'new flags: every object again');
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
