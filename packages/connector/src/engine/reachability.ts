import { connect } from 'node:net';

const REFUSED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET', 'EADDRNOTAVAIL']);

/**
 * Whether a control endpoint accepts TCP connections: 'refused' when the peer's host
 * answered that nothing listens (a dead process), 'open' when it accepted, 'unknown' on a
 * timeout or another error (a slow or filtered peer). zeromq retries refused connects
 * silently, so without this a dead peer looks exactly like a slow one.
 */
export function probeEndpoint(endpoint: string, timeoutMs: number): Promise<'open' | 'refused' | 'unknown'> {
  const colon = endpoint.lastIndexOf(':');
  const host = endpoint.slice(0, colon).replace(/^\[|\]$/g, '');
  const port = Number(endpoint.slice(colon + 1));
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (r: 'open' | 'refused' | 'unknown'): void => {
      clearTimeout(timer);
      socket.removeAllListeners();
      socket.on('error', () => undefined);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => done('unknown'), Math.max(1, timeoutMs));
    socket.once('connect', () => done('open'));
    socket.once('error', (e: NodeJS.ErrnoException) => done(REFUSED.has(e.code ?? '') ? 'refused' : 'unknown'));
  });
}
