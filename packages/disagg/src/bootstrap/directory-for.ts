import { TransferError, type TransferEngine } from '@te/connector';
import { BootstrapClient } from './client.js';
import type { RankDirectory } from './directory.js';
import { EtcdRankDirectory } from './etcd-directory.js';

/** Where prefill ranks are registered and found: the instance's bootstrap HTTP server, or the cluster store. */
export type BootstrapStore = 'http' | 'etcd';

/** The store named by the option, else by TE_PD_BOOTSTRAP_STORE, else the HTTP server. */
export function bootstrapStoreOf(option: BootstrapStore | undefined, env: NodeJS.ProcessEnv = process.env): BootstrapStore {
  const v = option ?? env.TE_PD_BOOTSTRAP_STORE ?? 'http';
  if (v !== 'http' && v !== 'etcd')
    throw new TransferError('INVALID_CONFIG', `Expected bootstrapStore (TE_PD_BOOTSTRAP_STORE) to be "http" or "etcd", got ${JSON.stringify(v)}`);
  return v;
}

/** A factory of rank directories for `store`, checked against the engine's metadata. */
export function directoryFactory(store: BootstrapStore, engine: TransferEngine): (address: string) => RankDirectory {
  if (store === 'http') return (address) => new BootstrapClient(address);
  const records = engine.metadataRecords;
  if (!records) {
    throw new TransferError(
      'INVALID_CONFIG',
      'bootstrapStore "etcd" keeps prefill ranks in the cluster store, but this engine\'s metadata is not etcd: set metadata to "etcd://host:2379" (or TE_METADATA)',
    );
  }
  return (address) => new EtcdRankDirectory(address, records);
}
