import { createRequire } from 'node:module';
import { isAbsolute, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { TransferError } from '../errors/transfer-error.js';

/** One way a module was looked for, and what happened. */
export interface LoadAttempt {
  how: string;
  error: string;
}

function isFilePath(specifier: string): boolean {
  return specifier.startsWith('.') || isAbsolute(specifier) || specifier.startsWith('file:');
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** The ESM entry of a package directory (ESM cannot import a directory itself). */
function packageEntry(dir: string): string {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a package.json of any shape; every field read is type-checked below
  let pkg: Record<string, any> = {};
  try {
    pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  } catch {
    return join(dir, 'index.js');
  }
  const dot = typeof pkg.exports === 'string' ? pkg.exports : (pkg.exports?.['.'] ?? pkg.exports);
  const entry = typeof dot === 'string' ? dot : (dot?.import?.default ?? dot?.import ?? dot?.default ?? pkg.module ?? pkg.main ?? 'index.js');
  return join(dir, typeof entry === 'string' ? entry : 'index.js');
}

function messageOf(error: unknown): string {
  const e = error as NodeJS.ErrnoException;
  return (e?.message ?? String(error)).split('\n')[0]!;
}

/**
 * Imports a plugin module by package name or file path. Package names are resolved
 * from the application's directory first (where a user installed the plugin), then from
 * this package's own location; file paths are relative to `baseDir`. When nothing works
 * the error lists every attempt.
 */
export async function importPluginModule(specifier: string, baseDir = process.cwd()): Promise<{ module: Record<string, unknown>; resolved: string }> {
  const attempts: LoadAttempt[] = [];
  if (isFilePath(specifier)) {
    const path = specifier.startsWith('file:') ? fileURLToPath(specifier) : resolvePath(baseDir, specifier);
    if (!existsSync(path)) {
      throw new TransferError(
        'PLUGIN_LOAD_FAILED',
        `Plugin module path ${specifier} does not exist${path !== specifier ? ` (resolved to ${path})` : ''}; check the path (relative paths are resolved from ${baseDir})`,
        { details: { specifier, path } },
      );
    }
    const url = pathToFileURL(isDirectory(path) ? packageEntry(path) : path).href;
    try {
      return { module: (await import(url)) as Record<string, unknown>, resolved: url };
    } catch (error) {
      attempts.push({ how: `import ${url}`, error: messageOf(error) });
    }
  } else {
    try {
      const path = createRequire(resolvePath(baseDir, 'package.json')).resolve(specifier);
      return { module: (await import(pathToFileURL(path).href)) as Record<string, unknown>, resolved: path };
    } catch (error) {
      attempts.push({ how: `resolve from ${baseDir}`, error: messageOf(error) });
    }
    try {
      return { module: (await import(specifier)) as Record<string, unknown>, resolved: specifier };
    } catch (error) {
      attempts.push({ how: 'import from @te/connector', error: messageOf(error) });
    }
  }
  throw new TransferError(
    'PLUGIN_LOAD_FAILED',
    `Cannot load plugin module "${specifier}". Tried:\n${attempts.map((a) => `  - ${a.how}: ${a.error}`).join('\n')}`,
    { details: { specifier, attempts } },
  );
}

/** The plugin object of a module: its default export (ESM or CJS interop) or a `plugin` export. */
export function pluginExportOf(module: Record<string, unknown>): unknown {
  let candidate: unknown = module.default ?? module.plugin;
  // A CJS module imported from ESM puts module.exports on `default`.
  if (candidate && typeof candidate === 'object' && 'default' in candidate && !('create' in candidate)) {
    candidate = (candidate as Record<string, unknown>).default;
  }
  return candidate;
}
