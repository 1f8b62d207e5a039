import { KVStatus, StatusCell, TransferError, isTransferError, type BootstrapInfo, type KVReceiver } from '@te/connector';
import { matchesReply } from '../protocol/handle.js';
import {
  AbortReplySchema,
  MSG,
  PD_PROTOCOL_VERSION,
  type AbortMessage,
  type RequestMessage,
  type StatusMessage,
  type SumsMessage,
} from '../protocol/messages.js';
import type { DecodeRoomContext } from './room-context.js';
import { resolveRoom, type ResolvedTarget } from './resolve-room.js';
import type { ScatterRoom } from '../staging/ring-service.js';
import { REFUSAL_CODES, tellRefusal } from './refusal.js';
import { roomError, withRoom } from './room-error.js';
import { checkChunk, checkReport, type CheckedPage, type ReportContext } from './receiver-checksums.js';

/** A decode room's state (see DecodeReceiver.phase). */
export type DecodeRoomPhase = 'resolving' | 'waiting' | 'requested' | 'failing' | 'ended';

/**
 * Decode side of one request (SGLang's KVReceiver). Resolves the prefill ranks at once
 * (bootstrap query, registration on first contact), sends the destination on `init`,
 * and reaches Success when every prefill rank it needs reported success after its
 * writes settled.
 */
export class DecodeReceiver implements KVReceiver {
  readonly cell = new StatusCell(KVStatus.Bootstrapping);
  private readonly resolved: Promise<ResolvedTarget[]>;
  private readonly responses = new Set<string>();
  private requested = false;
  /** The pages, aux slot and state slots given to init (what checksums are checked over). */
  private destination: { pages: Uint32Array; auxIndex: number; stateIndices?: Uint32Array | undefined } | undefined;
  /** Reports being checked, by prefill rank: a repeat waits for the same check. */
  private readonly checking = new Map<string, Promise<void>>();
  /** Chunks each prefill rank reported written before its Success (onSums), by prefill rank. */
  private readonly chunks = new Map<string, ChunkChecks>();
  private waitingTimer: NodeJS.Timeout | undefined;
  /** Set while the room fails: the prefill ranks are told to stop, Failed is shown once they did. */
  private failing: Promise<void> | undefined;
  bytes = 0;

  constructor(
    private readonly ctx: DecodeRoomContext,
    readonly bootstrap: BootstrapInfo,
  ) {
    // init() rethrows what failed here: always a TransferError, the one the room failed with.
    this.resolved = this.resolve().catch(async (e: unknown) => {
      const error = withRoom(e instanceof TransferError ? e : new TransferError('INTERNAL', (e as Error).message, { cause: e }), this.room);
      // Refused (the layouts cannot pair): the prefill ranks hear it before this room fails,
      // so theirs fail at once too instead of holding the request's pages until their timeout.
      if (REFUSAL_CODES.has(error.code)) await tellRefusal(this.ctx, this.bootstrap, error, this.ctx.timeouts.heartbeatMs * 2);
      this.fail(error);
      throw error;
    });
    this.resolved.catch(() => undefined);
  }

  get room(): bigint {
    return this.bootstrap.room;
  }

  get status(): KVStatus {
    return this.cell.value;
  }

  /**
   * Where the room is on this side: resolving its prefill ranks (bootstrap query,
   * registration), waiting for init, requested (its destination sent; Transferring once
   * every rank accepted), failing (its prefill ranks told to stop; Failed once they did),
   * or ended (Success or Failed).
   */
  get phase(): DecodeRoomPhase {
    const v = this.cell.value;
    if (v === KVStatus.Success || v === KVStatus.Failed) return 'ended';
    if (this.failing) return 'failing';
    if (v === KVStatus.Bootstrapping) return 'resolving';
    return this.requested ? 'requested' : 'waiting';
  }

  get failure(): TransferError | undefined {
    return this.cell.error;
  }

  get bootstrapAddress(): string {
    return `${this.bootstrap.host}:${this.bootstrap.port}`;
  }

