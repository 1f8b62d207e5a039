import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { TransferError } from '../errors/transfer-error.js';

export interface LoadAddonOptions {
  /** Plugin name, for the error's `plugin`. */
  plugin: string;
  /** Addon file name, e.g. `te_mooncake_tcp.node`. */
  file: string;
  /** The plugin package's root folder (where `build/` is). */
  packageRoot: string;
  /** Environment variable naming a prebuilt addon to load instead. */
  envVar?: string;
  /** Extra "possible solutions" lines for the error (how to build, what to install). */
  solutions?: string[];
  env?: NodeJS.ProcessEnv;
}

interface AddonWithErrors {
  setErrorFactory?(factory: (status: number, message: string) => Error): void;
}

/**
 * Loads a plugin's Node-API addon from the usual places (an override from the
 * environment, then `build/Release`, then `build/Debug`) and hands it the TransferError
 * factory, so native code throws te's error class. A failure lists every path tried,
 * why each failed, and how to fix it.
 */
export function loadNativeAddon<T>(options: LoadAddonOptions): T {
  const env = options.env ?? process.env;
  const override = options.envVar ? env[options.envVar] : undefined;
  const candidates = [override, join(options.packageRoot, 'build', 'Release', options.file), join(options.packageRoot, 'build', 'Debug', options.file)].filter(
    (p): p is string => typeof p === 'string' && p.length > 0,
  );
  const require = createRequire(join(options.packageRoot, 'package.json'));
  const problems: string[] = [];
  for (const path of candidates) {
    if (!existsSync(path)) {
      problems.push(`${path}: not found`);
      continue;
    }
    try {
      const mod = require(path) as T & AddonWithErrors;
      mod.setErrorFactory?.((status, message) => TransferError.fromStatus(status, message, { plugin: options.plugin }));
      return mod;
    } catch (e) {
      problems.push(`${path}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  const solutions = [
    ...(options.solutions ?? []),
    'reinstall so the install script builds it: `npm ci` at the repository root (without --ignore-scripts)',
    ...(options.envVar ? [`point ${options.envVar} at a built ${options.file}`] : []),
  ];
  throw new TransferError(
    'PLUGIN_LOAD_FAILED',
    `cannot load the native addon ${options.file}. Tried:\n  ${problems.join('\n  ')}\nPossible solutions:\n${solutions.map((s) => `  - ${s}`).join('\n')}`,
    {
      plugin: options.plugin,
      details: { tried: candidates },
    },
  );
}
