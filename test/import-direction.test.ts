import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * Dependencies point one way: plugins → layer packages (@te/fabric, @te/cuda) → @te/connector;
 * @te/disagg → @te/staging (its native copier, a layer that names no transport) → @te/connector;
 * @te/testkit → @te/connector; the CLI on top. A plugin never depends on or
 * imports another plugin, and @te/connector depends on no other te package. Checked in both
 * package.json (runtime dependencies) and every source import.
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
      const kind: Pkg['kind'] = area === 'plugins' ? 'plugin' : json.name === '@te/connector' ? 'connector' : LAYERS.includes(json.name) ? 'layer' : json.name === '@te/testkit' ? 'testkit' : json.name === '@te/cli' ? 'cli' : 'runtime';
      out.push({ name: json.name, dir, kind, dependencies: Object.keys({ ...json.dependencies, ...json.peerDependencies }).filter((n) => n.startsWith('@te/')) });
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

test.run();
