import * as assert from 'uvu/assert';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest('a static check of the import graph');

/*
 * Dependencies point one way: plugins → layer packages (@te/fabric, @te/cuda) → @te/connector;
 * @te/disagg → @te/staging (its native copier, a layer that names no transport) → @te/connector;
 * @te/testkit → @te/connector; the CLI on top. A plugin never depends on or
 * imports another plugin, and @te/connector depends on no other te package. Checked in both
 * package.json (runtime dependencies) and every source import, and in the C++ includes:
 * the core (native/include, native/src) includes no layer, a layer (native/fabric,
 * native/cuda, packages/staging/native) only the core and itself, a plugin's native code no
 * other plugin's. The layers and @te/connector outside registry/builtins.ts name no plugin,
 * in code or in an environment variable name (a plugin's defaults and env names come from
 * the plugin that uses the layer).
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const LAYERS = ['@te/fabric', '@te/cuda', '@te/staging'];

interface Pkg {
  name: string;
  dir: string;
  kind: 'connector' | 'layer' | 'plugin' | 'runtime' | 'testkit' | 'cli';
  dependencies: string[];
}

function packages(): Pkg[] {
  const out: Pkg[] = [];
  for (const area of ['packages', 'plugins']) {
    for (const d of readdirSync(join(root, area))) {
      const dir = join(root, area, d);
      let json: { name: string; dependencies?: Record<string, string>; peerDependencies?: Record<string, string> };
      try {
        json = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
      } catch {
        continue;
      }
      const kind: Pkg['kind'] =
        area === 'plugins'
          ? 'plugin'
          : json.name === '@te/connector'
            ? 'connector'
            : LAYERS.includes(json.name)
              ? 'layer'
              : json.name === '@te/testkit'
                ? 'testkit'
                : json.name === '@te/cli'
                  ? 'cli'
                  : 'runtime';
      out.push({
        name: json.name,
        dir,
        kind,
        dependencies: Object.keys({ ...json.dependencies, ...json.peerDependencies }).filter((n) => n.startsWith('@te/')),
      });
    }
  }
  return out;
}

const ALLOWED: Record<Pkg['kind'], (name: string) => boolean> = {
  connector: () => false,
  layer: (n) => n === '@te/connector',
  plugin: (n) => n === '@te/connector' || LAYERS.includes(n),
  runtime: (n) => n === '@te/connector' || n === '@te/staging',
  testkit: (n) => n === '@te/connector',
  cli: (n) => n === '@te/connector' || n === '@te/disagg',
};

function sources(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const f of readdirSync(d)) {
      const p = join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (/\.(ts|mts|js|mjs)$/.test(f)) out.push(p);
    }
  };
  walk(join(dir, 'src'));
  return out;
}

test('every te package depends only downward (package.json)', () => {
  const all = packages();
  assert.ok(all.length >= 10, `found ${all.length} packages`);
  for (const p of all) for (const d of p.dependencies) assert.ok(d !== p.name && ALLOWED[p.kind](d), `${p.name} (${p.kind}) depends on ${d}`);
});

test('no source file imports sideways or upward', () => {
  for (const p of packages()) {
    for (const file of sources(p.dir)) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/(?:from\s+|import\s*\(?\s*|require\s*\(\s*)['"](@te\/[\w-]+)/g)) {
        const target = m[1]!;
        if (target === p.name) continue;
        assert.ok(ALLOWED[p.kind](target), `${relative(root, file)} (${p.name}, ${p.kind}) imports ${target}`);
      }
    }
  }
});

/** Files under `dir` (build outputs and dependencies left out) whose names match `ext`. */
function files(dir: string, ext: RegExp): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const f of readdirSync(d)) {
      if (f === 'build' || f === 'node_modules' || f === 'dist' || f.startsWith('.')) continue;
      const p = join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (ext.test(f)) out.push(p);
    }
  };
  if (existsSync(dir)) walk(dir);
  return out;
}

const CXX = /\.(cpp|cc|h|hpp|cu)$/;

/** Which native area a C++ file belongs to: the core, a layer, or a plugin (by its folder). */
function nativeArea(file: string): { area: string; roots: string[] } {
  const rel = relative(root, file).split(sep);
  if (rel[0] === 'plugins') return { area: `plugin ${rel[1]}`, roots: [join(root, 'plugins', rel[1]!)] };
  if (rel[0] === 'packages') return { area: `layer ${rel[1]}`, roots: [join(root, 'packages', rel[1]!)] };
  if (rel[1] === 'fabric' || rel[1] === 'cuda') return { area: `layer ${rel[1]}`, roots: [join(root, 'native', rel[1]!)] };
  return { area: 'core', roots: [] };
}

const CORE_ROOTS = ['include', 'src', 'test', 'cmake', 'scripts'].map((d) => join(root, 'native', d));
const LAYER_HEADERS: Record<string, string> = { fabric: 'te/fabric/', cuda: 'te/cuda/' };

