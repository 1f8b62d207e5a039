/**
 * Mooncake's key layout in a shared metadata store (etcd, redis, HTTP), so a te process can
 * write its Mooncake descriptor where Mooncake peers look, and read theirs:
 *   <P>ram/<segment>       the segment descriptor JSON (a name containing "/" is used as <P><name>)
 *   <P>rpc_meta/<segment>  {"ip_or_host_name": host, "rpc_port": handshake port}
 * with <P> = "mooncake/" plus "<MC_METADATA_CLUSTER_ID>/" when that is set.
 */
export interface MooncakeKeys {
  descriptor: string;
  rpcMeta: string;
}

export function mooncakeKeys(segment: string, clusterId = ''): MooncakeKeys {
  const prefix = `mooncake/${clusterId ? `${clusterId}/` : ''}`;
  return {
    descriptor: segment.includes('/') ? `${prefix}${segment}` : `${prefix}ram/${segment}`,
    rpcMeta: `${prefix}rpc_meta/${segment}`,
  };
}

/** The value stored under `rpcMeta`. */
export function rpcMetaValue(host: string, port: number): string {
  return `${JSON.stringify({ ip_or_host_name: host, rpc_port: port })}\n`;
}

/** Reads an `rpcMeta` value; undefined when it is not one. */
export function parseRpcMeta(text: string): { host: string; port: number } | undefined {
  try {
    const v = JSON.parse(text) as { ip_or_host_name?: unknown; rpc_port?: unknown };
    if (typeof v.ip_or_host_name !== 'string' || !Number.isInteger(v.rpc_port) || (v.rpc_port as number) < 1 || (v.rpc_port as number) > 65535)
      return undefined;
    return { host: v.ip_or_host_name, port: v.rpc_port as number };
  } catch {
    return undefined;
  }
}
