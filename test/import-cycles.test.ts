import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCircular, parseDependencyTree } from 'dpdm';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest('a static check of the import graph');

/*
 * No import cycle in any package's or plugin's sources, type-only imports included: a
 * cycle means two files that cannot be read, changed or tested apart (a child reaching
 * back into its owner, a module and its helper knowing each other). dpdm reads the
 * TypeScript sources as written (`transform: false` keeps `import type`).
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCES = /(^|\/)(packages|plugins)\/[^/]+\/src\//;

/** Every cycle among the files `patterns` match under `dir` and the files they import that `include` accepts. */
async function cyclesUnder(dir: string, patterns: string[], include = /.*/): Promise<{ files: number; cycles: string[][] }> {
  const tree = await parseDependencyTree(patterns, { cwd: dir, context: dir, transform: false, include, exclude: /node_modules|\.d\.[cm]?ts$/ });
  return { files: Object.keys(tree).length, cycles: parseCircular(tree) };
}

/** Writes `files` into a fresh folder and returns the cycles found there. */
async function plantedCycles(files: Record<string, string>): Promise<string[][]> {
  const dir = mkdtempSync(join(tmpdir(), 'te-cycle-'));
  try {
    // Imports name the compiled `.js` file, as in the packages: TypeScript's resolution (from
    // the nearest tsconfig) maps them to the `.ts` sources.
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext' } }));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    return (await cyclesUnder(dir, ['*.ts'])).cycles;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('the check finds a planted cycle made of type-only imports', async () => {
  const cycles = await plantedCycles({
    'owner.ts': "import type { Child } from './child.js';\nexport interface Owner { child: Child }\n",
    'child.ts': "import type { Owner } from './owner.js';\nexport interface Child { owner: Owner }\n",
    'leaf.ts': "import type { Owner } from './owner.js';\nexport type Leaf = Owner;\n",
  });
  assert.is(cycles.length, 1, JSON.stringify(cycles));
  assert.equal([...cycles[0]!].sort(), ['child.ts', 'owner.ts']);
});

test('the check finds a cycle through three files and a re-export', async () => {
  const cycles = await plantedCycles({
    'a.ts': "import { b } from './b.js';\nexport const a = () => b;\n",
    'b.ts': "export { c as b } from './c.js';\n",
    'c.ts': "import { a } from './a.js';\nexport const c = () => a;\n",
  });
  assert.is(cycles.length, 1, JSON.stringify(cycles));
  assert.equal([...cycles[0]!].sort(), ['a.ts', 'b.ts', 'c.ts']);
});

test('the check finds nothing where imports point one way', async () => {
  const cycles = await plantedCycles({
    'a.ts': "import type { B } from './b.js';\nexport type A = B;\n",
    'b.ts': 'export type B = number;\n',
  });
  assert.equal(cycles, []);
});

test('no package or plugin has an import cycle in its sources', async () => {
  // One graph over every package's and plugin's src, so a cycle across packages (through a
  // tsconfig path or a relative import) is found too.
  const { files, cycles } = await cyclesUnder(root, ['packages/*/src/**/*.{ts,mts,js,mjs}', 'plugins/*/src/**/*.{ts,mts,js,mjs}'], SOURCES);
  assert.ok(files > 200, `read ${files} source files`);
  assert.equal(
    cycles.map((cycle) => cycle.join(' -> ')),
    [],
  );
});

test.run();
