// Prints the node_modules folders the te packages and the test runner (uvu, tsx) need at run
// time, one per line, so test/gpu/prepare.sh can pack them for a machine that has no
// registry: the dependency closure as npm installed it (hoisted or nested), without the
// build-time tools the plugins use only at install (cmake-js, node-addon-api, headers).
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BUILD_ONLY = new Set(['cmake-js', 'node-addon-api', 'node-api-headers', '@types/node', 'undici-types']);
const seen = new Set();

function resolveFrom(dir, name) {
  for (let d = dir; ; d = dirname(d)) {
    const p = join(d, 'node_modules', name);
    if (existsSync(join(p, 'package.json'))) return p;
    if (dirname(d) === d) return undefined;
  }
}

function visit(dir) {
  if (seen.has(dir)) return;
  seen.add(dir);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const names = [pkg.dependencies, pkg.optionalDependencies, pkg.peerDependencies].flatMap((d) => Object.keys(d ?? {}));
  for (const name of names) {
    if (BUILD_ONLY.has(name)) continue;
    // A workspace package links into node_modules: resolve from its real folder too.
    const found = resolveFrom(realpathSync(dir), name) ?? resolveFrom(dir, name);
    if (found) visit(found);
  }
}

const workspaces = readdirSync(join(root, 'node_modules', '@te')).map((n) => `@te/${n}`);
for (const name of [...workspaces, 'uvu', 'tsx']) visit(join(root, 'node_modules', name));
for (const dir of [...seen].sort()) console.log(relative(root, dir));
