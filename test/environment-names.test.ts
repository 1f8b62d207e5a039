// `te doctor` takes a TE_/MC_ variable for a typo when te does not read it and a name te reads
// is within two edits. Both halves of that rule rest on lists: these tests keep the lists
// whole (every variable the engine, the runtime and the plugins read is on one) and check that
// no variable the repository itself uses would be taken for a typo.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BUILTIN_PLUGINS, ENVIRONMENT_VARIABLES, NATIVE_STATUS, PluginRegistry, type TransportPlugin } from '@te/connector';
import { RUNTIME_ENVIRONMENT_VARIABLES } from '@te/disagg';
import { knownVariables, unreadVariables } from '@te/cli';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tracked = execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' }).split('\n').filter(Boolean);
const NAME = /\b(?:TE|MC)_[A-Z0-9_]*[A-Z0-9]\b/g;

/** The TE_/MC_ names a source reads from the environment: `env.X`, `env['X']`, `env[...]`-style strings. */
function namesRead(source: string): string[] {
  const read = /(?:env(?:\.|\[['"])|envVar: ['"]|envOverride: ['"]|envInt\(env, ['"]|get\(['"])((?:TE|MC)_[A-Z0-9_]*[A-Z0-9])\b/g;
  return [...source.matchAll(read)].map((m) => m[1]!);
}

async function builtinPlugins(): Promise<TransportPlugin[]> {
  const registry = new PluginRegistry();
  const plugins: TransportPlugin[] = [];
  for (const name of Object.keys(BUILTIN_PLUGINS)) plugins.push(await registry.load(name));
  return plugins;
}

test("every variable the engine and the runtime read is on their list, and every built-in plugin's on its options", async () => {
  const listed = new Set(knownVariables(await builtinPlugins()));
  const lists: [string, Record<string, string>][] = [
    ['packages/connector/src/', ENVIRONMENT_VARIABLES],
    ['packages/disagg/src/', RUNTIME_ENVIRONMENT_VARIABLES],
  ];
  const missing: string[] = [];
  let reads = 0;
  for (const file of tracked.filter((f) => /^(packages\/(connector|disagg|staging)|plugins\/[^/]+)\/src\/.*\.ts$/.test(f))) {
    for (const name of namesRead(readFileSync(join(root, file), 'utf8'))) {
      reads++;
      const own = lists.find(([prefix]) => file.startsWith(prefix));
      const onList = own ? name in own[1] : listed.has(name);
      if (!onList) missing.push(`${file}: ${name}`);
    }
  }
  assert.ok(reads > 50, `found ${reads} reads`);
  assert.equal(missing, [], 'read but on no list (te doctor would not know them)');
});

test('no TE_/MC_ name used anywhere in the repository is taken for a typo of another', async () => {
  const known = knownVariables(await builtinPlugins());
  // The native status names (TE_TIMEOUT, …) are C++ constants, not variables; the typos are
  // the ones the tests of the rule set on purpose.
  const statuses = new Set(Object.keys(NATIVE_STATUS).map((code) => `TE_${code}`));
  const typos = new Set(['TE_HANDSHAKE_PROT', 'TE_SECRETT', 'TE_SECERT', 'TE_LOG_LEVEL']);
  const used = new Set<string>();
  for (const file of tracked) {
    if (!/\.(ts|mjs|js|sh|cpp|h|c|md|json|txt)$|CMakeLists|^\.ci\//.test(file)) continue;
    for (const m of readFileSync(join(root, file), 'utf8').matchAll(NAME)) if (!statuses.has(m[0]) && !typos.has(m[0])) used.add(m[0]);
  }
  assert.ok(used.size > 150, `found ${used.size} names`);
  assert.equal(unreadVariables(Object.fromEntries([...used].map((n) => [n, '1'])), known), []);
});

test('the rule itself: a near miss is named with what it meant, a far name and a known one are not', () => {
  const known = ['TE_SECRET', 'TE_HANDSHAKE_PORT', 'MC_LOG_LEVEL'];
  assert.equal(unreadVariables({ TE_SECERT: 'x', TE_LOG_LEVEL: 'debug', TE_HANDSHAKE_PORT: '1', TE_BENCH_QUICK: '1', PATH: '/bin' }, known), [
    { name: 'TE_LOG_LEVEL', meant: 'MC_LOG_LEVEL' },
    { name: 'TE_SECERT', meant: 'TE_SECRET' },
  ]);
});

test.run();
