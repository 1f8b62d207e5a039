import { networkInterfaces } from 'node:os';

/** This machine's IP addresses, as `os.networkInterfaces()` lists them. */
function localAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flatMap((list) => list ?? [])
    .map((a) => a.address);
}

/**
 * What to change when the control endpoint cannot bind, from the socket's reason: a port
 * another process holds, an address no interface of this machine has, or neither.
 */
export function bindAdvice(host: string, port: number, reason: string): string {
  if (/in use/i.test(reason)) return `port ${port} is held by another process; choose another port (TE_HANDSHAKE_PORT), or 0 for any free one`;
  if (/assign requested address|no such device/i.test(reason)) {
    const mine = localAddresses();
    const shown = mine.slice(0, 8).join(', ') + (mine.length > 8 ? `, +${mine.length - 8}` : '');
    return `${host} is not an address of this machine (its addresses: ${shown || 'none found'}); set MC_TCP_BIND_ADDRESS (bindAddress) to the address peers should use to reach this process`;
  }
  return 'choose another port (TE_HANDSHAKE_PORT) or address (MC_TCP_BIND_ADDRESS)';
}
