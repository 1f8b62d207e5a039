import { connect, type Socket } from 'node:net';
import { TransferError } from '../errors/transfer-error.js';

const REFUSED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET', 'EADDRNOTAVAIL']);

/**
 * What a probe of a control endpoint found:
 * - 'refused': the peer's host answered that nothing listens (a dead process);
 * - 'zmtp': it accepted and greeted as a ZMTP peer does at once (a te control endpoint);
 * - 'foreign': it accepted and sent bytes no ZMTP peer sends first (another service);
 * - 'silent': it accepted and sent nothing within the probe's time (another service that
 *   waits for its client, such as an HTTP server, or a te process that is stopped);
 * - 'unknown': a timeout or another error (a slow or filtered peer).
 */
export type ProbeResult = 'refused' | 'zmtp' | 'foreign' | 'silent' | 'unknown';

/** The first byte of a ZMTP 3 greeting's signature, which a ZMTP peer sends as soon as it accepts. */
const ZMTP_SIGNATURE_FIRST = 0xff;

/**
 * Probes a control endpoint with one TCP connection (see ProbeResult). zeromq retries
 * refused connects silently and says nothing of a peer that does not speak ZMTP, so without
 * this a dead peer, or a port of another service, looks exactly like a slow peer. An endpoint
 * that cannot even be dialled (a malformed port) rejects with INVALID_ARGUMENT.
 */
export function probeEndpoint(endpoint: string, timeoutMs: number): Promise<ProbeResult> {
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
    let connected = false;
    const done = (r: ProbeResult): void => {
      clearTimeout(timer);
      socket.removeAllListeners();
      socket.on('error', () => undefined);
      socket.destroy();
      resolve(r);
    };
    // Connected and nothing sent by the deadline: silent; not connected by then: unknown.
    const timer = setTimeout(() => done(connected ? 'silent' : 'unknown'), Math.max(1, timeoutMs));
    socket.once('connect', () => (connected = true));
    socket.once('data', (bytes: Buffer) => done(bytes[0] === ZMTP_SIGNATURE_FIRST ? 'zmtp' : 'foreign'));
    socket.once('end', () => done('unknown'));
    socket.once('error', (e: NodeJS.ErrnoException) => done(!connected && REFUSED.has(e.code ?? '') ? 'refused' : 'unknown'));
  });
}
