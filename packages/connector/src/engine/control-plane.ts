import { Dealer, Router } from 'zeromq';
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import { isTransferErrorCode } from '../errors/codes.js';
import { decodeMessage, encodeMessage } from './codec.js';
import { Fifo } from './fifo.js';
import { probeEndpoint } from './reachability.js';
import { MAX_CONTROL_MESSAGE_BYTES, checkReplyEnvelope, checkRequestEnvelope, salvageId, type ReplyEnvelope, type RequestEnvelope } from './messages.js';
import type { ControlKeys } from './control-security.js';

/** Version of the control-plane envelope. Fields are appended and optional. */
export const CONTROL_VERSION = 1;

/**
 * zmq_connect first drains the socket's command mailbox with a zero-timeout poll, which a
 * signal arriving at that moment interrupts (EINTR: a child process exiting is enough, as
 * SIGCHLD has a handler in any Node.js process that spawned one). zeromq.js retries bind,
 * unbind, send and receive on EINTR but not connect. A connect that failed this way has
 * not started anything yet, so it is simply made again.
 */
function connectThroughSignals(socket: Dealer, address: string): void {
  for (let attempt = 1; ; attempt++) {
    try {
      socket.connect(address);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EINTR' || attempt >= 1000) throw err;
    }
  }
}

export type ControlHandler = (body: unknown) => Promise<unknown> | unknown;

/**
 * Replies the control endpoint queues for one client that has not read them yet; past this
 * they are dropped (the client's requests then time out), so a client that never reads
 * costs the process a bounded amount of memory. A client keeps fewer requests than this in
 * flight (MAX_IN_FLIGHT).
 */
const SERVER_REPLY_QUEUE = 4_096;
// Replies of all clients waiting for the socket, which takes one send at a time.
const MAX_WAITING_REPLIES = 65_536;
// Requests whose handlers run at once (a handler may wait: for a transfer, for staging
// space). Past this a request is answered POOL_EXHAUSTED at once, so a flood of requests
// costs a bounded amount of memory and other clients' requests are still read.
export const MAX_RUNNING_HANDLERS = 16_384;
// Of those, the ones one client (one connection's identity) may hold: a client flooding
// requests whose handlers wait is refused past this, while other clients are still served.
// A te client keeps at most MAX_IN_FLIGHT requests in flight, a quarter of this.
export const MAX_RUNNING_PER_CLIENT = 4_096;

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
  private endpointValue = '';
  private loop: Promise<void> | undefined;
  /** Replies not yet handed to the socket (see sendReplies). */
  private readonly replies = new Fifo<[Buffer, Buffer]>();
  private replying = false;
  private running = 0;
  /** Running handlers per client identity (latin1 key); an entry goes when its count reaches 0. */
  private readonly runningPerClient = new Map<string, number>();

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
        `Cannot bind the control endpoint on ${hostPart}:${port}: ${(cause as Error).message}; choose another port (TE_HANDSHAKE_PORT) or address (MC_TCP_BIND_ADDRESS)`,
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
    if (this.handlers.has(type)) throw new TransferError('INVALID_ARGUMENT', `A control handler for "${type}" is already registered`);
    this.handlers.set(type, handler);
    return () => this.handlers.delete(type);
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
    const handler = this.handlers.get(request.type);
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

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: TransferError) => void;
  timer: NodeJS.Timeout;
  /** The request's message type, named in the error that fails it. */
  type: string;
}

const PROBE_AFTER_SILENCE_MS = 1_000;
const PROBE_TIMEOUT_MS = 1_000;
// Requests of one client sent and not yet answered. The peer's control socket queues at most
// SERVER_REPLY_QUEUE replies for one client and drops the rest, so a burst larger than
// that would lose answers; the requests past this wait in the client's outbox instead.
const MAX_IN_FLIGHT = 1_024;
// Requests of one client waiting for their turn to be sent: past this the peer is not taking
// them in as fast as they are made, and a new request fails at once.
const MAX_WAITING_SENDS = 16_384;