  /** Prefill segments this room depends on (known once resolved). */
  segments: string[] = [];
  private targets: ResolvedTarget[] = [];
  private prefillPageSize = 0;
  private pages: Uint32Array | undefined;

  /**
   * What the staging ring needs of this room while prefill ranks may still stage KV for
   * it: nothing once it failed, is failing or succeeded (a scatter is then refused).
   */
  scatterRoom(): ScatterRoom | undefined {
    const pages = this.pages;
    if (!pages || this.phase === 'failing' || this.phase === 'ended') return undefined;
    return {
      pages,
      prefillPageSize: this.prefillPageSize,
      timeoutMs: this.ctx.timeouts.transferMs,
      sliceFrom: (tp, pp) => {
        const t = this.targets.find((x) => x.tpRank === tp && x.ppRank === pp && !x.dummy);
        if (!t) return undefined;
        return t.kvSlice ?? { srcOffset: 0, dstOffset: 0, count: this.ctx.staging.geometry(0).heads };
      },
    };
  }

  private async resolve(): Promise<ResolvedTarget[]> {
    const resolved = await resolveRoom(this.ctx, this.bootstrap);
    this.prefillPageSize = resolved.prefillPageSize;
    this.segments = resolved.segments;
    this.targets = resolved.targets;
    this.cell.advance(KVStatus.WaitingForInput);
    return resolved.targets;
  }

  async init(pageIndices: Uint32Array, auxIndex: number, stateIndices?: Uint32Array): Promise<void> {
    if (!(pageIndices instanceof Uint32Array)) throw new TransferError('INVALID_ARGUMENT', 'Expected pageIndices to be a Uint32Array');
    if (!Number.isInteger(auxIndex) || auxIndex < 0)
      throw new TransferError('INVALID_ARGUMENT', `Expected auxIndex to be a non-negative integer, got ${auxIndex}`);
    if (stateIndices !== undefined && !(stateIndices instanceof Uint32Array))
      throw new TransferError('INVALID_ARGUMENT', 'Expected stateIndices to be a Uint32Array');
    if (this.requested) throw new TransferError('INVALID_ARGUMENT', `room ${this.room}: init was already called`);
    const targets = await this.resolved;
    if (this.cell.value === KVStatus.Failed) throw this.cell.error!;
    this.requested = true;
    this.destination = { pages: pageIndices, auxIndex, stateIndices };
    this.pages = pageIndices;
    this.waitingTimer = setTimeout(() => {
      if (this.cell.value === KVStatus.Success || this.cell.value === KVStatus.Failed || this.failing) return;
      void this.failAndAbort(
        new TransferError(
          'TIMEOUT',
          `room ${this.room}: KV did not arrive within ${this.ctx.timeouts.waitingMs} ms (waiting timeout; ${this.responses.size} of ${targets.length} prefill ranks reported)`,
          { details: { room: this.room } },
        ),
      );
    }, this.ctx.timeouts.waitingMs);
    this.waitingTimer.unref();
    try {
      await Promise.all(targets.map((t) => this.request(t, pageIndices, auxIndex, stateIndices)));
    } catch (e) {
      const error = isTransferError(e) ? e : new TransferError('INTERNAL', (e as Error).message, { cause: e });
      // A request that timed out may still have been accepted: the prefill ranks must hear
      // that the room failed, or they would write into it and report Success. The caller
      // hears it once they stopped (it may free the pages then).
      await this.failAndAbort(new TransferError(error.code, `room ${this.room}: ${error.message}`, { cause: error, details: { room: this.room } }));
      throw this.cell.error!;
    }
    this.cell.advance(KVStatus.Transferring);
  }

