import { KVStatus, StatusCell, TransferError, isTransferError, untilSettled, type KVSender, type BootstrapInfo, type TransferBatch } from '@te/connector';
import { MSG, PD_PROTOCOL_VERSION, type StatusMessage, type SumsMessage } from '../protocol/messages.js';
import type { Destination } from './destination.js';
import { planAux, planState } from './transfer-plan.js';
import { refusedUnsent, writeKv, type KvWrite } from './kv-write.js';
import type { PrefillRoomContext, RoomRequest } from './room-context.js';
import { withRoom } from './room-error.js';
import { SenderChecksums, alongside } from './sender-checksums.js';
import { TransferVerification, namedCorruption, verifiedBatch } from './transfer-verified.js';

const CONNECTION_CODES = new Set(['CONNECTION_LOST', 'PEER_UNREACHABLE', 'PEER_FAILED', 'STALE_DESCRIPTOR', 'AUTH_FAILED']);
/** A control request that got no answer (which a repeat may get), not a refusal. */
const UNANSWERED_CODES = new Set(['TIMEOUT', 'CONNECTION_LOST', 'PEER_UNREACHABLE']);

/**
 * Prefill side of one request (SGLang's KVSender). Ready (WaitingForInput) once every
 * decode rank it serves sent its destination; each chunk is written as it is given; the
 * last chunk adds aux and state, and the result goes to each decode rank over the
 * control plane once every write settled.
 */
export class PrefillSender implements KVSender {
  readonly cell = new StatusCell(KVStatus.Bootstrapping);
  private readonly requests = new Map<string, RoomRequest>();
  private required = Infinity;
  private numPages: number | undefined;
  private auxIndex: number | undefined;
  private sentPages = 0;
  private finished = false;
  /** Set once every write landed and Success reports go out (see failUnlessReporting). */
  private reporting = false;
  /** KV checksums per decode rank, when the rank has them on. */
  private readonly checksums = new SenderChecksums();
  /** Decode ranks whose KV the transport verifies instead (checksums on; see transfer-verified.ts). */
  private readonly verification = new TransferVerification();
  private chain: Promise<void> = Promise.resolve();
  /** Set while the room goes layer by layer (see layerwise.ts). */
  private layerwise: LayerwiseState | undefined;
  private readonly stop = new AbortController();
  /** Every batch this room submitted that has not settled yet (the decodes' pages are in use). */
  private readonly inflight = new Set<Promise<unknown>>();
  /** Decode segments a settled write of this room may still land in (a cancel its transport could not confirm). */
  private readonly mayStillLand = new Set<string>();
  private readonly bootstrapTimer: NodeJS.Timeout;
  bytes = 0;

  constructor(
    private readonly ctx: PrefillRoomContext,
    readonly bootstrap: BootstrapInfo,
  ) {
    this.bootstrapTimer = setTimeout(() => {
      if (this.cell.value < KVStatus.WaitingForInput)
        this.fail(
          new TransferError(
            'TIMEOUT',
            `room ${this.room}: no destination from the decode within ${ctx.timeouts.bootstrapMs} ms (bootstrap timeout; ${this.requests.size === 0 ? 'no decode rank asked for it' : `${this.requests.size} of ${this.required} decode ranks heard`})`,
            { details: { room: this.room } },
          ),
        );
    }, ctx.timeouts.bootstrapMs);
    this.bootstrapTimer.unref();
  }

  get room(): bigint {
    return this.bootstrap.room;
  }

  get status(): KVStatus {
    return this.cell.value;
  }

  get failure(): TransferError | undefined {
    return this.cell.error;
  }

  /** The decode segments this room writes to (heartbeat targets). */
  segments(): string[] {
    return [...this.requests.values()].map((r) => r.dest.segment);
  }

  /** The decode ranks' registrations this room refers to. */
  destinations(): Destination[] {
    return [...this.requests.values()].map((r) => r.dest);
  }

