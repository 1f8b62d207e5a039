import { TransferError, isTransferError } from '../errors/transfer-error.js';

// The part of etcd3's API this package uses. The package is loaded on first use, so a
// process with p2p metadata never pays for loading gRPC.
export interface EtcdKv {
  key: Buffer;
  value: Buffer;
}
export interface EtcdHeader {
  header: { revision: string };
}
export interface EtcdWatcher {
  on(event: 'put' | 'delete', fn: (kv: EtcdKv) => void): EtcdWatcher;
  on(event: 'connected' | 'data', fn: (res: EtcdHeader) => void): EtcdWatcher;
  on(event: 'error' | 'disconnected', fn: (e?: unknown) => void): EtcdWatcher;
  cancel(): Promise<void>;
}
export interface EtcdLease {
  grant(): Promise<string>;
  revoke(): Promise<void>;
  release(): void;
  put(key: string): { value(v: Buffer): Promise<unknown> };
  on(event: 'lost', fn: (e: unknown) => void): EtcdLease;
}
export interface EtcdClient {
  lease(ttl: number, options?: { autoKeepAlive?: boolean }): EtcdLease;
  get(key: string): { buffer(): Promise<Buffer | null> };
  getAll(): { prefix(p: string): { buffers(): Promise<Record<string, Buffer>>; exec(): Promise<EtcdHeader & { kvs: EtcdKv[] }> } };
  delete(): { key(k: string): Promise<unknown> };
  watch(): { prefix(p: string): { startRevision(r: string): { create(): Promise<EtcdWatcher> }; create(): Promise<EtcdWatcher> } };
  close(): void;
}
type EtcdModule = { Etcd3: new (options: Record<string, unknown>) => EtcdClient };

/** An etcd3 client for `endpoints` (`host:port`); nothing is sent until the first call. */
export async function openEtcdClient(endpoints: string[], dialTimeoutMs: number): Promise<EtcdClient> {
  let mod: EtcdModule;
  try {
    mod = (await import('etcd3')) as unknown as EtcdModule;
  } catch (cause) {
    throw new TransferError(
      'INVALID_CONFIG',
      `etcd metadata needs the etcd3 package, which could not be loaded (${(cause as Error)?.message ?? cause}); reinstall @te/connector with its dependencies`,
      { cause },
    );
  }
  return new mod.Etcd3({ hosts: endpoints.map((e) => `http://${e}`), dialTimeout: dialTimeoutMs });
}

/**
 * A gRPC failure's message, for a person: gRPC ends some with a resolution note that is
 * empty ("… Resolution note: "), and a refused connection says so in a Node error's words.
 */
export function etcdFailureReason(cause: unknown): string {
  const text = String((cause as Error)?.message ?? cause).replace(/\s*Resolution note:\s*$/, '');
  return /ECONNREFUSED/.test(text)
    ? `nothing listens there (connection refused): start etcd, or correct its endpoints (TE_METADATA, metadata.endpoints). gRPC said: ${text}`
    : text;
}

/**
 * Runs one etcd call with a deadline: whatever goes wrong (no answer in time, gRPC
 * unavailable) is PEER_UNREACHABLE naming the endpoints, so callers see a typed error
 * rather than etcd3's retries going on without end.
 */
export function etcdCall<T>(endpoints: string[], p: Promise<T>, ms: number, what: string): Promise<T> {
  const where = `etcd at ${endpoints.join(',')}`;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new TransferError('PEER_UNREACHABLE', `${where} did not answer within ${ms} ms (${what})`, { details: { endpoints } })),
      ms,
    );
  });
  return Promise.race([p, deadline])
    .catch((cause: unknown) => {
      if (isTransferError(cause)) throw cause;
      throw new TransferError('PEER_UNREACHABLE', `${where} failed while ${what}: ${etcdFailureReason(cause)}`, { cause, details: { endpoints } });
    })
    .finally(() => clearTimeout(timer));
}