  private async request(t: ResolvedTarget, pages: Uint32Array, auxIndex: number, stateIndices: Uint32Array | undefined): Promise<void> {
    const msg: RequestMessage = {
      v: PD_PROTOCOL_VERSION,
      room: this.room,
      decodeSegment: this.ctx.engine.segmentName,
      decodeTpRank: this.ctx.decode.layout.attnTpRank,
      pages,
      auxIndex,
      requiredDecodeRanks: t.requiredDecodeRanks,
      dummy: t.dummy,
      sendsAux: t.sendsAux,
      sendsState: t.sendsState,
    };
    if (stateIndices) msg.stateIndices = stateIndices;
    if (t.kvSlice) msg.kvSlice = t.kvSlice;
    if (t.stateSlice) msg.stateSlice = t.stateSlice;
    try {
      await this.ctx.engine.controlClient(t.segment).request(MSG.request, msg, this.ctx.timeouts.heartbeatMs * 2);
    } catch (e) {
      // Register again, once, when the prefill rank no longer knows this decode (it restarted:
      // STALE_DESCRIPTOR) or refuses it after a connection-level failure (PEER_FAILED: a
      // connect that got no answer in time, a dropped connection), which it keeps until the
      // decode registers again. This decode is alive and asking: a transient failure must
      // fail the rooms it hit, not every later room of this pair.
      if (!isTransferError(e, 'STALE_DESCRIPTOR') && !isTransferError(e, 'PEER_FAILED')) throw e;
      await this.ctx.ensureRegistered(t.segment, this.ctx.timeouts.heartbeatMs * 2, true);
      await this.ctx.engine.controlClient(t.segment).request(MSG.request, msg, this.ctx.timeouts.heartbeatMs * 2);
    }
  }

  /**
   * A chunk a prefill rank wrote before its last, with its pages' checksums (SumsSchema):
   * checked now, while the rest is written; a mismatch fails the room at once. Its Success
   * report then reads only the pages not checked here. Ignored once the room failed, ended
   * or the rank reported; a repeat of a chunk is ignored.
   */
  onSums(m: SumsMessage): void {
    if (this.failing || this.phase === 'ended' || !this.destination) return;
    const from = `${m.prefillTpRank}/${m.prefillPpRank}`;
    if (this.responses.has(from) || this.checking.has(from)) return;
    let c = this.chunks.get(from);
    if (!c) this.chunks.set(from, (c = { layers: m.checksumLayers, firsts: new Set(), rows: new Map(), pending: [] }));
    if (c.firsts.has(m.firstPage) || c.layers.first !== m.checksumLayers.first || c.layers.count !== m.checksumLayers.count) return;
    c.firsts.add(m.firstPage);
    const chunk = c;
    const check = checkChunk(this.ctx.engine, this.ctx.decode.buffers, this.room, this.reportContext(m), m).then(
      (n) => {
        for (let k = 0; n > 0 && k * n < m.kvCrc32c.length; k++) chunk.rows.set(m.firstPage + k, m.kvCrc32c.subarray(k * n, (k + 1) * n));
      },
      (e: unknown) => {
        const error = roomError(e, this.room);
        void this.failAndAbort(error);
        throw error;
      },
    );
    check.catch(() => undefined);
    c.pending.push(check);
  }

  /** A prefill rank's result. */
  async onStatus(m: StatusMessage): Promise<void> {
    // A room that is failing takes no result: Failed is shown once its prefill ranks stopped.
    if (this.failing) return;
    if (m.status === KVStatus.Failed) {
      // The other prefill ranks of the room stop writing to it and report Failed, not Success.
      const code = m.code && /^[A-Z_]+$/.test(m.code) ? (m.code as 'TRANSFER_FAILED') : 'TRANSFER_FAILED';
      const error = new TransferError(
        code,
        `room ${this.room}: prefill rank tp=${m.prefillTpRank} pp=${m.prefillPpRank} failed: ${m.message ?? 'no reason given'}`,
        { details: { room: this.room, fromPeer: true } },
      );
      void this.failAndAbort(m.pagesMayBeWritten === true ? mayStillBeWritten(error, this.room) : error);
      return;
    }
    const from = `${m.prefillTpRank}/${m.prefillPpRank}`;
    // A repeated report (the prefill sends it again when the first answer did not reach it)
    // is answered without counting it twice.
    if (this.responses.has(from)) return;
    if ((m.kvCrc32c || m.stateCrc32c || m.auxCrc32c) && this.destination) {
      let check = this.checking.get(from);
      if (!check) {
        check = this.checkReport(from, m);
        this.checking.set(from, check);
        void check.finally(() => this.checking.delete(from)).catch(() => undefined);
      }
      try {
        await check;
      } catch (e) {
        const error = roomError(e, this.room);
        // The reporting rank hears it as the answer to its report, the others by the abort.
        void this.failAndAbort(error);
        throw error;
      }
      // The room failed while the bytes were checked, or a repeat was counted meanwhile.
      if (this.failing || this.cell.value === KVStatus.Failed || this.responses.has(from)) return;
    }
    this.responses.add(from);
    this.bytes += m.bytes ?? 0;
    void this.resolved.then((targets) => {
      if (this.responses.size >= targets.length && this.cell.advance(KVStatus.Success)) this.done();
    });
  }

