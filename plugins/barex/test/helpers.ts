import { fileURLToPath } from 'node:url';
import { PluginRegistry, createTransferEngine, type TeConfigInput, type TransferEngine } from '@te/connector';
import { compileWorkerScript, spawnTargetProcess, type TargetProcess } from '@te/testkit';
import plugin from '../src/index.js';

export const KiB = 1024;
export const MiB = 1024 * KiB;
/** One pool per process: every test uses the same size. */
export const POOL = 64 * MiB;
export const SOURCE = fileURLToPath(new URL('../src/index.ts', import.meta.url));
export const POOL_TARGET = fileURLToPath(new URL('./fixtures/pool-target.ts', import.meta.url));
export const PROVIDERS = ['tcp;ofi_rxm', 'sockets'] as const;

export function registry(): PluginRegistry {
  const r = new PluginRegistry({ builtins: false });
  r.register(plugin.name, plugin);
  return r;
}

/** An engine in this process; `provider` as an option (libfabric reads FI_PROVIDER once per process). */
export function initiator(provider: string, options: Record<string, unknown> = {}): Promise<TransferEngine> {
  const config: TeConfigInput = {
    connector: plugin.name,
    transportOptions: { [plugin.name]: { provider, poolSize: POOL, connectTimeoutMs: 2000, ...options } },
  };
  return createTransferEngine(config, { registry: registry(), env: {} });
}

/**
 * A strict-pool target engine in a child process, provider chosen there with FI_PROVIDER.
 * The script and the plugin's sources (its modulePath) are bundled to JavaScript first, so
 * the child starts without a TypeScript loader.
 */
export async function poolTarget(provider: string, poolSize = POOL): Promise<TargetProcess> {
  const config: TeConfigInput = {
    connector: plugin.name,
    modulePath: await compileWorkerScript(SOURCE),
    transportOptions: { [plugin.name]: { poolSize, connectTimeoutMs: 2000 } },
  };
  return spawnTargetProcess(await compileWorkerScript(POOL_TARGET), config, { env: { FI_PROVIDER: provider } });
}

/** Calls one of the fixture's extra ops (beyond the testkit protocol). */
export function extra<T>(t: TargetProcess, op: string, ...args: unknown[]): Promise<T> {
  return new Promise((resolve, reject) => {
    const id = 1_000_000 + Math.floor(Math.random() * 1e6);
    const onMessage = (m: { id: number; ok: boolean; value?: unknown; error?: string }) => {
      if (m.id !== id) return;
      t.child.off('message', onMessage);
      if (m.ok) resolve(m.value as T);
      else reject(new Error(m.error));
    };
    t.child.on('message', onMessage);
    t.child.send({ id, op, args });
  });
}
