// An HTTP exchange over a raw socket, for tests of what an HTTP server answers to what a
// well-behaved client (fetch) never sends: a malformed request target, a body that never ends.
import { connect } from 'node:net';

export interface RawAnswer {
  /** The answer's first line, e.g. "HTTP/1.1 413 Payload Too Large". */
  statusLine: string;
  body: string;
  /** Milliseconds from the connect until the server closed the connection. */
  closedMs: number;
}

/**
 * Sends `request` (request line and headers, as text) to 127.0.0.1:`port`, then, if `body` is
 * given, a chunk from it every millisecond until the server closes the connection; resolves
 * with what came back once it is closed (15 s at most).
 */
export function rawHttpAnswer(port: number, request: string, body?: () => Buffer): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(request);
      // An endless body: the sender never stops on its own.
      if (body) timer = setInterval(() => socket.writable && socket.write(body()), 1);
    });
    let timer: NodeJS.Timeout | undefined;
    let text = '';
    socket.on('data', (d) => (text += d));
    socket.on('error', (e: NodeJS.ErrnoException) => {
      // A sender that keeps sending sees the server close its end: a write then fails with
      // EPIPE (or the reset arrives first); the answer already received is what is checked.
      if (body && (e.code === 'EPIPE' || e.code === 'ECONNRESET')) return;
      reject(e);
    });
    socket.on('close', () => {
      clearInterval(timer);
      const [head = '', rest = ''] = text.split('\r\n\r\n');
      resolve({ statusLine: head.split('\r\n')[0] ?? '', body: rest, closedMs: Date.now() - started });
    });
    setTimeout(() => socket.destroy(), 15_000).unref();
  });
}