/** A connection to one peer's control endpoint; requests are multiplexed by id. */
export class ControlClient {
  private readonly dealer = new Dealer({ linger: 0, sendHighWaterMark: 1000, maxMessageSize: MAX_CONTROL_MESSAGE_BYTES });
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed = false;
  /** When the peer last answered anything: a peer silent for longer is probed while requests wait. */
  private lastAnswerAt = 0;
  /** The one timer that looks at a silent peer while requests wait (see watchWhileWaiting). */
  private watch: NodeJS.Timeout | undefined;
  /** A probe of the endpoint is under way; when the latest one began. */
  private probing = false;
  private lastProbeAt = 0;
  /** When a request was last made (idle clients are closed by their owner). */
  lastUsedAt = Date.now();
  /**
   * Requests not yet handed to the socket. The socket takes one send at a time (a second
   * one while the first waits for room is refused), so sends go out in order from here,
   * while fewer than MAX_IN_FLIGHT sent ones wait for their answers (`inFlight`).
   */
  private readonly outbox = new Fifo<{ id: number; frame: Buffer }>();
  private readonly inFlight = new Set<number>();
  private sending = false;

  /** Requests waiting for an answer: a busy client is never evicted. */
  get busy(): boolean {
    return this.pending.size > 0;
  }

  constructor(
    readonly endpoint: string,
    keys?: ControlKeys,
  ) {
    if (endpoint.startsWith('[')) this.dealer.ipv6 = true;
    if (keys) {
      const mine = keys.client();
      this.dealer.curveServerKey = keys.server.publicKey;
      this.dealer.curvePublicKey = mine.publicKey;
      this.dealer.curveSecretKey = mine.secretKey;
    }
    connectThroughSignals(this.dealer, `tcp://${endpoint}`);
    void this.receiveLoop();
  }

  private async receiveLoop(): Promise<void> {
    try {
      for await (const [payload] of this.dealer) {
        if (!payload) continue;
        let reply: ReplyEnvelope;
        try {
          const decoded = decodeMessage(payload);
          if (!checkReplyEnvelope.Check(decoded)) continue; // a malformed reply is dropped; its request times out
          reply = decoded;
        } catch {
          continue;
        }
        this.lastAnswerAt = Date.now();
        const p = this.take(reply.id);
        if (!p) continue;
        if (reply.ok) p.resolve(reply.body);
        else p.reject(new TransferError(isTransferErrorCode(reply.code) ? reply.code : 'INTERNAL', `${this.endpoint}: ${reply.message ?? 'request failed'}`));
      }
    } catch {
      // Closed.
    }
  }