  addRequest(rr: RoomRequest): void {
    if (this.cell.value === KVStatus.Failed) throw this.cell.error!;
    if (rr.dest.failed) {
      const e = new TransferError(
        rr.dest.failed.code,
        `room ${this.room}: destination ${rr.dest.segment} failed before (${rr.dest.failed.message}); it must register again`,
        { details: { room: this.room } },
      );
      this.fail(e);
      throw e;
    }
    this.requests.set(`${rr.dest.segment}#${rr.req.decodeTpRank}`, rr);
    this.required = rr.req.requiredDecodeRanks;
    if (this.requests.size >= this.required && this.cell.advance(KVStatus.WaitingForInput)) clearTimeout(this.bootstrapTimer);
  }

  init(numPages: number, auxIndex?: number): void {
    if (!Number.isInteger(numPages) || numPages < 0)
      throw new TransferError('INVALID_ARGUMENT', `Expected numPages to be a non-negative integer, got ${numPages}`);
    if (auxIndex !== undefined && (!Number.isInteger(auxIndex) || auxIndex < 0))
      throw new TransferError('INVALID_ARGUMENT', `Expected auxIndex to be a non-negative integer, got ${auxIndex}`);
    this.numPages = numPages;
    this.auxIndex = auxIndex;
  }

  send(pageIndices: Uint32Array, options: { last?: boolean; stateIndices?: Uint32Array } = {}): Promise<void> {
    if (!(pageIndices instanceof Uint32Array)) return Promise.reject(new TransferError('INVALID_ARGUMENT', 'Expected pageIndices to be a Uint32Array'));
    if (this.finished) return Promise.reject(new TransferError('INVALID_ARGUMENT', `room ${this.room}: the last chunk was already sent`));
    const last = options.last ?? (this.numPages !== undefined && this.sentPages + pageIndices.length >= this.numPages);
    if (last) this.finished = true;
    const offset = this.sentPages;
    this.sentPages += pageIndices.length;
    const step = this.chain.then(() => this.sendChunk(pageIndices, offset, last, options.stateIndices));
    this.chain = step.catch(() => undefined);
    return step;
  }

  private async sendChunk(pages: Uint32Array, offset: number, last: boolean, stateIndices: Uint32Array | undefined): Promise<void> {
    if (this.cell.value === KVStatus.Failed) throw this.cell.error!;
    await this.cell.reached(KVStatus.WaitingForInput);
    this.cell.advance(KVStatus.Transferring);
    // The first error fails the room at once (aborting the other writes), but the chunk
    // settles only after every destination's write did: the caller may reuse the pages then.
    const results = await Promise.allSettled(
      [...this.requests.values()].map((rr) =>
        this.writeTo(rr, pages, offset, last, stateIndices).catch((e: unknown) => {
          this.fail(isTransferError(e) ? e : new TransferError('INTERNAL', (e as Error).message, { cause: e }));
          throw e;
        }),
      ),
    );
    if (results.some((r) => r.status === 'rejected')) throw this.cell.error!;
    if (last) await this.finish();
  }

  private async writeTo(rr: RoomRequest, pages: Uint32Array, offset: number, last: boolean, stateIndices: Uint32Array | undefined): Promise<void> {
    const { req, dest } = rr;
    if (!req.dummy && pages.length > 0) {
      const perDst = dest.msg.pageSize / this.ctx.source.buffers.pageSize;
      if (Math.ceil((offset + pages.length) / perDst) > req.pages.length)
        throw new TransferError(
          'INVALID_ARGUMENT',
          `room ${this.room}: ${offset + pages.length} pages sent but decode rank ${req.decodeTpRank} gave ${req.pages.length} destination pages`,
          { details: { room: this.room } },
        );
      await this.writeKv(rr, pages, offset);
      if (!last) this.reportSums(rr, offset, pages.length);
    }
    if (!last) return;
    // Aux goes after the KV and state have landed, so a decode that reads Success can read it.
    const state = stateIndices ? planState(this.ctx.source, dest, req, stateIndices) : undefined;
    if (state && state.batch.opcodes.length > 0) await alongside(this.checksums.recordState(this.ctx, rr, stateIndices!), this.submit(dest, state.batch));
    if (req.sendsAux && this.auxIndex !== undefined && this.ctx.source.aux.addrs.length > 0)
      await this.submit(dest, planAux(this.ctx.source, dest, this.auxIndex, req.auxIndex).batch);
  }

