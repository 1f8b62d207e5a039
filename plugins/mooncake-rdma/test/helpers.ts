import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import {
  PluginRegistry,
  createTransferEngine,
  parseOptions,
  type SegmentDescriptor,
  type TeConfigInput,
  type TransferEngine,
  type Transport,
} from '@te/connector';
import { compileWorkerScript, spawnTargetProcess, type TargetProcess } from '@te/testkit';
import plugin from '../src/index.js';

export const KiB = 1024;
export const MiB = 1024 * KiB;
export const SOURCE = fileURLToPath(new URL('../src/index.ts', import.meta.url));
export const TARGET_SCRIPT = fileURLToPath(new URL('./fixtures/target.ts', import.meta.url));

/** The two loopback providers every test runs on. */
export const PROVIDERS = ['tcp;ofi_rxm', 'sockets'] as const;

/** Engine config for this plugin with the provider set as an option (this process) or FI_PROVIDER (children). */
export function config(provider: string, options: Record<string, unknown> = {}): TeConfigInput {
  return { connector: plugin.name, modulePath: SOURCE, transportOptions: { [plugin.name]: { provider, connectTimeoutMs: 2000, ...options } } };
}

export function registry(): PluginRegistry {
  const r = new PluginRegistry({ builtins: false });
  r.register(plugin.name, plugin);
  return r;
}

export function initiator(provider: string, options: Record<string, unknown> = {}): Promise<TransferEngine> {
  return createTransferEngine({ ...config(provider, options), modulePath: undefined } as TeConfigInput, { registry: registry(), env: {} });
}

/**
 * A target engine in a child process; the provider is chosen there with FI_PROVIDER. The
 * script and the plugin's sources (its modulePath) are bundled to JavaScript first, so the
 * child starts without a TypeScript loader.
 */
export async function target(provider: string, options: Record<string, unknown> = {}): Promise<TargetProcess> {
  const c = { ...config('', options), modulePath: await compileWorkerScript(SOURCE) };
  delete (c.transportOptions as Record<string, Record<string, unknown>>)[plugin.name]!.provider;
  return spawnTargetProcess(await compileWorkerScript(TARGET_SCRIPT), c, { env: { FI_PROVIDER: provider } });
}

/** A bare transport in this process (no engine) with `buffers` registered, and the descriptor a peer opens it with. */
export async function bareSide(
  provider: string,
  buffers: Uint8Array[],
  options: Record<string, unknown> = {},
  log: (level: string, message: string) => void = () => {},
): Promise<{ transport: Transport; descriptor: SegmentDescriptor; addrs: bigint[] }> {
  const epoch = randomBytes(8).readBigUInt64LE() | 1n;
  const name = `side-${randomBytes(3).toString('hex')}`;
  const transport = await plugin.create(
    { segmentName: name, epoch, bindAddress: '127.0.0.1', connectTimeoutMs: 2000, env: {}, log },
    parseOptions(plugin.options, { provider, ...options }, {}, plugin.name),
  );
  const addrs: bigint[] = [];
  const published: SegmentDescriptor['buffers'] = [];
  for (const buffer of buffers) {
    const r = await transport.registerMemory({ buffer, length: BigInt(buffer.length), device: 'cpu', remoteAccess: true });
    addrs.push(r.addr);
    published.push({ addr: r.addr, length: BigInt(buffer.length), device: 'cpu', attrs: { [plugin.name]: r.attrs! } });
  }
  const descriptor: SegmentDescriptor = {
    version: 1,
    name,
    epoch,
    hostname: 'localhost',
    pid: process.pid,
    transports: { [plugin.name]: { class: 'rdma', memoryKinds: ['cpu'], endpoint: transport.endpoint() } },
    buffers: published,
  };
  return { transport, descriptor, addrs };
}
