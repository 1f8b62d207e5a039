/**
 * Mooncake's metadata in etcd (its `etcd://host:2379` mode), so a te process and Mooncake
 * processes can share one etcd: the descriptor under `mooncake/[cluster/]ram/<name>` and the
 * handshake address under `mooncake/[cluster/]rpc_meta/<name>`, plain keys without a lease, as
 * Mooncake writes them (the owner deletes them when it closes). etcd3 is loaded on first use.
 */
import { TransferError } from '@te/connector';
import { mooncakeKeys, parseRpcMeta, rpcMetaValue } from './etcd-keys.js';

const PLUGIN = { plugin: 'mooncake-wire' };

interface Etcd3Client {
  put(key: string): { value(v: string): Promise<unknown> };
  get(key: string): { string(): Promise<string | null> };
  delete(): { key(k: string): Promise<unknown> };
  close(): void;
}

/** `etcd://h:2379[,h2:2379]` (or a bare `h:2379`) as endpoints; undefined for P2PHANDSHAKE. */
export function etcdEndpoints(server: string): string[] | undefined {
  if (server === '' || server === 'P2PHANDSHAKE') return undefined;
  const list = server.replace(/^etcd:\/\//, '');
  if (/^[a-z]+:\/\//.test(list))
    throw new TransferError('INVALID_CONFIG', `metadataServer ${JSON.stringify(server)}: only P2PHANDSHAKE and etcd://host:port are supported`, PLUGIN);
  const endpoints = list
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)
    .map((e) => (/:\d+$/.test(e) ? e : `${e}:2379`));
  if (endpoints.length === 0) throw new TransferError('INVALID_CONFIG', `metadataServer ${JSON.stringify(server)} names no etcd endpoint`, PLUGIN);
  return endpoints;
}

export class MooncakeEtcd {
  private constructor(
    private readonly client: Etcd3Client,
    private readonly where: string,
    private readonly clusterId: string,
    private readonly timeoutMs: number,
  ) {}

  static async connect(endpoints: string[], clusterId: string, timeoutMs: number): Promise<MooncakeEtcd> {
    let mod: { Etcd3: new (o: { hosts: string[]; dialTimeout: number }) => Etcd3Client };
    try {
      mod = (await import('etcd3')) as unknown as typeof mod;
    } catch (cause) {
      throw new TransferError('PROVIDER_UNAVAILABLE', `the etcd client (npm etcd3) cannot be loaded: ${(cause as Error).message}`, { ...PLUGIN, cause });
    }
    const client = new mod.Etcd3({ hosts: endpoints.map((e) => `http://${e}`), dialTimeout: timeoutMs });
    const store = new MooncakeEtcd(client, endpoints.join(','), clusterId, timeoutMs);
    // Fail now, not at the first publish, when etcd is not there.
    await store.get('mooncake/').catch((e: unknown) => {
      client.close();
      throw e;
    });
    return store;
  }

  async #bounded<T>(what: string, p: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        p,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new TransferError('PEER_UNREACHABLE', `etcd at ${this.where}: ${what} got no answer within ${this.timeoutMs} ms`, PLUGIN)),
            this.timeoutMs,
          );
        }),
      ]);
    } catch (e) {
      if (e instanceof TransferError) throw e;
      throw new TransferError('PEER_UNREACHABLE', `etcd at ${this.where}: ${what} failed: ${(e as Error).message}`, { ...PLUGIN, cause: e });
    } finally {
      clearTimeout(timer);
    }
  }

  private get(key: string): Promise<string | undefined> {
    return this.#bounded(`get ${key}`, this.client.get(key).string()).then((v) => v ?? undefined);
  }

  /** Writes this process's descriptor and handshake address under `name`. */
  async publish(name: string, descriptorJson: string, host: string, port: number): Promise<void> {
    const k = mooncakeKeys(name, this.clusterId);
    await this.#bounded(`put ${k.descriptor}`, this.client.put(k.descriptor).value(descriptorJson));
    await this.#bounded(`put ${k.rpcMeta}`, this.client.put(k.rpcMeta).value(rpcMetaValue(host, port)));
  }

  /** Removes both keys (the owner's job when it closes). */
  async remove(name: string): Promise<void> {
    const k = mooncakeKeys(name, this.clusterId);
    await this.#bounded(`delete ${k.descriptor}`, this.client.delete().key(k.descriptor));
    await this.#bounded(`delete ${k.rpcMeta}`, this.client.delete().key(k.rpcMeta));
  }

  /** A segment's descriptor text and handshake address; undefined when `name` is not in etcd. */
  async fetch(name: string): Promise<{ descriptor: string; host: string; port: number } | undefined> {
    const k = mooncakeKeys(name, this.clusterId);
    const descriptor = await this.get(k.descriptor);
    if (descriptor === undefined) return undefined;
    const rpc = await this.get(k.rpcMeta);
    const where = rpc === undefined ? undefined : parseRpcMeta(rpc);
    if (!where)
      throw new TransferError(
        'BAD_FRAME',
        `etcd holds a descriptor for Mooncake segment "${name}" but no valid ${k.rpcMeta} ({"ip_or_host_name","rpc_port"})`,
        PLUGIN,
      );
    return { descriptor, ...where };
  }

  close(): void {
    this.client.close();
  }
}
