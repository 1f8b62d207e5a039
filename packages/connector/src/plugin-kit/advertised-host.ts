import { networkInterfaces } from 'node:os';

/**
 * The host a network transport publishes in its segment descriptor: `override` when set,
 * else the bind address, unless that is a wildcard (0.0.0.0, ::), which no peer can dial:
 * then the first external IPv4 address of this machine, or loopback where it has none.
 */
export function advertisedHost(bind: string, override?: string): string {
  if (override) return override;
  if (bind !== '0.0.0.0' && bind !== '::') return bind;
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}
