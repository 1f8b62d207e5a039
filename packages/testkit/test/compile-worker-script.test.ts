import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PLUGIN_API_VERSION } from '@te/connector';
import { compileWorkerScript } from '../src/index.js';

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/worker/${name}`, import.meta.url));

test('a TypeScript worker runs with plain node: relative imports bundled, packages imported, import.meta.url its own', async () => {
  const js = await compileWorkerScript(fixture('main.ts'));
  assert.match(js, /node_modules\/\.cache\/te-test-workers\/main-[0-9a-f]{16}\.mjs$/);
  const out = JSON.parse(execFileSync(process.execPath, [js], { encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } }));
  assert.equal(out, { api: PLUGIN_API_VERSION, file: fixture('where.ts') });
  // The package stays an import (resolved from the script's package), not a copy in the bundle.
  assert.match(readFileSync(js, 'utf8'), /from "@te\/connector"/);
});

test('built once per process: the same path, without building again', async () => {
  const a = compileWorkerScript(fixture('main.ts'));
  assert.is(compileWorkerScript(fixture('main.ts')), a);
  assert.is(await a, await compileWorkerScript(fixture('main.ts')));
});

test("a script that does not compile is refused with the compiler's message", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-worker-'));
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  writeFileSync(join(dir, 'broken.ts'), 'export const x: number = ;\n');
  try {
    await compileWorkerScript(join(dir, 'broken.ts'));
    assert.unreachable('a broken script compiled');
  } catch (e) {
    assert.match((e as Error).message, /broken\.ts/);
    assert.match((e as Error).message, /Unexpected ";"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a script outside any package is refused, naming the folder', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'te-worker-'));
  writeFileSync(join(dir, 'alone.ts'), 'export {};\n');
  try {
    await compileWorkerScript(join(dir, 'alone.ts'));
    assert.unreachable('a script without a package compiled');
  } catch (e) {
    assert.match((e as Error).message, /no package\.json at or above/);
    assert.ok((e as Error).message.includes(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