  /** Checks rank `from`'s Success report once its chunks' checks (onSums) settled, reading only the pages they did not. */
  private async checkReport(from: string, m: StatusMessage): Promise<void> {
    const c = this.chunks.get(from);
    if (c) await Promise.all(c.pending);
    const same = c && m.checksumLayers && c.layers.first === m.checksumLayers.first && c.layers.count === m.checksumLayers.count;
    const checked: CheckedPage | undefined = same ? (k, row) => sameSums(c.rows.get(k), row) : undefined;
    await checkReport(this.ctx.engine, this.ctx.decode.buffers, this.room, this.reportContext(m), m, checked);
  }

  /** What the checksums of prefill rank `m`'s report are checked against. */
  private reportContext(m: { prefillTpRank: number; prefillPpRank: number }): ReportContext {
    const t = this.targets.find((x) => x.tpRank === m.prefillTpRank && x.ppRank === m.prefillPpRank);
    return {
      ...this.destination!,
      prefillPageSize: this.prefillPageSize,
      kvSlice: t?.kvSlice,
      stateSlice: t?.stateSlice,
      geometry: (b) => this.ctx.staging.geometry(b),
      layout: this.ctx.decode.layout,
    };
  }

  fail(error: TransferError): void {
    if (this.cell.fail(withRoom(error, this.room))) this.done();
  }

  /**
   * Fails the room: tells every prefill rank it asked to stop (each answers once its writes
   * of the room settled), so no rank goes on writing into it or reports Success for it,
   * and shows Failed only then. Failed is the framework's licence to free the pages, and a
   * rank that failed says so while another may still be writing. An unreachable rank (a
   * dead process writes nothing) does not hold it; one that does not answer within
   * `abortMs` fails the room anyway, and the error says its pages may still be written.
   */
  failAndAbort(error: TransferError): Promise<void> {
    if (this.failing) return this.failing;
    if (this.cell.value === KVStatus.Success || this.cell.value === KVStatus.Failed) return Promise.resolve();
    if (!this.requested) {
      this.fail(error);
      return Promise.resolve();
    }
    if (this.waitingTimer) clearTimeout(this.waitingTimer);
    this.ctx.staging.refuse(this.room, error);
    this.failing = this.resolved
      .then((targets) => this.sendAborts(targets, error.message, error.code === 'DATA_CORRUPTED' ? error.code : undefined))
      .then(
        async (written) => {
          await this.stagingSettled(written);
          this.fail(written ? mayStillBeWritten(error, this.room) : error);
        },
        async (e: unknown) => {
          await this.stagingSettled(true);
          this.fail(
            new TransferError(error.code, `${error.message}; ${(e as Error).message}`, { cause: error, details: { room: this.room, pagesMayBeWritten: true } }),
          );
        },
      );
    return this.failing;
  }

