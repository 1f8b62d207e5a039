import { TransferError } from '../errors/transfer-error.js';

/**
 * Parses a metadata connection string into its parts: `p2p` (also Mooncake's
 * `P2PHANDSHAKE`) or `etcd://host:2379[,host2:2379]` (Mooncake's `metadata_server`
 * spelling). Endpoints are `host:port`; the port defaults to 2379.
 */
export function parseMetadataString(text: string, source = '`metadata`'): { type: 'p2p' } | { type: 'etcd'; endpoints: string[] } {
  if (typeof text !== 'string')
    throw new TransferError('INVALID_CONFIG', `Expected ${source} to be "p2p" or "etcd://host:port[,host:port]", got ${text === null ? 'null' : typeof text}`);
  const s = text.trim();
  if (/^(p2p|p2phandshake)$/i.test(s)) return { type: 'p2p' };
  const m = /^etcd:\/\/(.+)$/i.exec(s);
  if (!m) {
    throw new TransferError('INVALID_CONFIG', `Expected ${source} to be "p2p" or "etcd://host:port[,host:port]", got ${JSON.stringify(text)}`);
  }
  const endpoints = m[1]!.split(',').map((e) =>
    e
      .trim()
      .replace(/^etcd:\/\//i, '')
      .replace(/\/+$/, ''),
  );
  for (const e of endpoints) checkEndpoint(e, source);
  return { type: 'etcd', endpoints: endpoints.map((e) => (/:\d+$/.test(e) ? e : `${e}:2379`)) };
}

/** A `host:port` (or bare host) of an etcd member; IPv6 literals in brackets. */
export function checkEndpoint(endpoint: string, source = '`metadata.endpoints`'): void {
  const ok = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:(\d{1,5}))?$/.exec(endpoint);
  if (!ok || (ok[3] !== undefined && (Number(ok[3]) < 1 || Number(ok[3]) > 65535))) {
    throw new TransferError('INVALID_CONFIG', `Expected each etcd endpoint in ${source} to be host:port, got ${JSON.stringify(endpoint)}`);
  }
}
