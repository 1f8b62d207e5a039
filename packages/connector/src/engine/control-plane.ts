import { Router } from 'zeromq';
import { TransferError } from '../errors/transfer-error.js';
import { isTransferErrorCode } from '../errors/codes.js';
import { decodeMessage, encodeMessage } from './codec.js';
import { Fifo } from './fifo.js';
import { checkListener } from './listener-check.js';
import { bindAdvice } from './bind-advice.js';
import { CONTROL_VERSION, MAX_CONTROL_MESSAGE_BYTES, checkRequestEnvelope, salvageId, type ReplyEnvelope, type RequestEnvelope } from './messages.js';
import type { ControlKeys } from './control-security.js';
import { MAX_IN_FLIGHT, MAX_URGENT_IN_FLIGHT } from './control-client.js';

export type ControlHandler = (body: unknown) => Promise<unknown> | unknown;

/**
 * Replies the control endpoint queues for one client that has not read them yet; past this
 * they are dropped (the client's requests then time out), so a client that never reads
 * costs the process a bounded amount of memory. A te client keeps half this in flight at
 * most (its ordinary and urgent requests).
 */
const SERVER_REPLY_QUEUE = 2 * (MAX_IN_FLIGHT + MAX_URGENT_IN_FLIGHT);
// Replies of all clients waiting for the socket, which takes one send at a time.
const MAX_WAITING_REPLIES = 65_536;
// Requests whose handlers run at once (a handler may wait: for a transfer, for staging
// space). Past this a request is answered POOL_EXHAUSTED at once, so a flood of requests
// costs a bounded amount of memory and other clients' requests are still read.
export const MAX_RUNNING_HANDLERS = 16_384;
// Of those, the ones one client (one connection's identity) may hold: a client flooding
// requests whose handlers wait is refused past this, while other clients are still served.
// A te client keeps at most half this in flight.
export const MAX_RUNNING_PER_CLIENT = SERVER_REPLY_QUEUE;

/**
 * The process's one control endpoint (zeromq ROUTER). Every user of the engine (the P2P
 * handshake, KV bootstrap, EC coordination) registers handlers by message type here, so
 * one listener serves all of them.
 */
export class ControlServer {
  private readonly router = new Router({ linger: 0, maxMessageSize: MAX_CONTROL_MESSAGE_BYTES, sendHighWaterMark: SERVER_REPLY_QUEUE });

  /** With keys (a shared secret is configured), only clients holding the secret get through. */
  constructor(readonly keys?: ControlKeys) {
    if (keys) {
      this.router.curveServer = true;
      this.router.curveSecretKey = keys.server.secretKey;
    }
  }
  private readonly handlers = new Map<string, ControlHandler>();
  /**
   * Types whose handler was removed while this process lives on (the KV manager or EC
   * connector that served them closed): a peer still sending one hears that the service is
   * gone here, not that it sent a type nobody knows. Bounded by the types ever registered.
   */
  private readonly retired = new Set<string>();
  private endpointValue = '';
  private loop: Promise<void> | undefined;
  /** Replies not yet handed to the socket (see sendReplies). */
  private readonly replies = new Fifo<[Buffer, Buffer]>();
  private replying = false;
  private running = 0;
  /** Running handlers per client identity (latin1 key); an entry goes when its count reaches 0. */
  private readonly runningPerClient = new Map<string, number>();
  /** Set once the owner began to shut down: requests read from then on are refused with it. */
  private shuttingDown: string | undefined;

