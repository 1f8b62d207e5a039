import { connect, type Socket } from 'node:net';
import { TransferError } from '../errors/transfer-error.js';

const REFUSED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET', 'EADDRNOTAVAIL']);

/**
 * Whether a control endpoint accepts TCP connections: 'refused' when the peer's host
 * answered that nothing listens (a dead process), 'open' when it accepted, 'unknown' on a
 * timeout or another error (a slow or filtered peer). zeromq retries refused connects
 * silently, so without this a dead peer looks exactly like a slow one. An endpoint that
 * cannot even be dialled (a malformed port) rejects with INVALID_ARGUMENT.
 */
export function probeEndpoint(endpoint: string, timeoutMs: number): Promise<'open' | 'refused' | 'unknown'> {
  const colon = endpoint.lastIndexOf(':');
  const host = endpoint.slice(0, colon).replace(/^\[|\]$/g, '');
  const port = Number(endpoint.slice(colon + 1));
  return new Promise((resolve, reject) => {
    let socket: Socket;
    try {
      // Throws at once for an endpoint that cannot be dialled (no port, a port out of range).
      socket = connect({ host, port });
    } catch (cause) {
      reject(
        new TransferError(
          'INVALID_ARGUMENT',
          `Cannot reach control endpoint ${JSON.stringify(endpoint.slice(0, 80))}: ${(cause as Error)?.message ?? String(cause)}`,
          { cause, details: { endpoint: endpoint.slice(0, 300) } },
        ),
      );
      return;
    }
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