  /**
   * Once the prefill ranks stopped writing: waits for a scatter of this room still running
   * (Failed means the pages are no longer touched), and gives the room's ring space back
   * unless a write may still land in it.
   */
  private async stagingSettled(mayStillBeWritten: boolean): Promise<void> {
    await this.ctx.staging.quiet(this.room);
    if (!mayStillBeWritten) this.ctx.staging.release(this.room);
  }

  private done(): void {
    if (this.waitingTimer) clearTimeout(this.waitingTimer);
    this.ctx.ended(this);
  }

  /**
   * Asks every prefill rank to stop; resolves once each acknowledged (or is unreachable),
   * with whether one said a settled write may still land in the pages. Rejects when one
   * did not acknowledge.
   */
  private async sendAborts(targets: ResolvedTarget[], reason: string, code?: string): Promise<boolean> {
    const msg: AbortMessage = { v: PD_PROTOCOL_VERSION, room: this.room, decodeSegment: this.ctx.engine.segmentName, reason: reason.slice(0, 2000) };
    if (code) msg.code = code;
    const results = await Promise.allSettled(
      targets.map((t) => this.ctx.engine.controlClient(t.segment).request(MSG.abort, msg, this.ctx.timeouts.abortMs, { urgent: true })),
    );
    const unsafe = results.find((r): r is PromiseRejectedResult => r.status === 'rejected' && !isTransferError(r.reason, 'PEER_UNREACHABLE'));
    if (unsafe) {
      throw new TransferError(
        'TIMEOUT',
        `room ${this.room}: a prefill rank did not acknowledge the abort (${(unsafe.reason as Error).message}); its pages may still be written`,
        { cause: unsafe.reason, details: { room: this.room, pagesMayBeWritten: true } },
      );
    }
    // An answer of an older build (no field) says only that the rank's writes settled.
    return results.some((r) => r.status === 'fulfilled' && matchesReply(AbortReplySchema, r.value) && r.value.pagesMayBeWritten === true);
  }

  /**
   * Aborts the room on both sides. Resolves only when every prefill rank acknowledged
   * that no write of this room is in flight (or is unreachable: a dead process writes
   * nothing), so the pages may be freed then; rejects if that cannot be known.
   */
  async abort(reason = 'aborted by the decode'): Promise<void> {
    const wasSuccess = this.cell.value === KVStatus.Success;
    const error = new TransferError('ABORTED', `room ${this.room}: ${reason}`, { details: { room: this.room } });
    this.fail(error);
    if (wasSuccess || !this.requested) return;
    this.ctx.staging.refuse(this.room, error);
    const targets = await this.resolved.catch(() => [] as ResolvedTarget[]);
    let written = true;
    try {
      written = await this.sendAborts(targets, reason);
    } finally {
      await this.stagingSettled(written);
    }
    if (written) throw mayStillBeWritten(new TransferError('ABORTED', `room ${this.room}: ${reason}`), this.room);
  }
}

/**
 * The room's error once a prefill rank said a write of it may still land in the pages (its
 * transport settled a cancel the decode's side did not confirm): the pages must not be reused yet.
 */
function mayStillBeWritten(error: TransferError, room: bigint): TransferError {
  if (error.details?.pagesMayBeWritten === true) return error;
  return new TransferError(
    error.code,
    `${error.message}; a prefill rank's transport could not confirm that its cancelled writes were discarded: the pages may still be written`,
    {
      cause: error,
      details: { ...error.details, room, pagesMayBeWritten: true },
    },
  );
}

/** The chunks one prefill rank reported before its Success (DecodeReceiver.onSums). */
interface ChunkChecks {
  /** The layers their checksums cover (a Success report over others is checked whole). */
  layers: { first: number; count: number };
  /** The chunks' first pages: a repeated chunk is not checked again. */
  firsts: Set<number>;
  /** Room page → the checksums it was found to match. */
  rows: Map<number, Uint32Array>;
  /** The chunks' checks, each rejecting with the room's error when its pages differ. */
  pending: Promise<void>[];
}

function sameSums(a: Uint32Array | undefined, b: Uint32Array): boolean {
  if (!a || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
