import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, extname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

/*
 * A test's worker script written in TypeScript, bundled into plain JavaScript so each worker
 * process starts without a TypeScript loader. Under tsx a worker spends about 1.8 s of CPU
 * before its first line runs (the loader thread, esbuild, the hooks); a suite that starts a
 * hundred workers spends minutes there. The bundle holds the script and every file it
 * imports by a relative path, so a worker runs the sources under test, never a stale build;
 * packages (`@te/connector`, plugins, `node:` modules) stay imports, resolved as they would
 * be from the script's own package. `import.meta.url` keeps each source file's own URL (a
 * plugin finds its native addon relative to its sources).
 */

interface Esbuild {
  build(options: Record<string, unknown>): Promise<{ outputFiles: { contents: Uint8Array }[] }>;
}
const built = new Map<string, Promise<string>>();

/** The nearest folder at or above `dir` with a package.json. */
function packageRootOf(dir: string): string {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, 'package.json'))) return d;
    if (dirname(d) === d) throw new Error(`compileWorkerScript: no package.json at or above ${dir}`);
  }
}

/** esbuild as the script's package installs it, else as installed beside this kit. */
function loadEsbuild(from: string): Esbuild {
  for (const base of [join(from, 'package.json'), import.meta.url]) {
    try {
      return createRequire(base)('esbuild') as Esbuild;
    } catch {
      // not installed there
    }
  }
  throw new Error(
    `compileWorkerScript needs esbuild, which neither ${from} nor @te/testkit can load: npm install -D esbuild (or fork the script with --import tsx)`,
  );
}

const LOADERS: Record<string, string> = { '.ts': 'ts', '.mts': 'ts', '.cts': 'ts', '.js': 'js', '.mjs': 'js', '.cjs': 'js' };

/** Replaces `import.meta.url` (and `.dirname`, `.filename`) with the source file's own values. */
const ownImportMeta = {
  name: 'own-import-meta',
  setup(b: { onLoad(o: { filter: RegExp }, f: (a: { path: string }) => { contents: string; loader: string }): void }): void {
    b.onLoad({ filter: /\.[mc]?[jt]s$/ }, (args) => {
      const loader = LOADERS[extname(args.path)]!;
      const source = readFileSync(args.path, 'utf8');
      if (!source.includes('import.meta.')) return { contents: source, loader };
      const contents = source
        .replace(/\bimport\.meta\.url\b/g, JSON.stringify(pathToFileURL(args.path).href))
        .replace(/\bimport\.meta\.dirname\b/g, JSON.stringify(dirname(args.path)))
        .replace(/\bimport\.meta\.filename\b/g, JSON.stringify(args.path));
      return { contents, loader };
    });
  },
};

async function compile(script: string): Promise<string> {
  const root = packageRootOf(dirname(script));
  const esbuild = loadEsbuild(root);
  const result = await esbuild.build({
    entryPoints: [script],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    write: false,
    logLevel: 'silent',
    plugins: [ownImportMeta],
  });
  const code = Buffer.from(result.outputFiles[0]!.contents);
  const outDir = join(root, 'node_modules', '.cache', 'te-test-workers');
  const file = join(outDir, `${basename(script).replace(/\.[mc]?ts$/, '')}-${createHash('sha256').update(code).digest('hex').slice(0, 16)}.mjs`);
  mkdirSync(outDir, { recursive: true });
  // Named by content: a file already there holds these bytes. A new one is written aside and
  // renamed, so a concurrent test process never runs a half-written file.
  if (!existsSync(file)) {
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, code);
    renameSync(tmp, file);
  }
  return file;
}

/**
 * The path of `script` (TypeScript) bundled to an ES module, built once per process. It is
 * written below the script's package's node_modules/.cache, named by its content, so bare
 * imports resolve as they do from the script. Fork the returned path with plain `node`.
 */
export function compileWorkerScript(script: string): Promise<string> {
  let file = built.get(script);
  if (!file) {
    file = compile(script);
    built.set(script, file);
    file.catch(() => built.delete(script));
  }
  return file;
}