  async bind(host: string, port: number): Promise<string> {
    const hostPart = host.includes(':') ? `[${host}]` : host;
    if (host.includes(':')) this.router.ipv6 = true;
    const address = `tcp://${hostPart}:${port === 0 ? '*' : port}`;
    try {
      // A fixed port may still be held by a socket of this process closed a moment ago
      // (an engine restarted in place): retry briefly before giving up.
      for (let attempt = 0; ; attempt++) {
        try {
          await this.router.bind(address);
          break;
        } catch (error) {
          const inUse = /in use/i.test((error as Error).message);
          if (port === 0 || !inUse || attempt >= 20) throw error;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    } catch (cause) {
      throw new TransferError(
        'INVALID_CONFIG',
        `Cannot bind the control endpoint on ${hostPart}:${port}: ${(cause as Error).message}; ${bindAdvice(host, port, (cause as Error).message)}`,
        { cause },
      );
    }
    const last = this.router.lastEndpoint ?? '';
    this.endpointValue = last.replace(/^tcp:\/\//, '');
    this.loop = this.serve();
    return this.endpointValue;
  }

  /** `host:port` peers use to reach this process. */
  get endpoint(): string {
    return this.endpointValue;
  }

  handle(type: string, handler: ControlHandler): () => void {
    if (typeof type !== 'string' || type === '')
      throw new TransferError('INVALID_ARGUMENT', `Expected a control message type (a non-empty string), got ${typeof type}`);
    checkListener(handler, `the handler of "${type}"`);
    if (this.handlers.has(type)) throw new TransferError('INVALID_ARGUMENT', `A control handler for "${type}" is already registered`);
    this.handlers.set(type, handler);
    this.retired.delete(type);
    return () => {
      // An older registration's remover leaves a newer handler of the same type in place.
      if (this.handlers.get(type) !== handler) return;
      this.handlers.delete(type);
      this.retired.add(type);
    };
  }

  /**
   * The owner is shutting down (its engine is closing, its handlers going away one by one):
   * every request read from now on is answered `PEER_UNREACHABLE` with `why`, the code a
   * peer gets a moment later when nothing listens any more, instead of an "unknown message
   * type" for a handler already removed. Requests already running finish as they would.
   */
  refuseRequests(why: string): void {
    this.shuttingDown ??= why;
  }

  private async serve(): Promise<void> {
    try {
      for await (const [identity, payload] of this.router) {
        if (!identity || !payload) continue;
        // A handler's failure is answered inside dispatch; nothing may escape as an
        // unhandled rejection (that would end the process).
        this.dispatch(identity, payload).catch(() => undefined);
      }
    } catch {
      // The socket was closed: the loop ends.
    }
  }

  private async dispatch(identity: Buffer, payload: Buffer): Promise<void> {
    let decoded: unknown;
    try {
      decoded = decodeMessage(payload);
    } catch {
      return; // Not msgpack: nothing to correlate a reply with; the sender times out.
    }
    let reply: ReplyEnvelope;
    if (!checkRequestEnvelope.Check(decoded)) {
      const id = salvageId(decoded);
      if (id === undefined) return;
      const first = checkRequestEnvelope.Errors(decoded).First();
      reply = {
        v: CONTROL_VERSION,
        id,
        ok: false,
        code: 'INVALID_ARGUMENT',
        message: `malformed control message: ${first ? `${first.path || '(envelope)'} ${first.message}` : 'not an envelope'}`,
      };
    } else {
      const client = identity.toString('latin1');
      const mine = this.runningPerClient.get(client) ?? 0;
      const refusal =
        mine >= MAX_RUNNING_PER_CLIENT
          ? `this process is already answering ${MAX_RUNNING_PER_CLIENT} control requests of this client; try again later`
          : this.running >= MAX_RUNNING_HANDLERS
            ? `this process is already answering ${MAX_RUNNING_HANDLERS} control requests; try again later`
            : undefined;
      if (refusal !== undefined) {
        reply = { v: CONTROL_VERSION, id: decoded.id, ok: false, code: 'POOL_EXHAUSTED', message: refusal };
      } else {
        this.running++;
        this.runningPerClient.set(client, mine + 1);
        try {
          reply = await this.answer(decoded);
        } finally {
          this.running--;
          const left = (this.runningPerClient.get(client) ?? 1) - 1;
          if (left > 0) this.runningPerClient.set(client, left);
          else this.runningPerClient.delete(client);
        }
      }
    }
    let frame: Buffer;
    try {
      frame = encodeMessage(reply);
    } catch (e) {
      const why = (e as Error)?.message ?? String(e);
      frame = encodeMessage({ v: CONTROL_VERSION, id: reply.id, ok: false, code: 'INTERNAL', message: `the reply cannot be encoded: ${why.slice(0, 200)}` });
    }
    if (this.replies.length >= MAX_WAITING_REPLIES) return; // dropped, as past the socket's queue: the request times out
    this.replies.push([identity, frame]);
    if (!this.replying) void this.sendReplies();
  }

  /** Sends the waiting replies one at a time: the socket refuses a second send while one is under way. */
  private async sendReplies(): Promise<void> {
    this.replying = true;
    try {
      for (let next = this.replies.take(); next && !this.router.closed; next = this.replies.take()) {
        try {
          await this.router.send(next);
        } catch {
          // Peer gone or socket closed: nothing to do.
        }
      }
    } finally {
      this.replying = false;
    }
  }

  /** The reply to a well-formed request; a handler's throw becomes an error reply, never an exception. */
  private async answer(request: RequestEnvelope): Promise<ReplyEnvelope> {
    if (request.v !== CONTROL_VERSION) {
      return {
        v: CONTROL_VERSION,
        id: request.id,
        ok: false,
        code: 'PROTOCOL_MISMATCH',
        message: `control protocol version ${request.v} is not supported (this process speaks ${CONTROL_VERSION})`,
      };
    }
    if (this.shuttingDown !== undefined) return { v: CONTROL_VERSION, id: request.id, ok: false, code: 'PEER_UNREACHABLE', message: this.shuttingDown };
    const handler = this.handlers.get(request.type);
    if (!handler && this.retired.has(request.type)) {
      const message = `this process no longer serves "${request.type}": what served it (a KV manager or EC connector) has closed`;
      return { v: CONTROL_VERSION, id: request.id, ok: false, code: 'PEER_UNREACHABLE', message };
    }
    if (!handler) return { v: CONTROL_VERSION, id: request.id, ok: false, code: 'INVALID_ARGUMENT', message: `unknown control message type "${request.type}"` };
    try {
      return { v: CONTROL_VERSION, id: request.id, ok: true, body: await handler(request.body) };
    } catch (e) {
      const err = e as { code?: unknown; message?: unknown } | null;
      const message = typeof err?.message === 'string' ? err.message.slice(0, 4096) : 'handler failed';
      return { v: CONTROL_VERSION, id: request.id, ok: false, code: isTransferErrorCode(err?.code) ? err.code : 'INTERNAL', message };
    }
  }

  async close(): Promise<void> {
    if (this.router.closed) return;
    // No unbind() before close(): libzmq 4.3.5 can abort the process (pipe.cpp assertion)
    // when a peer's pipe terminates between the two. close() releases the port shortly
    // after; bind() waits for that when a fixed port is reused.
    this.router.close();
    await this.loop;
  }
}