  request<T = unknown>(type: string, body: unknown, timeoutMs: number): Promise<T> {
    if (this.closed) return Promise.reject(new TransferError('ENGINE_CLOSED', `control client for ${this.endpoint} is closed`));
    this.lastUsedAt = Date.now();
    const id = this.nextId++;
    let frame: Buffer;
    try {
      frame = encodeMessage({ v: CONTROL_VERSION, id, type, body } satisfies RequestEnvelope);
    } catch (cause) {
      return Promise.reject(
        new TransferError('INVALID_ARGUMENT', `control request "${type}" cannot be encoded: ${(cause as Error)?.message ?? String(cause)}`, { cause }),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const fail = (error: TransferError): void => this.take(id)?.reject(error);
      const timer = setTimeout(() => {
        fail(
          new TransferError(
            'TIMEOUT',
            `No answer from ${this.endpoint} to "${type}" within ${timeoutMs} ms; is the peer running and is its control endpoint reachable?`,
            { details: { endpoint: this.endpoint, type } },
          ),
        );
      }, timeoutMs);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, type });
      this.post(id, frame, fail);
      if (!this.pending.has(id)) return; // refused at once: nothing to look at
      // A peer silent for a while is looked at now; one that answered a moment ago may have
      // died since, and is looked at once it has been silent that long.
      this.look();
      this.watchWhileWaiting();
    });
  }

  /**
   * While requests wait, the client looks at its peer whenever the peer has been silent for
   * PROBE_AFTER_SILENCE_MS: a dead peer refuses the connection at once, and every waiting
   * request fails fast as PEER_UNREACHABLE rather than at its deadline; one that was there at
   * the first look may exit while it is asked. One timer per client, however many requests wait.
   */
  private watchWhileWaiting(): void {
    if (this.watch || this.closed || this.pending.size === 0) return;
    const silentFor = Date.now() - this.lastAnswerAt;
    const wait = silentFor < PROBE_AFTER_SILENCE_MS ? PROBE_AFTER_SILENCE_MS - silentFor + 1 : PROBE_AFTER_SILENCE_MS;
    this.watch = setTimeout(() => {
      this.watch = undefined;
      this.look();
      this.watchWhileWaiting();
    }, wait);
  }

  /**
   * Probes the peer's endpoint (one TCP connect) when requests wait and it has been silent,
   * unless a probe is under way or began less than a second ago. A refused connection fails every
   * waiting request; a probe that cannot even be made (a malformed endpoint) fails them too:
   * every outcome is handled here, none may escape as an unhandled rejection.
   */
  private look(): void {
    const now = Date.now();
    if (this.closed || this.pending.size === 0 || now - this.lastAnswerAt <= PROBE_AFTER_SILENCE_MS) return;
    // A look within a second of the last probe shares it: the peer gets about one probe
    // connection a second from this client.
    if (this.probing || now - this.lastProbeAt < PROBE_AFTER_SILENCE_MS) return;
    this.probing = true;
    this.lastProbeAt = now;
    probeEndpoint(this.endpoint, PROBE_TIMEOUT_MS).then(
      (r) => {
        this.probing = false;
        if (r === 'refused')
          this.failWaiting(
            (type) =>
              new TransferError('PEER_UNREACHABLE', `${this.endpoint} refused the connection: no process listens there (it exited or never started)`, {
                details: { endpoint: this.endpoint, type },
              }),
          );
      },
      (e: unknown) => {
        this.probing = false;
        this.failWaiting((type) =>
          isTransferError(e)
            ? e
            : new TransferError('PEER_UNREACHABLE', `Cannot reach ${this.endpoint}: ${(e as Error)?.message ?? String(e)}`, {
                cause: e,
                details: { endpoint: this.endpoint, type },
              }),
        );
      },
    );
  }

  /** Fails every request still waiting, each with the error `errorFor` makes for its type. */
  private failWaiting(errorFor: (type: string) => TransferError): void {
    for (const id of [...this.pending.keys()]) {
      const p = this.take(id);
      p?.reject(errorFor(p.type));
    }
  }

  /** Ends a request's wait (answered, failed or timed out): its timers stop, its place in flight frees. */
  private take(id: number): Pending | undefined {
    const p = this.pending.get(id);
    if (!p) return undefined;
    this.pending.delete(id);
    clearTimeout(p.timer);
    if (this.pending.size === 0) this.stopWatching();
    if (this.inFlight.delete(id) && this.outbox.length > 0 && !this.sending && !this.closed) void this.sendWaiting();
    return p;
  }

  /** Queues a request's frame and starts the sender if it is idle; refuses one past the bound. */
  private post(id: number, frame: Buffer, fail: (error: TransferError) => void): void {
    // At the bound, entries of requests that ended while they waited (timed out) go first,
    // when there are any: the requests still waiting are those pending and not in flight.
    const waiting = this.pending.size - this.inFlight.size - 1; // this one is not queued yet
    if (this.outbox.length >= MAX_WAITING_SENDS && this.outbox.length > waiting) this.outbox.keep((m) => this.pending.has(m.id));
    if (this.outbox.length >= MAX_WAITING_SENDS) {
      fail(
        new TransferError(
          'POOL_EXHAUSTED',
          `${MAX_WAITING_SENDS} control requests to ${this.endpoint} are waiting to be sent: the peer does not take them in`,
          {
            details: { endpoint: this.endpoint },
          },
        ),
      );
      return;
    }
    this.outbox.push({ id, frame });
    if (!this.sending) void this.sendWaiting();
  }

  /**
   * Sends what waits, one send at a time, while fewer than MAX_IN_FLIGHT wait for answers (an
   * answer starts it again); a request that ended meanwhile is not sent.
   */
  private async sendWaiting(): Promise<void> {
    this.sending = true;
    try {
      while (this.outbox.length > 0 && this.inFlight.size < MAX_IN_FLIGHT && !this.closed) {
        const next = this.outbox.take()!;
        if (!this.pending.has(next.id)) continue;
        this.inFlight.add(next.id);
        try {
          await this.dealer.send(next.frame);
        } catch (cause) {
          this.take(next.id)?.reject(
            new TransferError('PEER_UNREACHABLE', `Cannot send to ${this.endpoint}: ${(cause as Error)?.message ?? String(cause)}`, { cause }),
          );
        }
      }
    } finally {
      this.sending = false;
    }
  }

  private stopWatching(): void {
    clearTimeout(this.watch);
    this.watch = undefined;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stopWatching();
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new TransferError('ENGINE_CLOSED', `control client for ${this.endpoint} closed`));
      this.pending.delete(id);
    }
    this.outbox.clear();
    this.inFlight.clear();
    this.dealer.close();
  }
}
