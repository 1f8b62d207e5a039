import { Dealer } from 'zeromq';
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import { isTransferErrorCode } from '../errors/codes.js';
import { decodeMessage, encodeMessage } from './codec.js';
import { Fifo } from './fifo.js';
import { probeEndpoint, type ProbeResult } from './reachability.js';
import { CONTROL_VERSION, MAX_CONTROL_MESSAGE_BYTES, checkReplyEnvelope, type ReplyEnvelope, type RequestEnvelope } from './messages.js';
import type { ControlKeys } from './control-security.js';
import { checkSegmentName } from './segment-name.js';

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

export interface ControlRequestOptions {
  /**
   * The request goes ahead of ordinary ones and has places in flight of its own, so that
   * ordinary requests a peer holds for long (a staging allocation waiting for space, a load
   * waiting for its data) never delay it: for liveness checks and aborts, whose handlers
   * answer at once.
   */
  urgent?: boolean;
}

/**
 * Requests of one client sent and not yet answered, ordinary and urgent. The peer's control
 * socket queues a bounded number of replies for one client and drops the rest, so a burst
 * larger than that would lose answers; the requests past these wait in the client's queues.
 */
export const MAX_IN_FLIGHT = 1_024;
export const MAX_URGENT_IN_FLIGHT = 1_024;
// Requests of one client waiting for their turn to be sent, in each lane: past this the peer
// is not taking them in as fast as they are made, and a new request fails at once.
const MAX_WAITING_SENDS = 16_384;

const PROBE_AFTER_SILENCE_MS = 1_000;
const PROBE_TIMEOUT_MS = 1_000;

/** Requests of one kind (ordinary or urgent): waiting to be sent, and sent. */
class Lane {
  /**
   * Requests not yet handed to the socket. The socket takes one send at a time (a second
   * one while the first waits for room is refused), so sends go out in order from here,
   * while fewer than `maxInFlight` sent ones wait for their answers.
   */
  readonly outbox = new Fifo<{ id: number; frame: Buffer }>();
  readonly inFlight = new Set<number>();
  /** Entries of the outbox whose requests ended while they waited (timed out): skipped, or pruned at the bound. */
  stale = 0;
  constructor(readonly maxInFlight: number) {}

  /** Whether a request of this lane may be sent now. */
  get ready(): boolean {
    return this.outbox.length > 0 && this.inFlight.size < this.maxInFlight;
  }
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: TransferError) => void;
  timer: NodeJS.Timeout;
  /** The request's message type, named in the error that fails it. */
  type: string;
  lane: Lane;
  /** In its lane's outbox, not yet sent. */
  queued: boolean;
}

/** A connection to one peer's control endpoint; requests are multiplexed by id. */
export class ControlClient {
  private readonly dealer: Dealer;
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
  /** What the last probe found: a request that times out says so when it was 'silent'. */
  private lastProbe: ProbeResult | undefined;
  /** When a request was last made (idle clients are closed by their owner). */
  lastUsedAt = Date.now();
  /** Urgent requests are sent first; each lane has its own places in flight. */
  private readonly urgent = new Lane(MAX_URGENT_IN_FLIGHT);
  private readonly ordinary = new Lane(MAX_IN_FLIGHT);
  private sending = false;

  /** Requests waiting for an answer: a busy client is never evicted. */
  get busy(): boolean {
    return this.pending.size > 0;
  }

  constructor(
    readonly endpoint: string,
    keys?: ControlKeys,
  ) {
    // Checked before the socket exists: zeromq's own refusal is a bare "Invalid argument".
    checkSegmentName(endpoint);
    this.dealer = new Dealer({ linger: 0, sendHighWaterMark: 1000, maxMessageSize: MAX_CONTROL_MESSAGE_BYTES });
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

  request<T = unknown>(type: string, body: unknown, timeoutMs: number, options?: ControlRequestOptions): Promise<T> {
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
    const lane = options?.urgent === true ? this.urgent : this.ordinary;
    return new Promise<T>((resolve, reject) => {
      const fail = (error: TransferError): void => this.take(id)?.reject(error);
      const timer = setTimeout(() => {
        const why =
          this.lastProbe === 'silent'
            ? `${this.endpoint} accepts connections but sent no ZMTP greeting, as a te control endpoint does at once: another service listens there, or the te process is stopped`
            : 'is the peer running and is its control endpoint reachable?';
        fail(
          new TransferError('TIMEOUT', `No answer from ${this.endpoint} to "${type}" within ${timeoutMs} ms; ${why}`, {
            details: { endpoint: this.endpoint, type },
          }),
        );
      }, timeoutMs);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, type, lane, queued: false });
      this.post(lane, id, frame, fail);
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
   * unless a probe is under way or began less than a second ago. A refused connection fails
   * every waiting request; a probe that cannot even be made (a malformed endpoint) fails them
   * too: every outcome is handled here, none may escape as an unhandled rejection.
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
        this.lastProbe = r;
        // Bytes no ZMTP peer sends first: whatever listens there is not a te control endpoint,
        // and no answer will come.
        if (r === 'foreign')
          this.failWaiting(
            (type) =>
              new TransferError(
                'PROTOCOL_MISMATCH',
                `${this.endpoint} is not a te control endpoint: it answered the connection with bytes a ZMTP peer never sends first (another service listens there; check the port)`,
                { details: { endpoint: this.endpoint, type } },
              ),
          );
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
    if (p.queued) p.lane.stale++;
    if (p.lane.inFlight.delete(id) && p.lane.outbox.length > 0 && !this.sending && !this.closed) void this.sendWaiting();
    return p;
  }

  /** Queues a request's frame in its lane and starts the sender if it is idle; refuses one past the bound. */
  private post(lane: Lane, id: number, frame: Buffer, fail: (error: TransferError) => void): void {
    // At the bound, entries of requests that ended while they waited (timed out) go first,
    // when there are any.
    if (lane.outbox.length >= MAX_WAITING_SENDS && lane.stale > 0) {
      lane.outbox.keep((m) => this.pending.has(m.id));
      lane.stale = 0;
    }
    if (lane.outbox.length >= MAX_WAITING_SENDS) {
      fail(
        new TransferError(
          'POOL_EXHAUSTED',
          `${MAX_WAITING_SENDS} control requests to ${this.endpoint} are waiting to be sent: the peer does not take them in`,
          { details: { endpoint: this.endpoint } },
        ),
      );
      return;
    }
    lane.outbox.push({ id, frame });
    this.pending.get(id)!.queued = true;
    if (!this.sending) void this.sendWaiting();
  }

  /**
   * Sends what waits, one send at a time, urgent requests first, each lane while fewer than
   * its bound wait for answers (an answer starts it again); a request that ended meanwhile
   * is not sent.
   */
  private async sendWaiting(): Promise<void> {
    this.sending = true;
    try {
      for (;;) {
        if (this.closed) return;
        const lane = this.urgent.ready ? this.urgent : this.ordinary.ready ? this.ordinary : undefined;
        if (!lane) return;
        const next = lane.outbox.take()!;
        const p = this.pending.get(next.id);
        if (!p) {
          lane.stale--;
          continue;
        }
        p.queued = false;
        lane.inFlight.add(next.id);
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
    for (const lane of [this.urgent, this.ordinary]) {
      lane.outbox.clear();
      lane.inFlight.clear();
      lane.stale = 0;
    }
    this.dealer.close();
  }
}