  /**
   * With KV checksums on, a chunk that is not the room's last: its pages' checksums go to the
   * decode rank once its writes settled (best effort: the Success report carries them all
   * again), so the decode checks them while the rest is written, and its Success waits only
   * for the pages not checked yet.
   */
  private reportSums(rr: RoomRequest, firstPage: number, count: number): void {
    const sums = this.checksums.chunkSums(this.ctx, rr, firstPage, count);
    if (!sums || this.cell.value === KVStatus.Failed) return;
    const { attnTpRank, ppRank } = this.ctx.source.layout;
    const msg: SumsMessage = { v: PD_PROTOCOL_VERSION, room: this.room, prefillTpRank: attnTpRank, prefillPpRank: ppRank, firstPage, ...sums };
    // Async: a closed engine's controlClient() throws.
    void (async () => this.ctx.engine.controlClient(rr.dest.segment).request(MSG.sums, msg, this.ctx.timeouts.heartbeatMs * 2))().catch(() => undefined);
  }

  /** A chunk (or layers) of this room's KV to one decode rank, by the route the layouts allow (kv-write.ts). */
  private async writeKv(rr: RoomRequest, pages: Uint32Array, firstPage: number, layers?: ArrayLike<number>): Promise<void> {
    const r = this.ctx;
    const w: KvWrite = {
      source: r.source,
      dest: rr.dest,
      req: rr.req,
      srcPages: pages,
      firstPage,
      ...(layers ? { layers } : {}),
      room: this.room,
      prefillTpRank: r.source.layout.attnTpRank,
      prefillPpRank: r.source.layout.ppRank,
      engine: r.engine,
      timeoutMs: r.timeouts.transferMs,
      submit: (batch) => this.submit(rr.dest, batch),
      staging: r.staging,
      signal: this.stop.signal,
    };
    if (await this.verification.verifies(r, w)) {
      // The transport compares digests of the bytes sent and landed: no page checksums.
      const attention = r.source.buffers.attention;
      try {
        return await writeKv({
          ...w,
          submit: (batch) =>
            this.submit(rr.dest, verifiedBatch(batch)).catch((e: unknown) => Promise.reject(namedCorruption(e, batch, rr.dest, attention, this.room))),
        });
      } catch (e) {
        if (!refusedUnsent(e)) throw e;
        this.verification.refused(r, rr.dest); // nothing was sent: the write goes again, with page checksums
      }
    }
    // The checksums read the source pages beside the write, on native threads.
    return alongside(this.checksums.record(r, rr, pages, firstPage, layers), writeKv(w));
  }

  private async submit(dest: Destination, batch: TransferBatch): Promise<void> {
    // A failed room starts no write: fail() waits only for the ones already in flight.
    if (this.cell.value === KVStatus.Failed) throw this.cell.error!;
    const transfer = this.ctx.engine.transfer(dest.segment, batch, { timeoutMs: this.ctx.timeouts.transferMs, signal: this.stop.signal });
    // In flight until the transport let go, which for a batch the engine gave up on at its
    // deadline comes later than the answer: the decode may free its pages only then.
    const settlement = transfer.then(
      () => undefined,
      async (e: unknown) => {
        if ((await untilSettled(e)).remoteMayBeWritten) this.mayStillLand.add(dest.segment);
      },
    );
    this.inflight.add(settlement);
    void settlement.then(() => this.inflight.delete(settlement));
    try {
      const r = await transfer;
      this.bytes += Number(r.bytes);
    } catch (e) {
      if (isTransferError(e) && CONNECTION_CODES.has(e.code)) this.ctx.markFailed(dest, e);
      throw isTransferError(e)
        ? new TransferError(e.code, `room ${this.room}: writing to ${dest.segment} failed: ${e.message}`, {
            cause: e,
            details: { room: this.room, segment: dest.segment },
          })
        : e;
    }
  }