/** The problems of one C++ file's `#include "…"` lines (system includes are not ours). */
export function includeProblems(file: string, text: string): string[] {
  const { area, roots } = nativeArea(file);
  const problems: string[] = [];
  const inside = (p: string, dirs: string[]): boolean => dirs.some((d) => p === d || p.startsWith(d + sep));
  for (const m of text.matchAll(/^\s*#\s*include\s+"([^"]+)"/gm)) {
    const inc = m[1]!;
    const where = `${relative(root, file)} (${area}) includes "${inc}"`;
    const layer = Object.entries(LAYER_HEADERS).find(([, prefix]) => inc.startsWith(prefix));
    if (layer) {
      // A layer's headers: for itself and the plugins above it, never for the core or another layer.
      if (area === 'core' || (area.startsWith('layer ') && area !== `layer ${layer[0]}`))
        problems.push(`${where}: a layer's header from below it or beside it`);
      continue;
    }
    if (inc.startsWith('te/')) continue; // the core's headers serve everyone
    const next = resolve(dirname(file), inc);
    if (existsSync(next)) {
      if (!inside(next, [...roots, ...CORE_ROOTS])) problems.push(`${where}: reaches into ${relative(root, next)}`);
      continue;
    }
    // Found through the include path: it must be the area's own file or the core's.
    const own = [...roots, ...CORE_ROOTS].some((r) => files(r, CXX).some((f) => f.endsWith(sep + inc) || basename(f) === inc));
    if (!own) problems.push(`${where}: no such header in its own area or the core`);
  }
  return problems;
}

/** Plugin names, and the env prefixes they own (TE_BAREX_, TE_RDMA_, …), from plugins/. */
function pluginNames(): string[] {
  const names: string[] = [];
  for (const d of readdirSync(join(root, 'plugins'))) {
    if (!existsSync(join(root, 'plugins', d, 'package.json'))) continue;
    names.push(
      d,
      `TE_${d
        .replace(/^mooncake-/, '')
        .toUpperCase()
        .replace(/-/g, '_')}_`,
    );
  }
  return names;
}

/** Code without its comments: a comment may give an example; code must not know a plugin. */
function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' ')).replace(/(^|[^:\\])\/\/.*$/gm, '$1');
}

/** Lines of `text` that name a plugin (a whole name, not a part of a longer one). */
export function pluginNameHits(text: string, names: readonly string[]): string[] {
  const hits: string[] = [];
  stripComments(text)
    .split('\n')
    .forEach((line, i) => {
      for (const n of names) {
        const named = n.endsWith('_') ? line.includes(n) : new RegExp(`(^|[^\\w-])${n.replace(/-/g, '\\-')}(?![\\w-])`).test(line);
        if (named) hits.push(`${i + 1}: ${n}: ${line.trim().slice(0, 120)}`);
      }
    });
  return hits;
}

const NAMELESS = ['packages/connector/src', 'packages/fabric/src', 'packages/cuda/src', 'packages/staging/src', 'native'];
const NAMES_ALLOWED = [join(root, 'packages/connector/src/registry/builtins.ts')];

test('the checks find what they look for (planted violations)', () => {
  const names = pluginNames();
  assert.ok(names.includes('barex') && names.includes('TE_BAREX_') && names.includes('mooncake-tcp'), names.join(', '));
  assert.equal(pluginNameHits('const p = "mooncake-rdma";', names).length, 1);
  assert.equal(pluginNameHits('getenv("TE_BAREX_POOL_SIZE");', names).length, 1);
  assert.equal(pluginNameHits('// the mooncake-rdma default\nconst p = plugin; /* barex */', names).length, 0);
  assert.equal(pluginNameHits('const te_mooncake_tcp_x = "@te/mooncake-tcpx";', names).length, 0);
  assert.equal(includeProblems(join(root, 'native/src/x.cpp'), '#include "te/fabric/transport.h"\n').length, 1);
  assert.equal(includeProblems(join(root, 'native/fabric/src/x.cpp'), '#include "te/cuda/device.h"\n').length, 1);
  assert.equal(includeProblems(join(root, 'native/fabric/src/x.cpp'), '#include "../../../plugins/barex/native/addon.cpp"\n').length, 1);
  assert.equal(includeProblems(join(root, 'plugins/mooncake-shm/native/x.cpp'), '#include "../../mooncake-tcp/native/wire.h"\n').length, 1);
  assert.equal(includeProblems(join(root, 'plugins/mooncake-shm/native/x.cpp'), '#include "cuda_staging.h"\n').length, 1);
  assert.equal(
    includeProblems(join(root, 'plugins/mooncake-tcp/native/x.cpp'), '#include "te/cuda/device.h"\n#include "cuda_staging.h"\n#include "te/status.h"\n').length,
    0,
  );
});

test('C++ includes point downward: core ← layers ← plugins, no plugin into another', () => {
  const all = [...files(join(root, 'native'), CXX), ...files(join(root, 'packages'), CXX), ...files(join(root, 'plugins'), CXX)];
  assert.ok(all.length > 50, `found ${all.length} C++ files`);
  const problems = all.flatMap((f) => includeProblems(f, readFileSync(f, 'utf8')));
  assert.equal(problems, []);
});

test('no layer, and @te/connector outside its builtin list, names a plugin', () => {
  const names = pluginNames();
  const problems: string[] = [];
  for (const dir of NAMELESS) {
    for (const f of files(join(root, dir), /\.(ts|mts|js|mjs|cpp|cc|h|hpp|cu)$/)) {
      if (NAMES_ALLOWED.includes(f)) continue;
      for (const hit of pluginNameHits(readFileSync(f, 'utf8'), names)) problems.push(`${relative(root, f)}:${hit}`);
    }
  }
  assert.equal(problems, []);
});

test.run();
