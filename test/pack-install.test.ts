import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUILTIN_PLUGINS } from '@te/connector';

// `npm pack` of @te/connector must install into an empty folder and work from both module
// systems, with types, and load a third-party plugin through modulePath there.
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const work = mkdtempSync(join(tmpdir(), 'te-pack-'));
const run = (cmd: string, args: string[], cwd = work) => execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 240_000 });

// Setup is memoised and awaited by each case: uvu 0.5 ignores errors thrown in `before`.
let installed = false;
function install(): void {
  if (installed) return;
  installed = true;
  run('npm', ['pack', '--silent', '--pack-destination', work], join(root, 'packages', 'connector'));
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'))!;
  writeFileSync(join(work, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }));
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', `./${tarball}`, `typescript@5.9.3`, '@types/node@^20.19.0']);
  cpSync(join(root, 'test', 'fixtures', 'third-party-plugin'), join(work, 'plugins', 'example'), { recursive: true });
}
test.after(() => rmSync(work, { recursive: true, force: true }));

test('import works and loads a third-party plugin via modulePath', () => {
  install();
  writeFileSync(
    join(work, 'esm.mjs'),
    `import { PLUGIN_API_VERSION, TransferError, PluginRegistry } from '@te/connector';
     const p = await new PluginRegistry({ builtins: false }).resolve({ connector: 'example-memcpy', modulePath: './plugins/example' });
     console.log(JSON.stringify({ api: PLUGIN_API_VERSION, err: new TransferError('TIMEOUT', 'x').code, plugin: p.name }));`,
  );
  assert.equal(JSON.parse(run('node', ['esm.mjs'])), { api: 1, err: 'TIMEOUT', plugin: 'example-memcpy' });
});

test('require works', () => {
  install();
  writeFileSync(join(work, 'cjs.cjs'), `const c = require('@te/connector'); console.log(JSON.stringify({ api: c.PLUGIN_API_VERSION, names: new c.PluginRegistry().names().length }));`);
  // The installed CommonJS build knows every built-in plugin this repository's build does.
  assert.equal(JSON.parse(run('node', ['cjs.cjs'])), { api: 1, names: Object.keys(BUILTIN_PLUGINS).length });
});

test('types resolve for both module systems', () => {
  install();
  const body = `import { definePlugin, type TransportPlugin, type TeConfig, TransferError } from '@te/connector';
const c: Pick<TeConfig, 'connector'> = { connector: 'mooncake-tcp' };
const e: TransferError = new TransferError('TIMEOUT', 'x');
export const ok: [string, string] = [c.connector, e.code];
export type P = TransportPlugin;
export const d = definePlugin;
`;
  writeFileSync(join(work, 'check.mts'), body);
  writeFileSync(join(work, 'check.cts'), body.replace(/^import \{ definePlugin, type TransportPlugin, type TeConfig, TransferError \}/m, 'import { definePlugin, type TransportPlugin, type TeConfig, TransferError }'));
  writeFileSync(join(work, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, types: ['node'], skipLibCheck: false }, files: ['check.mts', 'check.cts'] }));
  run(join(work, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json']);
  // A type error must be reported (the check can fail).
  writeFileSync(join(work, 'check.mts'), `${body}\nexport const wrong: number = new TransferError('TIMEOUT', 'x').code;\n`);
  assert.throws(() => run(join(work, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json']));
});

test.run();