  private async finish(): Promise<void> {
    // A room failed after its last write settled reports nothing: its decodes hear Failed.
    if (this.cell.value === KVStatus.Failed) throw this.cell.error!;
    this.reporting = true;
    const results = await Promise.allSettled([...this.requests.values()].map((rr) => this.reportSuccess(rr)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      // A decode that found its bytes corrupted refuses the report: the room failed for that.
      const corrupted = isTransferError(failed.reason, 'DATA_CORRUPTED');
      const e = new TransferError(
        corrupted ? 'DATA_CORRUPTED' : 'PEER_FAILED',
        corrupted
          ? `room ${this.room}: the decode found the KV corrupted: ${(failed.reason as Error).message}`
          : `room ${this.room}: the KV landed but the result could not be delivered: ${(failed.reason as Error).message}`,
        { details: { room: this.room } },
      );
      this.fail(e);
      throw e;
    }
    this.cell.advance(KVStatus.Success);
    this.ctx.ended(this);
  }

  /**
   * Reports Success to one decode rank, again while no answer comes: the decode may have
   * recorded it and only its answer was lost or late (a busy decode), and failing the room
   * then would leave the two sides disagreeing about KV that landed. As many tries as the
   * heartbeat allows a peer missed beats; a decode answers a repeated report like the first
   * (it counts each prefill rank once, and a room it finished is unknown there: answered).
   */
  private async reportSuccess(rr: RoomRequest): Promise<void> {
    const tries = this.ctx.timeouts.heartbeatMaxFailures + 1;
    for (let i = 1; ; i++) {
      try {
        await this.report(rr, KVStatus.Success);
        return;
      } catch (e) {
        const unanswered = isTransferError(e) && UNANSWERED_CODES.has(e.code);
        if (!unanswered || i >= tries || this.cell.value === KVStatus.Failed) throw e;
      }
    }
  }

  // Async: a closed engine's controlClient() throws, and fail() reports from a callback,
  // where a synchronous throw would end the process instead of rejecting.
  private async report(rr: RoomRequest, status: 0 | 4, error?: TransferError): Promise<unknown> {
    const msg: StatusMessage = {
      v: PD_PROTOCOL_VERSION,
      room: this.room,
      prefillTpRank: this.ctx.source.layout.attnTpRank,
      prefillPpRank: this.ctx.source.layout.ppRank,
      status,
      bytes: this.bytes,
    };
    if (error) {
      msg.code = error.code;
      msg.message = error.message.slice(0, 2000);
      if (this.mayStillLand.has(rr.dest.segment)) msg.pagesMayBeWritten = true;
    } else {
      await this.checksums.addTo(msg, this.ctx, rr, this.sentPages, this.auxIndex);
      if (await this.verification.verified(rr.dest)) msg.kvVerifiedInTransfer = true;
    }
    return this.ctx.engine.controlClient(rr.dest.segment).request(MSG.status, msg, this.ctx.timeouts.heartbeatMs * 2, { urgent: true });
  }

  /**
   * Fails the room here and tells every decode rank (best effort) once every write of the
   * room settled: a decode that hears Failed, or whose abort is acknowledged, frees its
   * pages, and a write to it still in flight (aborted, but not yet settled) could land in
   * them. The engine's transfer deadline bounds the wait; the rank keeps the room until
   * then, so an abort from a decode waits for the same moment.
   */
  fail(failure: TransferError): void {
    clearTimeout(this.bootstrapTimer);
    const error = withRoom(failure, this.room);
    if (!this.cell.fail(error)) return;
    this.stop.abort();
    // Its chunks waiting for staging memory give up; the ones in flight release theirs as they settle.
    this.ctx.staging.refuse(this.room, error);
    void this.settled().then(() => {
      for (const rr of this.requests.values()) this.report(rr, KVStatus.Failed, error).catch(() => undefined);
      this.ctx.ended(this);
    });
  }

  /**
   * The decode segments a write of this room may still land in although it settled: its
   * transport could not confirm the cancel. Complete once `settled()` resolved.
   */
  pagesMayBeWritten(): ReadonlySet<string> {
    return this.mayStillLand;
  }

  /** Resolves once no write of this room is in flight (the engine's settle guarantee). */
  async settled(): Promise<void> {
    await this.chain;
    // Layer writes run beside the chain, and one destination's write may outlive another's
    // failure: wait for every batch (including ones started during a first wait).
    for (let n = -1; this.inflight.size > 0 || (this.layerwise && n !== this.layerwise.inflight.length);) {
      n = this.layerwise?.inflight.length ?? 0;
      await Promise.allSettled([...this.inflight, ...(this.layerwise?.inflight ?? [])]);
    }
  }

  async abort(reason = 'aborted by the prefill'): Promise<void> {
    this.failUnlessReporting(new TransferError('ABORTED', `room ${this.room}: ${reason}`, { details: { room: this.room } }));
    await this.settled();
  }

  /**
   * Fails the room, unless every write landed and Success is being reported: a decode may
   * have recorded it already, so the reports decide (Success, or PEER_FAILED when one
   * cannot be delivered), and both sides end alike. For the prefill's own abort and a
   * decode lost to heartbeats; a decode's abort still fails the room (that decode takes
   * no Success while it fails the room).
   */
  failUnlessReporting(error: TransferError): void {
    if (!this.reporting) this.fail(error);
  }

  // ---------------------------------------------------------------- layerwise

  /** Why this room cannot go layer by layer now; undefined when it can. */
  layerwiseBlocker(pages: Uint32Array): string | undefined {
    if (this.cell.value === KVStatus.Failed) return 'failed';
    if (this.finished || this.sentPages > 0) return 'chunked';
    if (this.cell.value < KVStatus.WaitingForInput) return 'destination-not-ready';
    const pageSize = this.ctx.source.buffers.pageSize;
    for (const rr of this.requests.values())
      if (!rr.req.dummy && rr.req.pages.length < Math.ceil(pages.length / (rr.dest.msg.pageSize / pageSize))) return 'destination-too-small';
    return undefined;
  }

  /** Batch start: the whole request's pages are known; later calls send one layer at a time. */
  beginLayerwise(pages: Uint32Array, stateIndices: Uint32Array | undefined): void {
    this.finished = true;
    this.sentPages = pages.length;
    this.layerwise = { pages, stateIndices, sentLayers: new Set(), sentStates: new Set(), inflight: [] };
    this.cell.advance(KVStatus.Transferring);
  }

  /** Writes layer `layer` (absolute; K and V) to every destination, once `ready` resolved. Never blocks the caller. */
  layerReady(layer: number, ready?: () => Promise<unknown>): void {
    const lw = this.layerwise;
    if (!lw) throw new TransferError('UNSUPPORTED_CAPABILITY', `room ${this.room}: not in a layerwise batch (KVManager.beginBatch, with layerwise enabled)`);
    const span = this.ctx.source.span;
    if (!Number.isInteger(layer) || layer < span.firstLayer || layer >= span.firstLayer + span.layers)
      throw new TransferError('INVALID_ARGUMENT', `layer ${layer} is not held by this rank [${span.firstLayer}, ${span.firstLayer + span.layers})`);
    if (lw.sentLayers.has(layer)) return;
    lw.sentLayers.add(layer);
    this.track(lw, ready, () => this.writeLayers(lw, [layer]));
  }

  /** Writes state buffer `index` (a Mamba layer's state) once `ready` resolved. */
  stateReady(index: number, ready?: () => Promise<unknown>): void {
    const lw = this.layerwise;
    if (!lw) throw new TransferError('UNSUPPORTED_CAPABILITY', `room ${this.room}: not in a layerwise batch`);
    if (!lw.stateIndices || lw.sentStates.has(index)) return;
    lw.sentStates.add(index);
    this.track(lw, ready, () => this.writeStates(lw, new Set([index])));
  }

  private track(lw: LayerwiseState, ready: (() => Promise<unknown>) | undefined, write: () => Promise<void>): void {
    const step = (async () => {
      if (ready) await ready();
      // An aborted or failed room receives no later layer.
      if (this.cell.value === KVStatus.Failed) return;
      await write();
    })();
    lw.inflight.push(
      step.catch((e) =>
        this.fail(
          isTransferError(e) ? e : new TransferError('INTERNAL', `room ${this.room}: ${(e as Error).message}`, { cause: e, details: { room: this.room } }),
        ),
      ),
    );
  }

  private async writeLayers(lw: LayerwiseState, layers: number[]): Promise<void> {
    await Promise.all([...this.requests.values()].filter((rr) => !rr.req.dummy).map((rr) => this.writeKv(rr, lw.pages, 0, layers)));
  }

  private async writeStates(lw: LayerwiseState, only?: Set<number>): Promise<void> {
    await Promise.all(
      [...this.requests.values()].map(async (rr) => {
        const plan = planState(this.ctx.source, rr.dest, rr.req, lw.stateIndices!, only);
        if (plan && plan.batch.opcodes.length > 0)
          await alongside(this.checksums.recordState(this.ctx, rr, lw.stateIndices!, only), this.submit(rr.dest, plan.batch));
      }),
    );
  }

  /**
   * Batch end: waits for every layer in flight, sends what was never marked ready (layers
   * and state), then aux, then reports Success; the first error fails this room only.
   */
  finishLayerwise(): Promise<void> {
    const lw = this.layerwise!;
    const step = this.chain.then(async () => {
      await Promise.all(lw.inflight);
      if (this.cell.value === KVStatus.Failed) throw this.cell.error!;
      try {
        const span = this.ctx.source.span;
        const missing = Array.from({ length: span.layers }, (_, i) => span.firstLayer + i).filter((l) => !lw.sentLayers.has(l));
        if (missing.length > 0) await this.writeLayers(lw, missing);
        if (lw.stateIndices && this.ctx.source.state) {
          const all = new Set(Array.from({ length: this.ctx.source.state.addrs.length }, (_, i) => i));
          for (const i of lw.sentStates) all.delete(i);
          if (all.size > 0) await this.writeStates(lw, all);
        }
        await Promise.all(
          [...this.requests.values()].map(async (rr) => {
            if (rr.req.sendsAux && this.auxIndex !== undefined && this.ctx.source.aux.addrs.length > 0)
              await this.submit(rr.dest, planAux(this.ctx.source, rr.dest, this.auxIndex, rr.req.auxIndex).batch);
          }),
        );
      } catch (e) {
        const error = isTransferError(e) ? e : new TransferError('INTERNAL', (e as Error).message, { cause: e });
        this.fail(error);
        throw this.cell.error ?? error;
      }
      await this.finish();
    });
    this.chain = step.catch(() => undefined);
    return step;
  }
}

interface LayerwiseState {
  pages: Uint32Array;
  stateIndices: Uint32Array | undefined;
  sentLayers: Set<number>;
  sentStates: Set<number>;
  inflight: Promise<unknown>[];
}
