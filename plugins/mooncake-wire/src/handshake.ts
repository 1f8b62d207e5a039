/**
 * Mooncake's P2P handshake port, both sides: one request frame per connection, answered with
 * a frame of the same type. The server is bounded (connections at once, frame size, a read
 * deadline per connection) and serves connections concurrently, so a silent client cannot
 * stall other peers as it can on Mooncake's serial server.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { TransferError } from '@te/connector';
import {
  DEFAULT_MAX_FRAME,
  FrameReader,
  MSG_CONNECTION,
  MSG_LEGACY,
  MSG_METADATA,
  MSG_NOTIFY,
  MSG_PROBE,
  encodeFrame,
  type HandshakeFrame,
} from './handshake-frame.js';
import { parseJson64 } from './json64.js';

const PLUGIN = { plugin: 'mooncake-wire' };

export interface HandshakeHandlers {
  /** This process's descriptor JSON (answer to a Metadata request). */
  metadata(): string;
  /** A peer's notification; false: not accepted (the peer's batch then reports a failure). */
  notify(name: string, message: string): boolean;
}

export interface HandshakeServerOptions {
  host: string;
  port: number;
  maxConnections: number;
  timeoutMs: number;
  maxFrame?: number;
}

/** The reply a TCP-only Mooncake peer gives to an RDMA connection handshake: all empty. */
const EMPTY_CONNECTION_REPLY = '{"local_gid":"","local_lid":0,"local_nic_path":"","payload":"","peer_nic_path":"","qp_num":[],"reply_msg":""}\n';

export class HandshakeServer {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  /** Frames refused (malformed, too long, unknown) since start; for tests and describe(). */
  refused = 0;
  served = 0;

  private constructor(server: Server) {
    this.#server = server;
  }

  static async listen(o: HandshakeServerOptions, h: HandshakeHandlers): Promise<HandshakeServer> {
    const server = createServer();
    const self = new HandshakeServer(server);
    server.maxConnections = o.maxConnections;
    server.on('connection', (socket) => self.#serve(socket, o, h));
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e) =>
        reject(new TransferError('INVALID_CONFIG', `cannot listen for Mooncake handshakes on ${o.host}:${o.port}: ${e.message}`, { ...PLUGIN, cause: e })),
      );
      server.listen({ host: o.host, port: o.port, exclusive: true }, () => resolve());
    });
    return self;
  }

  get port(): number {
    return (this.#server.address() as { port: number }).port;
  }

  #serve(socket: Socket, o: HandshakeServerOptions, h: HandshakeHandlers): void {
    this.#sockets.add(socket);
    const reader = new FrameReader(o.maxFrame ?? DEFAULT_MAX_FRAME);
    const timer = setTimeout(() => socket.destroy(), o.timeoutMs);
    let answered = false;
    socket.on('close', () => {
      clearTimeout(timer);
      this.#sockets.delete(socket);
    });
    socket.on('error', () => undefined);
    socket.on('data', (chunk) => {
      if (answered) return socket.destroy();
      let frame: HandshakeFrame | undefined;
      let reply: string;
      try {
        frame = reader.push(chunk);
        if (!frame) return;
        reply = this.#answer(frame, h);
      } catch {
        this.refused++;
        return socket.destroy();
      }
      answered = true;
      this.served++;
      // Answer, then half-close; the peer closes (or the timer does).
      socket.end(encodeFrame(frame.type, reply));
    });
  }

  #answer(f: HandshakeFrame, h: HandshakeHandlers): string {
    // Every request body must be JSON (Mooncake closes the connection otherwise).
    const body = parseJson64(f.json.trim() === '' ? 'null' : f.json);
    switch (f.type) {
      case MSG_METADATA:
        return h.metadata();
      case MSG_PROBE:
        return '{"status":"success"}\n';
      case MSG_NOTIFY: {
        const m = body as { name?: unknown; notify_msg?: unknown } | null;
        const ok = m !== null && typeof m === 'object' && typeof m.name === 'string' && typeof m.notify_msg === 'string' && h.notify(m.name, m.notify_msg);
        return `{"name":"","notify_msg":"${ok ? 'success' : ''}"}\n`;
      }
      case MSG_CONNECTION:
      case MSG_LEGACY:
        return EMPTY_CONNECTION_REPLY;
      default:
        throw new TransferError('BAD_FRAME', `unknown handshake type ${f.type}`, PLUGIN);
    }
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/**
 * Sends one handshake request to `host:port` and returns the reply's JSON text. Errors:
 * PEER_UNREACHABLE (connect failed), TIMEOUT, CONNECTION_LOST (closed before a whole reply),
 * BAD_FRAME (malformed reply, or one of another type).
 */
export function handshake(host: string, port: number, type: number, json: string, timeoutMs: number, maxFrame = DEFAULT_MAX_FRAME): Promise<string> {
  return new Promise((resolve, reject) => {
    const where = `${host}:${port}`;
    const socket = createConnection({ host, port });
    const reader = new FrameReader(maxFrame);
    let connected = false;
    let done = false;
    const finish = (e: TransferError | undefined, text?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (e) reject(e);
      else resolve(text!);
    };
    const timer = setTimeout(
      () => finish(new TransferError('TIMEOUT', `Mooncake handshake with ${where} got no answer within ${timeoutMs} ms`, PLUGIN)),
      timeoutMs,
    );
    socket.on('connect', () => {
      connected = true;
      socket.write(encodeFrame(type, json));
    });
    socket.on('data', (chunk) => {
      try {
        const f = reader.push(chunk);
        if (!f) return;
        if (f.type !== type) throw new TransferError('BAD_FRAME', `answered handshake type ${f.type} to a request of type ${type}`, PLUGIN);
        finish(undefined, f.json);
      } catch (e) {
        const t = e as TransferError;
        finish(new TransferError('BAD_FRAME', `Mooncake handshake with ${where}: ${t.message} (is it a Mooncake handshake port?)`, PLUGIN));
      }
    });
    socket.on('error', (e) => {
      finish(new TransferError(connected ? 'CONNECTION_LOST' : 'PEER_UNREACHABLE', `Mooncake handshake with ${where}: ${e.message}`, { ...PLUGIN, cause: e }));
    });
    socket.on('close', () =>
      finish(new TransferError('CONNECTION_LOST', `Mooncake handshake with ${where}: the peer closed the connection without a whole answer`, PLUGIN)),
    );
  });
}
